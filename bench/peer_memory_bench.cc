// The kernel's single copy (process_vm_readv, what the mailboxes use for a message passed by
// reference) against memcpy, per size from 256 KiB: it runs at a fraction of memcpy's speed, which
// is why ranks that run at once stream large messages through a ring instead (two copies at once,
// one per rank), and why SingleCopy::kAuto passes by reference only where they cannot
// (docs/performance.md). It reads this process's own memory: the same kernel path as a peer's.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "runtime/backends/gloo/peer_memory.h"

namespace {

void BM_Memcpy(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  std::vector<char> from(bytes, 1), to(bytes, 2);
  for (auto _ : state) {
    std::memcpy(to.data(), from.data(), bytes);
    benchmark::DoNotOptimize(to.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
}

void BM_ReadPeerMemory(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  std::vector<char> from(bytes, 1), to(bytes, 2);
  for (auto _ : state) {
    if (meshrt::read_peer_memory(getpid(), reinterpret_cast<uint64_t>(from.data()), to.data(),
                                 bytes) != 0) {
      state.SkipWithError("process_vm_readv refused");
      break;
    }
    benchmark::DoNotOptimize(to.data());
  }
  if (to.front() != 1 || to.back() != 1) state.SkipWithError("wrong bytes");
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
}

// From 256 KiB, where auto starts.
BENCHMARK(BM_Memcpy)->Arg(256 << 10)->Arg(1 << 20)->Arg(16 << 20)->Arg(64 << 20);
BENCHMARK(BM_ReadPeerMemory)->Arg(256 << 10)->Arg(1 << 20)->Arg(16 << 20)->Arg(64 << 20);

}  // namespace
