#include "trace/flight_recorder.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>
#include <unordered_map>

#include "meshrt_config.h"
#include "trace/atomic_file.h"
#include "trace/dump.h"
#include "trace/dump_format.h"
#include "trace/env.h"
#include "trace/logging.h"
#include "trace/op_stack.h"
#include "trace/pickle_writer.h"
#include "trace/spin_lock.h"
#include "trace/thread_stacks.h"

namespace meshrt::trace {
namespace {

using Json = nlohmann::ordered_json;

namespace fr = dump_format;

// PyTorch ScalarType names, which its analyzer compares.
std::string_view torch_dtype(std::string_view dtype) {
  if (dtype == "f32") return "Float";
  if (dtype == "f64") return "Double";
  if (dtype == "f16") return "Half";
  if (dtype == "bf16") return "BFloat16";
  if (dtype == "i32") return "Int";
  if (dtype == "i64") return "Long";
  if (dtype == "u8") return "Byte";
  if (dtype == "i8") return "Char";
  if (dtype == "f8e4m3") return "Float8_e4m3fn";
  if (dtype == "f8e5m2") return "Float8_e5m2";
  return dtype;
}

Json dims_json(const Dims& d) {
  Json a = Json::array();
  for (size_t i = 0; i < d.ndim; ++i) a.push_back(d.size[i]);
  return a;
}

int global_of(const CommInfo& c, int group_rank) {
  return group_rank >= 0 && group_rank < static_cast<int>(c.global_ranks.size())
             ? c.global_ranks[group_rank]
             : -1;
}

std::string ranks_text(const std::vector<int>& ranks) {
  return fmt::format("[{}]", fmt::join(ranks, ", "));
}

class FileWriter : public DumpWriter {
 public:
  explicit FileWriter(std::string prefix) : prefix_(std::move(prefix)) {}
  std::optional<std::string> write(int rank, const std::string& bytes) override {
    const std::string path = prefix_ + std::to_string(rank);
    if (!write_output_file(path, bytes, "flight recorder dump")) return std::nullopt;
    return path;
  }

 private:
  std::string prefix_;
};

}  // namespace

std::string_view dump_reason_name(DumpReason reason) {
  switch (reason) {
    case DumpReason::kTimeout:
      return "timeout";
    case DumpReason::kFailure:
      return "failure";
    case DumpReason::kRemote:
      return "remote";
    case DumpReason::kSignal:
      return "signal";
    case DumpReason::kPipe:
      return "pipe";
    case DumpReason::kApi:
      return "api";
    case DumpReason::kHeartbeat:
      return "heartbeat";
    case DumpReason::kStall:
      return "stall";
    case DumpReason::kCrash:
      return "crash";
  }
  return "unknown";
}

FlightRecorderOptions flight_recorder_options_from_env() {
  FlightRecorderOptions o;
  o.capacity = static_cast<size_t>(env::get_int({"MESHRT_TRACE_BUFFER_SIZE", "TORCH_FR_BUFFER_SIZE",
                                                 "TORCH_NCCL_TRACE_BUFFER_SIZE"},
                                                0, int64_t{1} << 24)
                                       .value_or(static_cast<int64_t>(o.capacity)));
  o.dump_prefix =
      env::get({"MESHRT_DUMP_PREFIX", "TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"})
          .value_or(o.dump_prefix);
  if (env::get_choice({"MESHRT_DUMP_FORMAT"}, {"json", "pickle"}) == "pickle") {
    o.format = DumpFormat::kPickle;
  }
  return o;
}

// A slot is written by the enqueuing thread and then by the worker, and read by dumps: a spin
// lock per slot keeps those apart without any lock shared between ops.
struct FlightRecorder::Slot : SpinLock {
  OpRecord record;
};

FlightRecorder& FlightRecorder::instance() {
  // Leaked: ops may still complete on worker threads while static destructors run.
  static FlightRecorder* fr = [] {
    auto* r = new FlightRecorder(flight_recorder_options_from_env());
    if (r->enabled()) add_sink(std::shared_ptr<Sink>(r, [](Sink*) {}));
    return r;
  }();
  return *fr;
}

FlightRecorder::FlightRecorder(FlightRecorderOptions options)
    : options_(std::move(options)),
      capacity_(options_.capacity),
      slots_(capacity_ > 0 ? std::make_unique<Slot[]>(capacity_) : nullptr),
      writer_(std::make_shared<FileWriter>(options_.dump_prefix)) {}

FlightRecorder::~FlightRecorder() = default;

void FlightRecorder::register_comm(std::shared_ptr<const CommInfo> comm) {
  std::lock_guard lock(mu_);
  comms_.push_back(std::move(comm));
}

std::vector<std::shared_ptr<const CommInfo>> FlightRecorder::comms() const {
  std::lock_guard lock(mu_);
  return comms_;
}

void FlightRecorder::unregister_comm(const CommInfo* comm) {
  std::lock_guard lock(mu_);
  std::erase_if(comms_, [comm](const auto& c) { return c.get() == comm; });
}

void FlightRecorder::set_job_info(JobInfo info) {
  std::lock_guard lock(mu_);
  job_ = std::move(info);
}

void FlightRecorder::set_writer(std::shared_ptr<DumpWriter> writer) {
  std::lock_guard lock(mu_);
  writer_ = writer ? std::move(writer) : std::make_shared<FileWriter>(options_.dump_prefix);
}

FlightRecorder::Slot* FlightRecorder::slot_for(uint64_t record_id) const {
  return &slots_[record_id % capacity_];
}

void FlightRecorder::store(const OpRecord& record) {
  Slot* s = slot_for(record.record_id);
  s->lock();
  if (record.record_id >= s->record.record_id) s->record = record;
  s->unlock();
}

void FlightRecorder::update(const OpRecord& record) {
  // Only the life-cycle fields change after enqueue: copy those, not the whole record.
  Slot* s = slot_for(record.record_id);
  s->lock();
  if (s->record.record_id == record.record_id) {
    s->record.state = record.state;
    s->record.start_ns = record.start_ns;
    s->record.end_ns = record.end_ns;
    if (!record.error.empty()) s->record.error = record.error;
    s->record.cuda_graph_id = record.cuda_graph_id;  // Known once the launch returned.
  }
  s->unlock();
}

void FlightRecorder::set_device(std::string device) {
  std::lock_guard lock(mu_);
  device_ = std::move(device);
}

void FlightRecorder::on_enqueue(const OpRecord& record) {
  if (!enabled() || record.record_id == 0) return;
  store(record);
  uint64_t seen = highest_id_.load(std::memory_order_relaxed);
  while (seen < record.record_id &&
         !highest_id_.compare_exchange_weak(seen, record.record_id, std::memory_order_release)) {
  }
  if (!record.is_p2p && record.comm) {
    record.comm->progress->last_enqueued_collective.store(
        static_cast<int64_t>(record.collective_seq), std::memory_order_relaxed);
  }
}

void FlightRecorder::on_start(const OpRecord& record) {
  if (!enabled() || record.record_id == 0) return;
  update(record);
  if (!record.is_p2p && record.comm) {
    record.comm->progress->last_started_collective.store(
        static_cast<int64_t>(record.collective_seq), std::memory_order_relaxed);
  }
}

void FlightRecorder::on_end(const OpRecord& record) {
  if (!enabled() || record.record_id == 0) return;
  update(record);
  if (!record.is_p2p && record.comm && record.state == OpState::kCompleted) {
    record.comm->progress->last_completed_collective.store(
        static_cast<int64_t>(record.collective_seq), std::memory_order_relaxed);
  }
}

template <typename F>
void FlightRecorder::for_each_retained(F&& f) const {
  if (!enabled()) return;
  const uint64_t high = highest_id_.load(std::memory_order_acquire);
  const uint64_t low = high > capacity_ ? high - capacity_ + 1 : 1;
  for (uint64_t id = low; id <= high; ++id) {
    Slot* s = slot_for(id);
    s->lock();
    if (s->record.record_id == id && s->record.comm) f(s->record);
    s->unlock();
  }
}

std::vector<OpRecord> FlightRecorder::records(int rank) const {
  std::vector<OpRecord> out;
  for_each_retained([&](const OpRecord& r) {
    if (r.comm->global_rank == rank) out.push_back(r);
  });
  return out;
}

uint64_t FlightRecorder::dropped() const {
  const uint64_t high = highest_id_.load(std::memory_order_acquire);
  return high > capacity_ ? high - capacity_ : 0;
}

std::vector<int> FlightRecorder::local_ranks() const {
  std::set<int> ranks;
  {
    std::lock_guard lock(mu_);
    for (const auto& c : comms_) ranks.insert(c->global_rank);
  }
  if (ranks.empty()) {
    // Every communicator is gone (the rank is at its exit barrier): its records say who it is.
    for_each_retained([&](const OpRecord& r) { ranks.insert(r.comm->global_rank); });
  }
  return {ranks.begin(), ranks.end()};
}

namespace {

// One dump entry in PyTorch's key order, then meshrt's keys.
Json entry_json(const OpRecord& r, std::string_view type, std::string_view meta, const Dims* in,
                const Dims* out, bool closing, std::string_view member_dtype = {}) {
  const CommInfo& c = *r.comm;
  const auto wall = [&](int64_t steady_ns) {
    return steady_ns == 0 ? int64_t{0} : r.created_wall_ns + (steady_ns - r.enqueue_ns);
  };
  // Batch members stay "scheduled" with no times, as in PyTorch: only the closing entry carries
  // the batch's state.
  const bool timed = closing || r.op != "batch_p2p";
  const bool started = timed && r.start_ns != 0;
  const bool ended = timed && r.end_ns != 0;
  const std::string_view dtype = torch_dtype(member_dtype.empty() ? r.dtype : member_dtype);
  auto sizes = [&](const Dims* d) { return d ? Json::array({dims_json(*d)}) : Json::array(); };
  auto dtypes = [&](const Dims* d) { return d ? Json::array({dtype}) : Json::array(); };

  Json e;
  e[fr::kRecordId] = r.record_id;
  e[fr::kPgId] = c.uid;
  e[fr::kProcessGroup] = Json::array({c.name, c.description});
  e[fr::kThreadId] = std::to_string(r.thread_id);
  e[fr::kThreadName] = "";
  e[fr::kCollectiveSeqId] = r.collective_seq;
  e[fr::kP2pSeqId] = r.p2p_seq;
  e[fr::kOpId] = r.op_seq;
  e[fr::kProfilingName] = meta.empty() ? fmt::format("{}:{}", c.backend, type)
                                       : fmt::format("{}:{} {}", c.backend, type, meta);
  e[fr::kTimeCreatedNs] = r.created_wall_ns;
  if (ended) e[fr::kDurationMs] = static_cast<double>(run_ns(r)) / 1e6;
  e[fr::kInputSizes] = sizes(in);
  e[fr::kOutputSizes] = sizes(out);
  e[fr::kInputDtypes] = dtypes(in);
  e[fr::kOutputDtypes] = dtypes(out);
  e[fr::kState] = ended && r.state == OpState::kCompleted ? "completed"
                  : started                               ? "started"
                                                          : "scheduled";
  e[fr::kTimeDiscoveredStartedNs] = started ? wall(r.start_ns) : 0;
  e[fr::kTimeDiscoveredCompletedNs] = ended && r.state == OpState::kCompleted ? wall(r.end_ns) : 0;
  e[fr::kRetired] = ended;
  e[fr::kTimeoutMs] = r.timeout_ms;
  e[fr::kIsP2p] = r.is_p2p;
  e[fr::kMeshDim] = c.mesh_dim.empty() ? Json(nullptr) : Json(c.mesh_dim);
  e[fr::kGroupRanks] = c.global_ranks;
  e[fr::kGroupRank] = c.rank;
  e[fr::kEpoch] = c.epoch;
  e[fr::kCudaGraphId] = r.cuda_graph_id == 0 ? Json(nullptr) : Json(r.cuda_graph_id);
  e[fr::kScope] = r.scope && r.scope->depth > 0
                      ? fmt::format("{} / {}", r.scope->path, phase_name(r.scope->phase))
                      : std::string();
  return e;
}

Json stats_json(const TensorStats& s) {
  if (!s.valid) return nullptr;
  // JSON has no NaN: an all-NaN buffer's min, max and mean are null.
  auto num = [](double v) { return std::isnan(v) ? Json(nullptr) : Json(v); };
  return {{fr::kCount, s.count},    {fr::kMin, num(s.min)},  {fr::kMax, num(s.max)},
          {fr::kMean, num(s.mean)}, {fr::kNan, s.nan_count}, {fr::kInf, s.inf_count}};
}

// PyTorch's `frames` of a per-op stack: symbolised when a dump is rendered, each return address
// once per process (a recorder of thousands of ops has few distinct call sites).
Json frames_json(const OpStack& stack) {
  static std::mutex mu;
  static std::unordered_map<void*, std::vector<StackFrame>> known;
  Json frames = Json::array();
  std::lock_guard lock(mu);
  for (int i = 0; i < stack.depth; ++i) {
    auto it = known.find(stack.pcs[i]);
    if (it == known.end()) {
      it = known.emplace(stack.pcs[i], symbolise_stack({&stack.pcs[i], 1})).first;
    }
    for (const StackFrame& f : it->second) {
      frames.push_back({{fr::kName, f.function}, {fr::kFilename, f.file}, {fr::kLine, f.line}});
    }
  }
  return frames;
}

// `frames`: whether to symbolise per-op stacks; not in a crash dump's child, where a lock held by
// another thread of the crashed process (the symbol cache's, libbacktrace's) would never be freed.
void add_entries(Json& entries, const OpRecord& r, bool frames) {
  const CommInfo& c = *r.comm;
  const bool rooted = op_info(r.kind).rooted;
  auto finish = [&](Json e, int peer, uint64_t channel_seq) {
    e[fr::kPeer] = global_of(c, peer);
    e[fr::kRoot] = rooted ? global_of(c, r.root_or_peer) : -1;
    e[fr::kP2pChannelSeq] = channel_seq;
    e[fr::kReduceOp] = r.reduce_op;
    e[fr::kAlgorithm] = r.algorithm;
    e[fr::kError] = r.error;
    e[fr::kCaller] = *r.caller_file ? fmt::format("{}:{}", r.caller_file, r.caller_line) : "";
    if (r.stack && frames) e[fr::kFrames] = frames_json(*r.stack);
    if (r.debug) {
      e[fr::kInputStats] = stats_json(r.debug->input);
      // The worker writes the output statistics before the op completes, and the slot sees the
      // completion under its lock: read them only then.
      e[fr::kOutputStats] = r.state == OpState::kCompleted ? stats_json(r.debug->output) : nullptr;
    }
    entries.push_back(std::move(e));
  };
  Dims one_d;
  one_d.ndim = 1;
  if (r.kind == OpKind::kBatchP2P) {
    for (const P2PMember& m : r.batch ? *r.batch : std::vector<P2PMember>{}) {
      one_d.size[0] = static_cast<int64_t>(m.count);
      const std::string meta =
          m.is_send ? fmt::format("{}->{}", c.rank, m.peer) : fmt::format("{}<-{}", c.rank, m.peer);
      const OpKind member = m.is_send ? OpKind::kSend : OpKind::kRecv;
      finish(entry_json(r, op_kind_name(member), meta, &one_d, &one_d, false, m.dtype), m.peer,
             m.channel_seq);
    }
    finish(entry_json(r, "coalesced", "", nullptr, nullptr, true), -1, 0);
    return;
  }
  if (r.kind == OpKind::kCoalesced) {
    finish(entry_json(r, "coalesced", "", nullptr, nullptr, true), -1, 0);
    return;
  }
  if (r.kind == OpKind::kBarrier) {
    finish(entry_json(r, "all_reduce_barrier", "", nullptr, nullptr, false), -1, 0);
    return;
  }
  if (r.kind == OpKind::kSend || r.kind == OpKind::kRecv) {
    const std::string meta = r.kind == OpKind::kSend
                                 ? fmt::format("{}->{}", c.rank, r.root_or_peer)
                                 : fmt::format("{}<-{}", c.rank, r.root_or_peer);
    finish(entry_json(r, r.op, meta, &r.input_shape, &r.output_shape, false), r.root_or_peer,
           r.p2p_channel_seq);
    return;
  }
  finish(entry_json(r, r.op, "", &r.input_shape, &r.output_shape, false), -1, 0);
}

std::string host_name() {
  char buf[256] = {};
  ::gethostname(buf, sizeof(buf) - 1);
  return buf;
}

}  // namespace

std::string FlightRecorder::render(int rank, DumpFormat format, DumpReason reason,
                                   const DumpTrigger* trigger) const {
  const std::vector<OpRecord> recs = records(rank);
  std::vector<std::shared_ptr<const CommInfo>> comms;
  JobInfo job;
  std::string device;
  {
    std::lock_guard lock(mu_);
    job = job_;
    device = device_;
    for (const auto& c : comms_) {
      if (c->global_rank == rank) comms.push_back(c);
    }
  }
  // Communicators seen only in records (already destroyed) still describe their entries; they go
  // first, so that a live group of the same name (a re-created world) wins in pg_config.
  std::vector<std::shared_ptr<const CommInfo>> dead;
  for (const auto& r : recs) {
    const auto same = [&](const auto& c) { return c == r.comm; };
    if (std::none_of(comms.begin(), comms.end(), same) &&
        std::none_of(dead.begin(), dead.end(), same)) {
      dead.push_back(r.comm);
    }
  }
  comms.insert(comms.begin(), dead.begin(), dead.end());
  int world_size = job.world_size;
  std::string backend;
  for (const auto& c : comms) {
    world_size = std::max(world_size, static_cast<int>(c->global_ranks.size()));
    if (backend.empty()) backend = c->backend_version.empty() ? c->backend : c->backend_version;
  }

  Json doc;
  doc[fr::kVersion] = fr::kSchemaVersion;
  doc[fr::kMeshrtDumpVersionKey] = fr::kMeshrtDumpVersion;
  doc[fr::kProducer] = std::string("meshrt ") + MESHRT_VERSION;
  doc[fr::kCommLibVersion] = backend;
  doc[fr::kRank] = rank;
  doc[fr::kWorldSize] = world_size;
  doc[fr::kHost] = host_name();
  doc[fr::kPid] = trigger != nullptr && trigger->pid > 0 ? trigger->pid : ::getpid();
  doc[fr::kDevice] = device.empty() ? Json(nullptr) : Json(device);
  doc[fr::kRunId] = job.run_id;
  doc[fr::kDumpReason] = dump_reason_name(reason);
  doc[fr::kTrigger] = trigger ? Json{{fr::kRank, trigger->rank},
                                     {fr::kGroup, trigger->group},
                                     {fr::kSeq, trigger->seq},
                                     {fr::kOp, trigger->op},
                                     {fr::kDetail, trigger->detail}}
                              : Json(nullptr);
  doc[fr::kClock] = {{fr::kWallNs, wall_now_ns()}, {fr::kSteadyNs, steady_now_ns()}};
  doc[fr::kBufferSize] = capacity_;
  doc[fr::kRecordsDropped] = dropped();
  Json mesh_dims = Json::object();
  Json pg_config = Json::object();
  Json pg_status = Json::object();
  for (const auto& c : comms) {
    pg_config[c->name] = {{fr::kName, c->name},
                          {fr::kPgId, c->uid},
                          {fr::kDesc, c->description},
                          {fr::kRanks, ranks_text(c->global_ranks)},
                          {fr::kStoreKey, c->store_key},
                          {fr::kEpoch, c->epoch},
                          {fr::kMeshDim, c->mesh_dim.empty() ? Json(nullptr) : Json(c->mesh_dim)}};
    pg_status[std::to_string(c->uid)] = {
        {fr::kLastEnqueuedCollective, std::to_string(c->progress->last_enqueued_collective.load())},
        {fr::kLastStartedCollective, std::to_string(c->progress->last_started_collective.load())},
        {fr::kLastCompletedCollective,
         std::to_string(c->progress->last_completed_collective.load())}};
    if (!c->mesh_dim.empty()) {
      mesh_dims[c->mesh_dim] = {{fr::kGroup, c->name}, {fr::kGroupRanks, c->global_ranks}};
    }
  }
  // Each epoch's members, so that a reader sees who took part before and after a repair.
  std::map<int, std::pair<std::set<int>, std::vector<std::string>>> epochs;
  for (const auto& c : comms) {
    auto& [ranks, groups] = epochs[c->epoch];
    ranks.insert(c->global_ranks.begin(), c->global_ranks.end());
    groups.push_back(c->name);
  }
  Json epoch_list = Json::array();
  for (const auto& [epoch, members] : epochs) {
    epoch_list.push_back(
        {{fr::kEpoch, epoch}, {fr::kRanks, members.first}, {fr::kGroups, members.second}});
  }
  doc[fr::kEpochs] = std::move(epoch_list);
  doc[fr::kMeshDims] = std::move(mesh_dims);
  doc[fr::kPgConfig] = std::move(pg_config);
  doc[fr::kPgStatus] = std::move(pg_status);
  if (reason != DumpReason::kCrash) {
    Json threads = Json::array();
    for (const ThreadStack& t : capture_thread_stacks()) {
      Json frames = Json::array();
      for (const StackFrame& f : t.frames) {
        frames.push_back({{"function", f.function}, {"file", f.file}, {"line", f.line}});
      }
      threads.push_back({{"tid", t.tid},
                         {"name", t.name},
                         {"main", t.main},
                         {"answered", t.answered},
                         {"frames", std::move(frames)}});
    }
    doc[fr::kMeshrtThreads] = std::move(threads);
  }
  Json entries = Json::array();
  for (const auto& r : recs) add_entries(entries, r, reason != DumpReason::kCrash);

  // Names, scopes, paths and error texts come from users and libraries: invalid UTF-8 in any of
  // them must not cost the dump, so it is replaced rather than thrown on.
  if (format == DumpFormat::kJson) {
    if (!entries.empty()) doc[fr::kEntries] = std::move(entries);
    return doc.dump(1, ' ', false, Json::error_handler_t::replace);
  }
  // PyTorch's pickle: unknown discovery times are None, entries are always present, and the
  // optional `frames` (which its JSON never has) hold the op's stack (MESHRT_TRACE_STACKS) or the
  // one frame meshrt always knows: the caller.
  for (auto& e : entries) {
    for (const std::string_view k :
         {fr::kTimeDiscoveredStartedNs, fr::kTimeDiscoveredCompletedNs}) {
      if (e[k] == 0) e[k] = nullptr;
    }
    if (e.contains(fr::kFrames)) continue;
    Json frames = Json::array();
    if (const std::string caller = e[fr::kCaller]; !caller.empty()) {
      const auto colon = caller.rfind(':');
      frames.push_back({{fr::kName, e[fr::kProfilingName]},
                        {fr::kFilename, caller.substr(0, colon)},
                        {fr::kLine, std::atoi(caller.c_str() + colon + 1)}});
    }
    e[fr::kFrames] = std::move(frames);
  }
  doc[fr::kEntries] = std::move(entries);
  return to_pickle(doc, {std::string(fr::kProcessGroup)});
}

std::vector<std::string> FlightRecorder::dump(
    DumpReason reason, const DumpTrigger* trigger,
    std::vector<std::pair<int, std::string>>* unwritten) noexcept {
  std::vector<std::string> paths;
  if (!enabled()) return paths;
  try {
    std::lock_guard serial(dump_mu_);
    std::shared_ptr<DumpWriter> writer;
    {
      std::lock_guard lock(mu_);
      writer = writer_;
    }
    for (int rank : local_ranks()) {
      std::string text = render(rank, options_.format, reason, trigger);
      if (auto path = writer->write(rank, text)) {
        paths.push_back(*path);
      } else if (unwritten != nullptr) {
        unwritten->emplace_back(rank, std::move(text));
      }
    }
  } catch (const std::exception& e) {
    log().error("flight recorder dump failed: {}", e.what());
  }
  return paths;
}

std::vector<std::string> dump_flight_recorder() {
  return FlightRecorder::instance().dump(DumpReason::kApi);
}

}  // namespace meshrt::trace
