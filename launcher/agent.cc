#include "launcher/agent.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "launcher/child_process.h"
#include "launcher/files.h"
#include "launcher/live_monitor.h"
#include "launcher/node_heartbeat.h"
#include "launcher/output_prefixer.h"
#include "launcher/post_mortem.h"
#include "launcher/signals.h"
#include "launcher/status_server.h"
#include "launcher/summary.h"
#include "launcher/unique_fd.h"
#include "runtime/error.h"
#include "runtime/store/dump_keys.h"
#include "runtime/store/exit_keys.h"
#include "runtime/store/prefix_store.h"
#include "runtime/store/store_auth.h"
#include "trace/env.h"

namespace meshrt::launcher {

// One rank started by this agent.
struct LocalRank {
  RankStatus status;
  std::unique_ptr<ChildProcess> process;
  bool ended = false;
};

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// How long ranks asked through their dump pipes get (node 0's store lost), at most.
constexpr milliseconds kPipeDumpWait{5000};
// How often their dump files are looked for.
constexpr milliseconds kDumpPoll{50};
// Store waits are cut in slices this long so that signals and the children stay watched.
constexpr milliseconds kPollSlice{200};
// How long the ranks' output may go on after they ended (a helper holding the pipe).
constexpr milliseconds kOutputDrain{1000};
// Bound on fetching one dump from the store, and on each meshtrace run (analyze, report).
constexpr milliseconds kFetchTimeout{10000};
constexpr milliseconds kMeshtraceTimeout{60000};
// How long node 0 waits, beyond the grace period, for the others to read the outcome.
constexpr milliseconds kLeaveMargin{10000};
// While stopping ranks, poll faster than the monitor interval: the job is waiting on us.
constexpr milliseconds kStoppingPoll{20};
// How often an agent looks for a dump request (to count its stopped ranks' dumps for them).
constexpr milliseconds kDumpSignalLook{500};

// meshrun's own lines go to stderr, whole.
template <typename... Args>
void say(fmt::format_string<Args...> format, Args&&... args) {
  write_all(2, "meshrun: " + fmt::format(format, std::forward<Args>(args)...) + "\n");
}

std::string key(const char* what, int attempt) {
  return fmt::format("attempts/{}/{}", attempt, what);
}

bool has_key(Store& store, const std::string& k) { return store.check({&k, 1}); }

bool in_environment(const char* name) { return std::getenv(name) != nullptr; }

// The variables --report points at its directory; `{rank}` becomes the rank.
constexpr std::pair<const char*, const char*> kReportFiles[] = {
    {"MESHRT_COMMS_SUMMARY", "comms_{rank}.json"},
    {"MESHRT_STRAGGLER_REPORT", "stragglers.json"},
    {"MESHRT_SCOPE_TREE", "scope_tree_{rank}.json"},
    {"MESHRT_TRACE_CHROME", "trace_{rank}.json"},
};

// The failure of a node whose agent was lost: its first rank stands for all of them.
Failure lost_node_failure(const NodeInfo& n) {
  Failure f;
  f.rank = n.rank_offset;
  f.node = n.node_rank;
  f.host = n.host;
  f.pid = n.pid;
  f.agent_lost = true;
  f.time = utc_now();
  return f;
}

}  // namespace

Agent::Agent(LaunchOptions options) : options_(std::move(options)) {
  if (const char* p = std::getenv("MESHRT_DUMP_PREFIX")) user_dump_prefix_ = p;
}

Agent::~Agent() = default;

std::string Agent::attempt_dir(int attempt) const {
  return fmt::format("{}/attempt_{}", run_dir_, attempt);
}

std::string Agent::dump_prefix(int attempt) const {
  return user_dump_prefix_.value_or(attempt_dir(attempt) + "/fr_trace_");
}

std::string Agent::dump_pipe_stem(int attempt) const {
  for (const char* name : {"MESHRT_DUMP_PIPE", "TORCH_NCCL_DEBUG_INFO_PIPE_FILE"}) {
    if (const char* v = std::getenv(name); v != nullptr && *v != '\0') return v;
  }
  return attempt_dir(attempt) + "/dump_pipe_";
}

std::string Agent::error_file(int attempt, int rank) const {
  return fmt::format("{}/error_{}.json", attempt_dir(attempt), rank);
}

bool Agent::writes_log_files() const {
  for (int lr = 0; lr < options_.nproc_per_node; ++lr) {
    if (route(options_, lr, kStdoutBit).file || route(options_, lr, kStderrBit).file) return true;
  }
  return false;
}

std::vector<std::string> Agent::child_env(int rank, int local_rank, int attempt) const {
  const NodeInfo& me = rendezvous_->self();
  const int world = rendezvous_->world_size();
  std::vector<std::pair<std::string, std::string>> vars = {
      {"RANK", std::to_string(rank)},
      {"LOCAL_RANK", std::to_string(local_rank)},
      {"WORLD_SIZE", std::to_string(world)},
      {"LOCAL_WORLD_SIZE", std::to_string(me.nproc)},
      {"GROUP_RANK", std::to_string(me.node_rank)},
      {"GROUP_WORLD_SIZE", std::to_string(rendezvous_->nnodes())},
      {"ROLE_RANK", std::to_string(rank)},
      {"ROLE_WORLD_SIZE", std::to_string(world)},
      {"MASTER_ADDR", rendezvous_->store_host()},
      {"MASTER_PORT", std::to_string(rendezvous_->store_port())},
      {"MESHRT_STORE_EXTERNAL", "1"},
      {"MESHRT_RUN_ID", options_.run_id},
      {"TORCHELASTIC_RUN_ID", options_.run_id},
      {"MESHRT_RESTART_COUNT", std::to_string(attempt)},
      {"TORCHELASTIC_RESTART_COUNT", std::to_string(attempt)},
      {"TORCHELASTIC_MAX_RESTARTS", std::to_string(options_.max_restarts)},
      {"ROLE_NAME", options_.role},
      {"TORCHELASTIC_ERROR_FILE", error_file(attempt, rank)},
      {"MESHRT_LAUNCHER", "meshrun"},
      {"MESHRT_LOG_DIR", run_dir_},
      {"MESHRT_DUMP_PREFIX", dump_prefix(attempt)},
      {"MESHRT_DUMP_PIPE", dump_pipe_stem(attempt)},
  };
  // The secret reaches the ranks only through their environment (readable by this user alone).
  if (!store_token_.empty()) vars.emplace_back(kStoreTokenEnv, store_token_);
  // Defaults: meshrun's own environment wins over these.
  std::vector<std::pair<std::string, std::string>> defaults;
  if (set_omp_threads_) defaults.emplace_back("OMP_NUM_THREADS", "1");
  // The runtime's survivors repair in place around a dead peer instead of exiting.
  if (continues_on_failure()) defaults.emplace_back("MESHRT_ON_RANK_FAILURE", "continue");
  if (!options_.local_iface.empty() && !in_environment("GLOO_SOCKET_IFNAME")) {
    defaults.emplace_back("MESHRT_GLOO_IFNAME", options_.local_iface);
  }
  if (!report_dir_.empty()) {
    for (const auto& [name, file] : kReportFiles) {
      // "{rank}" stays: the rank expands it, as for any user-given path.
      defaults.emplace_back(name, report_dir_ + "/" + file);
    }
  }
  std::vector<std::string> env;
  for (const std::string& entry : current_environment()) {
    const std::string name = entry.substr(0, entry.find('='));
    if (std::none_of(vars.begin(), vars.end(), [&](const auto& v) { return v.first == name; })) {
      env.push_back(entry);
    }
  }
  for (const auto& [name, value] : vars) env.push_back(name + "=" + value);
  for (const auto& [name, value] : defaults) {
    if (!in_environment(name.c_str())) env.push_back(name + "=" + value);
  }
  return env;
}

int Agent::run() {
  try {
    if (options_.log_dir.empty()) {
      std::string tmpl = fmt::format("/tmp/meshrun-{}-XXXXXX", options_.run_id);
      if (::mkdtemp(tmpl.data()) == nullptr) {
        say("cannot create a run directory under /tmp");
        return 1;
      }
      run_dir_ = tmpl;
    } else {
      make_dirs(options_.log_dir);
      run_dir_ = std::filesystem::absolute(options_.log_dir).lexically_normal().string();
    }
    if (!options_.report_dir.empty()) {
      make_dirs(options_.report_dir);
      report_dir_ = std::filesystem::absolute(options_.report_dir).lexically_normal().string();
    }
  } catch (const std::exception& e) {
    say("{}", e.what());
    return 1;
  }
  // torchrun's default, and its notice: N ranks with a thread per core each would overload the
  // node.
  set_omp_threads_ = options_.nproc_per_node > 1 && !in_environment("OMP_NUM_THREADS");
  if (set_omp_threads_) {
    say("setting OMP_NUM_THREADS=1 for each rank by default, to avoid overloading the system; "
        "set it yourself to tune your program's performance");
  }
  if (options_.log_dir.empty() && writes_log_files()) {
    say("rank logs go to {}/attempt_<n>/rank_<rank>.log (--log-dir chooses the directory)",
        run_dir_);
  }
  const int status = run_job();
  if (options_.log_dir.empty()) remove_plumbing(run_dir_);
  return status;
}

void Agent::remove_plumbing(const std::string& dir) {
  // Our own run directory keeps what a person reads (rank logs, dumps, the summary): the dump
  // FIFOs and the status page's address go, then every directory left empty, the run's too.
  namespace fs = std::filesystem;
  std::error_code ignored;
  std::vector<fs::path> dirs{dir};
  for (auto it = fs::recursive_directory_iterator(dir, ignored);
       it != fs::recursive_directory_iterator(); it.increment(ignored)) {
    const fs::path& path = it->path();
    if (it->is_directory(ignored)) {
      dirs.push_back(path);
    } else if (it->is_fifo(ignored) || path.filename() == "status_url" ||
               path.filename() == "status_token") {
      fs::remove(path, ignored);
    }
  }
  // Deepest first: a parent is empty only once its children are gone.
  for (auto d = dirs.rbegin(); d != dirs.rend(); ++d) fs::remove(*d, ignored);  // Empty only.
}

int Agent::run_job() {
  AttemptOutcome outcome;
  try {
    RendezvousOptions r;
    r.host = options_.rdzv_host;
    r.port = options_.rdzv_port;
    r.run_id = options_.run_id;
    r.nnodes = options_.nnodes;
    r.node_rank = options_.node_rank;
    r.nproc = options_.nproc_per_node;
    r.max_restarts = options_.max_restarts;
    r.on_rank_failure = continues_on_failure() ? "continue" : "restart-job";
    r.log_dir = run_dir_;
    r.local_addr = options_.local_addr;
    r.timeout = options_.rdzv_timeout;
    r.should_stop = [] { return interrupt_count() > 0; };
    // One node: a fresh secret per job. Several: each agent needs the same one, which only the
    // user can hand them all, so it must come from the environment.
    store_token_ = store_token_from_env();
    if (store_token_.empty() && options_.nnodes == 1) store_token_ = generate_store_token();
    r.token = store_token_;
    rendezvous_ = std::make_unique<Rendezvous>(std::move(r));
    if (store_token_.empty() && rendezvous_->hosts_reachable_store()) {
      say("warning: the job's store at {}:{} is reachable from other hosts and has no token: "
          "anyone who reaches it can stop the job; set {} to the same secret on every node",
          rendezvous_->store_host(), rendezvous_->store_port(), kStoreTokenEnv);
    }
    if (rendezvous_->node_rank() == 0) start_status_server();

    for (int attempt = 0;; ++attempt) {
      outcome = run_attempt(attempt);
      if (outcome.success()) break;
      if (outcome.failure && outcome.failure->interrupt_signal != 0) break;
      if (attempt >= options_.max_restarts) break;
      say("attempt {} failed: {}; restarting as attempt {} (--max-restarts {}; attempts count from "
          "0, as attempt_<n>/)",
          attempt,
          outcome.failure                ? describe(*outcome.failure)
          : outcome.silent_nodes.empty() ? "stopped on request (" + outcome.stop_reason + ")"
                                         : std::string("nodes did not report"),
          attempt + 1, options_.max_restarts);
    }
  } catch (const Error& e) {
    // The store or the rendezvous failed: this node cannot go on (its ranks are gone already).
    // Past the rendezvous, on another node, a store that fails is node 0's, lost.
    const bool lost_store = e.code() == ErrorCode::kPeerFailure ||
                            (rendezvous_ != nullptr && rendezvous_->node_rank() > 0);
    say("{}{}", lost_store ? "lost node 0's store: " : "", e.detail());
    return interrupt_count() > 0 ? 128 + first_interrupt_signal() : 1;
  } catch (const std::exception& e) {
    say("{}", e.what());
    return 1;
  }

  if (!outcome.success()) {
    report_failure(outcome);
  } else {
    if (outcome.continued()) report_continued(outcome);
    if (!report_dir_.empty() && rendezvous_->node_rank() == 0) say("{}", make_job_report(""));
  }
  try {
    rendezvous_->leave(options_.grace_period + kLeaveMargin,
                       heartbeat_ ? static_cast<int>(heartbeat_->lost().size()) : 0);
  } catch (const Error& e) {
    say("could not tell node 0 that this node is done: {}", e.detail());
  }
  if (outcome.success()) return 0;
  if (outcome.failure && outcome.failure->interrupt_signal != 0) {
    return 128 + outcome.failure->interrupt_signal;
  }
  return 1;
}

void Agent::start_status_server() {
  board_ = std::make_unique<LiveBoard>(options_.run_id,
                                       live_monitor_options_from_env().stall.count() / 1000);
  if (!options_.status_port) return;
  StatusServerOptions so;
  so.host = options_.status_host;
  so.port = *options_.status_port;
  so.token = status_token_from_env_or_new();
  try {
    status_ = std::make_unique<StatusServer>(so, *board_);
  } catch (const std::exception& e) {
    say("{}; the job goes on without it", e.what());
    return;
  }
  // The way in, for the job's owner only: the URL carries the token (meshtrace live reads the
  // file too), and the token alone is what a Prometheus scrape config's credentials_file wants.
  write_private_file(run_dir_ + "/status_url", status_->url() + "\n");
  // No newline: the file is a credential as it stands (Prometheus sends its bytes as they are).
  write_private_file(run_dir_ + "/status_token", status_->token());
  // Said at once to a person at a terminal; a job logging to files hears of it at its first stall.
  if (::isatty(STDERR_FILENO) == 1) say_status_url();
}

void Agent::say_status_url() {
  if (!status_ || status_url_said_.exchange(true)) return;
  say("live status: {} (JSON: status.json, Prometheus: metrics; in a terminal: meshtrace live "
      "{}; keep the token to yourself)",
      status_->url(), status_->url());
}

AttemptOutcome Agent::run_attempt(int attempt) {
  make_dirs(attempt_dir(attempt));
  rendezvous_->barrier(key("start", attempt));
  PrefixStore job(fmt::format("meshrt/{}/{}", options_.run_id, attempt), rendezvous_->client());
  const NodeInfo& me = rendezvous_->self();
  heartbeat_ = std::make_unique<NodeHeartbeat>(rendezvous_->client(), key("alive", attempt),
                                               rendezvous_->nnodes(), me.node_rank);

  std::vector<LocalRank> ranks(me.nproc);
  std::vector<OutputStream> streams;
  for (int lr = 0; lr < me.nproc; ++lr) {
    const int rank = me.rank_offset + lr;
    const StreamRoute out_route = route(options_, lr, kStdoutBit);
    const StreamRoute err_route = route(options_, lr, kStderrBit);
    // One left by an earlier run in the same --log-dir would be taken for this rank's.
    std::error_code ignored;
    std::filesystem::remove(error_file(attempt, rank), ignored);
    std::shared_ptr<UniqueFd> log;
    if (out_route.file || err_route.file) {
      const std::string path = fmt::format("{}/rank_{}.log", attempt_dir(attempt), rank);
      log = std::make_shared<UniqueFd>(
          ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
      if (!*log) {
        say("cannot write {}; rank {}'s output is lost", path, rank);
        log.reset();
      }
    }
    Pipe out = make_pipe();
    Pipe err = make_pipe();
    SpawnOptions so;
    so.argv = options_.command;
    so.env = child_env(rank, lr, attempt);
    so.stdout_fd = out.write.get();
    so.stderr_fd = err.write.get();
    LocalRank& r = ranks[lr];
    r.process = std::make_unique<ChildProcess>(so);
    r.status.rank = rank;
    r.status.local_rank = lr;
    r.status.node = me.node_rank;
    r.status.pid = r.process->pid();
    const std::string prefix = fmt::format("[rank{}]: ", rank);
    streams.push_back(
        {std::move(out.read), prefix, out_route.console ? 1 : -1, out_route.file ? log : nullptr});
    streams.push_back(
        {std::move(err.read), prefix, err_route.console ? 2 : -1, err_route.file ? log : nullptr});
  }
  OutputPrefixer output(std::move(streams));
  {
    // Node 0 watches the ranks' live progress for stalls while the attempt runs.
    std::unique_ptr<LiveMonitor> live;
    if (me.node_rank == 0) {
      live = std::make_unique<LiveMonitor>(
          live_monitor_options_from_env(), *board_, attempt,
          std::make_shared<PrefixStore>(fmt::format("meshrt/{}/{}", options_.run_id, attempt),
                                        rendezvous_->client()),
          rendezvous_->world_size(), attempt_dir(attempt) + "/live",
          find_meshtrace(executable_dir()), [this](const std::string& line) {
            say("{}", line);
            // The first stall is when the page is wanted: say where it is, if not said yet.
            if (line.starts_with("stall ")) say_status_url();
          });
    }
    try {
      monitor(attempt, ranks, job);
    } catch (const Error&) {
      dump_through_pipes(attempt, ranks);
      throw;
    }
  }
  output.finish(kOutputDrain);

  std::vector<RankStatus> mine;
  for (LocalRank& r : ranks) {
    r.status.dumped = std::filesystem::exists(dump_prefix(attempt) + std::to_string(r.status.rank));
    mine.push_back(r.status);
  }
  AttemptOutcome outcome = gather_outcome(attempt, mine);
  if (outcome.success()) return outcome;
  // Node 0 collects every dump into its attempt directory; the others send theirs over.
  if (me.node_rank == 0) {
    gather_dumps(outcome);
  } else {
    for (const RankStatus& s : mine) {
      if (!s.dumped) continue;
      if (const auto dump = read_file(dump_prefix(attempt) + std::to_string(s.rank))) {
        publish_dump(rendezvous_->store(), attempt, s.rank, *dump);
      }
    }
  }
  return outcome;
}

void Agent::publish_failure(int attempt, const Failure& failure) {
  const std::string value = to_json(failure);
  rendezvous_->store().compare_set(key("failure", attempt), {}, as_bytes(value));
}

void Agent::publish_interrupt(int attempt) {
  Failure f;
  f.node = rendezvous_->node_rank();
  f.host = rendezvous_->self().host;
  f.pid = ::getpid();
  f.interrupt_signal = first_interrupt_signal();
  f.time = utc_now();
  publish_failure(attempt, f);
  rendezvous_->store().set(key("stop", attempt), as_bytes(std::string("interrupted")));
}

void Agent::monitor(int attempt, std::vector<LocalRank>& ranks, Store& job) {
  Store& store = rendezvous_->store();
  const NodeInfo& me = rendezvous_->self();
  const std::string stop_key = key("stop", attempt);
  bool stopping = false;
  bool killed = false;
  Clock::time_point kill_at;
  int interrupts_seen = 0;
  const bool continuing = continues_on_failure();
  std::set<int> lost_nodes;  // Nodes left behind (--on-rank-failure=continue).

  // Reaps the ranks that ended; returns the first that failed on its own, if any. A rank that
  // ended without counting its dump (SIGKILL, an early exit, a crash whose dump a cloned child
  // wrote) is counted for it in the job's dump count, so that neither its peers' watchdogs nor
  // any agent (remote ones included) waits for a dump that cannot come.
  auto reap = [&]() -> LocalRank* {
    LocalRank* failed = nullptr;
    for (LocalRank& r : ranks) {
      if (r.ended) continue;
      if (auto exit = r.process->poll()) {
        r.ended = true;
        remove_segments_of(r.status.pid);
        if (board_) {
          board_->rank_ended(r.status.rank, exit->signal != 0
                                                ? "killed by " + signal_name(exit->signal)
                                                : "exited " + std::to_string(exit->exit_code));
        }
        r.status.exit = *exit;
        r.status.end_time = utc_now();
        if (failed == nullptr && r.status.failed()) failed = &r;
        try {
          dump_keys::count_dump_once(job, r.status.rank, "meshrun");
          // A rank that ended without reaching the exit barrier (which records it first): its
          // peers still waiting for it in an op fail at once instead of at the op timeout.
          exit_keys::record_once(job, r.status.rank,
                                 nlohmann::json{{"ended", describe(*exit)}}.dump());
        } catch (const std::exception& e) {
          say("cannot record rank {}'s end in the store: {}", r.status.rank, e.what());
        }
      }
    }
    return failed;
  };
  // Once some rank asked for dumps: a rank found stopped (SIGSTOP) cannot dump, so it is
  // counted as done at once, and neither its peers' watchdogs nor this agent wait the dump
  // timeout for it; the ranks' wait and this agent's then end together.
  // Store errors propagate as the loop's other requests' do: a lost store ends the attempt.
  std::optional<Clock::time_point> dump_asked_at;
  Clock::time_point next_dump_look = Clock::now();
  auto watch_dumps = [&] {
    if (!dump_asked_at) {
      if (!dump_requested(job)) return;
      dump_asked_at = Clock::now();
    }
    for (LocalRank& r : ranks) {
      if (r.ended || r.status.frozen || !r.process->stopped()) continue;
      r.status.frozen = true;
      if (dump_keys::count_dump_once(job, r.status.rank, "meshrun")) {
        say("rank {} (pid {}) is stopped (SIGSTOP or a debugger): it cannot dump its flight "
            "recorder; not waiting for it",
            r.status.rank, r.status.pid);
      }
    }
  };

  // Only ranks still running are signalled (and marked as stopped by meshrun). A stopped rank
  // gets SIGCONT after the signal, as a shell does for its stopped jobs: otherwise a SIGTERM
  // would wait until the grace period's SIGKILL.
  auto signal_all = [&](int signal) {
    reap();
    for (LocalRank& r : ranks) {
      if (r.ended) continue;
      r.process->signal_group(signal);
      if (signal != SIGKILL && signal != SIGCONT) r.process->signal_group(SIGCONT);
      r.status.stop_signal = signal;
    }
  };
  auto begin_stop = [&](int signal) {
    if (stopping) return;
    stopping = true;
    signal_all(signal);
    kill_at = Clock::now() + options_.grace_period;
  };
  // The failure of a rank of this node that ended badly on its own.
  auto failure_of = [&](const LocalRank& r) {
    Failure f;
    f.rank = r.status.rank;
    f.local_rank = r.status.local_rank;
    f.node = me.node_rank;
    f.host = me.host;
    f.pid = r.status.pid;
    f.exit = r.status.exit;
    f.time = r.status.end_time;
    if (const auto file = read_error_file(error_file(attempt, f.rank))) {
      f.error_file = file->path;
      f.error_message = file->message;
    }
    return f;
  };
  // --on-rank-failure=continue: ranks from_rank .. from_rank+nranks-1 died (`first` says how:
  // a rank, or the agent of a node with its ranks); the job goes on without them. Their exit
  // records are written already (reap, or the caller for a lost node). Counts them as dead in
  // the launcher's store, once whichever agent sees them; keeps the job's first death (its
  // failure if every rank dies); returns "the job continues with N of W ranks" or why not.
  auto leave_behind = [&](const Failure& first, int from_rank, int nranks) -> std::string {
    const int world = rendezvous_->world_size();
    int64_t dead = -1;
    try {
      store.compare_set(key("first_death", attempt), {}, as_bytes(to_json(first)));
      for (int r = from_rank; r < from_rank + nranks; ++r) {
        claim_once(store, fmt::format("attempts/{}/dead/rank{}", attempt, r), "1",
                   key("dead", attempt));
      }
      dead = store.add(key("dead", attempt), 0);
    } catch (const std::exception& e) {
      say("cannot count the dead ranks in the store: {}", e.what());
    }
    if (dead >= world) return "every rank has died: the job failed";
    if (dead < 0) return "the job continues without it";
    return fmt::format("the job continues with {} of {} ranks", world - dead, world);
  };

  // Records the job's first failure, has every rank that can dump its flight recorder (ranks
  // of meshrt), then stops this node's ranks and asks the other agents to stop theirs.
  auto fail_job = [&](const Failure& f, const std::string& what) {
    publish_failure(attempt, f);
    // The ranks run meshrt when init() counted them in the job's store: only then can they dump,
    // and does a failure wait for their dumps.
    const bool meshrt_ranks = f.exit.exit_code == kWatchdogExitCode || dump_requested(job) ||
                              has_key(job, dump_keys::kRanksThatDump);
    if (meshrt_ranks) {
      // Any failure (a watchdog's, or a rank or node lost before a watchdog could act): every
      // surviving rank dumps before it is stopped. Their watchdogs poll this signal, as they
      // poll a timed-out peer's.
      // "<rank>:<why>": the ranks say meshrun asked on the failed rank's behalf, and why.
      const std::string why =
          f.interrupt_signal != 0 ? fmt::format("meshrun got {}", signal_name(f.interrupt_signal))
          : f.agent_lost          ? fmt::format("the agent of node {} was lost", f.node)
          : f.exit.signal != 0
              ? fmt::format("rank {} died of {}", f.rank, signal_name(f.exit.signal))
              : fmt::format("rank {} exited with status {}", f.rank, f.exit.exit_code);
      const std::string rank = fmt::format("{}:{}", f.rank, why);
      try {
        job.compare_set(dump_keys::kDumpSignal, {}, as_bytes(rank));
      } catch (const std::exception& e) {
        say("cannot ask the ranks to dump: {}", e.what());
      }
      // The dump timeout counts from the first request: a rank that failed after waiting for
      // its peers' dumps has spent it already, and waiting again would double it.
      watch_dumps();
      if (!dump_asked_at) dump_asked_at = Clock::now();
      const milliseconds wait = std::max(
          milliseconds(200), options_.dump_timeout - std::chrono::duration_cast<milliseconds>(
                                                         Clock::now() - *dump_asked_at));
      say("{}; waiting up to {:.1f} s for every rank's flight-recorder dump", what,
          wait.count() / 1000.0);
      // Ranks that end meanwhile without a dump are counted as they are reaped.
      const int64_t written = wait_for_dumps(
          job, rendezvous_->world_size(), wait, [] { return interrupt_count() > 0; },
          [&] {
            reap();
            watch_dumps();
          });
      if (written < rendezvous_->world_size()) {
        say("only {} of {} ranks finished their dumps within {:.1f} s of the request", written,
            rendezvous_->world_size(), options_.dump_timeout.count() / 1000.0);
      }
    }
    store.set(stop_key, as_bytes(f.agent_lost ? fmt::format("node {} lost", f.node)
                                              : fmt::format("rank {} failed", f.rank)));
    begin_stop(SIGTERM);
  };

  for (;;) {
    LocalRank* failed = reap();
    // Every 500 ms, as the ranks' watchdogs poll the signal: agents of many nodes share node 0's
    // store.
    if (!stopping && Clock::now() >= next_dump_look) {
      watch_dumps();
      next_dump_look = Clock::now() + kDumpSignalLook;
    }
    const int interrupts = interrupt_count();
    if (interrupts > interrupts_seen) {
      if (interrupts_seen == 0) {
        publish_interrupt(attempt);
        // Interrupting a stalled job is how people give up on a hang: have every rank dump
        // first, so that the post-mortem can say what hung (a second interrupt skips this).
        const std::string stall = board_ ? board_->stall() : "";
        if (!stall.empty() && !stopping && has_key(job, dump_keys::kRanksThatDump)) {
          say("received {} during a stall ({}): asking every rank for its flight-recorder dump "
              "before passing it on (again to kill them at once)",
              signal_name(first_interrupt_signal()), stall);
          try {
            job.compare_set(dump_keys::kDumpSignal, {},
                            as_bytes(fmt::format("-1:meshrun got {} during a stall in {}",
                                                 signal_name(first_interrupt_signal()), stall)));
            watch_dumps();
            wait_for_dumps(
                job, rendezvous_->world_size(), options_.dump_timeout,
                [] { return interrupt_count() > 1; },
                [&] {
                  reap();
                  watch_dumps();
                });
          } catch (const std::exception& e) {
            say("cannot ask the ranks to dump: {}", e.what());
          }
        } else {
          say("received {}: passing it to the ranks (again to kill them)",
              signal_name(first_interrupt_signal()));
        }
        begin_stop(first_interrupt_signal());
      }
      if (interrupts >= 2 && !killed) {
        signal_all(SIGKILL);
        killed = true;
      }
      interrupts_seen = interrupts;
    }

    if (continuing && !stopping) {
      // Every rank that died since the last look is left behind (reap wrote its exit record,
      // which its peers read to repair around it); the watchdog's exit, a hang rather than a
      // death, still fails the job.
      failed = nullptr;
      for (LocalRank& r : ranks) {
        if (!r.ended || !r.status.failed() || r.status.left_behind) continue;
        if (r.status.exit.signal == 0 && r.status.exit.exit_code == kWatchdogExitCode) {
          if (failed == nullptr) failed = &r;
          continue;
        }
        r.status.left_behind = true;
        const Failure f = failure_of(r);
        say("{}; {} (--on-rank-failure=continue)", describe_death(r.status),
            leave_behind(f, f.rank, 1));
        if (!f.error_file.empty()) {
          say("rank {}'s error file {}: {}", f.rank, f.error_file, f.error_message);
        }
      }
    }
    if (failed != nullptr && !stopping) {
      const Failure f = failure_of(*failed);
      fail_job(f, fmt::format("rank {} {}", f.rank, describe(f.exit)));
    }
    if (continuing && !stopping && heartbeat_) {
      // A lost node's ranks are dead (or cannot be reached): count their dumps and write their
      // exit records for them, so that nothing waits for them, and go on.
      for (const int node : heartbeat_->lost()) {
        if (!lost_nodes.insert(node).second) continue;
        const NodeInfo& n = rendezvous_->nodes()[node];
        const Failure f = lost_node_failure(n);
        try {
          // The first agent to see it gives the time.
          store.compare_set(fmt::format("attempts/{}/lost/{}", attempt, node), {},
                            as_bytes(to_json(f)));
          for (int r = n.rank_offset; r < n.rank_offset + n.nproc; ++r) {
            dump_keys::count_dump_once(job, r, "meshrun");
            exit_keys::record_once(
                job, r,
                nlohmann::json{{"ended", fmt::format("lost with the agent of node {}", node)}}
                    .dump());
          }
        } catch (const std::exception& e) {
          say("cannot record node {}'s ranks as dead in the store: {}", node, e.what());
        }
        say("node {} (host {}, agent pid {}) was lost at {}: its ranks {}-{} are counted as "
            "dead; {} (--on-rank-failure=continue)",
            node, n.host, n.pid, f.time, n.rank_offset, n.rank_offset + n.nproc - 1,
            leave_behind(f, n.rank_offset, n.nproc));
      }
    }
    if (!continuing && !stopping && heartbeat_) {
      if (const std::vector<int> lost = heartbeat_->lost(); !lost.empty()) {
        // Its ranks died with it (or can no longer be reached): count them as done with their
        // dumps, which they cannot write, and fail the job now rather than at the op timeout.
        Failure f = lost_node_failure(rendezvous_->nodes()[lost.front()]);
        for (const int node : lost) {
          const NodeInfo& l = rendezvous_->nodes()[node];
          for (int r = l.rank_offset; r < l.rank_offset + l.nproc; ++r) {
            try {
              dump_keys::count_dump_once(job, r, "meshrun");
            } catch (const std::exception& e) {
              say("cannot count rank {}'s missing dump in the store: {}", r, e.what());
            }
          }
        }
        fail_job(f, describe(f));
      }
    }
    if (!stopping && has_key(store, stop_key)) begin_stop(SIGTERM);
    if (stopping && !killed && Clock::now() >= kill_at) {
      signal_all(SIGKILL);
      killed = true;
    }
    if (std::all_of(ranks.begin(), ranks.end(), [](const LocalRank& r) { return r.ended; })) {
      return;
    }
    std::this_thread::sleep_for(stopping ? std::min(options_.monitor_interval, kStoppingPoll)
                                         : options_.monitor_interval);
  }
}

void Agent::dump_through_pipes(int attempt, const std::vector<LocalRank>& ranks) {
  std::vector<int> asked;
  for (const LocalRank& r : ranks) {
    if (r.ended) continue;
    // The rank's watchdog made the FIFO; writing never blocks (the rank holds it open).
    const std::string pipe = dump_pipe_stem(attempt) + std::to_string(r.status.rank) + ".pipe";
    UniqueFd fd(::open(pipe.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC));
    if (fd && ::write(fd.get(), "d", 1) == 1) asked.push_back(r.status.rank);
  }
  if (asked.empty()) return;
  say("lost node 0's store: asking ranks {} to dump through their pipes", fmt::join(asked, ", "));
  const auto deadline = Clock::now() + std::min<milliseconds>(options_.dump_timeout, kPipeDumpWait);
  auto dumped = [&] {
    return std::all_of(asked.begin(), asked.end(), [&](int rank) {
      return std::filesystem::exists(dump_prefix(attempt) + std::to_string(rank));
    });
  };
  while (!dumped() && Clock::now() < deadline) std::this_thread::sleep_for(kDumpPoll);
  say("flight recorder: {} in {}<rank> (node 0 cannot gather them)",
      dumped() ? "dumps written" : "not every asked rank dumped", dump_prefix(attempt));
}

AttemptOutcome Agent::gather_outcome(int attempt, const std::vector<RankStatus>& mine) {
  Store& store = rendezvous_->store();
  const int nnodes = rendezvous_->nnodes();
  store.set(fmt::format("attempts/{}/result/{}", attempt, rendezvous_->node_rank()),
            as_bytes(to_json(mine)));
  std::vector<std::string> keys;
  for (int k = 0; k < nnodes; ++k) keys.push_back(fmt::format("attempts/{}/result/{}", attempt, k));
  const std::string stop_key = key("stop", attempt);

  // While the job runs elsewhere, wait without a bound (the ranks' own timeouts and watchdogs
  // bound a hang). Once it is stopping, the others have a grace period to report.
  std::optional<Clock::time_point> deadline;
  int interrupts_seen = 0;
  for (;;) {
    try {
      store.wait(keys, kPollSlice);
      break;
    } catch (const Error& e) {
      if (e.code() != ErrorCode::kTimeout) throw;
    }
    const int interrupts = interrupt_count();
    if (interrupts > interrupts_seen && interrupts_seen == 0) publish_interrupt(attempt);
    interrupts_seen = interrupts;
    if (interrupts >= 2) break;
    // Nodes whose agent stopped beating will never report: stop waiting once only they remain.
    if (heartbeat_) {
      const std::vector<int> lost = heartbeat_->lost();
      const bool only_lost_missing = std::all_of(keys.begin(), keys.end(), [&](const auto& k) {
        const int node = static_cast<int>(&k - keys.data());
        return has_key(store, k) || std::find(lost.begin(), lost.end(), node) != lost.end();
      });
      if (only_lost_missing) break;
    }
    if (!deadline && has_key(store, stop_key)) {
      deadline =
          Clock::now() + options_.grace_period + options_.dump_timeout + std::chrono::seconds(10);
    }
    if (deadline && Clock::now() >= *deadline) break;
  }

  AttemptOutcome o;
  o.attempt = attempt;
  for (int k = 0; k < nnodes; ++k) {
    if (!has_key(store, keys[k])) {
      // A node lost while the job went on without it (--on-rank-failure=continue).
      if (const std::string lost = fmt::format("attempts/{}/lost/{}", attempt, k);
          continues_on_failure() && has_key(store, lost)) {
        o.lost_nodes.push_back(failure_from_json(to_string(store.get(lost, kPollSlice))));
      } else {
        o.silent_nodes.push_back(k);
      }
      continue;
    }
    for (RankStatus& s : statuses_from_json(to_string(store.get(keys[k], kPollSlice)))) {
      o.ranks.push_back(std::move(s));
    }
  }
  std::sort(o.ranks.begin(), o.ranks.end(),
            [](const RankStatus& a, const RankStatus& b) { return a.rank < b.rank; });
  if (const std::string fk = key("failure", attempt); has_key(store, fk)) {
    o.failure = failure_from_json(to_string(store.get(fk, kPollSlice)));
  }
  if (has_key(store, stop_key)) o.stop_reason = to_string(store.get(stop_key, kPollSlice));
  // Every rank died, none was left to go on with: the first death failed the job.
  if (const std::string first = key("first_death", attempt);
      !o.failure && o.continued() && o.silent_nodes.empty() &&
      std::all_of(o.ranks.begin(), o.ranks.end(),
                  [](const RankStatus& r) { return r.left_behind; }) &&
      has_key(store, first)) {
    o.failure = failure_from_json(to_string(store.get(first, kPollSlice)));
  }
  return o;
}

void Agent::gather_dumps(AttemptOutcome& outcome) {
  const std::string from = dump_prefix(outcome.attempt);
  const std::string to = attempt_dir(outcome.attempt) + "/" + base_name(from);
  fallback_dump_dir_.clear();
  PrefixStore job(fmt::format("meshrt/{}/{}", options_.run_id, outcome.attempt),
                  rendezvous_->client());
  for (RankStatus& s : outcome.ranks) {
    // A rank that could not write its dump (a full disk) put it in the job's store: write it
    // here, or where there is room, so that the analysis does not take it for a dead rank.
    if (!s.dumped) {
      try {
        const std::string key = dump_keys::unwritten(s.rank) + "chunks";
        if (!job.check({&key, 1})) continue;
        const std::string dump =
            dump_keys::get_chunked(job, dump_keys::unwritten(s.rank), kFetchTimeout);
        s.dumped = write_dump_somewhere(to, s.rank, dump);
      } catch (const std::exception& e) {
        say("could not fetch rank {}'s unwritten dump: {}", s.rank, e.what());
      }
      continue;
    }
    if (s.node == 0 && from == to) continue;
    const std::string path = to + std::to_string(s.rank);
    try {
      // Node 0's own ranks: only when MESHRT_DUMP_PREFIX points elsewhere.
      const std::optional<std::string> dump =
          s.node == 0 ? read_file(from + std::to_string(s.rank))
                      : fetch_dump(rendezvous_->store(), outcome.attempt, s.rank, kFetchTimeout);
      if (!dump || !write_dump_somewhere(to, s.rank, *dump)) say("cannot write {}", path);
    } catch (const Error& e) {
      say("could not fetch rank {}'s dump: {}", s.rank, e.detail());
    }
  }
}

bool Agent::write_dump_somewhere(const std::string& to, int rank, const std::string& dump) {
  const std::string path = to + std::to_string(rank);
  if (fallback_dump_dir_.empty() && write_file(path, dump)) return true;
  if (fallback_dump_dir_.empty()) {
    // The attempt directory is full too: every dump goes to a directory of its own elsewhere,
    // so that the analysis sees them together.
    std::string dir = (std::filesystem::temp_directory_path() / "meshrun-dumps-XXXXXX").string();
    if (::mkdtemp(dir.data()) == nullptr) {
      say("cannot write rank {}'s dump: {} is not writable and no temporary directory could be "
          "made",
          rank, path);
      return false;
    }
    fallback_dump_dir_ = dir;
    std::error_code ec;
    for (const auto& e :
         std::filesystem::directory_iterator(std::filesystem::path(to).parent_path(), ec)) {
      if (e.path().filename().string().starts_with(base_name(to))) {
        std::filesystem::copy_file(e.path(), dir / e.path().filename(), ec);
      }
    }
  }
  const std::string moved = fallback_dump_dir_ + "/" + base_name(to) + std::to_string(rank);
  if (!write_file(moved, dump)) {
    say("cannot write rank {}'s dump to {} either", rank, moved);
    return false;
  }
  say("no room for rank {}'s dump in {}: the dumps are in {}", rank, path, fallback_dump_dir_);
  return true;
}

void Agent::report_continued(const AttemptOutcome& outcome) {
  SummaryInput in;
  in.run_id = options_.run_id;
  in.max_restarts = options_.max_restarts;
  in.outcome = outcome;
  in.nodes = rendezvous_->nodes();
  in.this_node = rendezvous_->node_rank();
  const std::string text = format_continued_summary(in);
  write_all(2, text);
  // Only into the user's --log-dir: a finished job leaves nothing of its own under /tmp.
  if (in.this_node == 0 && !options_.log_dir.empty()) {
    const std::string path = run_dir_ + "/summary.txt";
    if (write_file(path, text)) say("summary saved in {}", path);
  }
}

void Agent::report_failure(const AttemptOutcome& outcome) {
  SummaryInput in;
  in.run_id = options_.run_id;
  in.max_restarts = options_.max_restarts;
  in.outcome = outcome;
  in.nodes = rendezvous_->nodes();
  in.this_node = rendezvous_->node_rank();
  in.log_files = writes_log_files();
  in.dump_dir = fallback_dump_dir_.empty() ? attempt_dir(outcome.attempt) : fallback_dump_dir_;
  in.dump_name = base_name(dump_prefix(outcome.attempt));
  if (in.this_node == 0) {
    for (const RankStatus& s : outcome.ranks) {
      if (std::filesystem::exists(in.dump_dir + "/" + in.dump_name + std::to_string(s.rank))) {
        in.dumped_ranks.push_back(s.rank);
      }
    }
    if (!in.dumped_ranks.empty()) {
      const std::string meshtrace = find_meshtrace(executable_dir());
      if (meshtrace.empty()) {
        in.analysis_note = meshtrace_not_found() + ": run `meshtrace analyze " + in.dump_dir +
                           " --prefix " + in.dump_name + "` by hand";
      } else {
        // A rank that died without dumping is itself a finding, not a reason to analyze nothing.
        const bool incomplete =
            static_cast<int>(in.dumped_ranks.size()) < rendezvous_->world_size();
        std::map<int, std::string> notes;
        for (const RankStatus& s : outcome.ranks) {
          if (std::find(in.dumped_ranks.begin(), in.dumped_ranks.end(), s.rank) ==
              in.dumped_ranks.end()) {
            notes[s.rank] = fate_without_dump(s);
          }
        }
        in.analysis =
            analyze(meshtrace, in.dump_dir, in.dump_name, incomplete, kMeshtraceTimeout, notes);
      }
    }
    if (!report_dir_.empty()) {
      in.report = make_job_report(in.dumped_ranks.empty() ? "" : in.dump_dir, in.dump_name);
    }
  } else if (!report_dir_.empty()) {
    in.report =
        fmt::format("report: made on node 0 (host {}) in {}", in.nodes[0].host, report_dir_);
  }
  const std::string text = format_summary(in);
  write_all(2, text);
  if (in.this_node == 0) {
    const std::string path = run_dir_ + "/summary.txt";
    if (write_file(path, text)) say("summary saved in {}", path);
  }
}

std::string Agent::make_job_report(const std::string& dumps_dir, const std::string& prefix) {
  const std::string meshtrace = find_meshtrace(executable_dir());
  if (meshtrace.empty()) {
    return describe_report(
        report_dir_, std::nullopt,
        meshtrace_not_found() + ": run `meshtrace report " + report_dir_ + "` by hand");
  }
  return describe_report(
      report_dir_, make_report(meshtrace, report_dir_, dumps_dir, prefix, kMeshtraceTimeout), "");
}

}  // namespace meshrt::launcher
