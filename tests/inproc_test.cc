// The in-process backend: every collective x dtype x reduce op at several world sizes, p2p,
// split, and the failure paths (timeouts, mismatched collectives, abort) at 2 to 64 ranks.
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>

#include "mesh/meshrt.h"
#include "tests/collective_checks.h"

namespace meshrt {
namespace {

using std::chrono::milliseconds;

// Runs `check` on every rank and gathers the failures of all ranks.
std::vector<std::string> on_all_ranks(
    int n, const std::function<std::vector<std::string>(Communicator&)>& check) {
  std::mutex mu;
  std::vector<std::string> all;
  run_inproc(n, [&](Communicator& c) {
    auto f = check(c);
    std::lock_guard lock(mu);
    all.insert(all.end(), f.begin(), f.end());
  });
  return all;
}

class InprocWorld : public ::testing::TestWithParam<int> {};

TEST_P(InprocWorld, EveryCollectiveDtypeAndReduceOp) {
  const auto failures = on_all_ranks(GetParam(), testing::check_all_collectives);
  EXPECT_TRUE(failures.empty()) << failures.size() << " failures, first: " << failures.front();
}

TEST_P(InprocWorld, PointToPointAndSplit) {
  const auto failures = on_all_ranks(GetParam(), testing::check_p2p_and_split);
  EXPECT_TRUE(failures.empty()) << failures.size() << " failures, first: " << failures.front();
}

INSTANTIATE_TEST_SUITE_P(Sizes, InprocWorld, ::testing::Values(1, 2, 3, 4, 8));

TEST(Inproc, SixtyFourRanksAllReduceAndSplit) {
  run_inproc(64, [](Communicator& world) {
    std::vector<int64_t> x(100, world.rank());
    world.all_reduce(view(x))->wait();
    for (int64_t v : x) ASSERT_EQ(v, 64 * 63 / 2);
    // 8 groups of 8 consecutive ranks, like one mesh dim.
    auto group = world.split(world.rank() / 8, world.rank());
    ASSERT_EQ(group->size(), 8);
    ASSERT_EQ(group->rank(), world.rank() % 8);
    std::vector<int64_t> y{world.rank()};
    group->all_reduce(view(y), ReduceOp::kMax)->wait();
    ASSERT_EQ(y[0], (world.rank() / 8) * 8 + 7);
  });
}

TEST(Inproc, MissingRankTimesOutNamingIt) {
  std::atomic<int> timeouts{0};
  auto world = make_inproc_world(3, {.name = "world", .timeout = milliseconds(300)});
  std::vector<std::thread> threads;
  const auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < 2; ++r) {  // rank 2 never joins
    threads.emplace_back([&, r] {
      std::vector<float> x(4, 1.0f);
      try {
        world[r]->all_reduce(view(x))->wait();
      } catch (const Error& e) {
        // The first rank to time out names the missing one; the other fails with it.
        EXPECT_TRUE(e.code() == ErrorCode::kTimeout || e.code() == ErrorCode::kPeerFailure);
        EXPECT_NE(std::string(e.what()).find("[2]"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("all_reduce #1"), std::string::npos) << e.what();
        ++timeouts;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(timeouts.load(), 2);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST(Inproc, MismatchedCollectivesFailOnEveryRank) {
  std::atomic<int> failures{0};
  run_inproc(2, [&](Communicator& c) {
    std::vector<float> x(8, 1.0f);
    try {
      if (c.rank() == 0) {
        c.all_reduce(view(x))->wait();
      } else {
        c.broadcast(view(x), 0)->wait();
      }
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.detail()).find("collective mismatch"), std::string::npos);
      ++failures;
    }
  });
  EXPECT_EQ(failures.load(), 2);
}

TEST(Inproc, MismatchedCountsFailBeforeCopying) {
  std::atomic<int> failures{0};
  run_inproc(2, [&](Communicator& c) {
    std::vector<float> x(c.rank() == 0 ? 8 : 16, 1.0f);
    try {
      c.all_reduce(view(x))->wait();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.detail()).find("16 elements"), std::string::npos) << e.what();
      ++failures;
    }
  });
  EXPECT_EQ(failures.load(), 2);
}

TEST(Inproc, RecvSizeMismatchIsReportedOnBothSides) {
  std::atomic<int> failures{0};
  run_inproc(2, [&](Communicator& c) {
    std::vector<float> x(c.rank() == 0 ? 4 : 5);
    try {
      if (c.rank() == 0) {
        c.send(view(x), 1)->wait();
      } else {
        c.recv(view(x), 0)->wait();
      }
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
      ++failures;
    }
  });
  EXPECT_EQ(failures.load(), 2);
}

TEST(Inproc, AbortFailsQueuedAndLaterOps) {
  auto world = make_inproc_world(2, {.name = "world", .timeout = milliseconds(10000)});
  std::vector<float> x(4, 1.0f);
  world[0]->abort();
  auto w = world[0]->all_reduce(view(x));
  try {
    w->wait();
    FAIL() << "an aborted communicator ran an op";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kAborted);
  }
  // The peer, waiting in the same group, fails fast instead of waiting out its timeout.
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THROW(world[1]->all_reduce(view(x))->wait(), Error);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
}

TEST(Inproc, OpsRunInOrderAndWorkReportsState) {
  run_inproc(2, [](Communicator& c) {
    std::vector<int32_t> a(4, 1), b(4, 2);
    auto w1 = c.all_reduce(view(a));
    auto w2 = c.all_reduce(view(b));
    w2->wait();
    EXPECT_TRUE(w1->test());  // FIFO: the first finished before the second.
    EXPECT_EQ(a[0], 2);
    EXPECT_EQ(b[0], 4);
    const auto rec = w2->record();
    EXPECT_EQ(rec.state, trace::OpState::kCompleted);
    EXPECT_EQ(rec.collective_seq, 2u);
    EXPECT_EQ(rec.op_seq, 2u);
    EXPECT_EQ(rec.op, "all_reduce");
    EXPECT_EQ(rec.dtype, "i32");
    EXPECT_EQ(rec.bytes, 16u);
    EXPECT_GE(rec.start_ns, rec.enqueue_ns);
    EXPECT_GE(rec.end_ns, rec.start_ns);
    EXPECT_EQ(rec.comm->name, "world");
  });
}

}  // namespace
}  // namespace meshrt
