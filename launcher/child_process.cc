#include "launcher/child_process.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <sstream>
#include <system_error>
#include <thread>

#include "launcher/files.h"
#include "launcher/unique_fd.h"

namespace meshrt::launcher {
namespace {

ExitStatus decode(int status) {
  ExitStatus s;
  if (WIFEXITED(status)) s.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) s.signal = WTERMSIG(status);
  return s;
}

// Only async-signal-safe calls from here on: the launcher has other threads.
void write_str(const char* s) {
  if (::write(2, s, ::strlen(s)) < 0) {
    // Nothing left to report to.
  }
}

}  // namespace

ChildProcess::ChildProcess(const SpawnOptions& options) {
  const std::string path = find_program(options.argv.at(0));
  std::vector<char*> argv;
  for (const auto& a : options.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (const auto& e : options.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  const pid_t parent = ::getpid();

  pid_ = ::fork();
  if (pid_ < 0) throw std::system_error(errno, std::generic_category(), "fork");
  if (pid_ == 0) {
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    // The launcher may have died between fork and prctl: then nobody would kill us.
    if (::getppid() != parent) ::_exit(127);
    const int devnull = ::open("/dev/null", O_RDONLY);
    ::dup2(devnull, 0);
    ::dup2(options.stdout_fd, 1);
    ::dup2(options.stderr_fd, 2);
    // The launcher's store sockets and the other children's pipes are none of our business.
    ::close_range(3, UINT_MAX, 0);
    // The launcher ignores SIGPIPE; an ignored signal would stay ignored across exec.
    ::signal(SIGPIPE, SIG_DFL);
    ::execve(path.empty() ? argv[0] : path.c_str(), argv.data(), envp.data());
    const int err = errno;
    write_str("meshrun: cannot execute '");
    write_str(argv[0]);
    write_str("': ");
    write_str(::strerrordesc_np(err));
    write_str("\n");
    ::_exit(127);
  }
  // Also set from this side, so the group exists before the first signal_group().
  ::setpgid(pid_, pid_);
}

ChildProcess::~ChildProcess() {
  if (!status_) wait(std::chrono::milliseconds(0));
}

std::optional<ExitStatus> ChildProcess::poll() {
  if (status_) return status_;
  int status = 0;
  const pid_t r = ::waitpid(pid_, &status, WNOHANG);
  if (r == pid_) {
    status_ = decode(status);
    // Helpers the child left in its group go with it.
    ::kill(-pid_, SIGKILL);
  }
  return status_;
}

bool ChildProcess::stopped() const {
  if (status_ || pid_ <= 0) return false;
  const std::optional<std::string> stat = read_file(fmt::format("/proc/{}/stat", pid_));
  // "pid (comm) S ...": the state follows the last ')' (comm may hold any character).
  const size_t paren = stat ? stat->rfind(')') : std::string::npos;
  if (paren == std::string::npos || paren + 2 >= stat->size()) return false;
  const char state = (*stat)[paren + 2];
  return state == 'T' || state == 't';
}

void ChildProcess::signal_group(int signal) {
  if (!status_) ::kill(-pid_, signal);
}

ExitStatus ChildProcess::wait(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!poll()) {
    if (std::chrono::steady_clock::now() >= deadline) {
      ::kill(-pid_, SIGKILL);
      int status = 0;
      while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
      }
      status_ = decode(status);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return *status_;
}

std::string signal_name(int signal) {
  const char* abbrev = ::sigabbrev_np(signal);
  return abbrev != nullptr ? std::string("SIG") + abbrev : "signal " + std::to_string(signal);
}

std::vector<std::string> current_environment() {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
  return env;
}

CapturedRun run_captured(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                         std::chrono::milliseconds timeout, std::chrono::milliseconds grace) {
  using Clock = std::chrono::steady_clock;
  using std::chrono::milliseconds;
  CapturedRun run;
  SpawnOptions so;
  so.argv = argv;
  so.env = env;
  Pipe out = make_pipe();
  so.stdout_fd = out.write.get();
  so.stderr_fd = out.write.get();
  ChildProcess child(so);
  out.write.reset();
  const auto deadline = Clock::now() + timeout;
  char buf[4096];
  for (;;) {
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) break;
    pollfd p{out.read.get(), POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    const ssize_t n = ::read(out.read.get(), buf, sizeof(buf));
    if (n <= 0) break;
    run.output.append(buf, static_cast<size_t>(n));
  }
  const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
  run.timed_out = left.count() <= 0 && !child.poll();
  if (run.timed_out && grace.count() > 0) {
    child.signal_group(SIGTERM);
    run.status = child.wait(grace);
  } else {
    run.status = child.wait(std::max(left, milliseconds(0)));
  }
  return run;
}

std::string find_program(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return {};
}

}  // namespace meshrt::launcher
