// The live board (docs/diagnosis.md, "A live view"): what meshrun's node 0 knows about the
// running attempt, shared between the live monitor, which writes it every second, and the status
// server, which serves it. It also takes the ranks' flight-recorder snapshots, one request at a
// time, for both.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/store/store.h"

namespace meshrt::launcher {

// The ranks' answers to one snapshot request.
struct Snapshots {
  int64_t request = 0;               // 0: no attempt was running.
  std::vector<std::string> by_rank;  // A JSON dump per rank; empty for a rank that did not answer.
};

// Thread-safe. Lives as long as the agent; attempts come and go.
class LiveBoard {
 public:
  // `run_id` and `stall_s` (0: no stall detection) describe the job on every page.
  LiveBoard(std::string run_id, int64_t stall_s);

  // An attempt begins: `job` is its namespace of the store.
  void begin_attempt(int attempt, int world_size, std::shared_ptr<Store> job);
  // The attempt ended (before its store namespace goes away).
  void end_attempt();

  // The ranks' latest progress records (runtime/progress_publisher.h), by rank ("" when none).
  void set_progress(std::vector<std::string> records);
  // Rank `rank`'s process ended (its agent reaped it): `how` such as "exited 0" or "killed by
  // SIGKILL" shows instead of its last state, which would otherwise read as current.
  void rank_ended(int rank, std::string how);
  // A verdict printed; `active` false for a "stall cleared" line.
  void add_event(const std::string& line, bool active);
  // The op the live monitor reported stalled, until clear_stall(): `group` is its communicator;
  // `culprits` the ranks its verdict blames (the page outlines them on the mesh).
  void set_stall(int rank, std::string group, std::string op, int64_t seq,
                 std::vector<int> culprits = {});
  // The reported stall cleared.
  void clear_stall();
  // The stall reported and not cleared, as "mesh0/tp all_reduce #3 on rank 2"; empty if none.
  std::string stall() const;

  // Asks every rank of the attempt for a flight-recorder snapshot and waits up to `wait` for the
  // answers. Requests are serialised (a rank answers only the newest one it sees), and a set
  // taken less than `reuse` ago is returned again.
  Snapshots snapshots(std::chrono::milliseconds wait,
                      std::chrono::milliseconds reuse = std::chrono::milliseconds(0));

  // Everything above as the status JSON (docs/diagnosis.md gives its fields), times advanced to
  // `now_wall_ns`.
  std::string status_json(int64_t now_wall_ns) const;
  // The job's Prometheus exposition (docs/diagnosis.md, "/metrics"): every rank's op totals from
  // its progress record, and the board's gauges (rank state, op in flight and its age, the stall),
  // as of each rank's latest record.
  std::string metrics_text(int64_t now_wall_ns) const;

 private:
  struct Event {
    int64_t wall_ns = 0;
    std::string line;
    bool active = false;
  };

  const std::string run_id_;
  const int64_t stall_s_;
  mutable std::mutex mu_;
  int attempt_ = -1;  // -1: none running.
  int world_size_ = 0;
  std::shared_ptr<Store> job_;
  std::vector<std::string> progress_;
  std::vector<std::string> ended_;  // rank_ended()'s text by rank; "" while it runs.
  int64_t progress_wall_ns_ = 0;
  std::deque<Event> events_;  // The newest last; bounded.
  struct Stall {
    int rank = -1;  // -1: none.
    std::string group;
    std::string op;
    int64_t seq = 0;
    std::vector<int> culprits;
  };
  Stall stall_;

  std::mutex snapshot_mu_;  // Serialises snapshots(); never taken while holding mu_.
  Snapshots last_;
  std::chrono::steady_clock::time_point last_at_{};
};

// The wall clock in ns since the epoch, as progress records stamp it.
int64_t wall_now_ns();

}  // namespace meshrt::launcher
