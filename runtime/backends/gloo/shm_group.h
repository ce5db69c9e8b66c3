// A shared-memory segment among the ranks of one Gloo communicator that all run on one host: small
// collectives exchange their data through it instead of TCP (as NCCL's and MPI's intra-node
// transports do). One exchange costs a cache-line handoff per peer when the ranks spin and a futex
// wake when they sleep, where a TCP message wakes Gloo's device thread and then the caller.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/collectives/futex.h"
#include "runtime/collectives/slot_exchange.h"
#include "runtime/error.h"

namespace gloo {
class Context;
}

namespace meshrt {

// One communicator's segment, mapped by each member: the collectives layer's slot exchange for
// ranks on one host, and the rings of its point-to-point mailboxes. Stamps carry gloo_tag() (the
// seq's low 16 bits and a hash of the arguments).
class ShmGroup : public SlotExchange {
 public:
  // Creates the segment (rank 0) and maps it on every rank of `context`, through three small Gloo
  // collectives: callable only before the communicator's first op. Returns null on every rank when
  // any rank cannot take part (another host, PID or mount namespace, no room in /dev/shm,
  // `slot_bytes` 0 on some rank, more than kMaxRanks); `why_not` then says why. Throws Error only
  // when Gloo fails. `with_mailboxes` adds the rings of ring(); a group that only exchanges slots
  // (a host's part of a hierarchy) goes without.
  static std::unique_ptr<ShmGroup> create(const std::shared_ptr<gloo::Context>& context,
                                          size_t slot_bytes, std::chrono::milliseconds timeout,
                                          std::string& why_not, bool with_mailboxes);
  ~ShmGroup();
  ShmGroup(const ShmGroup&) = delete;

  // Equal on two processes only when they can share a segment and see each other's pids: the same
  // boot of the same kernel, the same PID, mount (/dev/shm) and IPC namespaces, and the same
  // MESHRT_SIMULATED_HOST (a test's way to play several hosts on one). 0 when unknown.
  static uint64_t host_identity();
  ShmGroup& operator=(const ShmGroup&) = delete;

  // Groups larger than this use TCP: the segment (2 x ranks x slot_bytes) and each exchange's
  // reads grow with the group.
  static constexpr int kMaxRanks = 64;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  // The size asked for, at least 8 bytes per rank, rounded up to a multiple of 64.
  size_t slot_bytes() const override { return slot_bytes_; }
  char* my_slot() override;
  // Throws Error(kPeerFailure) when a peer process exited, Error(kAborted) after abort(). A peer
  // whose stamp differs called another collective: that ends in Error(kTimeout) at `deadline`,
  // naming both stamps, as it would over TCP.
  void exchange(const SlotStamp& stamp, std::chrono::steady_clock::time_point deadline) override;
  const char* slot(int q) const override;
  // Makes an exchange in progress (and every later one) throw Error(kAborted). Any thread.
  void abort() noexcept;
  // Group ranks whose process has exited (their pidfd), ascending. Any thread.
  std::vector<int> exited_peers() const;
  // Tells the peers that this rank left after an op failed outside the segment (a peer on another
  // host): their waits on it throw Error(kPeerFailure) at once, not at their deadline.
  void leave() noexcept;
  // The members' global ranks, by group rank: errors then name a peer by both ("rank 3 (group
  // rank 1)"). Set once, before the first exchange.
  void set_global_ranks(std::vector<int> global_ranks) { global_ranks_ = std::move(global_ranks); }
  // Peer q as errors name it: its global rank, and its group rank where that differs.
  std::string peer(int q) const;

  // The segment also holds a mailbox ring for each ordered pair of ranks (shm_mailboxes.h runs
  // send and recv over them). A ring's counters only grow: `written` by the sender alone, `read`
  // by the receiver alone; byte i of the stream lies at data[i % ring_bytes()].
  struct Ring {
    std::atomic<uint64_t>* written = nullptr;
    std::atomic<uint64_t>* read = nullptr;
    // Set by the receiver, beside `read`: 1 once it has shown that it can read the sender's
    // memory (peer_memory.h), so that large messages may go by reference; 2 when it cannot; 0
    // before it tried.
    std::atomic<uint32_t>* single_copy = nullptr;
    char* data = nullptr;
  };
  // The ring from rank `from` to rank `to` (from != to).
  Ring ring(int from, int to) const;
  // Bytes of each ring: 2 x slot_bytes() / (ranks - 1) rounded down to a power of two, between
  // 1 KiB and slot_bytes(), so that the rings take about as much of the segment as the slots;
  // 0 for a group made without mailboxes.
  size_t ring_bytes() const { return ring_bytes_; }
  // Wakes rank q if it sleeps in wait_for_mail(): after writing to it or reading from it.
  void ring_doorbell(int q);
  // Sleeps until a peer rings this rank's doorbell, at most until `deadline` or a slice of it,
  // unless `busy()` (called once this rank is registered as a sleeper, so that no ring is missed)
  // returns true. Returns at once after abort().
  void wait_for_mail(std::chrono::steady_clock::time_point deadline,
                     const std::function<bool()>& busy);
  // Throws Error(kAborted) after abort(), Error(kPeerFailure) when rank q exited or left.
  void check_peer(int q) const { throw_if_aborted_or_exited(q); }
  // Rank q's process id.
  int pid(int q) const { return peer_pids_[q]; }
  // Whether this process can read rank q's memory with read_peer_memory() (peer_memory.h).
  bool can_read_memory_of(int q) const;
  // How long a waiter spins before it sleeps (0: never), and its record of how spins went.
  std::chrono::nanoseconds spin() const { return spin_; }
  SpinBackoff& backoff() { return backoff_; }

 private:
  struct Control;
  struct SlotHeader;
  ShmGroup(void* base, int rank, int size, size_t slot_bytes, size_t ring_bytes, bool spin);
  // Bytes from one slot to the next: its header and `slot_bytes` (whole cache lines).
  static size_t slot_stride(size_t slot_bytes);
  // The whole segment: each rank's Control, two sets of slots and the mailbox rings (none when
  // `ring_bytes` is 0).
  static size_t segment_bytes(int size, size_t slot_bytes, size_t ring_bytes);
  // Bytes from one ring to the next: its two counters' cache lines and its data.
  static size_t ring_stride(size_t ring_bytes);

  Control& control(int q) const;
  SlotHeader& header(uint32_t exchange, int q) const;
  void wait_for(int q, uint32_t exchange, std::chrono::steady_clock::time_point deadline);
  // Sleeps until `deadline` (a mismatched exchange), watching abort() and rank q.
  void hold_until(std::chrono::steady_clock::time_point deadline, int q);
  void throw_if_aborted() const;
  void throw_if_aborted_or_exited(int q) const;
  bool peer_exited(int q) const;

  void* base_;
  int rank_;
  int size_;
  size_t slot_bytes_;
  size_t slot_stride_;             // Header and data of one slot, rounded to a cache line.
  size_t ring_bytes_;              // 0: no mailboxes.
  std::chrono::nanoseconds spin_;  // How long a waiter spins before it sleeps.
  SpinBackoff backoff_;            // Whether wait_for spins.
  uint32_t exchanges_ = 0;         // Exchanges done: the next one is exchanges_ + 1.
  std::atomic<bool> aborted_{false};
  std::vector<int> peer_pidfds_;   // Per rank: a pidfd, or -1 (this process, or none).
  std::vector<int> peer_pids_;     // Per rank: its pid.
  std::vector<int> global_ranks_;  // Empty: group ranks are global ranks.
};

}  // namespace meshrt
