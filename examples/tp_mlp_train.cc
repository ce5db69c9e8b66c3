// tp_mlp_train: trains a two-layer MLP, Megatron style, on a dp x tp DeviceMesh: fc1 is split by
// output features over tp (column parallel), fc2 by input features (row parallel), so a forward
// pass needs one tp all_reduce and a backward pass another; gradients are averaged over dp. The
// task is a synthetic regression (targets from a fixed random "teacher" MLP), so the loss must
// go down. Rank 0 prints the loss curve, the comm logger's summary and the scope tree.
//
//   meshrun --standalone --nproc-per-node 4 tp_mlp_train --mesh 2x2 --steps 60
//   meshrun --standalone --nproc-per-node 4 tp_mlp_train --mesh 2x2 --backend nccl  # 4 GPUs
//
// With --backend nccl the same mesh code runs over NCCL: the model stays on the host (the math is
// the point, not the speed) and every collective goes through a device staging buffer on the
// rank's GPU (LOCAL_RANK), ordered on meshrt's current stream.
//
// Exit status: 0 when the loss fell below half its first value, 1 otherwise, 2 on bad flags.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "mesh/device_mesh.h"
#include "mesh/meshrt.h"
#include "meshrt_config.h"
#if MESHRT_HAVE_NCCL
#include <cuda_runtime_api.h>
#endif
#include "trace/run_report.h"
#include "trace/scope.h"
#include "trace/scope_tree.h"

namespace {

using meshrt::view;
using meshrt::trace::Phase;
using meshrt::trace::Scope;

struct Config {
  int64_t dp = 2, tp = 2;
  int steps = 60;
  int batch = 32;  // Per dp rank.
  int d_in = 16;
  int d_hidden = 64;  // Split over tp.
  int d_out = 8;
  float lr = 0.05f;
};

// A row-major matrix of `rows` x `cols` with N(0, scale^2) entries from `rng`.
std::vector<float> random_matrix(int rows, int cols, float scale, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> m(static_cast<size_t>(rows) * cols);
  for (auto& v : m) v = normal(rng);
  return m;
}

// out[r x n] = a[r x k] * b^T where b is [n x k].
void matmul_bt(const float* a, const float* b, float* out, int r, int k, int n) {
  for (int i = 0; i < r; ++i) {
    for (int j = 0; j < n; ++j) {
      float s = 0;
      for (int t = 0; t < k; ++t) s += a[i * k + t] * b[j * k + t];
      out[i * n + j] = s;
    }
  }
}

// out[n x k] += a^T[n x r] * b[r x k] where a is [r x n]: the weight gradient of y = x W^T.
void add_at_b(const float* a, const float* b, float* out, int r, int n, int k) {
  for (int i = 0; i < r; ++i) {
    for (int j = 0; j < n; ++j) {
      for (int t = 0; t < k; ++t) out[j * k + t] += a[i * n + j] * b[i * k + t];
    }
  }
}

// out[r x k] = a[r x n] * b[n x k].
void matmul(const float* a, const float* b, float* out, int r, int n, int k) {
  for (int i = 0; i < r; ++i) {
    for (int t = 0; t < k; ++t) {
      float s = 0;
      for (int j = 0; j < n; ++j) s += a[i * n + j] * b[j * k + t];
      out[i * k + t] = s;
    }
  }
}

// Runs collectives on host vectors: directly on CPU backends, through a device staging buffer
// on GPU backends (NCCL takes device memory only).
class Collectives {
 public:
  explicit Collectives(bool on_gpu) : on_gpu_(on_gpu) {}
  ~Collectives() {
#if MESHRT_HAVE_NCCL
    if (device_ != nullptr) cudaFree(device_);
#endif
  }
  // All-reduces `data` in place over `comm`.
  void all_reduce(meshrt::Communicator& comm, std::span<float> data, meshrt::Shape shape,
                  meshrt::ReduceOp op = meshrt::ReduceOp::kSum) {
    if (!on_gpu_) {
      comm.all_reduce(view(data, shape), op)->wait();
      return;
    }
#if MESHRT_HAVE_NCCL
    const size_t bytes = data.size_bytes();
    if (bytes > capacity_) {
      if (device_ != nullptr) cudaFree(device_);
      check(cudaMalloc(&device_, bytes), "cudaMalloc");
      capacity_ = bytes;
    }
    int device = 0;
    check(cudaGetDevice(&device), "cudaGetDevice");
    check(cudaMemcpy(device_, data.data(), bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
    meshrt::BufferView v{device_, data.size(), meshrt::DType::kF32, meshrt::Device::cuda(device),
                         shape};
    comm.all_reduce(v, op)->synchronize();
    check(cudaMemcpy(data.data(), device_, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy");
#endif
  }

 private:
#if MESHRT_HAVE_NCCL
  static void check(cudaError_t e, const char* what) {
    if (e != cudaSuccess) {
      throw meshrt::Error(meshrt::ErrorCode::kBackend, {},
                          std::string(what) + ": " + cudaGetErrorString(e));
    }
  }
  void* device_ = nullptr;
  size_t capacity_ = 0;
#endif
  bool on_gpu_;
};

// Trains on this rank's shard; returns the loss of every step (the same on every rank).
std::vector<float> train(meshrt::DeviceMesh& mesh, const Config& c, Collectives& coll) {
  auto& dp = mesh.comm("dp");
  auto& tp = mesh.comm("tp");
  const int tp_rank = mesh.local_rank("tp");
  const int h = c.d_hidden / static_cast<int>(c.tp);  // Hidden features on this tp rank.

  // The teacher and the initial weights are the same on every rank (same seed); each tp rank
  // keeps its slice, each dp rank draws its own batches.
  std::mt19937 init_rng(1234);
  const auto teacher1 = random_matrix(c.d_hidden, c.d_in, 0.5f, init_rng);
  const auto teacher2 = random_matrix(c.d_out, c.d_hidden, 0.5f, init_rng);
  const auto full_w1 = random_matrix(c.d_hidden, c.d_in, 0.25f, init_rng);
  const auto full_w2 = random_matrix(c.d_out, c.d_hidden, 0.25f, init_rng);
  std::vector<float> w1(full_w1.begin() + tp_rank * h * c.d_in,
                        full_w1.begin() + (tp_rank + 1) * h * c.d_in);  // Rows: [h x d_in].
  std::vector<float> w2(static_cast<size_t>(c.d_out) * h);              // Columns: [d_out x h].
  for (int o = 0; o < c.d_out; ++o) {
    for (int j = 0; j < h; ++j) w2[o * h + j] = full_w2[o * c.d_hidden + tp_rank * h + j];
  }
  std::mt19937 data_rng(100 + mesh.local_rank("dp"));
  std::normal_distribution<float> normal(0.0f, 1.0f);

  const int b = c.batch;
  std::vector<float> x(static_cast<size_t>(b) * c.d_in), target(static_cast<size_t>(b) * c.d_out);
  std::vector<float> pre(static_cast<size_t>(b) * h), act(pre.size()), y(target.size());
  std::vector<float> teacher_hidden(static_cast<size_t>(b) * c.d_hidden);
  std::vector<float> dy(y.size()), dact(act.size()), dx(x.size());
  // Both weight gradients in one buffer: one dp all_reduce per step, as DDP buckets them.
  std::vector<float> grads(w1.size() + w2.size());
  float* dw1 = grads.data();
  float* dw2 = grads.data() + w1.size();
  std::vector<float> losses;

  for (int step = 0; step < c.steps; ++step) {
    for (auto& v : x) v = normal(data_rng);
    matmul_bt(x.data(), teacher1.data(), teacher_hidden.data(), b, c.d_in, c.d_hidden);
    for (auto& v : teacher_hidden) v = std::tanh(v);
    matmul_bt(teacher_hidden.data(), teacher2.data(), target.data(), b, c.d_hidden, c.d_out);

    {
      Scope fc1("MLP.fc1", Phase::kForward);  // Column parallel: no communication.
      matmul_bt(x.data(), w1.data(), pre.data(), b, c.d_in, h);
      for (size_t i = 0; i < pre.size(); ++i) act[i] = std::tanh(pre[i]);
    }
    {
      Scope fc2("MLP.fc2", Phase::kForward);  // Row parallel: partial sums meet over tp.
      matmul_bt(act.data(), w2.data(), y.data(), b, h, c.d_out);
      coll.all_reduce(tp, y, {b, c.d_out});
    }
    float loss = 0;
    for (size_t i = 0; i < y.size(); ++i) {
      const float e = y[i] - target[i];
      loss += e * e;
      dy[i] = 2.0f * e / static_cast<float>(y.size());
    }
    loss /= static_cast<float>(y.size());
    std::fill(grads.begin(), grads.end(), 0.0f);
    {
      Scope fc2("MLP.fc2", Phase::kBackward);
      add_at_b(dy.data(), act.data(), dw2, b, c.d_out, h);
      matmul(dy.data(), w2.data(), dact.data(), b, c.d_out, h);
    }
    {
      Scope fc1("MLP.fc1", Phase::kBackward);
      for (size_t i = 0; i < dact.size(); ++i) dact[i] *= 1.0f - act[i] * act[i];
      add_at_b(dact.data(), x.data(), dw1, b, h, c.d_in);
      // The input gradient is a partial sum over tp (an earlier layer would consume it).
      matmul(dact.data(), w1.data(), dx.data(), b, h, c.d_in);
      coll.all_reduce(tp, dx, {b, c.d_in});
    }
    {
      Scope opt("optimizer", Phase::kOptimizer);
      coll.all_reduce(dp, grads, {}, meshrt::ReduceOp::kAvg);
      for (size_t i = 0; i < w1.size(); ++i) w1[i] -= c.lr * dw1[i];
      for (size_t i = 0; i < w2.size(); ++i) w2[i] -= c.lr * dw2[i];
      coll.all_reduce(dp, std::span<float>(&loss, 1), {}, meshrt::ReduceOp::kAvg);
    }
    losses.push_back(loss);
  }
  return losses;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Trains a tensor-parallel MLP on a dp x tp DeviceMesh (ranks from the environment)."};
  Config c;
  std::string mesh_text = "2x2";
  app.add_option("--mesh", mesh_text, "dp x tp, e.g. 2x2");
  app.add_option("--steps", c.steps, "training steps")->check(CLI::Range(1, 100000));
  app.add_option("--lr", c.lr, "learning rate")->check(CLI::PositiveNumber);
  std::string backend;
  app.add_option("--backend", backend,
                 "the world's backend: gloo (default: MESHRT_BACKEND, else gloo), mpi, nccl")
      ->check(CLI::IsMember({"gloo", "mpi", "nccl"}));
  try {
    app.parse(argc, argv);
    const auto x = mesh_text.find('x');
    if (x == std::string::npos) throw CLI::ValidationError("--mesh", "expected DPxTP, e.g. 2x2");
    c.dp = std::stoll(mesh_text.substr(0, x));
    c.tp = std::stoll(mesh_text.substr(x + 1));
    if (c.dp < 1 || c.tp < 1 || c.d_hidden % c.tp != 0) {
      throw CLI::ValidationError("--mesh", "dp and tp must be >= 1 and tp must divide 64");
    }
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tp_mlp_train: --mesh '%s': %s\n", mesh_text.c_str(), e.what());
    return 2;
  }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  try {
    meshrt::trace::ScopeTree::instance().enable();
    meshrt::InitOptions options = meshrt::init_options_from_env();
    if (!backend.empty()) options.backend = backend;
    const bool on_gpu = options.backend == "nccl";
    if (on_gpu && !MESHRT_HAVE_NCCL) {
      std::fprintf(stderr,
                   "tp_mlp_train: --backend nccl: this meshrt was built without NCCL/CUDA "
                   "(see docs/gpu.md)\n");
      return 1;
    }
    auto world = meshrt::init(options);  // Without a GPU, NCCL fails here: "no CUDA device: ...".
    auto mesh =
        meshrt::init_device_mesh(world, on_gpu ? "cuda" : "cpu", {c.dp, c.tp}, {"dp", "tp"});
    Collectives coll(on_gpu);
    const auto losses = train(*mesh, c, coll);
    const bool learned = losses.back() < 0.5f * losses.front();
    if (world->global_rank() == 0) {
      for (size_t s = 0; s < losses.size(); s += std::max<size_t>(1, losses.size() / 6)) {
        std::printf("step %3zu  loss %.4f\n", s, losses[s]);
      }
      std::printf("step %3zu  loss %.4f  (%s)\n", losses.size() - 1, losses.back(),
                  learned ? "loss went down" : "loss did NOT go down");
      std::printf(
          "%s",
          meshrt::trace::run_report(world->global_rank(), isatty(STDOUT_FILENO) != 0).c_str());
    }
    return learned ? 0 : 1;
  } catch (const meshrt::Error& e) {
    std::fprintf(stderr, "tp_mlp_train: %s\n", e.what());
    return 1;
  }
}
