#include "launcher/live_monitor.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "launcher/files.h"
#include "launcher/post_mortem.h"
#include "runtime/store/live_keys.h"
#include "trace/atomic_file.h"
#include "trace/env.h"
#include "trace/op_kind.h"

namespace meshrt::launcher {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

}  // namespace

std::string LongestOp::text() const {
  if (peer < 0) return fmt::format("{} {} #{}", group, op, seq);
  return group + " " + trace::p2p_op_text(op, seq, peer);
}

LiveMonitorOptions live_monitor_options_from_env() {
  LiveMonitorOptions o;
  if (auto s = trace::env::get_int({"MESHRT_STALL_S"}, 0, 86400)) o.stall = milliseconds(*s * 1000);
  return o;
}

std::optional<LongestOp> longest_in_record(const std::string& record, int64_t now_wall_ns) {
  const auto j = nlohmann::json::parse(record, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  LongestOp longest;
  try {
    // The record was published up to a period ago: its ops have run that much longer since.
    const int64_t age_ms =
        std::max<int64_t>(0, (now_wall_ns - j.at("wall_ns").get<int64_t>()) / 1'000'000);
    for (const auto& c : j.at("comms")) {
      const auto& f = c.at("in_flight");
      if (f.is_null()) continue;
      const int64_t ms = f.at("running_ms").get<int64_t>() + age_ms;
      if (longest.rank >= 0 && ms <= longest.running_ms) continue;
      const bool p2p = f.value("p2p", false) && f.value("peer", -1) >= 0;
      longest = {j.at("rank").get<int>(),
                 c.at("name").get<std::string>(),
                 f.at("op").get<std::string>(),
                 p2p ? f.at("channel_seq").get<int64_t>() : f.at("seq").get<int64_t>(),
                 p2p ? f.at("peer").get<int>() : -1,
                 ms};
    }
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
  return longest;
}

LiveMonitor::LiveMonitor(LiveMonitorOptions options, LiveBoard& board, int attempt,
                         std::shared_ptr<Store> job, int world_size, std::string dir,
                         std::string meshtrace, std::function<void(const std::string&)> say)
    : options_(options),
      board_(board),
      job_(std::move(job)),
      world_size_(world_size),
      dir_(std::move(dir)),
      meshtrace_(std::move(meshtrace)),
      say_(std::move(say)) {
  board_.begin_attempt(attempt, world_size_, job_);
  thread_ = std::thread([this] { loop(); });
}

LiveMonitor::~LiveMonitor() {
  stop_ = true;
  thread_.join();
  board_.end_attempt();
}

LongestOp LiveMonitor::read_progress(std::vector<std::string>* records,
                                     std::vector<LongestOp>* per_rank) {
  LongestOp longest;
  per_rank->assign(world_size_, LongestOp{});
  records->assign(world_size_, "");
  const int64_t now = wall_now_ns();
  for (int r = 0; r < world_size_; ++r) {
    const std::string k = live_keys::progress(r);
    if (!job_->check({&k, 1})) continue;
    (*records)[r] = to_string(job_->get(k, milliseconds(1000)));
    const auto l = longest_in_record((*records)[r], now);
    if (l) (*per_rank)[r] = *l;
    if (l && l->rank >= 0 && (longest.rank < 0 || l->running_ms > longest.running_ms)) {
      longest = *l;
    }
  }
  return longest;
}

std::optional<std::string> LiveMonitor::verdict(const LongestOp& stalled,
                                                const std::vector<std::string>& records,
                                                std::vector<int>* culprits) {
  const std::string fallback = fmt::format(
      "stall {} s: {} on rank {}", (stalled.running_ms + 500) / 1000, stalled.text(), stalled.rank);
  const Snapshots snaps = board_.snapshots(options_.snapshot_wait);
  const std::string dir = fmt::format("{}/{}", dir_, snaps.request);
  make_dirs(dir);
  for (int r = 0; r < static_cast<int>(snaps.by_rank.size()); ++r) {
    if (!snaps.by_rank[r].empty()) {
      trace::write_file_atomically(fmt::format("{}/fr_{}", dir, r), snaps.by_rank[r]);
    }
  }
  for (int r = 0; r < world_size_; ++r) {
    if (!records[r].empty()) {
      trace::write_file_atomically(fmt::format("{}/progress_{}.json", dir, r), records[r]);
    }
  }
  if (meshtrace_.empty()) return fallback + " (no meshtrace to name the culprit)";
  const MeshtraceRun run =
      run_meshtrace(meshtrace_, {"stall", dir, "--prefix", "fr_"}, options_.meshtrace_timeout);
  std::string line = run.output.substr(0, run.output.find('\n'));
  if (run.exit_code != 0 || line.empty()) {
    return fmt::format("{} (meshtrace stall failed: {})", fallback, run.output);
  }
  // Line 2: "culprits: [3, 5]".
  if (const size_t at = run.output.find("\nculprits: ["); at != std::string::npos) {
    std::istringstream list(run.output.substr(at + 12, run.output.find(']', at) - at - 12));
    for (std::string r; std::getline(list, r, ',');) culprits->push_back(std::atoi(r.c_str()));
  }
  std::vector<std::string> now;
  std::vector<LongestOp> per_rank;
  read_progress(&now, &per_rank);
  if (!per_rank[stalled.rank].same_op(stalled)) return std::nullopt;
  return line;
}

namespace {

// "compute (train.cc:40) <- step (train.cc:88)": the first frames of the main thread's stack in
// a snapshot (trace/dump_format.h, meshrt_threads); empty when it has none.
std::string main_stack(const std::string& snapshot) {
  const auto j = nlohmann::json::parse(snapshot, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("meshrt_threads")) return "";
  std::vector<std::string> frames;
  try {
    for (const auto& t : j.at("meshrt_threads")) {
      if (!t.value("main", false)) continue;
      for (const auto& f : t.at("frames")) {
        if (frames.size() == 4) break;
        std::string file = f.value("file", "");
        file = file.substr(file.rfind('/') + 1);
        const int64_t line = f.value("line", int64_t{0});
        const std::string function = f.value("function", "??");
        frames.push_back(line > 0 ? fmt::format("{} ({}:{})", function, file, line) : function);
      }
    }
  } catch (const nlohmann::json::exception&) {
    return "";
  }
  return fmt::format("{}", fmt::join(frames, " <- "));
}

}  // namespace

void LiveMonitor::report_stragglers(const std::vector<Straggler>& now) {
  std::map<std::pair<int, std::string>, Straggler> current;
  for (const Straggler& s : now) current[{s.rank, s.group}] = s;
  for (auto it = reported_.begin(); it != reported_.end();) {
    if (current.contains(it->first)) {
      ++it;
      continue;
    }
    const std::string line = fmt::format("straggler cleared: rank {} no longer arrives late at {}",
                                         it->first.first, it->first.second);
    say_(line);
    board_.add_event(line, false);
    it = reported_.erase(it);
  }
  for (const auto& [key, s] : current) {
    if (reported_.contains(key)) continue;
    reported_[key] = s;
    std::string line = "straggler: " + describe(s);
    // Where its time goes: its main thread now, most likely in what makes it slow.
    const Snapshots snaps = board_.snapshots(options_.snapshot_wait, std::chrono::seconds(5));
    if (s.rank < static_cast<int>(snaps.by_rank.size())) {
      if (const std::string at = main_stack(snaps.by_rank[s.rank]); !at.empty()) {
        line += fmt::format("; its main thread: {}", at);
      }
    }
    say_(line);
    board_.add_event(line, false);
  }
}

void LiveMonitor::loop() {
  std::optional<LongestOp> stalled;  // The op of the stall reported, until it clears.
  // After an op that ended while its snapshots were taken: a slow job would otherwise be
  // snapshotted again at every op that crosses the threshold.
  Clock::time_point quiet_until = Clock::now();
  Clock::time_point next = Clock::now();
  while (!stop_) {
    std::this_thread::sleep_for(milliseconds(50));
    if (Clock::now() < next) continue;
    next = Clock::now() + options_.poll;
    try {
      std::vector<std::string> records;
      std::vector<LongestOp> per_rank;
      const LongestOp longest = read_progress(&records, &per_rank);
      board_.set_progress(records);
      const bool over = options_.stall.count() > 0 && longest.rank >= 0 &&
                        longest.running_ms >= options_.stall.count();
      // The stall lasts while the op it was reported for still runs on its rank (other ranks'
      // ops of the same stall may be as old: the longest alone would flap between them).
      if (stalled && !per_rank[stalled->rank].same_op(*stalled)) {
        const std::string line = fmt::format("stall cleared: {} on rank {} is no longer stuck",
                                             stalled->text(), stalled->rank);
        say_(line);
        board_.add_event(line, false);
        board_.clear_stall();
        stalled.reset();
      }
      if (over && !stalled && Clock::now() >= quiet_until) {
        board_.set_stall(longest.rank, longest.group, longest.op, longest.seq);
        std::vector<int> culprits;
        if (const std::optional<std::string> line = verdict(longest, records, &culprits)) {
          stalled = longest;
          board_.set_stall(longest.rank, longest.group, longest.op, longest.seq, culprits);
          say_(*line);
          board_.add_event(*line, true);
        } else {
          board_.clear_stall();
          const std::string slow = fmt::format(
              "slow, not stalled: {} on rank {} ended while the ranks' snapshots were taken ({} "
              "s after it began); no verdict is drawn from snapshots of different moments",
              longest.text(), longest.rank, (longest.running_ms + 500) / 1000);
          say_(slow);
          board_.add_event(slow, false);
          quiet_until = Clock::now() + options_.stall;
        }
      }
      if (options_.stall.count() > 0) report_stragglers(stragglers_.add(records));
    } catch (const std::exception& e) {
      // The store is gone when the job ends; the monitor has nothing left to watch.
      if (!stop_) say_(fmt::format("live monitor stopped: {}", e.what()));
      return;
    }
  }
}

}  // namespace meshrt::launcher
