// The job report end to end: examples/tp_mlp_train on a 2x2 (dp x tp) mesh under
// `meshrun --standalone --nproc-per-node 4 --report DIR`, then DIR/report.html in headless
// Chromium. The rendered page must hold both charts with one series per (mesh dim, op) and one
// bar per rank, and every number it shows must be the one the ranks' own files give:
// comms_<rank>.json (busbw per point, per-rank dots, time per rank and dim), stragglers.json
// (the heat map) and scope_tree_<rank>.json (written through MESHRT_SCOPE_TREE).
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "trace/analyze/human_units.h"

#if !defined(MESHRT_MESHRUN) || !defined(MESHRT_TP_MLP_TRAIN)
#error "MESHRT_MESHRUN and MESHRT_TP_MLP_TRAIN must name the binaries"
#endif

namespace meshrt {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using trace::human_bytes;
using trace::human_gbps;
using trace::human_ms;

constexpr int kRanks = 4;
constexpr int kSteps = 20;

// Runs `command` through the shell; its stdout and stderr together, and its exit status.
std::pair<int, std::string> run(const std::string& command) {
  std::string out;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return {-1, out};
  std::array<char, 4096> buf;
  for (size_t n; (n = std::fread(buf.data(), 1, buf.size(), pipe)) > 0;) out.append(buf.data(), n);
  const int status = ::pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

json read_json(const fs::path& path) {
  std::ifstream in(path);
  return json::parse(in);
}

size_t count(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

// The DOM from the element that starts with `head` up to `end` (exclusive); empty if absent.
std::string element(const std::string& dom, const std::string& head, const std::string& end) {
  const size_t at = dom.find(head);
  if (at == std::string::npos) return "";
  const size_t stop = dom.find(end, at + head.size());
  return dom.substr(at, stop == std::string::npos ? std::string::npos : stop - at);
}

// The <g> of one busbw series in the chart.
std::string series_of(const std::string& dom, const std::string& dim, const std::string& op) {
  const std::string chart = element(dom, R"(<svg class="chart line-chart")", "</svg>");
  const std::string head = fmt::format(R"(<g class="series" data-dim="{}" data-op="{}">)", dim, op);
  const size_t at = chart.find(head);
  if (at == std::string::npos) return "";
  const size_t next = chart.find(R"(<g class="series")", at + head.size());
  return chart.substr(at, next == std::string::npos ? std::string::npos : next - at);
}

std::string dim_of(const json& row) { return row["mesh_dim"].get<std::string>(); }

class JobReportE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    chromium_ = run("command -v chromium || command -v chromium-browser").second;
    while (!chromium_.empty() && chromium_.back() == '\n') chromium_.pop_back();
    ASSERT_FALSE(chromium_.empty())
        << "chromium is not installed: it is a declared test dependency (.ci/install-deps.sh)";
    char tmpl[] = "/tmp/meshrt-report-e2e-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }

  // The page's DOM as headless Chromium serialises it after loading it.
  std::string dump_dom(const fs::path& page) const {
    return run(fmt::format(
                   "timeout -k 5 60 '{}' --headless --no-sandbox --disable-gpu "
                   "--disable-background-networking --disable-component-update --disable-sync "
                   "--no-first-run --disable-dev-shm-usage --user-data-dir='{}' --dump-dom "
                   "'file://{}' 2>/dev/null",
                   chromium_, (dir_ / "profile").string(), page.string()))
        .second;
  }

  std::string chromium_;
  fs::path dir_;
};

TEST_F(JobReportE2eTest, TrainingRunsReportShowsTheRanksNumbers) {
  const fs::path report = dir_ / "report";
  // meshrun bounds nothing by itself here: `timeout` does, and kills the ranks with it.
  const auto [status, out] =
      run(fmt::format("timeout -k 5 120 {} --standalone --nproc-per-node {} --report '{}' {} "
                      "--mesh 2x2 --steps {}",
                      MESHRT_MESHRUN, kRanks, report.string(), MESHRT_TP_MLP_TRAIN, kSteps));
  ASSERT_EQ(status, 0) << out;
  ASSERT_NE(out.find("meshrun: report: " + (report / "report.html").string()), std::string::npos)
      << out;

  std::map<int, json> comms, trees;
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_TRUE(fs::exists(report / fmt::format("comms_{}.json", r))) << out;
    ASSERT_TRUE(fs::exists(report / fmt::format("scope_tree_{}.json", r))) << out;
    comms[r] = read_json(report / fmt::format("comms_{}.json", r));
    trees[r] = read_json(report / fmt::format("scope_tree_{}.json", r));
  }
  const json stragglers = read_json(report / "stragglers.json");

  const std::string dom = dump_dom(report / "report.html");
  ASSERT_NE(dom.find("meshrt job report"), std::string::npos) << dom.substr(0, 2000);
  EXPECT_EQ(count(dom, R"(<svg class="chart line-chart")"), 1u);
  EXPECT_EQ(count(dom, R"(<svg class="chart bar-chart")"), 1u);
  EXPECT_EQ(dom.find(R"(<section id="failure">)"), std::string::npos);
  EXPECT_NE(dom.find("No failure recorded"), std::string::npos);

  // The JSON block reads back from the rendered page.
  const std::string open = R"(<script type="application/json" id="report-data">)";
  const size_t data_at = dom.find(open) + open.size();
  ASSERT_GT(data_at, open.size());
  const json data = json::parse(dom.substr(data_at, dom.find("</script>", data_at) - data_at));
  EXPECT_EQ(data["ranks"], json({0, 1, 2, 3}));

  // busbw: one series per (dim, op) that moved data, one marker per size bucket, one dot per
  // rank's row; the table's busbw is the ranks' values weighted by their time.
  struct Point {
    uint64_t count = 0;
    double ms = 0;
    double busbw_ms = 0;
    double bytes = 0;  // Sum over the ops, for their mean.
    uint64_t min_bytes = UINT64_MAX;
    uint64_t max_bytes = 0;
  };
  std::map<std::pair<std::string, std::string>, std::map<uint64_t, Point>> points;
  std::map<int, std::map<std::string, double>> time;
  for (const auto& [rank, doc] : comms) {
    for (const json& row : doc["rows"]) {
      const double ms = row["total_ms"];
      time[rank][dim_of(row)] += ms;
      if (row["bucket_bytes"].get<uint64_t>() == 0) continue;
      Point& p = points[{dim_of(row), row["op"]}][row["bucket_bytes"]];
      p.count += row["count"].get<uint64_t>();
      p.ms += ms;
      p.busbw_ms += row["busbw_gbps"].get<double>() * ms;
      p.bytes += row["mean_bytes"].get<double>() * row["count"].get<double>();
      p.min_bytes = std::min(p.min_bytes, row["min_bytes"].get<uint64_t>());
      p.max_bytes = std::max(p.max_bytes, row["max_bytes"].get<uint64_t>());
    }
  }
  // The demo: all_reduce on dp and on tp, the mesh's agreement all_gather on world.
  ASSERT_EQ(points.size(), 3u);
  EXPECT_EQ(count(dom, R"(<g class="series")"), points.size());
  for (const auto& [key, by_size] : points) {
    const auto& [dim, op] = key;
    const std::string series = series_of(dom, dim, op);
    ASSERT_FALSE(series.empty()) << dim << " " << op;
    EXPECT_EQ(count(series, R"(class="point")"), by_size.size()) << series;
    for (const auto& [bytes, p] : by_size) {
      const std::string row = element(
          dom, fmt::format(R"(<tr data-dim="{}" data-op="{}" data-bytes="{}">)", dim, op, bytes),
          "</tr>");
      ASSERT_FALSE(row.empty()) << dim << " " << op << " " << bytes;
      // Real sizes, not the bucket's floor: one size when every op had it, else the range.
      const std::string size =
          p.min_bytes == p.max_bytes
              ? human_bytes(p.bytes / p.count)
              : fmt::format("{} &ndash; {}", human_bytes(p.min_bytes), human_bytes(p.max_bytes));
      EXPECT_NE(
          row.find(fmt::format(R"(<td class="num">{}</td><td class="num">{}</td>)", size, p.count)),
          std::string::npos)
          << row;
      EXPECT_NE(row.find(R"(<td class="num busbw">)" + human_gbps(p.busbw_ms / p.ms) + "</td>"),
                std::string::npos)
          << row;
    }
  }
  for (const auto& [rank, doc] : comms) {
    for (const json& row : doc["rows"]) {
      if (row["bucket_bytes"].get<uint64_t>() == 0) continue;
      const std::string series = series_of(dom, dim_of(row), row["op"]);
      const uint64_t n = row["count"];
      EXPECT_NE(series.find(fmt::format("<title>rank {}: {} ({} ops, {} each)</title>", rank,
                                        human_gbps(row["busbw_gbps"]), n,
                                        human_ms(row["total_ms"].get<double>() / n))),
                std::string::npos)
          << "rank " << rank << " " << row.dump() << "\n"
          << series;
    }
  }

  // Time in collectives: one bar per rank, its total and its per-dim segments.
  EXPECT_EQ(count(dom, R"(<g class="bar")"), static_cast<size_t>(kRanks));
  for (const auto& [rank, by_dim] : time) {
    const std::string bar =
        element(dom, fmt::format(R"(<g class="bar" data-rank="{}">)", rank), "</g>");
    ASSERT_FALSE(bar.empty()) << rank;
    double total = 0;
    for (const auto& [dim, ms] : by_dim) {
      total += ms;
      EXPECT_NE(bar.find(fmt::format("<title>rank {}, {}: {} (", rank, dim, human_ms(ms))),
                std::string::npos)
          << bar;
    }
    EXPECT_NE(bar.find(">" + human_ms(total) + "</text>"), std::string::npos) << bar;
  }

  // The straggler heat map: the time the others waited for each late rank, per dim.
  size_t cells = 0;
  for (const json& d : stragglers["dims"]) {
    for (const json& late : d["top_late"]) {
      const std::string cell =
          element(dom,
                  fmt::format(R"(data-rank="{}" data-dim="{}")", late["rank"].get<int>(),
                              d["dim"].get<std::string>()),
                  "</td>");
      EXPECT_TRUE(cell.ends_with(">" + human_ms(late["lateness_ms"].get<double>()))) << cell;
      ++cells;
    }
  }
  EXPECT_GT(cells, 0u);

  // Scope trees (MESHRT_SCOPE_TREE): every rank's, each scope with its own bytes and times.
  for (const auto& [rank, tree] : trees) {
    ASSERT_EQ(tree["rank"], rank);
    const std::string details = element(
        dom, fmt::format(R"(<details class="rank-tree" data-rank="{}")", rank), "</details>");
    ASSERT_FALSE(details.empty()) << rank;
    std::set<std::string> seen;
    for (const json& node : tree["root"]["children"]) {
      const std::string scope = node["scope"], phase = node["phase"];
      seen.insert(scope + "/" + phase);
      const std::string row = element(
          details, fmt::format(R"(<tr data-scope="{}" data-phase="{}">)", scope, phase), "</tr>");
      ASSERT_FALSE(row.empty()) << scope << " " << phase;
      ASSERT_TRUE(node["children"].empty());  // Leaves: their own sums are shown.
      for (const auto& [dim, d] : node["dims"].items()) {
        EXPECT_NE(row.find(fmt::format(
                      R"(<td class="num" data-dim="{}">{}</td><td class="num">{}</td>)"
                      R"(<td class="num">{}</td>)",
                      dim, d["count"].get<uint64_t>(), human_bytes(d["bytes"].get<double>()),
                      human_ms(d["time_ms"].get<double>()))),
                  std::string::npos)
            << row;
      }
    }
    // The demo's scopes: one tp all_reduce per step in each of fc2's forward and fc1's
    // backward, two dp all_reduce per step in the optimizer.
    EXPECT_EQ(seen, (std::set<std::string>{"MLP.fc1/backward", "MLP.fc2/forward",
                                           "optimizer/optimizer"}));
    for (const json& node : tree["root"]["children"]) {
      const bool opt = node["scope"] == "optimizer";
      EXPECT_EQ(node["dims"][opt ? "dp" : "tp"]["count"], opt ? 2 * kSteps : kSteps);
    }
  }
}

}  // namespace
}  // namespace meshrt
