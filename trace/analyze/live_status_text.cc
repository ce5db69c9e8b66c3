#include "trace/analyze/live_status_text.h"

#include <fmt/format.h>

#include <algorithm>
#include <ctime>
#include <map>
#include <nlohmann/json.hpp>
#include <vector>

#include "trace/analyze/dump_reader.h"
#include "trace/op_kind.h"

namespace meshrt::trace {
namespace {

using nlohmann::json;

std::string secs(int64_t ms) { return fmt::format("{:.1f} s", static_cast<double>(ms) / 1000); }

std::string clock_time(int64_t wall_ns) {
  const std::time_t t = static_cast<std::time_t>(wall_ns / 1'000'000'000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  return fmt::format("{:02}:{:02}:{:02}Z", tm.tm_hour, tm.tm_min, tm.tm_sec);
}

// One communicator's cell, as the page writes it; "!" marks an op past the stall threshold.
std::string cell(const json& c, int64_t threshold_ms) {
  const json& f = c.at("in_flight");
  if (f.is_object()) {
    const int64_t ms = f.at("running_ms").get<int64_t>();
    const int peer = f.value("peer", -1);
    const std::string op = f.at("op").get<std::string>();
    // A p2p op by its number on its channel, as both ends and the verdict count it.
    const std::string what = f.value("p2p", false) && peer >= 0
                                 ? p2p_op_text(op, f.value("channel_seq", int64_t{0}), peer)
                                 : fmt::format("{} #{}", op, f.at("seq").get<int64_t>());
    return fmt::format("{} running {}{}", what, secs(ms),
                       threshold_ms > 0 && ms >= threshold_ms ? " !" : "");
  }
  const int64_t completed = c.at("completed").get<int64_t>();
  const int64_t enqueued = c.at("enqueued").get<int64_t>();
  return fmt::format("idle, completed #{}{}", completed,
                     enqueued > completed ? fmt::format(", queued #{}", enqueued) : "");
}

std::string state(const json& r) {
  const std::string s = r.value("state", "unknown");
  if (s == "ended") return "process " + r.value("ended", std::string("ended"));
  if (s == "unknown") return "no record yet";
  std::string words = s;
  std::replace(words.begin(), words.end(), '_', ' ');
  std::string out = fmt::format("{} for {}", words, secs(r.value("state_ms", int64_t{0})));
  // Records come each second: one much older is a rank that stopped answering, not its state.
  if (const int64_t age = r.value("age_ms", int64_t{0}); age > 3000) {
    out += fmt::format(" (record {} old: silent)", secs(age));
  }
  return out;
}

}  // namespace

std::string format_live_status(const std::string& text) {
  const json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) throw InputError("the status server sent no JSON object");
  try {
    const int64_t threshold_ms = j.at("stall_threshold_s").get<int64_t>() * 1000;
    std::string out = fmt::format(
        "job {}{}; stall threshold {}; at {}\n", j.at("run_id").get<std::string>(),
        j.at("running").get<bool>()
            ? fmt::format(", attempt {}, {} ranks", j.at("attempt").get<int>(),
                          j.at("world_size").get<int>())
            : std::string(", no attempt running"),
        threshold_ms > 0 ? secs(threshold_ms) : "off", clock_time(j.at("wall_ns").get<int64_t>()));
    const json& v = j.at("verdict");
    out += fmt::format("verdict: {}\n\n",
                       v.is_object() ? v.at("line").get<std::string>() : std::string("no stall"));

    // Columns: every communicator any rank has, by name, as on the page.
    std::map<std::string, std::string> dims;
    for (const json& r : j.at("ranks")) {
      for (const json& c : r.at("comms")) {
        dims[c.at("name").get<std::string>()] = c.value("mesh_dim", "");
      }
    }
    std::vector<std::vector<std::string>> rows;
    std::vector<std::string> head = {"rank", "state"};
    for (const auto& [name, dim] : dims) {
      head.push_back(dim.empty() ? name : fmt::format("{} (dim {})", name, dim));
    }
    rows.push_back(std::move(head));
    for (const json& r : j.at("ranks")) {
      std::vector<std::string> row = {std::to_string(r.at("rank").get<int>()), state(r)};
      for (const auto& [name, dim] : dims) {
        const auto& comms = r.at("comms");
        const auto c = std::find_if(comms.begin(), comms.end(),
                                    [&](const json& x) { return x.at("name") == name; });
        row.push_back(c == comms.end() ? "-" : cell(*c, threshold_ms));
      }
      rows.push_back(std::move(row));
    }
    std::vector<size_t> width(rows.front().size(), 0);
    for (const auto& row : rows) {
      for (size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
    }
    for (const auto& row : rows) {
      std::string line;
      for (size_t i = 0; i < row.size(); ++i) {
        line += i + 1 < row.size() ? fmt::format("{:<{}}  ", row[i], width[i]) : row[i];
      }
      out += line + "\n";
    }
    if (threshold_ms > 0) out += "(! = running past the stall threshold)\n";
    const json& events = j.at("events");
    if (!events.empty()) out += "\nevents:\n";
    for (const json& e : events) {
      out += fmt::format("  {}  {}\n", clock_time(e.at("wall_ns").get<int64_t>()),
                         e.at("line").get<std::string>());
    }
    return out;
  } catch (const json::exception& e) {
    throw InputError(fmt::format("the status JSON lacks a field: {}", e.what()));
  }
}

}  // namespace meshrt::trace
