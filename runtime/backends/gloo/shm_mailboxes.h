// Point-to-point messages between the ranks of one host's Gloo communicator, through the rings of
// its shared-memory segment (shm_group.h) instead of TCP: send, recv and batches of them. A
// message is a 32-byte header (size, tag, a stamp) and its payload, streamed through the ring of
// its ordered pair in pieces as the receiver frees room, so any size fits. Matching follows MPI: a
// receive takes the first message of its tag from its peer; one of another tag that arrives
// first is kept in this process's memory until a receive asks for it. A send completes once its
// last byte is in the ring (at once for a message that fits: an eager send, as MPI's), a receive
// once its last byte is out. A message that SingleCopy picks goes by reference where the
// receiver can read the sender's memory (peer_memory.h): the ring carries only where it lies, the
// receiver copies it once, straight into its buffer, and the send completes when it has (MPI's
// rendezvous, and vader's single copy).
#pragma once

#include <chrono>
#include <cstdint>
#include <list>
#include <span>
#include <string>
#include <vector>

#include "runtime/backends/gloo/peer_memory.h"
#include "runtime/backends/gloo/shm_group.h"
#include "runtime/op.h"

namespace meshrt {

// One communicator's mailboxes, used by the thread that runs its ops.
class ShmMailboxes {
 public:
  // Uses the rings of `group`, which must outlive this; `single_copy` says which messages go by
  // reference. Tells each peer whether this process can read its memory.
  ShmMailboxes(ShmGroup& group, SingleCopy single_copy);

  // Runs every send and receive of `ops` (peers are group ranks) together, so that a batch never
  // deadlocks on its own order, and returns when all are done. Throws Error: kInvalidArgument
  // after the batch when a receive's size differs from its matching send's (the message is
  // drained and the sender completes, as MPI's truncation error); kTimeout at `deadline`;
  // kPeerFailure when a peer of the batch exited or left; kAborted after ShmGroup::abort(). After
  // any but the first the mailboxes may hold half a message: the communicator is not used again.
  void run(std::span<const P2POp> ops, std::chrono::steady_clock::time_point deadline);

 private:
  struct Reference;  // Where a message passed by reference lies, and its handshake.
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
    ShmGroup::Ring out;        // The ring to the peer.
    ShmGroup::Ring in;         // The ring from the peer.
    uint64_t written = 0;      // This rank's counter of the ring to the peer.
    uint64_t read_seen = 0;    // The peer's counter of that ring, as last read.
    uint64_t read = 0;         // This rank's counter of the ring from the peer.
    uint32_t single_copy = 0;  // The peer's ShmGroup::Ring::single_copy, once it is known.
    Reading reading;
    std::list<Unexpected> unexpected;  // In arrival order; a list keeps `reading.to` valid.
  };
  // Progress of one op of the batch.
  struct State {
    bool matched = false;  // A receive: its message is known.
    bool done = false;
    uint64_t moved = 0;              // A send: bytes of header and padded payload in the ring.
    Reference* reference = nullptr;  // A send by reference not yet read.
  };

  void progress_until_done(std::span<const P2POp> ops,
                           std::chrono::steady_clock::time_point deadline);
  // Moves what can move for the batch without waiting; true when anything did.
  bool move_any(std::span<const P2POp> ops);
  // Move what can move to or from `peer` without waiting; true when anything did.
  bool progress_sends(std::span<const P2POp> ops, int peer);
  bool progress_receives(std::span<const P2POp> ops, int peer);
  // Whether a message of `bytes` to `peer` goes by reference.
  bool by_reference(Peer& peer, uint64_t bytes);
  // Puts send `op`'s header and Reference in the ring to q; false when there is no room yet.
  bool post_reference(const P2POp& op, int q, State& s);
  // Copies a message of `bytes` that rank q passed by reference to `to` (nullptr: a mismatched
  // receive, nothing is read), and tells q its buffer is free. Throws Error(kPeerFailure) when
  // q withdrew it or exited, Error(kBackend) when the kernel refused the copy.
  void copy_by_reference(int q, Reference& ref, char* to, uint64_t bytes);
  // After a failure: no receiver may read a failed send's buffer once the caller has it back.
  void withdraw_references(std::span<const P2POp> ops) noexcept;
  // Completes the receive (or the kept message) that `peer`'s message just filled.
  void finish_reading(std::span<const P2POp> ops, Peer& peer);
  // Completes receive `op` from a message of `bytes`, or records the mismatch.
  void complete_receive(const P2POp& op, State& state, uint64_t bytes);
  [[noreturn]] void fail_timeout(std::span<const P2POp> ops) const;

  ShmGroup& group_;
  const size_t capacity_;  // group_.ring_bytes().
  const SingleCopy single_copy_;
  std::vector<Peer> peers_;
  std::vector<State> states_;  // Of the running batch, by op.
  std::vector<int> involved_;  // The running batch's peers, ascending.
  std::vector<char> drain_;    // A mismatched message's payload goes here.
  std::string mismatch_;       // The batch's first size mismatch.
};

}  // namespace meshrt
