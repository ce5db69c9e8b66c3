#include "runtime/environment.h"

#include <fmt/format.h>

#include <string>

#include "runtime/debug_stats.h"
#include "runtime/error.h"
#include "runtime/watchdog.h"
#include "trace/env.h"
#include "trace/flight_recorder.h"
#include "trace/sinks_from_env.h"

namespace meshrt {

void apply_environment(int global_rank, std::string_view comm) {
  trace::env::warn_unknown_variables();
  try {
    trace::FlightRecorder::instance();
    trace::install_sinks_from_env();
    Watchdog::instance();
    debug_tensor_stats_enabled();
  } catch (const trace::env::EnvError& e) {
    throw Error(ErrorCode::kInvalidArgument, {global_rank, std::string(comm), "init", -1},
                fmt::format("{} (fix the value or unset the variable)", e.what()));
  }
}

}  // namespace meshrt
