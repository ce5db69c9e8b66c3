// The Gloo backend (CPU, the default): libgloo's TCP transport, connected through meshrt's store.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "runtime/backend.h"
#include "runtime/backends/gloo/peer_memory.h"
#include "runtime/store/store.h"

namespace meshrt {

// MESHRT_GLOO_ONESHOT_MAX_BYTES, or 262144 when unset; throws Error(kInvalidArgument) if it is
// not a non-negative integer.
size_t gloo_one_shot_max_bytes_from_env();
// MESHRT_GLOO_SHM_SLOT_BYTES, or 262144 when unset; throws Error(kInvalidArgument) if it is not
// an integer in [0, 64 MiB].
size_t gloo_shm_slot_bytes_from_env();
// MESHRT_GLOO_STRIPE_MIN_BYTES, or 16 MiB (kStripeMinBytes) when unset; throws
// Error(kInvalidArgument) if it is not a non-negative integer.
size_t gloo_stripe_min_bytes_from_env();
// MESHRT_GLOO_SINGLE_COPY: "auto" (also when unset), "always" or "never"; throws
// Error(kInvalidArgument) for anything else.
SingleCopy gloo_single_copy_from_env();

// How a Gloo communicator picks among its ways of moving data. Inherited by splits.
struct GlooTuning {
  // An all_reduce of at most this many bytes on a group of 2, 4, 8, ... ranks (above 2, of at
  // least 2n elements) runs by recursive doubling (log2(n) exchanges of the whole buffer; one at
  // 2 ranks) instead of Gloo's ring (2(n-1) steps); 0 = always the ring. Default:
  // MESHRT_GLOO_ONESHOT_MAX_BYTES, else 256 KiB.
  size_t one_shot_max_bytes = gloo_one_shot_max_bytes_from_env();
  // When every rank of a communicator runs on this host, its collectives (all but uneven
  // all_to_all) go through a shared-memory segment instead of TCP (shm_group.h), in chunks of
  // this many bytes per rank (above 16 ranks, all_reduce and reduce only of one chunk), and its
  // send/recv through the segment's mailboxes (shm_mailboxes.h). The segment takes about 4 x
  // ranks x this much of /dev/shm; 0 = always TCP. Must be equal on all ranks (else TCP is used).
  // Default: MESHRT_GLOO_SHM_SLOT_BYTES, else 256 KiB.
  size_t shm_slot_bytes = gloo_shm_slot_bytes_from_env();
  // Across hosts that hold equally many ranks, an all_reduce of at least this many bytes stripes
  // across every rank of each host (collectives/hierarchical.h); smaller ones go through the
  // hosts' leaders alone. Must be equal on all ranks. Default: MESHRT_GLOO_STRIPE_MIN_BYTES, else
  // 16 MiB.
  size_t stripe_min_bytes = gloo_stripe_min_bytes_from_env();
  // When a message between two ranks of one host goes by reference, the receiver copying it once
  // straight from the sender's memory (peer_memory.h), where the kernel lets it, instead of
  // streaming through the mailbox ring in two copies. Default: MESHRT_GLOO_SINGLE_COPY, else
  // auto.
  SingleCopy single_copy = gloo_single_copy_from_env();
};

// Where and how a Gloo communicator connects.
struct GlooConfig {
  std::shared_ptr<Store> store;  // Rendezvous store; connection keys go under `store_key`.
  std::string store_key;         // Unique per communicator, equal on its members.
  std::string hostname;          // Address to listen on, e.g. "127.0.0.1"; or
  std::string iface;             // a network interface such as "lo" (wins over hostname).
  int rank = 0;
  int size = 1;
  std::chrono::milliseconds timeout{0};
  GlooTuning tuning;  // Read from the environment unless set.
};

// Connects a full mesh of Gloo pairs among the `size` ranks (a collective over them) and returns
// the backend. Throws Error naming the store key on failure or timeout.
std::unique_ptr<Backend> make_gloo_backend(const GlooConfig& config);

}  // namespace meshrt
