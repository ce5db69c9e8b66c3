// The second of the collectives layer's two transports: a tagged channel between any two ranks
// of a group (Gloo's pairs over TCP today). Algorithms that move data rank to rank (recursive
// doubling, rings) are written once against it, in pair_collectives.h.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>

namespace meshrt {

// Messages from one rank to another on one tag arrive in the order they were sent.
class PairChannel {
 public:
  virtual ~PairChannel() = default;
  // This rank and the group's size.
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Sends `send_bytes` at `send` to rank `to` and receives `recv_bytes` into `recv` from rank
  // `from`, both on `tag`, and returns when both are done (MPI_Sendrecv). The receive must be
  // exactly as long as the matching send. `to` < 0 sends nothing, `from` < 0 receives nothing (a
  // tree's one-way steps). `on_received`, when given, runs as soon as the receive
  // is done, while the send may still drain: a ring folds the block that arrived meanwhile (at
  // 1 MiB over loopback TCP, waiting for the send first took up to twice as long). Throws Error:
  // kTimeout at `deadline`, kPeerFailure when a peer's connection closed.
  virtual void send_recv(int to, const void* send, size_t send_bytes, int from, void* recv,
                         size_t recv_bytes, uint64_t tag,
                         std::chrono::steady_clock::time_point deadline,
                         const std::function<void()>& on_received = {}) = 0;
};

}  // namespace meshrt
