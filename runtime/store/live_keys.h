// Store keys of the live-diagnosis protocol (docs/diagnosis.md), in the job's namespace: written
// by the ranks (runtime/progress_publisher.h) and read by meshrun (launcher/live_monitor.h).
#pragma once

#include <cstdint>
#include <string>

namespace meshrt::live_keys {

// "live/progress/<rank>": the rank's latest progress record (JSON).
inline std::string progress(int rank) { return "live/progress/" + std::to_string(rank); }
// Bumped by the live monitor to ask every rank for a flight-recorder snapshot.
inline constexpr const char* kSnapshotRequest = "live/snapshot_request";
// "live/snapshot/<request>/<rank>": the rank's flight recorder rendered as a JSON dump.
inline std::string snapshot(int64_t request, int rank) {
  return "live/snapshot/" + std::to_string(request) + "/" + std::to_string(rank);
}

}  // namespace meshrt::live_keys
