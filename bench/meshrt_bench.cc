// meshrt-bench: nccl-tests' interface and output for every meshrt collective, on any backend and
// any mesh dim. Every rank runs it; world rank 0 prints.
//
//   meshrun --standalone --nproc-per-node 2 build/bench/meshrt-bench -b 8 -e 64M -f 2 --coll all
//   mpirun -np 2 --mca btl self,vader build/bench/meshrt-bench -b 8 -e 1M       (MPI backend)
//   build/bench/meshrt-bench --inproc 4 --mesh 2x2 --dim-names dp,tp --dim tp -b 1K -e 1M
//
// Columns and formulas are nccl-tests': size S (bytes, nccl-tests' message size), count (the
// count argument of NCCL's call: per rank for all_gather, reduce_scatter, gather, scatter; per
// peer for all_to_all), time (us per op: -n ops each waited on, after -w warmup ops, averaged over
// ranks, -a), algbw = S / time, busbw = algbw x trace/bandwidth.h's factor for the group size, and
// #wrong: elements of this size's result that differ from the value computed on the host
// (bench/meshrt_bench_check.h), summed over ranks, from one checked op before the timed ones.
// meshrt has no out-of-place all_reduce, broadcast or reduce, nor in-place all_to_all, gather,
// scatter or sendrecv: those columns time what a user writes instead (a copy into the output,
// then the in-place op; a copy of the input aside, then the out-of-place op), and the header
// says which. Exits 1 when any element is wrong, 2 on bad arguments, 3 when an op fails.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bench/meshrt_bench_check.h"
#include "bench/raw_gloo.h"
#include "mesh/meshrt.h"
#include "trace/atomic_file.h"
#include "trace/bandwidth.h"

namespace meshrt::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct Args {
  size_t min_bytes = 32 << 20;
  size_t max_bytes = 32 << 20;
  size_t step_factor = 2;  // -f; used when step_bytes is 0.
  size_t step_bytes = 0;   // -i
  int warmup = 1;
  int iters = 20;
  bool check = true;
  int average = 1;  // -a: 0 rank 0's time, 1 the mean over ranks, 2 the min, 3 the max.
  int root = 0;
  std::vector<BenchOp> ops{BenchOp::kAllReduce};
  std::vector<DType> dtypes{DType::kF32};
  std::vector<ReduceOp> redops{ReduceOp::kSum};
  int inproc = 0;  // In-process world of this many ranks; 0: init() from the environment.
  std::vector<int64_t> mesh;
  std::vector<std::string> dim_names;
  std::string dim;
  std::string json;
  // "meshrt", or "gloo": the same loop on libgloo called directly (bench/raw_gloo.h), the
  // baseline of bench/meshrt_bench_compare.sh; float sums of all_reduce, all_gather,
  // reduce_scatter (Gloo has none: all_reduce, then this rank's block) and broadcast only.
  std::string impl = "meshrt";
};

[[noreturn]] void usage(const std::string& msg) {
  std::fprintf(
      stderr,
      "meshrt-bench: %s\n"
      "usage: meshrt-bench [-b MINBYTES] [-e MAXBYTES] [-f STEPFACTOR | -i STEPBYTES]\n"
      "  [-w WARMUP] [-n ITERS] [-c 0|1] [-a 0|1|2|3] [-o sum|prod|min|max|avg|custom|all]\n"
      "  [-d float|double|half|bfloat16|int8|uint8|int32|int64|f8e4m3|f8e5m2|all] [-r ROOT]\n"
      "  [--coll all_reduce,all_gather,reduce_scatter,all_to_all,broadcast,reduce,gather,\n"
      "          scatter,sendrecv,all_gather_v,reduce_scatter_v|all] [--inproc N]\n"
      "  [--mesh AxB.. [--dim-names a,b..] --dim NAME]\n"
      "  [--json FILE] [--impl meshrt|gloo]\n"
      "Sizes take K, M, G (powers of 1024). -o custom: a Reducer that sums with the built-in\n"
      "sum's kernel (the cost of the user-defined reduction path). Without --inproc, run one\n"
      "process per rank under meshrun/torchrun (Gloo, or MESHRT_BACKEND) or mpirun (MPI).\n",
      msg.c_str());
  std::exit(2);
}

std::vector<std::string> split_list(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t end = s.find(sep, start);
    out.push_back(s.substr(start, end - start));
    if (end == std::string::npos) return out;
    start = end + 1;
  }
}

size_t parse_bytes(const std::string& s) {
  size_t pos = 0;
  unsigned long long v = 0;
  try {
    v = std::stoull(s, &pos);
  } catch (const std::exception&) {
    usage("bad size '" + s + "'");
  }
  const std::string unit = s.substr(pos);
  if (unit.empty()) return v;
  if (unit == "K" || unit == "k") return v << 10;
  if (unit == "M" || unit == "m") return v << 20;
  if (unit == "G" || unit == "g") return v << 30;
  usage("bad size unit in '" + s + "' (K, M or G)");
}

int parse_int(const std::string& s) {
  try {
    size_t pos = 0;
    const int v = std::stoi(s, &pos);
    if (pos == s.size()) return v;
  } catch (const std::exception&) {
  }
  usage("bad number '" + s + "'");
}

std::optional<ReduceOp> redop_from_name(std::string_view name) {
  for (ReduceOp op : kAllReduceOps) {
    if (reduce_op_name(op) == name) return op;
  }
  return std::nullopt;
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) usage("missing value after " + k);
      return argv[++i];
    };
    if (k == "-b" || k == "--minbytes") {
      a.min_bytes = parse_bytes(next());
    } else if (k == "-e" || k == "--maxbytes") {
      a.max_bytes = parse_bytes(next());
    } else if (k == "-f" || k == "--stepfactor") {
      a.step_factor = parse_bytes(next());
    } else if (k == "-i" || k == "--stepbytes") {
      a.step_bytes = parse_bytes(next());
    } else if (k == "-w" || k == "--warmup_iters") {
      a.warmup = parse_int(next());
    } else if (k == "-n" || k == "--iters") {
      a.iters = parse_int(next());
    } else if (k == "-c" || k == "--check") {
      a.check = parse_int(next()) != 0;
    } else if (k == "-a" || k == "--average") {
      a.average = parse_int(next());
    } else if (k == "-r" || k == "--root") {
      a.root = parse_int(next());
    } else if (k == "-o" || k == "--op") {
      const std::string v = next();
      a.redops.clear();
      if (v == "all") {
        a.redops.assign(std::begin(kAllReduceOps), std::end(kAllReduceOps));
      } else if (auto op = redop_from_name(v)) {
        a.redops.push_back(*op);
      } else if (v == "custom") {
        a.redops.push_back(ReduceOp::kCustom);
      } else {
        usage("unknown reduce op '" + v + "'");
      }
    } else if (k == "-d" || k == "--datatype") {
      const std::string v = next();
      a.dtypes.clear();
      if (v == "all") {
        a.dtypes.assign(std::begin(kAllDTypes), std::end(kAllDTypes));
      } else if (auto t = dtype_from_nccl_name(v)) {
        a.dtypes.push_back(*t);
      } else {
        usage("unknown datatype '" + v + "'");
      }
    } else if (k == "--coll") {
      const std::string v = next();
      a.ops.clear();
      if (v == "all") {
        a.ops.assign(std::begin(kAllBenchOps), std::end(kAllBenchOps));
      } else {
        for (const std::string& name : split_list(v, ',')) {
          auto op = bench_op_from_name(name);
          if (!op) usage("unknown collective '" + name + "'");
          a.ops.push_back(*op);
        }
      }
    } else if (k == "--inproc") {
      a.inproc = parse_int(next());
    } else if (k == "--mesh") {
      for (const std::string& d : split_list(next(), 'x')) a.mesh.push_back(parse_int(d));
    } else if (k == "--dim-names") {
      a.dim_names = split_list(next(), ',');
    } else if (k == "--dim") {
      a.dim = next();
    } else if (k == "--json") {
      a.json = next();
    } else if (k == "--impl") {
      a.impl = next();
    } else if (k == "-h" || k == "--help") {
      usage("help");
    } else {
      usage("unknown argument " + k);
    }
  }
  if (a.min_bytes > a.max_bytes) usage("-b must not exceed -e");
  if (a.step_bytes == 0 && a.step_factor < 2) usage("-f must be at least 2 (or give -i)");
  if (a.warmup < 0 || a.iters < 1) usage("-w must be >= 0 and -n >= 1");
  if (a.average < 0 || a.average > 3) usage("-a takes 0, 1, 2 or 3");
  if (a.mesh.empty() && (!a.dim.empty() || !a.dim_names.empty()))
    usage("--dim and --dim-names need --mesh");
  if (a.mesh.size() > 1 && a.dim.empty()) usage("--mesh with several dims needs --dim");
  if (a.impl == "gloo") {
    for (BenchOp op : a.ops) {
      if (op != BenchOp::kAllReduce && op != BenchOp::kAllGather && op != BenchOp::kReduceScatter &&
          op != BenchOp::kBroadcast)
        usage("--impl gloo runs all_reduce, all_gather, reduce_scatter and broadcast only");
    }
    if (a.dtypes != std::vector<DType>{DType::kF32} ||
        a.redops != std::vector<ReduceOp>{ReduceOp::kSum})
      usage("--impl gloo runs float sums only");
    if (a.inproc > 0 || !a.mesh.empty()) usage("--impl gloo runs on a launched world only");
  } else if (a.impl != "meshrt") {
    usage("--impl takes meshrt or gloo");
  }
  return a;
}

// One result row: nccl-tests' columns for one placement.
struct Timing {
  double time_us = 0;
  double algbw_gbps = 0;
  double busbw_gbps = 0;
  double wrong = 0;  // Summed over ranks; -1 when not checked.
};

// One line of the table.
struct Row {
  BenchOp op;
  DType dtype;
  ReduceOp redop;
  size_t bytes;
  size_t count;
  int root;  // -1 for unrooted ops.
  Timing out_of_place, in_place;
};

// Which placement meshrt lacks for `op`: the other is emulated by a copy (see the file comment).
bool native_in_place_only(BenchOp op) {
  return op == BenchOp::kAllReduce || op == BenchOp::kBroadcast || op == BenchOp::kReduce;
}
bool native_out_of_place_only(BenchOp op) {
  return op == BenchOp::kAllToAll || op == BenchOp::kGather || op == BenchOp::kScatter ||
         op == BenchOp::kSendRecv;
}

class Bench {
 public:
  // `init` (the world's options) is needed by --impl gloo only.
  Bench(const Args& args, std::shared_ptr<Communicator> world, const InitOptions* init = nullptr)
      : a_(args), world_(std::move(world)) {
    comm_ = world_.get();
    if (a_.impl == "gloo") {
      raw_ = std::make_unique<RawGloo>(init->rank, init->world_size, init->master_addr,
                                       init->master_port, init->gloo_iface, init->run_id);
    }
    if (!a_.mesh.empty()) {
      mesh_ = init_device_mesh(world_, "cpu", a_.mesh, a_.dim_names);
      if (!mesh_->is_member()) {
        throw Error(ErrorCode::kInvalidArgument, {world_->rank(), world_->name(), "meshrt-bench"},
                    "this rank is outside the mesh: give a --mesh that covers the world");
      }
      comm_ = a_.dim.empty() ? &mesh_->comm() : &mesh_->comm(a_.dim);
    }
    rank_ = comm_->rank();
    n_ = comm_->size();
    if (a_.root < 0 || a_.root >= n_) usage(fmt::format("-r {} is not a rank of {}", a_.root, n_));
    for (BenchOp op : a_.ops) {
      for (DType t : a_.dtypes) {
        const size_t w = dtype_size_bytes(t);
        const auto l = bench_layout(op, 1, n_);
        const size_t count = a_.max_bytes / w / std::max(l.send_count, l.recv_count);
        max_bytes_ = std::max(max_bytes_, count * w * std::max(l.send_count, l.recv_count));
      }
    }
    // Aligned for every dtype; touched now, so that no page fault lands in a timed loop.
    const size_t words = max_bytes_ / sizeof(uint64_t) + 1;
    send_.assign(words, 0);
    recv_.assign(words, 0);
    scratch_.assign(words, 0);
  }

  int run() {
    const bool printer = world_->rank() == 0;
    if (printer) print_header();
    size_t total_wrong = 0;
    for (BenchOp op : a_.ops) {
      if (op == BenchOp::kSendRecv && n_ < 2) {
        if (printer) fmt::print("# sendrecv needs 2 ranks or more: skipped\n");
        continue;
      }
      const std::vector<ReduceOp> redops =
          bench_op_reduces(op) ? a_.redops : std::vector<ReduceOp>{ReduceOp::kSum};
      if (printer) print_columns(op);
      double bw_sum = 0;
      int bw_count = 0;
      size_t wrong = 0;
      for (DType t : a_.dtypes) {
        for (ReduceOp redop : redops) {
          if (redop == ReduceOp::kAvg && !is_floating(t)) continue;  // meshrt refuses it.
          for (size_t bytes : sizes()) {
            auto row = measure(op, t, redop, bytes);
            if (!row) continue;
            for (const Timing* x : {&row->out_of_place, &row->in_place}) {
              bw_sum += x->busbw_gbps;
              ++bw_count;
              if (x->wrong > 0) wrong += static_cast<size_t>(x->wrong);
            }
            if (printer) print_row(*row);
            rows_.push_back(*row);
          }
        }
      }
      total_wrong += wrong;
      if (printer) {
        fmt::print("# Out of bounds values : {} {}\n", wrong, wrong ? "FAILED" : "OK");
        fmt::print("# Avg bus bandwidth    : {:g} \n#\n", bw_count ? bw_sum / bw_count : 0.0);
        std::fflush(stdout);
      }
    }
    if (printer && !a_.json.empty()) write_json();
    return total_wrong ? 1 : 0;
  }

 private:
  std::vector<size_t> sizes() const {
    std::vector<size_t> out;
    for (size_t s = a_.min_bytes; s <= a_.max_bytes;) {
      out.push_back(s);
      const size_t next = a_.step_bytes ? s + a_.step_bytes : s * a_.step_factor;
      if (next <= s) break;
      s = next;
    }
    return out;
  }

  BufferView at(std::vector<uint64_t>& buf, DType t, size_t offset, size_t count) {
    auto* base = reinterpret_cast<char*>(buf.data());
    return {base + offset * dtype_size_bytes(t), count, t, Device::cpu(), {}};
  }

  // The input and output of one op in one placement; in place, both lie in recv_ (nccl-tests'
  // layout: the input is the output's block `rank` for all_gather and gather, the output is the
  // input's block `rank` for reduce_scatter and scatter).
  std::pair<BufferView, BufferView> placement(BenchOp op, DType t, size_t c, bool in_place) {
    const auto l = bench_layout(op, c, n_);
    if (!in_place) return {at(send_, t, 0, l.send_count), at(recv_, t, 0, l.recv_count)};
    const size_t block = static_cast<size_t>(rank_) * c;
    switch (op) {
      case BenchOp::kAllGather:
      case BenchOp::kAllGatherV:
      case BenchOp::kGather:
        return {at(recv_, t, block, c), at(recv_, t, 0, l.recv_count)};
      case BenchOp::kReduceScatter:
      case BenchOp::kReduceScatterV:
      case BenchOp::kScatter:
        return {at(recv_, t, 0, l.send_count), at(recv_, t, block, c)};
      default:
        return {at(recv_, t, 0, l.send_count), at(recv_, t, 0, l.recv_count)};
    }
  }

  // The raw Gloo baseline of run_op (float sums).
  void run_raw(BenchOp op, BufferView in, BufferView out, bool in_place) {
    auto* fin = static_cast<float*>(in.data);
    auto* fout = static_cast<float*>(out.data);
    auto* scratch = reinterpret_cast<float*>(scratch_.data());
    switch (op) {
      case BenchOp::kAllReduce:
        raw_->all_reduce(fin, fout, out.count);
        return;
      case BenchOp::kBroadcast:
        if (!in_place) std::memcpy(fout, fin, in.bytes());
        raw_->broadcast(fout, out.count, a_.root);
        return;
      case BenchOp::kAllGather:
        // Gloo copies the input into the output's block first: from a copy when that is it.
        if (in_place) std::memcpy(scratch, fin, in.bytes());
        raw_->all_gather(in_place ? scratch : fin, in.count, fout);
        return;
      case BenchOp::kReduceScatter:
        // In place the output already is the reduced input's block.
        raw_->all_reduce(fin, in_place ? fin : scratch, in.count);
        if (!in_place) std::memcpy(fout, scratch + rank_ * out.count, out.bytes());
        return;
      default:
        return;  // parse() refuses the others.
    }
  }

  // One op, waited on; copies first where meshrt lacks the placement.
  // -o custom: a Reducer summing `dtype` with the built-in sum's kernel, made once per dtype.
  ReduceBy reduce_by(ReduceOp redop, DType dtype) {
    if (redop != ReduceOp::kCustom) return redop;
    auto& r = custom_[static_cast<size_t>(dtype)];
    if (!r) {
      r = Reducer::create(
          "custom_sum", dtype_size_bytes(dtype),
          [dtype](const void* in, void* inout, size_t count) {
            reduce_elements(dtype, ReduceOp::kSum, inout, in, inout, count);
          },
          dtype);
    }
    return r;
  }

  void run_op(BenchOp op, ReduceOp redop, BufferView in, BufferView out, bool in_place) {
    if (raw_) return run_raw(op, in, out, in_place);
    Communicator& c = *comm_;
    if (native_in_place_only(op) && !in_place) std::memcpy(out.data, in.data, in.bytes());
    if (native_out_of_place_only(op) && in_place) {
      std::memcpy(scratch_.data(), in.data, in.bytes());
      in.data = scratch_.data();
    }
    const int root = a_.root;
    switch (op) {
      case BenchOp::kAllReduce:
        c.all_reduce(out, reduce_by(redop, out.dtype))->wait();
        return;
      case BenchOp::kBroadcast:
        c.broadcast(out, root)->wait();
        return;
      case BenchOp::kReduce:
        c.reduce(out, root, reduce_by(redop, out.dtype))->wait();
        return;
      case BenchOp::kAllGather:
        c.all_gather(in, out)->wait();
        return;
      case BenchOp::kReduceScatter:
        c.reduce_scatter(in, out, reduce_by(redop, out.dtype))->wait();
        return;
      case BenchOp::kAllToAll:
        c.all_to_all(in, out)->wait();
        return;
      case BenchOp::kGather:
        c.gather(in, out, root)->wait();
        return;
      case BenchOp::kScatter:
        c.scatter(in, out, root)->wait();
        return;
      case BenchOp::kSendRecv: {
        const P2POp p2p[] = {{P2POp::Dir::kSend, in, (rank_ + 1) % n_, 0},
                             {P2POp::Dir::kRecv, out, (rank_ + n_ - 1) % n_, 0}};
        c.batch_isend_irecv(p2p)->wait();
        return;
      }
      case BenchOp::kAllGatherV:
        blocks_.assign(static_cast<size_t>(n_), in.count);
        c.all_gather_v(in, out, blocks_)->wait();
        return;
      case BenchOp::kReduceScatterV:
        blocks_.assign(static_cast<size_t>(n_), out.count);
        c.reduce_scatter_v(in, out, blocks_, {}, reduce_by(redop, out.dtype))->wait();
        return;
    }
  }

  // Elementwise reduction of `v` over the world, outside any timed loop.
  void world_reduce(std::vector<double>& v, ReduceOp op) {
    world_->all_reduce(view(v), op)->wait();
  }

  Timing time_placement(BenchOp op, DType t, ReduceOp redop, size_t c, bool in_place) {
    auto [in, out] = placement(op, t, c, in_place);
    const CheckSpec spec{op, t, redop, rank_, n_, a_.root, c};
    double wrong = -1;
    if (a_.check) {
      fill_sentinel(t, out.data, out.count);
      fill_input(t, redop, rank_, in.data, in.count);
      world_->barrier()->wait();
      run_op(op, redop, in, out, in_place);
      wrong = static_cast<double>(count_wrong(spec, out.data));
    }
    for (int i = 0; i < a_.warmup; ++i) run_op(op, redop, in, out, in_place);
    world_->barrier()->wait();
    const auto t0 = Clock::now();
    for (int i = 0; i < a_.iters; ++i) run_op(op, redop, in, out, in_place);
    const double own_us =
        std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / a_.iters;

    std::vector<double> time{own_us}, sum{own_us, wrong};
    if (a_.average == 0) {
      std::vector<double> zeroed{world_->rank() == 0 ? own_us : 0.0};
      world_reduce(zeroed, ReduceOp::kSum);
      time = zeroed;
    } else if (a_.average == 2 || a_.average == 3) {
      world_reduce(time, a_.average == 2 ? ReduceOp::kMin : ReduceOp::kMax);
    }
    world_reduce(sum, ReduceOp::kSum);
    Timing r;
    r.time_us = a_.average == 1 ? sum[0] / world_->size() : time[0];
    r.wrong = a_.check ? sum[1] : -1;
    const size_t bytes = dtype_size_bytes(t) * std::max(bench_layout(op, c, n_).send_count,
                                                        bench_layout(op, c, n_).recv_count);
    r.algbw_gbps = trace::algbw_gbps(bytes, r.time_us);
    r.busbw_gbps = trace::busbw_gbps(bench_op_kind(op), n_, bytes, r.time_us);
    return r;
  }

  std::optional<Row> measure(BenchOp op, DType t, ReduceOp redop, size_t bytes) {
    const size_t w = dtype_size_bytes(t);
    const auto unit = bench_layout(op, 1, n_);
    const size_t per_count = std::max(unit.send_count, unit.recv_count);
    const size_t c = bytes / w / per_count;
    if (c == 0) return std::nullopt;
    Row row{op,
            t,
            redop,
            c * per_count * w,
            c,
            bench_op_rooted(op) ? a_.root : -1,
            time_placement(op, t, redop, c, false),
            time_placement(op, t, redop, c, true)};
    return row;
  }

  static std::string time_text(double us) {
    // nccl-tests' widths: fewer decimals as the time grows.
    if (us >= 10000.0) return fmt::format("{:7.0f}", us);
    if (us >= 100.0) return fmt::format("{:7.1f}", us);
    return fmt::format("{:7.2f}", us);
  }

  void print_header() const {
    fmt::print(
        "# meshrt-bench: {}, comm '{}': {} ranks, {} world ranks\n",
        raw_ ? std::string("raw libgloo (bench/raw_gloo.h), no meshrt on the op path")
             : fmt::format("backend {} ({})", comm_->backend_name(), comm_->backend_version()),
        comm_->name(), n_, world_->size());
    fmt::print(
        "# nThread 1 nGpus 1 minBytes {} maxBytes {} step: {}({}) warmup iters: {} iters: {} "
        "agg iters: 1 validation: {} graph: 0\n",
        a_.min_bytes, a_.max_bytes, a_.step_bytes ? a_.step_bytes : a_.step_factor,
        a_.step_bytes ? "bytes" : "factor", a_.warmup, a_.iters, a_.check ? 1 : 0);
    fmt::print("#\n# Using devices\n#  Rank {:2} Group  0 Pid {:6} on {} device cpu\n#\n", 0,
               getpid(), host_name());
  }

  static std::string host_name() {
    char name[256] = {};
    gethostname(name, sizeof(name) - 1);
    return name;
  }

  void print_columns(BenchOp op) const {
    fmt::print("# Collective test: {}{}\n#\n", bench_op_name(op),
               native_in_place_only(op)       ? " (out-of-place: copy, then the in-place op)"
               : native_out_of_place_only(op) ? " (in-place: copy of the input, then the op)"
                                              : "");
    fmt::print(
        "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}           out-of-place                 "
        "      in-place          \n",
        "", "", "", "", "");
    fmt::print(
        "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6} {:>6}  {:>7}  {:>6}  "
        "{:>6} {:>6}\n",
        "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time",
        "algbw", "busbw", "#wrong");
    fmt::print(
        "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>5}  {:>7}  {:>6}  "
        "{:>6}  {:>5}\n",
        "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)",
        "");
  }

  void print_row(const Row& r) const {
    std::string line = fmt::format(
        "{:>12}  {:>12}  {:>8}  {:>6}  {:>6}", r.bytes, r.count, nccl_type_name(r.dtype),
        bench_op_reduces(r.op) ? reduce_op_name(r.redop) : "none", r.root);
    for (const Timing* x : {&r.out_of_place, &r.in_place}) {
      line += fmt::format("  {}  {:6.2f}  {:6.2f}  {:>5}", time_text(x->time_us), x->algbw_gbps,
                          x->busbw_gbps, x->wrong < 0 ? "N/A" : fmt::format("{:g}", x->wrong));
    }
    fmt::print("{}\n", line);
    std::fflush(stdout);
  }

  void write_json() const {
    std::string s = fmt::format(
        "{{\"tool\": \"meshrt-bench\", \"impl\": \"{}\", \"backend\": \"{}\", \"comm\": "
        "\"{}\", \"ranks\": {}, \"world\": {}, \"warmup\": {}, \"iters\": {}, \"average\": {}, "
        "\"rows\": [",
        a_.impl, raw_ ? "gloo" : comm_->backend_name(), comm_->name(), n_, world_->size(),
        a_.warmup, a_.iters, a_.average);
    for (size_t i = 0; i < rows_.size(); ++i) {
      const Row& r = rows_[i];
      for (const Timing* x : {&r.out_of_place, &r.in_place}) {
        s += fmt::format(
            "{}\n  {{\"op\": \"{}\", \"in_place\": {}, \"bytes\": {}, \"count\": {}, \"type\": "
            "\"{}\", \"redop\": \"{}\", \"root\": {}, \"time_us\": {:.3f}, \"algbw_gbps\": {:.4f},"
            " \"busbw_gbps\": {:.4f}, \"wrong\": {}}}",
            i == 0 && x == &r.out_of_place ? "" : ",", bench_op_name(r.op),
            x == &r.in_place ? "true" : "false", r.bytes, r.count, nccl_type_name(r.dtype),
            bench_op_reduces(r.op) ? reduce_op_name(r.redop) : "none", r.root, x->time_us,
            x->algbw_gbps, x->busbw_gbps, x->wrong < 0 ? "null" : fmt::format("{:g}", x->wrong));
      }
    }
    s += "\n]}\n";
    trace::write_output_file(a_.json, s, "meshrt-bench's JSON rows");
  }

  const Args& a_;
  std::shared_ptr<Communicator> world_;
  std::shared_ptr<DeviceMesh> mesh_;
  Communicator* comm_ = nullptr;
  int rank_ = 0;
  int n_ = 1;
  size_t max_bytes_ = 0;
  std::vector<uint64_t> send_, recv_, scratch_;
  std::vector<Row> rows_;
  std::unique_ptr<RawGloo> raw_;
  std::array<std::shared_ptr<const Reducer>, std::size(kAllDTypes)> custom_;
  std::vector<size_t> blocks_;  // The v forms' counts: `count` for every rank.
};

}  // namespace
}  // namespace meshrt::bench

int main(int argc, char** argv) {
  using namespace meshrt;
  const bench::Args args = bench::parse(argc, argv);
  try {
    if (args.inproc > 0) {
      int rc = 0;
      run_inproc(args.inproc, [&](Communicator& world) {
        const int r = bench::Bench(args, default_world()).run();
        if (world.rank() == 0) rc = r;
      });
      return rc;
    }
    const InitOptions options = init_options_from_env();
    return bench::Bench(args, init(options), &options).run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "meshrt-bench: %s\n", e.what());
    return 3;
  }
}
