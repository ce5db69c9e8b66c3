// Small file-system helpers of the launcher: log directories, dump files.
#pragma once

#include <optional>
#include <string>

namespace meshrt::launcher {

// Creates `path` and its missing parents; throws std::system_error naming it on failure.
void make_dirs(const std::string& path);
// The whole file, or nothing when it cannot be read.
std::optional<std::string> read_file(const std::string& path);
// Writes `contents` atomically (trace/atomic_file.h: temp file, fsync, rename), so readers never
// see a partial file; returns false on failure (no temp file is left).
bool write_file(const std::string& path, const std::string& contents);
// write_file for a secret: the file is created readable and writable by its owner only (0600)
// before a byte is written, whatever the umask, and replaces `path` atomically.
bool write_private_file(const std::string& path, const std::string& contents);
// The part after the last '/'.
std::string base_name(const std::string& path);
// The part up to the last '/' ("." when there is none).
std::string dir_name(const std::string& path);

// Removes the shared-memory segment names a rank process `pid`, now reaped, left in /dev/shm
// (`meshrt-<pid>-<16 hex>`, this user's): a rank killed while making a communicator's segment
// leaves its name behind (runtime/backends/gloo/shm_group.cc). Returns how many it removed.
int remove_segments_of(int pid);

}  // namespace meshrt::launcher
