#include "runtime/backends/gloo/gloo_hierarchy.h"

#include <fmt/format.h>
#include <gloo/barrier.h>
#include <gloo/context.h>

#include "runtime/backends/gloo/gloo_pair_shutdown.h"
#include "runtime/backends/gloo/gloo_setup.h"
#include "trace/logging.h"

namespace meshrt {
namespace {

// Slots of the setup collectives (after ShmGroup's, before the communicator's first op).
constexpr uint32_t kSetupTag = 0x48495200;  // "HIR\0"

// One side of a pair can finish connecting before the other: a rank that then dropped the
// communicator at once (a short-lived split) would close a connection its peer still sets up
// ("Connection closed by peer" there). A barrier returns once every member is connected.
void barrier(const std::shared_ptr<gloo::Context>& context, std::chrono::milliseconds timeout) {
  gloo::BarrierOptions o(context);
  o.setTag(kSetupTag + 2);
  o.setTimeout(timeout);
  gloo::barrier(o);
}

}  // namespace

std::unique_ptr<GlooHierarchy> GlooHierarchy::create(const std::shared_ptr<gloo::Context>& context,
                                                     const std::string& key, const Connect& connect,
                                                     size_t slot_bytes, size_t stripe_min_bytes,
                                                     std::chrono::milliseconds timeout) {
  const auto ids = gloo_all_gather_value(context, ShmGroup::host_identity(), kSetupTag, timeout);
  std::unique_ptr<GlooHierarchy> h(new GlooHierarchy());
  h->layout_ = HostLayout::from_host_ids(ids);
  h->rank_ = context->rank;
  const HostLayout& layout = h->layout_;
  if (!layout.worth_a_hierarchy()) return nullptr;
  const int host = layout.host_of[h->rank_];
  const int local_rank = layout.local_rank_of[h->rank_];
  const int local_size = static_cast<int>(layout.ranks[host].size());
  std::string why_not;
  if (local_size > 1) {
    h->local_context_ = connect(fmt::format("{}/host{}", key, host), local_rank, local_size);
    barrier(h->local_context_, timeout);
    h->local_ = ShmGroup::create(h->local_context_, slot_bytes, timeout, why_not,
                                 /*with_mailboxes=*/false);
  }
  const bool ready = local_size == 1 || h->local_ != nullptr;
  const auto everywhere = gloo_all_gather_value(context, uint8_t{ready}, kSetupTag + 1, timeout);
  for (size_t q = 0; q < everywhere.size(); ++q) {
    if (everywhere[q] == 0) {
      log().info("gloo '{}': no hierarchy across {} hosts: host {} has no shared memory{}{}", key,
                 layout.hosts(), layout.host_of[q], why_not.empty() ? "" : ": ", why_not);
      return nullptr;
    }
  }
  // Rail i: local rank i of every host, by host. Rail 0 is the leaders'; the others exist only
  // where every host holds as many ranks.
  if (local_rank == 0 || layout.uniform()) {
    h->rail_context_ = connect(fmt::format("{}/rail{}", key, local_rank), host, layout.hosts());
    barrier(h->rail_context_, timeout);
    h->rail_ = std::make_unique<GlooPairChannel>(h->rail_context_);
  }
  h->transports_ = {&h->layout_,
                    h->rank_,
                    h->local_.get(),
                    local_rank == 0 ? h->rail_.get() : nullptr,
                    layout.uniform() ? h->rail_.get() : nullptr,
                    stripe_min_bytes};
  log().info("gloo '{}': {} ranks on {} hosts: hierarchical collectives", key, ids.size(),
             layout.hosts());
  return h;
}

void GlooHierarchy::set_global_ranks(const std::vector<int>& global_ranks) {
  if (!local_ || global_ranks.empty()) return;
  std::vector<int> members;
  for (const int q : layout_.ranks[layout_.host_of[rank_]]) members.push_back(global_ranks[q]);
  local_->set_global_ranks(std::move(members));
}

void GlooHierarchy::leave() noexcept {
  if (local_) local_->leave();
}

void GlooHierarchy::abort() noexcept {
  if (local_) local_->abort();
  if (local_context_) shutdown_gloo_pairs(*local_context_);
  if (rail_context_) shutdown_gloo_pairs(*rail_context_);
}

}  // namespace meshrt
