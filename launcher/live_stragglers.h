// Live stragglers (docs/diagnosis.md): which rank makes the others wait, named while the job runs
// and before anything hangs. Each progress record carries its rank's op totals
// (trace/live_metrics.h); over a sliding window, a collective's time on a rank that arrives late
// is short (the others are already there) and long on the ranks that wait for it. A rank is a
// straggler of a group when its mean time per collective there is well below its peers' (they
// wait for it) and it spends a smaller share of its own time in ops than they do (the time goes
// in its own code, not in waiting for somebody else: a rank late only because it waited in
// another group is not named).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

namespace meshrt::launcher {

// One straggler of one group over the window.
struct Straggler {
  int rank = -1;
  std::string group;             // The communicator's name, e.g. "mesh0/tp".
  std::string mesh_dim;          // Empty outside a mesh.
  std::vector<int> members;      // Global ranks of the group.
  double late_ms = 0;            // Its peers' mean time per collective minus its own.
  int64_t ops = 0;               // Its collectives in the group within the window.
  double in_op_share = 0;        // Share of its wall time spent in ops, 0..1.
  double peers_in_op_share = 0;  // The same, median over its peers.
  double window_s = 0;           // The window the figures cover.
};

// Settings of the detection.
struct StragglerOptions {
  std::chrono::milliseconds window{10000};  // How far back the totals are compared.
  int64_t min_ops = 3;                      // Fewer collectives in the window: no verdict.
  double min_late_ms = 20;                  // Below this nobody is called late.
  // Its mean time per collective at most this share of its peers' median.
  double max_time_ratio = 0.5;
  // Its share of time in ops at least this much below its peers' median.
  double min_share_gap = 0.15;
};

// Reads successive sets of progress records and names the stragglers of each group.
class StragglerWatch {
 public:
  explicit StragglerWatch(StragglerOptions options = {});

  // Adds one poll's records (by rank; "" where a rank has none) and returns the stragglers over
  // the window ending with them, the latest first per group (at most one per group).
  std::vector<Straggler> add(const std::vector<std::string>& records);

 private:
  // One rank's totals as of one record.
  struct Sample {
    int64_t wall_ns = 0;
    double exec_s = 0;                                          // In every op, p2p included.
    std::map<std::string, std::pair<int64_t, double>> by_comm;  // Name: (timed ops, exec s).
    std::map<std::string, std::pair<std::string, std::vector<int>>> groups;  // Dim, members.
  };
  static bool parse(const std::string& record, Sample* sample, int* rank);

  StragglerOptions options_;
  std::map<int, std::deque<Sample>> history_;  // By rank, oldest first; bounded by the window.
};

// "rank 3 arrives late at mesh0/tp (dim tp, ranks [2, 3]) by 182 ms per collective on average
// over the last 10 s (24 ops): it spends 8% of its time in ops, its peers 63%".
std::string describe(const Straggler& s);

}  // namespace meshrt::launcher
