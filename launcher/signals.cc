#include "launcher/signals.h"

#include <signal.h>

#include <atomic>

namespace meshrt::launcher {
namespace {

std::atomic<int> count{0};
std::atomic<int> first{0};

void on_signal(int signal) {
  int none = 0;
  first.compare_exchange_strong(none, signal);
  count.fetch_add(1);
}

}  // namespace

void install_signal_handlers() {
  static_assert(std::atomic<int>::is_always_lock_free, "used from a signal handler");
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sa.sa_flags = SA_RESTART;  // The agent polls the counts; nothing needs EINTR.
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
}

int interrupt_count() { return count.load(); }

int first_interrupt_signal() { return first.load(); }

}  // namespace meshrt::launcher
