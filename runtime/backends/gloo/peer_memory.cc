#include "runtime/backends/gloo/peer_memory.h"

#include <sys/uio.h>

#include <cerrno>
#include <random>

namespace meshrt {

const uint64_t& process_cookie() {
  static const uint64_t cookie = [] {
    std::random_device random;
    const uint64_t c = (uint64_t{random()} << 32) ^ random();
    return c == 0 ? 1 : c;
  }();
  return cookie;
}

int read_peer_memory(pid_t pid, uint64_t address, void* to, size_t bytes) {
  auto* out = static_cast<char*>(to);
  // The kernel may copy less than asked (it stops at an unmapped page, or a signal): go on.
  while (bytes > 0) {
    iovec local{out, bytes};
    iovec remote{reinterpret_cast<void*>(address), bytes};
    const ssize_t n = process_vm_readv(pid, &local, 1, &remote, 1, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (n == 0) return EFAULT;
    out += n;
    address += static_cast<uint64_t>(n);
    bytes -= static_cast<size_t>(n);
  }
  return 0;
}

bool can_read_peer_memory(pid_t pid, uint64_t address, uint64_t cookie) {
  uint64_t seen = 0;
  return address != 0 && read_peer_memory(pid, address, &seen, sizeof(seen)) == 0 && seen == cookie;
}

}  // namespace meshrt
