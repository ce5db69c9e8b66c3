#include "runtime/monitor_process.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>
#include <vector>

#include "runtime/store/store_auth.h"
#include "trace/env.h"
#include "trace/flight_recorder.h"
#include "trace/logging.h"

extern char** environ;

namespace meshrt {
namespace {

bool executable(const std::string& path) { return ::access(path.c_str(), X_OK) == 0; }

}  // namespace

std::string find_monitor_binary() {
  if (auto env = trace::env::get({"MESHRT_MONITOR_BIN"})) return executable(*env) ? *env : "";
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(&find_monitor_binary), &info) == 0 ||
      info.dli_fname == nullptr) {
    return "";
  }
  // The build tree has it beside libmeshrt; the install tree in bin/ beside lib/ (or
  // lib/<multiarch>/).
  const std::filesystem::path lib_dir = std::filesystem::path(info.dli_fname).parent_path();
  for (const auto& candidate : {lib_dir / "meshrt-monitor", lib_dir / "../bin/meshrt-monitor",
                                lib_dir / "../../bin/meshrt-monitor"}) {
    if (executable(candidate.string())) return candidate.lexically_normal().string();
  }
  return "";
}

std::unique_ptr<MonitorProcess> MonitorProcess::start(const MonitorProcessOptions& o) {
  const std::string binary = find_monitor_binary();
  if (binary.empty()) {
    // A warning: under mpirun or srun nothing else would tell that the live verdict is missing.
    log().warn(
        "no meshrt-monitor next to libmeshrt, in ../bin or ../../bin from it, nor an executable "
        "MESHRT_MONITOR_BIN: this job, which has no launcher, gets no live stall verdict (install "
        "meshrt-monitor with libmeshrt, or set MESHRT_MONITOR_BIN=<path>)");
    return nullptr;
  }
  // Snapshots of stalls go beside the flight-recorder dumps.
  const std::string dump_dir =
      std::filesystem::path(trace::FlightRecorder::instance().options().dump_prefix)
          .parent_path()
          .string();
  const std::vector<std::string> args = {
      binary,
      "--store-host",
      o.store_host,
      "--store-port",
      std::to_string(o.store_port),
      "--run-id",
      o.run_id,
      "--attempt",
      std::to_string(o.attempt),
      "--world-size",
      std::to_string(o.world_size),
      "--dir",
      fmt::format("{}/meshrt_live_{}_{}", dump_dir.empty() ? "." : dump_dir, o.run_id, o.attempt),
      "--dump-prefix",
      trace::FlightRecorder::instance().options().dump_prefix,
      "--parent-pid",
      std::to_string(::getpid())};
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::string_view(*e).starts_with(std::string(kStoreTokenEnv) + "=")) continue;
    env.emplace_back(*e);
  }
  if (!o.store_token.empty()) env.push_back(fmt::format("{}={}", kStoreTokenEnv, o.store_token));
  // Everything the child needs is built before fork(): after it, in a process with threads, only
  // async-signal-safe calls are allowed until exec.
  std::vector<char*> argv, envp;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  // The child reports a failed exec through this pipe; a successful exec closes it (CLOEXEC).
  int exec_status[2];
  if (::pipe2(exec_status, O_CLOEXEC) != 0) {
    log().warn("cannot start meshrt-monitor: pipe2 failed ({}); no live stall verdict",
               std::strerror(errno));
    return nullptr;
  }
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    log().warn("cannot start meshrt-monitor: fork failed ({}); no live stall verdict",
               std::strerror(errno));
    ::close(exec_status[0]);
    ::close(exec_status[1]);
    return nullptr;
  }
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(0);
    const int null = ::open("/dev/null", O_RDONLY);
    if (null >= 0) ::dup2(null, STDIN_FILENO);
    // None of rank 0's sockets (the store's listener, its peers' connections) may outlive it here.
    if (exec_status[1] != 3) {
      ::dup2(exec_status[1], 3);
      ::fcntl(3, F_SETFD, FD_CLOEXEC);
    }
    ::syscall(SYS_close_range, 4u, ~0u, 0u);
    ::execve(argv[0], argv.data(), envp.data());
    const int error = errno;
    (void)!::write(3, &error, sizeof(error));
    ::_exit(127);
  }
  ::close(exec_status[1]);
  int exec_error = 0;
  ssize_t got;
  do {
    got = ::read(exec_status[0], &exec_error, sizeof(exec_error));
  } while (got < 0 && errno == EINTR);
  ::close(exec_status[0]);
  if (got == sizeof(exec_error)) {
    ::waitpid(pid, nullptr, 0);
    log().warn("cannot start meshrt-monitor {}: {}; this job gets no live stall verdict", binary,
               std::strerror(exec_error));
    return nullptr;
  }
  log().info("started meshrt-monitor (pid {}) for the live stall verdict of this job", pid);
  return std::make_unique<MonitorProcess>(pid);
}

MonitorProcess::~MonitorProcess() {
  ::kill(pid_, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (::waitpid(pid_, nullptr, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace meshrt
