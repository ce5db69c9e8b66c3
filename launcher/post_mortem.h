// The post-mortem of a job (docs/flight-recorder.md): waiting until every rank has written its
// flight-recorder dump, moving dumps to node 0 through the store, running meshtrace (`analyze`,
// `report`), and reading the ranks' error files.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "runtime/store/store.h"

namespace meshrt::launcher {

// True when a rank's watchdog asked every rank to dump: `fr/dump_signal` is set in `job`, the
// attempt's namespace "meshrt/<run_id>/<attempt>/".
bool dump_requested(Store& job);
// Waits until `fr/dumps_written` in `job` reaches `world_size` (ranks that dumped, and ranks their
// agents saw end without a dump), `timeout` passes or should_stop() is true; returns the count
// reached. `on_poll` runs before every look at the count (the agent reaps its ranks there).
int64_t wait_for_dumps(Store& job, int world_size, std::chrono::milliseconds timeout,
                       const std::function<bool()>& should_stop,
                       const std::function<void()>& on_poll = {});

// Stores one rank's dump under "dumps/<attempt>/<rank>/" of the launcher's namespace, in chunks
// below the store's value limit, so that node 0 can write it into its log directory.
void publish_dump(Store& launcher, int attempt, int rank, const std::string& contents);
// Reads back what publish_dump stored, waiting up to `timeout` for it.
std::string fetch_dump(Store& launcher, int attempt, int rank, std::chrono::milliseconds timeout);

// The directory of the running executable (/proc/self/exe, symbolic links resolved); empty when
// it cannot be read.
std::string executable_dir();

// The meshtrace binary: $MESHRT_MESHTRACE, else `exe_dir`/meshtrace (meshrun's own directory:
// the install tree's bin/ and the build root hold both), else on PATH; empty when none is
// executable.
std::string find_meshtrace(const std::string& exe_dir);

// Why find_meshtrace(executable_dir()) found nothing, in one line for people.
std::string meshtrace_not_found();

// What one run of meshtrace said.
struct MeshtraceRun {
  std::string command;  // As run, for the summary.
  int exit_code = -1;   // Its exit status; -1 when it did not exit (killed at its time limit).
  std::string output;   // Its stdout and stderr.
};

// Runs `<meshtrace> ARGS...` with its stdout and stderr captured, killing it after `timeout`.
MeshtraceRun run_meshtrace(const std::string& meshtrace, const std::vector<std::string>& args,
                           std::chrono::milliseconds timeout);

// Runs `<meshtrace> analyze <dir> --prefix <prefix>` (plus --allow-incomplete-ranks when some
// ranks left no dump, --rank-note R=TEXT for what is known of them, and `more_args`): exit status
// 0 no problem, 1 problem found, 2 bad input.
MeshtraceRun analyze(const std::string& meshtrace, const std::string& dir,
                     const std::string& prefix, bool incomplete, std::chrono::milliseconds timeout,
                     const std::map<int, std::string>& rank_notes = {},
                     const std::vector<std::string>& more_args = {});

// Runs `<meshtrace> report <dir>` (plus `--dumps <dumps_dir> --prefix <prefix>` when dumps_dir
// is not empty), which writes <dir>/report.html.
MeshtraceRun make_report(const std::string& meshtrace, const std::string& dir,
                         const std::string& dumps_dir, const std::string& prefix,
                         std::chrono::milliseconds timeout);

// The error file a rank's uncaught exception is written to (TORCHELASTIC_ERROR_FILE).
struct ErrorFile {
  std::string path;
  std::string message;  // "<type>: <what>", or why the file could not be read.
};

// Reads torchelastic's error file at `path` ({"message": {"message": ...}} or {"message": "..."});
// nothing when the file does not exist.
std::optional<ErrorFile> read_error_file(const std::string& path);

}  // namespace meshrt::launcher
