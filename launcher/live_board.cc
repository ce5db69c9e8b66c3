#include "launcher/live_board.h"

#include <nlohmann/json.hpp>
#include <thread>

#include "runtime/store/live_keys.h"

namespace meshrt::launcher {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

constexpr size_t kMaxEvents = 20;

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
  progress_wall_ns_ = 0;
}

void LiveBoard::end_attempt() {
  std::lock_guard lock(mu_);
  attempt_ = -1;
  job_.reset();
}

void LiveBoard::set_progress(std::vector<std::string> records) {
  std::lock_guard lock(mu_);
  progress_ = std::move(records);
  progress_wall_ns_ = wall_now_ns();
}

void LiveBoard::add_event(const std::string& line, bool active) {
  std::lock_guard lock(mu_);
  events_.push_back({wall_now_ns(), line, active});
  if (events_.size() > kMaxEvents) events_.pop_front();
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
    ranks.push_back(rank_row(r, progress_[r], now_wall_ns));
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
  return j.dump();
}

}  // namespace meshrt::launcher
