// Writing a file so that a reader never sees a partial one: temp file, fsync, rename. Summaries,
// scope trees and (later) flight-recorder dumps all go through it.
#pragma once

#include <string>

namespace meshrt::trace {

// Writes `text` to `path` atomically; returns false (leaving no temp file) on any failure.
bool write_file_atomically(const std::string& path, const std::string& text);

}  // namespace meshrt::trace
