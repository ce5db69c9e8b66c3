// meshrt-bench's #wrong column: results of real in-process collectives check clean, and a result
// with one corrupted element, an untouched output or the wrong reduction is counted wrong.
#include "bench/meshrt_bench_check.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "mesh/meshrt.h"

namespace meshrt::bench {
namespace {

constexpr int kRanks = 3;
constexpr size_t kCount = 5;

// Runs `op` out of place on kRanks in-process ranks with the bench's input pattern and returns
// each rank's output bytes and spec.
struct Result {
  CheckSpec spec;
  std::vector<unsigned char> output;
};

std::vector<Result> run_op(BenchOp op, DType t, ReduceOp redop) {
  std::vector<Result> results(kRanks);
  run_inproc(kRanks, [&](Communicator& c) {
    const CheckSpec spec{op, t, redop, c.rank(), c.size(), 1, kCount};
    const auto l = bench_layout(op, kCount, c.size());
    const size_t w = dtype_size_bytes(t);
    std::vector<unsigned char> in(l.send_count * w), out(l.recv_count * w);
    fill_input(t, redop, c.rank(), in.data(), l.send_count);
    fill_sentinel(t, out.data(), l.recv_count);
    const BufferView vin{in.data(), l.send_count, t, Device::cpu(), {}};
    const BufferView vout{out.data(), l.recv_count, t, Device::cpu(), {}};
    switch (op) {
      case BenchOp::kAllReduce:
        std::memcpy(out.data(), in.data(), in.size());
        c.all_reduce(vout, redop)->wait();
        break;
      case BenchOp::kAllGather:
        c.all_gather(vin, vout)->wait();
        break;
      case BenchOp::kReduceScatter:
        c.reduce_scatter(vin, vout, redop)->wait();
        break;
      case BenchOp::kAllToAll:
        c.all_to_all(vin, vout)->wait();
        break;
      case BenchOp::kScatter:
        c.scatter(vin, vout, spec.root)->wait();
        break;
      default:
        FAIL() << "not covered here";
    }
    results[static_cast<size_t>(c.rank())] = {spec, std::move(out)};
  });
  return results;
}

TEST(MeshrtBenchCheck, RealResultsHaveNoWrongElements) {
  for (BenchOp op : {BenchOp::kAllReduce, BenchOp::kAllGather, BenchOp::kReduceScatter,
                     BenchOp::kAllToAll, BenchOp::kScatter}) {
    for (DType t : {DType::kF32, DType::kBF16, DType::kI8, DType::kF64}) {
      for (ReduceOp redop : {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMax}) {
        for (const Result& r : run_op(op, t, redop)) {
          EXPECT_EQ(count_wrong(r.spec, r.output.data()), 0u)
              << bench_op_name(op) << " " << nccl_type_name(t) << " " << reduce_op_name(redop)
              << " rank " << r.spec.rank;
        }
      }
    }
  }
}

TEST(MeshrtBenchCheck, AverageOfFloatsChecksClean) {
  for (const Result& r : run_op(BenchOp::kAllReduce, DType::kF16, ReduceOp::kAvg)) {
    EXPECT_EQ(count_wrong(r.spec, r.output.data()), 0u) << "rank " << r.spec.rank;
  }
}

TEST(MeshrtBenchCheck, OneCorruptedElementIsCounted) {
  for (DType t : {DType::kF32, DType::kBF16, DType::kI32, DType::kU8}) {
    auto results = run_op(BenchOp::kAllGather, t, ReduceOp::kSum);
    Result& r = results[1];
    // Element 7 (rank 1's block, index 2) gets the value of its neighbour: off by one or more.
    const size_t w = dtype_size_bytes(t);
    std::memcpy(r.output.data() + 7 * w, r.output.data() + 8 * w, w);
    EXPECT_EQ(count_wrong(r.spec, r.output.data()), 1u) << nccl_type_name(t);
  }
}

TEST(MeshrtBenchCheck, UntouchedOutputIsAllWrong) {
  for (DType t : {DType::kF32, DType::kU8, DType::kF8E4M3}) {
    const CheckSpec spec{BenchOp::kAllReduce, t, ReduceOp::kSum, 0, 2, 0, kCount};
    std::vector<unsigned char> out(kCount * dtype_size_bytes(t));
    fill_sentinel(t, out.data(), kCount);
    EXPECT_EQ(count_wrong(spec, out.data()), kCount) << nccl_type_name(t);
  }
}

TEST(MeshrtBenchCheck, WrongReductionIsCounted) {
  auto results = run_op(BenchOp::kAllReduce, DType::kF32, ReduceOp::kMax);
  CheckSpec as_sum = results[0].spec;
  as_sum.redop = ReduceOp::kSum;
  // Max of three ranks' 1..4 is never their sum.
  EXPECT_EQ(count_wrong(as_sum, results[0].output.data()), kCount);
}

TEST(MeshrtBenchCheck, GatherIsCheckedOnTheRootOnly) {
  CheckSpec spec{BenchOp::kGather, DType::kF32, ReduceOp::kSum, 0, 2, 1, kCount};
  EXPECT_FALSE(output_checked(spec));
  spec.rank = 1;
  EXPECT_TRUE(output_checked(spec));
}

TEST(MeshrtBenchCheck, LayoutsFollowNcclTests) {
  EXPECT_EQ(bench_layout(BenchOp::kAllGather, 4, 3).recv_count, 12u);
  EXPECT_EQ(bench_layout(BenchOp::kReduceScatter, 4, 3).send_count, 12u);
  EXPECT_EQ(bench_layout(BenchOp::kAllToAll, 4, 3).recv_count, 12u);
  EXPECT_EQ(bench_layout(BenchOp::kAllReduce, 4, 3).recv_count, 4u);
  EXPECT_EQ(nccl_type_name(*dtype_from_nccl_name("bfloat16")), "bfloat16");
  EXPECT_EQ(bench_op_from_name("sendrecv"), BenchOp::kSendRecv);
  EXPECT_FALSE(bench_op_from_name("allreduce"));
}

}  // namespace
}  // namespace meshrt::bench
