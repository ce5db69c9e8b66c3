// One rank of the launcher tests: runs the steps its arguments name, in order. A step is
// NAME[=VALUE][@RANK or @!RANK] (only on that rank / on every other rank):
//   marker=X        nothing (a mark to find the process in /proc)
//   print=TEXT      a stdout line; eprint=TEXT: a stderr line
//   env             a stdout line with the launcher's variables
//   getenv=A,B      a stdout line "getenv A=<value> B=<value>" (unset: "A=<unset>")
//   world           meshrt::init(), all_reduce of rank+1 (checked: n(n+1)/2), barrier
//   leak-shm        leaves a segment name in /dev/shm, as a rank killed during its setup does
//   hold-world      the same, keeping the world (and its watchdog) alive for the later steps
//   token           a stdout line "token length=<n> hex=<yes|no>" about MESHRT_STORE_TOKEN
//   stranger        as a stranger would: reach MASTER_ADDR:MASTER_PORT with no token and try a
//                   set; prints "stranger refused: <error>" or "stranger accepted"
//   exit=N          exit with status N; exit-below-attempt=K: exit 1 in attempts below K
//   throw=TEXT      throw std::runtime_error(TEXT) out of main: std::terminate (no core file)
//   signal=N        die by signal N (no core file)
//   segfault        write through a null pointer, as buggy user code would (no core file): the
//                   runtime's fatal-signal handler dumps, then the rank dies of SIGSEGV
//   sleep=S         sleep S seconds; sleep-rank=S: sleep rank*S seconds
//   ignore-term, ignore-int   ignore SIGTERM / SIGINT
//   report-signals  on SIGINT or SIGTERM print "got SIG..." and exit 0
//   helper          start a copy of this program (same marker, given before) that sleeps 60 s
//                   in our process group
//   dump-signal     the flight recorder's trigger: set meshrt/<run>/<attempt>/fr/dump_signal
//   wait-dump-signal  wait (up to 30 s) until the trigger is set, as a rank's watchdog would
//   wait-exit=R     wait (up to 30 s) for rank R's exit record in the job's store, as a peer's
//                   watchdog would, and print "exit record of rank R: <record>"
//   dump            write this rank's flight-recorder dump (docs/flight-recorder.md) to
//                   $MESHRT_DUMP_PREFIX<rank> and count it in fr/dumps_written
// Exit status 0 when every step ran, 1 on a failed check, 2 on an unknown step.
#include <fmt/format.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <thread>

#include "mesh/meshrt.h"
#include "runtime/store/dump_keys.h"
#include "runtime/store/exit_keys.h"
#include "runtime/store/prefix_store.h"
#include "runtime/store/tcp_store.h"

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "";
}

int env_int(const char* name) {
  const std::string v = env(name);
  return v.empty() ? -1 : std::stoi(v);
}

void line(FILE* f, const std::string& text) {
  std::fprintf(f, "%s\n", text.c_str());
  std::fflush(f);
}

// The job's flight-recorder namespace, as the runtime's recorder uses it.
std::shared_ptr<meshrt::Store> job_store() {
  meshrt::TcpStoreOptions o;
  o.host = env("MASTER_ADDR");
  o.port = static_cast<uint16_t>(env_int("MASTER_PORT"));
  o.timeout = std::chrono::seconds(30);
  const int attempt = std::max(0, env_int("MESHRT_RESTART_COUNT"));
  return std::make_shared<meshrt::PrefixStore>(
      fmt::format("meshrt/{}/{}", env("MESHRT_RUN_ID"), attempt),
      std::make_shared<meshrt::TcpStore>(o));
}

// Recurses until the stack runs out (each frame keeps 4 KiB the compiler cannot drop).
int recurse(int depth) {
  if (depth < 0) return 0;  // Never: the stack runs out first.
  volatile char frame[4096];
  frame[depth % sizeof(frame)] = static_cast<char>(depth);
  return recurse(depth + 1) + frame[(depth + 1) % sizeof(frame)];
}

// A store through a null pointer, as buggy user code would do. no_sanitize: UBSan would report
// it and abort (SIGABRT) before the SIGSEGV under test.
[[gnu::noinline, gnu::no_sanitize("null")]] void write_through(volatile int* p) { *p = 1; }

void on_signal(int sig) {
  const char* text = sig == SIGINT ? "got SIGINT\n" : "got SIGTERM\n";
  if (::write(1, text, std::strlen(text)) < 0) _exit(3);
  _exit(0);
}

// A dump with the schema's top-level keys and one started all_reduce.
std::string dump_json(int rank, int world_size) {
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  nlohmann::json entry = {{"record_id", 0},
                          {"pg_id", 0},
                          {"process_group", {"world", "default_pg"}},
                          {"thread_id", "1"},
                          {"thread_name", "main"},
                          {"collective_seq_id", 1},
                          {"p2p_seq_id", 0},
                          {"op_id", 1},
                          {"profiling_name", "gloo:all_reduce"},
                          {"time_created_ns", std::chrono::nanoseconds(now).count()},
                          {"input_sizes", {{4}}},
                          {"output_sizes", {{4}}},
                          {"input_dtypes", {"Float"}},
                          {"output_dtypes", {"Float"}},
                          {"state", "started"},
                          {"time_discovered_started_ns", 0},
                          {"time_discovered_completed_ns", 0},
                          {"retired", false},
                          {"timeout_ms", 1000},
                          {"is_p2p", false},
                          {"mesh_dim", nullptr},
                          {"group_ranks", nlohmann::json::array()},
                          {"group_rank", rank},
                          {"scope", ""},
                          {"peer", -1},
                          {"root", -1},
                          {"p2p_channel_seq", 0},
                          {"reduce_op", "sum"},
                          {"error", ""},
                          {"caller", "launcher_child.cc:1"}};
  std::string ranks;
  for (int r = 0; r < world_size; ++r) {
    entry["group_ranks"].push_back(r);
    ranks += (r ? ", " : "") + std::to_string(r);
  }
  nlohmann::json d = {
      {"version", "2.10"},
      {"meshrt_dump_version", 1},
      {"producer", "meshrt launcher_child"},
      {"comm_lib_version", "gloo 0.0.0"},
      {"rank", rank},
      {"world_size", world_size},
      {"host", "localhost"},
      {"pid", ::getpid()},
      {"run_id", env("MESHRT_RUN_ID")},
      {"dump_reason", "timeout"},
      {"trigger", nullptr},
      {"clock", {{"wall_ns", std::chrono::nanoseconds(now).count()}, {"steady_ns", 0}}},
      {"buffer_size", 2000},
      {"records_dropped", 0},
      {"pg_config",
       {{"world",
         {{"name", "world"},
          {"desc", "default_pg"},
          {"ranks", "[" + ranks + "]"},
          {"store_key", "world"},
          {"mesh_dim", nullptr}}}}},
      {"pg_status",
       {{"0",
         {{"last_enqueued_collective", "1"},
          {"last_started_collective", "1"},
          {"last_completed_collective", "-1"}}}}},
      {"entries", {entry}}};
  return d.dump();
}

int run_step(const std::string& name, const std::string& value, int rank) {
  if (name == "marker") return 0;
  if (name == "print") return line(stdout, value), 0;
  if (name == "eprint") return line(stderr, value), 0;
  if (name == "env") {
    std::string text = "env";
    for (const char* v : {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                          "ROLE_RANK", "GROUP_WORLD_SIZE", "MASTER_ADDR", "MESHRT_STORE_EXTERNAL",
                          "MESHRT_RUN_ID", "TORCHELASTIC_RUN_ID", "MESHRT_RESTART_COUNT",
                          "TORCHELASTIC_RESTART_COUNT", "MESHRT_LOG_DIR", "MESHRT_DUMP_PREFIX"}) {
      text += fmt::format(" {}={}", v, env(v));
    }
    return line(stdout, text), 0;
  }
  if (name == "getenv") {
    std::string text = "getenv";
    for (size_t start = 0; start <= value.size();) {
      const size_t comma = std::min(value.find(',', start), value.size());
      const std::string var = value.substr(start, comma - start);
      const char* v = std::getenv(var.c_str());
      text += fmt::format(" {}={}", var, v != nullptr ? v : "<unset>");
      start = comma + 1;
    }
    return line(stdout, text), 0;
  }
  if (name == "token") {
    const std::string token = env("MESHRT_STORE_TOKEN");
    const bool hex = token.find_first_not_of("0123456789abcdef") == std::string::npos;
    return line(stdout, fmt::format("token length={} hex={}", token.size(), hex ? "yes" : "no")), 0;
  }
  if (name == "stranger") {
    meshrt::TcpStoreOptions o;
    o.host = env("MASTER_ADDR");
    o.port = static_cast<uint16_t>(env_int("MASTER_PORT"));
    o.timeout = std::chrono::seconds(10);
    o.token.clear();
    try {
      meshrt::TcpStore store(o);
      store.set("meshrt/stranger", "was here");
      line(stdout, "stranger accepted");
    } catch (const meshrt::Error& e) {
      line(stdout, fmt::format("stranger refused: {}", e.what()));
    }
    return 0;
  }
  if (name == "world" || name == "hold-world") {
    // hold-world keeps the world (and its watchdog) for the steps after it, as a training loop
    // between steps would.
    static std::shared_ptr<meshrt::Communicator> held;
    auto world = meshrt::init();
    if (name == "hold-world") held = world;
    const int64_t n = world->size();
    std::vector<int64_t> x(1000, world->rank() + 1);
    world->all_reduce(meshrt::view(x))->wait();
    for (int64_t v : x) {
      if (v != n * (n + 1) / 2) {
        line(stderr, fmt::format("world: all_reduce gave {}, want {}", v, n * (n + 1) / 2));
        return 1;
      }
    }
    world->barrier()->wait();
    line(stdout, fmt::format("world ok rank={} size={} sum={}", world->rank(), n, x[0]));
    return 0;
  }
  if (name == "exit") std::exit(std::stoi(value));
  if (name == "exit-below-attempt") {
    if (env_int("MESHRT_RESTART_COUNT") < std::stoi(value)) std::exit(1);
    return 0;
  }
  if (name == "signal") {
    const rlimit no_core{0, 0};
    ::setrlimit(RLIMIT_CORE, &no_core);
    ::signal(std::stoi(value), SIG_DFL);
    ::kill(::getpid(), std::stoi(value));
    ::pause();
  }
  if (name == "stack-overflow") {
    const rlimit no_core{0, 0};
    ::setrlimit(RLIMIT_CORE, &no_core);
    return recurse(1) > 0 ? 0 : 1;
  }
  if (name == "segfault") {
    const rlimit no_core{0, 0};
    ::setrlimit(RLIMIT_CORE, &no_core);
    write_through(nullptr);
  }
  if (name == "sleep" || name == "sleep-rank") {
    const double s = std::stod(value) * (name == "sleep" ? 1 : rank);
    std::this_thread::sleep_for(std::chrono::duration<double>(s));
    return 0;
  }
  if (name == "ignore-term") return ::signal(SIGTERM, SIG_IGN), 0;
  if (name == "ignore-int") return ::signal(SIGINT, SIG_IGN), 0;
  if (name == "report-signals") {
    ::signal(SIGINT, on_signal);
    ::signal(SIGTERM, on_signal);
    return 0;
  }
  if (name == "leak-shm") {
    // What a rank killed while making a segment leaves: its name, under this process's pid.
    std::ofstream(fmt::format("/dev/shm/meshrt-{}-0123456789abcdef", ::getpid())) << "x";
    return 0;
  }
  if (name == "dump-signal") {
    job_store()->set(meshrt::dump_keys::kDumpSignal, std::to_string(rank));
    return 0;
  }
  if (name == "request-stop") {
    // What another node's agent (or a tool with the token) does: the attempt's stop key, with no
    // failure recorded.
    meshrt::TcpStoreOptions o;
    o.host = env("MASTER_ADDR");
    o.port = static_cast<uint16_t>(env_int("MASTER_PORT"));
    o.timeout = std::chrono::seconds(30);
    meshrt::PrefixStore launcher("meshrun/" + env("MESHRT_RUN_ID"),
                                 std::make_shared<meshrt::TcpStore>(o));
    launcher.set(fmt::format("attempts/{}/stop", std::max(0, env_int("MESHRT_RESTART_COUNT"))),
                 fmt::format("requested by rank {}", rank));
    return 0;
  }
  if (name == "wait-dump-signal") {
    job_store()->get(meshrt::dump_keys::kDumpSignal, std::chrono::seconds(30));
    return 0;
  }
  if (name == "wait-exit") {
    const int r = std::stoi(value);
    const meshrt::Bytes record =
        job_store()->get(meshrt::exit_keys::rank(r), std::chrono::seconds(30));
    return line(stdout, fmt::format("exit record of rank {}: {}", r, meshrt::to_string(record))), 0;
  }
  if (name == "dump") {
    const std::string path = env("MESHRT_DUMP_PREFIX") + std::to_string(rank);
    const std::string tmp = path + ".tmp";
    FILE* f = std::fopen(tmp.c_str(), "w");
    if (f == nullptr) return line(stderr, "dump: cannot write " + tmp), 1;
    std::fputs(dump_json(rank, env_int("WORLD_SIZE")).c_str(), f);
    std::fclose(f);
    std::rename(tmp.c_str(), path.c_str());
    meshrt::dump_keys::count_dump_once(*job_store(), rank, "rank");
    return 0;
  }
  line(stderr, "launcher_child: unknown step " + name);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  const int rank = env_int("RANK");
  std::string marker;
  for (int i = 1; i < argc; ++i) {
    std::string step = argv[i];
    if (const auto at = step.rfind('@'); at != std::string::npos) {
      const std::string who = step.substr(at + 1);
      step.resize(at);
      const bool negate = !who.empty() && who[0] == '!';
      if ((std::stoi(who.substr(negate ? 1 : 0)) == rank) == negate) continue;
    }
    const auto eq = step.find('=');
    const std::string name = step.substr(0, eq);
    const std::string value = eq == std::string::npos ? "" : step.substr(eq + 1);
    if (name == "marker") marker = step;
    if (name == "throw") {
      // Outside the try below: nothing catches it, as in a program that forgot to.
      const rlimit no_core{0, 0};
      ::setrlimit(RLIMIT_CORE, &no_core);
      throw std::runtime_error(value);
    }
    if (name == "helper") {
      if (::fork() == 0) {
        ::execl("/proc/self/exe", argv[0], marker.c_str(), "sleep=60", nullptr);
        _exit(127);
      }
      continue;
    }
    try {
      if (const int rc = run_step(name, value, rank); rc != 0) return rc;
    } catch (const std::exception& e) {
      line(stderr, fmt::format("launcher_child: step {}: {}", step, e.what()));
      return 1;
    }
  }
  return 0;
}
