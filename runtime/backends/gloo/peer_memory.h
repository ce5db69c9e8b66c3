// Reads another process's memory in one copy (Linux cross-memory attach, process_vm_readv), as
// Open MPI's vader does for large messages: the shared-memory mailboxes (shm_mailboxes.h) pass a
// large message by reference instead of streaming it through a ring in two copies. The kernel
// allows it only where ptrace would be allowed (same user, no Yama or seccomp refusal): a rank
// proves it can read a peer once, by reading the peer's cookie, before any message depends on it.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>

namespace meshrt {

// When the shared-memory mailboxes pass a message by reference (MESHRT_GLOO_SINGLE_COPY).
enum class SingleCopy : uint8_t {
  // Messages of at least kSingleCopyMinBytes in a group with more ranks than CPUs (whose waiters
  // sleep at once, ShmGroup::spin()): there two copies through a ring cannot overlap, while the
  // kernel's one copy, slower than memcpy's, needs only the receiver running.
  kAuto,
  kAlways,  // Every message (tests, experiments).
  kNever,
};

// The smallest message that SingleCopy::kAuto passes by reference: below it the handshake costs
// more than a second copy.
inline constexpr size_t kSingleCopyMinBytes = size_t{256} << 10;

// A random value, nonzero and fixed for this process's life, at a fixed address: a peer that
// reads it there through read_peer_memory() has shown that it can read this process's memory.
const uint64_t& process_cookie();

// Copies `bytes` from `address` in process `pid` to `to`. Returns 0, or the errno of the failure
// (ESRCH: the process is gone; EPERM: not allowed; EFAULT: the range is not mapped there).
int read_peer_memory(pid_t pid, uint64_t address, void* to, size_t bytes);

// Whether process `pid` holds `cookie` at `address`: this process may read its memory, and `pid`
// names the process that published the cookie (not a recycled pid).
bool can_read_peer_memory(pid_t pid, uint64_t address, uint64_t cookie);

}  // namespace meshrt
