#include "runtime/backends/gloo/gloo_pair_shutdown.h"

#include <gloo/context.h>
#include <gloo/transport/tcp/pair.h>
#include <sys/socket.h>

#include <chrono>
#include <mutex>
#include <thread>

namespace meshrt {
namespace {

using TcpPair = gloo::transport::tcp::Pair;

// Gloo (2022) has no call that interrupts a wait in progress (later Gloo adds
// Context::closeConnections), and keeps a pair's socket and lock protected. A class derived from
// the pair may name them: a pointer to member formed through it reads them on any pair.
struct PairInternals : TcpPair {
  static constexpr int TcpPair::*kFd = &PairInternals::fd_;
  static constexpr std::mutex TcpPair::*kMutex = &PairInternals::m_;
};

}  // namespace

void shutdown_gloo_pairs(gloo::Context& context) noexcept {
  for (int q = 0; q < context.size; ++q) {
    if (q == context.rank) continue;
    auto* pair = dynamic_cast<TcpPair*>(context.getPair(q).get());
    if (pair == nullptr) continue;
    // Under the pair's lock its socket cannot be closed (and its number reused) meanwhile. Gloo
    // holds it only briefly (async mode): give up on it after 100 ms rather than hang an abort,
    // and shut the socket down anyway, since a pair busy writing has not closed it.
    std::mutex& mu = pair->*PairInternals::kMutex;
    std::unique_lock lock(mu, std::defer_lock);
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
    while (!lock.try_lock() && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    const int fd = pair->*PairInternals::kFd;
    if (fd >= 0) ::shutdown(fd, SHUT_RDWR);
  }
}

}  // namespace meshrt
