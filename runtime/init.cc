#include "runtime/init.h"

#include <fmt/format.h>
#include <unistd.h>

#include <charconv>
#include <cstdlib>
#include <map>
#include <mutex>
#include <numeric>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include "meshrt_config.h"
#include "runtime/backend_factory.h"
#if MESHRT_HAVE_MPI
#include "runtime/backends/mpi/mpi_world.h"
#endif
#include "runtime/environment.h"
#include "runtime/error.h"
#include "runtime/error_file.h"
#include "runtime/fatal_signal.h"
#include "runtime/monitor_process.h"
#include "runtime/rank_failures.h"
#include "runtime/store/dump_keys.h"
#include "runtime/store/exit_keys.h"
#include "runtime/store/prefix_store.h"
#include "runtime/store/store_auth.h"
#include "runtime/store/tcp_store.h"
#include "runtime/store/tcp_store_server.h"
#include "runtime/store/torch_store.h"
#include "runtime/straggler_exchange.h"
#include "runtime/watchdog.h"
#include "trace/atomic_file.h"
#include "trace/env.h"
#include "trace/logging.h"

namespace meshrt {
namespace {

std::optional<std::string> env(const char* name) { return trace::env::get({name}); }

// One launcher's variables: names in the order rank, size, local rank, local size.
struct EnvSource {
  const char* source;
  std::array<const char*, 4> names;
};

constexpr EnvSource kSources[] = {
    {"torchrun", {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"}},
    {"mpirun",
     {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
      "OMPI_COMM_WORLD_LOCAL_SIZE"}},
    {"srun", {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"}},
};

// Who set torchrun-style variables: meshrun says so, torchrun leaves its run id, else a person
// or a script did.
const char* torchrun_style_source() {
  if (env("MESHRT_LAUNCHER") == "meshrun") return "meshrun";
  if (env("TORCHELASTIC_RUN_ID")) return "torchrun";
  return "RANK/WORLD_SIZE set by hand";
}

std::string found_summary() {
  std::vector<std::string> found;
  for (const EnvSource& s : kSources) {
    for (const char* n : s.names) {
      if (auto v = env(n)) found.push_back(fmt::format("{}={}", n, *v));
    }
  }
  for (const char* n : {"MASTER_ADDR", "MASTER_PORT", "SLURM_LAUNCH_NODE_IPADDR"}) {
    if (auto v = env(n)) found.push_back(fmt::format("{}={}", n, *v));
  }
  return found.empty() ? "none of them" : fmt::format("{}", fmt::join(found, " "));
}

[[noreturn]] void fail_env(const std::string& problem) {
  throw Error(ErrorCode::kInvalidArgument, {-1, "", "init", -1},
              fmt::format("{}. Needed: RANK and WORLD_SIZE (torchrun/meshrun), or "
                          "OMPI_COMM_WORLD_RANK and OMPI_COMM_WORLD_SIZE (mpirun), or "
                          "SLURM_PROCID and SLURM_NTASKS (srun); plus MASTER_ADDR and "
                          "MASTER_PORT. Found: {}",
                          problem, found_summary()));
}

// The launcher's layout and meshrt's own settings; throws EnvError for a malformed value.
InitOptions read_init_options() {
  InitOptions o;
  const EnvSource* chosen = nullptr;
  for (const EnvSource& s : kSources) {
    if (trace::env::lookup({s.names[0], s.names[1]})) {
      chosen = &s;
      break;
    }
  }
  if (chosen == nullptr) fail_env("no launcher environment found");
  const auto rank = trace::env::get_int({chosen->names[0]}, 0);
  const auto size = trace::env::get_int({chosen->names[1]}, 1, std::numeric_limits<int>::max());
  if (!rank || !size) {
    fail_env(fmt::format("{} is set but not {}", rank ? chosen->names[0] : chosen->names[1],
                         rank ? chosen->names[1] : chosen->names[0]));
  }
  const bool torchrun_style = chosen == &kSources[0];
  o.source = torchrun_style ? torchrun_style_source() : chosen->source;
  o.rank = static_cast<int>(*rank);
  o.world_size = static_cast<int>(*size);
  if (o.rank >= o.world_size) {
    fail_env(fmt::format("{}={} is outside [0, {}={})", chosen->names[0], o.rank, chosen->names[1],
                         o.world_size));
  }
  if (auto lr = trace::env::get_int({chosen->names[2]}, 0)) {
    o.local_rank = static_cast<int>(*lr);
  }
  // Slurm writes SLURM_NTASKS_PER_NODE like "4(x2)": only a plain number is taken.
  if (auto ls = env(chosen->names[3]); ls && ls->find('(') == std::string::npos) {
    o.local_world_size = static_cast<int>(
        *trace::env::get_int({chosen->names[3]}, 1, std::numeric_limits<int>::max()));
  }
  if (o.local_rank >= 0 && o.local_world_size > 0 && o.local_rank >= o.local_world_size) {
    fail_env(fmt::format("{}={} is outside [0, {}={})", chosen->names[2], o.local_rank,
                         chosen->names[3], o.local_world_size));
  }

  // Jobs started by mpirun or srun run over MPI when it is built in, as their users expect; from
  // srun only when it gave the ranks PMIx (--mpi=pmix): without it OpenMPI aborts in MPI_Init.
  const bool srun = chosen == &kSources[2];
  if (MESHRT_HAVE_MPI && !torchrun_style && (!srun || env("PMIX_RANK"))) o.backend = "mpi";
  if (MESHRT_HAVE_MPI && srun && o.backend != "mpi" && o.rank == 0) {
    log().info("started by srun without PMIx, so over Gloo; srun --mpi=pmix runs over MPI");
  }
  if (auto b = trace::env::get_choice({"MESHRT_BACKEND"}, {"gloo", "mpi", "nccl"})) o.backend = *b;

  auto addr = env("MASTER_ADDR");
  // srun's launch node may hold no rank (srun from a login node); over MPI rank 0 sends its own
  // address instead, on a free port, as under mpirun.
  if (!addr && srun && o.backend != "mpi") addr = env("SLURM_LAUNCH_NODE_IPADDR");
  if (!addr && o.backend == "mpi") {
    // No MASTER_ADDR needed: rank 0 hosts the store on a free port and sends its address over
    // MPI (init()).
    o.master_addr.clear();
    o.master_port = 0;
  } else {
    auto port = trace::env::get_int({"MASTER_PORT"}, 0, 65535);
    if (!port && !torchrun_style) port = 29500;
    if (o.world_size > 1 && (!addr || !port)) {
      fail_env(fmt::format("{} is not set", !addr ? "MASTER_ADDR" : "MASTER_PORT"));
    }
    o.master_addr = addr.value_or("127.0.0.1");
    o.master_port = static_cast<uint16_t>(port.value_or(0));
  }

  if (auto id = trace::env::get({"MESHRT_RUN_ID", "TORCHELASTIC_RUN_ID"})) o.run_id = *id;
  if (auto a = trace::env::get_int({"MESHRT_RESTART_COUNT", "TORCHELASTIC_RESTART_COUNT"}, 0)) {
    o.attempt = static_cast<int>(*a);
  }
  if (auto t = trace::env::get_ms({"MESHRT_EXIT_TIMEOUT_MS"})) o.exit_timeout = *t;
  // torchrun's agent serves its TCPStore on MASTER_PORT and says so: join it, as PyTorch's
  // ranks do, instead of binding the same port again.
  o.torch_agent_store = env("TORCHELASTIC_USE_AGENT_STORE") == std::optional<std::string>("True");
  o.host_store = !trace::env::get_flag({"MESHRT_STORE_EXTERNAL"}) && !o.torch_agent_store;
  o.live_monitor = trace::env::get_flag({"MESHRT_LIVE_MONITOR"}, true);
  if (auto i = trace::env::get({"MESHRT_GLOO_IFNAME", "GLOO_SOCKET_IFNAME"})) o.gloo_iface = *i;
  if (auto t = trace::env::get_ms({"MESHRT_TIMEOUT_MS"}, 1)) o.timeout = *t;
  if (auto t = trace::env::get_ms({"MESHRT_INIT_TIMEOUT_MS"}, 1)) o.init_timeout = *t;
  o.store_token = store_token_from_env();
  return o;
}

std::string this_host_name() {
  char name[256] = {};
  gethostname(name, sizeof(name) - 1);
  return name;
}

bool is_loopback(const std::string& host) {
  return host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1";
}

// The world's resources that must outlive every communicator of the job. Released last, so
// their end is the rank's end of the job: the exit barrier described at init().
struct WorldResources {
  std::unique_ptr<TcpStoreServer> server;
  std::unique_ptr<MonitorProcess> monitor;  // Declared after server: stopped before the store.
  std::shared_ptr<Store> store;
  std::shared_ptr<Store> watchdog_store;  // The same keys over the watchdog's own connection.
  int rank = 0;
  int world_size = 1;
  std::chrono::milliseconds exit_timeout{0};
  bool joined = false;  // The world exists: a failed init() has no exit barrier to wait at.

  ~WorldResources() {
    if (store && joined) wait_for_all_ranks();
    Watchdog::instance().clear_job_store(watchdog_store.get());
  }

  void wait_for_all_ranks() noexcept {
    if (world_size <= 1) return;
    Watchdog& watchdog = Watchdog::instance();
    try {
      // First: peers still waiting in an op this rank never called fail at once on reading it.
      exit_keys::record_once(*store, rank, watchdog.exit_record());
      publish_stragglers_at_exit(*store, rank);  // Before arriving: found by the collector.
      store->add(exit_keys::kArrived, 1);
      if (server) {
        wait_for_leavers(watchdog);
      } else {
        wait_for_arrivals(watchdog);
      }
      collect_stragglers_at_exit(*store, rank, world_size);  // Rank 0 (or whoever hosts).
      if (watchdog.job_failed()) watchdog.wait_for_post_mortem();
      // The last call a guest makes: the host may take the store down once all have made it.
      if (!server) store->add(exit_keys::kLeft, 1);
    } catch (const std::exception& e) {
      log().warn("exit barrier: {}", e.what());
    }
  }

  // Ranks that died, when the job repairs around them (they never arrive); else 0.
  int dead_ranks(const Watchdog& watchdog) const {
    if (!watchdog.repairs_in_place()) return 0;
    std::vector<int> all(static_cast<size_t>(world_size));
    std::iota(all.begin(), all.end(), 0);
    return static_cast<int>(DeadRanks::instance().among(*store, all).size());
  }

  // Until every rank arrived (every living one, when the job repairs), or the job failed and
  // this rank has dumped.
  void wait_for_arrivals(Watchdog& watchdog) {
    const auto deadline = std::chrono::steady_clock::now() + exit_timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      // A failed job needs this rank's dump before it goes, even if every rank is here.
      watchdog.poll_remote_signal();
      if (watchdog.job_failed()) {
        watchdog.wait_dumped(std::chrono::seconds(10));
        return;
      }
      if (store->add(exit_keys::kArrived, 0) >= world_size - dead_ranks(watchdog)) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    std::vector<int> missing;
    for (int r = 0; r < world_size; ++r) {
      const std::string key = exit_keys::rank(r);
      if (!store->check(std::span<const std::string>(&key, 1))) missing.push_back(r);
    }
    log().warn("leaving after waiting {} ms for ranks [{}] to finish", exit_timeout.count(),
               fmt::join(missing, ", "));
  }

  // The store's host goes last: until every other rank has left. When the job failed, a rank
  // that never arrives (dead, or hung) is waited for only as long as it may take to dump.
  void wait_for_leavers(Watchdog& watchdog) {
    // A rank that never arrives after a failure is dead or hung, or (under throw/continue, where
    // the job goes on) still working: wait for its dump, longer when it may still be working.
    const auto grace = watchdog.policy() == TimeoutPolicy::kAbort ? std::chrono::seconds(3)
                                                                  : std::chrono::seconds(6);
    const auto deadline = std::chrono::steady_clock::now() + exit_timeout;
    std::optional<std::chrono::steady_clock::time_point> failed_at;
    while (std::chrono::steady_clock::now() < deadline) {
      watchdog.poll_remote_signal();
      const int64_t left = store->add(exit_keys::kLeft, 0);
      if (left >= world_size - 1 - dead_ranks(watchdog)) return;
      if (watchdog.job_failed()) {
        const auto now = std::chrono::steady_clock::now();
        if (!failed_at) failed_at = now;
        const bool arrived_left = left >= store->add(exit_keys::kArrived, 0) - 1;
        const bool all_dumped = store->add(dump_keys::kDumpsWritten, 0) >= world_size;
        if (arrived_left && (all_dumped || now - *failed_at > grace)) return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    log().warn("store host leaving after {} ms; {} of {} other ranks had left",
               exit_timeout.count(), store->add(exit_keys::kLeft, 0), world_size - 1);
  }
};

}  // namespace

namespace {

// Every rank announces itself in the store, then waits for the others: a rank that is missing (a
// WORLD_SIZE too large, a rank that never started or died early) is named within seconds, and
// again every 10 s, instead of in one store timeout minutes later. Throws Error(kTimeout) naming
// them at the init timeout.
void wait_for_every_rank(Store& store, const InitOptions& o) {
  const std::string me = fmt::format("init/rank{}", o.rank);
  store.set(me, std::span<const char>("1", 1));
  store.add("init/arrived", 1);
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now(), deadline = start + o.init_timeout;
  auto next_report = start + std::chrono::seconds(5);
  auto pause = std::chrono::milliseconds(1);
  for (;;) {
    if (store.add("init/arrived", 0) >= o.world_size) return;
    const auto now = Clock::now();
    if (now >= next_report || now >= deadline) {
      std::vector<int> missing;
      for (int r = 0; r < o.world_size; ++r) {
        const std::string key = fmt::format("init/rank{}", r);
        if (!store.check(std::span<const std::string>(&key, 1))) missing.push_back(r);
      }
      const std::string status = fmt::format(
          "{} of {} ranks arrived after {} s; missing: rank{} {} (the world size {} comes from {})",
          o.world_size - static_cast<int>(missing.size()), o.world_size,
          std::chrono::duration_cast<std::chrono::seconds>(now - start).count(),
          missing.size() > 1 ? "s" : "", fmt::join(missing, ", "), o.world_size, o.source);
      if (now >= deadline) {
        throw Error(
            ErrorCode::kTimeout, {o.rank, "world", "init", -1},
            status + "; check that every rank was started and that the world size is right");
      }
      log().warn("waiting for every rank to join: {}", status);
      next_report = now + std::chrono::seconds(10);
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(100));
  }
}

}  // namespace

InitOptions init_options_from_env() {
  try {
    return read_init_options();
  } catch (const trace::env::EnvError& e) {
    // The launcher's variables need the list of what is read from where; meshrt's own do not.
    if (std::string_view(e.what()).starts_with("MESHRT_")) {
      throw Error(ErrorCode::kInvalidArgument, {-1, "", "init", -1},
                  fmt::format("{} (fix the value or unset the variable)", e.what()));
    }
    fail_env(e.what());
  }
}

std::shared_ptr<Communicator> init(const InitOptions& o) {
  // Under meshrun or torchrun, an uncaught exception then reaches the launcher's summary.
  install_error_file_handler_from_env();
  // Before anything reads a variable on a path that cannot report it (the watchdog's threads).
  apply_environment(o.rank, "world");
  install_fatal_signal_dump(o.rank);
  if (o.world_size < 1 || o.rank < 0 || o.rank >= o.world_size) {
    throw Error(ErrorCode::kInvalidArgument, {o.rank, "", "init", -1},
                fmt::format("rank {} and world size {} do not fit", o.rank, o.world_size));
  }
  {
    // Store keys (rendezvous, exit barrier, dump signals) are per run and attempt: joining the
    // same one twice would read the first world's keys.
    static std::mutex mu;
    static std::set<std::pair<std::string, int>> joined;
    std::lock_guard lock(mu);
    if (!joined.emplace(o.run_id, o.attempt).second) {
      throw Error(ErrorCode::kInvalidArgument, {o.rank, "", "init", -1},
                  fmt::format("this process already joined run '{}' attempt {}; a process joins "
                              "a job once per attempt (MESHRT_RUN_ID, MESHRT_RESTART_COUNT)",
                              o.run_id, o.attempt));
    }
  }
  set_log_rank(o.rank);
  trace::set_process_count(o.world_size);
  auto resources = std::make_shared<WorldResources>();
  std::string host = o.master_addr.empty() ? "127.0.0.1" : o.master_addr;
  uint16_t port = o.master_port;
  // Under MPI without MASTER_ADDR, rank 0 hosts the store on a free port, on loopback when the
  // whole job is on this node, and tells every rank where over MPI_COMM_WORLD.
  [[maybe_unused]] const bool address_over_mpi =
      MESHRT_HAVE_MPI && o.backend == "mpi" && o.master_addr.empty() && o.host_store;
#if MESHRT_HAVE_MPI
  if (o.backend == "mpi") ensure_mpi_initialized(o.rank);
  if (address_over_mpi && !mpi_world_on_one_node()) host = this_host_name();
#endif
  // Options built by hand still carry the job's secret when the environment has it.
  std::string token = o.store_token.empty() ? store_token_from_env() : o.store_token;
#if MESHRT_HAVE_MPI
  // MPI is a channel only the job's ranks share: rank 0's fresh secret travels on it safely.
  if (address_over_mpi && token.empty() && o.rank == 0) token = generate_store_token();
#endif
  if (o.rank == 0 && o.host_store) {
    TcpStoreServerOptions so;
    so.host = host;
    so.port = port;
    so.token = token;
    try {
      resources->server = std::make_unique<TcpStoreServer>(so);
    } catch (const Error& e) {
      // The other ranks will only see a peer that hangs up on them: this is the one place that
      // knows why, so say what to do here.
      throw Error(e.code(), {o.rank, "", "init", -1},
                  fmt::format("rank 0 could not start the job's store: {}. Another program (a "
                              "previous job, torchrun's agent) may hold MASTER_PORT {}: choose "
                              "a free one; the other ranks fail until rank 0 serves it",
                              e.detail(), port));
    }
    port = resources->server->port();
    if (token.empty() && !resources->server->is_loopback()) {
      log().warn(
          "the store at {} is reachable from other hosts and has no token: anyone who "
          "reaches it can stop the job; set {} to the same secret on every rank",
          resources->server->address(), kStoreTokenEnv);
    }
  }
#if MESHRT_HAVE_MPI
  if (address_over_mpi) {
    const std::string where = mpi_broadcast_from_rank0(fmt::format("{}:{}", host, port));
    const size_t colon = where.rfind(':');
    host = where.substr(0, colon);
    port = static_cast<uint16_t>(std::stoi(where.substr(colon + 1)));
    token = mpi_broadcast_from_rank0(token);
  }
#endif
  if (port == 0) {
    throw Error(ErrorCode::kInvalidArgument, {o.rank, "", "init", -1},
                "MASTER_PORT is needed to reach the store hosted elsewhere");
  }
  // The watchdog gets a connection of its own with short replies: on the shared one its dump
  // signals would queue behind a rendezvous wait (a split) of up to the op timeout.
  auto connect = [&](std::chrono::milliseconds timeout) -> std::shared_ptr<Store> {
    if (o.torch_agent_store) {
      return std::make_shared<TorchStore>(TorchStoreOptions{host, port, o.init_timeout, timeout});
    }
    TcpStoreOptions co;
    co.host = host;
    co.port = port;
    co.connect_timeout = o.init_timeout;
    co.timeout = timeout;
    co.token = token;
    return std::make_shared<TcpStore>(co);
  };
  const std::string prefix = fmt::format("meshrt/{}/{}", o.run_id, o.attempt);
  resources->store = std::make_shared<PrefixStore>(prefix, connect(o.init_timeout));
  resources->watchdog_store =
      std::make_shared<PrefixStore>(prefix, connect(std::chrono::seconds(10)));
  resources->rank = o.rank;
  resources->world_size = o.world_size;
  resources->exit_timeout = o.exit_timeout;
  Watchdog::instance().set_job_store(resources->watchdog_store, o.run_id, o.world_size);
  // Before any op can fail: a launcher that sees this rank die waits for the others' dumps.
  // Being the first request, it also shows whether what listens on MASTER_PORT is the store.
  try {
    resources->watchdog_store->add(dump_keys::kRanksThatDump, 1);
  } catch (const Error& e) {
    if (resources->server || e.code() == ErrorCode::kStore) throw;
    throw Error(e.code(), {o.rank, "", "init", -1},
                fmt::format("{}. Rank 0 serves the job's store on MASTER_ADDR:MASTER_PORT "
                            "({}:{}), and what listens there {} this rank's first request: "
                            "most likely rank 0 could not start the store and another program "
                            "holds the port (rank 0's own error says why; choose a free "
                            "MASTER_PORT), MASTER_ADDR/MASTER_PORT differ between ranks, or "
                            "rank 0 ended",
                            e.detail(), host, port,
                            e.code() == ErrorCode::kTimeout ? "did not answer" : "hung up on"));
  }
  if (resources->server && o.live_monitor && o.world_size > 1) {
    resources->monitor =
        MonitorProcess::start({host, port, token, o.run_id, o.attempt, o.world_size});
    if (resources->monitor) {
      resources->watchdog_store->set(dump_keys::kPostMortemBy,
                                     std::span<const char>("meshrt-monitor", 14));
    }
  }
  log().info("joining run '{}' as rank {} of {} (from {}, backend {}), store {}:{}{}", o.run_id,
             o.rank, o.world_size, o.source, o.backend, host, port,
             o.torch_agent_store ? " (torchrun's agent store)" : "");

  GroupSpec spec;
  spec.name = "world";
  spec.store_key = "world";
  spec.global_ranks.resize(o.world_size);
  std::iota(spec.global_ranks.begin(), spec.global_ranks.end(), 0);
  spec.rank = o.rank;
  spec.timeout = o.init_timeout;
  spec.store = resources->store;
  spec.local_rank = o.local_rank;
  spec.iface = o.gloo_iface;
  if (spec.iface.empty()) {
    // Loopback jobs stay on loopback; otherwise peers reach us by our host name.
    if (is_loopback(host)) {
      spec.hostname = "127.0.0.1";
    } else {
      spec.hostname = this_host_name();
    }
  }
  wait_for_every_rank(*resources->store, o);
  auto backend = make_backend(o.backend, spec);
  auto job = std::make_shared<JobContext>(
      JobContext{resources->store, spec.hostname, spec.iface, spec.local_rank});

  trace::CommInfo info;
  info.store_key = "world";
  info.name = "world";
  info.description = "default_pg";
  info.global_ranks.resize(o.world_size);
  std::iota(info.global_ranks.begin(), info.global_ranks.end(), 0);
  info.rank = o.rank;
  info.global_rank = o.rank;
  info.timeout_ms = o.timeout.count();
  auto world = std::make_shared<Communicator>(std::move(info), std::move(backend), resources,
                                              std::move(job));
  resources->joined = true;
  set_default_world(world);
  return world;
}

std::shared_ptr<Communicator> init() { return init(init_options_from_env()); }

namespace {
std::mutex default_world_mu;
// Weak: the program owns its world; a static owner would tear it down after Gloo's statics.
std::weak_ptr<Communicator> process_default_world;
thread_local std::shared_ptr<Communicator> thread_default_world;
}  // namespace

std::shared_ptr<Communicator> default_world() {
  if (thread_default_world) return thread_default_world;
  std::lock_guard lock(default_world_mu);
  auto world = process_default_world.lock();
  if (!world) {
    throw Error(ErrorCode::kInvalidArgument, {},
                "no default world: call meshrt::init() first and keep its result");
  }
  return world;
}

void set_default_world(std::shared_ptr<Communicator> world) {
  std::lock_guard lock(default_world_mu);
  process_default_world = std::move(world);
}

void set_thread_default_world(std::shared_ptr<Communicator> world) {
  thread_default_world = std::move(world);
}

}  // namespace meshrt
