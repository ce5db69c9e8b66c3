// Store keys of the dump protocol, in the job's namespace: a rank's watchdog (runtime/watchdog.h)
// asks every rank to dump and counts its own dump; meshrun (launcher/agent.cc) asks too when a rank
// dies outright, counts the ranks that ended without dumping, and waits for the count.
#pragma once

#include <algorithm>
#include <chrono>
#include <span>
#include <string>
#include <string_view>

#include "runtime/store/store.h"

namespace meshrt::dump_keys {

// Set (compare_set, first writer wins) to the rank that asks every rank to dump.
inline constexpr const char* kDumpSignal = "fr/dump_signal";
// Ranks done with their dump, written or not; ranks that ended without one are counted for them.
inline constexpr const char* kDumpsWritten = "fr/dumps_written";
// Bumped by each rank's init() once its watchdog can dump: meshrun waits for dumps only from a
// job whose ranks run meshrt, and a rank may fail before it ever published progress.
inline constexpr const char* kRanksThatDump = "fr/ranks_that_dump";
// Set by rank 0 when it started meshrt-monitor (a job without meshrun): after a failure the
// monitor runs the post-mortem, and ranks about to exit wait for kPostMortemDone first, so
// that the job's launcher (mpirun, srun) does not take the monitor down with them.
inline constexpr const char* kPostMortemBy = "fr/post_mortem_by";
// Set by meshrt-monitor once it has printed the post-mortem (or given up on it).
inline constexpr const char* kPostMortemDone = "fr/post_mortem_done";
// "fr/dump_done/<rank>": who counted `rank` in kDumpsWritten, so that it is counted once.
inline std::string dump_done(int rank) { return "fr/dump_done/" + std::to_string(rank); }

// Dump contents go to the store in chunks below its value limit.
inline constexpr size_t kChunkBytes = size_t{16} << 20;

// Writes `contents` as "<prefix><i>" chunks, then their count as "<prefix>chunks" (last, so that
// a reader who sees the count finds every chunk). Throws the store's Error.
inline void set_chunked(Store& store, const std::string& prefix, std::string_view contents) {
  const size_t chunks = std::max<size_t>(1, (contents.size() + kChunkBytes - 1) / kChunkBytes);
  for (size_t i = 0; i < chunks; ++i) {
    const std::string_view part =
        contents.substr(std::min(contents.size(), i * kChunkBytes), kChunkBytes);
    store.set(prefix + std::to_string(i), std::span<const char>(part.data(), part.size()));
  }
  const std::string count = std::to_string(chunks);
  store.set(prefix + "chunks", std::span<const char>(count.data(), count.size()));
}

// Reads back what set_chunked wrote, waiting up to `timeout` for each key. Throws the store's
// Error (kTimeout when it never came).
inline std::string get_chunked(Store& store, const std::string& prefix,
                               std::chrono::milliseconds timeout) {
  const Bytes count = store.get(prefix + "chunks", timeout);
  const size_t chunks = std::stoul(std::string(count.begin(), count.end()));
  std::string out;
  for (size_t i = 0; i < chunks; ++i) {
    const Bytes part = store.get(prefix + std::to_string(i), timeout);
    out.append(part.begin(), part.end());
  }
  return out;
}

// "fr/unwritten/<rank>/": the dump of a rank that could not write its file (a full disk), put in
// the store for meshrun to write where it can (launcher/agent.cc).
inline std::string unwritten(int rank) { return "fr/unwritten/" + std::to_string(rank) + "/"; }

// Counts `rank` in kDumpsWritten unless someone did already: the rank after its dump, or meshrun
// for a rank that ended without one, whoever claims dump_done(rank) first. `by` names the
// claimant ("rank", "meshrun"). Returns whether this call counted. Throws the store's Error.
inline bool count_dump_once(Store& store, int rank, std::string_view by) {
  return claim_once(store, dump_done(rank), by, kDumpsWritten);
}

}  // namespace meshrt::dump_keys
