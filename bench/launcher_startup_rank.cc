// One rank of bench/launcher_startup.sh: joins the world, notes the wall-clock time at which
// init() returned, waits in a barrier (as the torch script does) and prints that time.
#include <chrono>
#include <cstdio>

#include "mesh/meshrt.h"

int main() {
  auto world = meshrt::init();
  const auto init_done = std::chrono::system_clock::now().time_since_epoch();
  world->barrier()->wait();
  std::printf("init_done_ns=%lld\n",
              static_cast<long long>(std::chrono::nanoseconds(init_done).count()));
  return 0;
}
