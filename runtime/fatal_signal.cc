#include "runtime/fatal_signal.h"

#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>

#include "trace/flight_recorder.h"

namespace meshrt {
namespace {

constexpr int kFatalSignals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
// How long the dumping child may take before it is killed (it may wait forever on a lock that a
// thread of the crashed process held).
constexpr int kDumpSeconds = 10;

std::atomic<int> dump_rank{-1};
std::atomic<bool> handling{false};

const char* signal_name(int sig) {
  switch (sig) {
    case SIGSEGV:
      return "SIGSEGV";
    case SIGBUS:
      return "SIGBUS";
    case SIGFPE:
      return "SIGFPE";
    case SIGILL:
      return "SIGILL";
    default:
      return "SIGABRT";
  }
}

void say(const char* text) {
  if (::write(STDERR_FILENO, text, std::strlen(text)) < 0) return;
}

// Runs in the child: one thread, with a copy of the crashed process's memory, so the recorder can
// render with malloc and locks as usual. A lock that another thread held at the crash stays held
// here; the alarm then ends the child.
[[noreturn]] void dump_in_child(int sig, pid_t crashed) {
  for (int s : kFatalSignals) ::signal(s, SIG_DFL);
  ::alarm(kDumpSeconds);
  trace::DumpTrigger trigger;
  trigger.rank = dump_rank.load();
  trigger.detail = std::string("fatal signal ") + signal_name(sig);
  trigger.pid = crashed;
  const auto paths = trace::FlightRecorder::instance().dump(trace::DumpReason::kCrash, &trigger);
  ::_exit(paths.empty() ? 1 : 0);
}

// Only async-signal-safe calls here: the crashed thread may hold malloc's or any other lock.
// The dump is written by a child made with the raw clone system call, because glibc's fork()
// runs atfork handlers that take malloc's locks.
void on_fatal_signal(int sig, siginfo_t*, void*) {
  if (!handling.exchange(true)) {  // A second fatal signal (another thread, the child) just dies.
    say("[meshrt] fatal signal ");
    say(signal_name(sig));
    say(": writing the flight recorder dump\n");
    const pid_t crashed = ::getpid();
    const long child = ::syscall(SYS_clone, SIGCHLD, nullptr, nullptr, nullptr, nullptr);
    if (child == 0) dump_in_child(sig, crashed);
    if (child > 0) {
      bool done = false;
      for (int i = 0; i < kDumpSeconds * 100 + 100 && !done; ++i) {
        // Where SIGCHLD is ignored the child reaps itself: waitpid fails, and kill() says when
        // it is gone.
        const pid_t waited = ::waitpid(static_cast<pid_t>(child), nullptr, WNOHANG);
        done = waited == child || (waited < 0 && ::kill(static_cast<pid_t>(child), 0) != 0);
        const timespec tick{0, 10'000'000};
        if (!done) ::nanosleep(&tick, nullptr);
      }
      if (!done) {
        ::kill(static_cast<pid_t>(child), SIGKILL);
        ::waitpid(static_cast<pid_t>(child), nullptr, 0);
      }
    }
  }
  // Die of the signal itself: it is blocked in here and delivered, now with the default action,
  // when the handler returns (a fault re-executes the faulting instruction first).
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

}  // namespace

void use_signal_stack_on_this_thread() {
  // A stack overflow's SIGSEGV finds no stack left to run a handler on. The cloned child writes
  // the dump on its copy of this memory, so the stack must stay mapped until the thread ends.
  struct SignalStack {
    std::unique_ptr<char[]> memory;
    ~SignalStack() {
      if (!memory) return;
      stack_t off{};
      off.ss_flags = SS_DISABLE;
      ::sigaltstack(&off, nullptr);
    }
  };
  thread_local SignalStack stack;
  stack_t current{};
  if (stack.memory || ::sigaltstack(nullptr, &current) != 0 ||
      (current.ss_flags & SS_DISABLE) == 0) {
    return;
  }
  constexpr size_t kBytes = 256 * 1024;
  stack.memory = std::make_unique<char[]>(kBytes);
  stack_t ss{};
  ss.ss_sp = stack.memory.get();
  ss.ss_size = kBytes;
  if (::sigaltstack(&ss, nullptr) != 0) stack.memory.reset();
}

void install_fatal_signal_dump(int rank) {
  dump_rank.store(rank);
  use_signal_stack_on_this_thread();
  static std::once_flag once;
  std::call_once(once, [] {
    for (int sig : kFatalSignals) {
      struct sigaction current {};
      if (::sigaction(sig, nullptr, &current) != 0 || current.sa_handler != SIG_DFL ||
          (current.sa_flags & SA_SIGINFO) != 0) {
        continue;
      }
      struct sigaction action {};
      action.sa_sigaction = on_fatal_signal;
      action.sa_flags = SA_SIGINFO | SA_ONSTACK;
      sigemptyset(&action.sa_mask);
      ::sigaction(sig, &action, nullptr);
    }
  });
}

}  // namespace meshrt
