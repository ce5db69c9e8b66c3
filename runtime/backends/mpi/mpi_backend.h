// The MPI backend (OpenMPI): every op is an MPI call on an MPI communicator of the group's
// members, launched on the caller's thread (ExecutionModel::kLaunch) and completed by the
// communicator polling MPI_Test(all) from Work::wait()/test() and from the watchdog thread, so an
// op that never completes is failed at its timeout, dumped and handled by the policy.
//
// Blocking fast path: collectives whose sizes are equal on every rank by contract (all_reduce,
// broadcast, reduce, all_gather, reduce_scatter, barrier, equal all_to_all) of at most
// MESHRT_MPI_BLOCKING_MAX_BYTES (default 65536; 0 = never) call MPI's blocking function and
// return an op that is already done, when the watchdog policy is abort (the default for init()
// jobs). Non-blocking MPI collectives cost ~0.65 us more per call (libnbc) than blocking ones,
// twice the budget of a small all_reduce. It is safe: every rank takes the same path (kind,
// bytes and the job-wide environment decide), and the op is in the communicator's in-flight list
// before the call, so the watchdog still times a hang out, dumps, and ends the job through
// MPI_Abort. Under the throw and continue policies every op is non-blocking, so that wait()
// can fail with kTimeout and the program go on.
#pragma once

#include <memory>

#include "runtime/backend_factory.h"

namespace meshrt {

// Connects the members of `spec` over MPI: an MPI communicator over spec.global_ranks (which
// must be MPI_COMM_WORLD ranks: meshrt's global rank is the MPI world rank) named spec.name.
// Initialises MPI if needed (see ensure_mpi_initialized). Collective over the members; works
// whatever the parent communicator's backend. Throws Error(kInvalidArgument) if the global rank
// is not the MPI world rank, Error(kBackend) if MPI fails.
std::unique_ptr<Backend> make_mpi_backend(const GroupSpec& spec);

}  // namespace meshrt
