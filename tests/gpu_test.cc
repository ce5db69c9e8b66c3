// The NCCL backend on a real GPU, at world size 1 per process (NCCL refuses two ranks on one
// device): every op kind and dtype against a host reference, what NCCL would refuse refused
// before launch, split, coalescing, a CUDA graph with a real NCCL node replayed 100 times, polls
// during a capture, and hangs made on purpose (a kernel spinning ahead of the collective, in a
// graph replay too) in worker processes started by fork+exec (tests/gpu_hang_worker.cc), which
// the watchdog must time out, dump and abort. Every test skips with "no CUDA device: <CUDA's
// reason>" where no GPU answers.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <spawn.h>
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
#include "tests/cuda_test_kernels.h"

extern char** environ;

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
      // fp8 avg in a group of one is refused (NcclRefusalsLeaveTheCommunicatorUsable).
      if (!reduce_ok || (op == ReduceOp::kAvg && (!is_floating(d) || is_fp8(d)))) continue;
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

// What NCCL would refuse (and so poison a non-blocking communicator for good) is refused by the
// call, before anything is numbered or launched; the communicator goes on working.
TEST(Gpu, NcclRefusalsLeaveTheCommunicatorUsable) {
  SKIP_WITHOUT_GPU();
  auto w = world();
  int major = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
  const auto h8 = pattern(DType::kF8E4M3, 64);
  DeviceBuffer b8(h8.data(), h8.size());
  const uint64_t seq = w->op_seq();
  try {
    w->all_reduce(b8.view(DType::kF8E4M3), ReduceOp::kAvg);
    ADD_FAILURE() << "fp8 avg at world size 1 was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("rank 0, comm 'world', all_reduce"), std::string::npos)
        << e.what();
  }
  if (major < 9) {
    EXPECT_THROW(w->all_reduce(b8.view(DType::kF8E4M3)), Error) << "fp8 sum below sm_90";
  }
  EXPECT_EQ(w->op_seq(), seq);
  // Copies of fp8 work on every GPU.
  DeviceBuffer out8(h8.data(), h8.size());
  cudaMemset(out8.p, 0, out8.bytes);
  w->all_gather(b8.view(DType::kF8E4M3), out8.view(DType::kF8E4M3))->synchronize();
  EXPECT_EQ(out8.read(), h8);
  const auto h = pattern(DType::kF32, 64);
  DeviceBuffer b(h.data(), h.size());
  w->all_reduce(b.view(DType::kF32), ReduceOp::kAvg)->synchronize();
  EXPECT_EQ(b.read(), h);
}

// A loop that never waits: launches retire finished ops themselves (the newest few polled, older
// ones vouched for by a later one on the same stream), and every Work completes.
TEST(Gpu, ManyOpsWithoutWaitingAllComplete) {
  SKIP_WITHOUT_GPU();
  auto w = world();
  const auto h = pattern(DType::kF32, 256);
  DeviceBuffer b(h.data(), h.size());
  std::vector<WorkHandle> works;
  for (int i = 0; i < 2000; ++i)
    works.push_back(w->all_reduce(b.view(DType::kF32), ReduceOp::kAvg));
  works.back()->synchronize();
  w->barrier()->wait();
  for (size_t i = 0; i < works.size(); ++i) {
    ASSERT_TRUE(works[i]->test()) << "op " << i;
    ASSERT_EQ(works[i]->record().state, trace::OpState::kCompleted) << "op " << i;
  }
  EXPECT_EQ(b.read(), h);
}

// PyTorch's NCCL barrier blocks the host; meshrt's too.
TEST(Gpu, BarrierWaitBlocksTheHost) {
  SKIP_WITHOUT_GPU();
  auto w = world();
  WorkHandle b = w->barrier();
  b->wait();
  EXPECT_TRUE(b->is_completed());
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
  DeviceBuffer a(h.data(), h.size()), b(h.data(), h.size()), c(h.data(), h.size());
  child->start_coalescing();
  auto m1 = child->all_reduce(a.view(DType::kF32));
  // NCCL groups are per thread: another communicator's op here would join this group.
  EXPECT_THROW(w->all_reduce(c.view(DType::kF32)), Error);
  auto m2 = child->all_reduce(b.view(DType::kF32), ReduceOp::kMax);
  auto closing = child->end_coalescing();
  closing->synchronize();
  EXPECT_TRUE(m1->test());
  EXPECT_TRUE(m2->test());
  EXPECT_EQ(a.read(), h);
  EXPECT_EQ(closing->record().op, "coalesced");
  w->all_reduce(c.view(DType::kF32))->synchronize();  // Fine once the block is closed.
}

// Repair on NCCL: an abort-mode shrink (here of a split of the world, excluding nobody, since the
// GPU tests run one rank) goes through ncclCommShrink(NCCL_SHRINK_ABORT) where the loaded NCCL
// has it (2.27+): the new communicator, in epoch 1, runs ops, and the parent stays aborted.
// An older NCCL refuses before anything is aborted (kNotSupported), and the parent runs on.
TEST(Gpu, ShrinkThroughNcclCommShrinkOrARefusalThatLeavesTheParentUsable) {
  SKIP_WITHOUT_GPU();
  auto w = world();
  auto parent = w->split(0, 0);
  ASSERT_TRUE(parent);
  const auto h = pattern(DType::kF32, 64);
  DeviceBuffer a(h.data(), h.size());
  std::shared_ptr<Communicator> shrunk;
  try {
    shrunk = parent->shrink(std::vector<int>{}, ShrinkMode::kAbort);
  } catch (const Error& e) {
    ASSERT_EQ(e.code(), ErrorCode::kNotSupported) << e.what();
    EXPECT_NE(std::string(e.what()).find("ncclCommShrink"), std::string::npos) << e.what();
    parent->all_reduce(a.view(DType::kF32))->synchronize();
    EXPECT_EQ(a.read(), h);
    GTEST_SKIP() << e.what();
  }
  ASSERT_TRUE(shrunk);
  EXPECT_EQ(shrunk->epoch(), 1);
  EXPECT_EQ(shrunk->size(), 1);
  shrunk->all_reduce(a.view(DType::kF32))->synchronize();
  EXPECT_EQ(a.read(), h);
  try {
    parent->all_reduce(a.view(DType::kF32))->synchronize();
    ADD_FAILURE() << "the shrunk communicator's parent ran an op";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kAborted) << e.what();
  }
}

// Each replay adds 1 to the input, then all_gathers it out of place (a real NCCL node even at
// world size 1, where an in-place all_reduce sum is no node at all): after 100 replays the
// output, which only NCCL writes, is the input + 100.
TEST(Gpu, CollectiveInACudaGraphReplayedAHundredTimes) {
  SKIP_WITHOUT_GPU();
  auto w = world();
  const auto& kernels = testing::TestKernels::get();
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  cuda::StreamGuard guard(s);
  std::vector<float> h(1024);
  for (size_t i = 0; i < h.size(); ++i) h[i] = static_cast<float>(i % 7);
  DeviceBuffer in(h.data(), h.size() * 4), out(h.data(), h.size() * 4);
  const BufferView vin = in.view(DType::kF32), vout = out.view(DType::kF32);
  w->all_gather(vin, vout)->wait();  // Warm up outside the capture.
  cudaGraph_t graph;
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  ASSERT_EQ(kernels.add_one(static_cast<float*>(in.p), 1024, s), cudaSuccess);
  WorkHandle captured = w->all_gather(vin, vout);
  captured->wait();
  ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
  EXPECT_NE(captured->record().cuda_graph_id, 0u);
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (int i = 0; i < 100; ++i) ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  std::vector<float> got(h.size());
  ASSERT_EQ(cudaMemcpy(got.data(), out.p, out.bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  for (size_t i = 0; i < h.size(); ++i) ASSERT_EQ(got[i], h[i] + 100) << "element " << i;
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  // The communicator works after the graph is gone.
  w->all_gather(vin, vout)->synchronize();
  cudaStreamDestroy(s);
}

// Polling ops launched outside a capture (test(), the watchdog) must not invalidate a capture in
// the strictest (global) mode, on the capturing thread or any other.
TEST(Gpu, PollsDuringAGlobalCaptureLeaveItValid) {
  SKIP_WITHOUT_GPU();
  auto w = world();
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  cuda::StreamGuard guard(s);
  const auto h = pattern(DType::kF32, 64);
  DeviceBuffer in(h.data(), h.size()), out(h.data(), h.size());
  WorkHandle before = w->all_gather(in.view(DType::kF32), out.view(DType::kF32));
  cudaGraph_t graph;
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  (void)before->test();
  std::thread([&] { (void)before->test(); }).join();
  // Long enough for a watchdog poll (every 100 ms) to happen during the capture.
  std::this_thread::sleep_for(milliseconds(250));
  w->all_gather(in.view(DType::kF32), out.view(DType::kF32))->wait();
  ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
  cudaGraphDestroy(graph);
  before->synchronize();
  cudaStreamDestroy(s);
}

// The directory of this test binary, where meson and the GPU carry put gpu_hang_worker.
std::filesystem::path worker_path() {
  return std::filesystem::read_symlink("/proc/self/exe").parent_path() / "gpu_hang_worker";
}

// Runs gpu_hang_worker `mode` under `policy` in a fresh process (fork+exec) and returns its exit
// status, the seconds from the hang's launch (DIR/armed) to its exit, and DIR.
struct HangRun {
  int status = -1;
  double seconds_after_armed = 0;
  std::filesystem::path dir;
};
HangRun run_hang(const std::string& mode, const std::string& policy) {
  HangRun run;
  run.dir = std::filesystem::temp_directory_path() /
            ("meshrt_gpu_hang_" + std::to_string(::getpid()) + "_" + mode + "_" + policy);
  std::filesystem::remove_all(run.dir);
  std::filesystem::create_directories(run.dir);
  const std::string exe = worker_path().string(), dir = run.dir.string();
  const std::string policy_env = "MESHRT_ON_TIMEOUT=" + policy;
  std::vector<std::string> env_strings = {policy_env, "MESHRT_DUMP_WAIT_MS=0"};
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::string_view(*e).starts_with("MESHRT_")) continue;
    env_strings.emplace_back(*e);
  }
  std::vector<char*> envp;
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  char* argv[] = {const_cast<char*>(exe.c_str()), const_cast<char*>(mode.c_str()),
                  const_cast<char*>(dir.c_str()), nullptr};
  pid_t child = -1;
  if (posix_spawn(&child, exe.c_str(), nullptr, nullptr, argv, envp.data()) != 0) {
    ADD_FAILURE() << "cannot start " << exe;
    return run;
  }
  const auto t0 = std::chrono::steady_clock::now();
  int status = 0;
  for (;;) {
    if (waitpid(child, &status, WNOHANG) == child) break;
    if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(60)) {
      kill(child, SIGKILL);
      waitpid(child, &status, 0);
      ADD_FAILURE() << "gpu_hang_worker " << mode << " was not ended";
      return run;
    }
    std::this_thread::sleep_for(milliseconds(10));
  }
  const int64_t exited = std::chrono::steady_clock::now().time_since_epoch().count();
  run.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  int64_t armed = 0;
  std::ifstream(run.dir / "armed") >> armed;
  if (armed > 0) run.seconds_after_armed = static_cast<double>(exited - armed) / 1e9;
  return run;
}

// The dump of a hang: the all_gather entry, scheduled or started, with the device and NCCL's
// version; in a graph, with the capture id.
void expect_hang_dump(const std::filesystem::path& dir, bool in_graph) {
  std::ifstream in(dir / "fr_0");
  ASSERT_TRUE(in) << "no dump in " << dir;
  const auto d = nlohmann::json::parse(in, nullptr, false);
  ASSERT_FALSE(d.is_discarded());
  EXPECT_NE(d["device"], nullptr);
  EXPECT_EQ(d["comm_lib_version"].get<std::string>().rfind("2.", 0), 0u);
  bool found = false;
  for (const auto& e : d["entries"]) {
    if (e["profiling_name"] == "nccl:all_gather" &&
        (e["state"] == "scheduled" || e["state"] == "started")) {
      found = true;
      if (in_graph) {
        EXPECT_NE(e["cuda_graph_id"], nullptr);
      }
    }
  }
  EXPECT_TRUE(found) << d.dump(1);
}

TEST(GpuHang, KernelSpinningAheadOfCollectiveTimesOut) {
  SKIP_WITHOUT_GPU();
  const HangRun r = run_hang("stream", "abort");
  EXPECT_EQ(r.status, 70);
  EXPECT_GT(r.seconds_after_armed, 0.9);
  EXPECT_LT(r.seconds_after_armed, 1.0 + 2.0) << "timeout + 2 s";
  expect_hang_dump(r.dir, false);
  std::filesystem::remove_all(r.dir);
}

TEST(GpuHang, HangInsideGraphReplayTimesOut) {
  SKIP_WITHOUT_GPU();
  const HangRun r = run_hang("graph", "abort");
  EXPECT_EQ(r.status, 70);
  EXPECT_GT(r.seconds_after_armed, 0.9);
  EXPECT_LT(r.seconds_after_armed, 1.0 + 2.0) << "timeout + 2 s";
  expect_hang_dump(r.dir, true);
  std::filesystem::remove_all(r.dir);
}

// Under the throw policy the process goes on after the hang is reported: the communicator is
// aborted while a graph still holds it (ncclCommAbort then waits for the graph), and releasing
// the kernel and destroying the graph must let the process end normally.
TEST(GpuHang, GraphHangUnderThrowPolicyEndsCleanly) {
  SKIP_WITHOUT_GPU();
  const HangRun r = run_hang("graph", "throw");
  EXPECT_EQ(r.status, 0);
  EXPECT_LT(r.seconds_after_armed, 3.0 + 5.0);
  expect_hang_dump(r.dir, true);
  std::filesystem::remove_all(r.dir);
}

}  // namespace
}  // namespace meshrt
