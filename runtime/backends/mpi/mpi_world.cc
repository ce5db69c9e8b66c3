#include "runtime/backends/mpi/mpi_world.h"

#include <fmt/format.h>
#include <mpi.h>

#include <cstdlib>
#include <mutex>

#include "runtime/watchdog.h"
#include "trace/env.h"
#include "trace/logging.h"

namespace meshrt {
namespace {

// MPI_Finalize, registered with atexit when meshrt initialised MPI. Every communicator (and with
// it the world's exit barrier, WorldResources) is gone by then: the program released the world
// before main returned. A leaked communicator's MPI_Comm is simply left to MPI_Finalize.
void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

}  // namespace

void ensure_mpi_initialized(int rank) {
  static std::once_flag once;
  std::call_once(once, [rank] {
    int initialized = 0;
    MPI_Initialized(&initialized);
    int provided = MPI_THREAD_SINGLE;
    if (initialized) {
      MPI_Query_thread(&provided);
    } else {
      // libnbc's own choice of MPI_Iallreduce algorithm reaches 0.7-0.9 of MPI_Allreduce's busbw
      // at 16 MiB over shared memory; its ring matches or beats MPI_Allreduce there
      // (docs/performance.md, "MPI backend"). Only a default: the user's setting wins.
      ::setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "1", /*overwrite=*/0);
      const int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
      if (rc != MPI_SUCCESS) throw_mpi_error(rc, "MPI_Init_thread", {rank, "", "init", -1});
      std::atexit(finalize_at_exit);
    }
    if (provided < MPI_THREAD_MULTIPLE) {
      throw Error(ErrorCode::kBackend, {rank, "", "init", -1},
                  fmt::format("MPI grants thread level {} but meshrt needs MPI_THREAD_MULTIPLE "
                              "({}): the watchdog thread polls MPI requests while the program's "
                              "thread starts ops.{}",
                              provided, MPI_THREAD_MULTIPLE,
                              initialized ? " Initialise MPI with MPI_Init_thread(..., "
                                            "MPI_THREAD_MULTIPLE, ...), or let meshrt do it."
                                          : ""));
    }
    // After the dumps, end every rank through mpirun rather than this process alone.
    try {
      Watchdog::instance().set_exit([](int status) { MPI_Abort(MPI_COMM_WORLD, status); });
    } catch (const trace::env::EnvError& e) {
      throw Error(ErrorCode::kInvalidArgument, {rank, "", "init", -1}, e.what());
    }
  });
}

int mpi_world_rank() {
  int r = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

int mpi_world_size() {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

bool mpi_world_on_one_node() {
  MPI_Comm node;
  if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) !=
      MPI_SUCCESS) {
    return false;
  }
  int local = 0;
  MPI_Comm_size(node, &local);
  MPI_Comm_free(&node);
  int everywhere = 0;
  // Every rank must agree, or rank 0 would choose alone.
  const int mine = local == mpi_world_size() ? 1 : 0;
  MPI_Allreduce(&mine, &everywhere, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return everywhere == 1;
}

std::string mpi_broadcast_from_rank0(const std::string& value) {
  int length = static_cast<int>(value.size());
  MPI_Bcast(&length, 1, MPI_INT, 0, MPI_COMM_WORLD);
  std::string out = mpi_world_rank() == 0 ? value : std::string(static_cast<size_t>(length), '\0');
  MPI_Bcast(out.data(), length, MPI_CHAR, 0, MPI_COMM_WORLD);
  return out;
}

std::string mpi_error_text(int code) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS)
    return fmt::format("MPI error {}", code);
  std::string out(text, static_cast<size_t>(length));
  int error_class = code;
  MPI_Error_class(code, &error_class);
  if (error_class != code) {
    char class_text[MPI_MAX_ERROR_STRING] = {};
    if (MPI_Error_string(error_class, class_text, &length) == MPI_SUCCESS) {
      out += fmt::format(" ({})", std::string_view(class_text, static_cast<size_t>(length)));
    }
  }
  return out;
}

void throw_mpi_error(int code, std::string_view call, ErrorContext context) {
  int error_class = code;
  MPI_Error_class(code, &error_class);
  const ErrorCode meshrt_code =
      error_class == MPI_ERR_TRUNCATE ? ErrorCode::kInvalidArgument : ErrorCode::kBackend;
  std::string detail = fmt::format("{} failed: {}", call, mpi_error_text(code));
  if (error_class == MPI_ERR_TRUNCATE) {
    detail += "; the ranks disagree on the message size";
  }
  throw Error(meshrt_code, std::move(context), std::move(detail));
}

std::string mpi_library_version() {
  static const std::string version = [] {
    char text[MPI_MAX_LIBRARY_VERSION_STRING] = {};
    int length = 0;
    MPI_Get_library_version(text, &length);
    std::string s(text, static_cast<size_t>(length));
    if (const size_t eol = s.find('\n'); eol != std::string::npos) s.resize(eol);
    while (!s.empty() && (s.back() == '\0' || s.back() == ' ' || s.back() == ',')) s.pop_back();
    return s;
  }();
  return version;
}

}  // namespace meshrt
