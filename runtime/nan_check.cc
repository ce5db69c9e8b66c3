#include "runtime/nan_check.h"

#include <fmt/format.h>

#include <cmath>

#include "runtime/error.h"
#include "trace/env.h"

namespace meshrt {
namespace {

template <typename T>
std::optional<NonFinite> first_bad(const T* data, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    double v;
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      v = data[i];
    } else {
      v = to_float(data[i]);
    }
    if (!std::isfinite(v)) return NonFinite{i, std::isnan(v)};
  }
  return std::nullopt;
}

void check(const BufferView& b, std::string_view what) {
  if (const std::optional<NonFinite> bad = first_non_finite(b)) {
    throw Error(ErrorCode::kInvalidArgument, {},
                fmt::format("{} holds {} at element {} of {} (MESHRT_NAN_CHECK)", what,
                            bad->nan ? "NaN" : "an infinity", bad->index, b.count));
  }
}

}  // namespace

std::optional<NonFinite> first_non_finite(const BufferView& b) {
  if (b.data == nullptr || b.count == 0 || b.device.kind != Device::Kind::kCpu) return std::nullopt;
  switch (b.dtype) {
    case DType::kF32:
      return first_bad(static_cast<const float*>(b.data), b.count);
    case DType::kF64:
      return first_bad(static_cast<const double*>(b.data), b.count);
    case DType::kF16:
      return first_bad(static_cast<const Half*>(b.data), b.count);
    case DType::kBF16:
      return first_bad(static_cast<const BFloat16*>(b.data), b.count);
    case DType::kF8E4M3:
      return first_bad(static_cast<const Fp8E4M3*>(b.data), b.count);
    case DType::kF8E5M2:
      return first_bad(static_cast<const Fp8E5M2*>(b.data), b.count);
    default:
      return std::nullopt;
  }
}

void nan_check_hook(const OpHookArgs& args) {
  switch (args.kind) {
    case OpKind::kRecv:
    case OpKind::kBarrier:
    case OpKind::kCoalesced:
      return;
    case OpKind::kBroadcast:
    case OpKind::kScatter:
      if (args.rank == args.root_or_peer) check(args.input, "input");
      return;
    case OpKind::kBatchP2P:
      for (size_t i = 0; i < args.p2p.size(); ++i) {
        if (args.p2p[i].dir == P2POp::Dir::kSend) {
          check(args.p2p[i].buffer, fmt::format("send member {}'s buffer", i));
        }
      }
      return;
    default:
      check(args.input, "input");
  }
}

bool nan_check_enabled_from_env() { return trace::env::get_flag({"MESHRT_NAN_CHECK"}); }

}  // namespace meshrt
