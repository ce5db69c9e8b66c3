// Joining a job: rank and world from torchrun's, OpenMPI's or Slurm's environment (or from code),
// the rendezvous store, and the world communicator.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "communicator.h"

namespace meshrt {

// Everything init() needs. init_options_from_env() fills it from the environment.
struct InitOptions {
  int rank = -1;        // This process's global rank, in [0, world_size).
  int world_size = -1;  // Number of ranks in the job.
  // Rank on this node (e.g. to pick a GPU); -1 when unknown. Informational: init() ignores it.
  int local_rank = -1;
  int local_world_size = -1;  // Ranks on this node; -1 when unknown. Informational, as local_rank.
  // Host of the rendezvous store; empty = 127.0.0.1, or with backend "mpi" rank 0's address,
  // sent over MPI_COMM_WORLD (rank 0 then picks a free port).
  std::string master_addr;
  // Port of the store; 0 lets rank 0 pick a free one (single-process jobs only).
  uint16_t master_port = 0;
  std::string run_id = "default";  // Namespaces the store keys of one job.
  int attempt = 0;                 // Restart count: each attempt has its own store keys.
  bool host_store = true;          // Rank 0 hosts the store; false when a launcher does.
  // The store is torchrun's agent's (TORCHELASTIC_USE_AGENT_STORE=True): a PyTorch TCPStore on
  // MASTER_PORT, reached with its own protocol (runtime/store/torch_store.h).
  bool torch_agent_store = false;
  // Rank 0, hosting the store (no launcher), starts meshrt-monitor for the live stall verdict and
  // status page (runtime/monitor_process.h); MESHRT_LIVE_MONITOR=0 turns it off.
  bool live_monitor = true;
  // The store's shared secret, the same on every rank; empty: MESHRT_STORE_TOKEN, and when that
  // is unset too, no auth (under MPI with the address sent over MPI, a fresh one from rank 0).
  std::string store_token;
  std::string gloo_iface;  // Gloo's interface ("eth0"); empty: derived from master_addr.
  // The world's backend: "gloo", "mpi" or "nccl" (see built_backends() in backend_factory.h).
  // From the environment: MESHRT_BACKEND, else "mpi" under mpirun, and under srun when it gave
  // PMIx (--mpi=pmix), when MPI is built in.
  std::string backend = "gloo";
  std::chrono::milliseconds timeout = kDefaultOpTimeout;  // Default op timeout.
  // Rendezvous deadline: reaching the store and every peer; also the store's reply deadline.
  std::chrono::milliseconds init_timeout{std::chrono::minutes(5)};
  // How long the world's end waits for every rank to reach it (see init()).
  std::chrono::milliseconds exit_timeout{std::chrono::seconds(30)};
  // Who set the values: "meshrun", "torchrun", "mpirun", "srun", "RANK/WORLD_SIZE set by hand",
  // or "explicit" (the program).
  std::string source = "explicit";
};

// Reads, in this order of preference: torchrun's RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE;
// OpenMPI's OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK,LOCAL_SIZE}; Slurm's SLURM_PROCID, SLURM_NTASKS,
// SLURM_LOCALID, SLURM_NTASKS_PER_NODE. Then MASTER_ADDR and MASTER_PORT, needed for more than
// one rank (Slurm: SLURM_LAUNCH_NODE_IPADDR as address; OpenMPI and Slurm: port 29500 by
// default; neither under mpirun/srun with the MPI backend, which is then the default),
// MESHRT_RUN_ID (or TORCHELASTIC_RUN_ID), MESHRT_RESTART_COUNT (or TORCHELASTIC_RESTART_COUNT),
// MESHRT_EXIT_TIMEOUT_MS, MESHRT_STORE_EXTERNAL=1 (a launcher hosts the store),
// TORCHELASTIC_USE_AGENT_STORE=True (torchrun's agent hosts a PyTorch TCPStore), MESHRT_GLOO_IFNAME
// (or GLOO_SOCKET_IFNAME), MESHRT_BACKEND, MESHRT_TIMEOUT_MS, MESHRT_INIT_TIMEOUT_MS and
// MESHRT_STORE_TOKEN. A missing
// or inconsistent value throws Error(kInvalidArgument) listing what was found and what is needed.
InitOptions init_options_from_env();

// Joins the job over options.backend and returns the world communicator ("world", description
// "default_pg"), which also becomes the process's default world. Rank 0 hosts the store unless
// options.host_store is false. Collective over all ranks; throws Error(kTimeout) if they do not
// all arrive within options.init_timeout, Error(kStore) if rank 0 cannot listen on the port, and
// Error(kInvalidArgument) for a rank outside the world or a second init() of the same run id and
// attempt in this process, even after a failed one (a retry needs a new attempt on every rank).
// When the world and everything split from it are released, the rank waits (up to
// options.exit_timeout) until every rank got there or the job failed: the store stays up for
// the last ones, and a finished rank is still there to dump when another one hangs.
std::shared_ptr<Communicator> init(const InitOptions& options);

// init(init_options_from_env()).
std::shared_ptr<Communicator> init();

// The world of the calling rank: the one run_inproc() gave this thread, else the last one init()
// made in this process (while the program holds it). Throws Error(kInvalidArgument) when there
// is none.
std::shared_ptr<Communicator> default_world();
// Sets the process-wide default world (init() does this). Held weakly: the caller keeps it alive.
void set_default_world(std::shared_ptr<Communicator> world);
// Sets the calling thread's default world, which wins over the process-wide one (run_inproc()
// does this: its ranks are threads). Null clears it.
void set_thread_default_world(std::shared_ptr<Communicator> world);

}  // namespace meshrt
