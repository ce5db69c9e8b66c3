// Store keys of the end of a job, in the job's namespace: each rank's exit barrier
// (runtime/init.cc) and meshrun (launcher/agent.cc), for a rank that ended without one, record
// that the rank has left, so that peers still waiting for it in an op fail at once
// (runtime/watchdog.h) instead of at the op timeout.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "runtime/store/store.h"

namespace meshrt::exit_keys {

// Ranks that reached the exit barrier.
inline constexpr const char* kArrived = "exit/arrived";
// Ranks that left it (all but the store's host, which goes last).
inline constexpr const char* kLeft = "exit/left";
// Exit records written so far: a peer reads the records only once this is above zero.
inline constexpr const char* kRecords = "exit/records";
// "exit/rank<rank>": the rank's exit record (JSON). From its exit barrier:
// {"comms": {"<CommInfo::store_key>": <its last collective seq>, ...}}; from meshrun, for a
// process that ended without reaching it: {"ended": "exited with status 0"}.
inline std::string rank(int r) { return "exit/rank" + std::to_string(r); }

// Writes `record` as rank `r`'s exit record unless one is there already (the rank's own comes
// first); returns whether this call wrote it. Throws the store's Error.
inline bool record_once(Store& store, int r, std::string_view record) {
  return claim_once(store, rank(r), record, kRecords);
}

}  // namespace meshrt::exit_keys
