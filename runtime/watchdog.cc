#include "runtime/watchdog.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <thread>

#include "runtime/fatal_signal.h"
#include "runtime/rank_failures.h"
#include "runtime/store/dump_keys.h"
#include "runtime/store/exit_keys.h"
#include "trace/env.h"
#include "trace/live_metrics.h"
#include "trace/logging.h"
#include "trace/tracer.h"

namespace meshrt {
namespace {

using dump_keys::kDumpSignal;
using dump_keys::kDumpsWritten;

std::atomic<bool> dump_requested_by_signal{false};

extern "C" void on_sigusr1(int) { dump_requested_by_signal.store(true); }

std::string sizes_text(const trace::OpRecord& r) {
  return fmt::format("in {} x {}, out {} x {}", r.input_count, r.dtype, r.output_count, r.dtype);
}

}  // namespace

WatchdogOptions watchdog_options_from_env() {
  namespace env = trace::env;
  WatchdogOptions o;
  if (auto p = env::get_choice({"MESHRT_ON_TIMEOUT"}, {"abort", "throw", "continue"})) {
    o.policy = *p == "abort"   ? TimeoutPolicy::kAbort
               : *p == "throw" ? TimeoutPolicy::kThrow
                               : TimeoutPolicy::kContinue;
  }
  o.poll = env::get_ms({"MESHRT_WATCHDOG_POLL_MS"}, 1).value_or(o.poll);
  o.signal_poll = env::get_ms({"MESHRT_DUMP_SIGNAL_POLL_MS"}, 1).value_or(o.signal_poll);
  o.dump_wait = env::get_ms({"MESHRT_DUMP_WAIT_MS"}).value_or(o.dump_wait);
  o.heartbeat_timeout =
      env::get_ms({"MESHRT_HEARTBEAT_TIMEOUT_MS"}, 1).value_or(o.heartbeat_timeout);
  if (auto v = env::get({"MESHRT_DUMP_PIPE", "TORCH_NCCL_DEBUG_INFO_PIPE_FILE"})) o.pipe_stem = *v;
  o.repair_in_place =
      env::get_choice({"MESHRT_ON_RANK_FAILURE"}, {"restart-job", "continue"}) == "continue";
  return o;
}

Watchdog& Watchdog::instance() {
  // Leaked, with detached threads: it must outlive every communicator, static ones included.
  static Watchdog* w = new Watchdog;
  return *w;
}

Watchdog::Watchdog()
    : options_(watchdog_options_from_env()), progress_(progress_options_from_env()) {}

void Watchdog::add(Watched* comm) {
  std::lock_guard lock(mu_);
  comms_.push_back(comm);
  if (!started_) {
    started_ = true;
    start_threads();
  }
}

void Watchdog::remove(Watched* comm) {
  std::lock_guard progress(progress_mu_);
  std::lock_guard lock(mu_);
  std::erase(comms_, comm);
}

void Watchdog::note_comm_end(const std::string& comm_key, int64_t last_collective_seq) {
  // A program that makes a communicator per step would grow this without end; the oldest
  // matter least (peers wait in the newest).
  constexpr size_t kMaxEnded = 4096;
  std::lock_guard lock(mu_);
  if (ended_comms_.size() >= kMaxEnded && !ended_comms_.contains(comm_key)) return;
  ended_comms_[comm_key] = last_collective_seq;
}

std::string Watchdog::exit_record() const {
  nlohmann::json comms = nlohmann::json::object();
  {
    std::lock_guard lock(mu_);
    for (const auto& [key, seq] : ended_comms_) comms[key] = seq;
  }
  return nlohmann::json{{"comms", std::move(comms)}}.dump();
}

void Watchdog::set_exit(std::function<void(int status)> exit) {
  std::lock_guard lock(mu_);
  exit_ = std::move(exit);
}

void Watchdog::progress_all() {
  // Not under mu_: a failure found here goes through on_op_failed(), which takes it.
  std::lock_guard progress(progress_mu_);
  std::vector<Watched*> comms;
  {
    std::lock_guard lock(mu_);
    comms = comms_;
  }
  for (Watched* c : comms) c->progress();
}

void Watchdog::publish_progress() {
  if (!progress_.enabled()) return;
  std::vector<CommSample> samples;
  std::shared_ptr<Store> store;
  {
    std::lock_guard lock(mu_);
    store = store_;
    for (Watched* c : comms_) {
      if (auto rec = c->running_record(); rec && rec->comm) {
        samples.push_back({rec->comm, std::move(rec)});
      }
    }
  }
  // Communicators with nothing running, from the recorder's list of live ones.
  for (auto& info : trace::FlightRecorder::instance().comms()) {
    const bool seen = std::any_of(samples.begin(), samples.end(),
                                  [&](const CommSample& s) { return s.info == info; });
    if (!seen) samples.push_back({std::move(info), std::nullopt});
  }
  if (!progress_.tick(samples, store_quiet() ? nullptr : store.get())) store_failed();
}

bool Watchdog::store_quiet() const {
  return trace::steady_now_ns() < store_quiet_until_ns_.load(std::memory_order_relaxed);
}

void Watchdog::store_failed() {
  constexpr int64_t kQuietNs = 3'000'000'000;
  store_quiet_until_ns_.store(trace::steady_now_ns() + kQuietNs, std::memory_order_relaxed);
}

void Watchdog::set_job_store(std::shared_ptr<Store> store, std::string run_id, int world_size) {
  trace::FlightRecorder::instance().set_job_info({std::move(run_id), world_size});
  // A job store means a live monitor reads the progress records: they then carry op totals for
  // its /metrics (docs/diagnosis.md), counted from here on.
  if (progress_.enabled() && store) trace::LiveMetrics::instance().enable();
  std::lock_guard lock(mu_);
  store_ = std::move(store);
  world_size_ = world_size;
  ended_comms_.clear();
  job_generation_.fetch_add(1);
  // A new job (another run id) starts with no failure seen.
  fired_ = dump_claimed_ = dumped_ = job_failed_ = false;
}

void Watchdog::clear_job_store(const Store* store) {
  std::lock_guard lock(mu_);
  if (store_.get() == store) store_ = nullptr;
}

void Watchdog::stall_for_testing(std::chrono::milliseconds duration) {
  stall_ms_.store(duration.count());
}

void Watchdog::set_default_policy(TimeoutPolicy policy) {
  std::lock_guard lock(mu_);
  default_policy_ = policy;
}

TimeoutPolicy Watchdog::policy() const {
  std::lock_guard lock(mu_);
  return options_.policy.value_or(default_policy_);
}

void Watchdog::start_threads() {
  // SIGUSR1 asks for a dump unless the program handles it itself. The handler only sets a flag:
  // the dump runs on the watchdog thread, where allocating and writing files is safe.
  struct sigaction old {};
  if (::sigaction(SIGUSR1, nullptr, &old) == 0 && old.sa_handler == SIG_DFL) {
    struct sigaction sa {};
    sa.sa_handler = on_sigusr1;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    ::sigaction(SIGUSR1, &sa, nullptr);
  }
  std::thread([this] { loop(); }).detach();
  std::thread([this] { monitor_loop(); }).detach();
}

void Watchdog::loop() {
  use_signal_stack_on_this_thread();
  auto next_signal_poll = std::chrono::steady_clock::now();
  for (;;) {
    std::this_thread::sleep_for(options_.poll);
    if (const int64_t stall = stall_ms_.exchange(0); stall > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(stall));
    }
    heartbeat_.fetch_add(1, std::memory_order_relaxed);
    if (dump_requested_by_signal.exchange(false)) manual_dump(trace::DumpReason::kSignal);
    poll_pipe();
    progress_all();
    scan_timeouts();
    abort_ops_waiting_for_dead();
    publish_progress();
    if (std::chrono::steady_clock::now() >= next_signal_poll) {
      poll_remote_signal();
      check_left_peers();
      next_signal_poll = std::chrono::steady_clock::now() + options_.signal_poll;
    }
  }
}

void Watchdog::monitor_loop() {
  use_signal_stack_on_this_thread();
  uint64_t last = heartbeat_.load();
  auto last_change = std::chrono::steady_clock::now();
  for (;;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    const uint64_t now_beat = heartbeat_.load();
    const auto now = std::chrono::steady_clock::now();
    if (now_beat != last) {
      last = now_beat;
      last_change = now;
      continue;
    }
    if (now - last_change < options_.heartbeat_timeout) continue;
    log().critical(
        "the watchdog has not made progress for {} ms (stuck in a backend or store "
        "call); dumping the flight recorder and exiting",
        options_.heartbeat_timeout.count());
    // The dump may hang the same way the watchdog did (a stuck file system or writer): give it
    // a bounded time on a thread of its own, then exit regardless.
    auto done = std::make_shared<std::atomic<bool>>(false);
    std::thread([done] {
      trace::FlightRecorder::instance().dump(trace::DumpReason::kHeartbeat);
      done->store(true);
    }).detach();
    const auto deadline = std::chrono::steady_clock::now() + options_.dump_wait;
    while (!done->load() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    log().flush();
    ::_exit(kWatchdogExitCode);
  }
}

void Watchdog::scan_timeouts() {
  // Backends bound their own ops by the timeout; this catches one that does not, a second late.
  constexpr int64_t kGraceNs = 1'000'000'000;
  std::vector<std::pair<Watched*, trace::OpRecord>> late;
  {
    std::lock_guard lock(mu_);
    const int64_t now = trace::steady_now_ns();
    for (Watched* c : comms_) {
      auto rec = c->running_record();
      // A launched op counts from its launch: it may never start (a GPU stream stuck before it).
      const int64_t since = rec && rec->start_ns != 0 ? rec->start_ns : rec ? rec->enqueue_ns : 0;
      if (rec && since != 0 && now - since > rec->timeout_ms * 1'000'000 + kGraceNs) {
        late.emplace_back(c, std::move(*rec));
      }
    }
  }
  for (auto& [comm, rec] : late) {
    // The trigger comes from the record: the communicator may be gone once mu_ is released.
    const int64_t ran_ms =
        (trace::steady_now_ns() - (rec.start_ns != 0 ? rec.start_ns : rec.enqueue_ns)) / 1'000'000;
    trace::DumpTrigger t{
        rec.comm->global_rank, rec.comm->name, rec.is_p2p ? rec.p2p_seq : rec.collective_seq,
        std::string(rec.op),
        fmt::format("ran for {} ms, timeout {} ms ({})", ran_ms, rec.timeout_ms, sizes_text(rec))};
    t.op_text = trace::op_text(rec);
    fire(trace::DumpReason::kTimeout, t);
    apply_policy(comm);
  }
}

void Watchdog::apply_policy(Watched* comm) {
  if (policy() == TimeoutPolicy::kAbort) exit_after_dumps();
  if (policy() == TimeoutPolicy::kThrow) {
    // Backends that can interrupt an op (in-process, Gloo) fail its waiters now.
    std::lock_guard lock(mu_);
    if (std::find(comms_.begin(), comms_.end(), comm) != comms_.end()) comm->abort();
  }
}

void Watchdog::check_left_peers() {
  // An op younger than this may still be finishing data its peer sent before it left.
  constexpr int64_t kWaitedNs = 1'000'000'000;
  // A p2p op, or any op with a peer whose process ended, is judged by time: still waiting this
  // long after the peer was seen gone.
  constexpr int64_t kGoneNs = 2'000'000'000;
  const int64_t now = trace::steady_now_ns();
  std::shared_ptr<Store> store;
  std::vector<std::pair<Watched*, trace::OpRecord>> waiting;
  {
    std::lock_guard lock(mu_);
    store = store_;
    if (!store || fired_.load()) return;
    for (Watched* c : comms_) {
      auto rec = c->running_record();
      if (!rec || !rec->comm) continue;
      const int64_t since = rec->start_ns != 0 ? rec->start_ns : rec->enqueue_ns;
      if (since != 0 && now - since >= kWaitedNs) waiting.emplace_back(c, std::move(*rec));
    }
  }
  if (const uint64_t g = job_generation_.load(); g != left_peers_generation_) {
    left_peers_.clear();
    left_peers_generation_ = g;
  }
  if (waiting.empty() || store_quiet()) return;
  try {
    if (store->add(exit_keys::kRecords, 0) <= 0) return;
    for (const auto& [comm, rec] : waiting) {
      const trace::CommInfo& info = *rec.comm;
      const int64_t seq = static_cast<int64_t>(trace::trace_seq(rec));
      std::vector<int> never_called;  // Proven: ended the communicator before the op.
      int64_t last_seq = -1;
      std::string gone;  // A peer judged by time (p2p, or a process that ended), as a sentence.
      for (size_t i = 0; i < info.global_ranks.size(); ++i) {
        const int peer = info.global_ranks[i];
        if (peer == info.global_rank) continue;
        // A p2p op waits for its peer only.
        if (rec.is_p2p && static_cast<int>(i) != rec.root_or_peer) continue;
        const LeftPeer* left = left_peer(*store, peer, now);
        if (left == nullptr) continue;
        const auto last = left->last_collective.find(info.store_key);
        if (!rec.is_p2p && left->ended.empty() && last != left->last_collective.end()) {
          if (last->second < seq) {
            never_called.push_back(peer);
            last_seq = std::max(last_seq, last->second);
          }
        } else if (options_.repair_in_place && !left->ended.empty()) {
          // A dead peer: abort_ops_waiting_for_dead() fails the op, and the program repairs.
        } else if (gone.empty() && now - left->seen_ns >= kGoneNs &&
                   (!left->ended.empty() || last != left->last_collective.end())) {
          // A process that ended, or a p2p peer that ended this communicator: it cannot act
          // any more, and what it sent before has had time to arrive. (A communicator a
          // finished rank still holds may run an op of its own: no verdict then.)
          gone = left->ended.empty()
                     ? fmt::format(
                           "rank {} has left: it returned from its program (at the "
                           "end-of-run barrier) while this rank waits for it in {}",
                           peer, trace::op_text(rec))
                     : fmt::format(
                           "rank {}'s process ended ({}) while this rank waits for it "
                           "in {}",
                           peer, left->ended, trace::op_text(rec));
        }
      }
      std::string why = gone;
      if (!never_called.empty()) {
        const bool one = never_called.size() == 1;
        why = fmt::format(
            "{} {} left: {} returned from {} program (at the end-of-run barrier) after '{}' #{}, "
            "so {} will never call {} #{}, which this rank waits in",
            one ? fmt::format("rank {}", never_called[0])
                : fmt::format("ranks [{}]", fmt::join(never_called, ", ")),
            one ? "has" : "have", one ? "it" : "they", one ? "its" : "their", info.name, last_seq,
            one ? "it" : "they", rec.op, seq);
      }
      if (why.empty()) continue;
      if (options_.repair_in_place) {
        // A peer that left its program while this rank waits: in a job that repairs, one that
        // left with a dead rank's replica. The op fails now; the program shrinks around them.
        if (repaired_comms_.insert(info.uid).second) {
          log().warn(
              "{}; failing the op now so that this rank can repair "
              "(MESHRT_ON_RANK_FAILURE=continue)",
              why);
        }
        std::lock_guard lock(mu_);
        if (std::find(comms_.begin(), comms_.end(), comm) != comms_.end()) comm->abort();
        continue;
      }
      const int64_t since = rec.start_ns != 0 ? rec.start_ns : rec.enqueue_ns;
      trace::DumpTrigger t{
          info.global_rank, info.name, trace::trace_seq(rec), std::string(rec.op),
          fmt::format("{} (waited {} ms; {})", why, (now - since) / 1'000'000, sizes_text(rec))};
      t.op_text = trace::op_text(rec);
      fire(trace::DumpReason::kFailure, t);
      // Under throw and continue the op ends at its timeout, with its own error: aborting the
      // communicator here would fail it as merely "aborted".
      if (policy() == TimeoutPolicy::kAbort) exit_after_dumps();
      return;
    }
  } catch (const std::exception& e) {
    store_failed();
    log().debug("reading the peers' exit records failed: {}", e.what());
  }
}

void Watchdog::abort_ops_waiting_for_dead() {
  // Younger ops are left alone: most finish by then, and each look costs a store request.
  constexpr int64_t kWaitedNs = 100'000'000;
  if (!options_.repair_in_place) return;
  const int64_t now = trace::steady_now_ns();
  std::shared_ptr<Store> store;
  std::vector<std::pair<Watched*, std::shared_ptr<const trace::CommInfo>>> waiting;
  std::vector<int> members;
  {
    std::lock_guard lock(mu_);
    store = store_;
    if (!store) return;
    for (Watched* c : comms_) {
      auto rec = c->running_record();
      if (!rec || !rec->comm) continue;
      const int64_t since = rec->start_ns != 0 ? rec->start_ns : rec->enqueue_ns;
      if (since == 0 || now - since < kWaitedNs) continue;
      members.insert(members.end(), rec->comm->global_ranks.begin(), rec->comm->global_ranks.end());
      waiting.emplace_back(c, rec->comm);
    }
  }
  if (waiting.empty() || store_quiet()) return;
  std::sort(members.begin(), members.end());
  members.erase(std::unique(members.begin(), members.end()), members.end());
  try {
    const std::vector<int> dead = DeadRanks::instance().among(*store, members);
    if (dead.empty()) return;
    for (const auto& [comm, info] : waiting) {
      std::vector<int> gone;
      for (int g : info->global_ranks) {
        if (std::binary_search(dead.begin(), dead.end(), g)) gone.push_back(g);
      }
      if (gone.empty() || !repaired_comms_.insert(info->uid).second) continue;
      log().warn(
          "'{}': rank(s) [{}] died; failing its op in flight now so that this rank can "
          "repair (MESHRT_ON_RANK_FAILURE=continue)",
          info->name, fmt::join(gone, ", "));
      std::lock_guard lock(mu_);
      if (std::find(comms_.begin(), comms_.end(), comm) != comms_.end()) comm->abort();
    }
  } catch (const std::exception& e) {
    store_failed();
    log().debug("reading the job's dead ranks failed: {}", e.what());
  }
}

const Watchdog::LeftPeer* Watchdog::left_peer(Store& store, int peer, int64_t now) {
  if (auto it = left_peers_.find(peer); it != left_peers_.end()) return &it->second;
  const std::string key = exit_keys::rank(peer);
  if (!store.check(std::span<const std::string>(&key, 1))) return nullptr;
  const Bytes bytes = store.get(key, std::chrono::milliseconds(1000));
  const auto j = nlohmann::json::parse(bytes.begin(), bytes.end(), nullptr, false);
  LeftPeer left;
  left.seen_ns = now;
  if (j.is_object() && j.contains("ended") && j["ended"].is_string()) {
    left.ended = j["ended"].get<std::string>();
  } else if (j.is_object() && j.contains("comms") && j["comms"].is_object()) {
    for (const auto& [k, v] : j["comms"].items()) {
      if (v.is_number_integer()) left.last_collective[k] = v.get<int64_t>();
    }
  }
  return &left_peers_.emplace(peer, std::move(left)).first->second;
}

void Watchdog::poll_remote_signal() {
  // The watchdog thread and a leaving rank may both poll: one dumps, the other waits for it.
  std::lock_guard serial(poll_mu_);
  std::shared_ptr<Store> store;
  {
    std::lock_guard lock(mu_);
    store = store_;
  }
  if (!store || dumped_.load() || store_quiet()) return;
  try {
    const std::string key = kDumpSignal;
    if (!store->check(std::span<const std::string>(&key, 1))) return;
    const auto value = store->get(key, std::chrono::milliseconds(1000));
    // A rank's watchdog writes "<rank>"; meshrun, acting for a rank that cannot, "<rank>:<why>".
    const std::string signal(value.begin(), value.end());
    const size_t colon = signal.find(':');
    const std::string from = signal.substr(0, colon);
    trace::DumpTrigger t;
    t.rank = std::atoi(from.c_str());
    if (colon == std::string::npos) {
      log().error("rank {} signalled a flight recorder dump; dumping", from);
      t.detail = "dump signalled by rank " + from;
    } else {
      const std::string why = signal.substr(colon + 1);
      log().error("meshrun signalled a flight recorder dump because {}; dumping", why);
      t.detail = "dump signalled by meshrun because " + why;
    }
    job_failed_.store(true);
    dump_once(trace::DumpReason::kRemote, &t);
  } catch (const std::exception& e) {
    store_failed();
    log().debug("dump signal poll failed: {}", e.what());
  }
}

void Watchdog::poll_pipe() {
  if (options_.pipe_stem.empty()) return;
  if (pipe_fd_ < 0) {
    const auto ranks = trace::FlightRecorder::instance().local_ranks();
    if (ranks.empty()) return;
    const std::string path = options_.pipe_stem + std::to_string(ranks.front()) + ".pipe";
    if (::mkfifo(path.c_str(), 0600) != 0 && errno != EEXIST) {
      log().warn("cannot create dump pipe {}: {}", path, std::strerror(errno));
      options_.pipe_stem.clear();
      return;
    }
    // Read-write keeps the FIFO open between writers, so reads never see end-of-file.
    pipe_fd_ = ::open(path.c_str(), O_RDWR | O_NONBLOCK);
    if (pipe_fd_ < 0) return;
    log().info("write to {} to dump the flight recorder", path);
  }
  char buf[64];
  bool asked = false;
  while (::read(pipe_fd_, buf, sizeof(buf)) > 0) asked = true;
  if (asked) manual_dump(trace::DumpReason::kPipe);
}

void Watchdog::dump_once(trace::DumpReason reason, const trace::DumpTrigger* trigger) {
  // A rank's own failure and another rank's signal can arrive together: one dump, counted once.
  if (dump_claimed_.exchange(true)) {
    wait_dumped(options_.dump_wait);
    return;
  }
  auto& fr = trace::FlightRecorder::instance();
  std::vector<std::pair<int, std::string>> unwritten;
  const auto paths = fr.dump(reason, trigger, &unwritten);
  if (!paths.empty()) {
    log().error("flight recorder dumped to {}", fmt::join(paths, ", "));
  } else if (!fr.enabled()) {
    log().error("flight recorder is off (MESHRT_TRACE_BUFFER_SIZE=0): no dump");
  }
  std::shared_ptr<Store> store;
  {
    std::lock_guard lock(mu_);
    store = store_;
  }
  if (store) {
    // A dump that could not be written (a full disk) still reaches the post-mortem: meshrun
    // writes it where it can. Without it, the analysis would take this live rank for a dead one.
    for (const auto& [rank, text] : unwritten) {
      try {
        dump_keys::set_chunked(*store, dump_keys::unwritten(rank), text);
        log().error(
            "rank {}'s dump could not be written; handed to the launcher through the "
            "job's store",
            rank);
      } catch (const std::exception& e) {
        log().warn("cannot hand rank {}'s unwritten dump to the store: {}", rank, e.what());
      }
    }
    // Counts ranks done with their dump, written or not, so nobody waits for a dump that will
    // never come (recorder off, unwritable prefix).
    try {
      const std::vector<int> ranks = fr.local_ranks();
      for (const int r : ranks) dump_keys::count_dump_once(*store, r, "rank");
      if (ranks.empty()) store->add(kDumpsWritten, 1);  // No communicator: rank unknown.
    } catch (const std::exception& e) {
      log().warn("cannot count the dump in the store: {}", e.what());
    }
  }
  {
    std::lock_guard lock(mu_);
    dumped_.store(true);
  }
  dumped_cv_.notify_all();
}

void Watchdog::manual_dump(trace::DumpReason reason) {
  const auto paths = trace::FlightRecorder::instance().dump(reason);
  log().warn("flight recorder dumped on request to {}", fmt::join(paths, ", "));
}

void Watchdog::wait_for_all_dumps() {
  // Whoever hosts the store must not take it down before every rank's dump is counted, and
  // nobody should be killed by a launcher before it has dumped: wait for the count, bounded.
  std::shared_ptr<Store> store;
  int world_size = 0;
  {
    std::lock_guard lock(mu_);
    store = store_;
    world_size = world_size_;
  }
  if (!store || world_size <= 1) return;
  const auto deadline = std::chrono::steady_clock::now() + options_.dump_wait;
  try {
    while (store->add(kDumpsWritten, 0) < world_size) {
      if (std::chrono::steady_clock::now() >= deadline) {
        log().warn("not every rank counted its dump within {} ms", options_.dump_wait.count());
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  } catch (const std::exception& e) {
    log().warn("cannot count the other ranks' dumps: {}", e.what());
  }
}

void Watchdog::wait_for_post_mortem() {
  std::shared_ptr<Store> store;
  {
    std::lock_guard lock(mu_);
    store = store_;
  }
  if (!store) return;
  try {
    const std::string by = dump_keys::kPostMortemBy, done = dump_keys::kPostMortemDone;
    if (!store->check(std::span<const std::string>(&by, 1))) return;
    // meshtrace reads the dumps in well under a second; the bound is for a monitor gone astray.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!store->check(std::span<const std::string>(&done, 1))) {
      if (std::chrono::steady_clock::now() >= deadline) {
        log().warn("meshrt-monitor did not finish the post-mortem within 20 s");
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  } catch (const std::exception& e) {
    log().debug("cannot wait for the post-mortem: {}", e.what());
  }
}

bool Watchdog::wait_dumped(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  return dumped_cv_.wait_for(lock, timeout, [this] { return dumped_.load(); });
}

void Watchdog::fire(trace::DumpReason reason, const trace::DumpTrigger& trigger) {
  std::lock_guard serial(fire_mu_);
  if (fired_.exchange(true)) return;
  job_failed_.store(true);
  log().error(
      "watchdog: rank {}, comm '{}', {}: {}", trigger.rank, trigger.group,
      trigger.op_text.empty() ? fmt::format("{} #{}", trigger.op, trigger.seq) : trigger.op_text,
      trigger.detail);
  std::shared_ptr<Store> store;
  {
    std::lock_guard lock(mu_);
    store = store_;
  }
  if (store) {
    try {
      // The first rank to fire names itself; later ones leave its value.
      const std::string rank = std::to_string(trigger.rank);
      store->compare_set(kDumpSignal, {}, std::span<const char>(rank.data(), rank.size()));
    } catch (const std::exception& e) {
      log().warn("cannot signal the other ranks to dump: {}", e.what());
    }
  }
  dump_once(reason, &trigger);
}

void Watchdog::exit_after_dumps() {
  // The failing op's thread and the watchdog's scan can both get here: say it once.
  static std::atomic<bool> said{false};
  if (!said.exchange(true)) {
    log().critical("watchdog policy 'abort': aborting the communicators and exiting with status {}",
                   kWatchdogExitCode);
  }
  wait_for_all_dumps();
  wait_for_post_mortem();
  std::function<void(int)> exit;
  {
    std::lock_guard lock(mu_);
    for (Watched* c : comms_) c->abort();
    exit = exit_;
  }
  log().flush();
  std::fflush(nullptr);
  if (exit) exit(kWatchdogExitCode);
  ::_exit(kWatchdogExitCode);
}

void Watchdog::on_op_failed(const trace::OpRecord& rec, const std::string& error,
                            bool timed_out) noexcept {
  try {
    trace::DumpTrigger t{rec.comm->global_rank, rec.comm->name,
                         rec.is_p2p ? rec.p2p_seq : rec.collective_seq, std::string(rec.op), error};
    t.op_text = trace::op_text(rec);
    fire(timed_out ? trace::DumpReason::kTimeout : trace::DumpReason::kFailure, t);
    if (policy() == TimeoutPolicy::kAbort) exit_after_dumps();
  } catch (const std::exception& e) {
    log().error("watchdog failed handling an op failure: {}", e.what());
  }
}

}  // namespace meshrt
