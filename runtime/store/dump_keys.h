// Store keys of the dump protocol, in the job's namespace: a rank's watchdog (runtime/watchdog.h)
// asks every rank to dump and counts its own dump; meshrun (launcher/agent.cc) asks too when a rank
// dies outright, counts the ranks that ended without dumping, and waits for the count.
#pragma once

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

// Counts `rank` in kDumpsWritten unless someone did already: the rank after its dump, or meshrun
// for a rank that ended without one, whoever claims dump_done(rank) first. `by` names the
// claimant ("rank", "meshrun"). Returns whether this call counted. Throws the store's Error.
inline bool count_dump_once(Store& store, int rank, std::string_view by) {
  const Bytes now = store.compare_set(dump_done(rank), {}, std::span<const char>(by));
  if (std::string_view(now.data(), now.size()) != by) return false;
  store.add(kDumpsWritten, 1);
  return true;
}

}  // namespace meshrt::dump_keys
