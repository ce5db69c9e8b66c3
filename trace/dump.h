// Dumping the flight recorder on demand, from a trainer (the watchdog dumps on its own when an op
// times out or fails; SIGUSR1 and MESHRT_DUMP_PIPE dump from outside).
#pragma once

#include <string>
#include <vector>

namespace meshrt::trace {

// Dumps the last MESHRT_TRACE_BUFFER_SIZE ops of this process's ranks to MESHRT_DUMP_PREFIX<rank>
// (trigger "api"), one file per rank; returns the paths written, empty when recording is off
// (MESHRT_TRACE_BUFFER_SIZE=0). Never throws: a failed write is left out of the result.
std::vector<std::string> dump_flight_recorder();

}  // namespace meshrt::trace
