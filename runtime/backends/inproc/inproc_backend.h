// The in-process backend: ranks are threads of one process sharing memory. Same semantics and
// validation as the network backends, for tests and for simulating large worlds in one process.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "../../communicator.h"

namespace meshrt {

// Options of an in-process world.
struct InprocOptions {
  std::string name = "world";  // Name of the world communicators, in logs, errors and traces.
  std::chrono::milliseconds timeout = kDefaultOpTimeout;  // Default op timeout.
  // Hosts a store on 127.0.0.1 for the world, so that a mesh dim can run over another backend
  // (MeshOptions::backend_override {"dp", "gloo"}: Gloo pairs between the rank threads).
  bool job_store = false;
};

// Creates the world communicators of `world_size` in-process ranks; element r belongs to rank r and
// must be used from one thread per rank (collectives block until every rank joined). Makes the
// watchdog's default policy "throw" for the whole process. Throws kInvalidArgument for size < 1.
std::vector<std::shared_ptr<Communicator>> make_inproc_world(int world_size,
                                                             InprocOptions options = {});

// Runs `fn(world)` on `world_size` threads, one per rank, and joins them; each thread's default
// world is its rank's. A rank that throws aborts its communicator, so that its peers fail fast
// (kPeerFailure) instead of timing out; the first exception (by rank) is rethrown at the end.
void run_inproc(int world_size, const std::function<void(Communicator& world)>& fn,
                InprocOptions options = {});

}  // namespace meshrt
