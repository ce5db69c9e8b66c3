// Agents' liveness in a job of several nodes. Each agent bumps its own counter in the store from
// a thread of its own; any agent can then tell which nodes stopped (an agent killed with SIGKILL,
// a host gone) within a few seconds, instead of waiting out the ranks' op timeout and then the
// dump timeout for ranks that no longer exist.
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "runtime/store/store.h"

namespace meshrt::launcher {

// Timing of NodeHeartbeat.
struct NodeHeartbeatOptions {
  std::chrono::milliseconds period{250};    // How often this agent bumps its counter.
  std::chrono::milliseconds silence{3000};  // A counter unchanged this long: its node is lost.
};

// Beats for node `self` under "<prefix>/<node>" in `store` until destroyed; one node alone
// neither beats nor loses anyone.
class NodeHeartbeat {
 public:
  NodeHeartbeat(std::shared_ptr<Store> store, std::string prefix, int nnodes, int self,
                NodeHeartbeatOptions options = {});
  ~NodeHeartbeat();
  NodeHeartbeat(const NodeHeartbeat&) = delete;
  NodeHeartbeat& operator=(const NodeHeartbeat&) = delete;

  // The other nodes whose counter has not moved for `silence`, ascending. Reads the store at
  // most once per period (cached in between); never throws (a failing store loses nobody).
  std::vector<int> lost();

 private:
  void beat_loop();

  std::shared_ptr<Store> store_;
  std::string prefix_;
  int self_;
  NodeHeartbeatOptions options_;
  std::vector<int64_t> last_value_;                                 // Per node.
  std::vector<std::chrono::steady_clock::time_point> last_change_;  // Per node.
  std::chrono::steady_clock::time_point last_check_{};
  std::vector<int> lost_;
  std::mutex mu_;  // Guards stopping_.
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread beater_;
};

}  // namespace meshrt::launcher
