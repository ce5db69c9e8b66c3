// The flight-recorder side of a failure (docs/flight-recorder.md): waiting until every rank has
// written its dump, moving dumps to node 0 through the store, and running `meshtrace analyze`.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>

#include "runtime/store/store.h"

namespace meshrt::launcher {

// True when a rank's watchdog asked every rank to dump: `fr/dump_signal` is set in `job`, the
// attempt's namespace "meshrt/<run_id>/<attempt>/".
bool dump_requested(Store& job);
// Waits until `fr/dumps_written` in `job` reaches `world_size`, `timeout` passes or
// should_stop() is true; returns the count reached.
int64_t wait_for_dumps(Store& job, int world_size, std::chrono::milliseconds timeout,
                       const std::function<bool()>& should_stop);

// Stores one rank's dump under "dumps/<attempt>/<rank>/" of the launcher's namespace, in chunks
// below the store's value limit, so that node 0 can write it into its log directory.
void publish_dump(Store& launcher, int attempt, int rank, const std::string& contents);
// Reads back what publish_dump stored, waiting up to `timeout` for it.
std::string fetch_dump(Store& launcher, int attempt, int rank, std::chrono::milliseconds timeout);

// The analyzer binary: $MESHRT_MESHTRACE, else meshtrace next to meshrun's executable, else
// ../trace/meshtrace from it (the build tree), else on PATH; empty when none exists.
std::string find_meshtrace();

// What `meshtrace analyze` said.
struct Analysis {
  std::string command;  // As run, for the summary.
  int exit_code = -1;   // 0 no problem, 1 problem found, 2 bad input; -1 when it did not exit.
  std::string output;   // Its stdout and stderr.
};

// Runs `<meshtrace> analyze <dir> --prefix <prefix>` (plus --allow-incomplete-ranks when some
// ranks left no dump), killing it after `timeout`.
Analysis analyze(const std::string& meshtrace, const std::string& dir, const std::string& prefix,
                 bool incomplete, std::chrono::milliseconds timeout);

}  // namespace meshrt::launcher
