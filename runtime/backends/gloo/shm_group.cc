#include "runtime/backends/gloo/shm_group.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <gloo/broadcast.h>
#include <gloo/context.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <utility>

#include "runtime/backends/gloo/gloo_setup.h"
#include "runtime/backends/gloo/peer_memory.h"
#include "runtime/collectives/futex.h"
#include "trace/env.h"
#include "trace/logging.h"

namespace meshrt {
namespace {

using Clock = std::chrono::steady_clock;

// Tags of the setup collectives: they run before the communicator's first op, whose tags start
// from collective seq 1, and messages of one slot match in order anyway.
constexpr uint32_t kSetupTag = 0x53484d00;  // "SHM\0"

// How long a waiter spins before it sleeps on the futex, when every rank can have a core: an
// exchange between awake ranks takes well under this. Oversubscribed groups sleep at once: a
// spinning rank would take the core its peer needs.
constexpr std::chrono::nanoseconds kSpin = std::chrono::microseconds(50);

// The longest a waiter sleeps before it checks its deadline and whether a peer exited.
constexpr std::chrono::milliseconds kSlice{20};

constexpr size_t kCacheLine = 64;
constexpr size_t kNameBytes = 64;

// Whether exchange number `have` is at or past `want`, across the 32-bit wrap.
bool reached(uint32_t have, uint32_t want) { return static_cast<int32_t>(have - want) >= 0; }

std::string read_first_line(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

std::string read_link(const char* path) {
  std::array<char, 256> buf{};
  const ssize_t n = readlink(path, buf.data(), buf.size() - 1);
  return n > 0 ? std::string(buf.data(), static_cast<size_t>(n)) : std::string();
}

// The CPUs this process may run on, as a bit mask over the first kMaskWords x 64; empty when the
// kernel will not say.
constexpr size_t kMaskWords = 16;
using CpuMask = std::array<uint64_t, kMaskWords>;
CpuMask cpu_mask() {
  CpuMask mask{};
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return mask;
  for (size_t cpu = 0; cpu < kMaskWords * 64 && cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) mask[cpu / 64] |= uint64_t{1} << (cpu % 64);
  }
  return mask;
}

// Unmaps on scope exit unless released.
struct Mapping {
  void* base = MAP_FAILED;
  size_t bytes = 0;
  ~Mapping() {
    if (base != MAP_FAILED) munmap(base, bytes);
  }
  void* release() { return std::exchange(base, MAP_FAILED); }
};

// Maps the segment `name` of `bytes` (creating it on rank 0); "" on success, else why not.
std::string map_segment(const std::string& name, bool create, size_t bytes, Mapping& mapping) {
  const int flags = create ? O_RDWR | O_CREAT | O_EXCL : O_RDWR;
  const int fd = shm_open(name.c_str(), flags, 0600);  // Only this user may open it.
  if (fd < 0) return fmt::format("shm_open({}): {}", name, std::strerror(errno));
  // A name this call created and then failed to map goes at once (ShmGroup::create's guard
  // removes it on every other path).
  std::string why;
  if (create) {
    // Reserves the pages now: tmpfs out of room later would be a SIGBUS on first touch.
    if (const int rc = posix_fallocate(fd, 0, static_cast<off_t>(bytes)); rc != 0) {
      why = fmt::format("reserving {} bytes in /dev/shm: {}", bytes, std::strerror(rc));
    }
  } else {
    struct stat st {};
    if (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) != bytes) {
      why = fmt::format("{} is not the segment rank 0 made", name);
    }
  }
  if (why.empty()) {
    mapping.base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    mapping.bytes = bytes;
    if (mapping.base == MAP_FAILED) why = fmt::format("mmap: {}", std::strerror(errno));
  }
  close(fd);
  if (create && !why.empty()) shm_unlink(name.c_str());
  return why;
}

// A segment's name lives only from its creation until every rank mapped it; a creator killed in
// that instant leaves it in /dev/shm (tmpfs: until reboot). Before making its first segment a
// process removes such names: this user's `meshrt-<pid>-<16 hex>` whose creator is gone and that
// are older than any setup (so a job starting right now, even in another PID namespace, keeps
// its own).
void sweep_leaked_segments() {
  static std::atomic<bool> swept{false};
  if (swept.exchange(true)) return;
  std::error_code ec;
  const auto now = std::filesystem::file_time_type::clock::now();
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm", ec)) {
    const std::string name = entry.path().filename().string();
    unsigned pid = 0;
    char hex[17] = {};
    int end = 0;
    if (std::sscanf(name.c_str(), "meshrt-%u-%16[0-9a-f]%n", &pid, hex, &end) != 2 ||
        static_cast<size_t>(end) != name.size() || std::strlen(hex) != 16) {
      continue;
    }
    struct stat st {};
    if (::stat(entry.path().c_str(), &st) != 0 || st.st_uid != ::geteuid()) continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
    std::error_code time_ec;
    const auto written = std::filesystem::last_write_time(entry.path(), time_ec);
    if (time_ec || now - written < std::chrono::seconds(30)) continue;
    if (shm_unlink(("/" + name).c_str()) == 0) {
      log().info("removed /dev/shm/{}, left by process {} that died while making it", name, pid);
    }
  }
}

// A segment rank 0 could not make (/dev/shm full or too small, as in many containers) silently
// turns every op of the group into TCP: say so once per process, with the room it needed.
void warn_no_segment(const std::string& why, size_t bytes) {
  static std::atomic<bool> said{false};
  if (said.exchange(true)) return;
  struct statvfs fs {};
  const std::string room =
      statvfs("/dev/shm", &fs) == 0
          ? fmt::format("; /dev/shm has {} bytes free",
                        static_cast<uint64_t>(fs.f_bavail) * static_cast<uint64_t>(fs.f_frsize))
          : "";
  log().warn(
      "shared memory between this host's ranks is unavailable ({}): a segment of {} bytes is "
      "needed{}; the ranks use TCP instead, which is slower. Make room in /dev/shm (docker: "
      "--shm-size) or lower MESHRT_GLOO_SHM_SLOT_BYTES",
      why, bytes, room);
}

}  // namespace

uint64_t ShmGroup::host_identity() {
  const std::string boot = read_first_line("/proc/sys/kernel/random/boot_id");
  const std::string pid_ns = read_link("/proc/self/ns/pid");
  const std::string mnt_ns = read_link("/proc/self/ns/mnt");
  const std::string ipc_ns = read_link("/proc/self/ns/ipc");
  if (boot.empty() || pid_ns.empty() || mnt_ns.empty() || ipc_ns.empty()) return 0;
  // Mixed in, it can only tell ranks apart, never join two that cannot share.
  const std::string simulated = trace::env::get({"MESHRT_SIMULATED_HOST"}).value_or("");
  const uint64_t h =
      std::hash<std::string>{}(boot + "|" + pid_ns + "|" + mnt_ns + "|" + ipc_ns + "|" + simulated);
  return h == 0 ? 1 : h;
}

// One rank's progress, alone on its cache line: only that rank writes `published`.
struct alignas(kCacheLine) ShmGroup::Control {
  std::atomic<uint32_t> published;     // Futex word: the last exchange this rank published.
  std::atomic<uint32_t> waiters;       // Ranks asleep (or going to sleep) on `published`.
  int32_t pid;                         // The rank's process.
  std::atomic<uint32_t> left;          // 1 once the rank left after an op failed (leave()).
  std::atomic<uint32_t> doorbell;      // Futex word: bumped by a peer that wrote or read mail.
  std::atomic<uint32_t> mail_waiters;  // 1 while the rank sleeps (or goes to) on `doorbell`.
  uint64_t cookie_address;             // Where the rank's process_cookie() lies, in its memory,
  uint64_t cookie;                     // and its value.
};

// A ring's counters, each on a cache line of its own: one is the sender's, one the receiver's.
struct RingCounters {
  alignas(kCacheLine) std::atomic<uint64_t> written;
  alignas(kCacheLine) std::atomic<uint64_t> read;
  std::atomic<uint32_t> single_copy;  // Ring::single_copy.
};

// The head of a slot, sharing its cache line with the slot's first 32 bytes: a waiter that sees
// `exchange` finds the stamp, and a contribution of up to 32 bytes, in the line it already
// pulled (one cache-line transfer per peer, not three, as Open MPI's xhc inlines small data).
struct ShmGroup::SlotHeader {
  std::atomic<uint32_t> exchange;  // The exchange whose contribution the slot holds: set last.
  uint32_t reserved = 0;
  SlotStamp stamp;
  uint64_t reserved2 = 0;
};

size_t ShmGroup::slot_stride(size_t slot_bytes) {
  static_assert(sizeof(SlotHeader) == 32 && sizeof(SlotStamp) == 16);
  return (sizeof(SlotHeader) + slot_bytes + kCacheLine - 1) / kCacheLine * kCacheLine;
}

size_t ShmGroup::ring_stride(size_t ring_bytes) {
  return ring_bytes == 0 ? 0 : sizeof(RingCounters) + ring_bytes;
}

size_t ShmGroup::segment_bytes(int size, size_t slot_bytes, size_t ring_bytes) {
  const size_t n = static_cast<size_t>(size);
  return sizeof(Control) * n + 2 * slot_stride(slot_bytes) * n +
         n * (n - 1) * ring_stride(ring_bytes);
}

std::unique_ptr<ShmGroup> ShmGroup::create(const std::shared_ptr<gloo::Context>& context,
                                           size_t slot_bytes, std::chrono::milliseconds timeout,
                                           std::string& why_not, bool with_mailboxes) {
  const int n = context->size;
  const int rank = context->rank;
  auto refuse = [&](std::string why) -> std::unique_ptr<ShmGroup> {
    why_not = std::move(why);
    return nullptr;
  };
  if (n < 2 || n > kMaxRanks) return refuse(fmt::format("{} ranks", n));
  // At least 8 bytes per rank, so that an exchange carries one element of each rank's block
  // (all_to_all, scatter, reduce_scatter), in whole cache lines, so that every slot starts on one.
  if (slot_bytes != 0) slot_bytes = std::max(slot_bytes, size_t{8} * static_cast<size_t>(n));
  slot_bytes = (slot_bytes + kCacheLine - 1) / kCacheLine * kCacheLine;
  // Every rank decides from the same gathered offers, so every rank decides alike.
  struct Offer {
    uint64_t host;
    uint64_t slot_bytes;
    CpuMask cpus;  // Where this rank may run: the union says whether the ranks can all spin.
  };
  const uint64_t host = host_identity();
  const auto offers = gloo_all_gather_value(
      context, Offer{host, host == 0 ? 0 : slot_bytes, cpu_mask()}, kSetupTag, timeout);
  size_t cpus = 0;
  for (size_t w = 0; w < kMaskWords; ++w) {
    uint64_t word = 0;
    for (const Offer& o : offers) word |= o.cpus[w];
    cpus += static_cast<size_t>(std::popcount(word));
  }
  for (int q = 0; q < n; ++q) {
    if (offers[q].slot_bytes == 0) {
      return refuse(fmt::format("rank {} has MESHRT_GLOO_SHM_SLOT_BYTES=0 or an unknown host", q));
    }
    if (offers[q].host != offers[0].host) return refuse(fmt::format("rank {} on another host", q));
    if (offers[q].slot_bytes != offers[0].slot_bytes) {
      return refuse("ranks set different MESHRT_GLOO_SHM_SLOT_BYTES");
    }
  }
  size_t ring_bytes = 0;
  if (with_mailboxes) {
    const size_t share = 2 * slot_bytes / static_cast<size_t>(n - 1);
    ring_bytes = std::max(size_t{1024}, std::bit_floor(std::min(slot_bytes, share)));
  }
  const size_t bytes = segment_bytes(n, slot_bytes, ring_bytes);

  // Who maps the segment: its pid (liveness), and where a peer that may read its memory finds the
  // cookie that shows it (single-copy messages).
  auto publish_identity = [](Control& c) {
    c.pid = getpid();
    c.cookie_address = reinterpret_cast<uint64_t>(&process_cookie());
    c.cookie = process_cookie();
  };
  std::array<char, kNameBytes> name{};
  Mapping mapping;
  std::string why;
  // Rank 0 removes the name on every way out, a Gloo failure of the steps below included: by then
  // every rank that will map it has (mappings outlive the name).
  struct Unlink {
    std::string name;
    ~Unlink() {
      if (!name.empty()) shm_unlink(name.c_str());
    }
  } unlink_on_exit;
  if (rank == 0) {
    sweep_leaked_segments();
    std::random_device random;
    const std::string s = fmt::format("/meshrt-{}-{:08x}{:08x}", getpid(), random(), random());
    why = map_segment(s, true, bytes, mapping);
    if (!why.empty()) warn_no_segment(why, bytes);
    if (why.empty()) {
      unlink_on_exit.name = s;
      std::memcpy(name.data(), s.data(), s.size());
      publish_identity(static_cast<Control*>(mapping.base)[0]);
    }
  }
  gloo::BroadcastOptions b(context);
  b.setOutput(name.data(), name.size());
  b.setRoot(0);
  b.setTag(kSetupTag + 1);
  b.setTimeout(timeout);
  gloo::broadcast(b);
  if (name[0] == '\0') return refuse(rank == 0 ? why : "rank 0 could not create the segment");
  const std::string segment(name.data());
  if (rank != 0) {
    why = map_segment(segment, false, bytes, mapping);
    if (why.empty()) publish_identity(static_cast<Control*>(mapping.base)[rank]);
  }
  // The name goes (unlink_on_exit) once every rank has mapped it or failed to.
  const auto mapped =
      gloo_all_gather_value(context, uint64_t{why.empty() ? 1u : 0u}, kSetupTag, timeout);
  for (int q = 0; q < n; ++q) {
    if (mapped[q] == 0) return refuse(q == rank ? why : fmt::format("rank {} could not map it", q));
  }
  // Spin only when the ranks together may run on as many CPUs as there are ranks.
  const bool spin = static_cast<size_t>(n) <= cpus;
  return std::unique_ptr<ShmGroup>(
      new ShmGroup(mapping.release(), rank, n, slot_bytes, ring_bytes, spin));
}

ShmGroup::ShmGroup(void* base, int rank, int size, size_t slot_bytes, size_t ring_bytes, bool spin)
    : base_(base),
      rank_(rank),
      size_(size),
      slot_bytes_(slot_bytes),
      slot_stride_(slot_stride(slot_bytes)),
      ring_bytes_(ring_bytes),
      spin_(spin ? kSpin : std::chrono::nanoseconds(0)),
      peer_pidfds_(static_cast<size_t>(size), -1),
      peer_pids_(static_cast<size_t>(size), 0) {
  const int self = getpid();
  for (int q = 0; q < size_; ++q) {
    peer_pids_[q] = control(q).pid;
    if (q != rank_ && peer_pids_[q] != self) {
      peer_pidfds_[q] = static_cast<int>(syscall(SYS_pidfd_open, peer_pids_[q], 0));
    }
  }
}

ShmGroup::~ShmGroup() {
  for (int fd : peer_pidfds_) {
    if (fd >= 0) close(fd);
  }
  munmap(base_, segment_bytes(size_, slot_bytes_, ring_bytes_));
}

inline ShmGroup::Control& ShmGroup::control(int q) const { return static_cast<Control*>(base_)[q]; }

inline ShmGroup::SlotHeader& ShmGroup::header(uint32_t exchange, int q) const {
  // Exchanges alternate between two sets of slots. A rank starts exchange e + 2 only after every
  // rank published e + 1, which each did after reading all of e: so e's slots are free again.
  char* slots = static_cast<char*>(base_) + sizeof(Control) * size_;
  const size_t index = (exchange & 1u) * size_ + q;
  return *reinterpret_cast<SlotHeader*>(slots + index * slot_stride_);
}

char* ShmGroup::my_slot() {
  return reinterpret_cast<char*>(&header(exchanges_ + 1, rank_)) + sizeof(SlotHeader);
}

const char* ShmGroup::slot(int q) const {
  return reinterpret_cast<const char*>(&header(exchanges_, q)) + sizeof(SlotHeader);
}

void ShmGroup::exchange(const SlotStamp& stamp, Clock::time_point deadline) {
  throw_if_aborted();
  const uint32_t e = ++exchanges_;
  SlotHeader& mine = header(e, rank_);
  mine.stamp = stamp;
  mine.exchange.store(e, std::memory_order_release);  // What spinning peers watch.
  Control& me = control(rank_);
  // seq_cst store, then load of `waiters`; a waiter does the opposite (wait_for): one of the two
  // sees the other's write, so a sleeper is never missed.
  me.published.store(e);
  if (me.waiters.load() != 0) futex_wake_all(me.published);
  for (int q = 0; q < size_; ++q) {
    if (q == rank_) continue;
    wait_for(q, e, deadline);
    const SlotStamp theirs = header(e, q).stamp;
    // Every rank writes its stamp from gloo_tag(): the tag's low 16 bits are the seq's, and
    // ranks of one group are never far apart. A stamp that breaks either was not written by a
    // rank: something else wrote into the segment. Say that, not "a different collective".
    const uint64_t apart = theirs.collective_seq > stamp.collective_seq
                               ? theirs.collective_seq - stamp.collective_seq
                               : stamp.collective_seq - theirs.collective_seq;
    if ((theirs.tag & 0xffffu) != (theirs.collective_seq & 0xffffu) || apart > (1u << 20)) {
      throw Error(ErrorCode::kBackend, {},
                  fmt::format("gloo shared memory: the header {}'s slot carries (seq {}, tag "
                              "{:#x}), which no rank writes: another process wrote into this "
                              "group's segment, so this op's data cannot be trusted (the segment "
                              "trusts processes of the same user, as NCCL's and MPI's do: "
                              "docs/reliability.md)",
                              peer(q), theirs.collective_seq, theirs.tag));
    }
    if (theirs.collective_seq != stamp.collective_seq || theirs.tag != stamp.tag) {
      // Over TCP such ranks' messages never match and the op hangs until its timeout, while the
      // live monitor names the stall and the flight recorder dumps. Shared memory behaves alike.
      hold_until(deadline, q);
      throw Error(
          ErrorCode::kTimeout, {},
          fmt::format("gloo shared memory: {} is in collective #{} (tag {:#x}) where this "
                      "rank is in #{} (tag {:#x})",
                      peer(q), theirs.collective_seq, theirs.tag, stamp.collective_seq, stamp.tag));
    }
  }
}

std::string ShmGroup::peer(int q) const {
  if (q >= static_cast<int>(global_ranks_.size()) || global_ranks_[q] == q) {
    return fmt::format("rank {}", q);
  }
  return fmt::format("rank {} (group rank {})", global_ranks_[q], q);
}

void ShmGroup::hold_until(Clock::time_point deadline, int q) {
  Control& me = control(rank_);
  const uint32_t mine = me.published.load();  // Only this rank changes it: only abort() wakes.
  for (auto now = Clock::now(); now < deadline; now = Clock::now()) {
    futex_wait(me.published, mine, std::min<Clock::duration>(kSlice, deadline - now));
    throw_if_aborted_or_exited(q);
  }
}

void ShmGroup::throw_if_aborted() const {
  if (aborted_.load()) {
    throw Error(ErrorCode::kAborted, {}, "gloo shared memory: the communicator was aborted");
  }
}

void ShmGroup::throw_if_aborted_or_exited(int q) const {
  throw_if_aborted();
  if (peer_exited(q)) {
    throw Error(ErrorCode::kPeerFailure, {},
                fmt::format("gloo shared memory: {} (pid {}) exited", peer(q), peer_pids_[q]));
  }
  if (control(q).left.load() != 0) {
    throw Error(ErrorCode::kPeerFailure, {},
                fmt::format("gloo shared memory: {} left the group: its communicator was "
                            "aborted, or its op failed with a peer on another host (its own "
                            "error says which)",
                            peer(q)));
  }
}

void ShmGroup::wait_for(int q, uint32_t e, Clock::time_point deadline) {
  // The slot's own header is set before `published` and sits on the line the stamp and small
  // data are read from: watching it costs no extra transfer. Sleepers use the control line.
  const std::atomic<uint32_t>& slot_exchange = header(e, q).exchange;
  if (reached(slot_exchange.load(std::memory_order_acquire), e)) return;
  Control& c = control(q);
  if (spin_.count() > 0 && backoff_.may_spin()) {
    // The clock is read first after 64 polls: most exchanges between awake ranks end sooner,
    // and a read costs ~30 ns on a VM's kvm-clock.
    Clock::time_point spin_end{};
    for (uint32_t i = 1;; ++i) {
      cpu_relax();
      if (reached(slot_exchange.load(std::memory_order_acquire), e)) {
        backoff_.record(true);
        return;
      }
      if (i % 64 == 0) {
        const auto now = Clock::now();
        if (i == 64) spin_end = now + spin_;
        if (now >= spin_end) break;
      }
    }
    backoff_.record(false);  // The waits after it sleep at once for a while.
  }
  for (;;) {
    const auto now = Clock::now();
    if (now >= deadline) {
      throw Error(ErrorCode::kTimeout, {},
                  fmt::format("gloo shared memory: timed out waiting for {}", peer(q)));
    }
    c.waiters.fetch_add(1);
    const uint32_t seen = c.published.load();
    // abort() sets the flag, then wakes. Checked here, an abort before this point is seen, one
    // during the sleep wakes it, and one in between is seen at the latest after kSlice.
    if (!reached(seen, e) && !aborted_.load()) {
      futex_wait(c.published, seen, std::min<Clock::duration>(kSlice, deadline - now));
    }
    c.waiters.fetch_sub(1);
    if (reached(c.published.load(std::memory_order_acquire), e)) return;
    throw_if_aborted_or_exited(q);
  }
}

bool ShmGroup::can_read_memory_of(int q) const {
  const Control& c = control(q);
  return can_read_peer_memory(peer_pids_[q], c.cookie_address, c.cookie);
}

bool ShmGroup::peer_exited(int q) const {
  if (peer_pidfds_[q] >= 0) {
    pollfd p{peer_pidfds_[q], POLLIN, 0};
    return poll(&p, 1, 0) > 0;  // A pidfd polls readable once its process exited.
  }
  if (peer_pids_[q] == getpid()) return false;  // Threads of this process (tests).
  return kill(peer_pids_[q], 0) != 0 && errno == ESRCH;
}

std::vector<int> ShmGroup::exited_peers() const {
  std::vector<int> exited;
  for (int q = 0; q < size_; ++q) {
    if (q != rank_ && peer_exited(q)) exited.push_back(q);
  }
  return exited;
}

void ShmGroup::leave() noexcept {
  Control& me = control(rank_);
  me.left.store(1);
  futex_wake_all(me.published);
  for (int q = 0; q < size_; ++q) {
    if (q != rank_) ring_doorbell(q);
  }
}

void ShmGroup::abort() noexcept {
  aborted_.store(true);
  for (int q = 0; q < size_; ++q) futex_wake_all(control(q).published);
  Control& me = control(rank_);
  me.doorbell.fetch_add(1);
  futex_wake_all(me.doorbell);
}

ShmGroup::Ring ShmGroup::ring(int from, int to) const {
  const size_t n = static_cast<size_t>(size_);
  const size_t index =
      static_cast<size_t>(from) * (n - 1) + static_cast<size_t>(to < from ? to : to - 1);
  char* rings = static_cast<char*>(base_) + sizeof(Control) * n + 2 * slot_stride_ * n;
  char* at = rings + index * ring_stride(ring_bytes_);
  auto* counters = reinterpret_cast<RingCounters*>(at);
  return Ring{&counters->written, &counters->read, &counters->single_copy,
              at + sizeof(RingCounters)};
}

void ShmGroup::ring_doorbell(int q) {
  // seq_cst: the caller's store to the ring, then this load; the sleeper registers, then reads
  // the ring (wait_for_mail): one of the two sees the other's write.
  Control& c = control(q);
  if (c.mail_waiters.load() == 0) return;
  c.doorbell.fetch_add(1);
  futex_wake_all(c.doorbell);
}

void ShmGroup::wait_for_mail(Clock::time_point deadline, const std::function<bool()>& busy) {
  Control& me = control(rank_);
  const auto now = Clock::now();
  if (now >= deadline) return;
  me.mail_waiters.store(1);
  const uint32_t seen = me.doorbell.load();
  if (!busy() && !aborted_.load()) {
    futex_wait(me.doorbell, seen, std::min<Clock::duration>(kSlice, deadline - now));
  }
  me.mail_waiters.store(0);
}

}  // namespace meshrt
