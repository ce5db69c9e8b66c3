// The first of the collectives layer's two transports: a slot exchange. Each rank of a group
// writes its contribution into a slot of its own, publishes it, and reads every peer's slot once
// all have published: one round costs a cache-line handoff per peer. The shared-memory segment of
// a Gloo communicator (backends/gloo/shm_group.h) is one; algorithms over it are written once, in
// slot_collectives.h.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>

namespace meshrt {

// What the ranks of one exchange must agree on, written beside each contribution: a rank that
// finds another value in a peer's header knows they called different collectives.
struct SlotStamp {
  uint64_t collective_seq = 0;  // Op::collective_seq.
  uint32_t tag = 0;             // The seq's low 16 bits and a hash of the arguments.
};

// One group's slots. Exchanges are collective and sequential: every member calls exchange() for
// the same ops in the same order.
class SlotExchange {
 public:
  virtual ~SlotExchange() = default;
  // This rank and the group's size.
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // The largest contribution of one rank to one exchange (at least 8 bytes per rank, a multiple
  // of 64).
  virtual size_t slot_bytes() const = 0;
  // Where this rank writes its contribution to the next exchange (slot_bytes() bytes).
  virtual char* my_slot() = 0;
  // Publishes this rank's contribution under `stamp` and returns once every rank has published
  // its own; slot(q) is then readable until the next exchange. Throws Error: kTimeout at
  // `deadline` (a peer with another stamp also ends there), kPeerFailure, kAborted, kBackend
  // for a stamp no rank wrote.
  virtual void exchange(const SlotStamp& stamp, std::chrono::steady_clock::time_point deadline) = 0;
  // Rank q's contribution to the exchange that just returned.
  virtual const char* slot(int q) const = 0;
};

}  // namespace meshrt
