#include "trace/analyze/dump_reader.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <functional>
#include <map>
#include <thread>
#include <unordered_map>

#include "trace/analyze/json_cursor.h"
#include "trace/analyze/op_types.h"
#include "trace/analyze/pickle_reader.h"
#include "trace/dump_format.h"

namespace meshrt::trace {
namespace {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

namespace fr = dump_format;

// `k == name`, the lengths compared first: keys are compared a hundred million times per
// analysis, and inlined with a constant `name` the compare is a few word loads, not a call.
inline bool is(std::string_view k, std::string_view name) {
  return k.size() == name.size() && std::memcmp(k.data(), name.data(), name.size()) == 0;
}

// The entry keys the reader uses.
enum class EntryKey : uint8_t {
  kOther,
  kPeer,
  kState,
  kScope,
  kIsP2p,
  kCaller,
  kFrames,
  kRecordId,
  kP2pSeqId,
  kInputSizes,
  kGroupRanks,
  kOutputSizes,
  kInputDtypes,
  kOutputDtypes,
  kProcessGroup,
  kProfilingName,
  kTimeCreatedNs,
  kP2pChannelSeq,
  kCollectiveSeqId,
  kTimeDiscoveredStartedNs,
};

constexpr std::pair<std::string_view, EntryKey> kEntryKeys[] = {
    {fr::kPeer, EntryKey::kPeer},
    {fr::kState, EntryKey::kState},
    {fr::kScope, EntryKey::kScope},
    {fr::kIsP2p, EntryKey::kIsP2p},
    {fr::kCaller, EntryKey::kCaller},
    {fr::kFrames, EntryKey::kFrames},
    {fr::kRecordId, EntryKey::kRecordId},
    {fr::kP2pSeqId, EntryKey::kP2pSeqId},
    {fr::kInputSizes, EntryKey::kInputSizes},
    {fr::kGroupRanks, EntryKey::kGroupRanks},
    {fr::kOutputSizes, EntryKey::kOutputSizes},
    {fr::kInputDtypes, EntryKey::kInputDtypes},
    {fr::kOutputDtypes, EntryKey::kOutputDtypes},
    {fr::kProcessGroup, EntryKey::kProcessGroup},
    {fr::kProfilingName, EntryKey::kProfilingName},
    {fr::kTimeCreatedNs, EntryKey::kTimeCreatedNs},
    {fr::kP2pChannelSeq, EntryKey::kP2pChannelSeq},
    {fr::kCollectiveSeqId, EntryKey::kCollectiveSeqId},
    {fr::kTimeDiscoveredStartedNs, EntryKey::kTimeDiscoveredStartedNs},
};

// kEntryKeys' indices by key length (at most 3 keys share one; -1 ends a list), so that a key
// costs one lookup and a compare or two: a chain of 20 compares per key would cost more than the
// rest of the parse.
constexpr size_t kMaxKeyLength = 26;
using KeysOfLength = std::array<int8_t, 4>;
constexpr std::array<KeysOfLength, kMaxKeyLength + 1> kKeysByLength = [] {
  std::array<KeysOfLength, kMaxKeyLength + 1> table{};
  for (KeysOfLength& keys : table) keys.fill(-1);
  for (size_t i = 0; i < std::size(kEntryKeys); ++i) {
    KeysOfLength& keys = table.at(kEntryKeys[i].first.size());  // Too long: not a constant.
    size_t n = 0;
    while (keys[n] >= 0) ++n;
    keys.at(n) = static_cast<int8_t>(i);  // A fourth key of one length: not a constant.
  }
  return table;
}();

EntryKey entry_key(std::string_view k) {
  if (k.size() > kMaxKeyLength) return EntryKey::kOther;
  for (const int8_t i : kKeysByLength[k.size()]) {
    if (i < 0) break;
    if (std::memcmp(k.data(), kEntryKeys[i].first.data(), k.size()) == 0) {
      return kEntryKeys[i].second;
    }
  }
  return EntryKey::kOther;
}

// "[0, 1, 2]" (c10d), "[0,1]" (torchcomms) or "0,1": the global ranks of a pg_config entry.
std::vector<int> parse_rank_list(std::string_view text) {
  std::vector<int> ranks;
  for (size_t i = 0; i < text.size();) {
    const char c = text[i];
    if (c >= '0' && c <= '9') {
      int v = 0;
      const auto r = std::from_chars(text.data() + i, text.data() + text.size(), v);
      if (r.ec != std::errc()) throw InputError(fmt::format("bad rank list '{}'", text));
      if (v >= kMaxWorldSize)
        throw InputError(fmt::format("rank {} in '{}' is too large", v, text));
      ranks.push_back(v);
      i = r.ptr - text.data();
    } else if (c == '[' || c == ']' || c == ',' || c == ' ') {
      ++i;
    } else {
      throw InputError(fmt::format("bad rank list '{}'", text));
    }
  }
  return ranks;
}

class DumpParser {
 public:
  DumpParser(std::string_view text, int rank) : cur_(text) {
    dump_.rank = rank;
    dump_.symbols.emplace_back();
    symbol_ids_.emplace("", 0);
  }

  RankDump run() {
    bool has_version = false;
    bool has_pg_config = false;
    std::string_view key;
    if (cur_.peek() != JsonKind::kObject) {
      throw InputError("not a flight-recorder dump: the top level is not an object");
    }
    cur_.begin_object();
    while (cur_.next_key(key)) {
      if (is(key, fr::kVersion)) {
        dump_.version = cur_.read_string();
        has_version = true;
      } else if (is(key, fr::kMeshrtDumpVersionKey)) {
        dump_.meshrt_dump_version = cur_.read_int();
      } else if (is(key, fr::kRank)) {
        file_rank_ = cur_.read_int();
      } else if (is(key, fr::kWorldSize)) {
        dump_.world_size = cur_.read_int();
        if (*dump_.world_size < 1 || *dump_.world_size > kMaxWorldSize) {
          throw InputError(fmt::format("{} {} is outside 1..{}", fr::kWorldSize, *dump_.world_size,
                                       kMaxWorldSize));
        }
      } else if (is(key, fr::kRecordsDropped)) {
        dump_.records_dropped = cur_.read_int();
      } else if (is(key, fr::kPgConfig)) {
        parse_pg_config();
        has_pg_config = true;
      } else if (is(key, fr::kEntries)) {
        parse_entries();
      } else if (is(key, fr::kMeshrtThreads) && cur_.peek() == JsonKind::kArray) {
        parse_threads();
      } else {
        cur_.skip_value();
      }
    }
    cur_.expect_end();
    if (!has_version) {
      throw InputError(fmt::format("not a flight-recorder dump: no '{}'", fr::kVersion));
    }
    if (!has_pg_config) {
      throw InputError(fmt::format("not a flight-recorder dump: no '{}'", fr::kPgConfig));
    }
    if (file_rank_ && *file_rank_ != dump_.rank) {
      throw InputError(fmt::format("the dump says rank {} but its file name gives rank {}",
                                   *file_rank_, dump_.rank));
    }
    resolve();
    return std::move(dump_);
  }

 private:
  // Per-entry facts that need pg_config, which may come after the entries.
  struct Unresolved {
    uint32_t group_name = 0;
    PoolSpan group_ranks;
    int local_peer = -1;  // From profiling_name's meta, in group-local ranks.
  };

  uint32_t intern(std::string_view s) {
    // Entries repeat a few strings (op, dtype, caller) thousands of times: a small cache in
    // front of the hash map saves hashing most of them.
    CacheSlot& slot =
        cache_[(s.size() * 31 + (s.empty() ? 0
                                           : static_cast<unsigned char>(s.front()) * 7u +
                                                 static_cast<unsigned char>(s.back()))) %
               cache_.size()];
    if (slot.id != 0 && slot.text == s) return slot.id;
    const auto it = symbol_ids_.find(s);
    uint32_t id = 0;
    if (it != symbol_ids_.end()) {
      id = it->second;
    } else {
      if (dump_.symbols.size() > kMaxStringsPerDump) {
        throw InputError(fmt::format(
            "the dump holds more than {} distinct strings (op names, dtypes, callers, scopes, "
            "group names)",
            kMaxStringsPerDump));
      }
      id = static_cast<uint32_t>(dump_.symbols.size());
      dump_.symbols.emplace_back(s);
      symbol_ids_.emplace(std::string(s), id);
    }
    slot.text = s;
    slot.id = id;
    return id;
  }

  int64_t read_int_or_zero() { return cur_.read_null() ? 0 : cur_.read_int(); }

  // A global rank, checked before it is narrowed; resolve() checks it against world_size.
  int read_rank() {
    const int64_t r = cur_.read_int();
    if (r < 0 || r >= kMaxWorldSize) throw InputError(fmt::format("rank {} is out of range", r));
    return static_cast<int>(r);
  }

  std::optional<std::string> read_optional_string() {
    if (cur_.read_null()) return std::nullopt;
    return std::string(cur_.read_string());
  }

  // meshrt_threads: only the main thread's frames are kept, formatted, a bounded number of
  // bounded strings (the dump is untrusted).
  void parse_threads() {
    constexpr size_t kMaxFrames = 8;
    constexpr size_t kMaxText = 200;
    std::string_view key;
    cur_.begin_array();
    while (cur_.next_element()) {
      if (cur_.peek() != JsonKind::kObject) {
        cur_.skip_value();
        continue;
      }
      bool main = false;
      bool answered = true;  // Dumps before "answered" was written had only answered threads.
      std::vector<std::string> frames;
      cur_.begin_object();
      while (cur_.next_key(key)) {
        if (key == "main" && cur_.peek() == JsonKind::kBool) {
          main = cur_.read_bool();
        } else if (key == "answered" && cur_.peek() == JsonKind::kBool) {
          answered = cur_.read_bool();
        } else if (key == "frames" && cur_.peek() == JsonKind::kArray) {
          cur_.begin_array();
          while (cur_.next_element()) {
            if (cur_.peek() != JsonKind::kObject) {
              cur_.skip_value();
              continue;
            }
            std::string_view function, file;
            int64_t line = 0;
            cur_.begin_object();
            while (cur_.next_key(key)) {
              if (key == "function" && cur_.peek() == JsonKind::kString) {
                function = cur_.read_string().substr(0, kMaxText);
              } else if (key == "file" && cur_.peek() == JsonKind::kString) {
                file = cur_.read_string().substr(0, kMaxText);
              } else if (key == "line" && cur_.peek() == JsonKind::kNumber) {
                line = cur_.read_int();
              } else {
                cur_.skip_value();
              }
            }
            if (frames.size() == kMaxFrames) continue;
            file = file.substr(file.rfind('/') + 1);
            frames.push_back(line > 0 ? fmt::format("{} ({}:{})", function, file, line)
                                      : std::string(function.empty() ? "??" : function));
          }
        } else {
          cur_.skip_value();
        }
      }
      if (main) {
        dump_.main_stack = answered ? fmt::format("{}", fmt::join(frames, " <- "))
                                    : "(no stack: the thread did not answer in time)";
      }
    }
  }

  void parse_pg_config() {
    std::string_view key;
    cur_.begin_object();
    while (cur_.next_key(key)) {
      DumpGroup group;
      group.name = key;
      cur_.begin_object();
      while (cur_.next_key(key)) {
        if (is(key, fr::kName)) {
          group.name = cur_.read_string();
        } else if (is(key, fr::kDesc)) {
          group.desc = cur_.read_string();
        } else if (is(key, fr::kRanks)) {
          if (cur_.peek() == JsonKind::kArray) {
            cur_.begin_array();
            while (cur_.next_element()) group.ranks.push_back(read_rank());
          } else {
            group.ranks = parse_rank_list(cur_.read_string());
          }
        } else if (is(key, fr::kMeshDim)) {
          group.mesh_dim = read_optional_string();
        } else if (is(key, fr::kEpoch)) {
          group.epoch = cur_.read_int();
        } else {
          cur_.skip_value();
        }
      }
      if (dump_.groups.size() == kMaxGroupsPerDump) throw too_many_groups();
      const uint32_t name = intern(group.name);
      if (listed_.size() <= name) listed_.resize(name + 1, false);
      listed_[name] = true;
      dump_.groups.push_back(std::move(group));
    }
  }

  static InputError too_many_groups() {
    return InputError(fmt::format("the dump names more than {} groups", kMaxGroupsPerDump));
  }

  // The group name (a symbol) is in pg_config as parsed so far.
  bool listed(uint32_t name) const { return name != 0 && name < listed_.size() && listed_[name]; }

  PoolSpan parse_shapes() {
    PoolSpan span{.offset = static_cast<uint32_t>(dump_.pool.size())};
    cur_.begin_array();
    while (cur_.next_element()) {
      const size_t ndim_at = dump_.pool.size();
      dump_.pool.push_back(0);
      cur_.begin_array();
      while (cur_.next_element()) {
        dump_.pool.push_back(cur_.read_int());
        ++dump_.pool[ndim_at];
      }
    }
    span.size = static_cast<uint32_t>(dump_.pool.size() - span.offset);
    return span;
  }

  PoolSpan parse_dtypes() {
    PoolSpan span{.offset = static_cast<uint32_t>(dump_.pool.size())};
    cur_.begin_array();
    while (cur_.next_element()) dump_.pool.push_back(intern(cur_.read_string()));
    span.size = static_cast<uint32_t>(dump_.pool.size() - span.offset);
    return span;
  }

  // "gloo:send 0->1": the op and, for p2p, the peer's group-local rank.
  void parse_profiling_name(std::string_view name, DumpEntry& e, Unresolved& u) {
    const size_t colon = name.find(':');
    if (colon != std::string_view::npos) name.remove_prefix(colon + 1);
    const size_t space = name.find(' ');
    e.type = intern(name.substr(0, space));
    if (space == std::string_view::npos) return;
    const std::string_view meta = name.substr(space + 1);
    size_t arrow = meta.find("->");
    if (arrow == std::string_view::npos) arrow = meta.find("<-");
    if (arrow == std::string_view::npos) return;
    const std::string_view peer = meta.substr(arrow + 2);
    if (peer == "?") {
      e.any_source = true;
      return;
    }
    int local = -1;
    const auto r = std::from_chars(peer.data(), peer.data() + peer.size(), local);
    if (r.ec == std::errc()) u.local_peer = local;
  }

  void parse_frames(DumpEntry& e) {
    std::string_view key;
    cur_.begin_array();
    while (cur_.next_element()) {
      if (e.caller != 0) {
        cur_.skip_value();
        continue;
      }
      std::string file;
      int64_t line = 0;
      cur_.begin_object();
      while (cur_.next_key(key)) {
        if (is(key, fr::kFilename)) {
          file = cur_.read_string();
        } else if (is(key, fr::kLine)) {
          line = cur_.read_int();
        } else {
          cur_.skip_value();
        }
      }
      e.caller = intern(fmt::format("{}:{}", file, line));
    }
  }

  void parse_state(std::string_view s, DumpEntry& e) {
    for (const EntryState state :
         {EntryState::kCompleted, EntryState::kStarted, EntryState::kScheduled}) {
      if (s == entry_state_name(state)) {
        e.state = state;
        return;
      }
    }
    throw InputError(fmt::format("entry {}: unknown state '{}'", dump_.entries.size(), s));
  }

  // The op symbol `type` names a send or a recv (cached: every entry asks).
  bool channel_op(uint32_t type) {
    if (channel_op_.size() <= type) channel_op_.resize(dump_.symbols.size(), -1);
    if (channel_op_[type] < 0) channel_op_[type] = op_type(dump_.symbols[type]).channel_op();
    return channel_op_[type] == 1;
  }

  // Dispatches on the key through entry_key().
  void parse_entry() {
    DumpEntry e;
    Unresolved u;
    std::string_view key;
    int64_t peer = -1;
    bool has_is_p2p = false;
    bool has_name = false;
    cur_.begin_object();
    while (cur_.next_key(key)) {
      switch (entry_key(key)) {
        case EntryKey::kPeer:
          peer = cur_.read_int();
          if (peer < -1 || peer >= kMaxWorldSize) {
            throw InputError(
                fmt::format("entry {}: peer {} is out of range", dump_.entries.size(), peer));
          }
          continue;
        case EntryKey::kState:
          parse_state(cur_.read_string(), e);
          continue;
        case EntryKey::kScope:
          e.scope = intern(cur_.read_string());
          continue;
        case EntryKey::kIsP2p:
          e.is_p2p = cur_.read_bool();
          has_is_p2p = true;
          continue;
        case EntryKey::kCaller:
          if (const uint32_t c = intern(cur_.read_string()); c != 0) e.caller = c;
          continue;
        case EntryKey::kFrames:
          parse_frames(e);
          continue;
        case EntryKey::kRecordId:
          e.record_id = cur_.read_int();
          continue;
        case EntryKey::kP2pSeqId:
          e.p2p_seq = cur_.read_int();
          continue;
        case EntryKey::kInputSizes:
          e.input_sizes = parse_shapes();
          continue;
        case EntryKey::kGroupRanks:
          // Needed only for a group pg_config does not list; in a world of thousands it is the
          // longest value of the entry.
          if (listed(u.group_name)) break;
          u.group_ranks.offset = static_cast<uint32_t>(dump_.pool.size());
          cur_.begin_array();
          while (cur_.next_element()) dump_.pool.push_back(read_rank());
          u.group_ranks.size = static_cast<uint32_t>(dump_.pool.size() - u.group_ranks.offset);
          continue;
        case EntryKey::kOutputSizes:
          e.output_sizes = parse_shapes();
          continue;
        case EntryKey::kInputDtypes:
          e.input_dtypes = parse_dtypes();
          continue;
        case EntryKey::kOutputDtypes:
          e.output_dtypes = parse_dtypes();
          continue;
        case EntryKey::kProcessGroup:
          cur_.begin_array();
          if (!cur_.next_element()) throw InputError(fmt::format("empty {}", fr::kProcessGroup));
          u.group_name = intern(cur_.read_string());
          while (cur_.next_element()) cur_.skip_value();
          continue;
        case EntryKey::kProfilingName:
          parse_profiling_name(cur_.read_string(), e, u);
          has_name = true;
          continue;
        case EntryKey::kTimeCreatedNs:
          e.time_created_ns = read_int_or_zero();
          continue;
        case EntryKey::kP2pChannelSeq:
          e.channel_seq = cur_.read_int();
          continue;
        case EntryKey::kCollectiveSeqId:
          e.collective_seq = cur_.read_int();
          continue;
        case EntryKey::kTimeDiscoveredStartedNs:
          if (read_int_or_zero() > 0) dump_.records_starts = true;
          continue;
        case EntryKey::kOther:
          break;
      }
      cur_.skip_value();
    }
    if (e.state == EntryState::kStarted) dump_.records_starts = true;
    // Without it an entry can be matched to nothing; refusing at once also keeps a file of
    // empty objects (3 bytes each) from costing an entry's hundred-odd bytes apiece. (An entry
    // without process_group is an entry of group "", which resolve() judges.)
    if (!has_name) {
      throw InputError(
          fmt::format("entry {} has no '{}'", dump_.entries.size(), fr::kProfilingName));
    }
    const bool p2p_type = channel_op(e.type);
    if (!has_is_p2p) e.is_p2p = p2p_type;
    if (p2p_type && peer >= 0) {
      e.peer = static_cast<int32_t>(peer);
      u.local_peer = -1;
    }
    dump_.entries.push_back(e);
    unresolved_.push_back(u);
  }

  void parse_entries() {
    cur_.begin_array();
    while (cur_.next_element()) parse_entry();
  }

  // Entries to their group (by name, as pg_config lists it for this rank) and p2p peers named
  // only by group-local rank to global ranks (sorted(pg ranks)[local], as torchfrtrace maps them).
  void resolve() {
    check_ranks();
    // Owned keys: a group added below may move the names of those before it (short strings
    // live inside DumpGroup, which the vector relocates). Looked up without a copy.
    std::unordered_map<std::string, uint32_t, StringHash, std::equal_to<>> by_name;
    for (size_t g = 0; g < dump_.groups.size(); ++g) {
      by_name.emplace(dump_.groups[g].name, static_cast<uint32_t>(g));
    }
    std::vector<std::vector<int>> sorted_ranks;
    for (size_t i = 0; i < dump_.entries.size(); ++i) {
      DumpEntry& e = dump_.entries[i];
      const Unresolved& u = unresolved_[i];
      const std::string_view name = dump_.symbols[u.group_name];
      auto it = by_name.find(name);
      if (it == by_name.end()) {
        if (u.group_ranks.size == 0) {
          throw InputError(
              fmt::format("entry {} names group '{}' that pg_config does not list", i, name));
        }
        if (dump_.groups.size() == kMaxGroupsPerDump) throw too_many_groups();
        DumpGroup group;
        group.name = name;
        for (const int64_t r : dump_.span(u.group_ranks))
          group.ranks.push_back(static_cast<int>(r));
        dump_.groups.push_back(std::move(group));
        it = by_name.emplace(dump_.groups.back().name, dump_.groups.size() - 1).first;
      }
      e.group = it->second;
      if (u.local_peer >= 0) {
        if (sorted_ranks.size() <= e.group) sorted_ranks.resize(dump_.groups.size());
        auto& sorted = sorted_ranks[e.group];
        if (sorted.empty()) {
          sorted = dump_.groups[e.group].ranks;
          std::sort(sorted.begin(), sorted.end());
        }
        if (static_cast<size_t>(u.local_peer) >= sorted.size()) {
          throw InputError(fmt::format("entry {}: peer {} is outside group '{}' of {} ranks", i,
                                       u.local_peer, name, sorted.size()));
        }
        e.peer = sorted[u.local_peer];
      } else if (e.peer >= 0) {
        // A global peer outside the group would index past what the group's ranks size.
        const std::vector<int>& ranks = dump_.groups[e.group].ranks;
        if (std::find(ranks.begin(), ranks.end(), e.peer) == ranks.end()) {
          throw InputError(
              fmt::format("entry {}: peer rank {} is not a member of group '{}'", i, e.peer, name));
        }
      }
    }
  }

  // Every rank the dump names is below its world_size (or kMaxWorldSize when it has none), so
  // that the analyzer's per-rank tables are sized by what the dumps hold.
  void check_ranks() const {
    const int64_t limit = dump_.world_size.value_or(kMaxWorldSize);
    auto check = [&](int64_t r, std::string_view where) {
      if (r < 0 || r >= limit) {
        throw InputError(
            fmt::format("{} names rank {}, outside {} {}", where, r, fr::kWorldSize, limit));
      }
    };
    check(dump_.rank, "the file name");
    for (const DumpGroup& g : dump_.groups) {
      for (const int r : g.ranks) check(r, fmt::format("group '{}'", g.name));
    }
    for (size_t i = 0; i < dump_.entries.size(); ++i) {
      check(std::max<int64_t>(dump_.entries[i].peer, 0), fmt::format("entry {}", i));
      for (const int64_t r : dump_.span(unresolved_[i].group_ranks)) {
        check(r, fmt::format("entry {}", i));
      }
    }
  }

  JsonCursor cur_;
  RankDump dump_;
  std::optional<int64_t> file_rank_;
  std::unordered_map<std::string, uint32_t, StringHash, std::equal_to<>> symbol_ids_;
  std::vector<Unresolved> unresolved_;
  std::vector<bool> listed_;        // By symbol: group names pg_config lists.
  std::vector<int8_t> channel_op_;  // By symbol: 1 send or recv, 0 not, -1 not yet known.
  struct CacheSlot {
    std::string text;
    uint32_t id = 0;
  };
  std::array<CacheSlot, 64> cache_;
};

std::string mib(uint64_t bytes) {
  return fmt::format("{:.1f} MiB ({} bytes)", static_cast<double>(bytes) / (1 << 20), bytes);
}

constexpr size_t kSniffBytes = 64;

// Reads a whole dump into `out` (reusing its capacity), sized by fstat and read until EOF, after
// checking its first bytes: a file that cannot be a dump fails before the rest is read, and one
// over `limit` bytes (when it was stat'ed or as it is read) before it is read whole. Returns ""
// or what is wrong.
std::string read_dump_file(const std::filesystem::path& path, std::string& out, uint64_t limit) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return fmt::format("cannot open: {}", std::strerror(errno));
  struct stat st {};
  size_t size = 0;
  if (::fstat(fd, &st) == 0 && st.st_size > 0) size = static_cast<size_t>(st.st_size);
  out.resize(kSniffBytes);
  size_t got = 0;
  bool sniffed = false;
  while (true) {
    if (!sniffed && got >= kSniffBytes) {
      if (std::string error = sniff_dump_format({out.data(), got}, false); !error.empty()) {
        ::close(fd);
        return error;
      }
      sniffed = true;
      if (size > limit) {
        ::close(fd);
        return fmt::format(
            "{} is over the limit of {} for one dump file (a real dump is a few MiB: 2000 "
            "entries, the default MESHRT_TRACE_BUFFER_SIZE, of a 1024-rank job take 2.1 MiB); if "
            "it is a real dump, raise the limit with --max-input-mib",
            mib(size), mib(limit));
      }
      out.resize(std::max(size + 1, out.size()));
    }
    if (got == out.size()) out.resize(out.size() * 2);
    const ssize_t n = ::read(fd, out.data() + got, out.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int error = errno;
      ::close(fd);
      out.resize(got);
      if (n < 0) return fmt::format("cannot read: {}", std::strerror(error));
      return sniffed ? "" : sniff_dump_format(out, true);
    }
    got += static_cast<size_t>(n);
    if (got > limit) {
      // It grew after the sizes were checked (a file still being written, a FIFO-like file).
      ::close(fd);
      out.clear();
      return fmt::format(
          "more than {} bytes were read, over the limit for one dump file "
          "(--max-input-mib)",
          limit);
    }
  }
}

// The files' sum within `limits`, from their sizes before any is read (each file's own size is
// checked once its first bytes show it can be a dump).
void check_total_size(const std::vector<DumpFile>& files, const InputLimits& limits) {
  uint64_t total = 0;
  for (const DumpFile& f : files) {
    std::error_code ec;
    const uintmax_t size = std::filesystem::file_size(f.path, ec);
    if (!ec) total += size;  // Else reading it says what is wrong.
  }
  if (total > limits.total_bytes) {
    throw InputError(
        fmt::format("the {} dump files hold {}, over the limit of {} for all of them; if they "
                    "are real dumps, raise the limit with --max-total-input-mib",
                    files.size(), mib(total), mib(limits.total_bytes)));
  }
}

// torchfrtrace's `([\w\-\_]*?)(\d+)$` searched in a file name: the trailing digits and the
// word characters before them.
std::optional<std::pair<std::string, int>> split_rank(const std::string& name) {
  size_t digits = name.size();
  while (digits > 0 && name[digits - 1] >= '0' && name[digits - 1] <= '9') --digits;
  if (digits == name.size() || name.size() - digits > 9) return std::nullopt;
  size_t start = digits;
  auto word = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-';
  };
  while (start > 0 && word(name[start - 1])) --start;
  return std::pair{name.substr(start, digits - start), std::stoi(name.substr(digits))};
}

}  // namespace

std::string_view entry_state_name(EntryState state) {
  switch (state) {
    case EntryState::kScheduled:
      return "scheduled";
    case EntryState::kStarted:
      return "started";
    case EntryState::kCompleted:
      return "completed";
  }
  return "";
}

bool RankDump::wrapped() const {
  if (records_dropped >= 0) return records_dropped > 0;
  // PyTorch's record ids start at 0 in each process.
  return !entries.empty() && entries.front().record_id > 0;
}

std::string sniff_dump_format(std::string_view head, bool whole_file) {
  if (head.empty()) return whole_file ? "empty file" : "";
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(head[i]); };
  if (byte(0) == 0x80) {
    // PROTO: PyTorch writes protocol 2; Python's pickler writes up to 5.
    if (head.size() < 2 || (byte(1) >= 2 && byte(1) <= 5)) return "";
    return fmt::format("not a flight-recorder dump: a pickle of unknown protocol {}", byte(1));
  }
  // A JSON object whose first token is a key or its end.
  size_t i = 0;
  const auto skip_space = [&] {
    while (i < head.size() &&
           (head[i] == ' ' || head[i] == '\n' || head[i] == '\r' || head[i] == '\t')) {
      ++i;
    }
  };
  skip_space();
  if (i < head.size() && head[i] == '{') {
    ++i;
    skip_space();
    if (i == head.size() || head[i] == '"' || head[i] == '}') {
      if (i < head.size() || !whole_file) return "";
    }
  } else if (i == head.size() && !whole_file) {
    return "";
  }
  std::string shown;
  for (size_t k = 0; k < head.size() && k < 16; ++k) {
    shown += byte(k) >= 0x20 && byte(k) < 0x7f ? fmt::format("{}", head[k])
                                               : fmt::format("\\x{:02x}", byte(k));
  }
  return fmt::format(
      "not a flight-recorder dump (neither a JSON object nor a pickle): it starts with '{}'",
      shown);
}

RankDump parse_dump(std::string_view bytes, int rank) {
  try {
    if (std::string error =
            sniff_dump_format(bytes.substr(0, kSniffBytes), bytes.size() <= kSniffBytes);
        !error.empty()) {
      throw InputError(error);
    }
    if (rank < 0 || rank >= kMaxWorldSize) {
      throw InputError(fmt::format("rank {} is outside 0..{}", rank, kMaxWorldSize - 1));
    }
    if (static_cast<unsigned char>(bytes[0]) == 0x80) {
      // One reader for both formats: a pickle becomes JSON text.
      const std::string text =
          pickle_to_json_text({reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()});
      return DumpParser(text, rank).run();
    }
    return DumpParser(bytes, rank).run();
  } catch (const JsonSyntaxError& e) {
    throw InputError(e.what());
  } catch (const PickleError& e) {
    throw InputError(e.what());
  }
}

std::vector<DumpFile> find_dump_files(const std::filesystem::path& dir, const std::string& prefix) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    throw InputError(fmt::format("'{}' is not a directory", dir.string()));
  }
  // Candidates per prefix: with --prefix only that one, else every inferred prefix.
  std::map<std::string, std::vector<DumpFile>> by_prefix;
  fs::recursive_directory_iterator it(dir, fs::directory_options::skip_permission_denied, ec);
  for (; !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    // Only regular files: opening a dump pipe (a FIFO) would block.
    if (!it->is_regular_file(ec)) continue;
    const std::string name = it->path().filename().string();
    if (name.find(".tmp.") != std::string::npos) continue;
    if (!prefix.empty()) {
      if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
      const std::string rest = name.substr(prefix.size());
      if (rest.size() > 9 || !std::all_of(rest.begin(), rest.end(), ::isdigit)) continue;
      by_prefix[prefix].push_back({it->path(), std::stoi(rest)});
    } else if (const auto split = split_rank(name)) {
      by_prefix[split->first].push_back({it->path(), split->second});
    }
  }
  if (ec) throw InputError(fmt::format("cannot list '{}': {}", dir.string(), ec.message()));
  if (by_prefix.empty()) {
    throw InputError(prefix.empty() ? fmt::format("no dump files in '{}'", dir.string())
                                    : fmt::format("no dump files named '{}<rank>' in '{}'", prefix,
                                                  dir.string()));
  }
  if (by_prefix.size() > 1) {
    // The most common prefixes first; a directory like /tmp can hold hundreds.
    std::vector<std::pair<size_t, std::string>> counts;
    for (const auto& [p, files] : by_prefix) counts.emplace_back(files.size(), p);
    std::stable_sort(counts.begin(), counts.end(),
                     [](const auto& a, const auto& b) { return a.first > b.first; });
    std::string found;
    for (size_t i = 0; i < counts.size() && i < 5; ++i) {
      found += fmt::format("{}'{}' ({} file{})", i > 0 ? ", " : "", counts[i].second,
                           counts[i].first, counts[i].first == 1 ? "" : "s");
    }
    if (counts.size() > 5) found += fmt::format(" and {} more", counts.size() - 5);
    throw InputError(
        fmt::format("cannot tell the dump files' common prefix in '{}': found {}; pass --prefix",
                    dir.string(), found));
  }
  std::vector<DumpFile> files = std::move(by_prefix.begin()->second);
  std::sort(files.begin(), files.end(),
            [](const DumpFile& a, const DumpFile& b) { return a.rank < b.rank; });
  for (size_t i = 1; i < files.size(); ++i) {
    if (files[i].rank == files[i - 1].rank) {
      throw InputError(fmt::format("two dumps of rank {}: '{}' and '{}'", files[i].rank,
                                   files[i - 1].path.string(), files[i].path.string()));
    }
  }
  return files;
}

std::vector<RankDump> read_dumps(const std::vector<DumpFile>& files, unsigned threads,
                                 const InputLimits& limits) {
  check_total_size(files, limits);
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  threads = std::min<unsigned>(threads, static_cast<unsigned>(files.size()));
  std::vector<RankDump> dumps(files.size());
  std::vector<std::string> errors(files.size());
  std::atomic<size_t> next{0};
  auto work = [&] {
    std::string bytes;
    for (size_t i = next++; i < files.size(); i = next++) {
      const std::string path = files[i].path.string();
      try {
        if (const std::string error = read_dump_file(files[i].path, bytes, limits.file_bytes);
            !error.empty()) {
          errors[i] = fmt::format("'{}': {}", path, error);
          continue;
        }
        dumps[i] = parse_dump(bytes, files[i].rank);
        dumps[i].path = path;
      } catch (const std::exception& e) {
        errors[i] = fmt::format("'{}': {}", path, e.what());
      }
    }
  };
  std::vector<std::jthread> pool;
  for (unsigned t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  pool.clear();
  for (const std::string& error : errors) {
    if (!error.empty()) throw InputError(error);
  }
  return dumps;
}

}  // namespace meshrt::trace
