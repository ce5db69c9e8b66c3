#include "runtime/rank_failures.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "runtime/store/exit_keys.h"

namespace meshrt {

DeadRanks& DeadRanks::instance() {
  static DeadRanks reader;
  return reader;
}

std::vector<int> DeadRanks::among(Store& store, std::span<const int> global_ranks) {
  std::lock_guard lock(mu_);
  // The watchdog reads through its own connection to the same store: one cache for both.
  if (std::string address = store.address(); address != store_address_) {
    store_address_ = std::move(address);
    checked_at_.clear();
    dead_.clear();
    finished_.clear();
  }
  const int64_t records = store.add(exit_keys::kRecords, 0);
  for (int r : global_ranks) {
    if (records <= 0 || dead_.contains(r) || finished_.contains(r)) continue;
    // No record has come since this rank was last looked for: it still has none.
    if (auto [it, fresh] = checked_at_.try_emplace(r, records); !fresh) {
      if (it->second == records) continue;
      it->second = records;
    }
    const std::string key = exit_keys::rank(r);
    if (!store.check(std::span<const std::string>(&key, 1))) continue;
    const Bytes bytes = store.get(key, std::chrono::milliseconds(1000));
    const auto j = nlohmann::json::parse(bytes.begin(), bytes.end(), nullptr, false);
    // meshrun writes {"ended": ...} for a rank that ended without its exit barrier, which
    // writes {"comms": ...} first for a rank that returned from its program.
    (j.is_object() && j.contains("ended") ? dead_ : finished_).insert(r);
  }
  std::vector<int> dead;
  for (int r : global_ranks) {
    if (dead_.contains(r)) dead.push_back(r);
  }
  std::sort(dead.begin(), dead.end());
  return dead;
}

}  // namespace meshrt
