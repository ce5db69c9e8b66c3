// Debug tensor statistics: per-dtype min/max/mean and NaN/Inf counts, and records carrying the
// input (at enqueue) and output (at completion) statistics of real ops when the mode is on.
#include "runtime/debug_stats.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "mesh/meshrt.h"

namespace meshrt {
namespace {

TEST(TensorStats, FloatsCountNanAndInfAndAverageTheFiniteOnes) {
  std::vector<float> x = {1.0f, -2.0f, std::numeric_limits<float>::quiet_NaN(), 4.0f,
                          std::numeric_limits<float>::infinity()};
  const auto s = tensor_stats(view(x));
  ASSERT_TRUE(s.valid);
  EXPECT_EQ(s.count, 5u);
  EXPECT_EQ(s.nan_count, 1u);
  EXPECT_EQ(s.inf_count, 1u);
  EXPECT_EQ(s.min, -2.0);
  EXPECT_TRUE(std::isinf(s.max));
  EXPECT_DOUBLE_EQ(s.mean, 1.0);  // (1 - 2 + 4) / 3
}

TEST(TensorStats, IntegersHalfAndBFloat16) {
  std::vector<int64_t> i = {-5, 7, 1};
  auto s = tensor_stats(view(i));
  EXPECT_EQ(s.min, -5);
  EXPECT_EQ(s.max, 7);
  EXPECT_DOUBLE_EQ(s.mean, 1.0);
  std::vector<Half> h = {to_half(0.5f), to_half(-1.5f)};
  s = tensor_stats(view(h));
  EXPECT_EQ(s.min, -1.5);
  EXPECT_EQ(s.max, 0.5);
  std::vector<BFloat16> b = {to_bfloat16(2.0f), to_bfloat16(4.0f)};
  EXPECT_DOUBLE_EQ(tensor_stats(view(b)).mean, 3.0);
  std::vector<float> empty;
  EXPECT_FALSE(tensor_stats(view(empty)).valid);
  EXPECT_EQ(trace::format_tensor_stats(tensor_stats(view(i))),
            "count=3 min=-5 max=7 mean=1 nan=0 inf=0");
}

TEST(DebugStats, RecordsCarryInputAtEnqueueAndOutputAtCompletion) {
  set_debug_tensor_stats(true);
  std::vector<trace::OpRecord> records(3);
  run_inproc(3, [&](Communicator& world) {
    std::vector<float> x(4, static_cast<float>(world.rank() + 1));
    auto work = world.all_reduce(view(x));
    work->wait();
    records[world.rank()] = work->record();
  });
  set_debug_tensor_stats(false);
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(records[r].debug) << r;
    EXPECT_EQ(records[r].debug->input.min, r + 1);
    EXPECT_EQ(records[r].debug->input.max, r + 1);
    EXPECT_EQ(records[r].debug->output.mean, 6.0);  // 1 + 2 + 3
    EXPECT_EQ(records[r].debug->output.count, 4u);
  }
  run_inproc(1, [](Communicator& world) {
    std::vector<float> x(1);
    auto work = world.all_reduce(view(x));
    EXPECT_FALSE(work->record().debug) << "off again";
    work->wait();  // x must outlive the op (ASan caught the queued op reading it once freed).
  });
}

}  // namespace
}  // namespace meshrt
