#include "runtime/backends/gloo/shm_mailboxes.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "runtime/backends/gloo/peer_memory.h"
#include "runtime/collectives/futex.h"
#include "runtime/error.h"

namespace meshrt {
namespace {

using Clock = std::chrono::steady_clock;

// What precedes each payload in a ring. Positions stay multiples of its size, so a header never
// wraps. The stamp, written last, tells the receiver that the message is there: it reads the
// header's cache line alone, not the ring's `written` counter too, for any message that fits its
// first piece (one cache-line handoff for a small one, as Open MPI's xhc inlines its payloads).
struct Header {
  uint64_t bytes;
  int64_t tag;
  uint64_t by_reference;  // 1: a Reference follows in place of the payload.
  std::atomic<uint64_t> stamp;
};
constexpr uint64_t kHeader = sizeof(Header);
static_assert(kHeader == 32);
constexpr uint64_t kMagic = 0x4d41494c424f5853;  // "MAILBOXS"

// The stamp of a header at stream position `at`: what lies there from an earlier lap of the ring
// differs (a header's stamp names its own position; a payload's 8 bytes there would have to
// equal this one), as do the zeros of a ring never written.
uint64_t stamp_at(uint64_t at) { return kMagic ^ at; }

// A message passed by reference: its Reference's state, moved on by the receiver (or withdrawn by
// the sender).
enum RefState : uint64_t { kPosted = 1, kCopying, kCopied, kFailed, kWithdrawn };

uint64_t padded(uint64_t bytes) { return (bytes + kHeader - 1) & ~(kHeader - 1); }

// A ring's stream position `at` to `at + n` (n <= capacity), across the wrap.
void copy_in(const ShmGroup::Ring& ring, size_t capacity, uint64_t at, const char* from, size_t n) {
  const size_t pos = at & (capacity - 1);
  const size_t first = std::min(n, capacity - pos);
  std::memcpy(ring.data + pos, from, first);
  std::memcpy(ring.data, from + first, n - first);
}

void copy_out(const ShmGroup::Ring& ring, size_t capacity, uint64_t at, char* to, size_t n) {
  const size_t pos = at & (capacity - 1);
  const size_t first = std::min(n, capacity - pos);
  std::memcpy(to, ring.data + pos, first);
  std::memcpy(to + first, ring.data, n - first);
}

// Payload bytes published at once: a quarter ring, so that the receiver copies one piece out
// while the sender copies the next in.
uint64_t piece(size_t capacity) { return capacity / 4; }

bool sends_to(const P2POp& op, int peer) { return op.dir == P2POp::Dir::kSend && op.peer == peer; }
bool receives_from(const P2POp& op, int peer) {
  return op.dir == P2POp::Dir::kRecv && op.peer == peer;
}

}  // namespace

// What follows the header of a message passed by reference: where the receiver reads the payload
// in the sender's memory, and the handshake that tells the sender when its buffer is free again.
struct ShmMailboxes::Reference {
  uint64_t address;
  std::atomic<uint64_t> state;  // RefState.
  uint64_t unused[2];
};

ShmMailboxes::ShmMailboxes(ShmGroup& group, SingleCopy single_copy)
    : group_(group),
      capacity_(group.ring_bytes()),
      single_copy_(single_copy),
      peers_(static_cast<size_t>(group.size())) {
  for (int q = 0; q < group.size(); ++q) {
    if (q == group.rank()) continue;
    Peer& peer = peers_[static_cast<size_t>(q)];
    peer.out = group.ring(group.rank(), q);
    peer.in = group.ring(q, group.rank());
    // Tells the sender whether its messages may come by reference (whatever this rank's own
    // SingleCopy: each sender decides by its own).
    peer.in.single_copy->store(group.can_read_memory_of(q) ? 1 : 2);
  }
}

bool ShmMailboxes::by_reference(Peer& peer, uint64_t bytes) {
  switch (single_copy_) {
    case SingleCopy::kNever:
      return false;
    case SingleCopy::kAlways:
      break;
    case SingleCopy::kAuto:
      // Ranks that run at once stream large messages faster through the ring, each copying at
      // the same time (docs/performance.md): the kernel's copy runs at a fraction of memcpy's.
      if (bytes < kSingleCopyMinBytes || group_.spin().count() > 0) return false;
      break;
  }
  // 0 until the receiver has tried: such messages stream through the ring meanwhile.
  if (peer.single_copy == 0) peer.single_copy = peer.out.single_copy->load();
  return peer.single_copy == 1;
}

void ShmMailboxes::run(std::span<const P2POp> ops, Clock::time_point deadline) {
  states_.assign(ops.size(), State{});
  mismatch_.clear();
  involved_.clear();
  for (const P2POp& op : ops) involved_.push_back(op.peer);
  std::sort(involved_.begin(), involved_.end());
  involved_.erase(std::unique(involved_.begin(), involved_.end()), involved_.end());
  try {
    progress_until_done(ops, deadline);
  } catch (...) {
    withdraw_references(ops);
    throw;
  }
  if (!mismatch_.empty()) throw Error(ErrorCode::kInvalidArgument, {}, mismatch_);
}

bool ShmMailboxes::move_any(std::span<const P2POp> ops) {
  bool moved = false;
  for (const int q : involved_) {
    moved |= progress_sends(ops, q);
    moved |= progress_receives(ops, q);
  }
  return moved;
}

void ShmMailboxes::progress_until_done(std::span<const P2POp> ops, Clock::time_point deadline) {
  while (!std::all_of(states_.begin(), states_.end(), [](const State& s) { return s.done; })) {
    if (move_any(ops)) continue;
    // Nothing could move: spin while the peers are likely awake, then sleep on the doorbell.
    if (group_.spin().count() > 0 && group_.backoff().may_spin()) {
      const auto spin_end = Clock::now() + group_.spin();
      bool hit = false;
      for (uint32_t i = 1; !hit; ++i) {
        cpu_relax();
        hit = move_any(ops);
        if (i % 16 == 0 && Clock::now() >= spin_end) break;
      }
      group_.backoff().record(hit);
      if (hit) continue;
    }
    bool moved = false;
    group_.wait_for_mail(deadline, [&] { return moved = move_any(ops); });
    if (moved) continue;
    // A peer that exited may have left its messages in the rings: those were read above first.
    for (const int q : involved_) group_.check_peer(q);
    if (Clock::now() >= deadline) fail_timeout(ops);
  }
}

void ShmMailboxes::withdraw_references(std::span<const P2POp> ops) noexcept {
  for (size_t i = 0; i < ops.size(); ++i) {
    Reference* ref = states_[i].reference;
    if (ref == nullptr) continue;
    states_[i].reference = nullptr;
    uint64_t state = kPosted;
    if (ref->state.compare_exchange_strong(state, kWithdrawn) || state != kCopying) continue;
    // The receiver is copying from the buffer that the caller gets back with this failure: let
    // it finish (one system call), unless it dies meanwhile; bounded, should it be stopped.
    const auto until = Clock::now() + std::chrono::seconds(1);
    while (ref->state.load() == kCopying && Clock::now() < until) {
      try {
        group_.check_peer(ops[i].peer);
      } catch (const Error&) {
        break;
      }
      std::this_thread::yield();
    }
  }
}

bool ShmMailboxes::progress_sends(std::span<const P2POp> ops, int q) {
  Peer& peer = peers_[static_cast<size_t>(q)];
  const ShmGroup::Ring& ring = peer.out;
  const size_t capacity = capacity_;
  bool moved = false;
  for (size_t i = 0; i < ops.size(); ++i) {
    const P2POp& op = ops[i];
    State& s = states_[i];
    if (!sends_to(op, q) || s.done) continue;
    const uint64_t bytes = op.buffer.bytes();
    if (s.moved == 0 && by_reference(peer, bytes)) {
      if (!post_reference(op, q, s)) break;
      moved = true;
    }
    if (s.reference != nullptr) {
      const uint64_t state = s.reference->state.load();
      if (state == kPosted || state == kCopying) break;  // Messages to one peer go in order.
      s.reference = nullptr;
      if (state == kFailed) {
        throw Error(ErrorCode::kBackend, {},
                    fmt::format("gloo shared memory: {} could not read this rank's message of {} "
                                "bytes (tag {}) from its memory",
                                group_.peer(q), bytes, op.tag));
      }
      s.done = true;
      moved = true;
      continue;
    }
    const uint64_t total = kHeader + padded(bytes);
    while (s.moved < total) {
      // A header goes with the whole first piece (the receiver counts on it), later pieces
      // as far as they fit. The receiver's counter is read only when the last one read leaves
      // too little room: it is a cache line the receiver writes.
      const uint64_t first = std::min(padded(bytes), piece(capacity));
      const uint64_t want = s.moved == 0 ? kHeader + first : 1;
      uint64_t room = capacity - (peer.written - peer.read_seen);
      if (room < want) {
        peer.read_seen = ring.read->load();
        room = capacity - (peer.written - peer.read_seen);
        if (room < want) break;
      }
      const uint64_t at = peer.written;
      const uint64_t off = s.moved == 0 ? 0 : s.moved - kHeader;
      const uint64_t more =
          s.moved == 0 ? first : std::min({room, piece(capacity), total - s.moved});
      const uint64_t real = off < bytes ? std::min(more, bytes - off) : 0;
      const uint64_t payload_at = s.moved == 0 ? at + kHeader : at;
      copy_in(ring, capacity, payload_at, static_cast<const char*>(op.buffer.data) + off, real);
      if (s.moved == 0) {
        auto* h = reinterpret_cast<Header*>(ring.data + (at & (capacity - 1)));
        h->bytes = bytes;
        h->tag = op.tag;
        h->by_reference = 0;
        h->stamp.store(stamp_at(at));  // seq_cst: before the load of the doorbell's flag.
      }
      const uint64_t n = (s.moved == 0 ? kHeader : 0) + more;
      peer.written += n;
      s.moved += n;
      // seq_cst, as the stamp: a release store could pass ring_doorbell()'s load of the
      // receiver's sleeper flag, and a receiver waiting for this piece would sleep through it.
      ring.written->store(peer.written);
      group_.ring_doorbell(q);
      moved = true;
    }
    if (s.moved < total) break;  // Messages to one peer go in posting order.
    s.done = true;
  }
  return moved;
}

bool ShmMailboxes::post_reference(const P2POp& op, int q, State& s) {
  static_assert(sizeof(Reference) == kHeader);  // Positions stay multiples of a header.
  Peer& peer = peers_[static_cast<size_t>(q)];
  const ShmGroup::Ring& ring = peer.out;
  if (capacity_ - (peer.written - peer.read_seen) < 2 * kHeader) {
    peer.read_seen = ring.read->load();
    if (capacity_ - (peer.written - peer.read_seen) < 2 * kHeader) return false;
  }
  const uint64_t at = peer.written;
  auto* ref = reinterpret_cast<Reference*>(ring.data + ((at + kHeader) & (capacity_ - 1)));
  ref->address = reinterpret_cast<uint64_t>(op.buffer.data);
  ref->state.store(kPosted, std::memory_order_relaxed);  // Published by the stamp below.
  auto* h = reinterpret_cast<Header*>(ring.data + (at & (capacity_ - 1)));
  h->bytes = op.buffer.bytes();
  h->tag = op.tag;
  h->by_reference = 1;
  h->stamp.store(stamp_at(at));
  peer.written += 2 * kHeader;
  s.moved = 2 * kHeader;
  s.reference = ref;
  ring.written->store(peer.written);
  group_.ring_doorbell(q);
  return true;
}

void ShmMailboxes::copy_by_reference(int q, Reference& ref, char* to, uint64_t bytes) {
  uint64_t state = kPosted;
  if (!ref.state.compare_exchange_strong(state, kCopying)) {
    throw Error(ErrorCode::kPeerFailure, {},
                fmt::format("gloo shared memory: {}'s send of {} bytes failed before this rank "
                            "read it",
                            group_.peer(q), bytes));
  }
  const int err = to == nullptr ? 0 : read_peer_memory(group_.pid(q), ref.address, to, bytes);
  // seq_cst: before ring_doorbell()'s load of the sender's sleeper flag.
  ref.state.store(err == 0 ? kCopied : kFailed);
  group_.ring_doorbell(q);
  if (err == ESRCH) {
    throw Error(ErrorCode::kPeerFailure, {},
                fmt::format("gloo shared memory: {} exited while this rank read its message of "
                            "{} bytes",
                            group_.peer(q), bytes));
  }
  if (err != 0) {
    throw Error(ErrorCode::kBackend, {},
                fmt::format("gloo shared memory: reading {}'s message of {} bytes from its "
                            "memory failed: {}",
                            group_.peer(q), bytes, std::strerror(err)));
  }
}

bool ShmMailboxes::progress_receives(std::span<const P2POp> ops, int q) {
  Peer& peer = peers_[static_cast<size_t>(q)];
  bool moved = false;
  // Receives that a message kept earlier completes, in posting order.
  for (size_t i = 0; i < ops.size(); ++i) {
    const P2POp& op = ops[i];
    State& s = states_[i];
    if (!receives_from(op, q) || s.matched) continue;
    const auto kept = std::find_if(peer.unexpected.begin(), peer.unexpected.end(),
                                   [&](const Unexpected& u) { return u.tag == op.tag; });
    if (kept == peer.unexpected.end() || !kept->complete) continue;
    if (kept->data.size() == op.buffer.bytes()) {
      std::memcpy(op.buffer.data, kept->data.data(), kept->data.size());
    }
    s.matched = true;
    complete_receive(op, s, kept->data.size());
    peer.unexpected.erase(kept);
    moved = true;
  }
  const ShmGroup::Ring& ring = peer.in;
  const size_t capacity = capacity_;
  // Frees what was read for the sender: after each piece, so that it refills the ring meanwhile.
  uint64_t freed = peer.read;
  auto free_read = [&] {
    if (peer.read == freed) return;
    freed = peer.read;
    ring.read->store(peer.read);
    group_.ring_doorbell(q);
  };
  Reading& r = peer.reading;
  for (;;) {
    if (!r.active) {
      const auto& h = *reinterpret_cast<const Header*>(ring.data + (peer.read & (capacity - 1)));
      if (h.stamp.load() != stamp_at(peer.read)) {
        // Nothing yet, unless the sender's counter is past it: the sender stores the stamp
        // before the counter, so a stamp still wrong then was written by another process.
        if (static_cast<int64_t>(ring.written->load() - peer.read) >=
                static_cast<int64_t>(kHeader) &&
            h.stamp.load() != stamp_at(peer.read)) {
          throw Error(ErrorCode::kBackend, {},
                      fmt::format("gloo shared memory: the mailbox from {} holds no message "
                                  "header where one belongs: another process wrote into this "
                                  "group's segment (docs/reliability.md)",
                                  group_.peer(q)));
        }
        break;
      }
      peer.read += kHeader;
      moved = true;
      r = Reading{.active = true, .padded = padded(h.bytes), .bytes = h.bytes};
      r.first = std::min(r.padded, piece(capacity));
      // The first receive of its tag still waiting takes it, unless a message of that tag that
      // came earlier is kept: then it is kept too, behind it.
      const bool behind = std::any_of(peer.unexpected.begin(), peer.unexpected.end(),
                                      [&](const Unexpected& u) { return u.tag == h.tag; });
      for (size_t i = 0; i < ops.size() && !behind; ++i) {
        if (receives_from(ops[i], q) && !states_[i].matched && ops[i].tag == h.tag) {
          r.op = static_cast<int>(i);
          break;
        }
      }
      if (r.op >= 0) {
        states_[static_cast<size_t>(r.op)].matched = true;
        const BufferView& to = ops[static_cast<size_t>(r.op)].buffer;
        if (to.bytes() == h.bytes) {
          r.to = static_cast<char*>(to.data);
        } else if (h.by_reference == 0) {
          drain_.resize(h.bytes);
          r.to = drain_.data();
        }  // A mismatched message passed by reference is not read at all.
      } else {
        Unexpected& u = peer.unexpected.emplace_back();
        u.tag = h.tag;
        u.data.resize(h.bytes);
        r.to = u.data.data();
      }
      if (h.by_reference != 0) {
        // One copy, straight from the sender's buffer; the ring held only where it lies.
        auto& ref = *reinterpret_cast<Reference*>(ring.data + (peer.read & (capacity - 1)));
        copy_by_reference(q, ref, r.to, r.bytes);
        peer.read += kHeader;
        free_read();
        r.active = false;
        finish_reading(ops, peer);
        continue;
      }
    }
    // The first piece came with the header; later ones are counted by the sender's counter.
    uint64_t available = r.first - std::min(r.got, r.first);
    if (available == 0) {
      const int64_t counted = static_cast<int64_t>(ring.written->load() - peer.read);
      available = static_cast<uint64_t>(std::max<int64_t>(counted, 0));
    }
    const uint64_t n = std::min({available, r.padded - r.got, piece(capacity)});
    const uint64_t real = r.got < r.bytes ? std::min(n, r.bytes - r.got) : 0;
    copy_out(ring, capacity, peer.read, r.to + r.got, real);
    peer.read += n;
    r.got += n;
    moved |= n > 0;
    free_read();
    if (r.got < r.padded) {
      if (n > 0) continue;
      break;
    }
    r.active = false;
    finish_reading(ops, peer);
  }
  return moved;
}

void ShmMailboxes::finish_reading(std::span<const P2POp> ops, Peer& peer) {
  const Reading& r = peer.reading;
  if (r.op >= 0) {
    complete_receive(ops[static_cast<size_t>(r.op)], states_[static_cast<size_t>(r.op)], r.bytes);
  } else {
    peer.unexpected.back().complete = true;
  }
}

void ShmMailboxes::complete_receive(const P2POp& op, State& state, uint64_t bytes) {
  state.done = true;
  if (bytes != op.buffer.bytes() && mismatch_.empty()) {
    mismatch_ = fmt::format("recv of {} bytes from rank {} (tag {}) matched a send of {} bytes",
                            op.buffer.bytes(), op.peer, op.tag, bytes);
  }
}

void ShmMailboxes::fail_timeout(std::span<const P2POp> ops) const {
  std::vector<std::string> waiting;
  for (size_t i = 0; i < ops.size(); ++i) {
    if (states_[i].done) continue;
    const P2POp& op = ops[i];
    waiting.push_back(op.dir == P2POp::Dir::kSend
                          ? fmt::format("send of {} bytes to {} (tag {})", op.buffer.bytes(),
                                        group_.peer(op.peer), op.tag)
                          : fmt::format("recv of {} bytes from {} (tag {})", op.buffer.bytes(),
                                        group_.peer(op.peer), op.tag));
  }
  throw Error(ErrorCode::kTimeout, {},
              fmt::format("gloo shared memory: timed out in {}", fmt::join(waiting, ", ")));
}

}  // namespace meshrt
