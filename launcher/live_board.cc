#include "launcher/live_board.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <thread>

#include "runtime/store/live_keys.h"
#include "trace/live_metrics.h"

namespace meshrt::launcher {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

constexpr size_t kMaxEvents = 20;
constexpr const char* kStates[] = {"in_op", "between_ops", "user_code", "finished"};

// The mesh dim label of a communicator as the ranks' totals say it (trace::mesh_dim_label): its
// mesh dim, or outside any mesh its name.
std::string dim_label(const json& comm) {
  std::string dim = comm.value("mesh_dim", "");
  return dim.empty() ? comm.value("name", "") : dim;
}

// One rank's row: its record with every running time advanced by the record's age, since the
// record was published up to a period ago.
json rank_row(int rank, const std::string& record, int64_t now_wall_ns) {
  json row = {{"rank", rank}, {"state", "unknown"}, {"comms", json::array()}};
  if (record.empty()) return row;
  const json j = json::parse(record, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return row;
  try {
    const int64_t age_ms =
        std::max<int64_t>(0, (now_wall_ns - j.at("wall_ns").get<int64_t>()) / 1'000'000);
    row["age_ms"] = age_ms;
    row["state"] = j.value("state", "unknown");
    row["state_ms"] = j.value("state_ms", int64_t{0}) + age_ms;
    for (json c : j.at("comms")) {
      json& f = c["in_flight"];
      if (f.is_object()) f["running_ms"] = f.value("running_ms", int64_t{0}) + age_ms;
      row["comms"].push_back(std::move(c));
    }
  } catch (const json::exception&) {
    row["state"] = "unknown";
  }
  return row;
}

}  // namespace

int64_t wall_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

LiveBoard::LiveBoard(std::string run_id, int64_t stall_s)
    : run_id_(std::move(run_id)), stall_s_(stall_s) {}

void LiveBoard::begin_attempt(int attempt, int world_size, std::shared_ptr<Store> job) {
  std::lock_guard lock(mu_);
  attempt_ = attempt;
  world_size_ = world_size;
  job_ = std::move(job);
  progress_.assign(world_size, "");
  ended_.assign(world_size, "");
  progress_wall_ns_ = 0;
  stall_ = {};
}

void LiveBoard::end_attempt() {
  std::lock_guard lock(mu_);
  attempt_ = -1;
  job_.reset();
  stall_ = {};
}

void LiveBoard::set_progress(std::vector<std::string> records) {
  std::lock_guard lock(mu_);
  progress_ = std::move(records);
  progress_wall_ns_ = wall_now_ns();
}

void LiveBoard::rank_ended(int rank, std::string how) {
  std::lock_guard lock(mu_);
  if (rank >= 0 && rank < static_cast<int>(ended_.size())) ended_[rank] = std::move(how);
}

void LiveBoard::add_event(const std::string& line, bool active) {
  std::lock_guard lock(mu_);
  events_.push_back({wall_now_ns(), line, active});
  if (events_.size() > kMaxEvents) events_.pop_front();
}

void LiveBoard::set_stall(int rank, std::string group, std::string op, int64_t seq,
                          std::vector<int> culprits) {
  std::lock_guard lock(mu_);
  stall_ = {rank, std::move(group), std::move(op), seq, std::move(culprits)};
}

void LiveBoard::clear_stall() {
  std::lock_guard lock(mu_);
  stall_ = {};
}

std::string LiveBoard::stall() const {
  std::lock_guard lock(mu_);
  if (stall_.rank < 0) return "";
  return fmt::format("{} {} #{} on rank {}", stall_.group, stall_.op, stall_.seq, stall_.rank);
}

std::string LiveBoard::metrics_text(int64_t now_wall_ns) const {
  std::lock_guard lock(mu_);
  trace::Exposition out;
  const auto gauge = [&](const char* name, const char* help) { out.family(name, "gauge", help); };
  gauge("meshrt_job_info", "The job meshrun runs (always 1)");
  gauge("meshrt_job_attempt", "The attempt running, counted from 0 (-1: none)");
  gauge("meshrt_job_world_size", "Ranks in the running attempt");
  gauge("meshrt_stall_threshold_seconds", "MESHRT_STALL_S: an op in flight this long is a stall");
  gauge("meshrt_stalled", "1 while the live monitor's stall verdict stands, else 0");
  gauge("meshrt_stalled_op",
        "The op the stall verdict was reported for (1 while it stands): its rank, communicator, "
        "mesh dim, op and sequence number");
  gauge("meshrt_rank_state",
        "1 for the state the rank is in (in_op, between_ops, user_code, "
        "finished), 0 for the others");
  gauge("meshrt_rank_state_seconds",
        "How long the rank had been in its state when it published its latest record");
  gauge("meshrt_rank_progress_age_seconds", "Age of the rank's latest progress record");
  gauge("meshrt_in_flight_op_age_seconds",
        "How long the op in flight on the rank's communicator had run when the rank published "
        "its latest record (only while one runs)");
  out.sample("meshrt_job_info", "", {{"run_id", run_id_}}, 1);
  out.sample("meshrt_job_attempt", "", {}, attempt_);
  out.sample("meshrt_job_world_size", "", {}, world_size_);
  out.sample("meshrt_stall_threshold_seconds", "", {}, static_cast<double>(stall_s_));
  out.sample("meshrt_stalled", "", {}, stall_.rank >= 0 ? 1 : 0);
  std::string stalled_dim = stall_.group;
  for (int r = 0; r < static_cast<int>(progress_.size()); ++r) {
    if (progress_[r].empty()) continue;
    const json j = json::parse(progress_[r], nullptr, false);
    if (j.is_discarded() || !j.is_object()) continue;
    const std::string rank = std::to_string(r);
    // Times as of the record, not advanced to now as the status page does: the op in flight
    // then may long be done (records come once a period), and a gauge should not guess.
    try {
      const double age_s = std::max<int64_t>(0, now_wall_ns - j.at("wall_ns").get<int64_t>()) / 1e9;
      out.sample("meshrt_rank_progress_age_seconds", "", {{"rank", rank}}, age_s);
      const std::string state = j.value("state", "");
      if (!state.empty()) {
        for (const char* s : kStates) {
          out.sample("meshrt_rank_state", "", {{"rank", rank}, {"state", s}}, state == s ? 1 : 0);
        }
        out.sample("meshrt_rank_state_seconds", "", {{"rank", rank}},
                   j.value("state_ms", int64_t{0}) / 1e3);
      }
      for (const json& c : j.at("comms")) {
        if (r == stall_.rank && c.value("name", "") == stall_.group) stalled_dim = dim_label(c);
        const json& f = c.at("in_flight");
        if (!f.is_object()) continue;
        out.sample("meshrt_in_flight_op_age_seconds", "",
                   {{"rank", rank},
                    {"comm", c.value("name", "")},
                    {"mesh_dim", dim_label(c)},
                    {"op", f.value("op", "")}},
                   f.value("running_ms", int64_t{0}) / 1e3);
      }
    } catch (const json::exception&) {
      // A malformed record costs only its own gauges.
    }
    if (j.contains("metrics")) trace::add_live_totals(out, r, j["metrics"]);
  }
  if (stall_.rank >= 0) {
    out.sample("meshrt_stalled_op", "",
               {{"rank", std::to_string(stall_.rank)},
                {"comm", stall_.group},
                {"mesh_dim", stalled_dim},
                {"op", stall_.op},
                {"seq", std::to_string(stall_.seq)}},
               1);
  }
  // The totals' families, declared even before any rank published, so that a scrape always
  // names them.
  trace::add_live_totals(out, 0, json::array());
  return out.text();
}

Snapshots LiveBoard::snapshots(std::chrono::milliseconds wait, std::chrono::milliseconds reuse) {
  std::lock_guard serial(snapshot_mu_);
  std::shared_ptr<Store> job;
  int world = 0;
  {
    std::lock_guard lock(mu_);
    job = job_;
    world = world_size_;
  }
  if (!job) return {};
  if (last_.request > 0 && static_cast<int>(last_.by_rank.size()) == world &&
      Clock::now() - last_at_ < reuse) {
    return last_;
  }
  Snapshots s;
  s.request = job->add(live_keys::kSnapshotRequest, 1);
  s.by_rank.assign(world, "");
  // Every rank's watchdog answers within its request poll (250 ms); a dead or wedged one never
  // does, and is left out.
  int missing = world;
  const auto deadline = Clock::now() + wait;
  while (missing > 0 && Clock::now() < deadline) {
    for (int r = 0; r < world; ++r) {
      const std::string k = live_keys::snapshot(s.request, r);
      if (!s.by_rank[r].empty() || !job->check({&k, 1})) continue;
      s.by_rank[r] = to_string(job->get(k, std::chrono::milliseconds(1000)));
      job->delete_key(k);
      --missing;
    }
    if (missing > 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  last_ = s;
  last_at_ = Clock::now();
  return s;
}

std::string LiveBoard::status_json(int64_t now_wall_ns) const {
  std::lock_guard lock(mu_);
  json j = {
      {"run_id", run_id_},         {"attempt", attempt_},           {"running", attempt_ >= 0},
      {"world_size", world_size_}, {"stall_threshold_s", stall_s_}, {"wall_ns", now_wall_ns}};
  json ranks = json::array();
  for (int r = 0; r < static_cast<int>(progress_.size()); ++r) {
    json row = rank_row(r, progress_[r], now_wall_ns);
    if (r < static_cast<int>(ended_.size()) && !ended_[r].empty()) {
      row["state"] = "ended";
      row["ended"] = ended_[r];
    }
    ranks.push_back(std::move(row));
  }
  j["ranks"] = std::move(ranks);
  // The verdict is the newest event while it is active (a stall not yet cleared).
  j["verdict"] = nullptr;
  if (!events_.empty() && events_.back().active) {
    j["verdict"] = {{"line", events_.back().line},
                    {"age_ms", (now_wall_ns - events_.back().wall_ns) / 1'000'000}};
  }
  json events = json::array();
  for (const Event& e : events_) {
    events.push_back({{"line", e.line}, {"wall_ns", e.wall_ns}, {"active", e.active}});
  }
  j["events"] = std::move(events);
  j["stall"] = nullptr;
  if (stall_.rank >= 0) {
    j["stall"] = {{"rank", stall_.rank},
                  {"group", stall_.group},
                  {"op", stall_.op},
                  {"seq", stall_.seq},
                  {"culprits", stall_.culprits}};
  }
  return j.dump();
}

}  // namespace meshrt::launcher
