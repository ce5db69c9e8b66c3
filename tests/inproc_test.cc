// The in-process backend: every collective x dtype x reduce op at several world sizes, p2p,
// split, and the failure paths (timeouts, mismatched collectives, abort) at 2 to 64 ranks.
#include <fmt/format.h>
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

// The message of the kInvalidArgument that `call` throws, or "accepted".
template <typename F>
std::string refusal(F&& call) {
  try {
    call();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    return std::string(e.what());
  }
  return std::string("accepted");
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

// A Reducer that throws fails its op on the ranks where it threw, with a message naming it and
// what it threw, after the op ran to its end (its peers are not left waiting); the communicator
// goes on. Mistakes with Reducers and records are refused before anything is sent.
TEST(Inproc, CustomReducerFailuresAndMistakes) {
  const auto fussy =
      Reducer::create("fussy_max", sizeof(int64_t), [](const void* in, void* inout, size_t count) {
        const auto* a = static_cast<const int64_t*>(in);
        auto* b = static_cast<int64_t*>(inout);
        for (size_t i = 0; i < count; ++i) {
          if (a[i] < 0 || b[i] < 0) {
            throw std::domain_error("negative input");
          }
          b[i] = std::max(a[i], b[i]);
        }
      });
  std::atomic<int> threw{0};
  run_inproc(4, [&](Communicator& world) {
    std::vector<int64_t> x(6, world.rank());
    world.all_reduce(view(x), fussy)->wait();
    for (int64_t v : x) ASSERT_EQ(v, 3);
    std::vector<int64_t> bad(6, world.rank() == 2 ? -1 : 1);
    try {
      world.all_reduce(view(bad), fussy)->wait();
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("reducer 'fussy_max' threw: negative input"),
                std::string::npos)
          << e.what();
      ++threw;
    }
    // Still in step: the next op is right on every rank.
    std::vector<int64_t> y(3, world.rank() + 1);
    world.all_reduce(view(y), fussy)->wait();
    for (int64_t v : y) ASSERT_EQ(v, 4);

    std::vector<char> bytes(24);
    EXPECT_NE(refusal([&] {
                world.all_reduce(records(bytes.data(), 2, 12), ReduceOp::kSum);
              }).find("12-byte records, which only a custom reducer folds"),
              std::string::npos);
    EXPECT_NE(refusal([&] {
                world.all_reduce(records(bytes.data(), 3, 8), fussy)->wait();
              }).find("accepted"),
              std::string::npos);
    EXPECT_NE(refusal([&] { world.all_reduce(records(bytes.data(), 2, 12), fussy); })
                  .find("reducer 'fussy_max' folds 8-byte records but the buffer's elements have "
                        "12 bytes"),
              std::string::npos);
    std::vector<float> f(2);
    const auto typed = Reducer::create(
        "f64_only", 8, [](const void*, void*, size_t) {}, DType::kF64);
    EXPECT_NE(refusal([&] {
                world.all_reduce(view(f), typed);
              }).find("reducer 'f64_only' folds f64 but the buffer holds f32"),
              std::string::npos);
    EXPECT_NE(refusal([&] {
                world.all_reduce(view(f), ReduceOp::kCustom);
              }).find("a Reducer goes with ReduceOp::kCustom only"),
              std::string::npos);
    EXPECT_NE(refusal([&] {
                world.broadcast(records(bytes.data(), 2, 12), 0);
              }).find("only a custom reducer folds"),
              std::string::npos);
  });
  EXPECT_GE(threw.load(), 1);
  try {
    Reducer::create(
        "wrong", 4, [](const void*, void*, size_t) {}, DType::kF64);
    ADD_FAILURE() << "a 4-byte reducer of f64 was created";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("its element size is 4 bytes but its dtype f64 has 8"),
              std::string::npos)
        << e.what();
  }
}

// The v-collectives refuse blocks that do not fit, before anything is sent, naming what is wrong.
TEST(Inproc, VCollectiveMistakesAreNamed) {
  run_inproc(3, [](Communicator& world) {
    std::vector<float> in(2), out(10);
    const size_t mine = world.rank() == 1 ? 2 : 1;
    const std::vector<size_t> counts{1, 2, 1};
    auto gather = [&](std::vector<size_t> c, std::vector<size_t> o, size_t n) {
      return refusal([&] { world.all_gather_v(view(in.data(), n), view(out), c, o); });
    };
    EXPECT_NE(gather({1, 2}, {}, mine)
                  .find("counts have 2 entries and offsets 2, but the group "
                        "has 3 ranks"),
              std::string::npos);
    EXPECT_NE(
        gather(counts, {0, 1, 10}, mine)
            .find("block 2 (1 elements at offset 10) ends past the 10 elements of the output"),
        std::string::npos);
    EXPECT_NE(gather(counts, {0, 4, 5}, mine).find("blocks 1 and 2 overlap"), std::string::npos);
    EXPECT_NE(
        gather(counts, {}, mine + 1)
            .find(fmt::format("input has {} elements but this rank's block (counts[{}]) has {}",
                              mine + 1, world.rank(), mine)),
        std::string::npos);
    std::vector<float> whole(4), part(2);
    EXPECT_NE(refusal([&] {
                world.reduce_scatter_v(view(whole), view(part.data(), mine), counts,
                                       std::vector<size_t>{0, 0, 3});
              }).find("blocks 0 and 1 overlap"),
              std::string::npos);
    // Right at last: every rank's block, in reverse order with gaps, gathered and reduced.
    std::vector<int32_t> mine_v(mine, world.rank() + 1), all(9, -1);
    world.all_gather_v(view(mine_v), view(all), counts, std::vector<size_t>{7, 3, 0})->wait();
    EXPECT_EQ(all, (std::vector<int32_t>{3, -1, -1, 2, 2, -1, -1, 1, -1}));
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
