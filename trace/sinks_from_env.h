// The one place where the environment turns trace sinks on: the comm logger, the exports, the
// straggler sink and the scope tree's files (the flight recorder reads its own options when first
// used). Called by the runtime when a communicator is created; every variable goes through
// trace/env.h.
#pragma once

namespace meshrt::trace {

// Configures every sink from MESHRT_COMMS_LOG*, MESHRT_COMMS_SUMMARY, MESHRT_TRACE_CHROME,
// MESHRT_TRACE_JSONL, MESHRT_TRACE_PROMETHEUS, MESHRT_STRAGGLER_* and MESHRT_SCOPE_TREE. Once per
// process; throws env::EnvError for a malformed value (and tries again on the next call).
void install_sinks_from_env();

}  // namespace meshrt::trace
