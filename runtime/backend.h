// The backend interface: what Gloo, the in-process backend and later NCCL and MPI implement.
// One Backend object serves one communicator. The communicator validates and traces every op
// before a backend sees it, so backends assume valid input.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "op.h"

namespace meshrt {

// What a member of a new communicator needs to create its backend (see Communicator::split).
struct SplitSpec {
  std::string store_key;                 // Identity of the new group, equal on all of its members.
  std::vector<int> parent_ranks;         // Members, as parent ranks, in new-rank order.
  int rank = -1;                         // This process's rank in the new group.
  std::chrono::milliseconds timeout{0};  // Bound of the connection; the group's op timeout.
};

// Executes ops of one communicator. The communicator calls run() and split() one at a time:
// split() on its worker thread, run() on the worker or on a caller blocked in Work::wait() (see
// InlineRunner). abort() may come from any thread, while run() executes.
class Backend {
 public:
  virtual ~Backend() = default;

  // The backend's name: "gloo", "inproc", ...
  virtual std::string_view name() const = 0;
  // A version string of the library underneath, for dumps and reports.
  virtual std::string version() const = 0;
  // Executes `op` to completion or throws Error (timeouts and peer failures included). Must end
  // within op.timeout plus a small margin: the watchdog reports an op a second past it.
  virtual void run(const Op& op) = 0;
  // Creates the backend of a new group, connected to its members; throws Error. Called on members
  // only, after the parent ranks agreed on `spec` (through the parent's all_gather).
  virtual std::unique_ptr<Backend> split(const SplitSpec& spec) = 0;
  // Makes an op in flight fail fast where the backend can interrupt it (in-process fails it with
  // kPeerFailure on every member; Gloo cannot and does nothing). The communicator itself fails
  // later ops with kAborted.
  virtual void abort() noexcept = 0;
};

}  // namespace meshrt
