// MPI's process-wide state: initialising it (MPI_THREAD_MULTIPLE), ending the job through
// MPI_Abort, finalising it at exit, and the world-level exchanges init() needs. Only built when
// MESHRT_HAVE_MPI; include it behind that macro.
#pragma once

#include <string>
#include <string_view>

#include "runtime/error.h"

namespace meshrt {

// Initialises MPI once with MPI_THREAD_MULTIPLE (the watchdog thread polls MPI_Test while the
// caller's thread launches ops), or adopts the program's MPI if it already called MPI_Init*
// (meshrt then never finalises it). Registers MPI_Abort(MPI_COMM_WORLD) as the watchdog's exit,
// so the abort policy ends the whole job through mpirun once the dumps are written, and, when
// meshrt initialised MPI, MPI_Finalize at process exit. Throws Error(kBackend) if MPI grants a
// lower thread level or cannot start. `rank` is only for error messages.
void ensure_mpi_initialized(int rank);

// This process's rank in MPI_COMM_WORLD and the world's size (MPI must be initialised).
int mpi_world_rank();
int mpi_world_size();

// Whether every rank of MPI_COMM_WORLD runs on this node (one shared-memory domain): init() then
// hosts the store on 127.0.0.1 instead of the host name. Collective over MPI_COMM_WORLD.
bool mpi_world_on_one_node();

// Rank 0's `value` on every rank of MPI_COMM_WORLD (its length first, then the bytes).
// Collective over MPI_COMM_WORLD; the other ranks' `value` is ignored.
std::string mpi_broadcast_from_rank0(const std::string& value);

// MPI_Error_string of `code`, with the error class's string when it differs.
std::string mpi_error_text(int code);

// Throws Error for the failed MPI call `call` with return code `code`: kInvalidArgument for a
// truncated message (ranks disagree on sizes), kBackend otherwise; the text is MPI's.
[[noreturn]] void throw_mpi_error(int code, std::string_view call, ErrorContext context);

// The first line of MPI_Get_library_version, e.g. "Open MPI v4.1.4, package: ...".
std::string mpi_library_version();

}  // namespace meshrt
