// The C API (meshrt_c.h) over the C++ one: handles own shared_ptrs, every call catches every
// exception and turns it into a status and this thread's last error.
// The definitions below carry the ops' own names: no call-site macros here.
#define MESHRT_NO_CALL_SITE_MACROS
#include "mesh/meshrt_c.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "mesh/meshrt.h"
#include "meshrt_config.h"
#include "trace/comm_logger.h"

struct meshrt_comm {
  std::shared_ptr<meshrt::Communicator> comm;
};
struct meshrt_mesh {
  std::shared_ptr<meshrt::DeviceMesh> mesh;
};
struct meshrt_work {
  meshrt::WorkHandle work;
};
struct meshrt_reducer {
  std::shared_ptr<const meshrt::Reducer> reducer;
};

namespace {

using meshrt::Error;
using meshrt::ErrorCode;

thread_local std::string last_error;
// The call site meshrt_call_site() set for this thread's next op; file null when none.
thread_local meshrt::CallSite next_call_site{nullptr, 0};

// `file` for good: records keep the pointer. Callers pass the same few files again and again.
const char* intern(const char* file) {
  thread_local const char* last = nullptr;
  if (last != nullptr && std::strcmp(last, file) == 0) return last;
  static std::mutex mutex;
  // Never destroyed, not even at exit: the trace sinks write their last records then, after
  // function-local statics are gone.
  static std::set<std::string>& files = *new std::set<std::string>();
  std::lock_guard lock(mutex);
  return last = files.insert(file).first->c_str();
}
// Scopes this thread opened through meshrt_scope_push, innermost last.
thread_local std::vector<std::unique_ptr<meshrt::trace::Scope>> open_scopes;

// A caller's mistake the C layer sees itself (a NULL pointer, a value outside its enum).
struct CallerMistake : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

CallerMistake invalid(const char* call, const std::string& what) {
  return CallerMistake(fmt::format("{}: {}", call, what));
}

template <typename T>
T& need(T* p, const char* call, const char* name) {
  if (p == nullptr) throw invalid(call, fmt::format("{} is NULL", name));
  return *p;
}

// Runs f, returning MESHRT_OK or the failure it threw, whose message becomes the last error.
template <typename F>
meshrt_status guarded(const char* call, F&& f) noexcept {
  try {
    f();
    return MESHRT_OK;
  } catch (const Error& e) {
    last_error = e.what();
    return static_cast<meshrt_status>(static_cast<int>(e.code()) + 1);
  } catch (const CallerMistake& e) {
    last_error = Error(ErrorCode::kInvalidArgument, {}, e.what()).what();
    return MESHRT_ERR_INVALID_ARGUMENT;
  } catch (const std::exception& e) {
    last_error = fmt::format("{}: {}", call, e.what());
  } catch (...) {
    last_error = fmt::format("{}: an exception that is not a std::exception", call);
  }
  return MESHRT_ERR_INTERNAL;
}

meshrt::DType dtype_of(meshrt_dtype d, const char* call) {
  if (static_cast<int>(d) < MESHRT_FLOAT32 || static_cast<int>(d) > MESHRT_FLOAT8_E5M2) {
    throw invalid(call, fmt::format("dtype {} is not a meshrt_dtype", static_cast<int>(d)));
  }
  return static_cast<meshrt::DType>(d);
}

meshrt::ReduceOp reduce_op_of(meshrt_reduce_op r, const char* call) {
  if (static_cast<int>(r) < MESHRT_SUM || static_cast<int>(r) > MESHRT_AVG) {
    throw invalid(call, fmt::format("reduce op {} is not a meshrt_reduce_op", static_cast<int>(r)));
  }
  return static_cast<meshrt::ReduceOp>(r);
}

// A view of caller memory; inputs are only read, though views are not const.
meshrt::BufferView view_of(const void* data, size_t count, meshrt_dtype dtype, const char* call) {
  return meshrt::view(const_cast<void*>(data), count, dtype_of(dtype, call));
}

std::shared_ptr<const meshrt::Reducer> make_reducer(const char* name, size_t element_bytes,
                                                    meshrt_reduce_fn fn, void* user,
                                                    std::optional<meshrt::DType> dtype,
                                                    const char* call) {
  need(fn, call, "fn");
  return meshrt::Reducer::create(
      &need(name, call, "name"), element_bytes,
      [fn, user](const void* in, void* inout, size_t count) { fn(in, inout, count, user); }, dtype);
}

// A view of `count` elements of what `r` folds: its dtype's, or its opaque records.
meshrt::BufferView custom_view(const void* data, size_t count, const meshrt::Reducer& r) {
  void* p = const_cast<void*>(data);
  return r.dtype() ? meshrt::view(p, count, *r.dtype())
                   : meshrt::records(p, count, r.element_bytes());
}

// A v-collective's blocks from C: size entries of counts, and of offsets unless NULL; and the
// elements of the whole buffer they cut (the end of the furthest block, saturating: validation
// refuses what overflows).
struct CBlocks {
  std::span<const size_t> counts;
  std::span<const size_t> offsets;
  size_t whole = 0;
};

CBlocks blocks_of(const size_t* counts, const size_t* offsets, int size, const char* call) {
  const size_t n = static_cast<size_t>(size);
  CBlocks b{{&need(counts, call, "counts"), n}, {}, 0};
  if (offsets != nullptr) b.offsets = {offsets, n};
  size_t next = 0;
  for (size_t q = 0; q < n; ++q) {
    const size_t start = offsets != nullptr ? offsets[q] : next;
    if (__builtin_add_overflow(start, counts[q], &next)) next = SIZE_MAX;
    b.whole = std::max(b.whole, next);
  }
  return b;
}

template <typename T, typename H>
T* release_into(T** out, H&& value, const char* call, const char* name) {
  need(out, call, name);
  *out = std::make_unique<T>(T{std::forward<H>(value)}).release();
  return *out;
}

// Hands out a list of ranks the way snprintf hands out text: the first `capacity` into `ranks`,
// the whole count into *count.
void copy_ranks(const std::vector<int>& list, int* ranks, size_t capacity, size_t* count,
                const char* call) {
  need(count, call, "count");
  if (capacity > 0) need(ranks, call, "ranks");
  std::copy_n(list.begin(), std::min(capacity, list.size()), ranks);
  *count = list.size();
}

// Starts an op with `start(comm, call site)`; blocks on it when `work` is NULL, else hands it
// out. The call site is the one meshrt_call_site() set, else the call's own name.
template <typename F>
meshrt_status submit(const char* call, meshrt_comm* comm, meshrt_work** work, F&& start) {
  meshrt::CallSite site = std::exchange(next_call_site, meshrt::CallSite{nullptr, 0});
  if (site.file == nullptr) site = meshrt::CallSite{call, 0};
  return guarded(call, [&] {
    meshrt::Communicator& c = *need(comm, call, "comm").comm;
    meshrt::WorkHandle w;
    try {
      w = start(c, site);
    } catch (const CallerMistake& e) {  // Named as the C++ API names its own refusals.
      const std::string_view op = std::string_view(call).substr(std::strlen("meshrt_"));
      throw Error(ErrorCode::kInvalidArgument, {c.global_rank(), c.name(), std::string(op)},
                  std::string(e.what()).substr(std::strlen(call) + 2));
    }
    if (work == nullptr) {
      w->wait();
    } else {
      release_into(work, std::move(w), call, "work");
    }
  });
}

}  // namespace

extern "C" {

const char* meshrt_version(void) { return MESHRT_VERSION; }

const char* meshrt_last_error(void) { return last_error.c_str(); }

const char* meshrt_status_name(meshrt_status status) {
  if (status == MESHRT_OK) return "ok";
  if (status < MESHRT_ERR_INVALID_ARGUMENT || status > MESHRT_ERR_INTERNAL) return "unknown";
  // error_code_name's views are of string literals: NUL-terminated.
  return meshrt::error_code_name(static_cast<ErrorCode>(static_cast<int>(status) - 1)).data();
}

meshrt_status meshrt_init(meshrt_comm** world) {
  return guarded("meshrt_init", [&] {
    need(world, "meshrt_init", "world");  // Before joining: nowhere to put the world.
    release_into(world, meshrt::init(), "meshrt_init", "world");
  });
}

meshrt_status meshrt_run_inproc(int world_size, void (*fn)(meshrt_comm* world, void* user),
                                void* user) {
  return guarded("meshrt_run_inproc", [&] {
    need(fn, "meshrt_run_inproc", "fn");
    meshrt::run_inproc(world_size, [&](meshrt::Communicator&) {
      meshrt_comm world{meshrt::default_world()};
      fn(&world, user);
    });
  });
}

void meshrt_comm_free(meshrt_comm* comm) { std::unique_ptr<meshrt_comm> owned(comm); }

meshrt_status meshrt_comm_rank(const meshrt_comm* comm, int* rank) {
  return guarded("meshrt_comm_rank", [&] {
    need(rank, "meshrt_comm_rank", "rank") = need(comm, "meshrt_comm_rank", "comm").comm->rank();
  });
}

meshrt_status meshrt_comm_size(const meshrt_comm* comm, int* size) {
  return guarded("meshrt_comm_size", [&] {
    need(size, "meshrt_comm_size", "size") = need(comm, "meshrt_comm_size", "comm").comm->size();
  });
}

meshrt_status meshrt_comm_name(const meshrt_comm* comm, const char** name) {
  return guarded("meshrt_comm_name", [&] {
    need(name, "meshrt_comm_name", "name") =
        need(comm, "meshrt_comm_name", "comm").comm->name().c_str();
  });
}

meshrt_status meshrt_comm_split(meshrt_comm* comm, int color, int key, meshrt_comm** out) {
  return guarded("meshrt_comm_split", [&] {
    need(out, "meshrt_comm_split", "out");
    auto split = need(comm, "meshrt_comm_split", "comm").comm->split(color, key);
    release_into(out, std::move(split), "meshrt_comm_split", "out");
  });
}

meshrt_status meshrt_comm_abort(meshrt_comm* comm) {
  return guarded("meshrt_comm_abort",
                 [&] { need(comm, "meshrt_comm_abort", "comm").comm->abort(); });
}

meshrt_status meshrt_comm_failed_ranks(const meshrt_comm* comm, int* ranks, size_t capacity,
                                       size_t* count) {
  const char* call = "meshrt_comm_failed_ranks";
  return guarded(call, [&] {
    copy_ranks(need(comm, call, "comm").comm->failed_ranks(), ranks, capacity, count, call);
  });
}

meshrt_status meshrt_comm_shrink(meshrt_comm* comm, const int* excluded, size_t n,
                                 meshrt_shrink_mode mode, meshrt_comm** out) {
  const char* call = "meshrt_comm_shrink";
  return guarded(call, [&] {
    need(out, call, "out");
    if (n > 0) need(excluded, call, "excluded");
    if (mode != MESHRT_SHRINK_DEFAULT && mode != MESHRT_SHRINK_ABORT) {
      throw invalid(call,
                    fmt::format("mode {} is not a meshrt_shrink_mode", static_cast<int>(mode)));
    }
    auto shrunk = need(comm, call, "comm")
                      .comm->shrink(std::span<const int>(excluded, n),
                                    mode == MESHRT_SHRINK_ABORT ? meshrt::ShrinkMode::kAbort
                                                                : meshrt::ShrinkMode::kDefault);
    *out = shrunk ? release_into(out, std::move(shrunk), call, "out") : nullptr;
  });
}

meshrt_status meshrt_init_device_mesh(meshrt_comm* world, const int64_t* shape,
                                      const char* const* names, int ndim, meshrt_mesh** mesh) {
  const char* call = "meshrt_init_device_mesh";
  return guarded(call, [&] {
    need(mesh, call, "mesh");
    if (ndim < 1) throw invalid(call, fmt::format("ndim is {}", ndim));
    need(shape, call, "shape");
    std::vector<int64_t> dims(shape, shape + ndim);
    std::vector<std::string> dim_names;
    if (names != nullptr) {
      for (int i = 0; i < ndim; ++i) {
        if (names[i] == nullptr) throw invalid(call, fmt::format("names[{}] is NULL", i));
        dim_names.emplace_back(names[i]);
      }
    }
    auto m = meshrt::init_device_mesh(need(world, call, "world").comm, "cpu", std::move(dims),
                                      std::move(dim_names));
    release_into(mesh, std::move(m), call, "mesh");
  });
}

void meshrt_mesh_free(meshrt_mesh* mesh) { std::unique_ptr<meshrt_mesh> owned(mesh); }

meshrt_status meshrt_mesh_comm(const meshrt_mesh* mesh, const char* dim, meshrt_comm** comm) {
  const char* call = "meshrt_mesh_comm";
  return guarded(call, [&] {
    const meshrt::DeviceMesh& m = *need(mesh, call, "mesh").mesh;
    need(comm, call, "comm");
    auto c = m.comm_ptr(m.dim_index(&need(dim, call, "dim")));
    release_into(comm, std::move(c), call, "comm");
  });
}

meshrt_status meshrt_mesh_failed_ranks(const meshrt_mesh* mesh, int* ranks, size_t capacity,
                                       size_t* count) {
  const char* call = "meshrt_mesh_failed_ranks";
  return guarded(call, [&] {
    copy_ranks(need(mesh, call, "mesh").mesh->failed_ranks(), ranks, capacity, count, call);
  });
}

meshrt_status meshrt_mesh_shrink(const meshrt_mesh* mesh, const int* failed, size_t n,
                                 meshrt_mesh** out) {
  const char* call = "meshrt_mesh_shrink";
  return guarded(call, [&] {
    need(out, call, "out");
    if (n > 0) need(failed, call, "failed");
    auto shrunk = need(mesh, call, "mesh").mesh->shrink(std::span<const int>(failed, n));
    *out = shrunk ? release_into(out, std::move(shrunk), call, "out") : nullptr;
  });
}

meshrt_status meshrt_mesh_local_rank(const meshrt_mesh* mesh, const char* dim, int64_t* index) {
  const char* call = "meshrt_mesh_local_rank";
  return guarded(call, [&] {
    need(index, call, "index") =
        need(mesh, call, "mesh").mesh->local_rank(std::string_view(&need(dim, call, "dim")));
  });
}

meshrt_status meshrt_all_reduce(meshrt_comm* comm, void* data, size_t count, meshrt_dtype dtype,
                                meshrt_reduce_op op, meshrt_work** work) {
  const char* call = "meshrt_all_reduce";
  return submit(call, comm, work, [&](meshrt::Communicator& c, const meshrt::CallSite& at) {
    return c.all_reduce(view_of(data, count, dtype, call), reduce_op_of(op, call), {}, at);
  });
}

meshrt_status meshrt_reducer_create(const char* name, size_t element_bytes, meshrt_reduce_fn fn,
                                    void* user, meshrt_reducer** reducer) {
  const char* call = "meshrt_reducer_create";
  return guarded(call, [&] {
    release_into(reducer, make_reducer(name, element_bytes, fn, user, std::nullopt, call), call,
                 "reducer");
  });
}

meshrt_status meshrt_reducer_create_typed(const char* name, meshrt_dtype dtype, meshrt_reduce_fn fn,
                                          void* user, meshrt_reducer** reducer) {
  const char* call = "meshrt_reducer_create_typed";
  return guarded(call, [&] {
    const meshrt::DType d = dtype_of(dtype, call);
    release_into(reducer, make_reducer(name, meshrt::dtype_size_bytes(d), fn, user, d, call), call,
                 "reducer");
  });
}

void meshrt_reducer_free(meshrt_reducer* reducer) {
  std::unique_ptr<meshrt_reducer> owned(reducer);
}

meshrt_status meshrt_all_reduce_custom(meshrt_comm* comm, void* data, size_t count,
                                       const meshrt_reducer* reducer, meshrt_work** work) {
  const char* call = "meshrt_all_reduce_custom";
  return submit(call, comm, work, [&](meshrt::Communicator& c, const meshrt::CallSite& at) {
    const auto& r = need(reducer, call, "reducer").reducer;
    return c.all_reduce(custom_view(data, count, *r), r, {}, at);
  });
}

meshrt_status meshrt_reduce_custom(meshrt_comm* comm, void* data, size_t count,
                                   const meshrt_reducer* reducer, int root, meshrt_work** work) {
  const char* call = "meshrt_reduce_custom";
  return submit(call, comm, work, [&](meshrt::Communicator& c, const meshrt::CallSite& at) {
    const auto& r = need(reducer, call, "reducer").reducer;
    return c.reduce(custom_view(data, count, *r), root, r, {}, at);
  });
}

meshrt_status meshrt_reduce_scatter_custom(meshrt_comm* comm, const void* input, void* output,
                                           size_t count, const meshrt_reducer* reducer,
                                           meshrt_work** work) {
  const char* call = "meshrt_reduce_scatter_custom";
  return submit(call, comm, work, [&](meshrt::Communicator& c, const meshrt::CallSite& at) {
    const auto& r = need(reducer, call, "reducer").reducer;
    const size_t n = static_cast<size_t>(c.size());
    return c.reduce_scatter(custom_view(input, count * n, *r), custom_view(output, count, *r), r,
                            {}, at);
  });
}

meshrt_status meshrt_all_gather_v(meshrt_comm* comm, const void* input, void* output,
                                  const size_t* counts, const size_t* offsets, meshrt_dtype dtype,
                                  meshrt_work** work) {
  const char* call = "meshrt_all_gather_v";
  return submit(call, comm, work, [&](meshrt::Communicator& c, const meshrt::CallSite& at) {
    const CBlocks b = blocks_of(counts, offsets, c.size(), call);
    return c.all_gather_v(view_of(input, b.counts[static_cast<size_t>(c.rank())], dtype, call),
                          view_of(output, b.whole, dtype, call), b.counts, b.offsets, {}, at);
  });
}

meshrt_status meshrt_reduce_scatter_v(meshrt_comm* comm, const void* input, void* output,
                                      const size_t* counts, const size_t* offsets,
                                      meshrt_dtype dtype, meshrt_reduce_op op, meshrt_work** work) {
  const char* call = "meshrt_reduce_scatter_v";
  return submit(call, comm, work, [&](meshrt::Communicator& c, const meshrt::CallSite& at) {
    const CBlocks b = blocks_of(counts, offsets, c.size(), call);
    return c.reduce_scatter_v(view_of(input, b.whole, dtype, call),
                              view_of(output, b.counts[static_cast<size_t>(c.rank())], dtype, call),
                              b.counts, b.offsets, reduce_op_of(op, call), {}, at);
  });
}

meshrt_status meshrt_reduce_scatter_v_custom(meshrt_comm* comm, const void* input, void* output,
                                             const size_t* counts, const size_t* offsets,
                                             const meshrt_reducer* reducer, meshrt_work** work) {
  const char* call = "meshrt_reduce_scatter_v_custom";
  return submit(call, comm, work, [&](meshrt::Communicator& c, const meshrt::CallSite& at) {
    const auto& r = need(reducer, call, "reducer").reducer;
    const CBlocks b = blocks_of(counts, offsets, c.size(), call);
    return c.reduce_scatter_v(custom_view(input, b.whole, *r),
                              custom_view(output, b.counts[static_cast<size_t>(c.rank())], *r),
                              b.counts, b.offsets, r, {}, at);
  });
}

meshrt_status meshrt_broadcast(meshrt_comm* comm, void* data, size_t count, meshrt_dtype dtype,
                               int root, meshrt_work** work) {
  const char* call = "meshrt_broadcast";
  return submit(call, comm, work, [&](meshrt::Communicator& c, const meshrt::CallSite& at) {
    return c.broadcast(view_of(data, count, dtype, call), root, {}, at);
  });
}

meshrt_status meshrt_reduce(meshrt_comm* comm, void* data, size_t count, meshrt_dtype dtype,
                            meshrt_reduce_op op, int root, meshrt_work** work) {
  const char* call = "meshrt_reduce";
  return submit(call, comm, work, [&](meshrt::Communicator& c, const meshrt::CallSite& at) {
    return c.reduce(view_of(data, count, dtype, call), root, reduce_op_of(op, call), {}, at);
  });
}

meshrt_status meshrt_all_gather(meshrt_comm* comm, const void* input, void* output, size_t count,
                                meshrt_dtype dtype, meshrt_work** work) {
  const char* call = "meshrt_all_gather";
  return submit(call, comm, work, [&](meshrt::Communicator& c, const meshrt::CallSite& at) {
    const size_t n = static_cast<size_t>(c.size());
    return c.all_gather(view_of(input, count, dtype, call), view_of(output, count * n, dtype, call),
                        {}, at);
  });
}

meshrt_status meshrt_reduce_scatter(meshrt_comm* comm, const void* input, void* output,
                                    size_t count, meshrt_dtype dtype, meshrt_reduce_op op,
                                    meshrt_work** work) {
  const char* call = "meshrt_reduce_scatter";
  return submit(call, comm, work, [&](meshrt::Communicator& c, const meshrt::CallSite& at) {
    const size_t n = static_cast<size_t>(c.size());
    return c.reduce_scatter(view_of(input, count * n, dtype, call),
                            view_of(output, count, dtype, call), reduce_op_of(op, call), {}, at);
  });
}

meshrt_status meshrt_all_to_all(meshrt_comm* comm, const void* input, void* output, size_t count,
                                meshrt_dtype dtype, meshrt_work** work) {
  const char* call = "meshrt_all_to_all";
  return submit(call, comm, work, [&](meshrt::Communicator& c, const meshrt::CallSite& at) {
    return c.all_to_all(view_of(input, count, dtype, call), view_of(output, count, dtype, call), {},
                        at);
  });
}

meshrt_status meshrt_all_to_all_v(meshrt_comm* comm, const void* input, const size_t* input_counts,
                                  void* output, const size_t* output_counts, meshrt_dtype dtype,
                                  meshrt_work** work) {
  const char* call = "meshrt_all_to_all_v";
  return submit(call, comm, work, [&](meshrt::Communicator& c, const meshrt::CallSite& at) {
    const size_t n = static_cast<size_t>(c.size());
    const std::span<const size_t> in(&need(input_counts, call, "input_counts"), n);
    const std::span<const size_t> out(&need(output_counts, call, "output_counts"), n);
    size_t sent = 0, received = 0;
    for (size_t j = 0; j < n; ++j) {
      sent += in[j];
      received += out[j];
    }
    return c.all_to_all(view_of(input, sent, dtype, call), in,
                        view_of(output, received, dtype, call), out, {}, at);
  });
}

meshrt_status meshrt_gather(meshrt_comm* comm, const void* input, void* output, size_t count,
                            meshrt_dtype dtype, int root, meshrt_work** work) {
  const char* call = "meshrt_gather";
  return submit(call, comm, work, [&](meshrt::Communicator& c, const meshrt::CallSite& at) {
    const size_t n = static_cast<size_t>(c.size());
    return c.gather(view_of(input, count, dtype, call), view_of(output, count * n, dtype, call),
                    root, {}, at);
  });
}

meshrt_status meshrt_scatter(meshrt_comm* comm, const void* input, void* output, size_t count,
                             meshrt_dtype dtype, int root, meshrt_work** work) {
  const char* call = "meshrt_scatter";
  return submit(call, comm, work, [&](meshrt::Communicator& c, const meshrt::CallSite& at) {
    const size_t n = static_cast<size_t>(c.size());
    return c.scatter(view_of(input, count * n, dtype, call), view_of(output, count, dtype, call),
                     root, {}, at);
  });
}

meshrt_status meshrt_barrier(meshrt_comm* comm, meshrt_work** work) {
  return submit(
      "meshrt_barrier", comm, work,
      [&](meshrt::Communicator& c, const meshrt::CallSite& at) { return c.barrier({}, at); });
}

meshrt_status meshrt_send(meshrt_comm* comm, const void* data, size_t count, meshrt_dtype dtype,
                          int peer, int tag, meshrt_work** work) {
  const char* call = "meshrt_send";
  return submit(call, comm, work, [&](meshrt::Communicator& c, const meshrt::CallSite& at) {
    return c.send(view_of(data, count, dtype, call), peer, tag, {}, at);
  });
}

meshrt_status meshrt_recv(meshrt_comm* comm, void* data, size_t count, meshrt_dtype dtype, int peer,
                          int tag, meshrt_work** work) {
  const char* call = "meshrt_recv";
  return submit(call, comm, work, [&](meshrt::Communicator& c, const meshrt::CallSite& at) {
    return c.recv(view_of(data, count, dtype, call), peer, tag, {}, at);
  });
}

meshrt_status meshrt_comms_log_start(void) {
  return guarded("meshrt_comms_log_start", [] {
    meshrt::trace::CommLogger& logger = meshrt::trace::CommLogger::instance();
    meshrt::trace::CommLoggerOptions options = logger.options();
    if (!options.enabled) {
      options.enabled = true;
      logger.configure(std::move(options));
    }
    logger.start();
  });
}

meshrt_status meshrt_comms_log_stop(void) {
  return guarded("meshrt_comms_log_stop", [] { meshrt::trace::CommLogger::instance().stop(); });
}

meshrt_status meshrt_comms_log_reset(void) {
  return guarded("meshrt_comms_log_reset", [] { meshrt::trace::CommLogger::instance().reset(); });
}

meshrt_status meshrt_comms_summary(const meshrt_comm* comm, meshrt_summary_format format, char* buf,
                                   size_t buf_bytes, size_t* length) {
  const char* call = "meshrt_comms_summary";
  return guarded(call, [&] {
    const int rank = need(comm, call, "comm").comm->global_rank();
    const meshrt::trace::CommLogger& logger = meshrt::trace::CommLogger::instance();
    std::string text;
    if (format == MESHRT_SUMMARY_TEXT) {
      text = logger.summary_table(rank);
    } else if (format == MESHRT_SUMMARY_JSON) {
      text = logger.summary_json(rank);
    } else {
      throw invalid(
          call, fmt::format("format {} is not a meshrt_summary_format", static_cast<int>(format)));
    }
    if (buf == nullptr && buf_bytes != 0) throw invalid(call, "buf is NULL but buf_bytes is not 0");
    if (length != nullptr) *length = text.size();
    if (buf_bytes == 0) return;
    const size_t n = std::min(text.size(), buf_bytes - 1);
    std::memcpy(buf, text.data(), n);
    buf[n] = '\0';
  });
}

meshrt_status meshrt_call_site(const char* file, int line) {
  return guarded("meshrt_call_site", [&] {
    const char* name = &need(file, "meshrt_call_site", "file");
    next_call_site = meshrt::CallSite{intern(name), static_cast<uint32_t>(std::max(line, 0))};
  });
}

meshrt_status meshrt_work_wait(meshrt_work* work) {
  return guarded("meshrt_work_wait", [&] { need(work, "meshrt_work_wait", "work").work->wait(); });
}

meshrt_status meshrt_work_wait_timeout(meshrt_work* work, uint64_t timeout_ms) {
  return guarded("meshrt_work_wait_timeout", [&] {
    need(work, "meshrt_work_wait_timeout", "work")
        .work->wait(std::chrono::milliseconds(std::min<uint64_t>(timeout_ms, INT64_MAX / 1000000)));
  });
}

meshrt_status meshrt_work_test(meshrt_work* work, int* done) {
  return guarded("meshrt_work_test", [&] {
    need(done, "meshrt_work_test", "done") =
        need(work, "meshrt_work_test", "work").work->test() ? 1 : 0;
  });
}

void meshrt_work_free(meshrt_work* work) { std::unique_ptr<meshrt_work> owned(work); }

meshrt_status meshrt_scope_push(const char* name, meshrt_phase phase) {
  const char* call = "meshrt_scope_push";
  return guarded(call, [&] {
    if (static_cast<int>(phase) < MESHRT_PHASE_INHERIT ||
        static_cast<int>(phase) > MESHRT_PHASE_OTHER) {
      throw invalid(call, fmt::format("phase {} is not a meshrt_phase", static_cast<int>(phase)));
    }
    open_scopes.push_back(std::make_unique<meshrt::trace::Scope>(
        &need(name, call, "name"), static_cast<meshrt::trace::Phase>(phase)));
  });
}

meshrt_status meshrt_scope_pop(void) {
  return guarded("meshrt_scope_pop", [&] {
    if (open_scopes.empty()) throw invalid("meshrt_scope_pop", "no scope is open on this thread");
    open_scopes.pop_back();
  });
}

meshrt_status meshrt_dump_flight_recorder(void) {
  return guarded("meshrt_dump_flight_recorder", [] { meshrt::trace::dump_flight_recorder(); });
}

}  // extern "C"
