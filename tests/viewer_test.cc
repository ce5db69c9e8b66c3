// The scope-tree viewer: the self-contained page written by write_scope_tree_html is loaded in
// headless Chromium, and the DOM after its script ran must show every scope of the tree with its
// collective counts and per-dim ops, bytes and times (equal to the scope tree's JSON), keep a
// hostile scope name as text, and report a missing or broken document.
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>

#include "mesh/device_mesh.h"
#include "mesh/meshrt.h"
#include "trace/scope.h"
#include "trace/scope_tree.h"
#include "trace/scope_tree_html.h"

namespace meshrt {
namespace {

using nlohmann::json;
using trace::Phase;
using trace::Scope;
using trace::ScopeTree;

namespace fs = std::filesystem;

const char* const kHostile = "</script><b id=\"x\">";

// Runs `command` and returns its stdout.
std::string run(const std::string& command) {
  std::string out;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return out;
  std::array<char, 4096> buf;
  for (size_t n; (n = std::fread(buf.data(), 1, buf.size(), pipe)) > 0;) out.append(buf.data(), n);
  ::pclose(pipe);
  return out;
}

class ViewerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    chromium_ = run("command -v chromium || command -v chromium-browser");
    while (!chromium_.empty() && chromium_.back() == '\n') chromium_.pop_back();
    ASSERT_FALSE(chromium_.empty())
        << "chromium is not installed: it is a declared test dependency (.ci/install-deps.sh)";
    dir_ = fs::temp_directory_path() / ("meshrt-viewer-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // The page's DOM after its scripts ran, as headless Chromium serialises it.
  std::string dump_dom(const std::string& html_path) const {
    return run("timeout 60 '" + chromium_ +
               "' --headless --no-sandbox --disable-gpu --disable-dev-shm-usage "
               "--user-data-dir='" +
               (dir_ / "profile").string() + "' --virtual-time-budget=5000 --dump-dom 'file://" +
               html_path + "' 2>/dev/null");
  }

  std::string chromium_;
  fs::path dir_;
};

// The DOM of one scope's <details>, up to its first child scope.
std::string section(const std::string& dom, const std::string& scope, const std::string& phase) {
  const std::string head = "data-scope=\"" + scope + "\" data-phase=\"" + phase + "\"";
  const size_t at = dom.find(head);
  if (at == std::string::npos) return "";
  const size_t next = dom.find("<details class=\"scope\"", at);
  return dom.substr(at, next == std::string::npos ? std::string::npos : next - at);
}

std::string dim_row(const std::string& dim, uint64_t ops, uint64_t bytes) {
  return "<tr data-dim=\"" + dim + "\"><th>" + dim + "</th><td class=\"ops\">" +
         std::to_string(ops) + "</td><td class=\"bytes\" data-bytes=\"" + std::to_string(bytes) +
         "\">";
}

std::string op_row(const std::string& op, uint64_t count, uint64_t self) {
  return "<tr data-op=\"" + op + "\"><th>" + op + "</th><td class=\"count\">" +
         std::to_string(count) + "</td><td class=\"self\">" + std::to_string(self) + "</td></tr>";
}

TEST_F(ViewerTest, ShowsEveryScopeWithCountsAndPerDimBytes) {
  ScopeTree::instance().reset();
  ScopeTree::instance().enable();
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
    {
      Scope hostile(kHostile, Phase::kOther);
      mesh->comm("tp").all_reduce(view(act))->wait();
    }
    Scope opt("optimizer", Phase::kOptimizer);
    world.barrier()->wait();
  });
  ScopeTree::instance().disable();
  const std::string path = (dir_ / "tree.html").string();
  ASSERT_TRUE(trace::write_scope_tree_html(path, 0, 2));
  const json doc = json::parse(ScopeTree::instance().json(0, 2));
  ScopeTree::instance().reset();

  const std::string dom = dump_dom(path);
  ASSERT_NE(dom.find("Rank 0, noise level 2 (embedded data)"), std::string::npos) << dom;

  // Known values: fc1 ran 2 all_reduce of 1 KiB on tp; the backward MLP one of 4 KiB on dp.
  const std::string fc1 = section(dom, "MLP/fc1", "forward");
  ASSERT_FALSE(fc1.empty()) << dom;
  EXPECT_NE(fc1.find("<span class=\"name\">fc1</span>"), std::string::npos) << fc1;
  EXPECT_NE(fc1.find("2 collectives"), std::string::npos) << fc1;
  EXPECT_NE(fc1.find(op_row("all_reduce", 2, 2)), std::string::npos) << fc1;
  EXPECT_NE(fc1.find(dim_row("tp", 2, 2048) + "2.0 KiB</td>"), std::string::npos) << fc1;
  EXPECT_NE(fc1.find("2 ops in this scope"), std::string::npos) << fc1;
  EXPECT_NE(fc1.find("<td class=\"bytes\">1024</td>"), std::string::npos) << fc1;
  const std::string forward = section(dom, "MLP", "forward");
  EXPECT_NE(forward.find(op_row("all_reduce", 2, 0)), std::string::npos) << forward;
  EXPECT_NE(forward.find(dim_row("tp", 2, 2048)), std::string::npos) << forward;
  const std::string backward = section(dom, "MLP", "backward");
  EXPECT_NE(backward.find(dim_row("dp", 1, 4096) + "4.0 KiB</td>"), std::string::npos) << backward;
  EXPECT_NE(section(dom, "optimizer", "optimizer").find(op_row("barrier", 1, 1)),
            std::string::npos);
  const std::string root = section(dom, "", "other");
  EXPECT_NE(root.find("<span class=\"name\">Global</span>"), std::string::npos) << root;
  EXPECT_NE(root.find(dim_row("tp", 3, 3072)), std::string::npos) << root;

  // Every scope of the JSON, with its cumulative counts and per-dim sums.
  int checked = 0;
  std::function<std::map<std::string, std::array<uint64_t, 2>>(const json&)> check =
      [&](const json& node) {
        std::map<std::string, std::array<uint64_t, 2>> dims;
        for (const auto& [dim, d] : node["dims"].items()) {
          dims[dim] = {d["count"].get<uint64_t>(), d["bytes"].get<uint64_t>()};
        }
        for (const auto& child : node["children"]) {
          for (const auto& [dim, d] : check(child)) {
            dims[dim][0] += d[0];
            dims[dim][1] += d[1];
          }
        }
        const std::string scope = node["scope"];
        if (scope.find('<') != std::string::npos) return dims;  // Checked as text below.
        const std::string s = section(dom, scope, node["phase"]);
        EXPECT_FALSE(s.empty()) << "scope '" << scope << "' not shown";
        for (const auto& [op, count] : node["collectives"].items()) {
          EXPECT_NE(s.find(op_row(op, count.get<uint64_t>(), node["self"].value(op, uint64_t{0}))),
                    std::string::npos)
              << scope << " " << op;
        }
        for (const auto& [dim, d] : dims) {
          EXPECT_NE(s.find(dim_row(dim, d[0], d[1])), std::string::npos) << scope << " " << dim;
        }
        ++checked;
        return dims;
      };
  check(doc["root"]);
  EXPECT_EQ(checked, 5);  // Global, MLP x2, fc1, optimizer.

  // A scope name is shown as text: the embedding did not end early and no element was injected.
  EXPECT_NE(dom.find("&lt;/script&gt;&lt;b id=\"x\"&gt;"), std::string::npos) << dom;
  EXPECT_EQ(dom.find("<b id=\"x\">"), std::string::npos) << dom;
}

TEST_F(ViewerTest, ReportsAMissingOrBrokenDocument) {
  const std::string empty = (dir_ / "empty.html").string();
  std::ofstream(empty) << trace::scope_tree_html("");
  const std::string dom = dump_dom(empty);
  EXPECT_NE(dom.find("No scope tree loaded yet."), std::string::npos) << dom;
  EXPECT_NE(dom.find("<input type=\"file\" id=\"file\""), std::string::npos) << dom;
  EXPECT_EQ(dom.find("class=\"scope\""), std::string::npos) << dom;

  const std::string broken = (dir_ / "broken.html").string();
  std::ofstream(broken) << trace::scope_tree_html(R"({"rank": 0, "root": )");
  const std::string bad = dump_dom(broken);
  EXPECT_NE(bad.find("Could not show embedded data"), std::string::npos) << bad;
  EXPECT_NE(bad.find("class=\"error\""), std::string::npos) << bad;
}

}  // namespace
}  // namespace meshrt
