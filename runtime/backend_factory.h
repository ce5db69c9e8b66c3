// Backends by name, for a group that does not come from splitting a communicator of the same
// backend: the world at init(), and a mesh dim whose backend differs from its parent's
// (CommOptions::backend, like PyTorch's backend_override).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/backend.h"
#include "runtime/store/store.h"

namespace meshrt {

// What every backend needs to connect a new group. Members pass equal values except `rank`.
struct GroupSpec {
  std::string name;               // The communicator's name, e.g. "mesh0/tp" (NCCL's commName).
  std::string store_key;          // The group's keys in `store`, equal on its members.
  std::vector<int> global_ranks;  // Members, as global ranks, in group-rank order.
  int rank = -1;                  // This process's rank in the group.
  std::chrono::milliseconds timeout{0};  // Bound of the connection; the group's op timeout.
  std::shared_ptr<Store> store;          // The job's store.
  std::string hostname;                  // Gloo: the address to listen on, e.g. "127.0.0.1"; or
  std::string iface;    // Gloo: a network interface such as "lo" (wins over hostname).
  int local_rank = -1;  // Rank on this node (NCCL picks its device from it); -1 unknown.
};

// What init() knows of the job that a backend of another kind needs later (a mesh dim with its
// own backend). Every communicator split from an init() world carries it.
struct JobContext {
  std::shared_ptr<Store> store;  // The job's store.
  std::string hostname;          // Gloo: the address to listen on.
  std::string iface;             // Gloo: the network interface (wins over hostname).
  int local_rank = -1;           // Rank on this node; -1 unknown.
};

// The backends this build has, in order of preference: "gloo", then "mpi" and "nccl" when built
// in. "inproc" is not among them: its ranks are threads (make_inproc_world).
std::vector<std::string> built_backends();

// Connects `spec`'s members over backend `name` (a collective over them). Throws
// Error(kInvalidArgument) for a backend not built in, naming the ones that are, and the backend's
// Error when connecting fails.
std::unique_ptr<Backend> make_backend(std::string_view name, const GroupSpec& spec);

}  // namespace meshrt
