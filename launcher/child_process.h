// One child process of the launcher: its own process group, killed when the launcher dies, and
// killed with its whole group when its handle goes away.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace meshrt::launcher {

// How a process ended.
struct ExitStatus {
  int exit_code = -1;  // -1 when killed by a signal.
  int signal = 0;      // The killing signal, 0 when it exited.

  bool success() const { return exit_code == 0; }
};

// What to run and where its output goes.
struct SpawnOptions {
  std::vector<std::string> argv;  // argv[0] is the program: a path, or a name looked up in PATH.
  std::vector<std::string> env;   // The whole environment, "NAME=value" entries.
  int stdout_fd = 1;              // Becomes the child's stdout.
  int stderr_fd = 2;              // Becomes the child's stderr.
};

// A running child. The child leads its own process group (a terminal's Ctrl-C reaches only the
// launcher, which decides what the ranks get) and gets SIGKILL when the launcher's thread that
// started it dies (PR_SET_PDEATHSIG), so a killed launcher leaves no orphans. Start children
// from a thread that lives as long as the launcher (the main one). stdin is /dev/null.
class ChildProcess {
 public:
  // Forks and execs; exec failures show up as exit status 127 with a message on the child's
  // stderr. Throws std::system_error if fork fails.
  explicit ChildProcess(const SpawnOptions& options);
  // Kills the process group (SIGKILL) and reaps the child if it is still running.
  ~ChildProcess();

  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  // Reaps the child without blocking; returns its status once it has ended (then always).
  std::optional<ExitStatus> poll();
  // Sends `signal` to the child's process group (so helpers it started get it too); no-op once
  // the child was reaped.
  void signal_group(int signal);
  // True while the child is stopped (SIGSTOP, SIGTSTP, a debugger): it cannot act on anything,
  // dump its flight recorder included, until it gets SIGCONT. From /proc/<pid>/stat.
  bool stopped() const;
  // Waits until the child ends or `timeout` passes; SIGKILLs the group then. Returns the status.
  ExitStatus wait(std::chrono::milliseconds timeout);

 private:
  pid_t pid_ = -1;
  std::optional<ExitStatus> status_;
};

// The signal's short name ("SIGTERM"), or "signal N" when unknown.
std::string signal_name(int signal);

// This process's environment as "NAME=value" entries.
std::vector<std::string> current_environment();

// What a bounded run of a program printed and how it ended (run_captured).
struct CapturedRun {
  std::string output;      // stdout and stderr together, in the order written.
  ExitStatus status;       // SIGKILL when it was killed at the limit.
  bool timed_out = false;  // It ran past the limit and its process group was killed.
};

// Runs `argv` with the environment `env` (stdin /dev/null), capturing its stdout and stderr,
// and kills its process group once `timeout` has passed: with SIGKILL at once, or, given a
// `grace`, SIGTERM first and SIGKILL after the grace (a launcher then stops and reaps its own
// children rather than leaving them to init).
CapturedRun run_captured(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                         std::chrono::milliseconds timeout,
                         std::chrono::milliseconds grace = std::chrono::milliseconds(0));

// Resolves a program name the way execvp would: unchanged when it contains '/', else the first
// executable match in PATH; empty when there is none.
std::string find_program(const std::string& name);

}  // namespace meshrt::launcher
