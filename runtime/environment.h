// meshrt's own variables, read and checked before the first communicator or world exists: a
// malformed value fails init() or the communicator's creation as an Error naming the variable,
// and a MESHRT_* name meshrt does not know is warned about once, with the closest known one.
#pragma once

#include <string_view>

namespace meshrt {

// Reads the settings of the flight recorder, the sinks, the watchdog and debug statistics (each
// once per process), and warns about unknown MESHRT_* names (once). Throws
// Error(kInvalidArgument) naming `global_rank`, `comm` and the variable for a malformed value.
void apply_environment(int global_rank, std::string_view comm);

}  // namespace meshrt
