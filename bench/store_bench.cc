// TcpStore round-trip throughput against an in-process TcpStoreServer on 127.0.0.1: one
// iteration is a set, a get and an add (three requests), so items_per_second counts requests.
#include <benchmark/benchmark.h>

#include <chrono>
#include <string>

#include "runtime/store/tcp_store.h"
#include "runtime/store/tcp_store_server.h"

namespace meshrt {
namespace {

using namespace std::chrono_literals;

// One server for every benchmark thread; started on first use, torn down at exit.
TcpStoreServer& shared_server() {
  // No request-rate cap: this measures the server, not its per-connection limiter.
  static TcpStoreServer server([] {
    TcpStoreServerOptions options;
    options.max_requests_per_second = 0;
    return options;
  }());
  return server;
}

void BM_SetGetAdd(benchmark::State& state) {
  TcpStoreOptions options;
  options.host = "127.0.0.1";
  options.port = shared_server().port();
  options.connect_timeout = 5000ms;
  options.timeout = 10000ms;
  // Each thread has its own connection, as each rank of a job would.
  TcpStore store(options);
  const std::string key = "bench/key" + std::to_string(state.thread_index());
  const std::string value(static_cast<size_t>(state.range(0)), 'v');
  for (auto _ : state) {
    store.set(key, value);
    benchmark::DoNotOptimize(store.get(key, 1000ms));
    // A counter all threads share: the contended case of barriers and rank assignment.
    benchmark::DoNotOptimize(store.add("bench/counter", 1));
  }
  state.SetItemsProcessed(state.iterations() * 3);
}

BENCHMARK(BM_SetGetAdd)->Arg(64)->Arg(64 << 10)->Threads(1)->Threads(16)->UseRealTime();

}  // namespace
}  // namespace meshrt
