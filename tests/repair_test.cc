// Repair in place on the in-process backend (ranks as threads): Communicator::shrink in both
// modes, failed_ranks(), the names and epochs of shrunk communicators, DeviceMesh::shrink of a
// 2x2 mesh around a dead rank, and the mistakes shrink() names. The process-level story (Gloo
// over shared memory and TCP, meshrun, kill -9) is tests/elastic_dp_train_test.sh.
#include <gtest/gtest.h>

#include <chrono>
#include <latch>
#include <string>
#include <thread>
#include <vector>

#include "mesh/meshrt.h"

namespace meshrt {
namespace {

using std::chrono::milliseconds;

// Runs fn(rank) on one thread per rank and joins them.
template <typename F>
void on_threads(int n, F fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back([&, r] { fn(r); });
  for (auto& t : threads) t.join();
}

void expect_contains(const std::string& text, const std::string& part) {
  EXPECT_NE(text.find(part), std::string::npos) << text;
}

// A rank gives up the group (as a dead one does): the survivors' op fails at once although the
// op timeout is 60 s, they learn who died, shrink around it twice, and sum over the survivors.
TEST(Repair, SurvivorsShrinkAroundADeadRankWithoutWaitingOutTheirOp) {
  auto world = make_inproc_world(4, {.name = "w", .timeout = milliseconds(60000)});
  const auto start = std::chrono::steady_clock::now();
  on_threads(4, [&](int r) {
    if (r == 2) {
      world[2]->abort();
      return;
    }
    std::vector<float> v(8, 1.0f);
    try {
      world[r]->all_reduce(view(v))->wait();
      ADD_FAILURE() << "an all_reduce with a dead rank finished";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kPeerFailure) << e.what();
    }
    EXPECT_EQ(world[r]->failed_ranks(), std::vector<int>{2});
    auto shrunk = world[r]->shrink(std::vector<int>{2}, ShrinkMode::kAbort);
    ASSERT_TRUE(shrunk);
    EXPECT_EQ(shrunk->name(), "w@1");
    EXPECT_EQ(shrunk->epoch(), 1);
    EXPECT_EQ(shrunk->size(), 3);
    EXPECT_EQ(shrunk->rank(), r < 2 ? r : r - 1);
    EXPECT_EQ(std::vector<int>(shrunk->global_ranks().begin(), shrunk->global_ranks().end()),
              (std::vector<int>{0, 1, 3}));
    EXPECT_TRUE(shrunk->failed_ranks().empty());
    std::vector<int32_t> x(5, r + 1);
    shrunk->all_reduce(view(x))->wait();
    EXPECT_EQ(x, std::vector<int32_t>(5, 1 + 2 + 4));
    // The old communicator stays aborted.
    try {
      world[r]->all_reduce(view(x))->wait();
      ADD_FAILURE() << "the shrunk communicator's parent ran an op";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kAborted) << e.what();
    }
    // A second repair, planned this time: rank 1 of the shrunk group (global 1) leaves.
    auto again = shrunk->shrink(std::vector<int>{1});
    EXPECT_EQ(again == nullptr, r == 1);
    if (again) {
      EXPECT_EQ(again->name(), "w@2");
      EXPECT_EQ(again->epoch(), 2);
      std::vector<int32_t> y(3, r + 1);
      again->all_reduce(view(y))->wait();
      EXPECT_EQ(y, std::vector<int32_t>(3, 1 + 4));
    }
  });
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

TEST(Repair, ShrinkMistakesAreNamedBeforeAnythingIsAborted) {
  auto world = make_inproc_world(4, {.name = "w", .timeout = milliseconds(60000)});
  auto refused = [&](std::vector<int> excluded, ShrinkMode mode, const std::string& why) {
    try {
      world[0]->shrink(excluded, mode);
      ADD_FAILURE() << "shrink accepted " << why;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      expect_contains(e.what(), "rank 0, comm 'w', shrink");
      expect_contains(e.what(), why);
    }
  };
  refused({4}, ShrinkMode::kAbort, "excluded rank 4 is not a group rank");
  refused({-1}, ShrinkMode::kDefault, "excluded rank -1 is not a group rank");
  refused({1, 1}, ShrinkMode::kAbort, "rank 1 is excluded twice");
  refused({0, 1, 2, 3}, ShrinkMode::kDefault, "every one of the 4 ranks is excluded");
  refused({0}, ShrinkMode::kAbort, "only the survivors call shrink()");
  // Nothing was aborted: the world still runs ops.
  on_threads(4, [&](int r) {
    std::vector<int32_t> x(2, 1);
    world[r]->all_reduce(view(x))->wait();
    EXPECT_EQ(x[0], 4);
  });
}

// A 2x2 (dp, tp) mesh loses rank 3: its dp replica (ranks 2 and 3) leaves, and ranks 0 and 1 go
// on as a 1x2 mesh whose communicators are made anew in epoch 1.
TEST(Repair, MeshShrinkDropsTheDeadRanksReplica) {
  auto world = make_inproc_world(4, {.name = "world", .timeout = milliseconds(60000)});
  std::latch died(1);
  on_threads(4, [&](int r) {
    auto mesh = init_device_mesh(world[r], "cpu", {2, 2}, {"dp", "tp"});
    if (r == 3) {
      world[3]->abort();  // Dies: the world and every group split from it fail.
      died.count_down();
      return;
    }
    died.wait();  // Ranks 0 and 2 share no group with rank 3: their op could finish before.
    std::vector<float> g(4, 1.0f);
    try {
      mesh->comm("dp").all_reduce(view(g))->wait();
      ADD_FAILURE() << "a dp all_reduce with a dead rank finished";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kPeerFailure) << e.what();
    }
    const std::vector<int> failed = mesh->failed_ranks();
    ASSERT_FALSE(failed.empty());
    EXPECT_EQ(failed.back(), 3);
    auto shrunk = mesh->shrink(failed);
    EXPECT_EQ(shrunk == nullptr, r == 2) << "rank " << r;
    if (!shrunk) return;
    EXPECT_EQ(std::vector<int64_t>(shrunk->shape().begin(), shrunk->shape().end()),
              (std::vector<int64_t>{1, 2}));
    EXPECT_EQ(shrunk->comm("dp").name(), "mesh0/dp@1");
    EXPECT_EQ(shrunk->comm("dp").epoch(), 1);
    EXPECT_EQ(shrunk->comm("tp").size(), 2);
    std::vector<int32_t> x(3, r + 1);
    shrunk->comm("tp").all_reduce(view(x))->wait();
    EXPECT_EQ(x, std::vector<int32_t>(3, 1 + 2));
    // Every replica gone is refused, saying why.
    try {
      shrunk->shrink(std::vector<int>{0});
      ADD_FAILURE() << "a mesh without replicas was made";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      expect_contains(e.what(), "no replica is left");
    }
  });
}

}  // namespace
}  // namespace meshrt
