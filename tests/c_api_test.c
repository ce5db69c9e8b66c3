/* The C API from C (compiled -std=c11 -pedantic -Werror, linked by the C compiler): every
 * collective and p2p op on an in-process world of 8 ranks (and, with --world, the collectives
 * on 8 processes under meshrun), checked element-wise; async works; a
 * split and a 2x4 mesh; scopes; user-defined reducers (opaque records and typed); shrinking
 * around a rank (planned, and after it died) and a mesh around a dead replica; and every status
 * code the API can return from its callers' mistakes, with the message that names the call. Prints
 * "c_api ok" and exits 0, else lists what failed and exits 1. */
/* nanosleep: POSIX, not C11. */
#define _POSIX_C_SOURCE 200809L
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mesh/meshrt_c.h"

#define WORLD 8

static atomic_int failures;
static atomic_int late_recv_timed_out; /* Rank 1 tells rank 0 when to send the late message. */
static atomic_int mesh_rank_died;      /* mesh_repair's rank 7 has aborted. */

static void fail(int rank, const char* what, long detail) {
  atomic_fetch_add(&failures, 1);
  fprintf(stderr, "FAIL rank %d: %s (%ld); last error: %s\n", rank, what, detail,
          meshrt_last_error());
}

/* Checks that `call` returned `want`. */
static void expect_status(int rank, meshrt_status got, meshrt_status want, const char* what) {
  if (got != want) fail(rank, what, (long)got);
}

static void expect_error_mentions(int rank, const char* text, const char* what) {
  if (strstr(meshrt_last_error(), text) == NULL) fail(rank, what, 0);
}

static void collectives(meshrt_comm* world, int r, int n) {
  int32_t sum[5];
  for (int i = 0; i < 5; ++i) sum[i] = r + i;
  expect_status(r, meshrt_all_reduce(world, sum, 5, MESHRT_INT32, MESHRT_SUM, NULL), MESHRT_OK,
                "all_reduce");
  for (int i = 0; i < 5; ++i) {
    if (sum[i] != n * (n - 1) / 2 + n * i) fail(r, "all_reduce sum element", i);
  }

  double avg[3] = {r, 2.0 * r, 1.0};
  expect_status(r, meshrt_all_reduce(world, avg, 3, MESHRT_FLOAT64, MESHRT_AVG, NULL), MESHRT_OK,
                "all_reduce avg");
  if (avg[0] != (n - 1) / 2.0 || avg[1] != (double)(n - 1) || avg[2] != 1.0) {
    fail(r, "all_reduce avg", 0);
  }

  float mine[2] = {(float)r, (float)(10 * r)};
  float all[2 * WORLD];
  expect_status(r, meshrt_all_gather(world, mine, all, 2, MESHRT_FLOAT32, NULL), MESHRT_OK,
                "all_gather");
  for (int q = 0; q < n; ++q) {
    if (all[2 * q] != (float)q || all[2 * q + 1] != (float)(10 * q)) fail(r, "all_gather", q);
  }
  /* MPI's in-place form: this rank's input already at its offset in the output. */
  memset(all, 0, sizeof all);
  all[2 * r] = (float)r;
  all[2 * r + 1] = (float)(10 * r);
  expect_status(r, meshrt_all_gather(world, all + 2 * r, all, 2, MESHRT_FLOAT32, NULL), MESHRT_OK,
                "all_gather in place");
  for (int q = 0; q < n; ++q) {
    if (all[2 * q] != (float)q) fail(r, "all_gather in place", q);
  }

  int64_t blocks[WORLD * 2], block[2];
  for (int j = 0; j < 2 * n; ++j) blocks[j] = j + r;
  expect_status(r, meshrt_reduce_scatter(world, blocks, block, 2, MESHRT_INT64, MESHRT_MAX, NULL),
                MESHRT_OK, "reduce_scatter");
  if (block[0] != 2 * r + n - 1 || block[1] != 2 * r + n) fail(r, "reduce_scatter max", 0);

  uint8_t bytes[4] = {0, 0, 0, 0};
  if (r == 3) memcpy(bytes, "mesh", 4);
  expect_status(r, meshrt_broadcast(world, bytes, 4, MESHRT_UINT8, 3, NULL), MESHRT_OK,
                "broadcast");
  if (memcmp(bytes, "mesh", 4) != 0) fail(r, "broadcast", 0);

  int32_t value = r + 1;
  expect_status(r, meshrt_reduce(world, &value, 1, MESHRT_INT32, MESHRT_PROD, 0, NULL), MESHRT_OK,
                "reduce");
  if (r == 0 && value != 40320) fail(r, "reduce prod at the root", value);
  if (r != 0 && value != r + 1) fail(r, "reduce left a non-root's buffer", value);

  int32_t out[WORLD], in[WORLD];
  for (int j = 0; j < n; ++j) in[j] = 100 * r + j;
  expect_status(r, meshrt_all_to_all(world, in, out, (size_t)n, MESHRT_INT32, NULL), MESHRT_OK,
                "all_to_all");
  for (int q = 0; q < n; ++q) {
    if (out[q] != 100 * q + r) fail(r, "all_to_all", q);
  }

  /* Uneven: rank q sends (q + j) % 3 elements, each 1000 q + j, to rank j. */
  size_t send_counts[WORLD], recv_counts[WORLD];
  int32_t vin[3 * WORLD], vout[3 * WORLD];
  size_t at = 0;
  for (int j = 0; j < n; ++j) {
    send_counts[j] = (size_t)((r + j) % 3);
    recv_counts[j] = (size_t)((j + r) % 3);
    for (size_t k = 0; k < send_counts[j]; ++k) vin[at++] = 1000 * r + j;
  }
  expect_status(r,
                meshrt_all_to_all_v(world, vin, send_counts, vout, recv_counts, MESHRT_INT32, NULL),
                MESHRT_OK, "all_to_all_v");
  at = 0;
  for (int q = 0; q < n; ++q) {
    for (size_t k = 0; k < recv_counts[q]; ++k) {
      if (vout[at++] != 1000 * q + r) fail(r, "all_to_all_v from rank", q);
    }
  }

  int32_t gathered[WORLD];
  expect_status(r, meshrt_gather(world, &value, gathered, 1, MESHRT_INT32, 5, NULL), MESHRT_OK,
                "gather");
  for (int q = 0; r == 5 && q < n; ++q) {
    if (gathered[q] != (q == 0 ? 40320 : q + 1)) fail(r, "gather from rank", q);
  }
  int32_t scattered = -1, sources[WORLD];
  for (int j = 0; j < n; ++j) sources[j] = 7 * j;
  expect_status(r, meshrt_scatter(world, sources, &scattered, 1, MESHRT_INT32, 2, NULL), MESHRT_OK,
                "scatter");
  if (scattered != 7 * r) fail(r, "scatter", scattered);

  expect_status(r, meshrt_barrier(world, NULL), MESHRT_OK, "barrier");
}

static void p2p_and_works(meshrt_comm* world, int r, int n) {
  /* A ring. A communicator runs its ops in order (as NCCL's stream does), so even ranks send
   * first and odd ones receive first; both ops are handed out before either is waited on. */
  double to_right = r, from_left = -1;
  meshrt_work *send = NULL, *recv = NULL;
  for (int turn = 0; turn < 2; ++turn) {
    if ((turn == 0) == (r % 2 == 0)) {
      expect_status(r, meshrt_send(world, &to_right, 1, MESHRT_FLOAT64, (r + 1) % n, 7, &send),
                    MESHRT_OK, "send");
    } else {
      expect_status(r, meshrt_recv(world, &from_left, 1, MESHRT_FLOAT64, (r + n - 1) % n, 7, &recv),
                    MESHRT_OK, "recv");
    }
  }
  expect_status(r, meshrt_work_wait(send), MESHRT_OK, "send wait");
  expect_status(r, meshrt_work_wait(recv), MESHRT_OK, "recv wait");
  if (from_left != (double)((r + n - 1) % n)) fail(r, "ring recv", (long)from_left);
  int done = 0;
  expect_status(r, meshrt_work_test(recv, &done), MESHRT_OK, "test");
  if (done != 1) fail(r, "test of a finished op", done);
  meshrt_work_free(send);
  meshrt_work_free(recv);

  /* A receive nobody matches yet: waiting 20 ms times out harmlessly, and the op runs on; only
   * then does rank 0 send, and the receive completes. */
  if (r == 1) {
    int32_t late = 0;
    meshrt_work* w = NULL;
    expect_status(r, meshrt_recv(world, &late, 1, MESHRT_INT32, 0, 9, &w), MESHRT_OK, "late recv");
    expect_status(r, meshrt_work_wait_timeout(w, 20), MESHRT_ERR_TIMEOUT, "wait_timeout");
    atomic_store(&late_recv_timed_out, 1);
    expect_status(r, meshrt_work_wait(w), MESHRT_OK, "late recv completes");
    if (late != 42) fail(r, "late recv", late);
    meshrt_work_free(w);
  } else if (r == 0) {
    const struct timespec ms = {0, 1000000};
    while (atomic_load(&late_recv_timed_out) == 0) nanosleep(&ms, NULL);
    int32_t answer = 42;
    expect_status(r, meshrt_send(world, &answer, 1, MESHRT_INT32, 1, 9, NULL), MESHRT_OK,
                  "late send");
  }
}

static void groups_and_scopes(meshrt_comm* world, int r) {
  meshrt_comm* half = NULL;
  expect_status(r, meshrt_comm_split(world, r % 2, r, &half), MESHRT_OK, "split");
  int size = 0, rank = -1;
  meshrt_comm_size(half, &size);
  meshrt_comm_rank(half, &rank);
  if (size != WORLD / 2 || rank != r / 2) fail(r, "split rank/size", rank);
  meshrt_comm_free(half);

  const int64_t shape[2] = {2, 4};
  const char* names[2] = {"dp", "tp"};
  meshrt_mesh* mesh = NULL;
  expect_status(r, meshrt_init_device_mesh(world, shape, names, 2, &mesh), MESHRT_OK, "mesh");
  meshrt_comm* tp = NULL;
  expect_status(r, meshrt_mesh_comm(mesh, "tp", &tp), MESHRT_OK, "mesh comm");
  int64_t tp_index = -1;
  expect_status(r, meshrt_mesh_local_rank(mesh, "tp", &tp_index), MESHRT_OK, "local_rank");
  if (tp_index != r % 4) fail(r, "tp index", (long)tp_index);
  meshrt_mesh_free(mesh); /* The communicator outlives the mesh handle. */
  const char* name = NULL;
  meshrt_comm_name(tp, &name);
  if (name == NULL || strstr(name, "tp") == NULL) fail(r, "tp's name", 0);
  expect_status(r, meshrt_scope_push("MLP.fc2", MESHRT_PHASE_BACKWARD), MESHRT_OK, "scope push");
  int32_t x = 1;
  expect_status(r, meshrt_all_reduce(tp, &x, 1, MESHRT_INT32, MESHRT_SUM, NULL), MESHRT_OK,
                "tp all_reduce");
  if (x != 4) fail(r, "tp all_reduce", x);
  expect_status(r, meshrt_scope_pop(), MESHRT_OK, "scope pop");
  meshrt_comm_free(tp);
}

/* A value and where it came from: what a tree learner's best-split search reduces. */
typedef struct {
  float value;
  int32_t index;
} argmax_t;

/* The larger value wins; ties go to the lower index, so the fold commutes. */
static void argmax(const void* in, void* inout, size_t count, void* user) {
  const argmax_t* a = in;
  argmax_t* b = inout;
  atomic_fetch_add((atomic_int*)user, 1);
  for (size_t i = 0; i < count; ++i) {
    if (a[i].value > b[i].value || (a[i].value == b[i].value && a[i].index < b[i].index)) {
      b[i] = a[i];
    }
  }
}

/* A typed reducer: the sum of absolute values of float64. */
static void abs_sum(const void* in, void* inout, size_t count, void* user) {
  const double* a = in;
  double* b = inout;
  (void)user;
  for (size_t i = 0; i < count; ++i) b[i] = (a[i] < 0 ? -a[i] : a[i]) + (b[i] < 0 ? -b[i] : b[i]);
}

static atomic_int argmax_calls;

static void custom_reductions(meshrt_comm* world, int r, int n) {
  meshrt_reducer* best = NULL;
  expect_status(r, meshrt_reducer_create("argmax", sizeof(argmax_t), argmax, &argmax_calls, &best),
                MESHRT_OK, "reducer_create");
  /* Element i: rank (i % n) holds the largest value, 100 + i. */
  argmax_t v[7];
  for (int i = 0; i < 7; ++i) v[i] = (argmax_t){(r == i % n) ? 100.0f + i : (float)r, r};
  expect_status(r, meshrt_all_reduce_custom(world, v, 7, best, NULL), MESHRT_OK,
                "all_reduce_custom");
  for (int i = 0; i < 7; ++i) {
    if (v[i].value != 100.0f + i || v[i].index != i % n) fail(r, "argmax element", i);
  }
  if (atomic_load(&argmax_calls) == 0) fail(r, "argmax got its user pointer", 0);

  argmax_t at_root[3] = {{(float)r, r}, {(float)-r, r}, {1.0f, r}};
  meshrt_work* w = NULL;
  expect_status(r, meshrt_reduce_custom(world, at_root, 3, best, 0, &w), MESHRT_OK,
                "reduce_custom async");
  expect_status(r, meshrt_work_wait(w), MESHRT_OK, "reduce_custom wait");
  meshrt_work_free(w);
  if (r == 0 && (at_root[0].index != n - 1 || at_root[1].index != 0 || at_root[2].index != 0)) {
    fail(r, "reduce_custom at the root", at_root[0].index);
  }
  if (r != 0 && at_root[0].index != r) fail(r, "reduce_custom changed a non-root", 0);

  argmax_t blocks[2 * WORLD], mine[2];
  for (int i = 0; i < 2 * n; ++i) blocks[i] = (argmax_t){(float)((i + r) % n), r};
  expect_status(r, meshrt_reduce_scatter_custom(world, blocks, mine, 2, best, NULL), MESHRT_OK,
                "reduce_scatter_custom");
  for (int i = 0; i < 2; ++i) {
    /* Element k's values (k + q) % n peak at n - 1 on rank q = (n - 1 - k) mod n. */
    const int k = 2 * r + i;
    if (mine[i].value != (float)(n - 1) || mine[i].index != ((n - 1 - k) % n + n) % n) {
      fail(r, "reduce_scatter_custom element", i);
    }
  }

  meshrt_reducer* absum = NULL;
  expect_status(r, meshrt_reducer_create_typed("abs_sum", MESHRT_FLOAT64, abs_sum, NULL, &absum),
                MESHRT_OK, "reducer_create_typed");
  double d[2] = {-1.0, (double)r};
  expect_status(r, meshrt_all_reduce_custom(world, d, 2, absum, NULL), MESHRT_OK,
                "typed all_reduce_custom");
  if (d[0] != (double)n || d[1] != n * (n - 1) / 2.0) fail(r, "abs_sum", (long)d[0]);

  /* Mistakes: named, and nothing sent. */
  expect_status(r, meshrt_all_reduce_custom(world, d, 2, NULL, NULL), MESHRT_ERR_INVALID_ARGUMENT,
                "NULL reducer");
  expect_error_mentions(r, "all_reduce_custom: reducer is NULL", "NULL reducer's message");
  meshrt_reducer* bad = NULL;
  expect_status(r, meshrt_reducer_create("zero", 0, argmax, NULL, &bad),
                MESHRT_ERR_INVALID_ARGUMENT, "element size 0");
  expect_error_mentions(r, "reducer 'zero' cannot be created: its element size is 0 bytes",
                        "element size 0's message");
  expect_status(r, meshrt_reducer_create("f", 4, NULL, NULL, &bad), MESHRT_ERR_INVALID_ARGUMENT,
                "NULL fn");
  meshrt_reducer_free(best);
  meshrt_reducer_free(absum);
  meshrt_reducer_free(NULL);
}

/* Blocks of their own size per rank (rank 0's empty), laid out in reverse rank order with a gap
 * of one element before each: all_gather_v, its in-place form, reduce_scatter_v by sum and by a
 * reducer of records. */
static void v_collectives(meshrt_comm* world, int r, int n) {
  size_t counts[WORLD], offsets[WORLD], next = 0;
  for (int q = 0; q < n; ++q) counts[q] = (size_t)(q % 3);
  for (int q = n - 1; q >= 0; --q) {
    offsets[q] = ++next;
    next += counts[q];
  }
  const size_t whole = next;
  int32_t mine[2] = {r, 100 + r}, all[3 * WORLD];
  for (size_t i = 0; i < whole; ++i) all[i] = -1;
  expect_status(r, meshrt_all_gather_v(world, mine, all, counts, offsets, MESHRT_INT32, NULL),
                MESHRT_OK, "all_gather_v");
  for (int q = 0; q < n; ++q) {
    if (all[offsets[q] - 1] != -1) fail(r, "all_gather_v wrote a gap", q);
    for (size_t i = 0; i < counts[q]; ++i) {
      if (all[offsets[q] + i] != (i == 0 ? q : 100 + q)) fail(r, "all_gather_v element", q);
    }
  }
  /* In place, offsets NULL: the blocks follow one another; this rank's is already in place. */
  size_t at = 0;
  for (int q = 0; q < r; ++q) at += counts[q];
  for (size_t i = 0; i < counts[r]; ++i) all[at + i] = mine[i];
  expect_status(r, meshrt_all_gather_v(world, all + at, all, counts, NULL, MESHRT_INT32, NULL),
                MESHRT_OK, "all_gather_v in place");
  for (int q = 0, k = 0; q < n; k += (int)counts[q++]) {
    for (size_t i = 0; i < counts[q]; ++i) {
      if (all[k + (int)i] != (i == 0 ? q : 100 + q)) fail(r, "all_gather_v in place", q);
    }
  }

  int64_t in[3 * WORLD], out[2] = {-1, -1};
  for (size_t i = 0; i < whole; ++i) in[i] = r + (int64_t)i;
  expect_status(
      r, meshrt_reduce_scatter_v(world, in, out, counts, offsets, MESHRT_INT64, MESHRT_SUM, NULL),
      MESHRT_OK, "reduce_scatter_v");
  for (size_t i = 0; i < counts[r]; ++i) {
    if (out[i] != n * (n - 1) / 2 + n * (int64_t)(offsets[r] + i)) fail(r, "reduce_scatter_v", i);
  }

  meshrt_reducer* best = NULL;
  expect_status(r, meshrt_reducer_create("argmax", sizeof(argmax_t), argmax, &argmax_calls, &best),
                MESHRT_OK, "reducer_create");
  argmax_t cands[3 * WORLD], won[2];
  for (size_t i = 0; i < whole; ++i) cands[i] = (argmax_t){(float)((r + (int)i) % n), r};
  expect_status(r, meshrt_reduce_scatter_v_custom(world, cands, won, counts, offsets, best, NULL),
                MESHRT_OK, "reduce_scatter_v_custom");
  for (size_t i = 0; i < counts[r]; ++i) {
    const int k = (int)(offsets[r] + i); /* Values (q + k) % n peak on q = (n - 1 - k) mod n. */
    if (won[i].value != (float)(n - 1) || won[i].index != ((n - 1 - k) % n + n) % n) {
      fail(r, "reduce_scatter_v_custom", (long)i);
    }
  }
  meshrt_reducer_free(best);
  expect_status(r, meshrt_all_gather_v(world, mine, all, NULL, NULL, MESHRT_INT32, NULL),
                MESHRT_ERR_INVALID_ARGUMENT, "all_gather_v without counts");
}

/* The comm logger's summary of this rank's ops (main started the logger), snprintf-style. */
static void comms_summary(meshrt_comm* world, int r) {
  size_t length = 0;
  expect_status(r, meshrt_comms_summary(world, MESHRT_SUMMARY_JSON, NULL, 0, &length), MESHRT_OK,
                "summary length");
  char* json = malloc(length + 1);
  if (json == NULL) return;
  expect_status(r, meshrt_comms_summary(world, MESHRT_SUMMARY_JSON, json, length + 1, NULL),
                MESHRT_OK, "summary");
  char rank_field[32];
  snprintf(rank_field, sizeof rank_field, "\"rank\": %d", r);
  if (strlen(json) != length || strstr(json, rank_field) == NULL ||
      strstr(json, "\"op\": \"all_reduce\"") == NULL) {
    fail(r, "summary JSON names this rank and its all_reduces", (long)length);
  }
  free(json);
  char head[8];
  expect_status(r, meshrt_comms_summary(world, MESHRT_SUMMARY_TEXT, head, sizeof head, &length),
                MESHRT_OK, "summary into a small buffer");
  if (strlen(head) != sizeof head - 1 || length < sizeof head) fail(r, "truncated summary", 0);
  expect_status(r, meshrt_comms_summary(world, (meshrt_summary_format)7, head, sizeof head, NULL),
                MESHRT_ERR_INVALID_ARGUMENT, "bad summary format");
}

/* The callers' mistakes: each returns its status, before anything is sent, naming the call. */
static void mistakes(meshrt_comm* world, int r) {
  int32_t x = 0;
  expect_status(r, meshrt_all_reduce(world, &x, 1, (meshrt_dtype)42, MESHRT_SUM, NULL),
                MESHRT_ERR_INVALID_ARGUMENT, "bad dtype");
  expect_error_mentions(r, ", comm 'world', all_reduce: dtype 42 is not a meshrt_dtype",
                        "bad dtype's message names the communicator and op");
  expect_status(r, meshrt_broadcast(world, &x, 1, MESHRT_INT32, 99, NULL),
                MESHRT_ERR_INVALID_ARGUMENT, "bad root");
  expect_error_mentions(r, "broadcast", "bad root's message names the op");
  expect_status(r, meshrt_all_reduce(world, &x, 1, MESHRT_INT32, MESHRT_AVG, NULL),
                MESHRT_ERR_INVALID_ARGUMENT, "avg of int32");
  expect_status(r, meshrt_comm_rank(NULL, &x), MESHRT_ERR_INVALID_ARGUMENT, "NULL comm");
  expect_error_mentions(r, "meshrt_comm_rank: comm is NULL", "NULL comm's message");
  expect_status(r, meshrt_scope_pop(), MESHRT_ERR_INVALID_ARGUMENT, "pop without push");
  expect_status(r, meshrt_call_site(NULL, 1), MESHRT_ERR_INVALID_ARGUMENT, "NULL call site");
  expect_status(r, meshrt_scope_push("x", (meshrt_phase)9), MESHRT_ERR_INVALID_ARGUMENT,
                "bad phase");
}

/* Repair in place on copies of the world. A planned shrink leaves rank 0 out. Then the last rank
 * drops out and the others shrink around it with MESHRT_SHRINK_ABORT. With threads it aborts
 * first, as a dead rank would: the others' op fails, failed_ranks names it, and a 2x4 mesh drops
 * its replica. Processes skip that part, since without MESHRT_ON_RANK_FAILURE=continue an op
 * failing on a dead peer ends the job. */
static void repair(meshrt_comm* world, int r, int n, int threads) {
  meshrt_comm *dup = NULL, *planned = NULL, *shrunk = NULL;
  expect_status(r, meshrt_comm_split(world, 0, r, &dup), MESHRT_OK, "repair: split");
  const int first = 0, last = n - 1;
  expect_status(r, meshrt_comm_shrink(dup, &first, 1, MESHRT_SHRINK_DEFAULT, &planned), MESHRT_OK,
                "shrink (planned)");
  if ((planned == NULL) != (r == 0)) fail(r, "planned shrink's NULL on rank 0 only", r);
  if (planned != NULL) {
    int32_t x = r;
    expect_status(r, meshrt_all_reduce(planned, &x, 1, MESHRT_INT32, MESHRT_SUM, NULL), MESHRT_OK,
                  "all_reduce after a planned shrink");
    if (x != n * (n - 1) / 2) fail(r, "sum after a planned shrink", x);
    const char* name = NULL;
    meshrt_comm_name(planned, &name);
    if (name == NULL || strstr(name, "@1") == NULL) fail(r, "planned shrink's name", 0);
    meshrt_comm_free(planned);
  }
  if (r == last) {
    if (threads) meshrt_comm_abort(dup); /* Dies. */
    meshrt_comm_free(dup);
    return;
  }
  if (threads) {
    int32_t y = 1;
    meshrt_status st = meshrt_all_reduce(dup, &y, 1, MESHRT_INT32, MESHRT_SUM, NULL);
    if (st != MESHRT_ERR_PEER_FAILURE) fail(r, "op with a dead rank", (long)st);
    int dead[4] = {-1, -1, -1, -1};
    size_t count = 0;
    expect_status(r, meshrt_comm_failed_ranks(dup, dead, 4, &count), MESHRT_OK, "failed_ranks");
    if (count != 1 || dead[0] != last) fail(r, "failed_ranks", (long)count);
  }
  expect_status(r, meshrt_comm_shrink(dup, &last, 1, MESHRT_SHRINK_ABORT, &shrunk), MESHRT_OK,
                "shrink (abort)");
  int size = 0;
  meshrt_comm_size(shrunk, &size);
  if (size != n - 1) fail(r, "shrunk size", size);
  int32_t z = 1;
  expect_status(r, meshrt_all_reduce(shrunk, &z, 1, MESHRT_INT32, MESHRT_SUM, NULL), MESHRT_OK,
                "all_reduce after shrinking around a rank");
  if (z != n - 1) fail(r, "sum after shrinking around a rank", z);
  expect_status(r, meshrt_comm_shrink(shrunk, &r, 1, MESHRT_SHRINK_ABORT, &planned),
                MESHRT_ERR_INVALID_ARGUMENT, "shrink excluding the caller");
  expect_error_mentions(r, "only the survivors call shrink()", "shrink's error");
  meshrt_comm_free(shrunk);
  meshrt_comm_free(dup);
}

/* The mesh side of repair, with threads: a 2x4 mesh loses global rank 7; its dp replica (ranks
 * 4-7) leaves and ranks 0-3 go on as a 1x4 mesh. */
static void mesh_repair(meshrt_comm* world, int r) {
  meshrt_comm* dup = NULL;
  meshrt_mesh *mesh = NULL, *shrunk = NULL;
  expect_status(r, meshrt_comm_split(world, 0, r, &dup), MESHRT_OK, "mesh repair: split");
  const int64_t shape[2] = {2, 4};
  const char* names[2] = {"dp", "tp"};
  expect_status(r, meshrt_init_device_mesh(dup, shape, names, 2, &mesh), MESHRT_OK, "mesh");
  if (r == 7) {
    meshrt_comm_abort(dup);
    atomic_store(&mesh_rank_died, 1);
  } else {
    /* Most ranks share no group with rank 7: their op could finish before it died. */
    const struct timespec ms = {0, 1000000};
    while (atomic_load(&mesh_rank_died) == 0) nanosleep(&ms, NULL);
    meshrt_comm* dp = NULL;
    meshrt_mesh_comm(mesh, "dp", &dp);
    int32_t g = 1;
    meshrt_status st = meshrt_all_reduce(dp, &g, 1, MESHRT_INT32, MESHRT_SUM, NULL);
    if (st != MESHRT_ERR_PEER_FAILURE) fail(r, "dp op with a dead rank", (long)st);
    meshrt_comm_free(dp);
    int dead[8];
    size_t count = 0;
    expect_status(r, meshrt_mesh_failed_ranks(mesh, dead, 8, &count), MESHRT_OK, "mesh failed");
    if (count < 1 || dead[count - 1] != 7) fail(r, "mesh failed_ranks", (long)count);
    expect_status(r, meshrt_mesh_shrink(mesh, dead, count, &shrunk), MESHRT_OK, "mesh shrink");
    if ((shrunk == NULL) != (r >= 4)) fail(r, "mesh shrink's NULL on the dead replica", r);
    if (shrunk != NULL) {
      meshrt_comm* tp = NULL;
      meshrt_mesh_comm(shrunk, "tp", &tp);
      int32_t x = r;
      expect_status(r, meshrt_all_reduce(tp, &x, 1, MESHRT_INT32, MESHRT_SUM, NULL), MESHRT_OK,
                    "tp all_reduce after a mesh shrink");
      if (x != 0 + 1 + 2 + 3) fail(r, "tp sum after a mesh shrink", x);
      meshrt_comm_free(tp);
      meshrt_mesh_free(shrunk);
    }
  }
  meshrt_mesh_free(mesh);
  meshrt_comm_free(dup);
}

/* user: non-NULL when the ranks are threads (their p2p test passes messages between them). */
static void rank_main(meshrt_comm* world, void* user) {
  int r = -1, n = 0;
  expect_status(-1, meshrt_comm_rank(world, &r), MESHRT_OK, "rank");
  expect_status(-1, meshrt_comm_size(world, &n), MESHRT_OK, "size");
  if (n != WORLD) fail(r, "world size", n);
  collectives(world, r, n);
  if (user != NULL) p2p_and_works(world, r, n);
  groups_and_scopes(world, r);
  custom_reductions(world, r, n);
  v_collectives(world, r, n);
  comms_summary(world, r);
  mistakes(world, r);
  repair(world, r, n, user != NULL);
  if (user != NULL) mesh_repair(world, r);
  /* Last: an aborted communicator fails every later op with MESHRT_ERR_ABORTED. */
  meshrt_comm* own = NULL;
  expect_status(r, meshrt_comm_split(world, r, 0, &own), MESHRT_OK, "split of one");
  expect_status(r, meshrt_comm_abort(own), MESHRT_OK, "abort");
  int32_t x = 0;
  expect_status(r, meshrt_all_reduce(own, &x, 1, MESHRT_INT32, MESHRT_SUM, NULL),
                MESHRT_ERR_ABORTED, "op after abort");
  meshrt_comm_free(own);
}

/* `c_api_test --world` runs as one of WORLD processes that meshrun started (Gloo), the rest as
 * WORLD threads of one process. */
int main(int argc, char** argv) {
  if (argc > 1 && strcmp(argv[1], "--world") == 0) {
    meshrt_comm* world = NULL;
    expect_status(-1, meshrt_comms_log_start(), MESHRT_OK, "comms log start");
    expect_status(-1, meshrt_init(&world), MESHRT_OK, "init");
    if (world != NULL) rank_main(world, NULL);
    meshrt_comm_free(world);
    if (atomic_load(&failures) != 0) return 1;
    printf("c_api ok (--world)\n");
    return 0;
  }
  if (strlen(meshrt_version()) == 0) fail(-1, "version", 0);
  const char* want[] = {"ok",    "invalid_argument", "timeout",       "peer_failure", "backend",
                        "store", "aborted",          "not_supported", "internal"};
  for (int s = MESHRT_OK; s <= MESHRT_ERR_INTERNAL; ++s) {
    if (strcmp(meshrt_status_name((meshrt_status)s), want[s]) != 0) fail(-1, "status name", s);
  }
  expect_status(-1, meshrt_comms_log_start(), MESHRT_OK, "comms log start");
  int threads = 1;
  expect_status(-1, meshrt_run_inproc(WORLD, rank_main, &threads), MESHRT_OK, "run_inproc");
  expect_status(-1, meshrt_comms_log_stop(), MESHRT_OK, "comms log stop");
  expect_status(-1, meshrt_comms_log_reset(), MESHRT_OK, "comms log reset");
  expect_status(-1, meshrt_run_inproc(2, NULL, NULL), MESHRT_ERR_INVALID_ARGUMENT, "NULL fn");
  if (atomic_load(&failures) != 0) return 1;
  printf("c_api ok\n");
  return 0;
}
