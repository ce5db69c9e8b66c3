// The live monitor (docs/diagnosis.md): on node 0, while an attempt runs, it reads every rank's
// progress record from the job's store each second and posts it on the live board (which the
// status server shows); when an op has run longer than
// MESHRT_STALL_S on some rank it asks every rank for a flight-recorder snapshot, writes the
// snapshots and records to the attempt directory and has `meshtrace stall` (the analyzer's own
// matching) print the verdict; it says so again when the stall clears. It only reads: the job
// goes on (MESHRT_DUMP_ON_STALL=1 makes the ranks dump too, as for a timeout).
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "launcher/live_board.h"
#include "launcher/live_stragglers.h"
#include "runtime/store/store.h"

namespace meshrt::launcher {

// Settings of the live monitor.
struct LiveMonitorOptions {
  std::chrono::milliseconds stall{10000};  // MESHRT_STALL_S (seconds); 0: no stall detection.
  std::chrono::milliseconds poll{1000};    // How often the progress records are read.
  std::chrono::milliseconds snapshot_wait{3000};  // Bound on the ranks' answers to a request.
  std::chrono::milliseconds meshtrace_timeout{20000};
};

// Reads MESHRT_STALL_S.
LiveMonitorOptions live_monitor_options_from_env();

// The op that has run longest on any rank, from the ranks' progress records.
struct LongestOp {
  int rank = -1;  // -1: nothing in flight.
  std::string group;
  std::string op;
  int64_t seq = 0;  // A p2p op's number on its channel with `peer` (docs/diagnosis.md).
  int peer = -1;    // A p2p op's peer (global rank); -1 for a collective.
  int64_t running_ms = 0;
  bool same_op(const LongestOp& o) const {
    return rank == o.rank && group == o.group && op == o.op && seq == o.seq && peer == o.peer;
  }
  // "world recv #1 from rank 3", "mesh0/tp all_reduce #3".
  std::string text() const;
};

// The longest op in flight in one progress record (runtime/progress_publisher.h), its running
// time advanced by the record's age; nullopt for text that is not a record.
std::optional<LongestOp> longest_in_record(const std::string& record, int64_t now_wall_ns);

// Watches one attempt from a thread of its own; stops when destroyed. The attempt is on `board`
// from construction to destruction.
class LiveMonitor {
 public:
  // `job`: the attempt's namespace of the store; `dir`: where snapshots go; `meshtrace`: the
  // binary (empty: the verdict is only the stalled op); `say` prints one line of meshrun's.
  LiveMonitor(LiveMonitorOptions options, LiveBoard& board, int attempt, std::shared_ptr<Store> job,
              int world_size, std::string dir, std::string meshtrace,
              std::function<void(const std::string&)> say);
  ~LiveMonitor();

  LiveMonitor(const LiveMonitor&) = delete;
  LiveMonitor& operator=(const LiveMonitor&) = delete;

 private:
  void loop();
  // Reads the records; returns the longest op in flight, and fills the raw records and each
  // rank's longest op (rank -1 when none) by rank.
  LongestOp read_progress(std::vector<std::string>* records, std::vector<LongestOp>* per_rank);
  // Asks for snapshots, writes them with `records` and runs meshtrace; returns the verdict, or
  // nullopt when the stalled op ended meanwhile (the snapshots then show different moments of a
  // slow job, and a verdict drawn from them would blame whoever moved on).
  std::optional<std::string> verdict(const LongestOp& stalled,
                                     const std::vector<std::string>& records,
                                     std::vector<int>* culprits);
  // Says which ranks became stragglers (or stopped being one) since the last poll.
  void report_stragglers(const std::vector<Straggler>& now);

  LiveMonitorOptions options_;
  LiveBoard& board_;
  std::shared_ptr<Store> job_;
  int world_size_;
  std::string dir_;
  std::string meshtrace_;
  std::function<void(const std::string&)> say_;
  StragglerWatch stragglers_;
  std::map<std::pair<int, std::string>, Straggler> reported_;  // By (rank, group).
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace meshrt::launcher
