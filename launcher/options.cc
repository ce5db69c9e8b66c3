#include "launcher/options.h"

#include <dirent.h>
#include <fmt/format.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <set>
#include <stdexcept>
#include <thread>

#include "meshrt_config.h"

namespace meshrt::launcher {
namespace {

constexpr const char* kFooter =
    R"(Every option also takes torchrun's spelling with underscores (--nproc_per_node) and the
--opt=value form. PROGRAM runs as is, unless it ends in .py or -m/--run-path is given: then
`$PYTHON_EXEC -u` (python3 by default) runs it; --no-python always runs it as is.

Every rank gets RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK (node rank),
ROLE_RANK, ROLE_NAME, GROUP_WORLD_SIZE, MASTER_ADDR/MASTER_PORT (node 0's store, which the
ranks share: MESHRT_STORE_EXTERNAL=1), MESHRT_RUN_ID, MESHRT_RESTART_COUNT (attempt, from 0;
also the TORCHELASTIC_* names), TORCHELASTIC_ERROR_FILE=<log dir>/attempt_<n>/error_<r>.json
(where an uncaught exception is written), MESHRT_LAUNCHER=meshrun, MESHRT_LOG_DIR,
MESHRT_DUMP_PREFIX=<log dir>/attempt_<n>/fr_trace_ (unless set), OMP_NUM_THREADS=1 (unless set,
with more than one rank per node), MESHRT_STORE_TOKEN (the store's secret: meshrun's own if set,
else a fresh one per job on one node; several nodes need it set, the same, on every node); the
rest of meshrun's environment is passed on. One node's store listens on 127.0.0.1 only.

Output: each line a rank prints is shown as "[rank<r>]: <line>" (meshrt's own log lines, which
name their rank, as they are); with --log-dir it goes to <log dir>/attempt_<n>/rank_<r>.log
instead. --redirects picks the streams that go to the file only, --tee those that go to both
(0 none, 1 stdout, 2 stderr, 3 both; per local rank: 0:3,1:2); a bare --tee means 3. Without
--log-dir, log files go to the run's directory under /tmp.
When a rank fails, every rank of every node is stopped (SIGTERM, --grace-period, SIGKILL),
after waiting up to --dump-timeout for the flight-recorder dumps if a watchdog fired. Node 0
gathers every rank's dump into its log directory, runs `meshtrace analyze` on them and prints
a summary with the verdict and the first failing rank's exception. With
--on-rank-failure=continue a rank that dies (unless its watchdog exited 70) is left behind
instead: the others run on (MESHRT_ON_RANK_FAILURE=continue) and meshrun says who died. SIGINT
or SIGTERM to meshrun is passed to the ranks; a second SIGINT kills them. meshtrace is
$MESHRT_MESHTRACE, else the one next to meshrun, else the one on PATH.

Exit status: 0 when every rank exited 0 (with --on-rank-failure=continue: when some rank exited
0 and the job did not fail); 1 when the job failed; 2 on a usage error; 128+N when stopped by
signal N.)";

// Prints the usage line the way the command line really reads: CLI11 knows no PROGRAM.
class Formatter : public CLI::Formatter {
 public:
  std::string make_usage(const CLI::App*, std::string name) const override {
    return fmt::format(
        "Usage: {0} [OPTIONS] PROGRAM [ARGS...]\n"
        "       {0} doctor [--json] [--no-self-test] [--timeout S]   checks this host for meshrt "
        "jobs\n"
        "       (meshrun doctor --help)\n",
        name);
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

// The whole of `text` as a non-negative int.
std::optional<int> to_int(std::string_view text) {
  int value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < 0) return std::nullopt;
  return value;
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

// "N", or torchrun's elastic "MIN:MAX", which meshrun takes only when MIN == MAX.
int parse_nnodes(const std::string& text) {
  const auto colon = text.find(':');
  const std::optional<int> min = to_int(std::string_view(text).substr(0, colon));
  const std::optional<int> max =
      colon == std::string::npos ? min : to_int(std::string_view(text).substr(colon + 1));
  if (!min || !max || *min < 1 || *max < 1) {
    usage_error(fmt::format("--nnodes '{}' is not a positive number (or N:N)", text));
  }
  if (*min != *max) {
    usage_error(
        fmt::format("--nnodes {}: meshrun runs fixed-size jobs, not elastic ones; give "
                    "one number of nodes (--nnodes {} or {}:{})",
                    text, *max, *max, *max));
  }
  return *min;
}

// CLI11 2.1's Range validators print their whole double range; these say what is wanted.
// The largest value number_check passes: seconds become int64 milliseconds (to_ms), which inf
// or 1e300 would overflow into a negative timeout.
constexpr double kMaxNumber = 1e9;

CLI::Validator number_check(bool zero_allowed) {
  return CLI::Validator(
      [zero_allowed](std::string& text) -> std::string {
        double value = 0;
        const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
        const bool ok = ec == std::errc() && end == text.data() + text.size() &&
                        (zero_allowed ? value >= 0 : value > 0) && value <= kMaxNumber;
        return ok ? ""
                  : fmt::format("'{}' is not a {} number up to {:g}", text,
                                zero_allowed ? "non-negative" : "positive", kMaxNumber);
      },
      zero_allowed ? "NONNEGATIVE" : "POSITIVE");
}

CLI::Validator streams_check() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        return parse_streams(text) ? ""
                                   : fmt::format(
                                         "'{}' is not 0-3 or LOCAL_RANK:N,... (0 none, 1 "
                                         "stdout, 2 stderr, 3 both)",
                                         text);
      },
      "N|LR:N,...");
}

CLI::Validator on_rank_failure_check() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        return text == "restart-job" || text == "continue"
                   ? ""
                   : fmt::format("'{}' is not restart-job or continue", text);
      },
      "restart-job|continue");
}

std::string random_run_id() {
  std::random_device rd;
  return fmt::format("{:08x}", rd());
}

// meshrun's own options, in the form CLI11 reads, and PROGRAM ARGS...
struct SplitCommandLine {
  std::vector<std::string> options;
  std::vector<std::string> program;
};

// Finds where PROGRAM starts (the first word that is not an option or an option's value, or the
// word after "--") and rewrites torchrun's forms for CLI11: underscores in long option names
// become dashes, every value is attached with '=', and a bare --tee becomes --tee=3. CLI11 alone
// would take the word after a bare --tee as its value, even the program's name.
SplitCommandLine split_command_line(const std::vector<std::string>& args, const CLI::App& app) {
  SplitCommandLine out;
  size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg.size() < 2 || arg[0] != '-') break;
    if (arg[1] != '-') {  // -m, -h; CLI11 rejects the others.
      out.options.push_back(arg);
      continue;
    }
    const auto eq = arg.find('=');
    std::string name = arg.substr(0, eq);
    std::replace(name.begin() + 2, name.end(), '_', '-');
    std::optional<std::string> value;
    if (eq != std::string::npos) value = arg.substr(eq + 1);
    const CLI::Option* option = app.get_option_no_throw(name);
    if (!value && option != nullptr && option->get_items_expected_min() > 0) {
      if (name == "--tee") {
        const bool valued = i + 1 < args.size() && parse_streams(args[i + 1]).has_value();
        value = valued ? args[++i] : "3";
      } else if (i + 1 < args.size()) {
        value = args[++i];
      }
    }
    out.options.push_back(value ? name + "=" + *value : name);
  }
  out.program.assign(args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
  return out;
}

// `meshrun doctor [options]`: argv[0] is "doctor".
ParsedCommandLine parse_doctor(int argc, const char* const* argv) {
  ParsedCommandLine parsed;
  DoctorOptions& o = parsed.doctor.emplace();
  bool no_self_test = false;
  double timeout_s = 60;
  CLI::App app{
      "meshrun doctor: checks that this host can run meshrt jobs, one line per check (OK, WARN,\n"
      "FAIL, SKIP): meshrt's build and backends with their library versions, CUDA, network\n"
      "interfaces and the one Gloo would use, /dev/shm, ulimits, MASTER_ADDR:MASTER_PORT, every\n"
      "MESHRT_* and torchrun variable set and what meshrt makes of it, and a 2-rank all_reduce\n"
      "self-test of each built backend on this host (loopback only), with its latency and busbw.\n"
      "Runs meshrt-selftest, found next to meshrun, then on PATH.",
      "meshrun doctor"};
  app.footer(
      "Exit status: 0 when nothing failed (WARN and SKIP lines do not fail), 1 when a check\n"
      "failed (its line says what to do), 2 on a usage error.");
  app.add_flag("--json", o.json, "print one JSON object (checks, verdict) instead of the report");
  app.add_flag("--no-self-test", no_self_test,
               "skip the 2-rank self-tests (the quick checks only)");
  app.add_option("--timeout", timeout_s,
                 "seconds each self-test job may run before it is killed and failed (default 60)")
      ->check(number_check(false));
  std::vector<const char*> cli_argv = {"meshrun doctor"};
  for (int i = 1; i < argc; ++i) cli_argv.push_back(argv[i]);
  try {
    app.parse(static_cast<int>(cli_argv.size()), cli_argv.data());
  } catch (const CLI::CallForHelp& e) {
    parsed.exit_status = app.exit(e);
    return parsed;
  } catch (const CLI::ParseError& e) {
    usage_error(fmt::format("doctor: {}", e.what()));
  }
  o.self_test = !no_self_test;
  o.self_test_timeout = std::max(to_ms(timeout_s), std::chrono::milliseconds(1));
  return parsed;
}

// parse_options without the error printing.
ParsedCommandLine parse(int argc, const char* const* argv) {
  if (argc >= 2 && std::string_view(argv[1]) == "doctor") return parse_doctor(argc - 1, argv + 1);
  ParsedCommandLine parsed;
  LaunchOptions& o = parsed.options;
  std::string nnodes = "1";
  std::string nproc = "1";
  std::string endpoint;
  std::string master_port;
  std::string rdzv_backend = "c10d";
  std::string tee;
  std::string redirects;
  std::string status_port;
  std::string on_rank_failure = "restart-job";
  std::optional<std::string> run_id;
  double monitor_s = 0.1, rdzv_timeout_s = 300, grace_s = 5, dump_timeout_s = 10;
  bool module = false, no_python = false, run_path = false, version = false;

  const CLI::Validator positive = number_check(false);
  const CLI::Validator non_negative = number_check(true);
  CLI::App app{
      "meshrun: starts the ranks of a meshrt job on this node, watches them, stops\n"
      "the whole job when one fails, and explains the failure.",
      "meshrun"};
  app.formatter(std::make_shared<Formatter>());
  app.footer(kFooter);
  app.add_option("--nnodes", nnodes,
                 "number of nodes (agents) in the job (default 1); torchrun's MIN:MAX only as N:N "
                 "(jobs have a fixed size)");
  app.add_option("--nproc-per-node", nproc,
                 "ranks to start on this node: a number, gpu (one per visible CUDA device), cpu "
                 "(one per usable CPU) or auto (gpu if there is one, else cpu); default 1");
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
  app.add_option("--rdzv-backend", rdzv_backend,
                 "c10d or static, accepted for torchrun's command lines: meshrun always hosts "
                 "its own store on node 0");
  app.add_option("--rdzv-id", run_id,
                 "run id, the same on every node and kept over restarts (default 'default'; "
                 "random with --standalone)");
  app.add_option("--local-addr", o.local_addr,
                 "this node's address: shown to the other nodes (default: the host name), and "
                 "its interface is the ranks' Gloo interface (MESHRT_GLOO_IFNAME, unless set)");
  app.add_option("--role", o.role, "the ranks' ROLE_NAME (default 'default')");
  app.add_option("--max-restarts", o.max_restarts,
                 "attempts to start again after a failure (default 0)")
      ->check(non_negative);
  app.add_option("--on-rank-failure", on_rank_failure,
                 "restart-job (default): a rank that dies fails the job (dumps, every rank "
                 "stopped, --max-restarts); continue: the job goes on without it, its survivors "
                 "repair in place (MESHRT_ON_RANK_FAILURE=continue), except after a watchdog's "
                 "exit (status 70)")
      ->check(on_rank_failure_check());
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
                 "directory for per-rank logs (attempt_<n>/rank_<r>.log), flight-recorder dumps, "
                 "error files and the summary; default: a fresh directory under /tmp, output to "
                 "the console only");
  app.add_option("--redirects", redirects,
                 "streams that go to the log file only: 0 none, 1 stdout, 2 stderr, 3 both, or "
                 "per local rank 0:3,1:0 (default 3 with --log-dir, else 0)")
      ->check(streams_check());
  app.add_option("--tee", tee,
                 "streams that go to both the console and the log file, same values (a bare "
                 "--tee: 3)")
      ->check(streams_check());
  auto* standalone = app.add_flag("--standalone", o.standalone,
                                  "one node: store on a free port of 127.0.0.1, random run id");
  standalone->excludes(rdzv)->excludes(maddr)->excludes(mport)->excludes(node_rank);
  app.add_flag("-m,--module", module,
               "PROGRAM is a Python module: run `python3 -u -m PROGRAM ARGS` ($PYTHON_EXEC)");
  app.add_flag("--no-python", no_python,
               "run PROGRAM as is, even when it ends in .py (the default for other programs)");
  app.add_flag("--run-path", run_path,
               "PROGRAM is a Python script whatever its name: run `python3 -u PROGRAM ARGS`");
  app.add_option("--report", o.report_dir,
                 "write the ranks' comm summaries, straggler report, scope trees and Chrome "
                 "traces to DIR and, when the job ends, `meshtrace report DIR` (DIR/report.html)");
  app.add_option("--status-port", status_port,
                 "node 0 serves the live status page (HTML at /, JSON at /status.json) on this "
                 "port: 0 (default) picks a free one, off serves none");
  app.add_option("--status-host", o.status_host,
                 "the address the status page binds (default 127.0.0.1); another one makes it "
                 "reachable from other hosts, so the page then wants the token in its URL");
  app.add_flag("--version", version, "print meshrun's version and exit");

  const SplitCommandLine split =
      split_command_line(std::vector<std::string>(argv + std::min(argc, 1), argv + argc), app);
  std::vector<const char*> cli_argv = {"meshrun"};
  for (const std::string& a : split.options) cli_argv.push_back(a.c_str());
  try {
    app.parse(static_cast<int>(cli_argv.size()), cli_argv.data());
  } catch (const CLI::CallForHelp& e) {
    parsed.exit_status = app.exit(e);
    return parsed;
  } catch (const CLI::ParseError& e) {
    usage_error(e.what());
  }
  if (version) {
    std::printf("meshrun %s\n", MESHRT_VERSION);
    parsed.exit_status = 0;
    return parsed;
  }

  if (split.program.empty()) usage_error("no PROGRAM given");
  o.nnodes = parse_nnodes(nnodes);
  try {
    o.nproc_per_node = resolve_nproc_per_node(
        nproc, count_cuda_devices("/dev", std::getenv("CUDA_VISIBLE_DEVICES")), count_cpus());
  } catch (const std::invalid_argument& e) {
    usage_error(fmt::format("--nproc-per-node {}", e.what()));
  }
  if (rdzv_backend != "c10d" && rdzv_backend != "static") {
    usage_error(
        fmt::format("--rdzv-backend {}: meshrun hosts its own store on node 0 (like "
                    "c10d); drop the option",
                    rdzv_backend));
  }
  if (on_rank_failure == "continue") {
    o.on_rank_failure = OnRankFailure::kContinue;
    if (o.max_restarts > 0) {
      usage_error(fmt::format(
          "--on-rank-failure=continue never restarts the job: drop --max-restarts {} (or use "
          "--on-rank-failure=restart-job)",
          o.max_restarts));
    }
  }
  if (!tee.empty()) o.tee = parse_streams(tee);
  if (!redirects.empty()) o.redirects = parse_streams(redirects);
  if (!endpoint.empty()) parse_endpoint(endpoint, o);
  if (!master_port.empty()) o.rdzv_port = parse_port("--master-port", master_port);
  if (status_port == "off") {
    o.status_port.reset();
  } else if (!status_port.empty()) {
    o.status_port = parse_port("--status-port", status_port);
  }
  if (o.status_host.empty()) usage_error("--status-host: give an address");
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
  if (o.role.empty()) usage_error("--role: must be non-empty");
  if (!o.local_addr.empty()) {
    o.local_iface = interface_with_address(o.local_addr);
    if (o.local_iface.empty()) {
      usage_error(
          fmt::format("--local-addr {}: no network interface of this host has it", o.local_addr));
    }
  }
  if (app.count("--report") > 0 && o.report_dir.empty()) usage_error("--report: give a DIR");

  // Python: torchrun runs every PROGRAM with Python; meshrun runs native programs, so only what
  // says it is Python gets an interpreter (-u: unbuffered, so lines reach meshrun as printed).
  if (no_python && (module || run_path)) {
    usage_error("--no-python runs PROGRAM as is: drop -m/--run-path, which start Python");
  }
  if (module && run_path) usage_error("-m and --run-path are two ways to start Python: give one");
  const std::string& program = split.program.front();
  const bool python_script = run_path || (!no_python && !module && program.size() > 3 &&
                                          program.compare(program.size() - 3, 3, ".py") == 0);
  if (module || python_script) {
    const char* python = std::getenv("PYTHON_EXEC");
    o.command = {python != nullptr && *python != '\0' ? python : "python3", "-u"};
    if (module) o.command.push_back("-m");
  }
  o.command.insert(o.command.end(), split.program.begin(), split.program.end());
  return parsed;
}

}  // namespace

int StreamSelection::of(int local_rank) const {
  if (all) return *all;
  const auto it = per_local_rank.find(local_rank);
  return it == per_local_rank.end() ? 0 : it->second;
}

std::optional<StreamSelection> parse_streams(std::string_view text) {
  auto stream_bits = [](std::string_view t) -> std::optional<int> {
    const std::optional<int> v = to_int(t);
    return v && *v <= 3 ? v : std::nullopt;
  };
  StreamSelection s;
  if (text.find(':') == std::string_view::npos) {
    s.all = stream_bits(text);
    return s.all ? std::optional(s) : std::nullopt;
  }
  // torchrun's dict form; a local rank given twice keeps the last value, as there.
  while (!text.empty()) {
    const auto comma = text.find(',');
    const std::string_view item = text.substr(0, comma);
    const auto colon = item.find(':');
    if (colon == std::string_view::npos) return std::nullopt;
    const std::optional<int> rank = to_int(item.substr(0, colon));
    const std::optional<int> bits = stream_bits(item.substr(colon + 1));
    if (!rank || !bits) return std::nullopt;
    s.per_local_rank[*rank] = *bits;
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
    if (text.empty()) return std::nullopt;  // A trailing comma.
  }
  return s;
}

StreamRoute route(const LaunchOptions& o, int local_rank, int stream) {
  const int redirected = o.redirects ? o.redirects->of(local_rank) : (o.log_dir.empty() ? 0 : 3);
  const int teed = o.tee ? o.tee->of(local_rank) : 0;
  const bool to_file_only = (redirected & stream) != 0;
  const bool to_both = (teed & stream) != 0;
  return {!to_file_only || to_both, to_file_only || to_both};
}

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

int count_cuda_devices(const std::string& dev_dir, const char* cuda_visible_devices) {
  int devices = 0;
  if (DIR* dir = ::opendir(dev_dir.c_str())) {
    while (const dirent* e = ::readdir(dir)) {
      const std::string_view name = e->d_name;
      if (name.size() > 6 && name.substr(0, 6) == "nvidia" && to_int(name.substr(6))) ++devices;
    }
    ::closedir(dir);
  }
  if (cuda_visible_devices == nullptr || devices == 0) return devices;
  // CUDA's rule: entries count up to the first invalid one (an index out of range, a repeat,
  // not a number: "-1" hides every device). UUIDs cannot be checked here and count.
  int visible = 0;
  std::set<int> seen;
  std::string_view list = cuda_visible_devices;
  for (;;) {
    const auto comma = list.find(',');
    std::string_view item = list.substr(0, comma);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    if (item.substr(0, 4) == "GPU-" || item.substr(0, 4) == "MIG-") {
      ++visible;
    } else {
      const std::optional<int> index = to_int(item);
      if (!index || *index >= devices || !seen.insert(*index).second) break;
      ++visible;
    }
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return visible;
}

int count_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0) {
    return CPU_COUNT(&set);
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

int resolve_nproc_per_node(std::string_view text, int cuda_devices, int cpus) {
  if (text == "cpu") return cpus;
  if (text == "gpu" || text == "auto") {
    if (cuda_devices > 0) return cuda_devices;
    if (text == "auto") return cpus;
    throw std::invalid_argument(
        "gpu: no CUDA device is visible (no /dev/nvidia<N>, or CUDA_VISIBLE_DEVICES hides them)");
  }
  const std::optional<int> n = to_int(text);
  if (!n || *n < 1) {
    throw std::invalid_argument(
        fmt::format("'{}': give a positive number, gpu, cpu or auto", text));
  }
  return *n;
}

std::string interface_with_address(const std::string& address) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* resolved = nullptr;
  if (::getaddrinfo(address.c_str(), nullptr, &hints, &resolved) != 0) return {};
  ifaddrs* interfaces = nullptr;
  if (::getifaddrs(&interfaces) != 0) {
    ::freeaddrinfo(resolved);
    return {};
  }
  std::string found;
  for (const addrinfo* a = resolved; a != nullptr && found.empty(); a = a->ai_next) {
    for (const ifaddrs* i = interfaces; i != nullptr; i = i->ifa_next) {
      if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != a->ai_family) continue;
      bool same = false;
      if (a->ai_family == AF_INET) {
        same = reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr ==
               reinterpret_cast<const sockaddr_in*>(a->ai_addr)->sin_addr.s_addr;
      } else if (a->ai_family == AF_INET6) {
        same = std::memcmp(&reinterpret_cast<const sockaddr_in6*>(i->ifa_addr)->sin6_addr,
                           &reinterpret_cast<const sockaddr_in6*>(a->ai_addr)->sin6_addr,
                           sizeof(in6_addr)) == 0;
      }
      if (same) {
        found = i->ifa_name;
        break;
      }
    }
  }
  ::freeifaddrs(interfaces);
  ::freeaddrinfo(resolved);
  return found;
}

}  // namespace meshrt::launcher
