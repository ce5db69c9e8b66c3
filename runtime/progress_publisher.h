// Live progress (docs/diagnosis.md): each rank publishes, off the op path, one small record of
// its communicators' sequence numbers and the op in flight to the job's store every second, and
// answers the live monitor's snapshot requests with its flight recorder's entries, so that
// meshrun can name a stalled rank long before any timeout. Driven by the watchdog thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/store/live_keys.h"
#include "runtime/store/store.h"
#include "trace/op_record.h"

namespace meshrt {

// Settings of the publisher.
struct ProgressOptions {
  std::chrono::milliseconds period{1000};       // MESHRT_PROGRESS_PERIOD_MS; 0 turns it off.
  std::chrono::milliseconds request_poll{250};  // How often snapshot requests are looked for.
  bool dump_on_stall = false;                   // MESHRT_DUMP_ON_STALL
};

// Reads the variables named in ProgressOptions.
ProgressOptions progress_options_from_env();

// What the publisher sees of one communicator at one moment.
struct CommSample {
  std::shared_ptr<const trace::CommInfo> info;
  std::optional<trace::OpRecord> running;  // The op executing now, if any.
};

// One rank's state, as the progress record names it.
enum class RankActivity {
  kInOp,        // Some communicator runs an op.
  kBetweenOps,  // Ops are enqueued but none runs (waiting to be started).
  kUserCode,    // Nothing enqueued: the program computes (or waits outside meshrt).
  kFinished,    // Its communicators are gone (done, or in the exit barrier).
};

// "in_op", "between_ops", "user_code", "finished".
std::string_view rank_activity_name(RankActivity activity);

// Builds and publishes the records; called by the watchdog thread only.
class ProgressPublisher {
 public:
  explicit ProgressPublisher(ProgressOptions options);

  // False when MESHRT_PROGRESS_PERIOD_MS=0: the watchdog then samples nothing.
  bool enabled() const { return options_.period.count() > 0; }

  // Called every watchdog poll with the communicators of this process: tracks when each local
  // rank was last seen in an op, and publishes / answers requests when their period is due.
  // Returns false when a request to `store` failed (progress is best effort: it never throws).
  bool tick(const std::vector<CommSample>& comms, Store* store);

  // The JSON progress record of global rank `rank` (exposed for tests).
  std::string record(int rank, const std::vector<CommSample>& comms, int64_t now_ns) const;

 private:
  struct RankClock {
    int rank = -1;
    RankActivity activity = RankActivity::kUserCode;
    int64_t since_ns = 0;      // When `activity` began (steady clock).
    int64_t busy_marker = -1;  // Sum of the rank's counters when last seen, to spot short ops.
  };
  RankClock& clock_of(int rank);
  void answer_request(Store& store, int64_t request);

  ProgressOptions options_;
  std::vector<RankClock> clocks_;
  int64_t next_publish_ns_ = 0;
  int64_t next_request_poll_ns_ = 0;
  int64_t last_request_ = 0;
};

}  // namespace meshrt
