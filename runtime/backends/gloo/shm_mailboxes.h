// Point-to-point messages between the ranks of one host's Gloo communicator, through the rings of
// its shared-memory segment (shm_group.h) instead of TCP: send, recv and batches of them. A
// message is a 32-byte header (size, tag, a stamp) and its payload, streamed through the ring of
// its ordered pair in pieces as the receiver frees room, so any size fits. Matching follows MPI: a
// receive takes the first message of its tag from its peer; one of another tag that arrives
// first is kept in this process's memory until a receive asks for it. A send completes once its
// last byte is in the ring (at once for a message that fits: an eager send, as MPI's), a receive
// once its last byte is out.
#pragma once

#include <chrono>
#include <cstdint>
#include <list>
#include <span>
#include <string>
#include <vector>

#include "runtime/backends/gloo/shm_group.h"
#include "runtime/op.h"

namespace meshrt {

// One communicator's mailboxes, used by the thread that runs its ops.
class ShmMailboxes {
 public:
  // Uses the rings of `group`, which must outlive this.
  explicit ShmMailboxes(ShmGroup& group);

  // Runs every send and receive of `ops` (peers are group ranks) together, so that a batch never
  // deadlocks on its own order, and returns when all are done. Throws Error: kInvalidArgument
  // after the batch when a receive's size differs from its matching send's (the message is
  // drained and the sender completes, as MPI's truncation error); kTimeout at `deadline`;
  // kPeerFailure when a peer of the batch exited or left; kAborted after ShmGroup::abort(). After
  // any but the first the mailboxes may hold half a message: the communicator is not used again.
  void run(std::span<const P2POp> ops, std::chrono::steady_clock::time_point deadline);

 private:
  // A message that arrived before a receive asked for it.
  struct Unexpected {
    int tag = 0;
    std::vector<char> data;
    bool complete = false;
  };
  // The message being read from one peer's ring.
  struct Reading {
    bool active = false;
    uint64_t padded = 0;  // Payload bytes in the ring: its size rounded up to 32.
    uint64_t bytes = 0;   // Payload bytes.
    uint64_t got = 0;     // Of `padded`, read so far.
    uint64_t first = 0;   // Of `padded`, what came with the header.
    char* to = nullptr;   // Where the payload goes.
    int op = -1;          // The receive it completes, or -1: into `unexpected`.
  };
  struct Peer {
    ShmGroup::Ring out;      // The ring to the peer.
    ShmGroup::Ring in;       // The ring from the peer.
    uint64_t written = 0;    // This rank's counter of the ring to the peer.
    uint64_t read_seen = 0;  // The peer's counter of that ring, as last read.
    uint64_t read = 0;       // This rank's counter of the ring from the peer.
    Reading reading;
    std::list<Unexpected> unexpected;  // In arrival order; a list keeps `reading.to` valid.
  };
  // Progress of one op of the batch.
  struct State {
    bool matched = false;  // A receive: its message is known.
    bool done = false;
    uint64_t moved = 0;  // A send: bytes of header and padded payload in the ring.
  };

  // Move what can move to or from `peer` without waiting; true when anything did.
  bool progress_sends(std::span<const P2POp> ops, int peer);
  bool progress_receives(std::span<const P2POp> ops, int peer);
  // Completes receive `op` from a message of `bytes`, or records the mismatch.
  void complete_receive(const P2POp& op, State& state, uint64_t bytes);
  [[noreturn]] void fail_timeout(std::span<const P2POp> ops) const;

  ShmGroup& group_;
  const size_t capacity_;  // group_.ring_bytes().
  std::vector<Peer> peers_;
  std::vector<State> states_;  // Of the running batch, by op.
  std::vector<int> involved_;  // The running batch's peers, ascending.
  std::vector<char> drain_;    // A mismatched message's payload goes here.
  std::string mismatch_;       // The batch's first size mismatch.
};

}  // namespace meshrt
