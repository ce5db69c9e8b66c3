#include "runtime/backends/nccl/nccl_config.h"

#include <fmt/format.h>

#include <charconv>
#include <cstring>

#include "runtime/error.h"
#include "trace/env.h"

namespace meshrt::cuda {

ncclConfig_t nccl_config(const std::string& comm_name) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  config.commName = comm_name.c_str();
  return config;
}

int cuda_device_for(int local_rank, const char* env_value) {
  if (env_value == nullptr || *env_value == '\0') return local_rank >= 0 ? local_rank : 0;
  int device = -1;
  const char* end = env_value + std::strlen(env_value);
  const auto [ptr, ec] = std::from_chars(env_value, end, device);
  if (ec != std::errc() || ptr != end || device < 0) {
    throw Error(
        ErrorCode::kInvalidArgument, {},
        fmt::format("MESHRT_CUDA_DEVICE='{}' is not a device ordinal (0, 1, ...)", env_value));
  }
  return device;
}

NcclSettings nccl_settings_from_env() {
  try {
    NcclSettings s;
    s.use_caller_stream = trace::env::get_flag({"MESHRT_NCCL_USE_CALLER_STREAM"}, false);
    s.check_pointers = trace::env::get_flag({"MESHRT_NCCL_CHECK_POINTERS"}, true);
    s.watch_graphs = trace::env::get_flag({"MESHRT_NCCL_WATCH_GRAPHS"}, true);
    return s;
  } catch (const trace::env::EnvError& e) {
    throw Error(ErrorCode::kInvalidArgument, {}, e.what());
  }
}

}  // namespace meshrt::cuda
