#include "launcher/options.h"

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <random>

namespace meshrt::launcher {
namespace {

constexpr const char* kFooter =
    R"(Every rank gets RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK (node rank),
ROLE_RANK, GROUP_WORLD_SIZE, MASTER_ADDR/MASTER_PORT (node 0's store, which the ranks share:
MESHRT_STORE_EXTERNAL=1), MESHRT_RUN_ID, MESHRT_RESTART_COUNT (attempt, from 0; also the
TORCHELASTIC_* names), MESHRT_LOG_DIR and MESHRT_DUMP_PREFIX=<log dir>/attempt_<n>/fr_trace_
(unless set); the rest of meshrun's environment (MESHRT_COMMS_LOG, ...) is passed on.

Output: each line a rank prints is shown as "[rank<r>]: <line>"; with --log-dir it goes to
<log dir>/attempt_<n>/rank_<r>.log instead (to both with --tee).
When a rank fails, every rank of every node is stopped (SIGTERM, --grace-period, SIGKILL),
after waiting up to --dump-timeout for the flight-recorder dumps if a watchdog fired. Node 0
gathers every rank's dump into its log directory, runs `meshtrace analyze` on them and prints
a summary with the verdict. SIGINT or SIGTERM to meshrun is passed to the ranks; a second
SIGINT kills them.

Exit status: 0 when every rank exited 0; 1 when the job failed; 2 on a usage error;
128+N when stopped by signal N.)";

// Prints the usage line the way the command line really reads: CLI11 knows no PROGRAM.
class Formatter : public CLI::Formatter {
 public:
  std::string make_usage(const CLI::App*, std::string name) const override {
    return fmt::format("Usage: {} [OPTIONS] PROGRAM [ARGS...]\n", name);
  }
};

// A usage error: parse_options prints it as one line and returns exit status 2.
struct UsageError {
  std::string message;
};

[[noreturn]] void usage_error(std::string message) { throw UsageError{std::move(message)}; }

std::chrono::milliseconds to_ms(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(std::llround(seconds * 1000.0)));
}

uint16_t parse_port(const std::string& flag, const std::string& text) {
  unsigned value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value > 65535) {
    usage_error(fmt::format("{}: '{}' is not a port", flag, text));
  }
  return static_cast<uint16_t>(value);
}

// "host:port", "[v6addr]:port" or "host" (default port).
void parse_endpoint(const std::string& text, LaunchOptions& o) {
  std::string host = text;
  std::string port;
  if (!text.empty() && text.front() == '[') {
    const auto close = text.find(']');
    if (close == std::string::npos) usage_error(fmt::format("--rdzv-endpoint '{}': no ']'", text));
    host = text.substr(1, close - 1);
    if (close + 1 < text.size()) {
      if (text[close + 1] != ':') usage_error(fmt::format("--rdzv-endpoint '{}'", text));
      port = text.substr(close + 2);
    }
  } else if (const auto colon = text.rfind(':'); colon != std::string::npos) {
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  if (host.empty()) usage_error(fmt::format("--rdzv-endpoint '{}': no host", text));
  o.rdzv_host = host;
  if (!port.empty()) o.rdzv_port = parse_port("--rdzv-endpoint", port);
}

// CLI11 2.1's Range validators print their whole double range; these say what is wanted.
CLI::Validator number_check(bool zero_allowed) {
  return CLI::Validator(
      [zero_allowed](std::string& text) -> std::string {
        double value = 0;
        const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
        const bool ok = ec == std::errc() && end == text.data() + text.size() &&
                        (zero_allowed ? value >= 0 : value > 0);
        return ok ? ""
                  : fmt::format("'{}' is not a {} number", text,
                                zero_allowed ? "non-negative" : "positive");
      },
      zero_allowed ? "NONNEGATIVE" : "POSITIVE");
}

std::string random_run_id() {
  std::random_device rd;
  return fmt::format("{:08x}", rd());
}

// parse_options without the error printing.
ParsedCommandLine parse(int argc, const char* const* argv) {
  ParsedCommandLine parsed;
  LaunchOptions& o = parsed.options;
  std::string endpoint;
  std::string master_port;
  std::optional<std::string> run_id;
  double monitor_s = 0.1, rdzv_timeout_s = 300, grace_s = 5, dump_timeout_s = 10;

  const CLI::Validator positive = number_check(false);
  const CLI::Validator non_negative = number_check(true);
  CLI::App app{
      "meshrun: starts the ranks of a meshrt job on this node, watches them, stops\n"
      "the whole job when one fails, and explains the failure.",
      "meshrun"};
  app.formatter(std::make_shared<Formatter>());
  app.prefix_command();
  app.footer(kFooter);
  app.add_option("--nnodes", o.nnodes, "number of nodes (agents) in the job (default 1)")
      ->check(positive);
  app.add_option("--nproc-per-node", o.nproc_per_node, "ranks to start on this node (default 1)")
      ->check(positive);
  auto* node_rank = app.add_option("--node-rank", o.node_rank,
                                   "this node's rank; default: assigned at rendezvous, the node "
                                   "that hosts the store being 0")
                        ->check(non_negative);
  auto* rdzv = app.add_option("--rdzv-endpoint", endpoint,
                              "HOST[:PORT] where node 0 serves the rendezvous store (default "
                              "127.0.0.1:29500)");
  auto* maddr = app.add_option("--master-addr", o.rdzv_host, "same as the HOST of --rdzv-endpoint");
  auto* mport = app.add_option("--master-port", master_port, "same as the PORT of --rdzv-endpoint");
  rdzv->excludes(maddr)->excludes(mport);
  app.add_option("--rdzv-id", run_id,
                 "run id, the same on every node and kept over restarts (default 'default'; "
                 "random with --standalone)");
  app.add_option("--max-restarts", o.max_restarts,
                 "attempts to start again after a failure (default 0)")
      ->check(non_negative);
  app.add_option("--monitor-interval", monitor_s,
                 "seconds between checks of the ranks and the other nodes (default 0.1)")
      ->check(positive);
  app.add_option("--rdzv-timeout", rdzv_timeout_s,
                 "seconds to wait for every node to join (default 300)")
      ->check(positive);
  app.add_option("--grace-period", grace_s,
                 "seconds between SIGTERM and SIGKILL when stopping ranks (default 5)")
      ->check(non_negative);
  app.add_option("--dump-timeout", dump_timeout_s,
                 "seconds to wait for every rank's flight-recorder dump after a watchdog fired "
                 "(default 10)")
      ->check(non_negative);
  app.add_option("--log-dir", o.log_dir,
                 "directory for per-rank logs (attempt_<n>/rank_<r>.log), flight-recorder dumps "
                 "and the summary; default: output to the console only");
  app.add_flag("--tee", o.tee, "with --log-dir: also show the ranks' output on the console");
  auto* standalone = app.add_flag("--standalone", o.standalone,
                                  "one node: store on a free port of 127.0.0.1, random run id");
  standalone->excludes(rdzv)->excludes(maddr)->excludes(mport)->excludes(node_rank);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    parsed.exit_status = app.exit(e);
    return parsed;
  } catch (const CLI::ParseError& e) {
    usage_error(e.what());
  }

  std::vector<std::string> rest = app.remaining();
  if (!rest.empty() && rest.front() == "--") rest.erase(rest.begin());
  if (rest.empty()) usage_error("no PROGRAM given");
  if (rest.front().size() > 1 && rest.front().front() == '-') {
    usage_error(fmt::format("unknown option '{}'", rest.front()));
  }
  o.command = std::move(rest);
  if (!endpoint.empty()) parse_endpoint(endpoint, o);
  if (!master_port.empty()) o.rdzv_port = parse_port("--master-port", master_port);
  o.monitor_interval = to_ms(monitor_s);
  o.rdzv_timeout = to_ms(rdzv_timeout_s);
  o.grace_period = to_ms(grace_s);
  o.dump_timeout = to_ms(dump_timeout_s);
  if (o.monitor_interval.count() < 1) usage_error("--monitor-interval must be at least 0.001");
  if (o.standalone) {
    if (o.nnodes != 1) usage_error("--standalone runs one node: drop --nnodes");
    o.rdzv_host = "127.0.0.1";
    o.rdzv_port = 0;
    o.node_rank = 0;
  }
  if (o.node_rank >= o.nnodes) {
    usage_error(fmt::format("--node-rank {} is not below --nnodes {}", o.node_rank, o.nnodes));
  }
  if (o.rdzv_port == 0 && o.nnodes > 1) {
    usage_error("port 0 (a free port) works for one node only: other nodes could not find it");
  }
  o.run_id = run_id.value_or(o.standalone ? random_run_id() : "default");
  if (o.run_id.empty() || o.run_id.find('/') != std::string::npos) {
    usage_error(fmt::format("--rdzv-id '{}': must be non-empty without '/'", o.run_id));
  }
  return parsed;
}

}  // namespace

ParsedCommandLine parse_options(int argc, const char* const* argv) {
  try {
    return parse(argc, argv);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "meshrun: %s (see meshrun --help)\n", e.message.c_str());
    ParsedCommandLine failed;
    failed.exit_status = 2;
    return failed;
  }
}

}  // namespace meshrt::launcher
