// libgloo called directly, the way PyTorch's ProcessGroupGloo drives it: the raw-Gloo baseline of
// collective_bench and meshrt-bench (--impl gloo). It connects its own tcp device through the
// job's store under the prefix "bench/raw/<run id>", so it runs beside meshrt's world.
#pragma once

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>

#include <chrono>
#include <memory>
#include <string>

#include "runtime/backends/gloo/gloo_store.h"
#include "runtime/store/prefix_store.h"
#include "runtime/store/tcp_store.h"

namespace meshrt::bench {

// A Gloo context over the job's store and the ops the benchmarks compare.
class RawGloo {
 public:
  // Connects rank `rank` of `size` through the store at host:port (full mesh, blocking).
  RawGloo(int rank, int size, const std::string& host, uint16_t port, const std::string& iface,
          const std::string& run_id) {
    using namespace std::chrono_literals;
    TcpStoreOptions so;
    so.host = host;
    so.port = port;
    so.connect_timeout = 60s;
    so.timeout = 60s;
    auto client = std::make_shared<TcpStore>(so);
    auto prefixed = std::make_shared<PrefixStore>("bench/raw/" + run_id, client);
    GlooStore store(prefixed, 60s);
    gloo::transport::tcp::attr attr;
    if (!iface.empty()) {
      attr.iface = iface;
    } else {
      attr.hostname = "127.0.0.1";
    }
    device_ = gloo::transport::tcp::CreateDevice(attr);
    auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
    ctx->setTimeout(120s);
    ctx->connectFullMesh(store, device_);
    context_ = ctx;
  }

  // The connected context.
  const std::shared_ptr<gloo::Context>& context() const { return context_; }
  // Tags like ProcessGroupGloo's: one per op, equal on all ranks.
  uint32_t next_tag() { return tag_++; }

  // Returns once every rank entered it.
  void barrier() {
    gloo::BarrierOptions o(context_);
    o.setTag(next_tag());
    gloo::barrier(o);
  }

  // Reduces `n` elements of `in` into `out` on every rank (in place when they are equal).
  template <typename T>
  void all_reduce(const T* in, T* out, size_t n,
                  void (*fn)(void*, const void*, const void*, size_t) = &gloo::sum<T>) {
    gloo::AllreduceOptions o(context_);
    if (in != out) o.setInput(const_cast<T*>(in), n);
    o.setOutput(out, n);
    o.setReduceFunction(fn);
    o.setTag(next_tag());
    gloo::allreduce(o);
  }
  // In place.
  template <typename T>
  void all_reduce(T* data, size_t n,
                  void (*fn)(void*, const void*, const void*, size_t) = &gloo::sum<T>) {
    all_reduce(data, data, n, fn);
  }

  // Gathers every rank's `block` elements of `in` into `out` (size x block), in rank order.
  template <typename T>
  void all_gather(const T* in, size_t block, T* out) {
    gloo::AllgatherOptions o(context_);
    o.setInput(const_cast<T*>(in), block);
    o.setOutput(out, block * static_cast<size_t>(context_->size));
    o.setTag(next_tag());
    gloo::allgather(o);
  }

  // Copies `n` elements of `data` on `root` into `data` of every rank.
  template <typename T>
  void broadcast(T* data, size_t n, int root) {
    gloo::BroadcastOptions o(context_);
    o.setOutput(data, n);
    o.setRoot(root);
    o.setTag(next_tag());
    gloo::broadcast(o);
  }

 private:
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::Context> context_;
  uint32_t tag_ = 1;
};

}  // namespace meshrt::bench
