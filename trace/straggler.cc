#include "trace/straggler.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "trace/atomic_file.h"
#include "trace/logging.h"
#include "trace/spin_lock.h"

namespace meshrt::trace {
namespace {

using Json = nlohmann::ordered_json;

constexpr double kNsPerMs = 1e6;

// One rank's arrival at an instance.
struct Arrival {
  int rank;
  int64_t arrival_ns;
  int64_t end_ns;
};

// One op instance (communicator, seq) as the ranks recorded it.
struct Instance {
  std::string_view op;
  bool mismatched = false;
  std::vector<Arrival> arrivals;
};

// Totals of one rank while they are summed.
struct RankAcc {
  uint64_t ops = 0;
  int64_t comm_ns = 0;
  int64_t wait_ns = 0;
  uint64_t times_last = 0;
  int64_t lateness_ns = 0;
};

// One dim's instances while they are summed.
struct DimAcc {
  uint64_t incomplete = 0;
  std::vector<int64_t> skews_ns;
  SkewAt max_skew;
  int64_t max_skew_ns = -1;
  std::map<int, RankAcc> ranks;
};

RankStragglerStats stats_of(int rank, const RankAcc& a) {
  RankStragglerStats s;
  s.rank = rank;
  s.ops = a.ops;
  s.comm_ms = a.comm_ns / kNsPerMs;
  s.wait_ms = a.wait_ns / kNsPerMs;
  s.times_last = a.times_last;
  s.lateness_ms = a.lateness_ns / kNsPerMs;
  return s;
}

// The ranks that were last at least once, most lateness first (lowest rank on a tie), at most k.
std::vector<RankStragglerStats> top_late(const std::map<int, RankAcc>& ranks, size_t k) {
  std::vector<RankStragglerStats> out;
  for (const auto& [rank, acc] : ranks) {
    if (acc.times_last > 0) out.push_back(stats_of(rank, acc));
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const auto& a, const auto& b) { return a.lateness_ms > b.lateness_ms; });
  if (out.size() > k) out.resize(k);
  return out;
}

DimStragglerStats finish_dim(const std::string& name, DimAcc& acc, size_t top_k) {
  DimStragglerStats d;
  d.dim = name;
  d.ops = acc.skews_ns.size();
  d.incomplete_ops = acc.incomplete;
  if (!acc.skews_ns.empty()) {
    std::vector<int64_t>& s = acc.skews_ns;
    const auto [lo, hi] = std::minmax_element(s.begin(), s.end());
    d.skew_min_ms = *lo / kNsPerMs;
    d.skew_max_ms = *hi / kNsPerMs;
    double sum = 0;
    for (int64_t v : s) sum += static_cast<double>(v);
    d.skew_mean_ms = sum / static_cast<double>(s.size()) / kNsPerMs;
    // Nearest rank, as the comm logger's percentiles.
    const size_t k = static_cast<size_t>(std::ceil(0.5 * static_cast<double>(s.size()))) - 1;
    std::nth_element(s.begin(), s.begin() + static_cast<ptrdiff_t>(k), s.end());
    d.skew_p50_ms = s[k] / kNsPerMs;
    d.max_skew = acc.max_skew;
  }
  int64_t least = std::numeric_limits<int64_t>::max();
  int64_t most = -1;
  uint64_t most_last = 0;
  for (const auto& [rank, r] : acc.ranks) {  // By rank: ties go to the lowest.
    if (r.wait_ns < least) {
      least = r.wait_ns;
      d.wait_min_rank = rank;
    }
    if (r.wait_ns > most) {
      most = r.wait_ns;
      d.wait_max_rank = rank;
    }
    if (r.times_last > most_last) {
      most_last = r.times_last;
      d.most_often_last_rank = rank;
    }
  }
  if (d.wait_min_rank >= 0) d.wait_min_ms = least / kNsPerMs;
  if (d.wait_max_rank >= 0) d.wait_max_ms = most / kNsPerMs;
  d.most_often_last_times = most_last;
  d.top_late = top_late(acc.ranks, top_k);
  return d;
}

std::string clock_caveat(int hosts) {
  if (hosts <= 1) return "arrivals are one host's wall clock: skews are exact to its resolution";
  return fmt::format(
      "arrivals are the wall clocks of {} hosts: their offsets (NTP keeps them within about a "
      "millisecond, sometimes more) add to every skew between ranks on different hosts",
      hosts);
}

Json rank_json(const RankStragglerStats& r, bool with_totals) {
  Json j = {{"rank", r.rank}};
  if (with_totals) {
    j["samples"] = r.samples;
    j["dropped"] = r.dropped;
    j["ops"] = r.ops;
    j["comm_ms"] = r.comm_ms;
    j["wait_ms"] = r.wait_ms;
  }
  j["times_last"] = r.times_last;
  j["lateness_ms"] = r.lateness_ms;
  return j;
}

Json late_json(const std::vector<RankStragglerStats>& ranks) {
  Json out = Json::array();
  for (const auto& r : ranks) out.push_back(rank_json(r, false));
  return out;
}

std::string host_name() {
  char name[256] = {};
  gethostname(name, sizeof(name) - 1);
  return name;
}

void write_at_exit() {
  StragglerSink& sink = StragglerSink::instance();
  if (sink.report_written()) return;
  if (sink.holds_every_member()) {
    sink.write_report(sink.local_report());
    return;
  }
  const std::vector<int> ranks = sink.ranks();
  if (std::find(ranks.begin(), ranks.end(), 0) != ranks.end()) {
    log().warn(
        "no straggler report: rank 0 collects it in the world's exit barrier, which did not run "
        "or failed (release the world before the program exits)");
  }
}

}  // namespace

StragglerReport analyze_stragglers(std::span<const RankSamples> ranks, size_t top_k) {
  // Communicators are matched by identity, not by index: each rank numbered its own.
  std::map<std::pair<std::string, std::vector<int>>, uint32_t> group_ids;
  std::vector<const StragglerGroup*> groups;
  std::map<std::pair<uint32_t, uint64_t>, Instance> instances;  // Ordered: deterministic output.
  std::set<std::string> hosts;
  for (const RankSamples& rs : ranks) {
    hosts.insert(rs.host);
    std::vector<uint32_t> global_id;
    std::vector<bool> member;
    for (const StragglerGroup& g : rs.groups) {
      const auto [it, added] =
          group_ids.try_emplace({g.store_key, g.members}, static_cast<uint32_t>(groups.size()));
      if (added) groups.push_back(&g);
      global_id.push_back(it->second);
      member.push_back(std::find(g.members.begin(), g.members.end(), rs.rank) != g.members.end());
    }
    for (const StragglerSample& s : rs.samples) {
      if (s.group >= global_id.size() || !member[s.group]) continue;  // Not from a member.
      Instance& in = instances[{global_id[s.group], s.seq}];
      if (in.op.empty()) in.op = s.op_name();
      if (in.op != s.op_name()) in.mismatched = true;
      const Arrival a{rs.rank, s.arrival_wall_ns, s.end_wall_ns};
      // Ranks are added one after the other: an earlier sample of this rank is the last one.
      if (!in.arrivals.empty() && in.arrivals.back().rank == rs.rank) {
        in.arrivals.back() = a;
      } else {
        in.arrivals.push_back(a);
      }
    }
  }

  StragglerReport report;
  report.ranks_reported = static_cast<int>(ranks.size());
  report.hosts = static_cast<int>(hosts.size());
  report.clock = clock_caveat(report.hosts);
  std::map<std::string, DimAcc> dims;
  std::map<int, RankAcc> totals;
  for (const RankSamples& rs : ranks) totals[rs.rank];
  for (const auto& [key, in] : instances) {
    const StragglerGroup& g = *groups[key.first];
    if (in.mismatched) {
      ++report.mismatched_ops;
      continue;
    }
    const std::string& dim_name = g.mesh_dim.empty() ? g.name : g.mesh_dim;
    DimAcc& dim = dims[dim_name];
    if (in.arrivals.size() < g.members.size()) {
      ++report.incomplete_ops;
      ++dim.incomplete;
      if (report.incomplete.size() < StragglerReport::kMaxListedIncomplete) {
        IncompleteOp& op = report.incomplete.emplace_back();
        op.comm = g.name;
        op.dim = dim_name;
        op.seq = key.second;
        op.op = std::string(in.op);
        for (int m : g.members) {
          const bool present = std::any_of(in.arrivals.begin(), in.arrivals.end(),
                                           [m](const Arrival& a) { return a.rank == m; });
          if (!present) op.missing_ranks.push_back(m);
        }
      }
      continue;
    }
    ++report.matched_ops;
    // The latest arrival is last; the lowest rank wins a tie, so reports are reproducible.
    const Arrival* last = &in.arrivals.front();
    int64_t earliest = last->arrival_ns;
    for (const Arrival& a : in.arrivals) {
      earliest = std::min(earliest, a.arrival_ns);
      if (a.arrival_ns > last->arrival_ns ||
          (a.arrival_ns == last->arrival_ns && a.rank < last->rank)) {
        last = &a;
      }
    }
    const int64_t skew = last->arrival_ns - earliest;
    dim.skews_ns.push_back(skew);
    if (skew > dim.max_skew_ns) {
      dim.max_skew_ns = skew;
      dim.max_skew = {g.name, key.second, std::string(in.op), last->rank, skew / kNsPerMs};
    }
    for (const Arrival& a : in.arrivals) {
      for (RankAcc* acc : {&totals[a.rank], &dim.ranks[a.rank]}) {
        ++acc->ops;
        acc->comm_ns += a.end_ns - a.arrival_ns;
        acc->wait_ns += last->arrival_ns - a.arrival_ns;
      }
    }
    if (skew > 0) {  // With no skew nobody waited: nobody was last.
      for (RankAcc* acc : {&totals[last->rank], &dim.ranks[last->rank]}) {
        ++acc->times_last;
        acc->lateness_ns += skew;
      }
    }
  }

  for (auto& [name, acc] : dims) report.dims.push_back(finish_dim(name, acc, top_k));
  report.top_late = top_late(totals, top_k);
  for (const RankSamples& rs : ranks) {
    RankStragglerStats s = stats_of(rs.rank, totals[rs.rank]);
    s.samples = rs.samples.size();
    s.dropped = rs.dropped;
    report.ranks.push_back(s);
  }
  std::sort(report.ranks.begin(), report.ranks.end(),
            [](const auto& a, const auto& b) { return a.rank < b.rank; });
  return report;
}

std::string StragglerReport::text() const {
  std::string out = fmt::format(
      "meshrt stragglers: {} ranks reported, missing [{}], {} host(s); {} matched ops, {} "
      "incomplete, {} mismatched; times in ms\n{}\n\n",
      ranks_reported, fmt::join(missing_ranks, ", "), hosts, matched_ops, incomplete_ops,
      mismatched_ops, clock);
  out += fmt::format("{:<10} {:>7} {:>10} {:>9} {:>9} {:>9} {:>9}  {:<24} {:<16} {:<20} {:<20}\n",
                     "dim", "ops", "incomplete", "skew min", "skew mean", "skew p50", "skew max",
                     "max at (comm #seq, last)", "most often last", "least wait (rank)",
                     "most wait (rank)");
  for (const auto& d : dims) {
    out += fmt::format(
        "{:<10} {:>7} {:>10} {:>9.3f} {:>9.3f} {:>9.3f} {:>9.3f}  {:<24} {:<16} {:<20} {:<20}\n",
        d.dim, d.ops, d.incomplete_ops, d.skew_min_ms, d.skew_mean_ms, d.skew_p50_ms, d.skew_max_ms,
        d.ops
            ? fmt::format("{} #{}, rank {}", d.max_skew.comm, d.max_skew.seq, d.max_skew.last_rank)
            : "-",
        d.most_often_last_rank < 0
            ? "-"
            : fmt::format("rank {} x{}", d.most_often_last_rank, d.most_often_last_times),
        d.wait_min_rank < 0 ? "-" : fmt::format("{:.3f} ({})", d.wait_min_ms, d.wait_min_rank),
        d.wait_max_rank < 0 ? "-" : fmt::format("{:.3f} ({})", d.wait_max_ms, d.wait_max_rank));
  }
  out += "\ntop late ranks (the time the others waited for them):\n";
  if (top_late.empty()) out += "  none\n";
  for (const auto& r : top_late) {
    out += fmt::format("  rank {:<6} lateness {:>10.3f} ms, last {} times\n", r.rank, r.lateness_ms,
                       r.times_last);
  }
  out += fmt::format("\n{:>6} {:>8} {:>8} {:>7} {:>11} {:>11} {:>10} {:>12}\n", "rank", "samples",
                     "dropped", "ops", "comm ms", "wait ms", "times last", "lateness ms");
  for (const auto& r : ranks) {
    out +=
        fmt::format("{:>6} {:>8} {:>8} {:>7} {:>11.3f} {:>11.3f} {:>10} {:>12.3f}\n", r.rank,
                    r.samples, r.dropped, r.ops, r.comm_ms, r.wait_ms, r.times_last, r.lateness_ms);
  }
  if (!incomplete.empty()) {
    out +=
        fmt::format("\nincomplete ops (the first {} of {}):\n", incomplete.size(), incomplete_ops);
    for (const auto& op : incomplete) {
      out += fmt::format("  {} #{} {}: missing ranks [{}]\n", op.comm, op.seq, op.op,
                         fmt::join(op.missing_ranks, ", "));
    }
  }
  return out;
}

std::string StragglerReport::json() const {
  Json dims_json = Json::array();
  for (const auto& d : dims) {
    Json j = {{"dim", d.dim},
              {"ops", d.ops},
              {"incomplete_ops", d.incomplete_ops},
              {"skew_ms",
               {{"min", d.skew_min_ms},
                {"mean", d.skew_mean_ms},
                {"p50", d.skew_p50_ms},
                {"max", d.skew_max_ms}}}};
    j["max_skew"] = d.ops ? Json{{"comm", d.max_skew.comm},
                                 {"seq", d.max_skew.seq},
                                 {"op", d.max_skew.op},
                                 {"last_rank", d.max_skew.last_rank},
                                 {"skew_ms", d.max_skew.skew_ms}}
                          : Json(nullptr);
    j["wait_ms_min"] = d.wait_min_rank < 0 ? Json(nullptr)
                                           : Json{{"rank", d.wait_min_rank}, {"ms", d.wait_min_ms}};
    j["wait_ms_max"] = d.wait_max_rank < 0 ? Json(nullptr)
                                           : Json{{"rank", d.wait_max_rank}, {"ms", d.wait_max_ms}};
    j["most_often_last"] = d.most_often_last_rank < 0 ? Json(nullptr)
                                                      : Json{{"rank", d.most_often_last_rank},
                                                             {"times", d.most_often_last_times}};
    j["top_late"] = late_json(d.top_late);
    dims_json.push_back(std::move(j));
  }
  Json ranks_json = Json::array();
  for (const auto& r : ranks) ranks_json.push_back(rank_json(r, true));
  Json incomplete_json = Json::array();
  for (const auto& op : incomplete) {
    incomplete_json.push_back({{"comm", op.comm},
                               {"dim", op.dim},
                               {"seq", op.seq},
                               {"op", op.op},
                               {"missing_ranks", op.missing_ranks}});
  }
  const Json doc = {{"ranks_reported", ranks_reported},
                    {"missing_ranks", missing_ranks},
                    {"hosts", hosts},
                    {"clock", clock},
                    {"matched_ops", matched_ops},
                    {"incomplete_ops", incomplete_ops},
                    {"mismatched_ops", mismatched_ops},
                    {"dims", std::move(dims_json)},
                    {"top_late", late_json(top_late)},
                    {"ranks", std::move(ranks_json)},
                    {"incomplete", std::move(incomplete_json)}};
  return doc.dump(2) + "\n";
}

// A rank's ring. Written by the workers of the rank's communicators and read by snapshots: its
// spin lock is shared by nothing else, so an op waits only for another op of the same rank.
struct StragglerSink::Ring : SpinLock {
  std::vector<StragglerSample> samples;  // Fixed size: the ring's slots.
  uint64_t recorded = 0;

  void clear(size_t slots) {
    lock();
    samples.assign(slots, StragglerSample{});
    recorded = 0;
    unlock();
  }
};

StragglerSink::StragglerSink() : host_(host_name()) {}

StragglerSink::~StragglerSink() = default;

StragglerSink& StragglerSink::instance() {
  // Leaked: ops may still complete on worker threads while static destructors run.
  static StragglerSink* sink = new StragglerSink;
  return *sink;
}

void StragglerSink::configure(StragglerOptions options) {
  const bool enable = options.enabled;
  const bool wants_exit_writer = !options.report_path.empty();
  bool was_enabled;
  {
    std::lock_guard lock(mu_);
    was_enabled = options_.enabled;
    if (options.ops_per_rank != options_.ops_per_rank) {
      for (auto& [rank, ring] : rings_) ring->clear(options.ops_per_rank);
    }
    options_ = std::move(options);
  }
  enabled_.store(enable);
  keep_registered_while_enabled(instance(), was_enabled, enable);
  if (wants_exit_writer) run_at_exit_once(write_at_exit);
}

StragglerOptions StragglerSink::options() const {
  std::lock_guard lock(mu_);
  return options_;
}

void StragglerSink::reset() {
  std::lock_guard lock(mu_);
  for (auto& [rank, ring] : rings_) ring->clear(options_.ops_per_rank);
  report_written_ = false;
}

StragglerSink::Route StragglerSink::route(const CommInfo& comm) {
  // Communicator workers run one communicator's ops, so a few slots hit almost always; a uid is
  // never reused and rings are never freed, so a cached route stays valid.
  thread_local std::array<Route, 8> cache{};
  Route& slot = cache[comm.uid % cache.size()];
  if (slot.uid_plus_one == comm.uid + 1) return slot;
  std::lock_guard lock(mu_);
  auto [it, added] = routes_.try_emplace(comm.uid);
  if (added) {
    const auto [g, new_group] = group_index_.try_emplace({comm.store_key, comm.global_ranks},
                                                         static_cast<uint32_t>(groups_.size()));
    if (new_group) {
      groups_.push_back({comm.store_key, comm.name, comm.mesh_dim, comm.global_ranks});
    }
    std::unique_ptr<Ring>& ring = rings_[comm.global_rank];
    if (!ring) {
      ring = std::make_unique<Ring>();
      ring->samples.resize(options_.ops_per_rank);
    }
    it->second = {comm.uid + 1, g->second, ring.get()};
  }
  slot = it->second;
  return slot;
}

void StragglerSink::on_end(const OpRecord& r) {
  if (r.state != OpState::kCompleted || r.is_p2p || !r.comm || !enabled()) return;
  const Route to = route(*r.comm);
  StragglerSample s;
  s.group = to.group;
  r.op.copy(s.op.data(), std::min(r.op.size(), s.op.size() - 1));
  s.seq = r.collective_seq;
  s.bytes = r.bytes;
  // created_wall_ns and enqueue_ns are taken together; the steady clock times the rest.
  s.arrival_wall_ns = r.created_wall_ns;
  s.end_wall_ns = r.created_wall_ns + (r.end_ns - r.enqueue_ns);
  Ring& ring = *to.ring;
  ring.lock();
  if (!ring.samples.empty()) ring.samples[ring.recorded++ % ring.samples.size()] = s;
  ring.unlock();
}

std::vector<int> StragglerSink::ranks() const {
  std::lock_guard lock(mu_);
  std::vector<int> out;
  for (const auto& [rank, ring] : rings_) out.push_back(rank);
  return out;
}

RankSamples StragglerSink::samples(int global_rank) const {
  RankSamples out;
  out.rank = global_rank;
  out.host = host_;
  std::lock_guard lock(mu_);
  out.groups = groups_;
  const auto it = rings_.find(global_rank);
  if (it == rings_.end()) return out;
  Ring& ring = *it->second;
  ring.lock();
  const size_t slots = ring.samples.size();
  const size_t kept = static_cast<size_t>(std::min<uint64_t>(ring.recorded, slots));
  const size_t oldest = ring.recorded > slots ? ring.recorded % slots : 0;
  out.samples.reserve(kept);
  for (size_t i = 0; i < kept; ++i) out.samples.push_back(ring.samples[(oldest + i) % slots]);
  out.dropped = ring.recorded - kept;
  ring.unlock();
  return out;
}

bool StragglerSink::holds_every_member() const {
  std::lock_guard lock(mu_);
  for (const StragglerGroup& g : groups_) {
    for (int m : g.members) {
      if (!rings_.contains(m)) return false;
    }
  }
  return true;
}

StragglerReport StragglerSink::local_report() const {
  std::vector<RankSamples> all;
  for (int rank : ranks()) all.push_back(samples(rank));
  return analyze_stragglers(all, options().top_k);
}

void StragglerSink::write_report(const StragglerReport& report) {
  report_written_ = true;
  const StragglerOptions o = options();
  if (!o.report_path.empty()) write_output_file(o.report_path, report.json(), "straggler report");
  if (o.print_table) {
    const std::string table = report.text();
    std::fwrite(table.data(), 1, table.size(), stderr);
  }
}

}  // namespace meshrt::trace
