// DeviceMesh over Gloo with real processes: mesh_demo on a 2x2 mesh with a flattened dim, started
// with torchrun's environment; every rank's JSON line is checked.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "tests/process_harness.h"

#ifndef MESHRT_MESH_DEMO
#error "MESHRT_MESH_DEMO must name the mesh_demo binary"
#endif

namespace meshrt::testing {
namespace {

TEST(MeshOverGloo, TwoByTwoMeshWithFlattenedDimOnFourProcesses) {
  const auto results =
      run_ranks({MESHRT_MESH_DEMO, "--mesh", "2x2", "--names", "dp,tp", "--flatten",
                 "dp,tp:world2d", "--print-groups"},
                4, std::chrono::seconds(60), {{"MESHRT_INIT_TIMEOUT_MS", "30000"}});
  const std::map<int, std::pair<std::vector<int>, std::map<std::string, std::vector<int>>>> want = {
      {0, {{0, 0}, {{"dp", {0, 2}}, {"tp", {0, 1}}, {"world2d", {0, 1, 2, 3}}}}},
      {1, {{0, 1}, {{"dp", {1, 3}}, {"tp", {0, 1}}, {"world2d", {0, 1, 2, 3}}}}},
      {2, {{1, 0}, {{"dp", {0, 2}}, {"tp", {2, 3}}, {"world2d", {0, 1, 2, 3}}}}},
      {3, {{1, 1}, {{"dp", {1, 3}}, {"tp", {2, 3}}, {"world2d", {0, 1, 2, 3}}}}},
  };
  for (int r = 0; r < 4; ++r) {
    ASSERT_EQ(results[r].exit_code, 0) << "rank " << r << ":\n" << results[r].output;
    std::istringstream lines(results[r].output);
    std::string line;
    bool found = false;
    while (std::getline(lines, line)) {
      if (line.empty() || line[0] != '{') continue;
      const auto j = nlohmann::json::parse(line);
      ASSERT_EQ(j["rank"].get<int>(), r);
      EXPECT_EQ(j["coordinate"].get<std::vector<int>>(), want.at(r).first);
      EXPECT_EQ((j["groups"].get<std::map<std::string, std::vector<int>>>()), want.at(r).second);
      found = true;
    }
    EXPECT_TRUE(found) << results[r].output;
  }
}

TEST(MeshOverGloo, MismatchedMeshFailsEveryProcessWithExitStatus2) {
  // Rank 3 asks for a different shape: every rank names who passed what, none hangs.
  const auto start = std::chrono::steady_clock::now();
  const auto results = run_ranks(
      {"/bin/sh", "-c",
       std::string("if [ \"$RANK\" = 3 ]; then exec ") + MESHRT_MESH_DEMO +
           " --mesh 4 --names dp; else exec " + MESHRT_MESH_DEMO + " --mesh 2x2 --names dp,tp; fi"},
      4, std::chrono::seconds(60), {{"MESHRT_INIT_TIMEOUT_MS", "30000"}});
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(results[r].exit_code, 2) << results[r].output;
    EXPECT_NE(results[r].output.find("rank [3] passed device=cpu shape=[4] names=[dp]"),
              std::string::npos)
        << results[r].output;
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
}

}  // namespace
}  // namespace meshrt::testing
