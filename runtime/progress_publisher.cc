#include "runtime/progress_publisher.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "trace/env.h"
#include "trace/flight_recorder.h"
#include "trace/live_metrics.h"
#include "trace/logging.h"
#include "trace/tracer.h"

namespace meshrt {

ProgressOptions progress_options_from_env() {
  ProgressOptions o;
  o.period = trace::env::get_ms({"MESHRT_PROGRESS_PERIOD_MS"}).value_or(o.period);
  o.dump_on_stall = trace::env::get_flag({"MESHRT_DUMP_ON_STALL"});
  return o;
}

std::string_view rank_activity_name(RankActivity activity) {
  switch (activity) {
    case RankActivity::kInOp:
      return "in_op";
    case RankActivity::kBetweenOps:
      return "between_ops";
    case RankActivity::kUserCode:
      return "user_code";
    case RankActivity::kFinished:
      return "finished";
  }
  return "";
}

ProgressPublisher::ProgressPublisher(ProgressOptions options) : options_(options) {}

ProgressPublisher::RankClock& ProgressPublisher::clock_of(int rank) {
  for (RankClock& c : clocks_) {
    if (c.rank == rank) return c;
  }
  clocks_.push_back({rank, RankActivity::kUserCode, trace::steady_now_ns(), -1});
  return clocks_.back();
}

namespace {

// When a running op began: its start, or its enqueue for one launched but not yet started.
int64_t began_ns(const trace::OpRecord& r) { return r.start_ns != 0 ? r.start_ns : r.enqueue_ns; }

}  // namespace

bool ProgressPublisher::tick(const std::vector<CommSample>& comms, Store* store) {
  if (!enabled()) return true;
  const int64_t now = trace::steady_now_ns();
  std::vector<int> ranks;
  for (const CommSample& c : comms) {
    if (std::find(ranks.begin(), ranks.end(), c.info->global_rank) == ranks.end()) {
      ranks.push_back(c.info->global_rank);
    }
  }
  // A rank seen before whose communicators are all gone still publishes, so that the live
  // monitor does not read its last op as still running.
  for (const RankClock& c : clocks_) {
    if (std::find(ranks.begin(), ranks.end(), c.rank) == ranks.end()) ranks.push_back(c.rank);
  }
  // Where each rank is now: an op seen running, queued ops, or user code since the last op seen.
  for (const int rank : ranks) {
    RankClock& clock = clock_of(rank);
    RankActivity activity = RankActivity::kUserCode;
    int64_t since = 0;
    int64_t marker = 0;
    bool has_comm = false;
    for (const CommSample& c : comms) {
      if (c.info->global_rank != rank) continue;
      has_comm = true;
      const auto& p = *c.info->progress;
      marker += p.last_completed_collective.load(std::memory_order_relaxed) +
                p.last_enqueued_collective.load(std::memory_order_relaxed);
      if (c.running) {
        const int64_t b = began_ns(*c.running);
        if (activity != RankActivity::kInOp || b < since) since = b;
        activity = RankActivity::kInOp;
      } else if (activity == RankActivity::kUserCode &&
                 p.last_enqueued_collective.load(std::memory_order_relaxed) >
                     p.last_completed_collective.load(std::memory_order_relaxed)) {
        activity = RankActivity::kBetweenOps;
      }
    }
    if (!has_comm) activity = RankActivity::kFinished;
    if (activity == RankActivity::kInOp) {
      clock.since_ns = since;
    } else if (activity != clock.activity || marker != clock.busy_marker) {
      // Left an op (or ran one between two polls): the new state began about now.
      clock.since_ns = now;
    }
    clock.activity = activity;
    clock.busy_marker = marker;
  }
  if (store == nullptr) return true;
  try {
    if (now >= next_request_poll_ns_) {
      next_request_poll_ns_ = now + options_.request_poll.count() * 1'000'000;
      const int64_t request = store->add(live_keys::kSnapshotRequest, 0);
      if (request > last_request_) {
        last_request_ = request;
        answer_request(*store, request);
      }
    }
    if (now >= next_publish_ns_) {
      next_publish_ns_ = now + options_.period.count() * 1'000'000;
      std::vector<std::string> keys;
      std::vector<Bytes> values;
      for (const int rank : ranks) {
        keys.push_back(live_keys::progress(rank));
        const std::string r = record(rank, comms, now);
        values.emplace_back(r.begin(), r.end());
      }
      if (!keys.empty()) store->multi_set(keys, values);
    }
  } catch (const std::exception& e) {
    // The job's store is gone or slow: progress is best effort and must not stop the watchdog.
    log().debug("cannot publish live progress: {}", e.what());
    return false;
  }
  return true;
}

std::string ProgressPublisher::record(int rank, const std::vector<CommSample>& comms,
                                      int64_t now_ns) const {
  using nlohmann::json;
  json j;
  j["rank"] = rank;
  j["wall_ns"] = trace::wall_now_ns();
  for (const RankClock& c : clocks_) {
    if (c.rank != rank) continue;
    j["state"] = rank_activity_name(c.activity);
    j["state_ms"] = std::max<int64_t>(0, (now_ns - c.since_ns) / 1'000'000);
  }
  json list = json::array();
  for (const CommSample& c : comms) {
    if (c.info->global_rank != rank) continue;
    const auto& p = *c.info->progress;
    json comm = {{"name", c.info->name},
                 {"mesh_dim", c.info->mesh_dim},
                 {"ranks", c.info->global_ranks},
                 {"enqueued", p.last_enqueued_collective.load(std::memory_order_relaxed)},
                 {"started", p.last_started_collective.load(std::memory_order_relaxed)},
                 {"completed", p.last_completed_collective.load(std::memory_order_relaxed)},
                 {"in_flight", nullptr}};
    if (c.running) {
      const trace::OpRecord& r = *c.running;
      const int peer = r.is_p2p && r.root_or_peer >= 0 &&
                               r.root_or_peer < static_cast<int>(c.info->global_ranks.size())
                           ? c.info->global_ranks[r.root_or_peer]
                           : -1;
      comm["in_flight"] = {
          {"op", r.op},
          {"seq", r.is_p2p ? r.p2p_seq : r.collective_seq},
          {"p2p", r.is_p2p},
          {"channel_seq", r.p2p_channel_seq},
          {"peer", peer},
          {"running_ms", std::max<int64_t>(0, (now_ns - began_ns(r)) / 1'000'000)}};
    }
    list.push_back(std::move(comm));
  }
  j["comms"] = std::move(list);
  // The rank's op totals for the status server's /metrics; read here, once a period, off the
  // op path.
  if (auto& live = trace::LiveMetrics::instance(); live.enabled())
    j["metrics"] = live.rank_json(rank);
  return j.dump();
}

void ProgressPublisher::answer_request(Store& store, int64_t request) {
  auto& fr = trace::FlightRecorder::instance();
  if (!fr.enabled()) {
    log().warn(
        "the live monitor asked for a flight-recorder snapshot, but the recorder is off "
        "(MESHRT_TRACE_BUFFER_SIZE=0): the live verdict cannot name this rank's ops");
    return;
  }
  for (const int rank : fr.local_ranks()) {
    const std::string dump =
        fr.render(rank, trace::DumpFormat::kJson, trace::DumpReason::kStall, nullptr);
    store.set(live_keys::snapshot(request, rank), as_bytes(dump));
  }
  if (options_.dump_on_stall) {
    const auto paths = fr.dump(trace::DumpReason::kStall);
    log().warn(
        "stall seen by the live monitor (MESHRT_DUMP_ON_STALL=1): flight recorder dumped "
        "to {}; the job goes on",
        fmt::join(paths, ", "));
  }
}

}  // namespace meshrt
