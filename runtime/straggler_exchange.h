// The straggler samples of a multi-process job, gathered out of band through the job's store:
// every rank publishes what its sink recorded (trace/straggler.h), and the collecting rank
// waits a bounded time for every rank's samples and analyses them. No collective runs, so ranks
// that ran different ops, or never publish, yield a report (listing them) instead of a hang.
//
// Keys: straggler/<rank>/<i> hold the rank's encoded samples (the store's frame format) in 1 MiB
// chunks, well under the store's value limit; straggler/<rank> holds the number of chunks and is
// set last, so a reader that sees it finds every chunk.
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>

#include "runtime/store/store.h"
#include "trace/straggler.h"

namespace meshrt {

// Publishes `samples` under straggler/<samples.rank>. Returns false (after logging a warning)
// when the store fails; never throws.
bool publish_stragglers(Store& store, const trace::RankSamples& samples);

// Waits up to `timeout` for ranks [0, world_size) to publish, then analyses what they published
// with analyze_stragglers(top_k). Ranks that published nothing readable are the report's
// missing_ranks. Returns nullopt (after logging a warning) when the store fails; never throws.
std::optional<trace::StragglerReport> collect_stragglers(Store& store, int world_size,
                                                         std::chrono::milliseconds timeout,
                                                         size_t top_k);

// The exit barrier's part (runtime/init.cc), nothing while the straggler sink is off. Every rank
// publishes its samples before it announces its arrival ...
void publish_stragglers_at_exit(Store& store, int rank) noexcept;
// ... and rank 0, once every rank arrived (or the barrier gave up on them), collects and
// delivers the report (StragglerSink::write_report) when it has a report path or prints it.
void collect_stragglers_at_exit(Store& store, int rank, int world_size) noexcept;

}  // namespace meshrt
