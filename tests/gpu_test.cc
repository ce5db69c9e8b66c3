// The NCCL backend on a real GPU, at world size 1 per process (NCCL refuses two ranks on one
// device): every op kind and dtype against a host reference, split, coalescing, a CUDA graph with
// a collective captured and replayed 100 times, and hangs made on purpose (a stream blocked ahead
// of the collective, in a graph replay too) that the watchdog must time out, dump and abort.
// Every test skips with "no CUDA device: <CUDA's reason>" where no GPU answers.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "mesh/meshrt.h"
#include "runtime/backends/nccl/cuda_stream.h"

namespace meshrt {
namespace {

using std::chrono::milliseconds;

#define SKIP_WITHOUT_GPU()                                                            \
  do {                                                                                \
    int n = 0;                                                                        \
    const cudaError_t e = cudaGetDeviceCount(&n);                                     \
    if (e != cudaSuccess || n == 0) {                                                 \
      (void)cudaGetLastError();                                                       \
      GTEST_SKIP() << "no CUDA device: "                                              \
                   << (e != cudaSuccess ? cudaGetErrorString(e) : "0 devices found"); \
    }                                                                                 \
  } while (0)

// A one-rank NCCL world, created once per process (init() joins a run id once).
std::shared_ptr<Communicator> world() {
  static std::shared_ptr<Communicator> w = [] {
    InitOptions o;
    o.rank = 0;
    o.world_size = 1;
    o.local_rank = 0;
    o.backend = "nccl";
    o.run_id = "gpu_test";
    o.timeout = milliseconds(60000);
    return init(o);
  }();
  return w;
}

// Device memory holding `host`'s bytes, freed at scope end.
struct DeviceBuffer {
  void* p = nullptr;
  size_t bytes = 0;
  DeviceBuffer(const void* host, size_t n) : bytes(n) {
    EXPECT_EQ(cudaMalloc(&p, n > 0 ? n : 1), cudaSuccess);
    if (n > 0) {
      EXPECT_EQ(cudaMemcpy(p, host, n, cudaMemcpyHostToDevice), cudaSuccess);
    }
  }
  ~DeviceBuffer() { cudaFree(p); }
  std::vector<char> read() const {
    std::vector<char> h(bytes);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    if (bytes > 0) {
      EXPECT_EQ(cudaMemcpy(h.data(), p, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
    }
    return h;
  }
  BufferView view(DType d) const {
    return {p, bytes / dtype_size_bytes(d), d, Device::cuda(0), {}};
  }
};

// A host buffer of `count` elements of `d`, element i = (i % 7) + 1 (exact in every dtype).
std::vector<char> pattern(DType d, size_t count) {
  std::vector<char> h(count * dtype_size_bytes(d));
  std::vector<float> f(count);
  for (size_t i = 0; i < count; ++i) f[i] = static_cast<float>(i % 7 + 1);
  // Convert through the CPU backend's reduction: out = f (op max with itself) in dtype d is not
  // available, so write each dtype directly.
  for (size_t i = 0; i < count; ++i) {
    char* p = h.data() + i * dtype_size_bytes(d);
    switch (d) {
      case DType::kF32:
        *reinterpret_cast<float*>(p) = f[i];
        break;
      case DType::kF64:
        *reinterpret_cast<double*>(p) = f[i];
        break;
      case DType::kF16:
        *reinterpret_cast<Half*>(p) = to_half(f[i]);
        break;
      case DType::kBF16:
        *reinterpret_cast<BFloat16*>(p) = to_bfloat16(f[i]);
        break;
      case DType::kI8:
        *reinterpret_cast<int8_t*>(p) = static_cast<int8_t>(f[i]);
        break;
      case DType::kU8:
        *reinterpret_cast<uint8_t*>(p) = static_cast<uint8_t>(f[i]);
        break;
      case DType::kI32:
        *reinterpret_cast<int32_t*>(p) = static_cast<int32_t>(f[i]);
        break;
      case DType::kI64:
        *reinterpret_cast<int64_t*>(p) = static_cast<int64_t>(f[i]);
        break;
      case DType::kF8E4M3:
        *reinterpret_cast<Fp8E4M3*>(p) = to_fp8_e4m3(f[i]);
        break;
      case DType::kF8E5M2:
        *reinterpret_cast<Fp8E5M2*>(p) = to_fp8_e5m2(f[i]);
        break;
    }
  }
  return h;
}

// At world size 1 every op's reference is the identity (reductions of one rank, gathers of one
// block): what the device returns must equal the input, byte for byte.
TEST(Gpu, EveryOpKindAndDtypeAgainstHostReference) {
  SKIP_WITHOUT_GPU();
  auto w = world();
  int major = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
  for (DType d : kAllDTypes) {
    const bool reduce_ok = !is_fp8(d) || major >= 9;  // NCCL reduces fp8 on sm_90+ only.
    const auto h = pattern(d, 1024);
    for (ReduceOp op : kAllReduceOps) {
      if (!reduce_ok || (op == ReduceOp::kAvg && !is_floating(d))) continue;
      DeviceBuffer b(h.data(), h.size());
      w->all_reduce(b.view(d), op)->synchronize();
      EXPECT_EQ(b.read(), h) << "all_reduce " << dtype_name(d) << " " << reduce_op_name(op);
      DeviceBuffer r(h.data(), h.size());
      w->reduce(r.view(d), 0, op)->synchronize();
      EXPECT_EQ(r.read(), h) << "reduce " << dtype_name(d);
      DeviceBuffer in(h.data(), h.size()), out(h.data(), h.size());
      cudaMemset(out.p, 0, out.bytes);
      w->reduce_scatter(in.view(d), out.view(d), op)->synchronize();
      EXPECT_EQ(out.read(), h) << "reduce_scatter " << dtype_name(d);
    }
    auto copy_op = [&](const char* what, auto call) {
      DeviceBuffer in(h.data(), h.size()), out(h.data(), h.size());
      cudaMemset(out.p, 0, out.bytes);
      call(in.view(d), out.view(d))->synchronize();
      EXPECT_EQ(out.read(), h) << what << " " << dtype_name(d);
    };
    copy_op("all_gather", [&](BufferView i, BufferView o) { return w->all_gather(i, o); });
    copy_op("all_to_all", [&](BufferView i, BufferView o) { return w->all_to_all(i, o); });
    copy_op("all_to_all uneven", [&](BufferView i, BufferView o) {
      const size_t s[] = {i.count};
      return w->all_to_all(i, s, o, s);
    });
    copy_op("gather", [&](BufferView i, BufferView o) { return w->gather(i, o, 0); });
    copy_op("scatter", [&](BufferView i, BufferView o) { return w->scatter(i, o, 0); });
    DeviceBuffer bc(h.data(), h.size());
    w->broadcast(bc.view(d), 0)->synchronize();
    EXPECT_EQ(bc.read(), h) << "broadcast " << dtype_name(d);
  }
  w->barrier()->synchronize();
}

TEST(Gpu, HostPointersAreRefusedBeforeLaunch) {
  SKIP_WITHOUT_GPU();
  auto w = world();
  std::vector<float> host(16, 1.0f);
  const uint64_t seq = w->op_seq();
  // A CPU view, and a host pointer disguised as cuda:0.
  for (BufferView v : {view(host), BufferView{host.data(), 16, DType::kF32, Device::cuda(0), {}}}) {
    try {
      w->all_reduce(v);
      ADD_FAILURE() << "accepted host memory";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      const std::string what = e.what();
      EXPECT_NE(what.find("rank 0, comm 'world', all_reduce"), std::string::npos) << what;
    }
  }
  EXPECT_EQ(w->op_seq(), seq);  // Nothing was numbered or launched.
}

TEST(Gpu, SplitAndCoalescing) {
  SKIP_WITHOUT_GPU();
  auto w = world();
  CommOptions child_options;
  child_options.name = "world/child";
  auto child = w->split(0, 0, child_options);
  ASSERT_TRUE(child);
  EXPECT_EQ(child->backend_name(), "nccl");
  const auto h = pattern(DType::kF32, 256);
  DeviceBuffer a(h.data(), h.size()), b(h.data(), h.size());
  child->start_coalescing();
  auto m1 = child->all_reduce(a.view(DType::kF32));
  auto m2 = child->all_reduce(b.view(DType::kF32), ReduceOp::kMax);
  auto closing = child->end_coalescing();
  closing->synchronize();
  EXPECT_TRUE(m1->test());
  EXPECT_TRUE(m2->test());
  EXPECT_EQ(a.read(), h);
  EXPECT_EQ(closing->record().op, "coalesced");
}

TEST(Gpu, CollectiveInACudaGraphReplayedAHundredTimes) {
  SKIP_WITHOUT_GPU();
  auto w = world();
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  cuda::StreamGuard guard(s);
  const auto h = pattern(DType::kF32, 1024);
  DeviceBuffer b(h.data(), h.size());
  w->all_reduce(b.view(DType::kF32))->wait();  // Warm up outside the capture.
  cudaGraph_t graph;
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  WorkHandle captured = w->all_reduce(b.view(DType::kF32));
  captured->wait();
  ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
  EXPECT_NE(captured->record().cuda_graph_id, 0u);
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (int i = 0; i < 100; ++i) ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(b.read(), h);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

// A host function that holds its stream until the flag is set: the "stuck kernel" ahead of a
// collective, without needing nvcc for a spinning kernel.
std::atomic<bool> release_flag{false};
void CUDART_CB spin_until_released(void*) {
  while (!release_flag.load()) std::this_thread::sleep_for(milliseconds(1));
}

// Runs a hang in a child process under the abort policy: the watchdog must time out within
// timeout + 2 s, dump the entry as scheduled or started, abort NCCL and exit with 70.
void expect_hang_handled(bool in_graph) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("meshrt_gpu_hang_" + std::to_string(::getpid()) + (in_graph ? "_g" : ""));
  std::filesystem::create_directories(dir);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    setenv("MESHRT_ON_TIMEOUT", "abort", 1);
    setenv("MESHRT_DUMP_PREFIX", (dir / "fr_").c_str(), 1);
    setenv("MESHRT_DUMP_WAIT_MS", "0", 1);
    InitOptions o;
    o.rank = 0;
    o.world_size = 1;
    o.backend = "nccl";
    o.run_id = in_graph ? "hang_graph" : "hang";
    o.timeout = milliseconds(1000);
    auto w = init(o);
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    cuda::StreamGuard guard(s);
    void* p;
    cudaMalloc(&p, 64);
    BufferView v{p, 16, DType::kF32, Device::cuda(0), {}};
    if (in_graph) {
      cudaGraph_t graph;
      cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
      cudaLaunchHostFunc(s, spin_until_released, nullptr);
      w->all_reduce(v)->wait();
      cudaStreamEndCapture(s, &graph);
      cudaGraphExec_t exec;
      cudaGraphInstantiate(&exec, graph, 0);
      cudaGraphLaunch(exec, s);
    } else {
      cudaLaunchHostFunc(s, spin_until_released, nullptr);
      w->all_reduce(v);
    }
    std::this_thread::sleep_for(std::chrono::seconds(30));
    _exit(0);  // Not reached when the watchdog works.
  }
  const auto t0 = std::chrono::steady_clock::now();
  int status = 0;
  for (;;) {
    if (waitpid(child, &status, WNOHANG) == child) break;
    if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(20)) {
      kill(child, SIGKILL);
      waitpid(child, &status, 0);
      FAIL() << "the hang was not ended";
    }
    std::this_thread::sleep_for(milliseconds(20));
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 70);
  EXPECT_LT(s, 1.0 + 2.0 + 3.0) << "init and dump included";  // timeout + 2 s + start-up.
  std::ifstream in(dir / "fr_0");
  ASSERT_TRUE(in) << "no dump";
  const auto d = nlohmann::json::parse(in, nullptr, false);
  ASSERT_FALSE(d.is_discarded());
  EXPECT_NE(d["device"], nullptr);
  EXPECT_EQ(d["comm_lib_version"].get<std::string>().rfind("2.", 0), 0u);
  bool found = false;
  for (const auto& e : d["entries"]) {
    if (e["profiling_name"] == "nccl:all_reduce" &&
        (e["state"] == "scheduled" || e["state"] == "started")) {
      found = true;
      if (in_graph) {
        EXPECT_NE(e["cuda_graph_id"], nullptr);
      }
    }
  }
  EXPECT_TRUE(found) << d.dump(1);
}

TEST(GpuHang, StreamBlockedAheadOfCollectiveTimesOut) {
  SKIP_WITHOUT_GPU();
  expect_hang_handled(false);
}

TEST(GpuHang, HangInsideGraphReplayTimesOut) {
  SKIP_WITHOUT_GPU();
  expect_hang_handled(true);
}

}  // namespace
}  // namespace meshrt
