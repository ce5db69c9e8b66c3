// One rank of the meshrt-vs-raw-Gloo collective benchmark. Start it N times with torchrun's
// environment (RANK, WORLD_SIZE, MASTER_ADDR=127.0.0.1, MASTER_PORT); bench/compare.sh does that.
//
// Each process holds two independent Gloo setups connected through the same TCP store:
//   meshrt  the world communicator from meshrt::init() (rank 0 hosts the store), ops enqueued on
//           its worker thread and waited on: the full path a user takes;
//   gloo    a raw gloo::rendezvous::Context (its own tcp device, store prefix "bench/raw/..."),
//           driven with gloo's algorithms and gloo::sum<float>, the way PyTorch's ProcessGroupGloo
//           drives it. Both are compiled in this binary: same compiler, same flags.
// For each op and size the impls run back to back, in an order rotated by the round number (2
// impls: meshrt first when r is even), so a ratio between them pairs measurements seconds apart.
// reduce_scatter compares meshrt's ring with raw Gloo all_reduce + slice (what Gloo's unbound API
// and PyTorch 1.13 offer) and with Gloo's old ReduceScatterHalvingDoubling ("gloo_hd").
// --handoff-experiment adds raw Gloo driven through a model of meshrt's worker handoff.
//
// Timing: every rank times each iteration of the timed loop on its own (std::chrono::steady_clock,
// op issued -> op complete); the per-iteration times are then reduced with MAX across ranks (a
// Gloo allreduce outside the timed region) and the median over iterations is reported. A barrier
// precedes every timed loop. Buffers are allocated and touched before any timing.
//
// Output: one JSON line per (round, impl, op, size) on rank 0's stdout. Sizes follow nccl-tests:
// all_gather's size is its output (world x block), reduce_scatter's its input; busbw factors are
// all_reduce 2(n-1)/n, all_gather and reduce_scatter (n-1)/n, broadcast 1; GB/s = 1e9 B/s.
#include <fmt/format.h>
#include <gloo/allreduce.h>
#include <gloo/math.h>
#include <gloo/reduce_scatter.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "bench/handoff_runner.h"
#include "bench/raw_gloo.h"
#include "mesh/meshrt.h"

namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

struct Args {
  int rounds = 1;        // Rounds in this process.
  int first_round = 0;   // Index of the first round (the driver passes its round number).
  int lat_iters = 1000;  // Timed iterations at the small size.
  int lat_warmup = 100;
  int big_iters = 7;  // Timed iterations at the large size.
  int big_warmup = 2;
  size_t small_bytes = 8;
  size_t big_bytes = size_t{64} << 20;
  std::string ops = "all_reduce,all_gather,broadcast,reduce_scatter";
  bool rs_hd = true;  // Also run Gloo's own ReduceScatterHalvingDoubling (old bound-buffer API).
  // Which impls run (gloo_hd: reduce_scatter only); empty: all but the experiment's, plus the
  // experiment's when it is on.
  std::string impls;
  // Adds, for all_reduce at the small size, raw Gloo driven through bench/handoff_runner.h: the
  // way meshrt's Communicator hands ops to its worker (gloo_thread), with the caller running an
  // op itself when the worker has not taken it yet (gloo_steal), and with a synchronous inline
  // path (gloo_inline): isolates what the handoff costs and what removing it would gain.
  bool handoff_experiment = false;
};

[[noreturn]] void usage(const char* msg) {
  std::fprintf(stderr,
               "collective_bench: %s\n"
               "usage: collective_bench [--rounds R] [--first-round K] [--lat-iters N]\n"
               "  [--lat-warmup N] [--big-iters N] [--big-warmup N] [--small-bytes B]\n"
               "  [--big-bytes B] [--ops a,b,...] [--impls meshrt,gloo,gloo_hd] [--no-rs-hd]\n"
               "  [--handoff-experiment]\n"
               "Started once per rank with RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set.\n",
               msg);
  std::exit(2);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) usage(("missing value after " + k).c_str());
      return argv[++i];
    };
    if (k == "--rounds")
      a.rounds = std::stoi(next());
    else if (k == "--first-round")
      a.first_round = std::stoi(next());
    else if (k == "--lat-iters")
      a.lat_iters = std::stoi(next());
    else if (k == "--lat-warmup")
      a.lat_warmup = std::stoi(next());
    else if (k == "--big-iters")
      a.big_iters = std::stoi(next());
    else if (k == "--big-warmup")
      a.big_warmup = std::stoi(next());
    else if (k == "--small-bytes")
      a.small_bytes = std::stoull(next());
    else if (k == "--big-bytes")
      a.big_bytes = std::stoull(next());
    else if (k == "--ops")
      a.ops = next();
    else if (k == "--no-rs-hd")
      a.rs_hd = false;
    else if (k == "--impls")
      a.impls = next();
    else if (k == "--handoff-experiment")
      a.handoff_experiment = true;
    else
      usage(("unknown argument " + k).c_str());
  }
  if (a.rounds < 1 || a.lat_iters < 1 || a.big_iters < 1) usage("counts must be >= 1");
  if (a.impls.empty()) {
    a.impls = a.handoff_experiment ? "meshrt,gloo,gloo_hd,gloo_thread,gloo_steal,gloo_inline"
                                   : "meshrt,gloo,gloo_hd";
  }
  return a;
}

bool listed(const std::string& list, const std::string& item) {
  return ("," + list + ",").find("," + item + ",") != std::string::npos;
}
bool wants(const Args& a, const std::string& op) { return listed(a.ops, op); }

using RawGloo = meshrt::bench::RawGloo;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct Case {
  std::string impl;
  std::string op;
  size_t bytes;
  std::function<void()> reset;         // Untimed, before warmup and before the timed loop.
  std::function<void()> run;           // One op, returns when complete on this rank.
  std::function<std::string()> check;  // After one run on reset data: "" or what is wrong.
};

class Bench {
 public:
  Bench(Args args, std::shared_ptr<meshrt::Communicator> world, RawGloo& raw)
      : a_(std::move(args)),
        world_(std::move(world)),
        raw_(raw),
        rank_(world_->rank()),
        n_(world_->size()) {}

  int main() {
    allocate();
    bool ok = true;
    for (int r = a_.first_round; r < a_.first_round + a_.rounds; ++r) {
      for (auto& group : cases()) {
        // Rotate the order of the impls of one (op, size) from round to round.
        const size_t k = group.size();
        for (size_t j = 0; j < k; ++j) {
          Case& c = group[(j + static_cast<size_t>(r)) % k];
          ok = measure(c, r, static_cast<int>(j)) && ok;
        }
      }
    }
    return ok ? 0 : 1;
  }

 private:
  void allocate() {
    const size_t big = a_.big_bytes / sizeof(float);
    const size_t nn = static_cast<size_t>(n_);
    if (big % nn != 0) usage("--big-bytes must split evenly over the ranks in floats");
    small_.assign(std::max<size_t>(1, a_.small_bytes / sizeof(float)), 0.0f);
    big_.assign(big, 0.0f);         // all_reduce, broadcast
    ag_in_.assign(big / nn, 0.0f);  // all_gather: block of the 64 MiB output
    ag_out_.assign(big, 0.0f);
    rs_in_.assign(big, 0.0f);  // reduce_scatter: 64 MiB input
    rs_out_.assign(big / nn, 0.0f);
    times_.reserve(static_cast<size_t>(std::max(a_.lat_iters, a_.big_iters)));
  }

  static std::string expect_all(const float* p, size_t n, float want, const char* what) {
    for (size_t i = 0; i < n; ++i) {
      if (p[i] != want) return fmt::format("{}[{}] = {} but expected {}", what, i, p[i], want);
    }
    return "";
  }

  std::vector<std::vector<Case>> cases() {
    const float fr = static_cast<float>(rank_ + 1);
    const float total = static_cast<float>(n_ * (n_ + 1) / 2);
    const size_t nn = static_cast<size_t>(n_);
    const size_t block = big_.size() / nn;
    std::vector<std::vector<Case>> out;
    auto meshrt_wait = [](meshrt::WorkHandle w) { w->wait(); };

    if (wants(a_, "all_reduce")) {
      for (auto* v : {&small_, &big_}) {
        const size_t bytes = v->size() * sizeof(float);
        auto reset = [v, fr] { std::fill(v->begin(), v->end(), fr); };
        auto check = [v, total] { return expect_all(v->data(), v->size(), total, "all_reduce"); };
        out.push_back({
            {"meshrt", "all_reduce", bytes, reset,
             [this, v, meshrt_wait] { meshrt_wait(world_->all_reduce(meshrt::view(*v))); }, check},
            {"gloo", "all_reduce", bytes, reset,
             [this, v] { raw_.all_reduce(v->data(), v->size()); }, check},
        });
        if (a_.handoff_experiment && v == &small_) {
          using Mode = meshrt::bench::HandoffRunner::Mode;
          for (auto [name, mode] :
               {std::pair{"gloo_thread", Mode::kHandoff}, std::pair{"gloo_steal", Mode::kSteal},
                std::pair{"gloo_inline", Mode::kInline}}) {
            auto& runner = runners_[static_cast<size_t>(mode)];
            if (!runner) runner = std::make_unique<meshrt::bench::HandoffRunner>(mode);
            meshrt::bench::HandoffRunner* rp = runner.get();
            out.back().push_back(
                {name, "all_reduce", bytes, reset,
                 [this, v, rp] {
                   rp->wait(rp->submit([this, v] { raw_.all_reduce(v->data(), v->size()); }));
                 },
                 check});
          }
        }
      }
    }
    if (wants(a_, "all_gather")) {
      const size_t bytes = ag_out_.size() * sizeof(float);
      auto reset = [this, fr] {
        std::fill(ag_in_.begin(), ag_in_.end(), fr);
        std::fill(ag_out_.begin(), ag_out_.end(), 0.0f);
      };
      auto check = [this, block, nn] {
        for (size_t j = 0; j < nn; ++j) {
          auto e = expect_all(ag_out_.data() + j * block, block, static_cast<float>(j + 1),
                              "all_gather output");
          if (!e.empty()) return e;
        }
        return std::string();
      };
      out.push_back({
          {"meshrt", "all_gather", bytes, reset,
           [this, meshrt_wait] {
             meshrt_wait(world_->all_gather(meshrt::view(ag_in_), meshrt::view(ag_out_)));
           },
           check},
          {"gloo", "all_gather", bytes, reset,
           [this, block] { raw_.all_gather(ag_in_.data(), block, ag_out_.data()); }, check},
      });
    }
    if (wants(a_, "broadcast")) {
      const size_t bytes = big_.size() * sizeof(float);
      auto reset = [this, fr] { std::fill(big_.begin(), big_.end(), fr); };
      auto check = [this] { return expect_all(big_.data(), big_.size(), 1.0f, "broadcast"); };
      out.push_back({
          {"meshrt", "broadcast", bytes, reset,
           [this, meshrt_wait] { meshrt_wait(world_->broadcast(meshrt::view(big_), 0)); }, check},
          {"gloo", "broadcast", bytes, reset,
           [this] { raw_.broadcast(big_.data(), big_.size(), 0); }, check},
      });
    }
    if (wants(a_, "reduce_scatter")) {
      const size_t bytes = rs_in_.size() * sizeof(float);
      // Block j of rank r's input holds r + 1 + j: the reduced block j is total + n * j.
      auto reset = [this, block, nn] {
        for (size_t j = 0; j < nn; ++j) {
          std::fill(rs_in_.begin() + static_cast<ptrdiff_t>(j * block),
                    rs_in_.begin() + static_cast<ptrdiff_t>((j + 1) * block),
                    static_cast<float>(rank_ + 1 + static_cast<int>(j)));
        }
        std::fill(rs_out_.begin(), rs_out_.end(), 0.0f);
      };
      const float want = total + static_cast<float>(n_ * rank_);
      auto check_out = [this, want] {
        return expect_all(rs_out_.data(), rs_out_.size(), want, "reduce_scatter output");
      };
      std::vector<Case> group{
          {"meshrt", "reduce_scatter", bytes, reset,
           [this, meshrt_wait] {
             meshrt_wait(world_->reduce_scatter(meshrt::view(rs_in_), meshrt::view(rs_out_)));
           },
           check_out},
          // What a user of Debian's Gloo (or PyTorch 1.13's gloo group) does without a
          // reduce_scatter: all_reduce the whole input in place, keep this rank's block.
          {"gloo", "reduce_scatter", bytes, reset,
           [this, block] {
             raw_.all_reduce(rs_in_.data(), rs_in_.size());
             std::memcpy(rs_out_.data(), rs_in_.data() + static_cast<size_t>(rank_) * block,
                         block * sizeof(float));
           },
           check_out},
      };
      if (a_.rs_hd && listed(a_.impls, "gloo_hd")) {
        // Gloo does ship a reduce-scatter, in its older "Algorithm" API on bound (per-pair
        // registered) buffers: ReduceScatterHalvingDoubling, in place, this rank's block left at
        // the front of the buffer. Set up once (it registers buffers with every peer).
        if (!rs_hd_) {
          std::vector<int> recv(nn, static_cast<int>(block));
          rs_hd_ = std::make_unique<gloo::ReduceScatterHalvingDoubling<float>>(
              raw_.context(), std::vector<float*>{rs_in_.data()}, static_cast<int>(rs_in_.size()),
              recv);
        }
        group.push_back({"gloo_hd", "reduce_scatter", bytes, reset, [this] { rs_hd_->run(); },
                         [this, want, block] {
                           return expect_all(rs_in_.data(), block, want, "reduce_scatter_hd");
                         }});
      }
      out.push_back(std::move(group));
    }
    // Keep the selected impls.
    for (auto& group : out) {
      std::erase_if(group, [this](const Case& c) { return !listed(a_.impls, c.impl); });
    }
    std::erase_if(out, [](const std::vector<Case>& g) { return g.empty(); });
    return out;
  }

  // Elementwise MAX of `v` across ranks (outside any timed region).
  void max_across_ranks(std::vector<double>& v) {
    raw_.all_reduce(v.data(), v.size(), &gloo::max<double>);
  }

  bool measure(Case& c, int round, int position) {
    const bool small = c.bytes <= a_.small_bytes;
    const int warmup = small ? a_.lat_warmup : a_.big_warmup;
    const int iters = small ? a_.lat_iters : a_.big_iters;

    // Correctness once per case per process (it is also the first warmup iteration).
    std::string problem;
    if (!checked_[c.impl + c.op + std::to_string(c.bytes)]) {
      c.reset();
      raw_.barrier();
      c.run();
      problem = c.check();
      checked_[c.impl + c.op + std::to_string(c.bytes)] = true;
    }
    // Values grow by n x per reducing iteration: reset keeps them finite (no inf, no denormals).
    c.reset();
    raw_.barrier();
    for (int i = 0; i < warmup; ++i) c.run();
    c.reset();
    if (small) std::fill(small_.begin(), small_.end(), 0.0f);
    raw_.barrier();
    times_.assign(static_cast<size_t>(iters), 0.0);
    for (int i = 0; i < iters; ++i) {
      const auto t0 = Clock::now();
      c.run();
      times_[static_cast<size_t>(i)] = std::chrono::duration<double>(Clock::now() - t0).count();
    }
    const double own_total = std::accumulate(times_.begin(), times_.end(), 0.0);
    max_across_ranks(times_);
    std::vector<double> total{own_total};
    max_across_ranks(total);

    const double t = median(times_);
    const double tmin = *std::min_element(times_.begin(), times_.end());
    const double tmax = *std::max_element(times_.begin(), times_.end());
    const double nd = n_;
    double factor = 1.0;
    if (c.op == "all_reduce") factor = 2.0 * (nd - 1) / nd;
    if (c.op == "all_gather" || c.op == "reduce_scatter") factor = (nd - 1) / nd;
    const double algbw = static_cast<double>(c.bytes) / t / 1e9;
    if (rank_ == 0) {
      std::printf(
          "{\"round\": %d, \"world\": %d, \"impl\": \"%s\", \"op\": \"%s\", \"bytes\": %zu, "
          "\"iters\": %d, \"warmup\": %d, \"position\": %d, \"time_us\": %.3f, \"min_us\": %.3f, "
          "\"max_us\": %.3f, \"mean_us\": %.3f, \"algbw_gbs\": %.4f, \"busbw_gbs\": %.4f, "
          "\"timing\": \"median over iterations of the max across ranks\", \"check\": %s}\n",
          round, n_, c.impl.c_str(), c.op.c_str(), c.bytes, iters, warmup, position, t * 1e6,
          tmin * 1e6, tmax * 1e6, total[0] / iters * 1e6, algbw, algbw * factor,
          problem.empty() ? "\"ok\"" : fmt::format("\"{}\"", problem).c_str());
      std::fflush(stdout);
    }
    if (!problem.empty()) {
      std::fprintf(stderr, "rank %d: %s %s %zu B: %s\n", rank_, c.impl.c_str(), c.op.c_str(),
                   c.bytes, problem.c_str());
    }
    return problem.empty();
  }

  Args a_;
  std::shared_ptr<meshrt::Communicator> world_;
  RawGloo& raw_;
  const int rank_;
  const int n_;
  std::vector<float> small_, big_, ag_in_, ag_out_, rs_in_, rs_out_;
  std::vector<double> times_;
  std::unique_ptr<gloo::ReduceScatterHalvingDoubling<float>> rs_hd_;
  std::map<std::string, bool> checked_;
  std::unique_ptr<meshrt::bench::HandoffRunner> runners_[3];
};

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse(argc, argv);
  try {
    const meshrt::InitOptions opts = meshrt::init_options_from_env();
    auto world = meshrt::init(opts);  // Rank 0 starts the store server at MASTER_PORT here.
    RawGloo raw(opts.rank, opts.world_size, opts.master_addr, opts.master_port, opts.gloo_iface,
                opts.run_id);
    int rc = Bench(args, world, raw).main();
    // Rank 0 hosts the store: nobody leaves while a peer may still use it.
    raw.barrier();
    world->barrier()->wait();
    return rc;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "collective_bench: %s\n", e.what());
    return 4;
  }
}
