// elastic_dp_train: data-parallel training that survives the death of a rank. Linear regression
// on a dp x tp mesh (features split over tp: one tp all_reduce per step for the predictions;
// gradients and loss summed over dp). One rank can kill itself with SIGKILL at a chosen step, as
// `kill -9` would; the survivors' ops fail at once, they shrink the mesh around the dead rank's
// dp replica (its tp siblings leave with it), take the weights from the first surviving replica,
// split the same global batch over fewer replicas, and train on to the same target loss.
//
//   meshrun --standalone --nproc-per-node 4 --on-rank-failure=continue elastic_dp_train
//       --mesh 4x1 --kill-rank 2 --kill-step 10   (one command line)
//
// Prints one line per step ("step N loss L dp D") from the first rank of the mesh, and after a
// repair "repaired: ... first step of the shrunk job X s after the kill". Exit status: 0 when the
// loss reached --target (1 otherwise) on the ranks that went on; 0 on ranks that left with the
// dead rank's replica; 2 on bad flags. With --dump, each rank that reached the target dumps its
// flight recorder, which holds both repair epochs.
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "mesh/device_mesh.h"
#include "mesh/meshrt.h"

namespace {

struct Config {
  int dp = 0;
  int tp = 1;
  int features = 16;
  int batch = 96;  // Global: every step's samples, split over the dp replicas.
  int max_steps = 400;
  double lr = 0.3;
  double target = 1e-4;
  int kill_rank = -1;
  int kill_step = -1;
  int step_ms = 10;  // Stands for a step's computation.
  bool dump = false;
};

// Sample i of step `step`: features in [-1, 1), the same on every rank (no data is sent).
double feature(int step, int i, int f) {
  uint64_t x = (static_cast<uint64_t>(step) * 1000003u + static_cast<uint64_t>(i)) * 131u + f;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  return static_cast<double>(x % 20000) / 10000.0 - 1.0;
}

double teacher(int f) { return std::sin(1.0 + f); }

// Where the rank that kills itself leaves the time, for the survivors to measure from.
std::string kill_stamp_path() {
  const char* run = std::getenv("TORCHELASTIC_RUN_ID");
  return std::string("/tmp/meshrt_elastic_kill_") + (run ? run : "default") + "_" +
         std::to_string(getppid());
}

int64_t wall_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

int main(int argc, char** argv) {
  Config c;
  std::string mesh_text;
  CLI::App app{"Data-parallel training that shrinks around a dead rank and goes on"};
  app.add_option("--mesh", mesh_text, "dp x tp, e.g. 4x1 or 2x2 (default: world x 1)");
  app.add_option("--max-steps", c.max_steps)->check(CLI::Range(1, 100000));
  app.add_option("--target", c.target, "loss to reach")->check(CLI::PositiveNumber);
  app.add_option("--kill-rank", c.kill_rank, "global rank that SIGKILLs itself");
  app.add_option("--kill-step", c.kill_step, "at the start of this step");
  app.add_option("--step-ms", c.step_ms, "computation per step")->check(CLI::Range(0, 10000));
  app.add_flag("--dump", c.dump, "dump the flight recorder at the end (MESHRT_DUMP_PREFIX)");
  CLI11_PARSE(app, argc, argv);

  auto world = meshrt::init();
  if (mesh_text.empty()) {
    c.dp = world->size();
  } else if (std::sscanf(mesh_text.c_str(), "%dx%d", &c.dp, &c.tp) != 2 ||
             c.dp * c.tp != world->size() || c.features % c.tp != 0) {
    std::fprintf(stderr, "--mesh %s does not fit %d ranks and %d features\n", mesh_text.c_str(),
                 world->size(), c.features);
    return 2;
  }
  auto mesh = meshrt::init_device_mesh(world, "cpu", {c.dp, c.tp}, {"dp", "tp"});
  world.reset();  // The mesh holds it; a shrink replaces it.
  const int me = mesh->comm("dp").global_rank();

  std::vector<double> w(static_cast<size_t>(c.features / c.tp), 0.0);  // This tp rank's slice.
  int64_t killed_at_ns = 0;  // Set once a repair happened, until its first step.
  for (int step = 0; step < c.max_steps;) {
    if (me == c.kill_rank && step == c.kill_step) {
      std::ofstream(kill_stamp_path()) << wall_ns() << "\n";
      std::printf("rank %d: killing itself with SIGKILL at step %d\n", me, step);
      std::fflush(stdout);
      ::raise(SIGKILL);
    }
    meshrt::Communicator& dp = mesh->comm("dp");
    meshrt::Communicator& tp = mesh->comm("tp");
    const int dps = dp.size();
    const int slice = c.features / tp.size();
    const int f0 = tp.rank() * slice;
    const int first = c.batch * dp.rank() / dps;
    const int last = c.batch * (dp.rank() + 1) / dps;
    try {
      std::this_thread::sleep_for(std::chrono::milliseconds(c.step_ms));
      std::vector<double> pred(static_cast<size_t>(last - first), 0.0);
      for (int i = first; i < last; ++i) {
        for (int f = 0; f < slice; ++f) pred[i - first] += feature(step, i, f0 + f) * w[f];
      }
      tp.all_reduce(meshrt::view(pred))->wait();
      // grad (this slice) and loss, summed over the replicas' samples.
      std::vector<double> sums(static_cast<size_t>(slice) + 1, 0.0);
      for (int i = first; i < last; ++i) {
        double y = 0;
        for (int f = 0; f < c.features; ++f) y += feature(step, i, f) * teacher(f);
        const double err = pred[i - first] - y;
        for (int f = 0; f < slice; ++f) sums[f] += err * feature(step, i, f0 + f);
        sums[slice] += 0.5 * err * err;
      }
      dp.all_reduce(meshrt::view(sums))->wait();
      for (int f = 0; f < slice; ++f) w[f] -= c.lr * sums[f] / c.batch;
      const double loss = sums[slice] / c.batch;
      ++step;
      if (dp.rank() == 0 && tp.rank() == 0) {
        std::printf("step %d loss %.6g dp %d\n", step, loss, dps);
        if (killed_at_ns != 0) {
          std::printf("repaired: first step of the shrunk job %.3f s after the kill\n",
                      static_cast<double>(wall_ns() - killed_at_ns) / 1e9);
        }
        std::fflush(stdout);
      }
      killed_at_ns = 0;
      if (loss < c.target) {
        if (dp.rank() == 0 && tp.rank() == 0) {
          std::printf("reached loss %.6g < %g at step %d with dp %d\n", loss, c.target, step, dps);
        }
        // The records of both epochs: the ops before the death and those after the repair.
        if (c.dump) meshrt::trace::dump_flight_recorder();
        return 0;
      }
    } catch (const meshrt::Error& e) {
      if (e.code() != meshrt::ErrorCode::kPeerFailure && e.code() != meshrt::ErrorCode::kAborted) {
        throw;
      }
      // The dead rank's record reaches the store within meshrun's monitor interval.
      std::vector<int> failed = mesh->failed_ranks();
      for (int i = 0; i < 50 && failed.empty(); ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        failed = mesh->failed_ranks();
      }
      if (failed.empty()) throw;
      std::string who;
      for (int r : failed) who += (who.empty() ? "" : ", ") + std::to_string(r);
      mesh = mesh->shrink(failed);
      if (!mesh) {
        std::printf("rank %d: leaving with the replica of dead rank(s) [%s]\n", me, who.c_str());
        return 0;
      }
      // The survivors may have finished different steps when the rank died: go on from the
      // first replica's weights and step, so that every replica is in step again. It also
      // passes on when the rank died.
      const bool first_rank = mesh->comm("dp").rank() == 0 && mesh->comm("tp").rank() == 0;
      std::vector<double> state(w);
      state.push_back(step);
      state.push_back(0);
      if (first_rank) {
        std::ifstream stamp(kill_stamp_path());
        if (stamp >> killed_at_ns) state.back() = static_cast<double>(killed_at_ns);
        std::remove(kill_stamp_path().c_str());
      }
      mesh->comm("dp").broadcast(meshrt::view(state), 0)->wait();
      w.assign(state.begin(), state.end() - 2);
      step = static_cast<int>(state[state.size() - 2]);
      killed_at_ns = static_cast<int64_t>(state.back());
      if (first_rank) {
        std::printf("repaired: rank(s) [%s] died (%s); dp %d -> %d, going on from step %d\n",
                    who.c_str(), e.what(), dps, static_cast<int>(mesh->shape()[0]), step);
        std::fflush(stdout);
      }
    }
  }
  return 1;
}
