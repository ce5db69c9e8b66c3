// meshrt-bench's data and results check (bench/meshrt_bench.cc): each rank fills its inputs with
// a pattern of small integers that every dtype holds exactly, and each result element is compared
// with the value computed here on the host, independently of meshrt's reduction kernels. Like
// nccl-tests' #wrong column.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "runtime/dtype.h"
#include "runtime/reduce_op.h"
#include "trace/op_kind.h"

namespace meshrt::bench {

// The collectives meshrt-bench runs; kSendRecv is nccl-tests' sendrecv (send to rank + 1 and
// receive from rank - 1 in one batch). all_gather_v and reduce_scatter_v run with every block of
// `count` elements, so their layout and results are the even forms': the rows give the v path's
// cost beside theirs.
enum class BenchOp : uint8_t {
  kAllReduce,
  kAllGather,
  kReduceScatter,
  kAllToAll,
  kBroadcast,
  kReduce,
  kGather,
  kScatter,
  kSendRecv,
  kAllGatherV,
  kReduceScatterV
};

// nccl-tests' BenchOps, in the order `--op all` runs them (the v forms run by name only).
inline constexpr BenchOp kAllBenchOps[] = {
    BenchOp::kAllReduce, BenchOp::kAllGather, BenchOp::kReduceScatter,
    BenchOp::kAllToAll,  BenchOp::kBroadcast, BenchOp::kReduce,
    BenchOp::kGather,    BenchOp::kScatter,   BenchOp::kSendRecv};

// "all_reduce", ..., "sendrecv".
std::string_view bench_op_name(BenchOp op);
// The op named `name`; nullopt for an unknown name.
std::optional<BenchOp> bench_op_from_name(std::string_view name);
// The op kind whose nccl-tests bus factor applies (sendrecv: kSend, factor 1).
OpKind bench_op_kind(BenchOp op);
// Whether `op` takes a reduce op / a root.
bool bench_op_reduces(BenchOp op);
bool bench_op_rooted(BenchOp op);

// nccl-tests' type names: "float", "double", "half", "bfloat16", "int8", "uint8", "int32",
// "int64", "f8e4m3", "f8e5m2".
std::string_view nccl_type_name(DType dtype);
// The dtype of an nccl-tests type name (or of meshrt's "f32", ...); nullopt if unknown.
std::optional<DType> dtype_from_nccl_name(std::string_view name);

// Element counts of one rank's buffers for `count` (the count argument NCCL's call takes: per-rank
// block of all_gather, reduce_scatter, gather, scatter; per-peer block of all_to_all).
struct BenchLayout {
  size_t send_count = 0;  // Input elements.
  size_t recv_count = 0;  // Output elements.
};
BenchLayout bench_layout(BenchOp op, size_t count, int n);

// What one result is checked against.
struct CheckSpec {
  BenchOp op = BenchOp::kAllReduce;
  DType dtype = DType::kF32;
  ReduceOp redop = ReduceOp::kSum;
  int rank = 0;      // Group rank whose result is checked.
  int n = 1;         // Group size.
  int root = 0;      // Root of rooted ops.
  size_t count = 0;  // As bench_layout's.
};

// Element `k` of group rank `rank`'s input, as a double (small positive integers: 1..4, or 1..2
// for kProd so that products stay exact powers of two).
double input_value(ReduceOp redop, int rank, size_t k);
// Fills `count` elements of `data` with rank `rank`'s input pattern.
void fill_input(DType dtype, ReduceOp redop, int rank, void* data, size_t count);
// Fills `count` elements of `data` with -1 (255 for uint8), a value no result holds, so that an
// op that leaves its output untouched is caught.
void fill_sentinel(DType dtype, void* data, size_t count);
// The expected element `k` of spec.rank's output (bench_layout's recv_count elements), rounded to
// spec.dtype as a double. Integer sums and products wrap as meshrt's do.
double expected_value(const CheckSpec& spec, size_t k);
// Whether spec.rank's output is checked at all (gather: the root only).
bool output_checked(const CheckSpec& spec);
// Number of elements of `output` (recv_count of them) that differ from expected_value beyond the
// dtype's rounding (2 units in the last place; integers exactly).
size_t count_wrong(const CheckSpec& spec, const void* output);

}  // namespace meshrt::bench
