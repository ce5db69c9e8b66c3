// The watchdog: one thread per process that watches every communicator of every backend. When an
// op fails or runs past its timeout it logs the op, dumps the flight recorder, tells every other
// rank to dump (through the store) and applies the timeout policy. It also serves on-demand dumps
// (SIGUSR1, a FIFO) and remote dump signals; a heartbeat monitor catches a stuck watchdog.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "runtime/progress_publisher.h"
#include "runtime/store/store.h"
#include "trace/flight_recorder.h"

namespace meshrt {

// What the watchdog sees of a communicator: the op it runs now and a way to abort it. The
// watchdog knows nothing else of communicators, which register themselves with add().
class Watched {
 public:
  virtual ~Watched() = default;
  // The record of the op executing now, if any.
  virtual std::optional<trace::OpRecord> running_record() const = 0;
  // Fails every op not yet started with kAborted; one already running ends as its backend allows
  // (in-process and Gloo: at once).
  virtual void abort() noexcept = 0;
  // Polls launched ops (NCCL, MPI): completes finished ones and fails those past their timeout,
  // even when nobody waits for them. Called by the watchdog thread every poll interval.
  virtual void progress() noexcept {}
};

// What the watchdog does once the dumps are written.
enum class TimeoutPolicy {
  kAbort,     // Abort the communicators and exit with kWatchdogExitCode.
  kThrow,     // Fail the op: Work::wait throws; the job goes on.
  kContinue,  // Log and dump only.
};

// Exit status of a process the watchdog ended (sysexits' EX_SOFTWARE).
inline constexpr int kWatchdogExitCode = 70;

// Watchdog settings.
struct WatchdogOptions {
  // MESHRT_ON_TIMEOUT (abort | throw | continue); unset: abort for init() jobs, throw for
  // in-process worlds, where exiting would end every simulated rank's host program.
  std::optional<TimeoutPolicy> policy;
  std::chrono::milliseconds poll{100};                  // MESHRT_WATCHDOG_POLL_MS
  std::chrono::milliseconds signal_poll{500};           // MESHRT_DUMP_SIGNAL_POLL_MS
  std::chrono::milliseconds heartbeat_timeout{480000};  // MESHRT_HEARTBEAT_TIMEOUT_MS
  // MESHRT_DUMP_WAIT_MS: under kAbort, how long to wait for every rank's dump before exiting.
  std::chrono::milliseconds dump_wait{10000};
  std::string pipe_stem;  // MESHRT_DUMP_PIPE (alias TORCH_NCCL_DEBUG_INFO_PIPE_FILE).
  // MESHRT_ON_RANK_FAILURE=continue (meshrun --on-rank-failure=continue sets it; default
  // restart-job): the job repairs around dead ranks (docs/repair.md). An op waiting for a dead
  // rank is aborted within a poll of its record, a peer failure neither dumps nor exits, and the
  // exit barrier waits for the living only.
  bool repair_in_place = false;
};

// Reads the variables named in WatchdogOptions.
WatchdogOptions watchdog_options_from_env();

// The process's watchdog; its threads start with the first communicator.
class Watchdog {
 public:
  static Watchdog& instance();

  // Called by Communicator's constructor and destructor. remove() waits for a progress() call on
  // `comm` in flight.
  void add(Watched* comm);
  void remove(Watched* comm);
  // Called by Communicator's destructor: the communicator `comm_key` (CommInfo::store_key) issued
  // its last collective, number `last_collective_seq`. Kept for exit_record().
  void note_comm_end(const std::string& comm_key, int64_t last_collective_seq);
  // This rank's exit record (runtime/store/exit_keys.h): the last collective of every
  // communicator it ended. Its exit barrier publishes it, so that a peer still waiting in a
  // later op knows at once that the op will never be called.
  std::string exit_record() const;
  // How the abort policy ends the process once the dumps are written: default _exit(status);
  // under mpirun, MPI_Abort so that the launcher ends the whole job.
  void set_exit(std::function<void(int status)> exit);
  // The job's store (for dump signals), run id and world size, for dumps; init() sets them.
  void set_job_store(std::shared_ptr<Store> store, std::string run_id, int world_size);
  // Forgets the job store if it is `store` (the world that set it is gone).
  void clear_job_store(const Store* store);
  // The policy when MESHRT_ON_TIMEOUT is unset (in-process worlds set kThrow).
  void set_default_policy(TimeoutPolicy policy);
  TimeoutPolicy policy() const;
  // WatchdogOptions::repair_in_place.
  bool repairs_in_place() const { return options_.repair_in_place; }

  // Called on the worker before a failed op is marked failed: dumps, signals and, under kAbort,
  // exits. Returns only when the job goes on.
  void on_op_failed(const trace::OpRecord& record, const std::string& error,
                    bool timed_out) noexcept;
  // Checks the store for another rank's dump signal now and dumps if it is there (the watchdog
  // thread does this every signal_poll; a rank about to leave the job does it once more).
  void poll_remote_signal();
  // Blocks until this process has dumped for a dump signal, or `timeout` passes.
  bool wait_dumped(std::chrono::milliseconds timeout);
  // In a job watched by meshrt-monitor (no launcher), after a failure: blocks until the monitor
  // has printed the post-mortem (bounded), so that the job's end does not cut it short.
  void wait_for_post_mortem();
  // For tests of the heartbeat monitor: the watchdog thread stops for `duration` at its next loop.
  void stall_for_testing(std::chrono::milliseconds duration);
  // True once this process saw the job fail (its own watchdog fired or another rank's signal).
  bool job_failed() const { return job_failed_.load(); }

 private:
  Watchdog();
  void start_threads();
  void loop();
  void monitor_loop();
  void scan_timeouts();
  // Fires for an op that has waited a second or more for a peer that has left the job: the
  // peer's exit record shows it never issued the op (it returned from its program early), or its
  // process ended without one (exit_keys.h). Names the peer and the op it will never call; under
  // kAbort the process then exits (under throw and continue the op ends at its timeout). Under
  // repair_in_place it aborts the op's communicator instead: the program repairs.
  void check_left_peers();
  // Under repair_in_place: aborts every communicator whose op has run 100 ms or more while a
  // member is dead (rank_failures.h), so that the op fails now instead of at its timeout.
  void abort_ops_waiting_for_dead();
  std::set<uint64_t> repaired_comms_;  // CommInfo::uid of those it aborted (watchdog thread).
  // A peer's exit record (runtime/store/exit_keys.h), and when this rank first saw it.
  struct LeftPeer {
    std::string ended;  // meshrun's "exited with code 0"; empty: from its exit barrier.
    std::map<std::string, int64_t> last_collective;  // By communicator store key.
    int64_t seen_ns = 0;
  };
  // `peer`'s exit record, read from `store` once (nullptr while it has none).
  const LeftPeer* left_peer(Store& store, int peer, int64_t now);
  // After fire(): under kAbort exits; under kThrow aborts `comm` if it still exists.
  void apply_policy(Watched* comm);
  void progress_all();
  // Live progress (runtime/progress_publisher.h): samples every communicator, publishes when due.
  void publish_progress();
  // Whether the watchdog thread leaves the store alone for now (store_quiet_until_ns_), and the
  // start of such a pause after a failed request.
  bool store_quiet() const;
  void store_failed();
  void poll_pipe();
  void fire(trace::DumpReason reason, const trace::DumpTrigger& trigger);
  void dump_once(trace::DumpReason reason, const trace::DumpTrigger* trigger);
  void wait_for_all_dumps();
  // A dump asked for by a signal or the FIFO: any time, not counted, no policy.
  void manual_dump(trace::DumpReason reason);
  // The abort policy: waits (bounded) for every rank's dump, aborts, exits with 70.
  [[noreturn]] void exit_after_dumps();

  WatchdogOptions options_;
  mutable std::mutex mu_;
  std::vector<Watched*> comms_;
  // Last collective seq of each ended communicator, by store key (bounded: see note_comm_end).
  std::map<std::string, int64_t> ended_comms_;
  std::map<int, LeftPeer> left_peers_;       // Peers' exit records by global rank; watchdog thread.
  std::atomic<uint64_t> job_generation_{0};  // Bumped per job: left_peers_ are of an old one.
  uint64_t left_peers_generation_ = 0;       // Watchdog thread only.
  // A store request of the watchdog thread failed: none until then (steady ns). A lost store
  // costs each request its reconnect attempts, and the FIFO dumps meshrun then asks for must
  // not wait behind them.
  std::atomic<int64_t> store_quiet_until_ns_{0};
  std::shared_ptr<Store> store_;
  int world_size_ = 0;
  TimeoutPolicy default_policy_ = TimeoutPolicy::kAbort;
  bool started_ = false;

  std::mutex poll_mu_;      // Serialises poll_remote_signal().
  std::mutex progress_mu_;  // Held while progress_all() calls into communicators.
  std::function<void(int)> exit_;
  std::mutex fire_mu_;  // Serialises fire(): the first caller dumps, later ones wait for it.
  std::atomic<bool> fired_{false};
  std::atomic<bool> dump_claimed_{false};  // The one automatic dump has begun.
  std::atomic<bool> dumped_{false};
  std::atomic<bool> job_failed_{false};
  std::condition_variable dumped_cv_;
  std::atomic<uint64_t> heartbeat_{0};
  std::atomic<int64_t> stall_ms_{0};
  int pipe_fd_ = -1;
  ProgressPublisher progress_;  // Used by the watchdog thread only.
};

}  // namespace meshrt
