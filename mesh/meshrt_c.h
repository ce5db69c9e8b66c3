/* meshrt's C API, installed as <meshrt/meshrt_c.h>: for C trainers and for other languages'
 * bindings. C11, no C++ type in it; a thin layer over the C++ API in libmeshrt_c (pkg-config
 * meshrt-c), whose exported symbols are versioned (MESHRT_C_0.1).
 *
 *   meshrt_comm* world;
 *   if (meshrt_init(&world) != MESHRT_OK) { fprintf(stderr, "%s\n", meshrt_last_error()); }
 *   meshrt_all_reduce(world, grad, n, MESHRT_FLOAT32, MESHRT_SUM, NULL);  // NULL: blocking.
 *   meshrt_comm_free(world);
 *
 * Every call returns a meshrt_status; on failure meshrt_last_error() says what went wrong (the
 * rank, communicator and op, as the C++ API's errors do), per thread. No C++ exception ever
 * crosses this boundary. docs/c-api.md has the lifetime and threading rules and a table of
 * NCCL's and MPI's equivalents. */
#ifndef MESHRT_MESHRT_C_H_
#define MESHRT_MESHRT_C_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What a call returned: MESHRT_OK, or why it failed (the C++ API's meshrt::ErrorCode, same order,
 * plus 1). */
typedef enum meshrt_status {
  MESHRT_OK = 0,
  MESHRT_ERR_INVALID_ARGUMENT = 1, /* Bad argument or handle: nothing was sent; fix the call. */
  MESHRT_ERR_TIMEOUT = 2,          /* A deadline passed: recreate the communicator. */
  MESHRT_ERR_PEER_FAILURE = 3,     /* A peer died or closed its connection. */
  MESHRT_ERR_BACKEND = 4,          /* The backend library failed otherwise. */
  MESHRT_ERR_STORE = 5,            /* The rendezvous store refused or failed a request. */
  MESHRT_ERR_ABORTED = 6,          /* The communicator was aborted. */
  MESHRT_ERR_NOT_SUPPORTED = 7,    /* The backend or build lacks the feature. */
  MESHRT_ERR_INTERNAL = 8          /* A meshrt bug, or a foreign exception: report it. */
} meshrt_status;

/* How meshrt_comm_shrink treats the excluded ranks and the ops in flight (meshrt::ShrinkMode). */
typedef enum meshrt_shrink_mode {
  MESHRT_SHRINK_DEFAULT = 0, /* Planned: every rank calls it, the excluded get NULL; a split. */
  MESHRT_SHRINK_ABORT = 1    /* Repair: only the survivors call it; fails what is in flight. */
} meshrt_shrink_mode;

/* Element types (the C++ API's meshrt::DType, same order). */
typedef enum meshrt_dtype {
  MESHRT_FLOAT32 = 0,
  MESHRT_FLOAT64 = 1,
  MESHRT_FLOAT16 = 2,
  MESHRT_BFLOAT16 = 3,
  MESHRT_INT8 = 4,
  MESHRT_UINT8 = 5,
  MESHRT_INT32 = 6,
  MESHRT_INT64 = 7,
  MESHRT_FLOAT8_E4M3 = 8,
  MESHRT_FLOAT8_E5M2 = 9
} meshrt_dtype;

/* Reductions (the C++ API's meshrt::ReduceOp, same order); avg on floating types only. */
typedef enum meshrt_reduce_op {
  MESHRT_SUM = 0,
  MESHRT_PROD = 1,
  MESHRT_MIN = 2,
  MESHRT_MAX = 3,
  MESHRT_AVG = 4
} meshrt_reduce_op;

/* A user-defined reduction's function (MPI_Op_create's user function): it sets
 * inout[i] = in[i] (op) inout[i] for `count` elements and must be associative and commutative
 * (algorithms fold in any order). It may run on a meshrt thread, several ops' at once. */
typedef void (*meshrt_reduce_fn)(const void* in, void* inout, size_t count, void* user);

/* The comm logger summary's form: an aligned text table, or one JSON object. */
typedef enum meshrt_summary_format {
  MESHRT_SUMMARY_TEXT = 0,
  MESHRT_SUMMARY_JSON = 1
} meshrt_summary_format;

/* A user scope's training phase (trace::Phase); INHERIT takes the enclosing scope's. */
typedef enum meshrt_phase {
  MESHRT_PHASE_INHERIT = 0,
  MESHRT_PHASE_FORWARD = 1,
  MESHRT_PHASE_BACKWARD = 2,
  MESHRT_PHASE_OPTIMIZER = 3,
  MESHRT_PHASE_OTHER = 4
} meshrt_phase;

/* A communicator: a world, a mesh dimension's group, or a split. Free with meshrt_comm_free. */
typedef struct meshrt_comm meshrt_comm;
/* A DeviceMesh. Free with meshrt_mesh_free; communicators taken from it stay valid after. */
typedef struct meshrt_mesh meshrt_mesh;
/* One op in flight. Free with meshrt_work_free, after which the op still runs to completion. */
typedef struct meshrt_work meshrt_work;
/* A user-defined reduction. Free with meshrt_reducer_free; ops in flight keep it alive. */
typedef struct meshrt_reducer meshrt_reducer;

/* "0.1.0": the library's version (not the header's). */
const char* meshrt_version(void);
/* The message of this thread's last failed call ("" before any; a success leaves it): valid until
 * this thread's next failed call. */
const char* meshrt_last_error(void);
/* "ok", "invalid_argument", "timeout", ... (static storage; "unknown" for other values). */
const char* meshrt_status_name(meshrt_status status);

/* Joins the job the launcher describes (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT from meshrun
 * or torchrun; mpirun's or srun's layout), as meshrt::init(): the world communicator. */
meshrt_status meshrt_init(meshrt_comm** world);
/* Runs fn(world, user) on `world_size` threads, each one rank of an in-process world, and returns
 * once all returned (meshrt::run_inproc). `world` belongs to the call: do not free it; split it or
 * build meshes on it freely. */
meshrt_status meshrt_run_inproc(int world_size, void (*fn)(meshrt_comm* world, void* user),
                                void* user);
/* Releases a handle (NULL is ignored). The communicator lives on while other handles or meshes
 * hold it; the last release of a world waits for its ops as the C++ API does. */
void meshrt_comm_free(meshrt_comm* comm);

/* This rank in `comm`, the number of ranks, and its name ("world", "mesh0/tp"; valid while
 * `comm` lives). */
meshrt_status meshrt_comm_rank(const meshrt_comm* comm, int* rank);
meshrt_status meshrt_comm_size(const meshrt_comm* comm, int* size);
meshrt_status meshrt_comm_name(const meshrt_comm* comm, const char** name);
/* Splits `comm` as MPI_Comm_split: ranks of one `color` form a group, ordered by `key` then rank.
 * Collective over `comm`. */
meshrt_status meshrt_comm_split(meshrt_comm* comm, int color, int key, meshrt_comm** out);
/* Fails every op in flight or queued on `comm`, now and later (kAborted); any thread. */
meshrt_status meshrt_comm_abort(meshrt_comm* comm);
/* Repair in place (docs/repair.md). The group ranks of `comm` known to have died, ascending: the
 * first `capacity` into `ranks` (NULL when capacity is 0), their number into *count (call again
 * with more room when it exceeds capacity). */
meshrt_status meshrt_comm_failed_ranks(const meshrt_comm* comm, int* ranks, size_t capacity,
                                       size_t* count);
/* A communicator of `comm`'s ranks but the `n` group ranks `excluded`, renumbered in order and
 * named "<name>@<epoch>" (meshrt::Communicator::shrink). *out is NULL on excluded ranks. */
meshrt_status meshrt_comm_shrink(meshrt_comm* comm, const int* excluded, size_t n,
                                 meshrt_shrink_mode mode, meshrt_comm** out);

/* A mesh of `ndim` dimensions of `shape[i]` ranks named `names[i]` over `world`, one
 * communicator per dimension (meshrt::init_device_mesh). Collective over `world`. */
meshrt_status meshrt_init_device_mesh(meshrt_comm* world, const int64_t* shape,
                                      const char* const* names, int ndim, meshrt_mesh** mesh);
void meshrt_mesh_free(meshrt_mesh* mesh);
/* The communicator of dimension `dim` (a new handle: free it). */
meshrt_status meshrt_mesh_comm(const meshrt_mesh* mesh, const char* dim, meshrt_comm** comm);
/* This rank's index along dimension `dim`. */
meshrt_status meshrt_mesh_local_rank(const meshrt_mesh* mesh, const char* dim, int64_t* index);
/* Global ranks of the mesh's world known to have died, as meshrt_comm_failed_ranks. */
meshrt_status meshrt_mesh_failed_ranks(const meshrt_mesh* mesh, int* ranks, size_t capacity,
                                       size_t* count);
/* The mesh without the replicas along its first dimension that hold a rank of `failed` (`n`
 * global ranks), rebuilt over the survivors (meshrt::DeviceMesh::shrink). Every living rank of
 * the world calls it; *out is NULL on the ranks that leave. */
meshrt_status meshrt_mesh_shrink(const meshrt_mesh* mesh, const int* failed, size_t n,
                                 meshrt_mesh** out);

/* The ops. Each takes `work`: NULL blocks until the op completed (and returns its failure);
 * otherwise *work receives a handle and the call returns at once. Buffers must stay valid and
 * untouched until the op completed. Counts are elements of `dtype`. */

/* Reduces `data` across `comm`, in place. */
meshrt_status meshrt_all_reduce(meshrt_comm* comm, void* data, size_t count, meshrt_dtype dtype,
                                meshrt_reduce_op op, meshrt_work** work);
/* Copies `data` of `root` into `data` of every rank. */
meshrt_status meshrt_broadcast(meshrt_comm* comm, void* data, size_t count, meshrt_dtype dtype,
                               int root, meshrt_work** work);
/* Reduces `data` into `data` of `root`; other ranks' buffers stay as they were. */
meshrt_status meshrt_reduce(meshrt_comm* comm, void* data, size_t count, meshrt_dtype dtype,
                            meshrt_reduce_op op, int root, meshrt_work** work);
/* Concatenates every rank's `count` elements at `input`, in rank order, into `output` (size x
 * count). In place when `input` is this rank's block of `output` (MPI_IN_PLACE's form). */
meshrt_status meshrt_all_gather(meshrt_comm* comm, const void* input, void* output, size_t count,
                                meshrt_dtype dtype, meshrt_work** work);
/* Reduces `input` (size x count) and leaves this rank's block of `count` in `output`. */
meshrt_status meshrt_reduce_scatter(meshrt_comm* comm, const void* input, void* output,
                                    size_t count, meshrt_dtype dtype, meshrt_reduce_op op,
                                    meshrt_work** work);
/* Sends block j of `input` to rank j and receives rank j's block into block j of `output`;
 * `count` (the whole buffer) divides evenly into size blocks. */
meshrt_status meshrt_all_to_all(meshrt_comm* comm, const void* input, void* output, size_t count,
                                meshrt_dtype dtype, meshrt_work** work);
/* Uneven all_to_all: `input_counts[j]` elements go to rank j and `output_counts[j]` come from it,
 * each block after the one before (size entries each). */
meshrt_status meshrt_all_to_all_v(meshrt_comm* comm, const void* input, const size_t* input_counts,
                                  void* output, const size_t* output_counts, meshrt_dtype dtype,
                                  meshrt_work** work);
/* all_gather with a block of its own size per rank (MPI_Allgatherv): rank q's counts[q] elements
 * at its `input` land in `output` at element offsets[q] (offsets NULL: each block right after the
 * one before). counts and offsets have size entries, equal on every rank; blocks never overlap.
 * In place when `input` is this rank's block of `output` (MPI_IN_PLACE's form). */
meshrt_status meshrt_all_gather_v(meshrt_comm* comm, const void* input, void* output,
                                  const size_t* counts, const size_t* offsets, meshrt_dtype dtype,
                                  meshrt_work** work);
/* reduce_scatter with a block of its own size per rank: block q of `input` (counts[q] elements at
 * offsets[q]; offsets NULL: one after the other), reduced over every rank, lands in `output`
 * (counts[q] elements) of rank q. In place when `output` is this rank's block of `input`. */
meshrt_status meshrt_reduce_scatter_v(meshrt_comm* comm, const void* input, void* output,
                                      const size_t* counts, const size_t* offsets,
                                      meshrt_dtype dtype, meshrt_reduce_op op, meshrt_work** work);
/* Concatenates every rank's `count` elements into `output` on `root` (ignored elsewhere). */
meshrt_status meshrt_gather(meshrt_comm* comm, const void* input, void* output, size_t count,
                            meshrt_dtype dtype, int root, meshrt_work** work);
/* Sends block j of `input` on `root` (ignored elsewhere) to `output` (`count`) of rank j. */
meshrt_status meshrt_scatter(meshrt_comm* comm, const void* input, void* output, size_t count,
                             meshrt_dtype dtype, int root, meshrt_work** work);
/* Completes once every rank entered it. */
meshrt_status meshrt_barrier(meshrt_comm* comm, meshrt_work** work);
/* Sends `count` elements to rank `peer`, matched in order with its receives of `tag`. */
meshrt_status meshrt_send(meshrt_comm* comm, const void* data, size_t count, meshrt_dtype dtype,
                          int peer, int tag, meshrt_work** work);
/* Receives the next message of `tag` from `peer`; its size must be `count` elements. */
meshrt_status meshrt_recv(meshrt_comm* comm, void* data, size_t count, meshrt_dtype dtype, int peer,
                          int tag, meshrt_work** work);

/* A reduction by fn(in, inout, count, user) over opaque elements of `element_bytes` (a histogram
 * bin, a value-and-index pair), named `name` in records, dumps and mismatch reports. It folds
 * in all_reduce, reduce and reduce_scatter(_v) on every CPU backend (NCCL refuses it). */
meshrt_status meshrt_reducer_create(const char* name, size_t element_bytes, meshrt_reduce_fn fn,
                                    void* user, meshrt_reducer** reducer);
/* As meshrt_reducer_create, over elements of `dtype` (a Kahan sum of float64, say): its ops'
 * buffers are of that dtype, and records name it. */
meshrt_status meshrt_reducer_create_typed(const char* name, meshrt_dtype dtype, meshrt_reduce_fn fn,
                                          void* user, meshrt_reducer** reducer);
void meshrt_reducer_free(meshrt_reducer* reducer);

/* all_reduce, reduce and reduce_scatter by `reducer`: `count` counts its elements. */
meshrt_status meshrt_all_reduce_custom(meshrt_comm* comm, void* data, size_t count,
                                       const meshrt_reducer* reducer, meshrt_work** work);
meshrt_status meshrt_reduce_custom(meshrt_comm* comm, void* data, size_t count,
                                   const meshrt_reducer* reducer, int root, meshrt_work** work);
meshrt_status meshrt_reduce_scatter_custom(meshrt_comm* comm, const void* input, void* output,
                                           size_t count, const meshrt_reducer* reducer,
                                           meshrt_work** work);
/* reduce_scatter_v by `reducer`: counts and offsets count its elements. */
meshrt_status meshrt_reduce_scatter_v_custom(meshrt_comm* comm, const void* input, void* output,
                                             const size_t* counts, const size_t* offsets,
                                             const meshrt_reducer* reducer, meshrt_work** work);

/* The file and line that the next op called on this thread records as its call site (in records,
 * dumps and the analyzer's verdicts), instead of the op's own name: the macros below pass each
 * caller's __FILE__ and __LINE__ to it; a language binding passes its user's line. `file` is
 * copied (interned). */
meshrt_status meshrt_call_site(const char* file, int line);

/* Blocks until the op completed; returns its failure. */
meshrt_status meshrt_work_wait(meshrt_work* work);
/* As meshrt_work_wait, but at most `timeout_ms`: MESHRT_ERR_TIMEOUT then, and the op runs on
 * (waiting again is safe). */
meshrt_status meshrt_work_wait_timeout(meshrt_work* work, uint64_t timeout_ms);
/* *done = 1 once the op completed or failed, else 0; never blocks. */
meshrt_status meshrt_work_test(meshrt_work* work, int* done);
void meshrt_work_free(meshrt_work* work);

/* Opens a user scope ("MLP.fc2", forward) on this thread: ops until the matching pop are
 * attributed to it in records, dumps and summaries. Scopes nest; pop closes the innermost. */
meshrt_status meshrt_scope_push(const char* name, meshrt_phase phase);
meshrt_status meshrt_scope_pop(void);
/* Writes this process's flight-recorder dump now (where MESHRT_DUMP_PREFIX says). */
meshrt_status meshrt_dump_flight_recorder(void);

/* The comm logger (DeepSpeed's comms logger, per mesh dim): start recording every op's latency,
 * size and bandwidth in this process (as MESHRT_COMMS_LOG=1, which also prints each rank's table
 * at exit), stop recording (what was recorded stays), or drop what was recorded. */
meshrt_status meshrt_comms_log_start(void);
meshrt_status meshrt_comms_log_stop(void);
meshrt_status meshrt_comms_log_reset(void);
/* The summary of the ops this rank (comm's global rank) ran while recording, per mesh dim, op and
 * message size: count, mean bytes, latency mean/p50/p99, algbw and busbw. Written as snprintf
 * does: at most `buf_bytes` bytes with the terminating NUL (buf may be NULL when buf_bytes is 0);
 * *length (if not NULL) receives the whole summary's length without the NUL. */
meshrt_status meshrt_comms_summary(const meshrt_comm* comm, meshrt_summary_format format, char* buf,
                                   size_t buf_bytes, size_t* length);

/* Every op called through these macros records its caller's file and line (define
 * MESHRT_NO_CALL_SITE_MACROS to call the functions plainly; `(meshrt_all_reduce)(...)` also does).
 */
#ifndef MESHRT_NO_CALL_SITE_MACROS
#define MESHRT_AT_CALLER_(fn, ...) (meshrt_call_site(__FILE__, __LINE__), (fn)(__VA_ARGS__))
#define meshrt_all_reduce(...) MESHRT_AT_CALLER_(meshrt_all_reduce, __VA_ARGS__)
#define meshrt_broadcast(...) MESHRT_AT_CALLER_(meshrt_broadcast, __VA_ARGS__)
#define meshrt_reduce(...) MESHRT_AT_CALLER_(meshrt_reduce, __VA_ARGS__)
#define meshrt_all_gather(...) MESHRT_AT_CALLER_(meshrt_all_gather, __VA_ARGS__)
#define meshrt_reduce_scatter(...) MESHRT_AT_CALLER_(meshrt_reduce_scatter, __VA_ARGS__)
#define meshrt_all_reduce_custom(...) MESHRT_AT_CALLER_(meshrt_all_reduce_custom, __VA_ARGS__)
#define meshrt_reduce_custom(...) MESHRT_AT_CALLER_(meshrt_reduce_custom, __VA_ARGS__)
#define meshrt_reduce_scatter_custom(...) \
  MESHRT_AT_CALLER_(meshrt_reduce_scatter_custom, __VA_ARGS__)
#define meshrt_all_gather_v(...) MESHRT_AT_CALLER_(meshrt_all_gather_v, __VA_ARGS__)
#define meshrt_reduce_scatter_v(...) MESHRT_AT_CALLER_(meshrt_reduce_scatter_v, __VA_ARGS__)
#define meshrt_reduce_scatter_v_custom(...) \
  MESHRT_AT_CALLER_(meshrt_reduce_scatter_v_custom, __VA_ARGS__)
#define meshrt_all_to_all(...) MESHRT_AT_CALLER_(meshrt_all_to_all, __VA_ARGS__)
#define meshrt_all_to_all_v(...) MESHRT_AT_CALLER_(meshrt_all_to_all_v, __VA_ARGS__)
#define meshrt_gather(...) MESHRT_AT_CALLER_(meshrt_gather, __VA_ARGS__)
#define meshrt_scatter(...) MESHRT_AT_CALLER_(meshrt_scatter, __VA_ARGS__)
#define meshrt_barrier(...) MESHRT_AT_CALLER_(meshrt_barrier, __VA_ARGS__)
#define meshrt_send(...) MESHRT_AT_CALLER_(meshrt_send, __VA_ARGS__)
#define meshrt_recv(...) MESHRT_AT_CALLER_(meshrt_recv, __VA_ARGS__)
#endif

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* MESHRT_MESHRT_C_H_ */
