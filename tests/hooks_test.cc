// The per-communicator hook API (runtime/hooks.h) and the NaN/Inf check built on it
// (runtime/nan_check.h), on in-process worlds (ranks as threads).
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <thread>
#include <vector>

#include "mesh/meshrt.h"
#include "runtime/nan_check.h"

namespace meshrt {
namespace {

using std::chrono::milliseconds;

// Runs `body(rank)` on one thread per rank of `world`.
void on_every_rank(const std::vector<std::shared_ptr<Communicator>>& world,
                   const std::function<void(int)>& body) {
  std::vector<std::thread> threads;
  for (int r = 0; r < static_cast<int>(world.size()); ++r) threads.emplace_back(body, r);
  for (auto& t : threads) t.join();
}

TEST(Hooks, PreOpHookSeesAndChangesTheInputBeforeItIsSent) {
  auto world = make_inproc_world(2, {.name = "world"});
  std::vector<HookHandle> handles;
  std::mutex mu;
  std::vector<std::string> seen;
  for (auto& c : world) {
    handles.push_back(c->add_pre_op_hook([&](const OpHookArgs& a) {
      {
        std::lock_guard lock(mu);
        seen.push_back(std::string(a.op) + " on " + a.comm->name);
      }
      auto* x = static_cast<float*>(a.input.data);
      for (size_t i = 0; i < a.input.count; ++i) x[i] *= 10;  // Scales what this rank sends.
    }));
  }
  on_every_rank(world, [&](int r) {
    std::vector<float> x(3, static_cast<float>(r + 1));
    world[r]->all_reduce(view(std::span(x)))->wait();
    EXPECT_EQ(x, std::vector<float>(3, 30.0f));  // (1 + 2) x 10, not 3.
  });
  EXPECT_EQ(seen, std::vector<std::string>(2, "all_reduce on world"));

  // Removed: the next op is sent as it is.
  handles.clear();
  on_every_rank(world, [&](int r) {
    std::vector<float> x(3, static_cast<float>(r + 1));
    world[r]->all_reduce(view(std::span(x)))->wait();
    EXPECT_EQ(x, std::vector<float>(3, 3.0f));
  });
}

TEST(Hooks, AThrowingPreOpHookFailsTheOpBeforeItIsNumbered) {
  auto world = make_inproc_world(1, {.name = "solo"});
  HookHandle h =
      world[0]->add_pre_op_hook([](const OpHookArgs&) { throw std::runtime_error("no"); });
  std::vector<float> x(2, 1.0f);
  try {
    world[0]->all_reduce(view(std::span(x)));
    FAIL() << "the op was enqueued";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_STREQ(e.what(),
                 "meshrt [invalid_argument] rank 0, comm 'solo', all_reduce: a pre-op hook "
                 "failed: no");
  }
  EXPECT_EQ(world[0]->collective_seq(), 0u);
  h.remove();
  EXPECT_FALSE(h.active());
  world[0]->all_reduce(view(std::span(x)))->wait();
  EXPECT_EQ(world[0]->collective_seq(), 1u);
}

TEST(Hooks, PostOpHookSeesEachEndedOpOfItsCommunicatorOnlyBeforeWaitReturns) {
  auto world = make_inproc_world(1, {.name = "post", .timeout = milliseconds(5000)});
  auto other = make_inproc_world(1, {.name = "other"});
  std::atomic<int> calls{0};
  std::atomic<uint64_t> last_seq{0};
  HookHandle h = world[0]->add_post_op_hook([&](const trace::OpRecord& r) {
    EXPECT_EQ(r.comm->name, "post");
    EXPECT_EQ(r.state, trace::OpState::kCompleted);
    last_seq = trace::trace_seq(r);
    ++calls;
  });
  std::vector<float> x(4, 1.0f);
  for (int i = 1; i <= 3; ++i) {
    world[0]->all_reduce(view(std::span(x)))->wait();
    EXPECT_EQ(calls.load(), i);  // Already called when wait() returned.
    EXPECT_EQ(last_seq.load(), static_cast<uint64_t>(i));
  }
  other[0]->all_reduce(view(std::span(x)))->wait();  // Another communicator: not its hook.
  EXPECT_EQ(calls.load(), 3);
  h.remove();
  world[0]->all_reduce(view(std::span(x)))->wait();
  EXPECT_EQ(calls.load(), 3);
}

TEST(Hooks, AbortHookRunsOnceWhenTheCommunicatorIsAborted) {
  auto world = make_inproc_world(2, {.name = "world"});
  std::atomic<int> aborts{0};
  HookHandle h = world[0]->add_abort_hook([&] { ++aborts; });
  world[1]->abort();
  EXPECT_EQ(aborts.load(), 0);  // Another rank's communicator.
  world[0]->abort();
  world[0]->abort();
  EXPECT_EQ(aborts.load(), 1);
}

TEST(NanCheck, FindsTheFirstNaNOrInfinityInEveryFloatingDtype) {
  std::vector<float> f{1, 2, std::numeric_limits<float>::infinity(), NAN};
  auto bad = first_non_finite(view(std::span(f)));
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->index, 2u);
  EXPECT_FALSE(bad->nan);
  std::vector<double> d{0, NAN};
  ASSERT_TRUE(first_non_finite(view(std::span(d))));
  EXPECT_TRUE(first_non_finite(view(std::span(d)))->nan);
  std::vector<BFloat16> b{to_bfloat16(1.0f), to_bfloat16(NAN)};
  EXPECT_EQ(first_non_finite(view(std::span(b)))->index, 1u);
  std::vector<Half> h{to_half(-std::numeric_limits<float>::infinity())};
  EXPECT_EQ(first_non_finite(view(std::span(h)))->index, 0u);
  std::vector<float> fine{1, -2, 0};
  EXPECT_FALSE(first_non_finite(view(std::span(fine))));
  std::vector<int32_t> ints{1, 2};
  EXPECT_FALSE(first_non_finite(view(std::span(ints))));
}

TEST(NanCheck, EnvironmentTurnsItOnAndTheBadRankFailsNamingTheElement) {
  setenv("MESHRT_NAN_CHECK", "1", 1);
  auto world = make_inproc_world(2, {.name = "world"});
  unsetenv("MESHRT_NAN_CHECK");
  on_every_rank(world, [&](int r) {
    std::vector<float> x(8, 1.0f);
    if (r == 1) x[5] = NAN;
    try {
      world[r]->all_reduce(view(std::span(x)));
      EXPECT_EQ(r, 0) << "rank 1 sent a NaN";
    } catch (const Error& e) {
      EXPECT_EQ(r, 1);
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_STREQ(e.what(),
                   "meshrt [invalid_argument] rank 1, comm 'world', all_reduce: input holds NaN "
                   "at element 5 of 8 (MESHRT_NAN_CHECK)");
    }
  });
  EXPECT_EQ(world[1]->collective_seq(), 0u);  // Never numbered: nothing was sent.
  world[0]->abort();                          // Rank 0's all_reduce waits for rank 1.

  // A broadcast's receive buffer may hold anything: only the root's data is checked.
  auto bcast = [] {
    setenv("MESHRT_NAN_CHECK", "1", 1);
    auto w = make_inproc_world(2, {.name = "bcast"});
    unsetenv("MESHRT_NAN_CHECK");
    return w;
  }();
  on_every_rank(bcast, [&](int r) {
    std::vector<float> x(4, r == 0 ? 2.0f : NAN);
    bcast[r]->broadcast(view(std::span(x)), 0)->wait();
    EXPECT_EQ(x, std::vector<float>(4, 2.0f));
  });
}

}  // namespace
}  // namespace meshrt
