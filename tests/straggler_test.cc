// Stragglers: the analysis against hand-computed skews, waits and lateness; the sink on real
// in-process ops where one rank arrives late; the exchange through a real TcpStore (bounded wait,
// missing and unreadable ranks, chunked values); and Gloo jobs of 4 processes whose rank 0
// writes MESHRT_STRAGGLER_REPORT at exit, naming the late rank and the unmatched ops.
#include "trace/straggler.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "mesh/device_mesh.h"
#include "mesh/meshrt.h"
#include "runtime/store/tcp_store.h"
#include "runtime/store/tcp_store_server.h"
#include "runtime/straggler_exchange.h"
#include "tests/process_harness.h"

#ifndef MESHRT_STRAGGLER_WORKER
#error "MESHRT_STRAGGLER_WORKER must name the straggler_worker binary"
#endif

namespace meshrt {
namespace {

using nlohmann::json;
using testing::describe;
using trace::RankSamples;
using trace::StragglerGroup;
using trace::StragglerReport;
using trace::StragglerSample;
using trace::StragglerSink;

constexpr int64_t kMs = 1000000;  // ns

StragglerSample sample(uint32_t group, std::string_view op, uint64_t seq, int64_t arrival_ms,
                       int64_t end_ms) {
  StragglerSample s;
  s.group = group;
  op.copy(s.op.data(), op.size());
  s.seq = seq;
  s.bytes = 4096;
  s.arrival_wall_ns = arrival_ms * kMs;
  s.end_wall_ns = end_ms * kMs;
  return s;
}

const StragglerGroup kWorld{"world", "world", "", {0, 1, 2, 3}};
const StragglerGroup kTp01{"world/split1.c0", "mesh0/tp", "tp", {0, 1}};
const StragglerGroup kTp23{"world/split1.c2", "mesh0/tp", "tp", {2, 3}};

// World all_reduce #1: arrivals 0, 1, 10, 2 ms (rank 2 last, skew 10); #2: 20, 25, 21, 20 (rank 1
// last, skew 5); #3: only ranks 0 and 1 ran it. tp {0,1} #1: 30, 33 (rank 1, skew 3). tp {2,3}
// #1: 30, 30 (no skew); #2: 40, 47 (rank 3, skew 7). Every op ends 1 ms after its last arrival.
// Ranks list their communicators in different orders: matching goes by identity.
std::vector<RankSamples> hand_made_ranks() {
  std::vector<RankSamples> ranks(4);
  for (int r = 0; r < 4; ++r) {
    ranks[r].rank = r;
    ranks[r].host = "h1";
  }
  ranks[0].groups = {kWorld, kTp01};
  ranks[0].samples = {sample(0, "all_reduce", 1, 0, 11), sample(0, "all_reduce", 2, 20, 26),
                      sample(0, "all_reduce", 3, 50, 51), sample(1, "all_gather", 1, 30, 34)};
  ranks[1].groups = {kTp01, kWorld};
  ranks[1].samples = {sample(1, "all_reduce", 1, 1, 11), sample(1, "all_reduce", 2, 25, 26),
                      sample(0, "all_gather", 1, 33, 34), sample(1, "all_reduce", 3, 50, 51)};
  ranks[2].groups = {kTp23, kWorld};
  ranks[2].samples = {sample(1, "all_reduce", 1, 10, 11), sample(1, "all_reduce", 2, 21, 26),
                      sample(0, "all_gather", 1, 30, 31), sample(0, "all_gather", 2, 40, 48)};
  ranks[3].groups = {kWorld, kTp23};
  ranks[3].samples = {sample(0, "all_reduce", 1, 2, 11), sample(0, "all_reduce", 2, 20, 26),
                      sample(1, "all_gather", 1, 30, 31), sample(1, "all_gather", 2, 47, 48)};
  return ranks;
}

const trace::DimStragglerStats* find_dim(const StragglerReport& report, const std::string& dim) {
  for (const auto& d : report.dims) {
    if (d.dim == dim) return &d;
  }
  return nullptr;
}

TEST(StragglerAnalysis, MatchesByCommunicatorAndSeq) {
  const auto ranks = hand_made_ranks();
  const StragglerReport report = trace::analyze_stragglers(ranks, 2);
  EXPECT_EQ(report.ranks_reported, 4);
  EXPECT_EQ(report.hosts, 1);
  EXPECT_EQ(report.matched_ops, 5u);
  EXPECT_EQ(report.incomplete_ops, 1u);
  EXPECT_EQ(report.mismatched_ops, 0u);

  ASSERT_EQ(report.dims.size(), 2u);
  EXPECT_EQ(report.dims[0].dim, "tp");
  const trace::DimStragglerStats& world = report.dims[1];
  EXPECT_EQ(world.dim, "world");
  EXPECT_EQ(world.ops, 2u);
  EXPECT_EQ(world.incomplete_ops, 1u);
  EXPECT_DOUBLE_EQ(world.skew_min_ms, 5);
  EXPECT_DOUBLE_EQ(world.skew_mean_ms, 7.5);
  EXPECT_DOUBLE_EQ(world.skew_p50_ms, 5);
  EXPECT_DOUBLE_EQ(world.skew_max_ms, 10);
  EXPECT_EQ(world.max_skew.comm, "world");
  EXPECT_EQ(world.max_skew.seq, 1u);
  EXPECT_EQ(world.max_skew.op, "all_reduce");
  EXPECT_EQ(world.max_skew.last_rank, 2);
  // Waits on world: rank 0 10 + 5, rank 1 9 + 0, rank 2 0 + 4, rank 3 8 + 5.
  EXPECT_EQ(world.wait_min_rank, 2);
  EXPECT_DOUBLE_EQ(world.wait_min_ms, 4);
  EXPECT_EQ(world.wait_max_rank, 0);
  EXPECT_DOUBLE_EQ(world.wait_max_ms, 15);
  EXPECT_EQ(world.most_often_last_rank, 1);  // Ranks 1 and 2 were last once: the lower wins.
  EXPECT_EQ(world.most_often_last_times, 1u);
  ASSERT_EQ(world.top_late.size(), 2u);
  EXPECT_EQ(world.top_late[0].rank, 2);
  EXPECT_DOUBLE_EQ(world.top_late[0].lateness_ms, 10);
  EXPECT_EQ(world.top_late[1].rank, 1);
  EXPECT_DOUBLE_EQ(world.top_late[1].lateness_ms, 5);

  // tp: skews 3 ({0,1} #1), 0 and 7 ({2,3} #1 and #2); both groups are one dim.
  const trace::DimStragglerStats& tp = report.dims[0];
  EXPECT_EQ(tp.ops, 3u);
  EXPECT_DOUBLE_EQ(tp.skew_min_ms, 0);
  EXPECT_DOUBLE_EQ(tp.skew_mean_ms, 10.0 / 3);
  EXPECT_DOUBLE_EQ(tp.skew_p50_ms, 3);
  EXPECT_DOUBLE_EQ(tp.skew_max_ms, 7);
  EXPECT_EQ(tp.max_skew.comm, "mesh0/tp");
  EXPECT_EQ(tp.max_skew.seq, 2u);
  EXPECT_EQ(tp.max_skew.last_rank, 3);
  EXPECT_EQ(tp.wait_min_rank, 1);  // Ranks 1 and 3 never waited on tp.
  EXPECT_EQ(tp.wait_max_rank, 2);
  EXPECT_DOUBLE_EQ(tp.wait_max_ms, 7);
  ASSERT_EQ(tp.top_late.size(), 2u);
  EXPECT_EQ(tp.top_late[0].rank, 3);
  EXPECT_EQ(tp.top_late[1].rank, 1);

  // Overall lateness: rank 2 10, rank 1 5 + 3, rank 3 7; top 2.
  ASSERT_EQ(report.top_late.size(), 2u);
  EXPECT_EQ(report.top_late[0].rank, 2);
  EXPECT_DOUBLE_EQ(report.top_late[0].lateness_ms, 10);
  EXPECT_EQ(report.top_late[0].times_last, 1u);
  EXPECT_EQ(report.top_late[1].rank, 1);
  EXPECT_DOUBLE_EQ(report.top_late[1].lateness_ms, 8);
  EXPECT_EQ(report.top_late[1].times_last, 2u);

  ASSERT_EQ(report.ranks.size(), 4u);
  const double want_wait[] = {18, 9, 11, 13};
  const uint64_t want_ops[] = {3, 3, 4, 4};
  const double want_lateness[] = {0, 8, 10, 7};
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(report.ranks[r].rank, r);
    EXPECT_EQ(report.ranks[r].samples, 4u);
    EXPECT_EQ(report.ranks[r].ops, want_ops[r]) << r;
    EXPECT_DOUBLE_EQ(report.ranks[r].wait_ms, want_wait[r]) << r;
    EXPECT_DOUBLE_EQ(report.ranks[r].lateness_ms, want_lateness[r]) << r;
    // Each op ends 1 ms after the last arrival: comm time = wait + 1 ms per op.
    EXPECT_DOUBLE_EQ(report.ranks[r].comm_ms, want_wait[r] + want_ops[r]) << r;
  }

  ASSERT_EQ(report.incomplete.size(), 1u);
  EXPECT_EQ(report.incomplete[0].comm, "world");
  EXPECT_EQ(report.incomplete[0].seq, 3u);
  EXPECT_EQ(report.incomplete[0].missing_ranks, (std::vector<int>{2, 3}));
}

TEST(StragglerAnalysis, JsonAndTextCarryTheReport) {
  const auto ranks = hand_made_ranks();
  StragglerReport report = trace::analyze_stragglers(ranks, 5);
  report.missing_ranks = {4};
  const json j = json::parse(report.json());
  EXPECT_EQ(j["ranks_reported"], 4);
  EXPECT_EQ(j["missing_ranks"], json::array({4}));
  EXPECT_EQ(j["matched_ops"], 5);
  EXPECT_EQ(j["incomplete_ops"], 1);
  EXPECT_EQ(j["top_late"][0]["rank"], 2);
  EXPECT_DOUBLE_EQ(j["top_late"][0]["lateness_ms"].get<double>(), 10);
  const json& world = j["dims"][1];
  EXPECT_EQ(world["dim"], "world");
  EXPECT_DOUBLE_EQ(world["skew_ms"]["mean"].get<double>(), 7.5);
  EXPECT_EQ(world["max_skew"]["last_rank"], 2);
  EXPECT_EQ(world["wait_ms_min"]["rank"], 2);
  EXPECT_EQ(world["wait_ms_max"]["rank"], 0);
  EXPECT_EQ(world["most_often_last"]["times"], 1);
  EXPECT_EQ(j["ranks"][3]["wait_ms"], 13.0);
  EXPECT_EQ(j["incomplete"][0]["missing_ranks"], json::array({2, 3}));
  EXPECT_NE(j["clock"].get<std::string>().find("one host"), std::string::npos);

  const std::string text = report.text();
  EXPECT_NE(text.find("missing [4]"), std::string::npos) << text;
  EXPECT_NE(text.find("world #1, rank 2"), std::string::npos) << text;
  EXPECT_NE(text.find("world #3 all_reduce: missing ranks [2, 3]"), std::string::npos) << text;
}

TEST(StragglerAnalysis, DifferentOpsAtOneSeqAreMismatchedAndHostsAreCounted) {
  std::vector<RankSamples> ranks(2);
  const StragglerGroup pair{"world", "world", "", {0, 1}};
  for (int r = 0; r < 2; ++r) {
    ranks[r].rank = r;
    ranks[r].host = r == 0 ? "a" : "b";
    ranks[r].groups = {pair};
  }
  ranks[0].samples = {sample(0, "all_reduce", 1, 0, 5), sample(0, "barrier", 2, 6, 9)};
  ranks[1].samples = {sample(0, "broadcast", 1, 1, 5), sample(0, "barrier", 2, 8, 9)};
  const StragglerReport report = trace::analyze_stragglers(ranks, 5);
  EXPECT_EQ(report.mismatched_ops, 1u);
  EXPECT_EQ(report.matched_ops, 1u);
  EXPECT_EQ(report.hosts, 2);
  EXPECT_NE(report.clock.find("2 hosts"), std::string::npos);
  ASSERT_EQ(report.top_late.size(), 1u);
  EXPECT_EQ(report.top_late[0].rank, 1);
  EXPECT_DOUBLE_EQ(report.top_late[0].lateness_ms, 2);

  const StragglerReport none = trace::analyze_stragglers({}, 5);
  EXPECT_EQ(none.matched_ops, 0u);
  EXPECT_TRUE(none.dims.empty());
  EXPECT_NO_THROW(json::parse(none.json()));
}

trace::StragglerOptions sink_on(size_t ops_per_rank = 4096) {
  trace::StragglerOptions o;
  o.enabled = true;
  o.ops_per_rank = ops_per_rank;
  return o;
}

TEST(StragglerAnalysis, ARepeatedInstanceCountsTheLaterSample) {
  // Two worlds with one identity, one after the other in a process: seq 1 recurs on rank 0.
  std::vector<RankSamples> ranks(2);
  for (int r = 0; r < 2; ++r) {
    ranks[r].rank = r;
    ranks[r].groups = {{"world", "world", "", {0, 1}}};
  }
  ranks[0].samples = {sample(0, "barrier", 1, 0, 1), sample(0, "barrier", 1, 100, 101)};
  ranks[1].samples = {sample(0, "barrier", 1, 90, 101)};
  const StragglerReport report = trace::analyze_stragglers(ranks, 5);
  EXPECT_EQ(report.matched_ops, 1u);
  ASSERT_EQ(report.top_late.size(), 1u);
  EXPECT_EQ(report.top_late[0].rank, 0);
  EXPECT_DOUBLE_EQ(report.top_late[0].lateness_ms, 10);
}

// The sink on for one test, empty before and off after.
class StragglerSinkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    StragglerSink::instance().configure(sink_on());
    StragglerSink::instance().reset();
  }
  void TearDown() override {
    StragglerSink::instance().configure({});
    StragglerSink::instance().reset();
  }
};

TEST_F(StragglerSinkTest, LateRankDominatesAndTheOthersWaitForIt) {
  constexpr int kOps = 5;
  constexpr auto kSleep = std::chrono::milliseconds(20);
  run_inproc(4, [&](Communicator& world) {
    std::vector<float> x(64, 1.0f);
    for (int i = 0; i < kOps; ++i) {
      if (world.rank() == 1) std::this_thread::sleep_for(kSleep);
      world.all_reduce(view(x))->wait();
    }
    // Point-to-point ops are not collectives: not recorded.
    if (world.rank() == 0) world.send(view(x), 1)->wait();
    if (world.rank() == 1) world.recv(view(x), 0)->wait();
  });
  StragglerSink& sink = StragglerSink::instance();
  EXPECT_TRUE(sink.holds_every_member());
  for (int r = 0; r < 4; ++r) {
    const RankSamples rs = sink.samples(r);
    ASSERT_EQ(rs.samples.size(), static_cast<size_t>(kOps)) << r;
    for (int i = 0; i < kOps; ++i) {
      const StragglerSample& s = rs.samples[i];
      EXPECT_EQ(s.seq, static_cast<uint64_t>(i + 1));
      EXPECT_EQ(s.op_name(), "all_reduce");
      EXPECT_EQ(s.bytes, 64u * 4);
      EXPECT_GE(s.end_wall_ns, s.arrival_wall_ns);
      EXPECT_EQ(rs.groups[s.group].members, (std::vector<int>{0, 1, 2, 3}));
    }
  }

  const StragglerReport report = sink.local_report();
  const double sleep_ms = static_cast<double>(kSleep.count());
  EXPECT_EQ(report.matched_ops, static_cast<uint64_t>(kOps));
  EXPECT_EQ(report.incomplete_ops, 0u);
  ASSERT_FALSE(report.top_late.empty()) << report.text();
  EXPECT_EQ(report.top_late[0].rank, 1) << report.text();
  EXPECT_EQ(report.top_late[0].times_last, static_cast<uint64_t>(kOps));
  // Each skew is about the sleep; scheduling on a loaded machine may shave a little off.
  EXPECT_GE(report.top_late[0].lateness_ms, kOps * sleep_ms / 2) << report.text();
  const trace::RankStragglerStats& late = report.ranks[1];
  EXPECT_EQ(late.wait_ms, 0);  // Last every time: it never waited.
  for (int r : {0, 2, 3}) {
    EXPECT_GE(report.ranks[r].wait_ms, kOps * sleep_ms / 2) << report.text();
    EXPECT_LE(report.ranks[r].wait_ms, late.lateness_ms);  // Nobody waits longer than the skew.
    EXPECT_EQ(report.ranks[r].times_last, 0u);
  }
  const trace::DimStragglerStats* world = find_dim(report, "world");
  ASSERT_NE(world, nullptr);
  EXPECT_EQ(world->most_often_last_rank, 1);
  EXPECT_EQ(world->wait_min_rank, 1);
  EXPECT_EQ(world->max_skew.last_rank, 1);
  EXPECT_GE(world->skew_min_ms, sleep_ms / 2);
}

TEST_F(StragglerSinkTest, MeshDimsAreMatchedAcrossTheirGroups) {
  run_inproc(4, [](Communicator&) {
    auto mesh = init_device_mesh({2, 2}, {"dp", "tp"});
    std::vector<float> x(16, 1.0f);
    for (int i = 0; i < 3; ++i) mesh->comm("tp").all_reduce(view(x))->wait();
    mesh->comm("dp").barrier()->wait();
  });
  const StragglerReport report = StragglerSink::instance().local_report();
  const trace::DimStragglerStats* tp = find_dim(report, "tp");
  const trace::DimStragglerStats* dp = find_dim(report, "dp");
  ASSERT_NE(tp, nullptr) << report.text();
  ASSERT_NE(dp, nullptr) << report.text();
  EXPECT_EQ(tp->ops, 2u * 3);  // Two tp groups, three all_reduces each.
  EXPECT_EQ(dp->ops, 2u);
  EXPECT_EQ(report.incomplete_ops, 0u) << report.text();
  EXPECT_EQ(report.mismatched_ops, 0u);
}

TEST_F(StragglerSinkTest, RingKeepsTheLastOpsAndCountsTheDropped) {
  StragglerSink::instance().configure(sink_on(4));
  run_inproc(2, [](Communicator& world) {
    for (int i = 0; i < 6; ++i) world.barrier()->wait();
  });
  const RankSamples rs = StragglerSink::instance().samples(1);
  ASSERT_EQ(rs.samples.size(), 4u);
  EXPECT_EQ(rs.dropped, 2u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(rs.samples[i].seq, i + 3);
  EXPECT_EQ(StragglerSink::instance().local_report().matched_ops, 4u);
}

// A store server on loopback and a client, for the exchange.
class StragglerExchangeTest : public StragglerSinkTest {
 protected:
  static TcpStoreOptions client_of(const TcpStoreServer& server) {
    TcpStoreOptions o;
    o.port = server.port();
    return o;
  }
  TcpStoreServer server_;
  TcpStore store_{client_of(server_)};
};

TEST_F(StragglerExchangeTest, CollectWaitsBoundedAndMatchesTheLocalReport) {
  run_inproc(4, [](Communicator& world) {
    std::vector<float> x(8, 1.0f);
    for (int i = 0; i < 3; ++i) {
      if (world.rank() == 2) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      world.all_reduce(view(x))->wait();
    }
  });
  StragglerSink& sink = StragglerSink::instance();
  for (int r = 0; r < 3; ++r) ASSERT_TRUE(publish_stragglers(store_, sink.samples(r)));

  const auto start = std::chrono::steady_clock::now();
  const auto partial = collect_stragglers(store_, 4, std::chrono::milliseconds(300), 5);
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_GE(waited, std::chrono::milliseconds(250));
  EXPECT_LT(waited, std::chrono::seconds(5));
  ASSERT_TRUE(partial.has_value());
  EXPECT_EQ(partial->missing_ranks, std::vector<int>{3});
  EXPECT_EQ(partial->ranks_reported, 3);
  EXPECT_EQ(partial->matched_ops, 0u);
  EXPECT_EQ(partial->incomplete_ops, 3u);
  ASSERT_EQ(partial->incomplete.size(), 3u);
  EXPECT_EQ(partial->incomplete[0].missing_ranks, std::vector<int>{3});

  ASSERT_TRUE(publish_stragglers(store_, sink.samples(3)));
  const auto full = collect_stragglers(store_, 4, std::chrono::seconds(10), 5);
  ASSERT_TRUE(full.has_value());
  EXPECT_TRUE(full->missing_ranks.empty());
  EXPECT_EQ(full->matched_ops, 3u);
  EXPECT_EQ(full->top_late[0].rank, 2) << full->text();
  // The store round trip loses nothing.
  EXPECT_EQ(full->json(), sink.local_report().json());
}

TEST_F(StragglerExchangeTest, LargeSamplesAreSplitIntoChunks) {
  constexpr uint64_t kOps = 25000;  // About 1.2 MB per rank: two chunks.
  std::vector<RankSamples> ranks(2);
  for (int r = 0; r < 2; ++r) {
    ranks[r].rank = r;
    ranks[r].host = "h";
    ranks[r].groups = {{"world", "world", "", {0, 1}}};
    for (uint64_t seq = 1; seq <= kOps; ++seq) {
      StragglerSample s = sample(0, "all_reduce", seq, 0, 0);
      s.arrival_wall_ns = static_cast<int64_t>(seq) * 1000 + r * 7;
      s.end_wall_ns = s.arrival_wall_ns + 500;
      ranks[r].samples.push_back(s);
    }
    ASSERT_TRUE(publish_stragglers(store_, ranks[r]));
  }
  const std::string second_chunk = "straggler/1/1";
  EXPECT_TRUE(store_.check(std::span<const std::string>(&second_chunk, 1)));
  const auto report = collect_stragglers(store_, 2, std::chrono::seconds(10), 5);
  ASSERT_TRUE(report.has_value());
  EXPECT_EQ(report->matched_ops, kOps);
  EXPECT_EQ(report->json(), trace::analyze_stragglers(ranks, 5).json());
}

TEST_F(StragglerExchangeTest, UnreadableSamplesMakeTheRankMissing) {
  RankSamples rank0;
  rank0.rank = 0;
  ASSERT_TRUE(publish_stragglers(store_, rank0));
  store_.set("straggler/1/0", as_bytes(std::string("not samples")));
  store_.set("straggler/1", as_bytes(std::string("1")));
  const auto report = collect_stragglers(store_, 2, std::chrono::seconds(10), 5);
  ASSERT_TRUE(report.has_value());
  EXPECT_EQ(report->missing_ranks, std::vector<int>{1});
  EXPECT_EQ(report->ranks_reported, 1);
}

class StragglerJobTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("meshrt_straggler_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  json read_report() const {
    std::ifstream in(dir_ / "report.json");
    return json::parse(in);
  }
  std::filesystem::path dir_;
};

TEST_F(StragglerJobTest, LateRankIsNamedAndUnmatchedOpsAreListed) {
  const auto start = std::chrono::steady_clock::now();
  const auto results = testing::run_ranks(
      {MESHRT_STRAGGLER_WORKER, "late"}, 4, std::chrono::seconds(60),
      {{"MESHRT_STRAGGLER_REPORT", (dir_ / "report.json").string()}, {"MESHRT_COMMS_LOG", "1"}});
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
  for (int r = 0; r < 4; ++r) ASSERT_EQ(results[r].exit_code, 0) << describe(results);

  const json report = read_report();
  EXPECT_EQ(report["ranks_reported"], 4);
  EXPECT_EQ(report["missing_ranks"], json::array());
  EXPECT_EQ(report["matched_ops"], 10);
  EXPECT_EQ(report["top_late"][0]["rank"], 2) << report.dump(2);
  EXPECT_EQ(report["top_late"][0]["times_last"], 10);
  EXPECT_GE(report["top_late"][0]["lateness_ms"].get<double>(), 10 * 25.0);
  for (int r : {0, 1, 3}) {
    EXPECT_GE(report["ranks"][r]["wait_ms"].get<double>(), 10 * 25.0) << report.dump(2);
  }
  EXPECT_EQ(report["ranks"][2]["wait_ms"], 0.0);
  // Rank 3's two extra collectives: incomplete, never matched, nothing hung.
  EXPECT_EQ(report["incomplete_ops"], 2);
  ASSERT_EQ(report["incomplete"].size(), 2u);
  for (int i = 0; i < 2; ++i) {
    const json& op = report["incomplete"][i];
    EXPECT_EQ(op["comm"], "world");
    EXPECT_EQ(op["seq"], 11 + i);
    EXPECT_EQ(op["op"], "all_gather");
    EXPECT_EQ(op["missing_ranks"], json::array({0, 1, 2}));
  }
  EXPECT_EQ(report["ranks"][3]["samples"], 12);
  // MESHRT_COMMS_LOG: the collecting rank prints the table, the others print nothing of it.
  EXPECT_NE(results[0].output.find("top late ranks"), std::string::npos) << describe(results);
  EXPECT_EQ(results[1].output.find("top late ranks"), std::string::npos);
}

TEST_F(StragglerJobTest, RankThatNeverPublishesIsMissingAndNothingHangs) {
  const auto start = std::chrono::steady_clock::now();
  const auto results =
      testing::run_ranks({MESHRT_STRAGGLER_WORKER, "vanish"}, 4, std::chrono::seconds(60),
                         {{"MESHRT_STRAGGLER_REPORT", (dir_ / "report.json").string()},
                          {"MESHRT_EXIT_TIMEOUT_MS", "1500"}});
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
  for (int r = 0; r < 4; ++r) ASSERT_EQ(results[r].exit_code, 0) << describe(results);
  const json report = read_report();
  EXPECT_EQ(report["missing_ranks"], json::array({3})) << report.dump(2);
  EXPECT_EQ(report["ranks_reported"], 3);
  EXPECT_EQ(report["matched_ops"], 0);
  EXPECT_EQ(report["incomplete_ops"], 3);
  EXPECT_EQ(report["incomplete"][0]["missing_ranks"], json::array({3}));
}

TEST_F(StragglerJobTest, InProcessWorldWritesItsReportAtExit) {
  const std::string cmd = "MESHRT_STRAGGLER_REPORT='" + (dir_ / "report.json").string() +
                          "' timeout 60 " + MESHRT_STRAGGLER_WORKER + " inproc";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  const json report = read_report();
  EXPECT_EQ(report["ranks_reported"], 4);
  EXPECT_EQ(report["matched_ops"], 3);
  EXPECT_EQ(report["incomplete_ops"], 0);
  EXPECT_EQ(report["top_late"][0]["rank"], 1) << report.dump(2);
  EXPECT_EQ(report["top_late"][0]["times_last"], 3);
}

}  // namespace
}  // namespace meshrt
