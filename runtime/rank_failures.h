// Which ranks of the job have died, as their survivors learn it: meshrun records each rank that
// ended without reaching its exit barrier (runtime/store/exit_keys.h) within its monitor interval
// (100 ms), on every node; survivors read those records here. Feeds Communicator::failed_ranks()
// and, under MESHRT_ON_RANK_FAILURE=continue, the watchdog's abort of ops waiting for a dead rank.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "runtime/store/store.h"

namespace meshrt {

// The dead among a job's ranks, read from its store. Costs one store request per call while no
// rank has ended since the last (the records counter); then one or two per rank not yet known.
// Thread-safe.
class DeadRanks {
 public:
  // The process's reader, for the job store of init() worlds.
  static DeadRanks& instance();
  // Which of `global_ranks` have died, ascending. Throws the store's Error.
  std::vector<int> among(Store& store, std::span<const int> global_ranks);

 private:
  std::mutex mu_;
  std::string store_address_;          // The store the sets below were read from.
  std::map<int, int64_t> checked_at_;  // Rank -> exit_keys::kRecords when last looked for.
  std::set<int> dead_;                 // Ended without their exit barrier: meshrun's record.
  std::set<int> finished_;             // Reached their exit barrier: alive to the end.
};

}  // namespace meshrt
