/* A trainer's pluggable-collectives hooks served by meshrt's C API. A gradient-boosting library's
 * data-parallel tree learner takes two callbacks over byte buffers (LightGBM's network functions
 * have this shape): reduce-scatter with blocks of their own size and the learner's reducer, and
 * all-gather of blocks of their own size, called with the input already at this rank's block of
 * the output. Below, hooks_reduce_scatter() and hooks_all_gather() implement them on
 * meshrt_reduce_scatter_v_custom() and meshrt_all_gather_v(), and a small learner drives them:
 * each rank builds gradient histograms of its rows, the histograms are reduce-scattered by
 * feature (features have different bin counts, so blocks differ), each rank finds the best split
 * of its features, and the candidates are all-gathered. Rank 0 prints the winner and a checksum
 * of the histograms it owns, and writes both to argv[1] (if given): a run on any number of ranks
 * must find the split of a run on one.
 *
 *   meshrun --standalone --nproc-per-node 3 build/examples/c_collective_hooks /tmp/split.txt */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mesh/meshrt_c.h"

/* ---- The hook shape: byte buffers, block starts and lengths, the caller's reducer. ---- */

/* The learner's reducer: folds `bytes` of `input` into `output`, elements of `type_size`. */
typedef void (*hook_reducer)(const char* input, char* output, int type_size, int bytes);

static meshrt_comm* world;

static int check(meshrt_status status, const char* what) {
  if (status == MESHRT_OK) return 0;
  fprintf(stderr, "c_collective_hooks: %s failed (%s): %s\n", what, meshrt_status_name(status),
          meshrt_last_error());
  exit(1);
}

/* The caller's reducer as meshrt calls a reducer: elements, not bytes. */
struct hook_fold {
  hook_reducer fn;
  int type_size;
};

static void fold_by_hook(const void* in, void* inout, size_t count, void* user) {
  const struct hook_fold* h = user;
  h->fn(in, inout, h->type_size, (int)count * h->type_size);
}

/* Block starts and lengths in bytes as elements of `unit` bytes. */
static void blocks_in(const int* start, const int* len, int n, int unit, size_t* offsets,
                      size_t* counts) {
  for (int q = 0; q < n; ++q) {
    offsets[q] = (size_t)(start[q] / unit);
    counts[q] = (size_t)(len[q] / unit);
  }
}

/* Reduces `input` (blocks of block_len[q] bytes at block_start[q]) over every rank by `reducer`
 * and leaves this rank's block in `output`. */
static void hooks_reduce_scatter(char* input, int input_size, int type_size, const int* block_start,
                                 const int* block_len, int num_block, char* output, int output_size,
                                 hook_reducer reducer) {
  (void)input_size;
  (void)output_size;
  /* The reducer is the learner's for as long as it runs: one meshrt reducer per function. */
  static struct hook_fold fold;
  static meshrt_reducer* by_hook = NULL;
  if (by_hook == NULL || fold.fn != reducer || fold.type_size != type_size) {
    meshrt_reducer_free(by_hook);
    fold = (struct hook_fold){reducer, type_size};
    check(
        meshrt_reducer_create("learner_reducer", (size_t)type_size, fold_by_hook, &fold, &by_hook),
        "reducer_create");
  }
  size_t* offsets = malloc((size_t)num_block * 2 * sizeof(size_t));
  blocks_in(block_start, block_len, num_block, type_size, offsets, offsets + num_block);
  check(meshrt_reduce_scatter_v_custom(world, input, output, offsets + num_block, offsets, by_hook,
                                       NULL),
        "reduce_scatter_v_custom");
  free(offsets);
}

/* Gathers every rank's block (block_len[q] bytes at block_start[q] of `output`); `input` may
 * already be this rank's block of `output`. */
static void hooks_all_gather(char* input, int input_size, const int* block_start,
                             const int* block_len, int num_block, char* output, int output_size) {
  (void)input_size;
  (void)output_size;
  size_t* offsets = malloc((size_t)num_block * 2 * sizeof(size_t));
  blocks_in(block_start, block_len, num_block, 1, offsets, offsets + num_block);
  check(meshrt_all_gather_v(world, input, output, offsets + num_block, offsets, MESHRT_UINT8, NULL),
        "all_gather_v");
  free(offsets);
}

/* ---- A small histogram learner that drives the hooks. ---- */

enum { kRows = 6000, kFeatures = 5, kMaxBins = 32 };
static const int kBins[kFeatures] = {8, 16, 5, 32, 11};

/* A histogram bin: 24 bytes, folded by the learner's own reducer. */
typedef struct {
  double grad;
  double hess;
  int64_t count;
} bin_t;

/* A split candidate: the gain, then where. */
typedef struct {
  double gain;
  int32_t feature;
  int32_t bin;
} split_t;

static void sum_bins(const char* input, char* output, int type_size, int bytes) {
  const bin_t* a = (const bin_t*)input;
  bin_t* b = (bin_t*)output;
  for (int i = 0; i < bytes / type_size; ++i) {
    b[i].grad += a[i].grad;
    b[i].hess += a[i].hess;
    b[i].count += a[i].count;
  }
}

/* Row i's feature values and gradient, the same on every rank (a 64-bit LCG per row). */
static void row(int i, int* bins, double* grad) {
  uint64_t s = (uint64_t)i * 6364136223846793005ull + 1442695040888963407ull;
  double signal = 0;
  for (int f = 0; f < kFeatures; ++f) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    bins[f] = (int)((s >> 33) % (uint64_t)kBins[f]);
    if (f == 3) signal = bins[f] < 19 ? -1.0 : 1.0; /* Feature 3 splits best, at bin 18. */
  }
  s = s * 6364136223846793005ull + 1442695040888963407ull;
  *grad = signal + (double)(s >> 11) / 9007199254740992.0 - 0.5;
}

/* The gain of splitting after `bin` (XGBoost's: G_L^2/H_L + G_R^2/H_R - G^2/H). */
static double gain_at(const bin_t* h, int bins, int bin) {
  double gl = 0, hl = 0, g = 0, hh = 0;
  for (int b = 0; b < bins; ++b) {
    g += h[b].grad;
    hh += h[b].hess;
    if (b <= bin) {
      gl += h[b].grad;
      hl += h[b].hess;
    }
  }
  const double gr = g - gl, hr = hh - hl;
  if (hl == 0 || hr == 0) return 0;
  return gl * gl / hl + gr * gr / hr - g * g / hh;
}

int main(int argc, char** argv) {
  check(meshrt_init(&world), "init");
  int rank = 0, n = 1;
  check(meshrt_comm_rank(world, &rank), "rank");
  check(meshrt_comm_size(world, &n), "size");

  /* Histograms of this rank's rows (every n-th), feature after feature. */
  int start[kFeatures + 1];
  start[0] = 0;
  for (int f = 0; f < kFeatures; ++f) start[f + 1] = start[f] + kBins[f];
  static bin_t hist[kFeatures * kMaxBins];
  for (int i = rank; i < kRows; i += n) {
    int bins[kFeatures];
    double grad;
    row(i, bins, &grad);
    for (int f = 0; f < kFeatures; ++f) {
      bin_t* b = &hist[start[f] + bins[f]];
      b->grad += grad;
      b->hess += 1.0;
      b->count += 1;
    }
  }

  /* Rank q owns features [q F / n, (q+1) F / n): its block is their bins (empty when none). */
  int* block_start = calloc((size_t)n, sizeof(int));
  int* block_len = calloc((size_t)n, sizeof(int));
  for (int q = 0; q < n; ++q) {
    const int first = q * kFeatures / n, last = (q + 1) * kFeatures / n;
    block_start[q] = start[first] * (int)sizeof(bin_t);
    block_len[q] = (start[last] - start[first]) * (int)sizeof(bin_t);
  }
  static bin_t mine[kFeatures * kMaxBins];
  meshrt_scope_push("histograms", MESHRT_PHASE_FORWARD);
  hooks_reduce_scatter((char*)hist, start[kFeatures] * (int)sizeof(bin_t), (int)sizeof(bin_t),
                       block_start, block_len, n, (char*)mine, block_len[rank], sum_bins);
  meshrt_scope_pop();

  /* The best split of this rank's features, then every rank's candidate, gathered in place. */
  const int first = rank * kFeatures / n, last = (rank + 1) * kFeatures / n;
  split_t best = {0, -1, -1};
  double checksum = 0;
  for (int f = first; f < last; ++f) {
    const bin_t* h = &mine[start[f] - start[first]];
    for (int b = 0; b < kBins[f]; ++b) {
      checksum += h[b].grad * (b + 1) + (double)h[b].count;
      const double gain = gain_at(h, kBins[f], b);
      if (gain > best.gain) best = (split_t){gain, f, b};
    }
  }
  split_t* all = calloc((size_t)n, sizeof(split_t));
  for (int q = 0; q < n; ++q) {
    block_start[q] = q * (int)sizeof(split_t);
    block_len[q] = (int)sizeof(split_t);
  }
  all[rank] = best;
  meshrt_scope_push("candidates", MESHRT_PHASE_FORWARD);
  hooks_all_gather((char*)&all[rank], (int)sizeof(split_t), block_start, block_len, n, (char*)all,
                   n * (int)sizeof(split_t));
  meshrt_scope_pop();
  split_t winner = all[0];
  for (int q = 1; q < n; ++q) {
    if (all[q].gain > winner.gain) winner = all[q];
  }
  /* Every rank's checksum of what it owns, summed: the histograms' fingerprint. */
  check(meshrt_all_reduce(world, &checksum, 1, MESHRT_FLOAT64, MESHRT_SUM, NULL), "all_reduce");
  if (rank == 0) {
    printf("best split: feature %d after bin %d, gain %.9f; histogram checksum %.6f\n",
           winner.feature, winner.bin, winner.gain, checksum);
    if (argc > 1) {
      FILE* out = fopen(argv[1], "w");
      if (out == NULL) return 1;
      fprintf(out, "%d %d %.17g %.17g\n", winner.feature, winner.bin, winner.gain, checksum);
      fclose(out);
    }
  }
  free(all);
  free(block_start);
  free(block_len);
  meshrt_comm_free(world);
  return 0;
}
