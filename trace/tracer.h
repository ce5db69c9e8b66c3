// The one tracing point that every op of every backend passes through. Sinks subscribe to
// life-cycle events; the tracer never lets a sink's failure reach a collective.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "op_record.h"

namespace meshrt::trace {

// Receives op life-cycle events. on_enqueue runs on the enqueuing thread; on_start and on_end on
// whichever thread runs the op (the communicator's worker, or a caller in Work::wait() running
// it inline), and on_end of an op failed at enqueue (aborted communicator) on the enqueuing
// thread. Implementations must be thread-safe and quick; an exception is counted and dropped.
class Sink {
 public:
  virtual ~Sink() = default;
  // Called once when the op is enqueued, in sequence order per communicator.
  virtual void on_enqueue(const OpRecord& record) = 0;
  // Called once when the op starts running; not for an op that fails before it starts.
  virtual void on_start(const OpRecord& record) = 0;
  // Called once when the op completed or failed (record.state tells which).
  virtual void on_end(const OpRecord& record) = 0;
  // Whether the sink reads ops' start and run times, so that device backends must measure them
  // (CUDA start events). The flight recorder says no: PyTorch's records no start without timing.
  virtual bool needs_timing() const { return true; }
};

// Registers `sink` for every op of this process until remove_sink. At most 32 sinks at a time;
// beyond that the sink is ignored and an error logged. The tracer keeps `sink` alive until exit.
void add_sink(std::shared_ptr<Sink> sink);
// Unregisters `sink`; events already being delivered may still reach it (delivery takes no lock),
// which is why the tracer never destroys a sink it was given.
void remove_sink(const Sink* sink);
// For the process-lifetime sinks (comm logger, exports, stragglers): registers `sink` when it
// turns enabled and unregisters it when it turns disabled, so a disabled sink costs ops nothing.
void keep_registered_while_enabled(Sink& sink, bool was_enabled, bool enabled);
// Runs `write` at process exit, once however often it is asked (the sinks' files "written at
// exit").
void run_at_exit_once(void (*write)());

// A new process-wide record id (first = 1), for OpRecord::record_id.
uint64_t next_record_id();

// Event delivery, called by the runtime. noexcept: a throwing sink is counted and logged once.
// Delivers on_enqueue to every registered sink.
void emit_enqueue(const OpRecord& record) noexcept;
// Delivers on_start to every registered sink.
void emit_start(const OpRecord& record) noexcept;
// Delivers on_end to every registered sink.
void emit_end(const OpRecord& record) noexcept;

// Whether ops' start times must be measured: a registered sink needs them (comm logger, exports,
// stragglers) or MESHRT_ENABLE_TIMING=1 (alias TORCH_NCCL_ENABLE_TIMING). Device backends record
// start events only then; cheap enough to ask per op.
bool timing_enabled();

// Number of exceptions sinks have thrown (and the tracer swallowed) in this process.
uint64_t sink_failures();

// Nanoseconds on the steady clock (the time base of OpRecord's times).
int64_t steady_now_ns();
// Nanoseconds since the Unix epoch.
int64_t wall_now_ns();
// The wall-clock time of steady-clock time `steady_ns`, through an offset read once per process:
// one clock read per op instead of two (later wall-clock steps are not followed).
int64_t wall_from_steady_ns(int64_t steady_ns);

}  // namespace meshrt::trace
