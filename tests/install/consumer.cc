// A program outside the tree, built against an installed meshrt with only <prefix>/include on its
// include path: in-process all_reduce and a 2x2 DeviceMesh on 4 ranks, then a Gloo world (one rank
// alone, or the ranks meshrun started).
// Prints "consumer ok" and exits 0 when the results are right.
#include <meshrt/meshrt.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>

int main() {
  std::atomic<int> wrong = 0;
  meshrt::run_inproc(4, [&](meshrt::Communicator& world) {
    std::vector<int64_t> x(16, world.rank() + 1);
    world.all_reduce(meshrt::view(x))->wait();
    for (int64_t v : x) wrong += v != 10;
    auto mesh = meshrt::init_device_mesh({2, 2}, {"dp", "tp"});
    meshrt::trace::Scope scope("consumer", meshrt::trace::Phase::kForward);
    std::vector<int32_t> one{1};
    mesh->comm("tp").all_reduce(meshrt::view(one))->wait();
    wrong += one[0] != 2;
  });
  meshrt::InitOptions o;
  o.rank = 0;
  o.world_size = 1;
  o.master_addr = "127.0.0.1";
  // Alone, a world of one; under meshrun, the world its variables describe.
  auto world = std::getenv("RANK") == nullptr ? meshrt::init(o) : meshrt::init();
  std::vector<float> y{1.0f, 2.0f + static_cast<float>(world->rank())};
  world->all_reduce(meshrt::view(y), meshrt::ReduceOp::kMax)->wait();
  wrong += y[1] != 1.0f + static_cast<float>(world->size());
  std::printf(wrong == 0 ? "consumer ok\n" : "consumer WRONG\n");
  return wrong == 0 ? 0 : 1;
}
