// A program outside the tree, built against an installed meshrt with only <prefix>/include on its
// include path: in-process all_reduce and a 2x2 DeviceMesh on 4 ranks, then a 1-rank Gloo world.
// Prints "consumer ok" and exits 0 when the results are right.
#include <meshrt/meshrt.h>

#include <atomic>
#include <cstdio>

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
  auto world = meshrt::init(o);
  std::vector<float> y{1.0f, 2.0f};
  world->all_reduce(meshrt::view(y), meshrt::ReduceOp::kMax)->wait();
  wrong += y[1] != 2.0f;
  std::printf(wrong == 0 ? "consumer ok\n" : "consumer WRONG\n");
  return wrong == 0 ? 0 : 1;
}
