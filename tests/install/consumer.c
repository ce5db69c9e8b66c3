/* A C program built against an installed meshrt with `pkg-config --cflags --libs meshrt-c` and
 * linked by gcc (install_test.sh): two in-process ranks sum a vector through the C API. */
#include <meshrt/meshrt_c.h>
#include <stdio.h>

static int bad;

static void rank_main(meshrt_comm* world, void* user) {
  (void)user;
  int rank = 0;
  float x[3] = {1, 2, 3};
  if (meshrt_comm_rank(world, &rank) != MESHRT_OK ||
      meshrt_all_reduce(world, x, 3, MESHRT_FLOAT32, MESHRT_SUM, NULL) != MESHRT_OK || x[0] != 2 ||
      x[2] != 6) {
    bad = 1;
  }
}

int main(void) {
  if (meshrt_run_inproc(2, rank_main, NULL) != MESHRT_OK || bad) {
    fprintf(stderr, "c consumer failed: %s\n", meshrt_last_error());
    return 1;
  }
  printf("c consumer ok (meshrt %s)\n", meshrt_version());
  return 0;
}
