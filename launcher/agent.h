// The agent of one node: joins the rendezvous, starts this node's ranks for each attempt,
// watches them and the other nodes, stops the whole job when a rank fails, restarts it, and
// reports how it ended.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "launcher/node_heartbeat.h"
#include "launcher/options.h"
#include "launcher/rank_status.h"
#include "launcher/rendezvous.h"

namespace meshrt::launcher {

struct LocalRank;
class LiveBoard;
class StatusServer;

// Runs one node's share of a job. Expects install_signal_handlers() to have run.
class Agent {
 public:
  explicit Agent(LaunchOptions options);
  ~Agent();

  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  // Runs the job on this node to its end; returns meshrun's exit status (0 when every rank of
  // an attempt exited 0, or with --on-rank-failure=continue some rank did and the job did not
  // fail; 1 on failure, 128+N after signal N).
  int run();

 private:
  // Removes what only the running job needed from `dir` (FIFOs, the status URL file) and the
  // directories left empty; what a person reads stays.
  static void remove_plumbing(const std::string& dir);
  // Everything after the run directory exists: rendezvous, attempts, report.
  int run_job();
  AttemptOutcome run_attempt(int attempt);
  // Node 0: the live board, and the status server showing it unless --status-port off.
  void start_status_server();
  // Prints where the status page is, once per job.
  void say_status_url();
  // Watches this node's ranks until every one has ended, stopping them when needed.
  void monitor(int attempt, std::vector<LocalRank>& ranks, Store& job);
  // Node 0's store is gone, and with it the ranks' dump signal: asks each running local rank to
  // dump through its FIFO (MESHRT_DUMP_PIPE) and waits, bounded, for their files.
  void dump_through_pipes(int attempt, const std::vector<LocalRank>& ranks);
  // Publishes this node's statuses and waits for every node's.
  AttemptOutcome gather_outcome(int attempt, const std::vector<RankStatus>& mine);
  // Sets the attempt's failure unless another one came first.
  void publish_failure(int attempt, const Failure& failure);
  // Records meshrun's interruption as the attempt's failure (unless one came first) and tells
  // every node to stop.
  void publish_interrupt(int attempt);
  // Node 0: writes every rank's dump into its attempt directory (the other nodes' from the
  // store).
  // Node 0: every rank's dump into the attempt directory (remote ranks' through the store, and
  // those a rank could not write itself); marks the ranks whose dump it wrote as dumped.
  void gather_dumps(AttemptOutcome& outcome);
  // Writes `dump` as `to`<rank>, or, once that fails (a full disk), into a temporary directory
  // that then holds every dump (fallback_dump_dir_). Returns whether it was written.
  bool write_dump_somewhere(const std::string& to, int rank, const std::string& dump);
  // Prints (and on node 0 saves) the failure summary.
  void report_failure(const AttemptOutcome& outcome);
  // A successful job that left ranks behind (--on-rank-failure=continue): prints who died and
  // what the job did (node 0 saves it in --log-dir).
  void report_continued(const AttemptOutcome& outcome);
  bool continues_on_failure() const { return options_.on_rank_failure == OnRankFailure::kContinue; }
  // Node 0, with --report: runs `meshtrace report` (on the dumps too, when dumps_dir is not
  // empty) and returns the line that says where the report is, or why there is none.
  std::string make_job_report(const std::string& dumps_dir, const std::string& prefix = "");
  std::vector<std::string> child_env(int rank, int local_rank, int attempt) const;
  std::string attempt_dir(int attempt) const;
  std::string dump_prefix(int attempt) const;
  // The ranks' dump FIFOs: `<stem><rank>.pipe` (the user's MESHRT_DUMP_PIPE, else in the attempt
  // directory).
  std::string dump_pipe_stem(int attempt) const;
  // The rank's TORCHELASTIC_ERROR_FILE in `attempt`.
  std::string error_file(int attempt, int rank) const;
  // True when --log-dir, --redirects or --tee sends some rank's stream to its log file.
  bool writes_log_files() const;

  LaunchOptions options_;
  std::string run_dir_;      // --log-dir, or a fresh directory under /tmp.
  std::string store_token_;  // The job's store secret, handed to the ranks; empty: none.
  bool temp_run_dir_ = false;
  std::string report_dir_;         // --report, absolute; empty without it.
  std::string fallback_dump_dir_;  // Where the dumps went when the attempt directory was full.
  bool set_omp_threads_ = false;   // The ranks get OMP_NUM_THREADS=1 (torchrun's default).
  std::optional<std::string> user_dump_prefix_;  // MESHRT_DUMP_PREFIX from meshrun's env.
  std::vector<std::string> base_env_;            // meshrun's environment minus what each rank gets.
  std::unique_ptr<Rendezvous> rendezvous_;
  // The current attempt's liveness of the other nodes' agents (none for one node).
  std::unique_ptr<NodeHeartbeat> heartbeat_;
  std::unique_ptr<LiveBoard> board_;      // Node 0 only; outlives each attempt's live monitor.
  std::unique_ptr<StatusServer> status_;  // Declared after board_: stops serving before it goes.
  std::atomic<bool> status_url_said_{false};
};

}  // namespace meshrt::launcher
