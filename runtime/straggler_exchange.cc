#include "runtime/straggler_exchange.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <string>
#include <vector>

#include "runtime/error.h"
#include "runtime/store/store_protocol.h"
#include "trace/logging.h"

namespace meshrt {
namespace {

using store_protocol::FrameReader;
using store_protocol::FrameWriter;

// Far below the store's 64 MiB value limit, and small enough not to stall its io thread.
constexpr size_t kChunkBytes = size_t{1} << 20;
// Marks an encoding of RankSamples, then its version.
constexpr uint32_t kMagic = 0x4753524d;  // "MRSG"
constexpr uint32_t kVersion = 1;
// The least bytes a group (three empty strings and a member count) and a sample take.
constexpr size_t kMinGroupBytes = 16;
constexpr size_t kMinSampleBytes = 40;
// Keys are present once their rank published: this only bounds a stalled store.
constexpr std::chrono::milliseconds kReadTimeout{10000};
// At exit every arrived rank has published already: a short grace for the others.
constexpr std::chrono::milliseconds kExitCollectTimeout{1000};

std::string index_key(int rank) { return fmt::format("straggler/{}", rank); }
std::string chunk_key(int rank, size_t i) { return fmt::format("straggler/{}/{}", rank, i); }

// A frame in the store's wire format: the length prefix doubles as a truncation check.
std::vector<char> encode(const trace::RankSamples& rs) {
  std::vector<char> out;
  FrameWriter w(out);
  w.u32(kMagic);
  w.u32(kVersion);
  w.i64(rs.rank);
  w.bytes(rs.host);
  w.i64(static_cast<int64_t>(rs.dropped));
  w.u32(static_cast<uint32_t>(rs.groups.size()));
  for (const trace::StragglerGroup& g : rs.groups) {
    w.bytes(g.store_key);
    w.bytes(g.name);
    w.bytes(g.mesh_dim);
    w.u32(static_cast<uint32_t>(g.members.size()));
    for (int m : g.members) w.u32(static_cast<uint32_t>(m));
  }
  w.u32(static_cast<uint32_t>(rs.samples.size()));
  for (const trace::StragglerSample& s : rs.samples) {
    w.u32(s.group);
    w.bytes(s.op_name());
    w.i64(static_cast<int64_t>(s.seq));
    w.i64(static_cast<int64_t>(s.bytes));
    w.i64(s.arrival_wall_ns);
    w.i64(s.end_wall_ns);
  }
  w.finish();
  return out;
}

// Throws Error(kStore) when `frame` is not a whole encoding.
trace::RankSamples decode(std::span<const char> frame) {
  auto bad = [](const std::string& why) {
    return Error(ErrorCode::kStore, store_protocol::op_context("straggler.decode"), why);
  };
  if (frame.size() < store_protocol::kFrameHeaderBytes ||
      store_protocol::decode_u32(frame.data()) !=
          frame.size() - store_protocol::kFrameHeaderBytes) {
    throw bad("truncated samples");
  }
  FrameReader r(frame.subspan(store_protocol::kFrameHeaderBytes));
  if (r.u32() != kMagic || r.u32() != kVersion) throw bad("not straggler samples of version 1");
  trace::RankSamples rs;
  rs.rank = static_cast<int>(r.i64());
  rs.host = std::string(r.bytes());
  rs.dropped = static_cast<uint64_t>(r.i64());
  rs.groups.resize(r.count(kMinGroupBytes));
  for (trace::StragglerGroup& g : rs.groups) {
    g.store_key = std::string(r.bytes());
    g.name = std::string(r.bytes());
    g.mesh_dim = std::string(r.bytes());
    g.members.resize(r.count(4));
    for (int& m : g.members) m = static_cast<int>(r.u32());
  }
  rs.samples.resize(r.count(kMinSampleBytes));
  for (trace::StragglerSample& s : rs.samples) {
    s.group = r.u32();
    const std::string_view op = r.bytes();
    op.copy(s.op.data(), std::min(op.size(), s.op.size() - 1));
    s.seq = static_cast<uint64_t>(r.i64());
    s.bytes = static_cast<uint64_t>(r.i64());
    s.arrival_wall_ns = r.i64();
    s.end_wall_ns = r.i64();
  }
  if (r.remaining() != 0) throw bad("trailing bytes after the samples");
  return rs;
}

// The samples `rank` published, or nullopt (logged) when it published nothing readable. Store
// failures propagate.
std::optional<trace::RankSamples> read_rank(Store& store, int rank, const Bytes& index) {
  const std::string text = to_string(index);
  size_t chunks = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), chunks);
  if (ec != std::errc() || end != text.data() + text.size()) {
    log().warn("stragglers: rank {} published an unreadable chunk count '{}'", rank, text);
    return std::nullopt;
  }
  std::vector<std::string> keys;
  for (size_t i = 0; i < chunks; ++i) keys.push_back(chunk_key(rank, i));
  std::vector<char> frame;
  for (const Bytes& chunk : store.multi_get(keys, kReadTimeout)) {
    frame.insert(frame.end(), chunk.begin(), chunk.end());
  }
  try {
    trace::RankSamples rs = decode(frame);
    if (rs.rank == rank) return rs;
    log().warn("stragglers: the key of rank {} holds the samples of rank {}", rank, rs.rank);
  } catch (const Error& e) {
    log().warn("stragglers: the samples of rank {} are unreadable: {}", rank, e.detail());
  }
  return std::nullopt;
}

}  // namespace

bool publish_stragglers(Store& store, const trace::RankSamples& samples) {
  try {
    const std::vector<char> frame = encode(samples);
    size_t chunks = 0;
    for (size_t at = 0; at < frame.size(); at += kChunkBytes, ++chunks) {
      const size_t n = std::min(kChunkBytes, frame.size() - at);
      store.set(chunk_key(samples.rank, chunks), std::span<const char>(frame.data() + at, n));
    }
    store.set(index_key(samples.rank), as_bytes(std::to_string(chunks)));
    return true;
  } catch (const std::exception& e) {
    log().warn("stragglers: could not publish the samples of rank {}: {}", samples.rank, e.what());
    return false;
  }
}

std::optional<trace::StragglerReport> collect_stragglers(Store& store, int world_size,
                                                         std::chrono::milliseconds timeout,
                                                         size_t top_k) {
  try {
    std::vector<std::string> keys;
    for (int r = 0; r < world_size; ++r) keys.push_back(index_key(r));
    bool all_published = true;
    try {
      store.wait(keys, timeout);
    } catch (const Error& e) {
      if (e.code() != ErrorCode::kTimeout) throw;
      all_published = false;
    }
    // One request when every rank published; otherwise one check per rank finds who did not.
    std::vector<std::optional<Bytes>> index(world_size);
    if (all_published) {
      std::vector<Bytes> values = store.multi_get(keys, kReadTimeout);
      for (int r = 0; r < world_size; ++r) index[r] = std::move(values[r]);
    } else {
      for (int r = 0; r < world_size; ++r) {
        if (store.check(std::span<const std::string>(&keys[r], 1))) {
          index[r] = store.get(keys[r], kReadTimeout);
        }
      }
    }
    std::vector<trace::RankSamples> ranks;
    std::vector<int> missing;
    for (int r = 0; r < world_size; ++r) {
      std::optional<trace::RankSamples> rs;
      if (index[r]) rs = read_rank(store, r, *index[r]);
      if (rs) {
        ranks.push_back(std::move(*rs));
      } else {
        missing.push_back(r);
      }
    }
    trace::StragglerReport report = trace::analyze_stragglers(ranks, top_k);
    report.missing_ranks = std::move(missing);
    return report;
  } catch (const std::exception& e) {
    log().warn("stragglers: could not collect the samples: {}", e.what());
    return std::nullopt;
  }
}

void publish_stragglers_at_exit(Store& store, int rank) noexcept {
  trace::StragglerSink& sink = trace::StragglerSink::instance();
  if (!sink.enabled()) return;
  try {
    publish_stragglers(store, sink.samples(rank));
  } catch (const std::exception& e) {  // The snapshot's allocation.
    log().warn("stragglers: could not publish the samples of rank {}: {}", rank, e.what());
  }
}

void collect_stragglers_at_exit(Store& store, int rank, int world_size) noexcept {
  trace::StragglerSink& sink = trace::StragglerSink::instance();
  if (rank != 0 || !sink.enabled()) return;
  try {
    const trace::StragglerOptions o = sink.options();
    if (o.report_path.empty() && !o.print_table) return;  // Nothing would show the report.
    const auto report = collect_stragglers(store, world_size, kExitCollectTimeout, o.top_k);
    if (report) sink.write_report(*report);
  } catch (const std::exception& e) {  // Rendering the report.
    log().warn("stragglers: could not write the report: {}", e.what());
  }
}

}  // namespace meshrt
