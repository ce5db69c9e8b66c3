/* A data-parallel trainer in plain C over meshrt's C API: logistic regression on generated data.
 * Each rank takes its shard of the samples, computes the gradient and loss of its shard, and one
 * all_reduce sums them over the world; every rank then takes the same step. Rank 0 prints the loss
 * and writes the final weights to argv[1] (if given), so that a run on any number of ranks can be
 * checked against a run on one.
 *
 *   meshrun --standalone --nproc-per-node 2 build/examples/c_dp_train /tmp/weights.txt */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "mesh/meshrt_c.h"

enum { kSamples = 4096, kFeatures = 8, kSteps = 60 };

/* The same data on every rank: a 64-bit LCG, features in [-1, 1), labels from fixed weights. */
static double uniform(uint64_t* state) {
  *state = *state * 6364136223846793005ull + 1442695040888963407ull;
  return (double)(*state >> 11) / 4503599627370496.0 - 1.0; /* 2^52: [-1, 1) */
}

static int check(meshrt_status status, const char* what) {
  if (status == MESHRT_OK) return 0;
  fprintf(stderr, "c_dp_train: %s failed (%s): %s\n", what, meshrt_status_name(status),
          meshrt_last_error());
  return 1;
}

int main(int argc, char** argv) {
  static double x[kSamples][kFeatures];
  static double y[kSamples];
  uint64_t state = 42;
  const double truth[kFeatures] = {1.5, -2.0, 0.5, 0.0, 3.0, -1.0, 0.25, 2.0};
  for (int i = 0; i < kSamples; ++i) {
    double z = 0;
    for (int j = 0; j < kFeatures; ++j) {
      x[i][j] = uniform(&state);
      z += truth[j] * x[i][j];
    }
    y[i] = z + 0.5 * uniform(&state) > 0 ? 1.0 : 0.0;
  }

  meshrt_comm* world = NULL;
  if (check(meshrt_init(&world), "meshrt_init")) return 1;
  int rank = 0, size = 1;
  meshrt_comm_rank(world, &rank);
  meshrt_comm_size(world, &size);
  const int first = kSamples * rank / size, last = kSamples * (rank + 1) / size;

  double w[kFeatures] = {0};
  double loss = 0;
  for (int step = 0; step < kSteps; ++step) {
    /* The shard's gradient and loss, summed over the world in one op: kFeatures + 1 values. */
    double sums[kFeatures + 1] = {0};
    if (check(meshrt_scope_push("logistic", MESHRT_PHASE_BACKWARD), "scope")) return 1;
    for (int i = first; i < last; ++i) {
      double z = 0;
      for (int j = 0; j < kFeatures; ++j) z += w[j] * x[i][j];
      const double p = 1.0 / (1.0 + exp(-z));
      for (int j = 0; j < kFeatures; ++j) sums[j] += (p - y[i]) * x[i][j];
      sums[kFeatures] -= y[i] * log(p + 1e-12) + (1 - y[i]) * log(1 - p + 1e-12);
    }
    if (check(meshrt_all_reduce(world, sums, kFeatures + 1, MESHRT_FLOAT64, MESHRT_SUM, NULL),
              "all_reduce")) {
      return 1;
    }
    meshrt_scope_pop();
    for (int j = 0; j < kFeatures; ++j) w[j] -= 2.0 * sums[j] / kSamples;
    loss = sums[kFeatures] / kSamples;
    if (rank == 0 && step % 20 == 0) printf("step %d loss %.6f\n", step, loss);
  }
  if (rank == 0) {
    printf("final loss %.9f on %d ranks\n", loss, size);
    if (argc > 1) {
      FILE* out = fopen(argv[1], "w");
      if (out == NULL) return 1;
      fprintf(out, "%.17g\n", loss);
      for (int j = 0; j < kFeatures; ++j) fprintf(out, "%.17g\n", w[j]);
      fclose(out);
    }
  }
  meshrt_comm_free(world);
  return 0;
}
