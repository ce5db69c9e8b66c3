#include "bench/meshrt_bench_check.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace meshrt::bench {
namespace {

struct OpRow {
  BenchOp op;
  std::string_view name;
  OpKind kind;
};
constexpr OpRow kOps[] = {
    {BenchOp::kAllReduce, "all_reduce", OpKind::kAllReduce},
    {BenchOp::kAllGather, "all_gather", OpKind::kAllGather},
    {BenchOp::kReduceScatter, "reduce_scatter", OpKind::kReduceScatter},
    {BenchOp::kAllToAll, "all_to_all", OpKind::kAllToAll},
    {BenchOp::kBroadcast, "broadcast", OpKind::kBroadcast},
    {BenchOp::kReduce, "reduce", OpKind::kReduce},
    {BenchOp::kGather, "gather", OpKind::kGather},
    {BenchOp::kScatter, "scatter", OpKind::kScatter},
    {BenchOp::kSendRecv, "sendrecv", OpKind::kSend},
    {BenchOp::kAllGatherV, "all_gather_v", OpKind::kAllGatherV},
    {BenchOp::kReduceScatterV, "reduce_scatter_v", OpKind::kReduceScatterV},
};

struct TypeRow {
  DType dtype;
  std::string_view nccl_name;
  int mantissa_bits;  // For the tolerance; 0 for integers.
};
constexpr TypeRow kTypes[] = {
    {DType::kF32, "float", 23},    {DType::kF64, "double", 52}, {DType::kF16, "half", 10},
    {DType::kBF16, "bfloat16", 7}, {DType::kI8, "int8", 0},     {DType::kU8, "uint8", 0},
    {DType::kI32, "int32", 0},     {DType::kI64, "int64", 0},   {DType::kF8E4M3, "f8e4m3", 3},
    {DType::kF8E5M2, "f8e5m2", 2},
};

const TypeRow& type_row(DType dtype) {
  for (const TypeRow& t : kTypes) {
    if (t.dtype == dtype) return t;
  }
  return kTypes[0];
}

double get(DType dtype, const void* data, size_t i) {
  switch (dtype) {
    case DType::kF32:
      return static_cast<const float*>(data)[i];
    case DType::kF64:
      return static_cast<const double*>(data)[i];
    case DType::kF16:
      return to_float(static_cast<const Half*>(data)[i]);
    case DType::kBF16:
      return to_float(static_cast<const BFloat16*>(data)[i]);
    case DType::kI8:
      return static_cast<const int8_t*>(data)[i];
    case DType::kU8:
      return static_cast<const uint8_t*>(data)[i];
    case DType::kI32:
      return static_cast<const int32_t*>(data)[i];
    case DType::kI64:
      return static_cast<double>(static_cast<const int64_t*>(data)[i]);
    case DType::kF8E4M3:
      return to_float(static_cast<const Fp8E4M3*>(data)[i]);
    case DType::kF8E5M2:
      return to_float(static_cast<const Fp8E5M2*>(data)[i]);
  }
  return 0;
}

// Integers wrap modulo 2^bits (C++20 conversions), as meshrt's integer sums and products do.
void put(DType dtype, void* data, size_t i, double v) {
  const auto w = static_cast<int64_t>(v);
  switch (dtype) {
    case DType::kF32:
      static_cast<float*>(data)[i] = static_cast<float>(v);
      return;
    case DType::kF64:
      static_cast<double*>(data)[i] = v;
      return;
    case DType::kF16:
      static_cast<Half*>(data)[i] = to_half(static_cast<float>(v));
      return;
    case DType::kBF16:
      static_cast<BFloat16*>(data)[i] = to_bfloat16(static_cast<float>(v));
      return;
    case DType::kI8:
      static_cast<int8_t*>(data)[i] = static_cast<int8_t>(w);
      return;
    case DType::kU8:
      static_cast<uint8_t*>(data)[i] = static_cast<uint8_t>(w);
      return;
    case DType::kI32:
      static_cast<int32_t*>(data)[i] = static_cast<int32_t>(w);
      return;
    case DType::kI64:
      static_cast<int64_t*>(data)[i] = w;
      return;
    case DType::kF8E4M3:
      static_cast<Fp8E4M3*>(data)[i] = to_fp8_e4m3(static_cast<float>(v));
      return;
    case DType::kF8E5M2:
      static_cast<Fp8E5M2*>(data)[i] = to_fp8_e5m2(static_cast<float>(v));
      return;
  }
}

double rounded(DType dtype, double v) {
  alignas(8) unsigned char tmp[8];
  put(dtype, tmp, 0, v);
  return get(dtype, tmp, 0);
}

// The reduction of element k over every rank's input, in double (exact for these small values),
// integer products wrapped by rounded().
double reduced(const CheckSpec& s, size_t k) {
  double acc = input_value(s.redop, 0, k);
  for (int r = 1; r < s.n; ++r) {
    const double v = input_value(s.redop, r, k);
    switch (s.redop) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg:
      case ReduceOp::kCustom:  // meshrt-bench -o custom: a Reducer that sums.
        acc += v;
        break;
      case ReduceOp::kProd:
        acc *= v;
        break;
      case ReduceOp::kMin:
        acc = std::min(acc, v);
        break;
      case ReduceOp::kMax:
        acc = std::max(acc, v);
        break;
    }
  }
  if (s.redop == ReduceOp::kAvg) acc /= s.n;
  return acc;
}

}  // namespace

std::string_view bench_op_name(BenchOp op) { return kOps[static_cast<size_t>(op)].name; }

std::optional<BenchOp> bench_op_from_name(std::string_view name) {
  for (const OpRow& r : kOps) {
    if (r.name == name) return r.op;
  }
  return std::nullopt;
}

OpKind bench_op_kind(BenchOp op) { return kOps[static_cast<size_t>(op)].kind; }
bool bench_op_reduces(BenchOp op) { return trace::op_info(bench_op_kind(op)).reduces; }
bool bench_op_rooted(BenchOp op) { return trace::op_info(bench_op_kind(op)).rooted; }

std::string_view nccl_type_name(DType dtype) { return type_row(dtype).nccl_name; }

std::optional<DType> dtype_from_nccl_name(std::string_view name) {
  for (const TypeRow& t : kTypes) {
    if (t.nccl_name == name || dtype_name(t.dtype) == name) return t.dtype;
  }
  return std::nullopt;
}

BenchLayout bench_layout(BenchOp op, size_t count, int n) {
  const size_t blocks = count * static_cast<size_t>(n);
  switch (op) {
    case BenchOp::kAllGather:
    case BenchOp::kAllGatherV:
    case BenchOp::kGather:
      return {count, blocks};
    case BenchOp::kReduceScatter:
    case BenchOp::kReduceScatterV:
    case BenchOp::kScatter:
      return {blocks, count};
    case BenchOp::kAllToAll:
      return {blocks, blocks};
    default:
      return {count, count};
  }
}

double input_value(ReduceOp redop, int rank, size_t k) {
  const size_t r = static_cast<size_t>(rank);
  return redop == ReduceOp::kProd ? 1.0 + static_cast<double>((r + k) % 2)
                                  : 1.0 + static_cast<double>((3 * r + k) % 4);
}

void fill_input(DType dtype, ReduceOp redop, int rank, void* data, size_t count) {
  for (size_t k = 0; k < count; ++k) put(dtype, data, k, input_value(redop, rank, k));
}

void fill_sentinel(DType dtype, void* data, size_t count) {
  if (dtype == DType::kU8) {
    std::memset(data, 0xff, count);
    return;
  }
  for (size_t k = 0; k < count; ++k) put(dtype, data, k, -1.0);
}

bool output_checked(const CheckSpec& s) { return s.op != BenchOp::kGather || s.rank == s.root; }

double expected_value(const CheckSpec& s, size_t k) {
  const size_t c = s.count;
  const size_t rank = static_cast<size_t>(s.rank);
  double v = 0;
  switch (s.op) {
    case BenchOp::kAllReduce:
      v = reduced(s, k);
      break;
    case BenchOp::kBroadcast:
      v = input_value(s.redop, s.root, k);
      break;
    case BenchOp::kReduce:
      v = s.rank == s.root ? reduced(s, k) : input_value(s.redop, s.rank, k);
      break;
    case BenchOp::kAllGather:
    case BenchOp::kAllGatherV:
    case BenchOp::kGather:
      v = input_value(s.redop, static_cast<int>(k / c), k % c);
      break;
    case BenchOp::kReduceScatter:
    case BenchOp::kReduceScatterV:
      v = reduced(s, rank * c + k);
      break;
    case BenchOp::kAllToAll:
      v = input_value(s.redop, static_cast<int>(k / c), rank * c + k % c);
      break;
    case BenchOp::kScatter:
      v = input_value(s.redop, s.root, rank * c + k);
      break;
    case BenchOp::kSendRecv:
      v = input_value(s.redop, (s.rank + s.n - 1) % s.n, k);
      break;
  }
  return rounded(s.dtype, v);
}

size_t count_wrong(const CheckSpec& s, const void* output) {
  if (!output_checked(s)) return 0;
  const size_t n = bench_layout(s.op, s.count, s.n).recv_count;
  const int bits = type_row(s.dtype).mantissa_bits;
  const double tol = bits == 0 ? 0.0 : std::ldexp(2.0, -bits);
  size_t wrong = 0;
  for (size_t k = 0; k < n; ++k) {
    const double want = expected_value(s, k);
    const double got = get(s.dtype, output, k);
    // NaN compares false: counted wrong.
    if (!(std::fabs(got - want) <= tol * std::max(1.0, std::fabs(want)))) ++wrong;
  }
  return wrong;
}

}  // namespace meshrt::bench
