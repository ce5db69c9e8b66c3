// The scope tree: per-scope collective counts (cumulative up the tree), bytes and time per mesh
// dim, noise levels, the text table with and without colour, and the file written atomically.
#include "trace/scope_tree.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "mesh/device_mesh.h"
#include "mesh/meshrt.h"
#include "trace/scope.h"

namespace meshrt {
namespace {

using trace::Phase;
using trace::Scope;
using trace::ScopeTree;

class ScopeTreeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ScopeTree::instance().reset();
    ScopeTree::instance().enable();
    // One small training step per rank on a 2x2 mesh.
    run_inproc(4, [](Communicator& world) {
      auto mesh = init_device_mesh({2, 2}, {"dp", "tp"});
      std::vector<float> act(256), grad(1024);
      {
        Scope model("MLP", Phase::kForward);
        Scope fc1("fc1");
        mesh->comm("tp").all_reduce(view(act))->wait();
        mesh->comm("tp").all_reduce(view(act))->wait();
      }
      {
        Scope model("MLP", Phase::kBackward);
        mesh->comm("dp").all_reduce(view(grad))->wait();
      }
      Scope opt("optimizer", Phase::kOptimizer);
      world.barrier()->wait();
    });
    ScopeTree::instance().disable();
  }
  void TearDown() override { ScopeTree::instance().reset(); }

  static const nlohmann::json* child(const nlohmann::json& node, const std::string& name,
                                     const std::string& phase) {
    for (const auto& c : node["children"]) {
      if (c["name"] == name && c["phase"] == phase) return &c;
    }
    return nullptr;
  }
};

TEST_F(ScopeTreeTest, CountsAreCumulativeAndDimsCarryBytesAndTime) {
  for (int rank = 0; rank < 4; ++rank) {
    const auto doc = nlohmann::json::parse(ScopeTree::instance().json(rank, 0));
    const auto& root = doc["root"];
    EXPECT_EQ(root["collectives"]["all_reduce"], 3) << root.dump(2);
    EXPECT_EQ(root["collectives"]["barrier"], 1);
    const auto* fwd = child(root, "MLP", "forward");
    ASSERT_NE(fwd, nullptr) << root.dump(2);
    EXPECT_EQ((*fwd)["collectives"]["all_reduce"], 2);
    EXPECT_TRUE((*fwd)["self"].empty());  // the ops ran in fc1
    const auto* fc1 = child(*fwd, "fc1", "forward");
    ASSERT_NE(fc1, nullptr);
    EXPECT_EQ((*fc1)["scope"], "MLP/fc1");
    EXPECT_EQ((*fc1)["self"]["all_reduce"], 2);
    EXPECT_EQ((*fc1)["dims"]["tp"]["count"], 2);
    EXPECT_EQ((*fc1)["dims"]["tp"]["bytes"], 2 * 256 * 4);
    EXPECT_GT((*fc1)["dims"]["tp"]["time_ms"].get<double>(), 0.0);
    const auto* bwd = child(root, "MLP", "backward");
    ASSERT_NE(bwd, nullptr);
    EXPECT_EQ((*bwd)["dims"]["dp"]["bytes"], 1024 * 4);
    const auto* opt = child(root, "optimizer", "optimizer");
    ASSERT_NE(opt, nullptr);
    EXPECT_EQ((*opt)["self"]["barrier"], 1);
    EXPECT_FALSE(root.contains("ops"));  // noise 0: counts only
  }
}

TEST_F(ScopeTreeTest, NoiseLevelsAddPerOpDetail) {
  auto fc1_ops = [](int noise) {
    const auto doc = nlohmann::json::parse(ScopeTree::instance().json(1, noise));
    for (const auto& m : doc["root"]["children"]) {
      if (m["phase"] == "forward") return m["children"][0]["ops"];
    }
    return nlohmann::json();
  };
  const auto l1 = fc1_ops(1);
  ASSERT_EQ(l1.size(), 2u);
  EXPECT_EQ(l1[0]["mesh_dim"], "tp");
  EXPECT_EQ(l1[0]["dtype"], "f32");
  EXPECT_EQ(l1[0]["input_count"], 256);
  EXPECT_FALSE(l1[0].contains("bytes"));
  const auto l2 = fc1_ops(2);
  EXPECT_EQ(l2[0]["bytes"], 1024);
  EXPECT_TRUE(l2[0].contains("time_ms"));
  EXPECT_FALSE(l2[0].contains("caller"));
  const auto l3 = fc1_ops(3);
  EXPECT_NE(l3[0]["caller"].get<std::string>().find("scope_tree_test.cc"), std::string::npos);
  EXPECT_EQ(l3[0]["group_size"], 2);
}

TEST_F(ScopeTreeTest, TableHasColoursOnlyWhenAskedAndFileIsWritten) {
  const std::string plain = ScopeTree::instance().table(0, 2, false);
  EXPECT_NE(plain.find("Global [other]"), std::string::npos) << plain;
  EXPECT_NE(plain.find("  MLP [forward]"), std::string::npos) << plain;
  EXPECT_NE(plain.find("    fc1 [forward]"), std::string::npos) << plain;
  EXPECT_NE(plain.find("*all_reduce: 2"), std::string::npos) << plain;
  EXPECT_NE(plain.find("dim tp: 2 ops, 2048 bytes"), std::string::npos) << plain;
  EXPECT_EQ(plain.find('\x1b'), std::string::npos);
  EXPECT_NE(ScopeTree::instance().table(0, 0, true).find("\x1b[33m"), std::string::npos);
  const auto path =
      (std::filesystem::temp_directory_path() / ("scope-tree-" + std::to_string(::getpid())))
          .string();
  ASSERT_TRUE(ScopeTree::instance().write(path, 0, 1, true));
  std::ifstream in(path);
  const auto doc = nlohmann::json::parse(in);
  EXPECT_EQ(doc["rank"], 0);
  EXPECT_EQ(doc["noise_level"], 1);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace meshrt
