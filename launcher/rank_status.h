// What the agents tell each other about an attempt: how each rank ended and which failure came
// first, as JSON through the store, and as the lines of the summary.
#pragma once

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "launcher/child_process.h"

namespace meshrt::launcher {

// Exit status of a rank whose watchdog fired with MESHRT_ON_TIMEOUT=abort (after its dump). The
// same value as runtime/watchdog.h's, which the launcher does not include (it uses the store only);
// tests/launcher_test.cc checks that they agree.
inline constexpr int kWatchdogExitCode = 70;

// How one rank of an attempt ended, as its agent saw it.
struct RankStatus {
  int rank = -1;
  int local_rank = -1;
  int node = -1;
  int pid = 0;
  ExitStatus exit;
  int stop_signal = 0;   // The last signal meshrun sent it to stop it; 0 when none.
  std::string end_time;  // UTC, when its agent reaped it.
  bool dumped = false;   // Its flight-recorder dump file existed afterwards.
  bool frozen = false;   // Found stopped (SIGSTOP, a debugger) while the job waited for dumps.
  // It died while the others ran and the job went on without it (--on-rank-failure=continue).
  bool left_behind = false;

  // True when the rank ended badly on its own (not because meshrun stopped it).
  bool failed() const { return stop_signal == 0 && !exit.success(); }
};

// For the analysis of a rank that left no dump: how it ended, as a clause ("was found stopped
// (SIGSTOP or a debugger) ..."); meshtrace's missing-dump finding says it.
std::string fate_without_dump(const RankStatus& status);

// The first failure of an attempt: a rank's, or a signal that meshrun itself received.
struct Failure {
  int rank = -1;  // -1 when meshrun was interrupted.
  int local_rank = -1;
  int node = -1;
  std::string host;
  int pid = 0;
  ExitStatus exit;
  int interrupt_signal = 0;  // SIGINT or SIGTERM sent to meshrun; such a job is not restarted.
  // The agent of `node` (pid `pid`) stopped answering: its ranks, from `rank` on, were lost.
  bool agent_lost = false;
  std::string time;           // UTC.
  std::string error_file;     // The rank's TORCHELASTIC_ERROR_FILE, when it wrote one.
  std::string error_message;  // What it says: "<type>: <what()>" of the uncaught exception.
};

// An attempt as every agent sees it once all nodes reported (or stopped reporting).
struct AttemptOutcome {
  int attempt = 0;
  std::optional<Failure> failure;  // The first failure; none when the attempt succeeded.
  std::vector<RankStatus> ranks;   // Every reported rank, by rank.
  std::vector<int> silent_nodes;   // Nodes whose agent never reported.
  // What the attempt's stop request said ("rank 3 failed", "interrupted", ...), when one was made.
  std::string stop_reason;
  // Nodes lost while the job went on without them (--on-rank-failure=continue), each as its
  // agent_lost Failure, by node; they are not among silent_nodes.
  std::vector<Failure> lost_nodes;

  // Some rank or node died and the job went on without it (--on-rank-failure=continue).
  bool continued() const {
    return !lost_nodes.empty() || std::any_of(ranks.begin(), ranks.end(),
                                              [](const RankStatus& r) { return r.left_behind; });
  }
  // No failure, every node reported (or was left behind), no rank was stopped by meshrun (a stop
  // requested with no failure recorded still ended ranks early: not a success), and, when ranks
  // were left behind, some rank exited 0.
  bool success() const {
    return !failure && silent_nodes.empty() &&
           std::none_of(ranks.begin(), ranks.end(),
                        [](const RankStatus& r) { return r.stop_signal != 0; }) &&
           (!continued() || std::any_of(ranks.begin(), ranks.end(), [](const RankStatus& r) {
             return r.stop_signal == 0 && r.exit.success();
           }));
  }
};

// "2024-11-22T13:55:01.234Z".
std::string utc_now();

// "exited with code 3", "killed by SIGSEGV".
std::string describe(const ExitStatus& exit);
// "rank 2 (pid 1234, node 0) died of SIGKILL at <time>", "... exited with code 3 at <time>": a
// rank left behind (--on-rank-failure=continue).
std::string describe_death(const RankStatus& status);
// "exited 0", "stopped by meshrun (SIGTERM)", "exited with code 3", ...
std::string describe(const RankStatus& status);
// "rank 3 (node 1 on host h, local rank 1, pid 42) exited with code 3 at <time>".
std::string describe(const Failure& failure);

// JSON round trips for the store.
std::string to_json(const std::vector<RankStatus>& statuses);
std::vector<RankStatus> statuses_from_json(const std::string& text);
std::string to_json(const Failure& failure);
Failure failure_from_json(const std::string& text);

}  // namespace meshrt::launcher
