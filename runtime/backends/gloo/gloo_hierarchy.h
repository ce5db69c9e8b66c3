// The transports of a Gloo communicator whose ranks span hosts with several ranks on some host:
// each host's ranks share a segment (ShmGroup over a Gloo context of their own), and the hosts'
// leaders meet over a pair channel of their own (rail 0); where every host holds L ranks, local
// rank i of every host meets its rail i too. The collectives layer's hierarchical algorithms
// (collectives/hierarchical.h) run on them.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/backends/gloo/gloo_pair_channel.h"
#include "runtime/backends/gloo/shm_group.h"
#include "runtime/collectives/hierarchical.h"

namespace gloo {
class Context;
}

namespace meshrt {

class GlooHierarchy {
 public:
  // Connects a Gloo context of `size` ranks under store key `key`, as this process's rank `rank`.
  using Connect =
      std::function<std::shared_ptr<gloo::Context>(const std::string& key, int rank, int size)>;

  // Collective over `context` (every rank of the communicator whose store key is `key`): reads
  // where each rank runs, and connects this rank's host group and, on leaders, the leaders. Null
  // on every rank when the hierarchy saves nothing (one host, or one rank per host) or some host's
  // segment could not be made (MESHRT_LOG_LEVEL=info says why). Throws Gloo's exceptions.
  static std::unique_ptr<GlooHierarchy> create(const std::shared_ptr<gloo::Context>& context,
                                               const std::string& key, const Connect& connect,
                                               size_t slot_bytes, size_t stripe_min_bytes,
                                               std::chrono::milliseconds timeout);

  // This rank's transports; valid while this object lives.
  const HostTransports& transports() const { return transports_; }
  // The members' global ranks, by group rank: the host segment's errors name peers by them.
  void set_global_ranks(const std::vector<int>& global_ranks);
  // Makes a local exchange in progress (and every later one) throw Error(kAborted), and fails
  // the hierarchy's TCP waits at once (shutdown_gloo_pairs).
  void abort() noexcept;
  // After an op failed on this rank: this host's other ranks stop waiting for it (a leader that
  // lost its peer on another host would otherwise leave them waiting until their timeout).
  void leave() noexcept;

 private:
  GlooHierarchy() = default;

  HostLayout layout_;
  int rank_ = 0;
  std::shared_ptr<gloo::Context> local_context_;  // This host's ranks; null when alone.
  std::unique_ptr<ShmGroup> local_;               // Over local_context_.
  // This rank's rail; null on non-leaders where hosts hold different numbers of ranks.
  std::shared_ptr<gloo::Context> rail_context_;
  std::unique_ptr<GlooPairChannel> rail_;  // Over rail_context_.
  HostTransports transports_;              // Over the members above.
};

}  // namespace meshrt
