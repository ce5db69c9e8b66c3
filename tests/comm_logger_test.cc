// The comm logger: rows by mesh dim, op and size bucket with counts, mean sizes and nccl-tests
// bandwidths; meshrt's own setup ops apart from the program's; the table's sizes and adaptive
// bandwidth units; the op filter, windows and reset; and MESHRT_COMMS_SUMMARY files written at
// exit by real runs of mesh_demo (in-process ranks and Gloo processes).
#include "trace/comm_logger.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "mesh/device_mesh.h"
#include "mesh/meshrt.h"
#include "tests/process_harness.h"
#include "trace/bandwidth.h"

#ifndef MESHRT_MESH_DEMO
#error "MESHRT_MESH_DEMO must name the mesh_demo binary"
#endif

namespace meshrt {
namespace {

using trace::CommLogger;
using trace::SummaryRow;

// Enables the logger for one test and leaves it disabled and empty after.
class CommLoggerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CommLogger::instance().configure(
        {.enabled = true, .verbose = false, .ops = {}, .summary_path = ""});
    CommLogger::instance().reset();
  }
  void TearDown() override {
    CommLogger::instance().configure({});
    CommLogger::instance().reset();
  }
  static const SummaryRow* find(const std::vector<SummaryRow>& rows, const std::string& dim,
                                const std::string& op, uint64_t bucket_bytes, bool setup = false) {
    for (const auto& r : rows) {
      if (r.mesh_dim == dim && r.op == op && r.bucket_bytes == bucket_bytes && r.setup == setup) {
        return &r;
      }
    }
    return nullptr;
  }
};

TEST_F(CommLoggerTest, RowsByMeshDimOpAndSizeBucket) {
  run_inproc(4, [](Communicator& world) {
    auto mesh = init_device_mesh({2, 2}, {"dp", "tp"});
    std::vector<float> small(16), big(1000);  // 64 B and 4000 B (bucket 2048)
    for (int i = 0; i < 3; ++i) mesh->comm("tp").all_reduce(view(small))->wait();
    mesh->comm("dp").all_reduce(view(big))->wait();
    std::vector<float> out(2000);
    mesh->comm("tp").all_gather(view(big), view(out))->wait();
    world.barrier()->wait();
  });
  for (int rank = 0; rank < 4; ++rank) {
    const auto rows = CommLogger::instance().summary(rank);
    const SummaryRow* tp_small = find(rows, "tp", "all_reduce", 64);
    ASSERT_NE(tp_small, nullptr) << CommLogger::instance().summary_table(rank);
    EXPECT_EQ(tp_small->count, 3u);
    EXPECT_EQ(tp_small->group_size, 2);
    const SummaryRow* dp_big = find(rows, "dp", "all_reduce", 2048);
    ASSERT_NE(dp_big, nullptr);
    EXPECT_EQ(dp_big->count, 1u);
    EXPECT_EQ(dp_big->mean_bytes, 4000);
    // busbw from the group of 2, not the world of 4: factor 2(n-1)/n = 1.
    EXPECT_NEAR(dp_big->busbw_gbps,
                trace::busbw_gbps(OpKind::kAllReduce, 2, 4000, dp_big->avg_ms * 1e3), 1e-9);
    EXPECT_NEAR(dp_big->algbw_gbps, 4000 / (dp_big->avg_ms * 1e6), 1e-9);
    EXPECT_LE(dp_big->p50_ms, dp_big->p99_ms);
    const SummaryRow* gather = find(rows, "tp", "all_gather", 4096);  // S = 8000 B, the output
    ASSERT_NE(gather, nullptr) << CommLogger::instance().summary_table(rank);
    EXPECT_NEAR(gather->busbw_gbps, gather->algbw_gbps * 0.5, 1e-9);
    EXPECT_NE(find(rows, "world", "barrier", 0), nullptr);
    EXPECT_NE(CommLogger::instance().summary_table(rank).find("all_gather"), std::string::npos);
  }
}

// The table shows what the ops moved, not the bucket's floor, and bandwidths that stay readable
// when they are small.
TEST_F(CommLoggerTest, TableShowsMeanSizesAndReadableBandwidths) {
  run_inproc(2, [](Communicator& world) {
    std::vector<float> three_kib(768), four_kb(1000);  // 3072 B and 4000 B: both in bucket 2 KiB
    world.all_reduce(view(three_kib))->wait();
    world.broadcast(view(four_kb), 0)->wait();
  });
  const auto rows = CommLogger::instance().summary(0);
  const SummaryRow* ar = find(rows, "world", "all_reduce", 2048);
  ASSERT_NE(ar, nullptr);
  EXPECT_EQ(ar->mean_bytes, 3072);
  EXPECT_EQ(ar->min_bytes, 3072u);
  EXPECT_EQ(ar->max_bytes, 3072u);
  const std::string table = CommLogger::instance().summary_table(0);
  SCOPED_TRACE(table);
  EXPECT_NE(table.find("3 KiB"), std::string::npos);
  EXPECT_NE(table.find("3.91 KiB"), std::string::npos);
  EXPECT_EQ(table.find("2 KiB"), std::string::npos);
  // In-process ops of a few KiB run well below 1 GB/s: their units adapt instead of reading
  // "0.000 GB/s".
  for (const auto& r : rows) {
    ASSERT_GT(r.algbw_gbps, 0);
    const std::string algbw = trace::format_bandwidth(r.algbw_gbps);
    EXPECT_NE(algbw[0], '0') << algbw;
    EXPECT_NE(table.find(algbw), std::string::npos) << algbw;
  }
}

TEST(CommLoggerFormat, BytesAndBandwidthsToThreeDigits) {
  EXPECT_EQ(trace::format_bytes(0), "0 B");
  EXPECT_EQ(trace::format_bytes(64), "64 B");
  EXPECT_EQ(trace::format_bytes(36.5), "36.5 B");
  EXPECT_EQ(trace::format_bytes(3072), "3 KiB");
  EXPECT_EQ(trace::format_bytes(4000), "3.91 KiB");
  EXPECT_EQ(trace::format_bytes(1.5 * (1 << 20)), "1.5 MiB");
  EXPECT_EQ(trace::format_bytes(800.0 * (1 << 30)), "800 GiB");
  EXPECT_EQ(trace::format_bandwidth(0), "-");
  EXPECT_EQ(trace::format_bandwidth(1e-9), "1 B/s");
  EXPECT_EQ(trace::format_bandwidth(0.0000123456), "12.3 KB/s");
  EXPECT_EQ(trace::format_bandwidth(0.00123), "1.23 MB/s");
  EXPECT_EQ(trace::format_bandwidth(12.5), "12.5 GB/s");
  EXPECT_EQ(trace::format_bandwidth(1500), "1.5 TB/s");
}

// The all_gathers that split() and init_device_mesh() run are meshrt's, not the program's: their
// rows are marked and listed in a section of their own, apart from the program's all_gathers of
// the same size on the same communicator.
TEST_F(CommLoggerTest, SetupOpsAreMarkedAndListedApart) {
  run_inproc(4, [](Communicator& world) {
    auto mesh = init_device_mesh({2, 2}, {"dp", "tp"});
    std::vector<int64_t> mine(2), all(8);  // 64 B, as split()'s exchange of (color, key)
    world.all_gather(view(mine), view(all))->wait();
  });
  for (int rank = 0; rank < 4; ++rank) {
    const auto rows = CommLogger::instance().summary(rank);
    const std::string table = CommLogger::instance().summary_table(rank);
    SCOPED_TRACE(table);
    // The mesh's agreement check (one int64 from each rank) and one split per dim.
    const SummaryRow* check = find(rows, "world", "all_gather", 32, /*setup=*/true);
    ASSERT_NE(check, nullptr);
    EXPECT_EQ(check->count, 1u);
    const SummaryRow* splits = find(rows, "world", "all_gather", 64, /*setup=*/true);
    ASSERT_NE(splits, nullptr);
    EXPECT_EQ(splits->count, 2u);
    const SummaryRow* mine = find(rows, "world", "all_gather", 64);
    ASSERT_NE(mine, nullptr);
    EXPECT_EQ(mine->count, 1u);
    // Program rows first, then meshrt's setup rows under their own heading.
    EXPECT_FALSE(rows.front().setup);
    EXPECT_TRUE(rows.back().setup);
    const size_t heading = table.find("setup: ops meshrt ran itself");
    ASSERT_NE(heading, std::string::npos);
    const size_t first_all_gather = table.find("all_gather");
    EXPECT_LT(first_all_gather, heading);
    EXPECT_NE(table.find("all_gather", heading), std::string::npos);
  }
}

TEST_F(CommLoggerTest, OpFilterWindowsAndReset) {
  CommLogger::instance().configure(
      {.enabled = true, .verbose = false, .ops = {"all_gather"}, .summary_path = ""});
  auto world = make_inproc_world(1);
  std::vector<float> x(4), y(4);
  world[0]->all_reduce(view(x))->wait();
  world[0]->all_gather(view(x), view(y))->wait();
  auto rows = CommLogger::instance().summary(0);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].op, "all_gather");
  CommLogger::instance().stop();
  world[0]->all_gather(view(x), view(y))->wait();
  EXPECT_EQ(CommLogger::instance().summary(0)[0].count, 1u);
  CommLogger::instance().start();
  world[0]->all_gather(view(x), view(y))->wait();
  EXPECT_EQ(CommLogger::instance().summary(0)[0].count, 2u);
  CommLogger::instance().reset();
  EXPECT_TRUE(CommLogger::instance().summary(0).empty());
}

TEST(SizeBucket, PowersOfTwoNamedAsRanges) {
  const std::pair<uint64_t, uint64_t> table[] = {
      {0, 0}, {1, 1}, {3, 2}, {4096, 4096}, {4097, 4096}, {(64u << 20) + 5, 64u << 20}};
  for (const auto& [bytes, bucket] : table) EXPECT_EQ(trace::size_bucket(bytes), bucket);
  EXPECT_EQ(trace::size_bucket_label(4097), "4-8KiB");
}

void check_summary_file(const std::string& path, int rank) {
  std::ifstream in(path);
  ASSERT_TRUE(in.good()) << path;
  const auto doc = nlohmann::json::parse(in);
  EXPECT_EQ(doc["rank"].get<int>(), rank);
  bool saw_tp = false, saw_setup = false;
  for (const auto& row : doc["rows"]) {
    for (const char* key : {"mesh_dim", "comm", "op", "setup", "group_size", "size_bucket",
                            "bucket_bytes", "mean_bytes", "min_bytes", "max_bytes", "count",
                            "total_ms", "avg_ms", "p50_ms", "p99_ms", "algbw_gbps", "busbw_gbps"}) {
      EXPECT_TRUE(row.contains(key)) << key << " missing in " << path;
    }
    if (row["mesh_dim"] == "tp" && row["op"] == "all_reduce") {
      saw_tp = true;
      EXPECT_EQ(row["group_size"].get<int>(), 2);
      EXPECT_EQ(row["count"].get<int>(), 1);
      EXPECT_EQ(row["mean_bytes"].get<double>(), 17 * 8);  // mesh_demo's 17 int64
      EXPECT_EQ(row["min_bytes"].get<int>(), 17 * 8);
      EXPECT_EQ(row["max_bytes"].get<int>(), 17 * 8);
      EXPECT_EQ(row["bucket_bytes"].get<int>(), 128);
      EXPECT_EQ(row["size_bucket"], "128-256B");
      EXPECT_EQ(row["setup"], false);
    }
    if (row["setup"] == true) {
      saw_setup = true;
      EXPECT_EQ(row["mesh_dim"], "world");  // The default group, outside any mesh.
      EXPECT_EQ(row["op"], "all_gather");
    }
  }
  EXPECT_TRUE(saw_tp) << doc.dump(2);
  EXPECT_TRUE(saw_setup) << doc.dump(2);
}

TEST(CommsSummaryEnv, InProcessRanksEachWriteTheirFile) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("meshrt-summary-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string pattern = (dir / "summary_{rank}.json").string();
  const std::string cmd = "MESHRT_COMMS_SUMMARY='" + pattern + "' timeout 60 " + MESHRT_MESH_DEMO +
                          " --mesh 2x2 --names dp,tp --backend inproc --world 4";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  for (int r = 0; r < 4; ++r)
    check_summary_file((dir / ("summary_" + std::to_string(r) + ".json")).string(), r);
  std::filesystem::remove_all(dir);
}

TEST(CommsSummaryEnv, GlooProcessesEachWriteTheirFile) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("meshrt-gsummary-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string pattern = (dir / "summary_{rank}.json").string();
  const auto results =
      testing::run_ranks({MESHRT_MESH_DEMO, "--mesh", "2x2", "--names", "dp,tp"}, 4,
                         std::chrono::seconds(60), {{"MESHRT_COMMS_SUMMARY", pattern}});
  for (int r = 0; r < 4; ++r) {
    ASSERT_EQ(results[r].exit_code, 0) << results[r].output;
    check_summary_file((dir / ("summary_" + std::to_string(r) + ".json")).string(), r);
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace meshrt
