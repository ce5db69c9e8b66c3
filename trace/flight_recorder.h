// The flight recorder: the last N op records of this process in a fixed ring, dumped per rank
// when a job hangs or fails so that `meshtrace analyze` can name the culprit. The format is
// described in docs/flight-recorder.md; it mirrors PyTorch's Flight Recorder (schema "2.10").
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "trace/op_record.h"
#include "trace/tracer.h"

namespace meshrt::trace {

// Dump file formats.
enum class DumpFormat { kJson, kPickle };

// Why a dump was written.
// kStall: the live monitor saw a stall (MESHRT_DUMP_ON_STALL=1, or its snapshot request).
// kCrash: a fatal signal (runtime/fatal_signal.h).
enum class DumpReason {
  kTimeout,
  kFailure,
  kRemote,
  kSignal,
  kPipe,
  kApi,
  kHeartbeat,
  kStall,
  kCrash
};

// Returns "timeout", "failure", "remote", "signal", "pipe", "api", "heartbeat", "stall" or
// "crash".
std::string_view dump_reason_name(DumpReason reason);

// The op that caused a dump, as the watchdog saw it.
struct DumpTrigger {
  int rank = -1;      // Global rank whose watchdog fired.
  std::string group;  // Communicator name.
  uint64_t seq = 0;   // Its collective (or p2p) sequence number.
  std::string op;
  std::string detail;
  int pid = 0;  // The process the dump is of, when another one writes it (0: this one).
  // How logs name the op (trace::op_text: a p2p op by its channel); empty: "<op> #<seq>".
  std::string op_text{};
};

// Facts about the job that records do not carry, set by the runtime at init.
struct JobInfo {
  std::string run_id = "default";
  int world_size = -1;  // -1: unknown (taken as the largest group seen).
};

// Receives a finished dump; the default writes `<prefix><rank>` atomically. Register another to
// send dumps elsewhere (remote storage); it must be thread-safe.
class DumpWriter {
 public:
  virtual ~DumpWriter() = default;
  // Stores `bytes`, the dump of global rank `rank`; returns where it went, or nullopt on failure.
  virtual std::optional<std::string> write(int rank, const std::string& bytes) = 0;
};

// Flight recorder settings, from the environment by default.
struct FlightRecorderOptions {
  size_t capacity = 2000;  // Entries; 0 turns recording and dumps off.
  std::string dump_prefix = "/tmp/meshrt_fr_";
  DumpFormat format = DumpFormat::kJson;
};

// Reads MESHRT_TRACE_BUFFER_SIZE (aliases TORCH_FR_BUFFER_SIZE, TORCH_NCCL_TRACE_BUFFER_SIZE),
// MESHRT_DUMP_PREFIX (aliases TORCH_FR_DUMP_TEMP_FILE, TORCH_NCCL_DEBUG_INFO_TEMP_FILE) and
// MESHRT_DUMP_FORMAT (json | pickle). The first alias set wins.
FlightRecorderOptions flight_recorder_options_from_env();

// The process's recorder. Recording costs two uncontended per-slot spin locks and a record copy
// per event; there is no process-wide lock on the op path.
class FlightRecorder : public Sink {
 public:
  // The process's instance, configured from the environment on first use and registered as a
  // sink when its capacity is non-zero.
  static FlightRecorder& instance();
  // Sink: dumps show "started" only from measured starts, as PyTorch's (see timing_enabled()).
  bool needs_timing() const override { return false; }
  // The process's device for dumps (top-level "device"), e.g. the PCI bus id "0000:17:00.0" of
  // its CUDA device; empty (null in dumps) for CPU-only processes. Set by the NCCL backend.
  void set_device(std::string device);

  explicit FlightRecorder(FlightRecorderOptions options);
  ~FlightRecorder() override;

  bool enabled() const { return capacity_ > 0; }
  const FlightRecorderOptions& options() const { return options_; }
  // Records `comm` for pg_config even before its first op, and its rank as local while it lives
  // (called at communicator creation and destruction).
  void register_comm(std::shared_ptr<const CommInfo> comm);
  void unregister_comm(const CommInfo* comm);
  void set_job_info(JobInfo info);
  // Replaces the default file writer (nullptr restores it).
  void set_writer(std::shared_ptr<DumpWriter> writer);

  // Sink interface.
  void on_enqueue(const OpRecord& record) override;
  void on_start(const OpRecord& record) override;
  void on_end(const OpRecord& record) override;

  // The retained records of global rank `rank`, oldest first.
  std::vector<OpRecord> records(int rank) const;
  // Records overwritten so far.
  uint64_t dropped() const;
  // Global ranks with a communicator in this process (one, or all of an in-process world); when
  // none is left, the ranks of the retained records.
  std::vector<int> local_ranks() const;
  // The live communicators of this process (their identity and progress counters).
  std::vector<std::shared_ptr<const CommInfo>> comms() const;

  // The dump of `rank` in `format`, as bytes.
  std::string render(int rank, DumpFormat format, DumpReason reason,
                     const DumpTrigger* trigger) const;
  // Dumps every local rank through the writer; returns the paths written. Thread-safe; dumps
  // are serialised. Never throws. `unwritten`, when given, gets the rendered dump of each rank
  // the writer could not write (a full disk), for the caller to hand on another way.
  std::vector<std::string> dump(
      DumpReason reason, const DumpTrigger* trigger = nullptr,
      std::vector<std::pair<int, std::string>>* unwritten = nullptr) noexcept;

 private:
  struct Slot;
  struct CommEntry;

  Slot* slot_for(uint64_t record_id) const;
  // Calls f(record) for every retained record, oldest first, under its slot's lock.
  template <typename F>
  void for_each_retained(F&& f) const;
  void store(const OpRecord& record);
  void update(const OpRecord& record);

  FlightRecorderOptions options_;
  size_t capacity_;
  std::unique_ptr<Slot[]> slots_;
  std::atomic<uint64_t> highest_id_{0};

  mutable std::mutex mu_;  // Guards the fields below; never taken on the op path.
  std::vector<std::shared_ptr<const CommInfo>> comms_;  // Live communicators.
  JobInfo job_;
  std::string device_;
  std::shared_ptr<DumpWriter> writer_;
  std::mutex dump_mu_;
};

}  // namespace meshrt::trace
