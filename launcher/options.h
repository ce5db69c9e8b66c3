// meshrun's command line: what one agent (one node) of a job is asked to do.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace meshrt::launcher {

// The settings of one agent. Every agent of a job needs the same endpoint, run_id (agents with
// another one never meet), nnodes and max_restarts (both checked at rendezvous); nproc_per_node
// may differ between nodes.
struct LaunchOptions {
  int nnodes = 1;          // Agents in the job, one per node.
  int nproc_per_node = 1;  // Ranks this agent starts.
  int node_rank = -1;      // -1: assigned at rendezvous (the agent that hosts the store is 0).
  std::string rdzv_host = "127.0.0.1";  // Node 0's address: it serves the store there.
  uint16_t rdzv_port = 29500;           // 0 picks a free port (one node only).
  std::string run_id = "default";       // The job's id, the same over restarts.
  int max_restarts = 0;                 // Attempts after the first that a failure may cause.
  std::chrono::milliseconds monitor_interval{100};  // How often children and peers are polled.
  std::chrono::milliseconds rdzv_timeout{std::chrono::minutes(5)};   // For all nodes to join.
  std::chrono::milliseconds grace_period{std::chrono::seconds(5)};   // SIGTERM until SIGKILL.
  std::chrono::milliseconds dump_timeout{std::chrono::seconds(10)};  // For every rank's dump.
  std::string log_dir;      // Per-rank logs, dumps, summary; empty: console only, dumps in /tmp.
  bool tee = false;         // With log_dir: the children's output also goes to the console.
  bool standalone = false;  // One node, a free port on 127.0.0.1, a fresh run id.
  std::vector<std::string> command;  // PROGRAM ARGS...
};

// The outcome of parse_options: run with `options`, or exit at once with `exit_status`
// (0 after --help, 2 after a usage error; the text is already printed).
struct ParsedCommandLine {
  LaunchOptions options;
  std::optional<int> exit_status;
};

// Parses `meshrun [options] PROGRAM [ARGS...]`. Everything from PROGRAM on belongs to the
// program. A usage error is one line on stderr ("meshrun: ...") and exit status 2.
ParsedCommandLine parse_options(int argc, const char* const* argv);

}  // namespace meshrt::launcher
