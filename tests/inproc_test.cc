// The in-process backend: every collective x dtype x reduce op at several world sizes, p2p,
// split, and the failure paths (timeouts, mismatched collectives, abort) at 2 to 64 ranks.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <latch>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "mesh/meshrt.h"
#include "tests/collective_checks.h"
#include "trace/flight_recorder.h"
#include "trace/tracer.h"

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

// Views of a trainer's raw memory: a typed pointer and count, or bytes with a dtype (what a C
// caller has); an all_reduce of one and an all_gather from the other land element by element.
TEST(Inproc, RawPointerViews) {
  run_inproc(3, [](Communicator& world) {
    const auto array = std::make_unique<double[]>(5);
    for (int i = 0; i < 5; ++i) array[i] = world.rank() + i;
    world.all_reduce(view(array.get(), 5))->wait();
    for (int i = 0; i < 5; ++i) ASSERT_EQ(array[i], 3 + 3 * i);
    int32_t mine[2] = {world.rank(), -world.rank()};
    std::vector<char> gathered(3 * sizeof(mine));
    world
        .all_gather(view(static_cast<void*>(mine), 2, DType::kI32),
                    view(static_cast<void*>(gathered.data()), 6, DType::kI32))
        ->wait();
    for (int r = 0; r < 3; ++r) {
      int32_t pair[2];
      std::memcpy(pair, gathered.data() + r * sizeof(pair), sizeof(pair));
      ASSERT_EQ(pair[0], r);
      ASSERT_EQ(pair[1], -r);
    }
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

// An op has one number everywhere: the error, the work's record and the flight recorder name
// the all_reduce by its collective sequence number (PyTorch's), not by the count of all ops.
TEST(Inproc, ErrorsRecordsAndDumpsNameAnOpByTheSameNumber) {
  auto world = make_inproc_world(2, {.name = "world", .timeout = milliseconds(300)});
  std::vector<float> x(4, 1.0f);
  std::thread peer([&] {
    world[1]->recv(view(x), 0)->wait();
    world[1]->all_reduce(view(x))->wait();
  });
  world[0]->send(view(x), 1)->wait();
  world[0]->all_reduce(view(x))->wait();
  peer.join();
  // Rank 1 stays away: rank 0's second all_reduce (its third op) times out.
  WorkHandle late = world[0]->all_reduce(view(x));
  try {
    late->wait();
    FAIL() << "an all_reduce without its peer finished";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kTimeout);
    EXPECT_NE(std::string(e.what()).find("comm 'world', all_reduce #2 (op_id 3):"),
              std::string::npos)
        << e.what();
  }
  const trace::OpRecord rec = late->record();
  EXPECT_EQ(trace::trace_seq(rec), 2u);
  EXPECT_EQ(rec.op_seq, 3u);
  bool recorded = false;
  for (const trace::OpRecord& r : trace::FlightRecorder::instance().records(0)) {
    if (r.record_id == rec.record_id) {
      recorded = true;
      EXPECT_EQ(r.collective_seq, 2u);
      EXPECT_EQ(r.state, trace::OpState::kFailed);
    }
  }
  EXPECT_TRUE(recorded);
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

// Which thread started each op of the communicators whose name begins with `prefix`.
class StartThreads final : public trace::Sink {
 public:
  explicit StartThreads(std::string prefix) : prefix_(std::move(prefix)) {}
  void on_enqueue(const trace::OpRecord&) override {}
  void on_start(const trace::OpRecord& r) override {
    if (!r.comm || !r.comm->name.starts_with(prefix_)) return;
    std::lock_guard lock(mu_);
    threads_[{r.comm->global_rank, r.op_seq}] = std::this_thread::get_id();
  }
  void on_end(const trace::OpRecord&) override {}
  // The thread that started op `op_seq` of global rank `rank`.
  std::thread::id thread(int rank, uint64_t op_seq) {
    std::lock_guard lock(mu_);
    return threads_[{rank, op_seq}];
  }

 private:
  const std::string prefix_;
  std::mutex mu_;
  std::map<std::pair<int, uint64_t>, std::thread::id> threads_;
};

size_t thread_count() {
  return static_cast<size_t>(std::distance(std::filesystem::directory_iterator("/proc/self/task"),
                                           std::filesystem::directory_iterator()));
}

// The latency path has no thread hand-off: an op its caller waits for runs on the caller, and no
// worker thread is ever started for it.
TEST(InprocQueue, WaitedOpsRunOnTheCallerWithNoWorkerThread) {
  auto sink = std::make_shared<StartThreads>("caller_runs");
  trace::add_sink(sink);
  auto world = make_inproc_world(1, {.name = "caller_runs"});
  std::vector<float> x(2, 1.0f);
  world[0]->all_reduce(view(x))->wait();  // The watchdog's threads start with the first op.
  const size_t threads = thread_count();
  for (int i = 0; i < 100; ++i) world[0]->all_reduce(view(x))->wait();
  EXPECT_EQ(thread_count(), threads) << "a worker thread was started for waited ops";
  EXPECT_EQ(sink->thread(0, 50), std::this_thread::get_id());
  trace::remove_sink(sink.get());
}

// Waits, without starting it, until `w` has completed.
void await_completion(const WorkHandle& w) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (w->record().state != trace::OpState::kCompleted) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "op " << w->record().op_seq;
    std::this_thread::sleep_for(milliseconds(1));
  }
}

// async_op, pipelining and polling start ops on the worker, in call order, with no waiter.
TEST(InprocQueue, AsyncOpPipeliningAndPollingStartOpsOnTheWorker) {
  auto sink = std::make_shared<StartThreads>("to_worker");
  trace::add_sink(sink);
  auto world = make_inproc_world(1, {.name = "to_worker"});
  Communicator& c = *world[0];
  std::vector<int32_t> a(4, 1);
  auto w1 = c.all_reduce(view(a), ReduceOp::kSum, {.async_op = true});
  await_completion(w1);
  auto w2 = c.all_reduce(view(a));
  auto w3 = c.all_reduce(view(a));  // Queued behind an op not yet finished: both go.
  await_completion(w3);
  EXPECT_TRUE(w2->test());
  auto w4 = c.all_reduce(view(a));
  while (!w4->test()) std::this_thread::yield();
  auto w5 = c.all_reduce(view(a));
  w5->wait(milliseconds(10000));  // A timed wait never runs the op inline.
  const auto me = std::this_thread::get_id();
  for (uint64_t seq = 1; seq <= 5; ++seq) EXPECT_NE(sink->thread(0, seq), me) << "op " << seq;
  EXPECT_EQ(a[0], 1);
  trace::remove_sink(sink.get());
}

// An op nobody waits for still runs (the watchdog's poll starts it), and a rank that blocks on
// one communicator starts its ops queued on another: ranks that wait in another order than they
// queued do not deadlock.
TEST(InprocQueue, QueuedOpsStartWhenTheirRankBlocksElsewhereOrIsIdle) {
  auto world = make_inproc_world(2, {.name = "elsewhere", .timeout = milliseconds(20000)});
  std::vector<std::shared_ptr<Communicator>> sub(2);
  {
    std::vector<std::thread> splits;
    for (int r = 0; r < 2; ++r) splits.emplace_back([&, r] { sub[r] = world[r]->split(0, r); });
    for (auto& t : splits) t.join();
  }
  std::latch peer_done(1);
  std::vector<std::vector<float>> x(2, std::vector<float>(4, 1.0f));
  std::vector<std::vector<float>> y = x, u = x;
  std::thread rank0([&] {
    auto a = world[0]->all_reduce(view(x[0]));  // Queued, not waited for yet.
    sub[0]->all_reduce(view(y[0]))->wait();     // Rank 1 finishes `a` before it joins this.
    auto idle = world[0]->all_reduce(view(u[0]));
    peer_done.wait();  // User code that calls no meshrt until rank 1 has finished `idle`.
    a->wait();
    idle->wait();
  });
  std::thread rank1([&] {
    world[1]->all_reduce(view(x[1]))->wait();
    sub[1]->all_reduce(view(y[1]))->wait();
    world[1]->all_reduce(view(u[1]))->wait();
    peer_done.count_down();
  });
  rank0.join();
  rank1.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(x[r][0], 2.0f);
    EXPECT_EQ(y[r][0], 2.0f);
    EXPECT_EQ(u[r][0], 2.0f);
  }
}

}  // namespace
}  // namespace meshrt
