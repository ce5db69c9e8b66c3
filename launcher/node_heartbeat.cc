#include "launcher/node_heartbeat.h"

#include <exception>
#include <utility>

namespace meshrt::launcher {

using Clock = std::chrono::steady_clock;

NodeHeartbeat::NodeHeartbeat(std::shared_ptr<Store> store, std::string prefix, int nnodes, int self,
                             NodeHeartbeatOptions options)
    : store_(std::move(store)),
      prefix_(std::move(prefix)),
      self_(self),
      options_(options),
      last_value_(nnodes, -1),
      last_change_(nnodes, Clock::now()) {
  if (nnodes > 1) beater_ = std::thread([this] { beat_loop(); });
}

NodeHeartbeat::~NodeHeartbeat() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (beater_.joinable()) beater_.join();
}

void NodeHeartbeat::beat_loop() {
  const std::string key = prefix_ + "/" + std::to_string(self_);
  std::unique_lock lock(mu_);
  while (!stopping_) {
    lock.unlock();
    try {
      store_->add(key, 1);
    } catch (const std::exception&) {
      // The store is gone or slow: the others will see this node as lost, which it may be.
    }
    lock.lock();
    cv_.wait_for(lock, options_.period, [this] { return stopping_; });
  }
}

std::vector<int> NodeHeartbeat::lost() {
  const auto now = Clock::now();
  if (!beater_.joinable() || now - last_check_ < options_.period) return lost_;
  last_check_ = now;
  lost_.clear();
  for (int node = 0; node < static_cast<int>(last_value_.size()); ++node) {
    if (node == self_) continue;
    int64_t value = last_value_[node];
    try {
      value = store_->add(prefix_ + "/" + std::to_string(node), 0);
    } catch (const std::exception&) {
      continue;  // No answer from the store says nothing about that node.
    }
    if (value != last_value_[node]) {
      last_value_[node] = value;
      last_change_[node] = now;
    } else if (now - last_change_[node] >= options_.silence) {
      lost_.push_back(node);
    }
  }
  return lost_;
}

}  // namespace meshrt::launcher
