#include "runtime/backend_factory.h"

#include <fmt/format.h>

#include "meshrt_config.h"
#include "runtime/backends/gloo/gloo_backend.h"
#if MESHRT_HAVE_NCCL
#include "runtime/backends/nccl/nccl_backend.h"
#endif
#include "runtime/error.h"
#if MESHRT_HAVE_MPI
#include "runtime/backends/mpi/mpi_backend.h"
#endif

namespace meshrt {

std::vector<std::string> built_backends() {
  std::vector<std::string> names{"gloo"};
  if (MESHRT_HAVE_MPI) names.emplace_back("mpi");
  if (MESHRT_HAVE_NCCL) names.emplace_back("nccl");
  return names;
}

std::unique_ptr<Backend> make_backend(std::string_view name, const GroupSpec& spec) {
  if (name == "gloo") {
    GlooConfig g;
    g.store = spec.store;
    g.store_key = spec.store_key;
    g.hostname = spec.hostname;
    g.iface = spec.iface;
    g.rank = spec.rank;
    g.size = static_cast<int>(spec.global_ranks.size());
    g.timeout = spec.timeout;
    return make_gloo_backend(g);
  }
#if MESHRT_HAVE_MPI
  if (name == "mpi") return make_mpi_backend(spec);
#endif
#if MESHRT_HAVE_NCCL
  if (name == "nccl") return make_nccl_backend(spec);
#endif
  throw Error(
      ErrorCode::kInvalidArgument,
      {spec.global_ranks.empty() ? -1 : spec.global_ranks[spec.rank], spec.name, "init", -1},
      fmt::format("backend '{}' is not built in; this build has: {}", name,
                  fmt::join(built_backends(), ", ")));
}

}  // namespace meshrt
