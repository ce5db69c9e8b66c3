#include "trace/analyze/job_report_html.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <vector>

#include "trace/analyze/human_units.h"
#include "trace/analyze/job_report_html_template.h"
#include "trace/analyze/svg_chart.h"
#include "trace/html_text.h"

namespace meshrt::trace {
namespace {

using Json = nlohmann::ordered_json;

// Colour-blind-friendly enough (Tableau 10), one per dim in the data's dim order.
constexpr const char* kDimColors[] = {"#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2",
                                      "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};
constexpr Marker kOpMarkers[] = {Marker::kCircle, Marker::kSquare, Marker::kTriangle,
                                 Marker::kDiamond};
constexpr std::string_view kBodyMarker = "<!-- meshrt:report-body -->";
constexpr std::string_view kDataOpen = R"(<script type="application/json" id="report-data">)";
constexpr int kChartWidth = 580;

std::string esc(const std::string& s) { return html_escape(s); }
std::string esc(const Json& j) { return html_escape(j.get<std::string>()); }

// Colours and markers shared by every section.
class Style {
 public:
  explicit Style(const Json& data) {
    for (const Json& d : data.at("dims")) dims_.push_back(d.at("name").get<std::string>());
    if (!data.at("comms").is_null()) {
      for (const Json& s : data.at("comms").at("series")) {
        const std::string op = s.at("op").get<std::string>();
        if (std::find(ops_.begin(), ops_.end(), op) == ops_.end()) ops_.push_back(op);
      }
    }
  }
  std::string color(const std::string& dim) const {
    const auto at = std::find(dims_.begin(), dims_.end(), dim) - dims_.begin();
    return kDimColors[static_cast<size_t>(at) % std::size(kDimColors)];
  }
  Marker marker(const std::string& op) const {
    const auto at = std::find(ops_.begin(), ops_.end(), op) - ops_.begin();
    return kOpMarkers[static_cast<size_t>(at) % std::size(kOpMarkers)];
  }
  // A dim's name with its colour swatch.
  std::string chip(const std::string& dim) const {
    return fmt::format(R"(<span class="chip" style="background:{}"></span>{})", color(dim),
                       esc(dim));
  }
  const std::vector<std::string>& dims() const { return dims_; }

 private:
  std::vector<std::string> dims_;
  std::vector<std::string> ops_;
};

// `"a", "b"` -> "a, b".
std::string join(const std::vector<std::string>& parts, std::string_view sep = ", ") {
  std::string out;
  for (const std::string& p : parts) out += (out.empty() ? "" : std::string(sep)) + p;
  return out;
}

// "0, 1, 2" from a JSON array of ranks.
std::string rank_list(const Json& ranks) {
  std::vector<std::string> parts;
  for (const Json& r : ranks) parts.push_back(r.dump());
  return join(parts);
}

// "2", or "2/4" when a dim ran on groups of several sizes.
std::string group_sizes_text(const Json& sizes) {
  std::vector<std::string> parts;
  for (const Json& s : sizes) parts.push_back(std::to_string(s.get<int>()));
  return join(parts, "/");
}

// The notes of `section` on what is missing.
std::string missing_notes(const Json& data, std::string_view section) {
  std::string out;
  for (const Json& m : data.at("missing")) {
    if (m.at("section").get<std::string>() == section) {
      out += R"(<p class="missing">)" + esc(m.at("text")) + "</p>";
    }
  }
  return out;
}

// A card of the page: its title, an introduction (HTML, ours) and its body.
std::string section(std::string_view id, std::string_view title, std::string_view intro,
                    const std::string& body) {
  return fmt::format(R"(<section id="{}"><h2>{}</h2>{}{}</section>)", id, title,
                     intro.empty() ? "" : fmt::format(R"(<p class="intro">{}</p>)", intro), body);
}

// ---------------------------------------------------------------------------------------------
// Header

// One headline number of the header, under its label and over a line of detail.
std::string card(std::string_view cls, std::string_view label, const std::string& value,
                 const std::string& detail) {
  return fmt::format(
      R"(<div class="card {}"><div class="label">{}</div><div class="value">{}</div><div class="detail">{}</div></div>)",
      cls, label, value, detail);
}

// Whether the job failed, and the analyzer's first root cause when it did.
std::string status_card(const Json& failure) {
  if (failure.is_null()) {
    return card("ok", "Status", "No failure recorded", "no flight-recorder dumps");
  }
  if (failure.contains("error")) {
    return card("bad", "Status", "Dumps unreadable", esc(failure.at("error")));
  }
  for (const Json& f : failure.at("findings")) {
    if (!f.at("root").get<bool>()) continue;
    const Json& culprits = f.at("culprit_ranks");
    return card("bad", "Status",
                culprits.empty() ? "Job failed"
                                 : fmt::format("Failed: rank{} {}", culprits.size() > 1 ? "s" : "",
                                               rank_list(culprits)),
                esc(f.at("detail")));
  }
  return card("warn", "Status", "Dumps, no problem found",
              "no collective in the flight recorder is missing or mismatched");
}

// The mean time in collectives per rank, and the ranks with the least and the most.
std::string time_card(const Json& time) {
  double sum = 0;
  const Json* lo = nullptr;
  const Json* hi = nullptr;
  for (const Json& t : time) {
    const double ms = t.at("total_ms").get<double>();
    sum += ms;
    if (!lo || ms < lo->at("total_ms").get<double>()) lo = &t;
    if (!hi || ms > hi->at("total_ms").get<double>()) hi = &t;
  }
  if (!lo) return "";
  return card("", "Time in collectives", human_ms(sum / time.size()) + " per rank",
              fmt::format("mean; least {} (rank {}), most {} (rank {})",
                          human_ms(lo->at("total_ms").get<double>()), lo->at("rank").get<int>(),
                          human_ms(hi->at("total_ms").get<double>()), hi->at("rank").get<int>()));
}

// The highest busbw of any (dim, op, size).
std::string busbw_card(const Json& series) {
  const Json* best = nullptr;
  const Json* best_series = nullptr;
  for (const Json& s : series) {
    for (const Json& p : s.at("points")) {
      if (!best || p.at("busbw_gbps").get<double>() > best->at("busbw_gbps").get<double>()) {
        best = &p;
        best_series = &s;
      }
    }
  }
  if (!best) return "";
  return card("", "Best bus bandwidth", human_gbps(best->at("busbw_gbps").get<double>()),
              fmt::format("{} on {} at {}", esc(best_series->at("op")), esc(best_series->at("dim")),
                          human_bytes(best->at("bytes").get<double>())));
}

// A point's message size: exact when every op had it, else the range the ops spanned.
std::string size_text(const Json& point) {
  const uint64_t lo = point.value("min_bytes", uint64_t{0});
  const uint64_t hi = point.value("max_bytes", uint64_t{0});
  if (hi == 0 || lo == hi) return human_bytes(point.at("bytes").get<double>());
  return fmt::format("{} &ndash; {}", human_bytes(static_cast<double>(lo)),
                     human_bytes(static_cast<double>(hi)));
}

// The rank the others waited for longest; called a straggler when it came last to at least half
// of its collectives and the others waited at least twice as long for it as for anyone else.
std::string straggler_card(const Json& ranks) {
  const Json* worst = nullptr;
  double second = 0;
  for (const Json& r : ranks) {
    const Json& l = r.at("total_lateness_ms");
    if (l.is_null() || l.get<double>() <= 0) continue;
    const double ms = l.get<double>();
    if (!worst || ms > worst->at("total_lateness_ms").get<double>()) {
      if (worst) second = worst->at("total_lateness_ms").get<double>();
      worst = &r;
    } else {
      second = std::max(second, ms);
    }
  }
  if (!worst) return "";
  const double late = worst->at("total_lateness_ms").get<double>();
  const uint64_t last = worst->value("times_last_total", Json(0)).get<uint64_t>();
  const uint64_t ops = worst->value("ops", Json(0)).get<uint64_t>();
  const bool straggler = ops > 0 && 2 * last >= ops && late >= 2 * second;
  return card(straggler ? "warn" : "", straggler ? "Straggler" : "Most waited for",
              fmt::format("rank {}", worst->at("rank").get<int>()),
              ops > 0 ? fmt::format("last to {} of its {} collectives; the others waited {} for it "
                                    "in all",
                                    last, ops, human_ms(late))
                      : fmt::format("the others waited {} for it in all (last {} times)",
                                    human_ms(late), last));
}

// The title, what the job was (directory, ranks, dims) and the headline numbers.
std::string header(const Json& data, const Style& style) {
  std::vector<std::string> mesh, other;
  for (const Json& d : data.at("dims")) {
    const std::string sizes = group_sizes_text(d.at("group_sizes"));
    const std::string text = style.chip(d.at("name")) +
                             (sizes.empty() ? "" : fmt::format(" <small>({})</small>", sizes));
    (d.at("in_mesh").get<bool>() ? mesh : other).push_back(text);
  }
  std::string where = fmt::format("<code>{}</code> &middot; {} rank{}", esc(data.at("dir")),
                                  data.at("ranks").size(), data.at("ranks").size() == 1 ? "" : "s");
  if (!mesh.empty()) where += " &middot; mesh dims " + join(mesh);
  if (!other.empty()) where += " &middot; other groups " + join(other);

  std::string cards = status_card(data.at("failure"));
  if (const Json& comms = data.at("comms"); !comms.is_null()) {
    cards += time_card(comms.at("time")) + busbw_card(comms.at("series"));
  }
  if (const Json& st = data.at("stragglers"); !st.is_null())
    cards += straggler_card(st.at("ranks"));
  return fmt::format(
      R"(<header><h1>meshrt job report</h1><p class="where">{}</p><div class="cards">{}</div></header>)",
      where, cards);
}

// ---------------------------------------------------------------------------------------------
// Failure: the analyzer's verdict and the entries around the culprit's op

// One finding of the analyzer: kind, group, its sentence and the culprits.
std::string finding_html(const Json& f) {
  const std::string where =
      (f.at("mesh_dim").is_null()
           ? fmt::format("group {}", esc(f.at("group")))
           : fmt::format("mesh dim {}, group {}", esc(f.at("mesh_dim")), esc(f.at("group")))) +
      " [" + rank_list(f.at("group_ranks")) + "]";
  std::string who;
  if (!f.at("culprit_ranks").empty()) {
    who =
        fmt::format(R"(<p class="culprit">culprit: rank{} {}</p>)",
                    f.at("culprit_ranks").size() > 1 ? "s" : "", rank_list(f.at("culprit_ranks")));
  }
  return fmt::format(
      R"(<div class="finding{}"><div><span class="kind">{}</span> <span class="group">{}</span></div><p>{}</p>{}</div>)",
      f.at("root").get<bool>() ? " root" : " consequence", esc(f.at("kind")), where,
      esc(f.at("detail")), who);
}

// A time relative to the culprit's op: "+1.2 ms", "&minus;3 ms".
std::string signed_ms(double ms) {
  if (ms == 0) return "0 ms";
  return (ms > 0 ? "+" : "&minus;") + human_ms(std::fabs(ms));
}

// One rank's flight-recorder entries, the culprit's op highlighted.
std::string entries_table(const Json& block) {
  // The scope column only when the program named scopes: the table stays narrow otherwise.
  bool scoped = false;
  for (const Json& e : block.at("rows"))
    scoped = scoped || !e.at("scope").get<std::string>().empty();
  std::string rows;
  for (const Json& e : block.at("rows")) {
    const std::string seq = (e.at("p2p").get<bool>() ? "p2p #" : "#") + e.at("seq").dump();
    const std::string group =
        esc(e.at("group")) +
        (e.at("dim").is_null() ? "" : fmt::format(" <small>({})</small>", esc(e.at("dim"))));
    rows += fmt::format(
        R"(<tr{}><td>{}</td><td class="num">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class="state {}">{}</td>{}<td><code>{}</code></td></tr>)",
        e.at("focus").get<bool>() ? R"( class="focus")" : "", e.at("record_id").dump(),
        signed_ms(e.at("time_ms").get<double>()), group, seq, esc(e.at("op")), esc(e.at("sizes")),
        esc(e.at("dtypes")), esc(e.at("state")), esc(e.at("state")),
        scoped ? "<td>" + esc(e.at("scope")) + "</td>" : "", esc(e.at("caller")));
  }
  return fmt::format(
      R"(<figure class="entries {}" data-rank="{}"><figcaption>{}</figcaption><table><thead><tr><th>record</th><th class="num">time</th><th>group</th><th>seq</th><th>op</th><th>sizes</th><th>dtype</th><th>state</th>{}<th>caller</th></tr></thead><tbody>{}</tbody></table></figure>)",
      esc(block.at("role")), block.at("rank").get<int>(), esc(block.at("caption")),
      scoped ? "<th>scope</th>" : "", rows);
}

// Only after a failure (dumps found): the verdict and the entries around the culprit's op.
std::string failure_section(const Json& data) {
  const Json& f = data.at("failure");
  if (f.is_null()) return "";
  std::string body;
  const std::string source =
      fmt::format("<code>{}</code>{}", esc(f.at("dumps_dir")),
                  f.at("prefix").get<std::string>().empty()
                      ? ""
                      : fmt::format(" (prefix <code>{}</code>)", esc(f.at("prefix"))));
  if (f.contains("error")) {
    body += fmt::format(R"(<p class="missing">The analyzer could not use the dumps in {}: {}</p>)",
                        source, esc(f.at("error")));
    return section("failure", "Failure", "", body);
  }
  const Json& findings = f.at("findings");
  body += fmt::format(R"(<p class="intro">meshtrace analyze read the flight-recorder dumps of {} )"
                      R"(rank{} in {} and checked {} ops: {}.</p>)",
                      f.at("ranks").size(), f.at("ranks").size() == 1 ? "" : "s", source,
                      f.at("collectives_checked").dump(),
                      findings.empty() ? "no problem found"
                                       : fmt::format("{} finding{}", findings.size(),
                                                     findings.size() == 1 ? "" : "s"));
  for (const Json& finding : findings) body += finding_html(finding);
  if (!f.at("entries").empty()) {
    body += R"(<h3>Flight-recorder entries around the culprit's op</h3><p class="intro">Times are )"
            R"(each entry's creation, relative to the culprit's op (wall clocks of the ranks' )"
            R"(hosts).</p>)";
    body += R"(<div class="entries-grid">)";
    for (const Json& block : f.at("entries")) body += entries_table(block);
    body += "</div>";
  }
  body += R"(<details class="verdict"><summary>meshtrace analyze's output</summary><pre>)" +
          esc(f.at("verdict")) + "</pre></details>";
  return section("failure", "Failure", "", body);
}

// ---------------------------------------------------------------------------------------------
// Communication: busbw against message size, time per rank and dim

// A figure of the communication section: a chart under its title and note.
std::string figure(std::string_view cls, std::string_view title, std::string_view note,
                   const std::string& content) {
  return fmt::format(
      R"(<figure class="{}"><figcaption><h3>{}</h3><p class="note">{}</p></figcaption>{}</figure>)",
      cls, title, note, content);
}

// The busbw chart (with its legend) and the table of every point.
std::pair<std::string, std::string> busbw_chart_and_table(const Json& comms, const Style& style) {
  std::vector<LineSeries> series;
  std::string legend, rows;
  for (const Json& s : comms.at("series")) {
    const std::string dim = s.at("dim").get<std::string>(), op = s.at("op").get<std::string>();
    LineSeries line;
    line.label = fmt::format("{} on {}", op, dim);
    line.color = style.color(dim);
    line.marker = style.marker(op);
    line.attributes = fmt::format(R"( data-dim="{}" data-op="{}")", esc(dim), esc(op));
    bool drawn = false;
    for (const Json& p : s.at("points")) {
      const double bytes = p.at("bytes").get<double>(), busbw = p.at("busbw_gbps").get<double>();
      const size_t n = p.at("ranks").size();
      line.points.push_back(
          {bytes, busbw,
           fmt::format("{} on {}, {}: busbw {} ({} rank{}, {} ops, {} each)", op, dim,
                       human_bytes(bytes), human_gbps(busbw), n, n == 1 ? "" : "s",
                       p.at("count").dump(), human_ms(p.at("avg_ms").get<double>()))});
      double lo = INFINITY, hi = 0;
      for (const Json& r : p.at("ranks")) {
        const double b = r.at("busbw_gbps").get<double>();
        lo = std::min(lo, b);
        hi = std::max(hi, b);
        line.samples.push_back(
            {bytes, b,
             fmt::format("rank {}: {} ({} ops, {} each)", r.at("rank").get<int>(), human_gbps(b),
                         r.at("count").dump(), human_ms(r.at("avg_ms").get<double>()))});
      }
      drawn = drawn || (bytes > 0 && busbw > 0);
      rows += fmt::format(
          R"(<tr data-dim="{0}" data-op="{1}" data-bytes="{2}"><td>{3}</td><td>{1}</td><td class="num">{4}</td><td class="num">{5}</td><td class="num">{6}</td><td class="num">{7}</td><td class="num">{8}</td><td class="num busbw">{9}</td><td class="num">{10}</td><td class="num">{11}</td></tr>)",
          esc(dim), esc(op), p.at("bucket_bytes").dump(), style.chip(dim),
          group_sizes_text(s.at("group_sizes")), size_text(p), p.at("count").dump(),
          human_ms(p.at("avg_ms").get<double>()), human_gbps(p.at("algbw_gbps").get<double>()),
          human_gbps(busbw), n > 1 ? human_gbps(lo) : "", n > 1 ? human_gbps(hi) : "");
    }
    if (drawn) {
      legend += fmt::format(R"(<span class="legend-item">{}{} on {}</span>)",
                            svg_legend_marker(line.marker, line.color, true), esc(op), esc(dim));
      series.push_back(std::move(line));
    }
  }
  std::string chart;
  if (series.empty()) {
    chart = R"(<p class="missing">No collective moved data (only barriers, or no op at all).</p>)";
  } else {
    const LogAxis x{"message size (log scale)", 2, [](double v) { return human_bytes(v); }};
    const LogAxis y{"busbw (log scale)", 10, [](double v) { return human_gbps(v); }};
    chart = svg_line_chart(series, x, y, kChartWidth, 320) +
            fmt::format(R"(<div class="legend">{}</div>)", legend);
  }
  const std::string table = fmt::format(
      R"(<table class="numbers busbw-table"><thead><tr><th>dim</th><th>op</th><th class="num">group</th><th class="num">size</th><th class="num">ops</th><th class="num">avg time</th><th class="num">algbw</th><th class="num">busbw</th><th class="num">slowest rank</th><th class="num">fastest rank</th></tr></thead><tbody>{}</tbody></table>)",
      rows);
  return {chart, table};
}

// Time in collectives per rank, stacked by dim.
std::string time_chart(const Json& comms, const Style& style) {
  std::vector<Bar> bars;
  std::set<std::string> used;
  for (const Json& t : comms.at("time")) {
    const int rank = t.at("rank").get<int>();
    const double total = t.at("total_ms").get<double>();
    Bar bar{
        fmt::format("rank {}", rank), human_ms(total), fmt::format(R"( data-rank="{}")", rank), {}};
    for (const auto& [dim, ms] : t.at("dims").items()) {
      const double v = ms.get<double>();
      used.insert(dim);
      bar.segments.push_back({v, style.color(dim),
                              fmt::format("rank {}, {}: {} ({:.0f}% of its time in collectives)",
                                          rank, dim, human_ms(v), total > 0 ? 100 * v / total : 0),
                              fmt::format(R"( data-dim="{}")", esc(dim))});
    }
    bars.push_back(std::move(bar));
  }
  if (bars.empty()) return R"(<p class="missing">The summaries hold no collective.</p>)";
  std::string legend;
  for (const std::string& dim : style.dims()) {
    if (used.count(dim)) legend += R"(<span class="legend-item">)" + style.chip(dim) + "</span>";
  }
  return svg_stacked_bars(
             bars, "time in collectives, summed over ops", [](double v) { return human_ms(v); },
             kChartWidth) +
         fmt::format(R"(<div class="legend">{}</div>)", legend);
}

// Both communication charts side by side, and every point's numbers under them.
std::string comm_section(const Json& data, const Style& style) {
  const Json& comms = data.at("comms");
  const std::string missing = missing_notes(data, "comms");
  if (comms.is_null()) return section("communication", "Communication", "", missing);
  const auto [chart, table] = busbw_chart_and_table(comms, style);
  const std::string charts = fmt::format(
      R"(<div class="pair">{}{}</div>)",
      figure("busbw", "Bus bandwidth by message size",
             "nccl-tests' busbw, comparable across group sizes. Lines: all ranks together (bytes "
             "moved over time spent); faint dots: each rank.",
             chart),
      figure("comm-time", "Time in collectives per rank",
             "From the call to completion, so waiting for late peers counts.",
             time_chart(comms, style)));
  return section("communication", "Communication",
                 "Every collective by mesh dim, op and message size (real sizes, grouped in "
                 "power-of-two buckets), from "
                 "the comm logger's summaries (<code>comms_&lt;rank&gt;.json</code>).",
                 missing + charts + table);
}

// ---------------------------------------------------------------------------------------------
// Stragglers

// A heat-map cell: `value` against `max`, red as the others' wait grows.
std::string heat_cell(const Json& value, double max, const std::string& attributes,
                      const std::string& tooltip) {
  if (value.is_null()) {
    return fmt::format(
        R"(<td class="heat none"{} title="not among the top late ranks">&ndash;</td>)", attributes);
  }
  const double v = value.get<double>();
  const double alpha = max > 0 ? 0.08 + 0.8 * v / max : 0;
  return fmt::format(
      R"html(<td class="heat{}"{} style="background:rgba(225,87,89,{:.2f})" title="{}">{}</td>)html",
      alpha > 0.55 ? " hot" : "", attributes, alpha, esc(tooltip), human_ms(v));
}

// The rank x dim heat map and the skew of each dim.
std::string stragglers_section(const Json& data, const Style& style) {
  const Json& st = data.at("stragglers");
  if (st.is_null())
    return section("stragglers", "Stragglers", "", missing_notes(data, "stragglers"));
  std::vector<std::string> dims;
  for (const Json& d : st.at("dims")) dims.push_back(d.at("dim").get<std::string>());
  double max_cell = 0, max_total = 0;
  for (const Json& r : st.at("ranks")) {
    for (const auto& [dim, v] : r.at("lateness_ms").items()) {
      if (!v.is_null()) max_cell = std::max(max_cell, v.get<double>());
    }
    if (!r.at("total_lateness_ms").is_null()) {
      max_total = std::max(max_total, r.at("total_lateness_ms").get<double>());
    }
  }
  std::string head, rows;
  for (const std::string& dim : dims) head += "<th>" + style.chip(dim) + "</th>";
  for (const Json& r : st.at("ranks")) {
    const int rank = r.at("rank").get<int>();
    std::string cells;
    for (const std::string& dim : dims) {
      const Json& times = r.at("times_last").at(dim);
      cells += heat_cell(
          r.at("lateness_ms").at(dim), max_cell,
          fmt::format(R"( data-rank="{}" data-dim="{}")", rank, esc(dim)),
          fmt::format("rank {} on {}: the others waited {} for it (last {} times)", rank, dim,
                      r.at("lateness_ms").at(dim).is_null()
                          ? "?"
                          : human_ms(r.at("lateness_ms").at(dim).get<double>()),
                      times.dump()));
    }
    const Json& total = r.at("total_lateness_ms");
    cells += heat_cell(total, max_total, fmt::format(R"( data-rank="{}" data-dim="*")", rank),
                       fmt::format("rank {}: the others waited for it in all", rank));
    cells += fmt::format(R"(<td class="num">{}</td><td class="num">{}</td>)",
                         r.at("times_last_total").is_null() ? "" : r.at("times_last_total").dump(),
                         r.at("wait_ms").is_null() ? "" : human_ms(r.at("wait_ms").get<double>()));
    rows += fmt::format(R"(<tr><th>rank {}</th>{}</tr>)", rank, cells);
  }
  const std::string heat = fmt::format(
      R"(<table class="heatmap"><thead><tr><th></th>{}<th>all dims</th><th>times last</th><th>it waited for others</th></tr></thead><tbody>{}</tbody></table><p class="note">Cells: how long the others waited for the rank (the start skew of the ops it came last to), per dim; &ndash;: not among the dim's top late ranks (<code>MESHRT_STRAGGLER_TOPK</code>).</p>)",
      head, rows);

  std::string dim_rows;
  for (const Json& d : st.at("dims")) {
    const Json& skew = d.at("skew_ms");
    const Json& worst = d.at("max_skew");
    const Json& often = d.at("most_often_last");
    dim_rows += fmt::format(
        R"(<tr data-dim="{}"><td>{}</td><td class="num">{}</td><td class="num">{}</td><td class="num">{}</td><td class="num">{}</td><td>{}</td><td>{}</td></tr>)",
        esc(d.at("dim")), style.chip(d.at("dim")), d.at("ops").dump(),
        human_ms(skew.at("p50").get<double>()), human_ms(skew.at("mean").get<double>()),
        human_ms(skew.at("max").get<double>()),
        worst.is_null() ? ""
                        : fmt::format("{} #{}, rank {} last", esc(worst.value("op", "")),
                                      worst.value("seq", 0), worst.value("last_rank", -1)),
        often.is_null()
            ? ""
            : fmt::format("rank {} ({} times)", often.value("rank", -1), often.value("times", 0)));
  }
  const std::string table = fmt::format(
      R"(<table class="numbers"><thead><tr><th>dim</th><th>ops</th><th>skew p50</th><th>mean</th><th>max</th><th>worst op</th><th>most often last</th></tr></thead><tbody>{}</tbody></table>)",
      dim_rows);
  std::string counts = fmt::format("{} ops matched across ranks", st.at("matched_ops").dump());
  if (st.at("incomplete_ops").get<uint64_t>() > 0) {
    counts += fmt::format(", {} that some member never recorded", st.at("incomplete_ops").dump());
  }
  if (st.at("mismatched_ops").get<uint64_t>() > 0) {
    counts += fmt::format(", {} recorded differently", st.at("mismatched_ops").dump());
  }
  if (!st.at("missing_ranks").empty()) {
    counts += "; no samples from ranks " + esc(st.at("missing_ranks").dump());
  }
  return section("stragglers", "Stragglers",
                 "Who arrives late at collectives, from the straggler report "
                 "(<code>stragglers.json</code>): " +
                     counts + "; " + esc(st.at("clock")) + ".",
                 fmt::format(R"(<div class="pair"><div>{}</div><div>{}</div></div>)", heat, table));
}

// ---------------------------------------------------------------------------------------------
// Scope trees

// A phase (forward, backward, ...) as a coloured label.
std::string phase_pill(const std::string& phase) {
  return fmt::format(R"(<span class="phase {0}">{0}</span>)", esc(phase));
}

// One rank's tree as an indented table, one column group (ops, bytes, time) per dim.
std::string scope_tree_table(const Json& tree, const Style& style) {
  std::vector<std::string> dims;  // In the report's order, those this tree has.
  const Json& root_dims = tree.at("rows").at(0).at("dims");
  for (const std::string& dim : style.dims()) {
    if (root_dims.contains(dim)) dims.push_back(dim);
  }
  std::string head1 =
      R"(<th rowspan="2">scope</th><th rowspan="2">phase</th><th rowspan="2">collectives</th>)";
  std::string head2;
  for (const std::string& dim : dims) {
    head1 += fmt::format(R"(<th colspan="3" class="dim-head">{}</th>)", style.chip(dim));
    head2 += R"(<th>ops</th><th>bytes</th><th>time</th>)";
  }
  std::string rows;
  for (const Json& row : tree.at("rows")) {
    const int depth = row.at("depth").get<int>();
    std::vector<std::string> ops;
    for (const auto& [op, n] : row.at("collectives").items()) {
      ops.push_back(fmt::format("{}&nbsp;&times;{}", esc(op), n.dump()));
    }
    std::string cells;
    for (const std::string& dim : dims) {
      const Json& d = row.at("dims");
      if (!d.contains(dim)) {
        cells += R"(<td class="num"></td><td class="num"></td><td class="num"></td>)";
        continue;
      }
      const Json& v = d.at(dim);
      cells += fmt::format(
          R"(<td class="num" data-dim="{}">{}</td><td class="num">{}</td><td class="num">{}</td>)",
          esc(dim), v.at("count").dump(), human_bytes(v.at("bytes").get<double>()),
          human_ms(v.at("time_ms").get<double>()));
    }
    const std::string name = depth == 0 ? "Global" : esc(row.at("name"));
    rows += fmt::format(
        R"(<tr data-scope="{}" data-phase="{}"><td class="scope" style="padding-left:{}px">{}</td><td>{}</td><td>{}</td>{}</tr>)",
        esc(row.at("scope")), esc(row.at("phase")), 8 + 18 * depth,
        depth == 0 ? "<strong>" + name + "</strong>" : name, phase_pill(row.at("phase")), join(ops),
        cells);
  }
  return fmt::format(
      R"(<table class="numbers scope-tree"><thead><tr>{}</tr><tr>{}</tr></thead><tbody>{}</tbody></table>)",
      head1, head2, rows);
}

// Every rank's tree, the first one open.
std::string scope_trees_section(const Json& data, const Style& style) {
  const Json& st = data.at("scope_trees");
  const std::string intro =
      "Collectives per scope (<code>trace::Scope</code>) and phase, with ops, bytes and time per "
      "mesh dim; a scope's numbers include its sub-scopes "
      "(<code>scope_tree_&lt;rank&gt;.json</code>).";
  if (st.is_null())
    return section("scope-trees", "Scope trees", "", missing_notes(data, "scope_trees"));
  std::string body = missing_notes(data, "scope_trees");
  bool first = true;
  for (const Json& tree : st.at("trees")) {
    const Json& root = tree.at("rows").at(0);
    uint64_t ops = 0;
    double ms = 0;
    for (const auto& [dim, d] : root.at("dims").items()) {
      ops += d.at("count").get<uint64_t>();
      ms += d.at("time_ms").get<double>();
    }
    body += fmt::format(
        R"(<details class="rank-tree" data-rank="{0}"{1}><summary>Rank {0} <small>{2} collectives, {3}</small></summary>{4}</details>)",
        tree.at("rank").get<int>(), first ? " open" : "", ops, human_ms(ms),
        scope_tree_table(tree, style));
    first = false;
  }
  return section("scope-trees", "Scope trees", intro, body);
}

// Where the page came from, and where the timelines are.
std::string footer(const Json& data) {
  return fmt::format(
      R"(<footer>Written by <code>meshtrace report {0}</code>. Timelines of every op: )"
      R"(<code>{0}/trace_&lt;rank&gt;.json</code> (<code>MESHRT_TRACE_CHROME</code>) in Perfetto, )"
      R"(or merged with <code>meshtrace merge-chrome</code>. The numbers of this page are in its )"
      R"(<code>#report-data</code> block.</footer>)",
      esc(data.at("dir")));
}

}  // namespace

std::string job_report_html(const Json& data) {
  const Style style(data);
  const std::string body = header(data, style) + "<main>" + failure_section(data) +
                           comm_section(data, style) + stragglers_section(data, style) +
                           scope_trees_section(data, style) + "</main>" + footer(data);
  const std::string_view page = kJobReportHtmlTemplate;
  const size_t body_at = page.find(kBodyMarker);
  const size_t data_at = page.find(kDataOpen) + kDataOpen.size();
  std::string out(page.substr(0, body_at));
  out += body;
  out += page.substr(body_at + kBodyMarker.size(), data_at - body_at - kBodyMarker.size());
  out += json_for_script(data.dump());
  out += page.substr(data_at);
  return out;
}

}  // namespace meshrt::trace
