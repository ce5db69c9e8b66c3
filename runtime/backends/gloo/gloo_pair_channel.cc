#include "runtime/backends/gloo/gloo_pair_channel.h"

#include <gloo/context.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

namespace meshrt {

GlooPairChannel::GlooPairChannel(std::shared_ptr<gloo::Context> context)
    : context_(std::move(context)) {}

int GlooPairChannel::rank() const { return context_->rank; }
int GlooPairChannel::size() const { return context_->size; }

void GlooPairChannel::send_recv(int to, const void* send, size_t send_bytes, int from, void* recv,
                                size_t recv_bytes, uint64_t tag,
                                std::chrono::steady_clock::time_point deadline,
                                const std::function<void()>& on_received) {
  const uint64_t slot = gloo::Slot::build(kSlotPrefix, static_cast<uint32_t>(tag));
  // Gloo only reads a buffer it sends: its API takes a non-const pointer for both directions.
  std::unique_ptr<gloo::transport::UnboundBuffer> out;
  std::unique_ptr<gloo::transport::UnboundBuffer> in;
  if (to >= 0) {
    out = context_->createUnboundBuffer(const_cast<void*>(send), send_bytes);
    out->send(to, slot);
  }
  if (from >= 0) {
    in = context_->createUnboundBuffer(recv, recv_bytes);
    in->recv(from, slot);
    in->waitRecv(deadline);
    if (on_received) on_received();
  }
  if (out) out->waitSend(deadline);
}

}  // namespace meshrt
