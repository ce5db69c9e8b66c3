// meshrt's logger (spdlog). Every line carries the rank that wrote it; the level comes from
// MESHRT_LOG_LEVEL (trace, debug, info, warn, error, critical, off; default warn).
#pragma once

#include <spdlog/spdlog.h>

namespace meshrt {

// The process-wide logger, created on first use.
spdlog::logger& log();
// Sets the rank shown on this process's lines (after init).
void set_log_rank(int rank);
// Sets the rank shown on lines of the calling thread; wins over set_log_rank. The in-process
// backend runs many ranks in one process, one per thread.
void set_log_thread_rank(int rank);

}  // namespace meshrt
