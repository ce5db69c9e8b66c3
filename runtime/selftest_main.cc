// meshrt-selftest: the half of `meshrun doctor` that needs libmeshrt (launcher/doctor.h). meshrun
// links the store layer only, so it runs this binary, found beside itself:
//   --info     one JSON object: this build's backends and their library versions, CUDA's driver
//              and devices, the Gloo shared-memory slot, and what the runtime makes of the
//              environment (apply_environment, init_options_from_env), errors included;
//   --rank     one rank of a 2-rank job started by meshrun or mpirun (init() from the
//              environment): an all_reduce checked element-wise, timed at 8 B and 4 MiB;
//   --inproc   the same with both ranks as threads of this process (the in-process backend).
// Each rank prints one line `MESHRT_SELFTEST {json}` and exits 0 only when its results were right.
#include <fmt/format.h>
#include <gloo/config.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "meshrt_config.h"
#include "runtime/backend_factory.h"
#include "runtime/backends/gloo/gloo_backend.h"
#include "runtime/backends/inproc/inproc_backend.h"
#include "runtime/communicator.h"
#include "runtime/environment.h"
#include "runtime/error.h"
#include "runtime/init.h"
#include "trace/bandwidth.h"
#if MESHRT_HAVE_MPI
#include "runtime/backends/mpi/mpi_world.h"
#endif
#if MESHRT_HAVE_NCCL
#include <cuda_runtime_api.h>

#include "runtime/backends/nccl/nccl_types.h"
#endif

namespace meshrt {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// Every op and the rendezvous end well before meshrun doctor's own bound on this process (60 s),
// so a broken backend is reported with meshrt's error rather than as a killed process.
constexpr std::chrono::milliseconds kOpTimeout{15000};
constexpr size_t kLatencyBytes = 8;
constexpr size_t kBandwidthBytes = size_t{4} << 20;
// Timed all_reduces run in place: each doubles every element on 2 ranks, so 40 of them keep the
// values exact (below 2^127) and the element-wise check still holds after the timing.
constexpr int kLatencyIters = 40;
constexpr int kBandwidthIters = 8;

std::mutex print_mu;

void print_result(const json& result) {
  std::lock_guard lock(print_mu);
  std::printf("MESHRT_SELFTEST %s\n", result.dump().c_str());
  std::fflush(stdout);
}

// Rank r's contribution to element i: small integers, so sums are exact in f32.
float pattern(int rank, size_t i) { return static_cast<float>((rank + 1) * (i % 251 + 1)); }

// Where the buffer lives: host memory, or (NCCL) device memory copied to and from the host.
class Buffer {
 public:
  Buffer(size_t count, Device device) : host_(count), device_(device) {
#if MESHRT_HAVE_NCCL
    if (device_.kind == Device::Kind::kCuda) {
      check(cudaSetDevice(device_.index), "cudaSetDevice");
      check(cudaMalloc(&device_data_, count * sizeof(float)), "cudaMalloc");
    }
#endif
  }
  ~Buffer() {
#if MESHRT_HAVE_NCCL
    if (device_data_ != nullptr) cudaFree(device_data_);
#endif
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  std::vector<float>& host() { return host_; }
  BufferView view() {
    if (device_.kind == Device::Kind::kCpu) return meshrt::view(host_);
    return {device_data_, host_.size(), DType::kF32, device_, {}};
  }
  void to_device() {
#if MESHRT_HAVE_NCCL
    if (device_data_ != nullptr) {
      check(cudaMemcpy(device_data_, host_.data(), host_.size() * sizeof(float),
                       cudaMemcpyHostToDevice),
            "cudaMemcpy");
      // A copy from pageable memory may still be in flight when cudaMemcpy returns, and the
      // communicator's stream does not wait for the default stream.
      check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    }
#endif
  }
  void to_host() {
#if MESHRT_HAVE_NCCL
    if (device_data_ != nullptr) {
      check(cudaMemcpy(host_.data(), device_data_, host_.size() * sizeof(float),
                       cudaMemcpyDeviceToHost),
            "cudaMemcpy");
    }
#endif
  }

 private:
#if MESHRT_HAVE_NCCL
  static void check(cudaError_t e, const char* call) {
    if (e != cudaSuccess) {
      throw Error(ErrorCode::kBackend, {}, fmt::format("{}: {}", call, cudaGetErrorString(e)));
    }
  }
#endif
  std::vector<float> host_;
  Device device_;
  void* device_data_ = nullptr;
};

// The first element whose value is not `scale` times the ranks' summed pattern, as text; "" when
// every element is right.
std::string mismatch(const std::vector<float>& got, int world_size, double scale) {
  for (size_t i = 0; i < got.size(); ++i) {
    double sum = 0;
    for (int r = 0; r < world_size; ++r) sum += pattern(r, i);
    const float want = static_cast<float>(sum * scale);
    if (got[i] != want) {
      return fmt::format("element {} of {} is {} instead of {}", i, got.size(), got[i], want);
    }
  }
  return "";
}

// One size: a checked all_reduce, then `iters` timed ones in place, checked again. Returns the
// mean time of one all_reduce in microseconds; throws Error with the first wrong element.
double measure(Communicator& world, size_t bytes, int iters, Device device) {
  const int n = world.size();
  Buffer buffer(bytes / sizeof(float), device);
  for (size_t i = 0; i < buffer.host().size(); ++i) buffer.host()[i] = pattern(world.rank(), i);
  buffer.to_device();
  const OpOptions options{kOpTimeout};
  world.all_reduce(buffer.view(), ReduceOp::kSum, options)->synchronize();
  buffer.to_host();
  if (std::string bad = mismatch(buffer.host(), n, 1); !bad.empty()) {
    throw Error(ErrorCode::kBackend, {}, fmt::format("all_reduce of {} bytes: {}", bytes, bad));
  }
  const auto start = Clock::now();
  for (int k = 0; k < iters; ++k) {
    world.all_reduce(buffer.view(), ReduceOp::kSum, options)->synchronize();
  }
  const double total_us = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
  buffer.to_host();
  double scale = 1;
  for (int k = 0; k < iters; ++k) scale *= n;
  if (std::string bad = mismatch(buffer.host(), n, scale); !bad.empty()) {
    throw Error(ErrorCode::kBackend, {},
                fmt::format("all_reduce of {} bytes, after {} timed runs: {}", bytes, iters, bad));
  }
  return total_us / iters;
}

// Runs both sizes on `world` and prints this rank's result line; returns whether it was right.
bool self_test(Communicator& world, Device device) {
  json result = {{"rank", world.rank()}, {"world_size", world.size()}};
  try {
    result["backend"] = std::string(world.backend_name());
    result["backend_version"] = world.backend_version();
    const double latency_us = measure(world, kLatencyBytes, kLatencyIters, device);
    const double big_us = measure(world, kBandwidthBytes, kBandwidthIters, device);
    result["ok"] = true;
    result["latency_bytes"] = kLatencyBytes;
    result["latency_us"] = latency_us;
    result["busbw_bytes"] = kBandwidthBytes;
    result["busbw_time_us"] = big_us;
    result["busbw_gbps"] =
        trace::busbw_gbps(OpKind::kAllReduce, world.size(), kBandwidthBytes, big_us);
  } catch (const std::exception& e) {
    result["ok"] = false;
    result["error"] = e.what();
  }
  print_result(result);
  return result["ok"].get<bool>();
}

int run_rank() {
  json failed = {{"ok", false}};
  try {
    InitOptions options = init_options_from_env();
    // A doctor's job: no live monitor (it is not under test here) and a short rendezvous.
    options.live_monitor = false;
    options.init_timeout = std::min(options.init_timeout, kOpTimeout);
    Device device = Device::cpu();
    if (options.backend == "nccl") device = Device::cuda(std::max(options.local_rank, 0));
    const bool ok = self_test(*init(options), device);
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    failed["error"] = e.what();
  }
  print_result(failed);
  return 1;
}

int run_inproc_test() {
  bool ok = true;
  std::mutex mu;
  try {
    run_inproc(2, [&](Communicator& world) {
      const bool mine = self_test(world, Device::cpu());
      std::lock_guard lock(mu);
      ok = ok && mine;
    });
  } catch (const std::exception& e) {
    print_result({{"ok", false}, {"error", e.what()}});
    return 1;
  }
  return ok ? 0 : 1;
}

bool rank_variables_set() {
  for (const char* name : {"RANK", "WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                           "SLURM_PROCID", "SLURM_NTASKS"}) {
    const char* value = std::getenv(name);
    if (value != nullptr && *value != '\0') return true;
  }
  return false;
}

json cuda_info() {
  json cuda = {{"built", MESHRT_HAVE_NCCL != 0}, {"devices", json::array()}};
#if MESHRT_HAVE_NCCL
  int driver = 0, runtime = 0;
  if (cudaDriverGetVersion(&driver) == cudaSuccess && driver > 0) {
    cuda["driver"] = fmt::format("{}.{}", driver / 1000, driver % 1000 / 10);
  }
  if (cudaRuntimeGetVersion(&runtime) == cudaSuccess) {
    cuda["runtime"] = fmt::format("{}.{}", runtime / 1000, runtime % 1000 / 10);
  }
  int count = 0;
  if (const cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess) {
    cuda["error"] = fmt::format("cudaGetDeviceCount: {}", cudaGetErrorString(e));
    count = 0;
  }
  for (int d = 0; d < count; ++d) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, d) != cudaSuccess) continue;
    cuda["devices"].push_back(
        {{"index", d}, {"name", prop.name}, {"memory_bytes", prop.totalGlobalMem}});
  }
#endif
  return cuda;
}

int run_info() {
  json info = {{"version", MESHRT_VERSION},
               {"have_mpi", MESHRT_HAVE_MPI != 0},
               {"have_nccl", MESHRT_HAVE_NCCL != 0}};
  json backends = json::array();
  backends.push_back({{"name", "gloo"},
                      {"built", true},
                      {"version", fmt::format("gloo {}.{}.{}", GLOO_VERSION_MAJOR,
                                              GLOO_VERSION_MINOR, GLOO_VERSION_PATCH)}});
  backends.push_back({{"name", "inproc"}, {"built", true}, {"version", "part of libmeshrt"}});
  json mpi = {{"name", "mpi"}, {"built", MESHRT_HAVE_MPI != 0}};
#if MESHRT_HAVE_MPI
  mpi["version"] = mpi_library_version();
#endif
  backends.push_back(mpi);
  json nccl = {{"name", "nccl"}, {"built", MESHRT_HAVE_NCCL != 0}};
#if MESHRT_HAVE_NCCL
  nccl["version"] = "NCCL " + cuda::nccl_version();
#endif
  backends.push_back(nccl);
  info["backends"] = backends;
  info["cuda"] = cuda_info();

  // What a job's init() would make of this environment: the same functions, the same errors.
  json errors = json::array();
  try {
    apply_environment(-1, "");
  } catch (const std::exception& e) {
    errors.push_back(e.what());
  }
  try {
    info["gloo_shm_slot_bytes"] = gloo_shm_slot_bytes_from_env();
    gloo_one_shot_max_bytes_from_env();
    gloo_single_copy_from_env();
  } catch (const std::exception& e) {
    errors.push_back(e.what());
  }
  json job = {{"in_job", rank_variables_set()}};
  if (job["in_job"].get<bool>()) {
    try {
      const InitOptions o = init_options_from_env();
      job["source"] = o.source;
      job["rank"] = o.rank;
      job["world_size"] = o.world_size;
      job["backend"] = o.backend;
      job["master_addr"] = o.master_addr;
      job["master_port"] = o.master_port;
    } catch (const std::exception& e) {
      errors.push_back(e.what());
    }
  }
  info["job"] = job;
  info["environment_errors"] = errors;
  std::printf("%s\n", info.dump().c_str());
  std::fflush(stdout);
  // apply_environment() installed the sinks the variables ask for; leaving without exit handlers
  // keeps them from writing (empty) summaries and traces over a real job's files.
  std::_Exit(0);
}

}  // namespace
}  // namespace meshrt

int main(int argc, char** argv) {
  const std::string mode = argc == 2 ? argv[1] : "";
  if (mode == "--info") return meshrt::run_info();
  if (mode == "--rank") return meshrt::run_rank();
  if (mode == "--inproc") return meshrt::run_inproc_test();
  std::fprintf(stderr,
               "usage: meshrt-selftest --info | --rank | --inproc\n"
               "meshrun doctor's helper (launcher/README.md, \"meshrun doctor\"): --info prints "
               "this build's backends and what the runtime makes of the environment as JSON; "
               "--rank runs one rank of a 2-rank all_reduce self-test under meshrun or mpirun; "
               "--inproc runs both ranks as threads.\n");
  return 2;
}
