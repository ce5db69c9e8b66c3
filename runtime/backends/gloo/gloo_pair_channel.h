// Gloo's pairs (TCP) as the collectives layer's pair channel: meshrt's own algorithms over pairs
// (recursive doubling, the reduce-scatter ring) run on it.
#pragma once

#include <cstdint>
#include <memory>

#include "runtime/collectives/pair_channel.h"

namespace gloo {
class Context;
}

namespace meshrt {

// Messages of one tag go on one Gloo slot (prefix kSlotPrefix): they match in order per pair.
class GlooPairChannel : public PairChannel {
 public:
  // Gloo's algorithms use slot prefixes 0x01..0x08, meshrt's p2p 0x20 and 0x22.
  static constexpr uint8_t kSlotPrefix = 0x21;

  explicit GlooPairChannel(std::shared_ptr<gloo::Context> context);
  int rank() const override;
  int size() const override;
  // Throws Gloo's exceptions, which the backend translates (gloo_backend.cc).
  void send_recv(int to, const void* send, size_t send_bytes, int from, void* recv,
                 size_t recv_bytes, uint64_t tag, std::chrono::steady_clock::time_point deadline,
                 const std::function<void()>& on_received = {}) override;

 private:
  std::shared_ptr<gloo::Context> context_;
};

}  // namespace meshrt
