// meshrun's command line: what one agent (one node) of a job is asked to do.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace meshrt::launcher {

// The streams a --tee or --redirects value selects, torchrun's numbers: bit 1 stdout, bit 2
// stderr (0 none, 1 stdout, 2 stderr, 3 both).
inline constexpr int kStdoutBit = 1;
inline constexpr int kStderrBit = 2;

// A --tee or --redirects value: "N" for every local rank, or torchrun's per-rank form
// "LOCAL_RANK:N,..." where the local ranks not listed get 0.
struct StreamSelection {
  std::optional<int> all;             // Set for the "N" form.
  std::map<int, int> per_local_rank;  // The per-rank form.

  // The streams (kStdoutBit | kStderrBit) selected for `local_rank`.
  int of(int local_rank) const;
  bool operator==(const StreamSelection&) const = default;
};

// Parses a --tee or --redirects value; nullopt when `text` is not one.
std::optional<StreamSelection> parse_streams(std::string_view text);

// What a rank that dies does to the job (--on-rank-failure).
enum class OnRankFailure {
  kRestartJob,  // Fail the job: every rank dumps and is stopped; --max-restarts may start it again.
  // The job goes on without it: its survivors repair in place (MESHRT_ON_RANK_FAILURE=continue).
  // A rank that exits with the watchdog's status still fails the job.
  kContinue,
};

// The settings of one agent. Every agent of a job needs the same endpoint, run_id (agents with
// another one never meet), nnodes and max_restarts (both checked at rendezvous); nproc_per_node
// may differ between nodes.
struct LaunchOptions {
  int nnodes = 1;          // Agents in the job, one per node.
  int nproc_per_node = 1;  // Ranks this agent starts (auto, gpu and cpu are resolved).
  int node_rank = -1;      // -1: assigned at rendezvous (the agent that hosts the store is 0).
  std::string rdzv_host = "127.0.0.1";  // Node 0's address: it serves the store there.
  uint16_t rdzv_port = 29500;           // 0 picks a free port (one node only).
  std::string run_id = "default";       // The job's id, the same over restarts.
  std::string role = "default";         // ROLE_NAME of every rank.
  int max_restarts = 0;                 // Attempts after the first that a failure may cause.
  OnRankFailure on_rank_failure = OnRankFailure::kRestartJob;  // Never restarts when kContinue.
  std::chrono::milliseconds monitor_interval{100};  // How often children and peers are polled.
  std::chrono::milliseconds rdzv_timeout{std::chrono::minutes(5)};   // For all nodes to join.
  std::chrono::milliseconds grace_period{std::chrono::seconds(5)};   // SIGTERM until SIGKILL.
  std::chrono::milliseconds dump_timeout{std::chrono::seconds(10)};  // For every rank's dump.
  std::string log_dir;  // Per-rank logs, dumps, summary; empty: a fresh directory in /tmp.
  std::optional<StreamSelection> tee;        // Streams shown on the console and logged.
  std::optional<StreamSelection> redirects;  // Streams logged only (default: all with log_dir).
  bool standalone = false;                   // One node, a free port on 127.0.0.1, a fresh run id.
  std::string local_addr;                    // Advertised to the other nodes; empty: the host name.
  std::string local_iface;  // The interface holding local_addr: the ranks' Gloo interface.
  std::string report_dir;   // --report: the ranks' trace files and `meshtrace report`'s page.
  // Node 0's live status page (launcher/status_server.h): its port (0: a free one; nullopt:
  // none) and the address it binds (loopback unless asked).
  std::optional<uint16_t> status_port = 0;
  std::string status_host = "127.0.0.1";
  std::vector<std::string> command;  // What each rank execs: PROGRAM ARGS..., maybe after python.
};

// Where one of a rank's streams goes under `o`.
struct StreamRoute {
  bool console = false;  // Prefixed lines on meshrun's stdout or stderr.
  bool file = false;     // The rank's log file, attempt_<n>/rank_<r>.log.
};
// The route of `local_rank`'s stdout (`stream` kStdoutBit) or stderr (kStderrBit). --tee wins
// over --redirects, which defaults to both streams when --log-dir is given and none otherwise.
StreamRoute route(const LaunchOptions& o, int local_rank, int stream);

// `meshrun doctor [options]`: checks this host for meshrt jobs (launcher/doctor.h).
struct DoctorOptions {
  bool json = false;      // One JSON object for tools instead of the report.
  bool self_test = true;  // Run the 2-rank all_reduce of each built backend.
  // Bound of each self-test job (and of the helper's --info run); the child is killed after it.
  std::chrono::milliseconds self_test_timeout{std::chrono::seconds(60)};
};

// The outcome of parse_options: run with `options` (or the doctor, when `doctor` is set), or
// exit at once with `exit_status` (0 after --help or --version, 2 after a usage error; the text
// is already printed).
struct ParsedCommandLine {
  LaunchOptions options;
  std::optional<DoctorOptions> doctor;
  std::optional<int> exit_status;
};

// Parses `meshrun [options] PROGRAM [ARGS...]`, or `meshrun doctor [options]` when the first
// word is `doctor` (a program of that name runs as `./doctor`). Everything from PROGRAM on
// belongs to the program. A usage error is one line on stderr ("meshrun: ...") and exit status 2.
ParsedCommandLine parse_options(int argc, const char* const* argv);

// CUDA devices a rank would see: the /dev/nvidia<N> nodes in `dev_dir`, narrowed by
// `cuda_visible_devices` (CUDA's rule: the list ends at the first invalid entry) when not null.
int count_cuda_devices(const std::string& dev_dir, const char* cuda_visible_devices);
// CPUs this process may run on (sched_getaffinity), else std::thread::hardware_concurrency.
int count_cpus();
// --nproc-per-node's value: a positive number, `cpu` (cpus), `gpu` (cuda_devices, which must not
// be 0) or `auto` (gpu when there is one, else cpu). Throws std::invalid_argument saying why not.
int resolve_nproc_per_node(std::string_view text, int cuda_devices, int cpus);

// The name of the network interface holding `address` (numeric, or a host name resolving to
// one of its addresses); empty when no interface of this host has it.
std::string interface_with_address(const std::string& address);

}  // namespace meshrt::launcher
