// Writing a file so that a reader never sees a partial one (temp file, fsync, rename), and where
// each rank's outputs go. Dumps, summaries, exports, reports and the launcher's files all go
// through it.
#pragma once

#include <string>
#include <string_view>

namespace meshrt::trace {

// Writes `text` to `path` atomically, creating its missing parent directories. On failure leaves
// no temp file, returns false and, when `error` is given, sets it to the cause (errno's text).
bool write_file_atomically(const std::string& path, std::string_view text,
                           std::string* error = nullptr);

// write_file_atomically, and on failure a warning naming `what`, the path and the cause
// ("could not write the comms summary to run/0.json: Permission denied").
bool write_output_file(const std::string& path, std::string_view text, std::string_view what);

// Tells output_path() that this process is one of `processes` processes of a job whose ranks run
// in separate processes (init() calls it; in-process worlds share one process and one file).
void set_process_count(int processes);

// `pattern` with every "{rank}" replaced by `rank`. In a job of several processes a pattern
// without "{rank}" gets "_rank<N>" before its extension (summary.json -> summary_rank3.json), so
// that ranks never overwrite each other's file.
std::string output_path(std::string_view pattern, int rank);

}  // namespace meshrt::trace
