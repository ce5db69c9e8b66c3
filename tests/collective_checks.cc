#include "tests/collective_checks.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <numeric>

namespace meshrt::testing {
namespace {

// A buffer of any dtype, read and written as doubles.
class TypedBuffer {
 public:
  TypedBuffer(DType dtype, size_t count)
      : dtype_(dtype), count_(count), bytes_(count * dtype_size_bytes(dtype) + 1) {}

  BufferView view() { return {bytes_.data(), count_, dtype_, Device::cpu(), {}}; }
  size_t size() const { return count_; }

  void set(size_t i, double v) {
    char* p = bytes_.data() + i * dtype_size_bytes(dtype_);
    switch (dtype_) {
      case DType::kF32:
        store(p, static_cast<float>(v));
        break;
      case DType::kF64:
        store(p, v);
        break;
      case DType::kF16:
        store(p, to_half(static_cast<float>(v)));
        break;
      case DType::kBF16:
        store(p, to_bfloat16(static_cast<float>(v)));
        break;
      // Integer results wrap modulo 2^bits, as the reductions do.
      case DType::kI8:
        store(p, static_cast<int8_t>(static_cast<int64_t>(v)));
        break;
      case DType::kU8:
        store(p, static_cast<uint8_t>(static_cast<int64_t>(v)));
        break;
      case DType::kI32:
        store(p, static_cast<int32_t>(static_cast<int64_t>(v)));
        break;
      case DType::kI64:
        store(p, static_cast<int64_t>(v));
        break;
      case DType::kF8E4M3:
        store(p, to_fp8_e4m3(static_cast<float>(v)));
        break;
      case DType::kF8E5M2:
        store(p, to_fp8_e5m2(static_cast<float>(v)));
        break;
    }
  }

  double get(size_t i) const {
    const char* p = bytes_.data() + i * dtype_size_bytes(dtype_);
    switch (dtype_) {
      case DType::kF32:
        return load<float>(p);
      case DType::kF64:
        return load<double>(p);
      case DType::kF16:
        return to_float(load<Half>(p));
      case DType::kBF16:
        return to_float(load<BFloat16>(p));
      case DType::kI8:
        return load<int8_t>(p);
      case DType::kU8:
        return load<uint8_t>(p);
      case DType::kI32:
        return load<int32_t>(p);
      case DType::kI64:
        return static_cast<double>(load<int64_t>(p));
      case DType::kF8E4M3:
        return to_float(load<Fp8E4M3>(p));
      case DType::kF8E5M2:
        return to_float(load<Fp8E5M2>(p));
    }
    return 0;
  }

 private:
  template <typename T>
  static void store(char* p, T v) {
    std::memcpy(p, &v, sizeof(T));
  }
  template <typename T>
  static T load(const char* p) {
    T v;
    std::memcpy(&v, p, sizeof(T));
    return v;
  }

  DType dtype_;
  size_t count_;
  std::vector<char> bytes_;  // One spare byte so that zero-length views still have an address.
};

// The value rank r contributes at element i, chosen per reduce op so that every result is exact
// in every dtype (products stay powers of two, sums stay below 128).
double value(ReduceOp op, int r, size_t i) {
  switch (op) {
    case ReduceOp::kProd:
      return (r + i) % 3 == 0 ? 2.0 : 1.0;
    case ReduceOp::kMin:
    case ReduceOp::kMax:
      return static_cast<double>((r * 5 + i * 11) % 13);
    default:
      return static_cast<double>((r * 7 + i * 3) % 5 + 1);
  }
}

// What the reduction over ranks 0..n-1 must give at element i, in dtype `dtype`.
double expected(DType dtype, ReduceOp op, int n, size_t i) {
  double acc = value(op, 0, i);
  for (int r = 1; r < n; ++r) {
    const double v = value(op, r, i);
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg:
      case ReduceOp::kCustom:  // The checks' Reducers sum (custom_sum()).
        acc += v;
        break;
      case ReduceOp::kProd:
        acc *= v;
        break;
      case ReduceOp::kMin:
        acc = std::min(acc, v);
        break;
      case ReduceOp::kMax:
        acc = std::max(acc, v);
        break;
    }
  }
  if (op == ReduceOp::kAvg) acc /= n;
  // Round the way the dtype stores it.
  TypedBuffer b(dtype, 1);
  b.set(0, acc);
  return b.get(0);
}

bool close(DType dtype, double got, double want) {
  if (!is_floating(dtype)) return got == want;
  const double tol = dtype == DType::kF16 || dtype == DType::kBF16 ? 1e-2 : 1e-6;
  return std::fabs(got - want) <= tol * std::max(1.0, std::fabs(want));
}

class Checker {
 public:
  explicit Checker(Communicator& comm) : comm_(comm), n_(comm.size()), r_(comm.rank()) {}

  std::vector<std::string> failures;

  void expect(const std::string& what, DType dtype, size_t i, double got, double want) {
    if (close(dtype, got, want)) return;
    if (failures.size() < 50) {
      failures.push_back(fmt::format("rank {}: {} [{}] element {}: got {}, want {}", r_, what,
                                     dtype_name(dtype), i, got, want));
    }
  }

  // Runs `f` and waits; records a failure instead of throwing.
  template <typename F>
  bool run(const std::string& what, F&& f) {
    try {
      f()->wait();
      return true;
    } catch (const std::exception& e) {
      failures.push_back(fmt::format("rank {}: {} threw: {}", r_, what, e.what()));
      return false;
    }
  }

  void reductions(DType dtype, const ReduceBy& by) {
    const ReduceOp op = by.op;
    const std::string tag = fmt::format("{}", by.reducer ? by.reducer->name() : reduce_op_name(op));
    // all_reduce on an uneven count so every chunking path gets a remainder.
    const size_t count = 2 * n_ + 1;
    TypedBuffer buf(dtype, count);
    for (size_t i = 0; i < count; ++i) buf.set(i, value(op, r_, i));
    if (run("all_reduce " + tag, [&] { return comm_.all_reduce(buf.view(), by); })) {
      for (size_t i = 0; i < count; ++i)
        expect("all_reduce " + tag, dtype, i, buf.get(i), expected(dtype, op, n_, i));
    }
    // reduce to the last rank: others keep their input.
    const int root = n_ - 1;
    for (size_t i = 0; i < count; ++i) buf.set(i, value(op, r_, i));
    if (run("reduce " + tag, [&] { return comm_.reduce(buf.view(), root, by); })) {
      for (size_t i = 0; i < count; ++i) {
        const double want = r_ == root ? expected(dtype, op, n_, i) : value(op, r_, i);
        expect("reduce " + tag, dtype, i, buf.get(i), want);
      }
    }
    // reduce_scatter: block b of the reduced array lands on rank b.
    const size_t block = 3;
    TypedBuffer in(dtype, block * n_), out(dtype, block);
    for (size_t i = 0; i < in.size(); ++i) in.set(i, value(op, r_, i));
    if (run("reduce_scatter " + tag,
            [&] { return comm_.reduce_scatter(in.view(), out.view(), by); })) {
      for (size_t i = 0; i < block; ++i) {
        expect("reduce_scatter " + tag, dtype, i, out.get(i),
               expected(dtype, op, n_, r_ * block + i));
      }
    }
    // In place: the output is this rank's block of the input.
    for (size_t i = 0; i < in.size(); ++i) in.set(i, value(op, r_, i));
    if (run("reduce_scatter in-place " + tag, [&] {
          return comm_.reduce_scatter(in.view(), in.view().slice(r_ * block, block), by);
        })) {
      for (size_t i = 0; i < block; ++i) {
        expect("reduce_scatter in-place " + tag, dtype, i, in.get(r_ * block + i),
               expected(dtype, op, n_, r_ * block + i));
      }
    }
  }

  // Opaque 12-byte records (no dtype has that size) folded by a Reducer: small ops and one that
  // spans many slot exchanges and ring blocks, whose cuts must fall between records.
  void record_reductions() {
    for (const size_t count : {2 * static_cast<size_t>(n_) + 1, size_t{100003}}) {
      std::vector<Bin> bins(count);
      for (size_t i = 0; i < count; ++i) bins[i] = bin(r_, i);
      const std::string what = fmt::format("all_reduce of {} bins", count);
      if (run(what, [&] { return comm_.all_reduce(bin_view(bins), bin_sum()); })) {
        for (size_t i = 0; i < count; ++i) expect_bin(what, i, bins[i], i);
      }
    }
    const int root = n_ - 1;
    std::vector<Bin> bins(7);
    for (size_t i = 0; i < bins.size(); ++i) bins[i] = bin(r_, i);
    if (run("reduce of bins", [&] { return comm_.reduce(bin_view(bins), root, bin_sum()); })) {
      for (size_t i = 0; i < bins.size(); ++i) {
        if (r_ == root) {
          expect_bin("reduce of bins", i, bins[i], i);
        } else if (const Bin kept = bin(r_, i); std::memcmp(&bins[i], &kept, sizeof(Bin)) != 0) {
          failures.push_back(fmt::format("rank {}: reduce of bins changed a non-root's", r_));
        }
      }
    }
    const size_t block = 5;
    std::vector<Bin> in(block * n_), out(block);
    for (size_t i = 0; i < in.size(); ++i) in[i] = bin(r_, i);
    if (run("reduce_scatter of bins",
            [&] { return comm_.reduce_scatter(bin_view(in), bin_view(out), bin_sum()); })) {
      for (size_t i = 0; i < block; ++i)
        expect_bin("reduce_scatter of bins", i, out[i], r_ * block + i);
    }
  }

  // Blocks of their own size per rank (one empty), each after the one before, or laid out in
  // reverse rank order with a gap before each; `scale` grows them past one slot exchange.
  std::pair<std::vector<size_t>, std::vector<size_t>> v_blocks(bool reversed, size_t scale) const {
    std::vector<size_t> counts(n_), offsets(n_);
    for (int q = 0; q < n_; ++q) counts[q] = q == 1 ? 0 : scale * (q % 3 + 1);
    size_t next = 0;
    for (int i = 0; i < n_; ++i) {
      const int q = reversed ? n_ - 1 - i : i;
      next += reversed ? 2 : 0;
      offsets[q] = next;
      next += counts[q];
    }
    return {counts, offsets};
  }

  // all_gather_v and reduce_scatter_v, out of place and in place, on blocks laid out packed (the
  // default offsets) and reversed with gaps; f32 also on blocks that span many slot exchanges.
  void v_collectives(DType dtype) {
    auto val = [](int r, size_t i) { return static_cast<double>((r * 3 + i) % 5); };
    for (const bool reversed : {false, true}) {
      std::vector<size_t> scales{1};
      if (dtype == DType::kF32) scales.push_back(30001);
      for (const size_t scale : scales) {
        const auto [counts, offsets] = v_blocks(reversed, scale);
        size_t whole = 0;
        for (int q = 0; q < n_; ++q) whole = std::max(whole, offsets[q] + counts[q]);
        const std::vector<size_t> given = reversed ? offsets : std::vector<size_t>{};
        const size_t mine = counts[r_], at = offsets[r_];
        const std::string tag =
            fmt::format(" ({}, blocks of {})", reversed ? "reversed" : "packed", scale);
        for (const bool in_place : {false, true}) {
          const std::string what =
              fmt::format("all_gather_v{}{}", in_place ? " in-place" : "", tag);
          TypedBuffer in(dtype, mine), out(dtype, whole);
          for (size_t i = 0; i < mine; ++i)
            (in_place ? out : in).set(in_place ? at + i : i, val(r_, i));
          if (run(what, [&] {
                return comm_.all_gather_v(in_place ? out.view().slice(at, mine) : in.view(),
                                          out.view(), counts, given);
              })) {
            for (int q = 0; q < n_; ++q) {
              for (size_t i = 0; i < counts[q]; ++i) {
                expect(what, dtype, i, out.get(offsets[q] + i), val(q, i));
              }
            }
          }
        }
        for (const bool in_place : {false, true}) {
          const std::string what =
              fmt::format("reduce_scatter_v{}{}", in_place ? " in-place" : "", tag);
          TypedBuffer in(dtype, whole), out(dtype, mine);
          for (size_t i = 0; i < whole; ++i) in.set(i, val(r_, i));
          if (run(what, [&] {
                return comm_.reduce_scatter_v(
                    in.view(), in_place ? in.view().slice(at, mine) : out.view(), counts, given);
              })) {
            for (size_t i = 0; i < mine; ++i) {
              double want = 0;
              for (int q = 0; q < n_; ++q) want += val(q, at + i);
              expect(what, dtype, i, in_place ? in.get(at + i) : out.get(i), want);
            }
          }
        }
      }
    }
  }

  void data_movement(DType dtype) {
    auto val = [](int r, size_t i) { return static_cast<double>((r * 13 + i) % 100); };
    // broadcast from the middle rank.
    const int root = n_ / 2;
    TypedBuffer b(dtype, 5);
    for (size_t i = 0; i < 5; ++i) b.set(i, val(r_, i));
    if (run("broadcast", [&] { return comm_.broadcast(b.view(), root); })) {
      for (size_t i = 0; i < 5; ++i) expect("broadcast", dtype, i, b.get(i), val(root, i));
    }
    // all_gather, out of place and in place (input = own block of the output).
    const size_t block = 3;
    TypedBuffer in(dtype, block), out(dtype, block * n_);
    for (size_t i = 0; i < block; ++i) in.set(i, val(r_, i));
    if (run("all_gather", [&] { return comm_.all_gather(in.view(), out.view()); })) {
      for (size_t i = 0; i < out.size(); ++i)
        expect("all_gather", dtype, i, out.get(i), val(i / block, i % block));
    }
    TypedBuffer inplace(dtype, block * n_);
    for (size_t i = 0; i < block; ++i) inplace.set(r_ * block + i, val(r_, i));
    if (run("all_gather in-place", [&] {
          return comm_.all_gather(inplace.view().slice(r_ * block, block), inplace.view());
        })) {
      for (size_t i = 0; i < inplace.size(); ++i)
        expect("all_gather in-place", dtype, i, inplace.get(i), val(i / block, i % block));
    }
    // all_to_all with equal blocks: block j of rank r carries (r, j).
    TypedBuffer a_in(dtype, 2 * n_), a_out(dtype, 2 * n_);
    for (size_t i = 0; i < a_in.size(); ++i) a_in.set(i, 10 * r_ + i / 2 + (i % 2) * 0.0);
    if (run("all_to_all", [&] { return comm_.all_to_all(a_in.view(), a_out.view()); })) {
      for (size_t i = 0; i < a_out.size(); ++i)
        expect("all_to_all", dtype, i, a_out.get(i), 10.0 * (i / 2) + r_);
    }
    // uneven all_to_all: rank f sends (2f + t) % 4 elements to rank t, each (8f + t) % 100;
    // asymmetric in (f, t), so a backend that swaps directions or splits fails.
    auto amount = [](size_t from, size_t to) { return (2 * from + to) % 4; };
    auto tagged = [](size_t from, size_t to) { return static_cast<double>((8 * from + to) % 100); };
    std::vector<size_t> in_splits(n_), out_splits(n_);
    for (int j = 0; j < n_; ++j) {
      in_splits[j] = amount(r_, j);
      out_splits[j] = amount(j, r_);
    }
    const size_t in_total = std::accumulate(in_splits.begin(), in_splits.end(), size_t{0});
    const size_t out_total = std::accumulate(out_splits.begin(), out_splits.end(), size_t{0});
    TypedBuffer v_in(dtype, in_total), v_out(dtype, out_total);
    for (size_t j = 0, k = 0; j < static_cast<size_t>(n_); ++j)
      for (size_t e = 0; e < in_splits[j]; ++e) v_in.set(k++, tagged(r_, j));
    if (run("all_to_all uneven",
            [&] { return comm_.all_to_all(v_in.view(), in_splits, v_out.view(), out_splits); })) {
      for (size_t j = 0, k = 0; j < static_cast<size_t>(n_); ++j)
        for (size_t e = 0; e < out_splits[j]; ++e, ++k)
          expect("all_to_all uneven", dtype, k, v_out.get(k), tagged(j, r_));
    }
    // A larger uneven all_to_all, (7f + 3t) % 5 x 41 elements from rank f to rank t (0 to 164),
    // element e of a block (8f + t + 3e) % 100: through small slots it takes many rounds, each
    // piece ending mid-block.
    auto big = [](size_t from, size_t to) { return (7 * from + 3 * to) % 5 * 41; };
    auto nth = [](size_t from, size_t to, size_t e) {
      return static_cast<double>((8 * from + to + 3 * e) % 100);
    };
    std::vector<size_t> big_in(n_), big_out(n_);
    for (int j = 0; j < n_; ++j) {
      big_in[j] = big(r_, j);
      big_out[j] = big(j, r_);
    }
    TypedBuffer b_in(dtype, std::accumulate(big_in.begin(), big_in.end(), size_t{0}));
    TypedBuffer b_out(dtype, std::accumulate(big_out.begin(), big_out.end(), size_t{0}));
    for (size_t j = 0, k = 0; j < static_cast<size_t>(n_); ++j)
      for (size_t e = 0; e < big_in[j]; ++e) b_in.set(k++, nth(r_, j, e));
    if (run("all_to_all uneven, many rounds",
            [&] { return comm_.all_to_all(b_in.view(), big_in, b_out.view(), big_out); })) {
      for (size_t j = 0, k = 0; j < static_cast<size_t>(n_); ++j)
        for (size_t e = 0; e < big_out[j]; ++e, ++k)
          expect("all_to_all uneven, many rounds", dtype, k, b_out.get(k), nth(j, r_, e));
    }
    // gather to rank 0 and scatter from the last rank.
    // Non-root outputs of gather and the root's input of scatter stay untouched.
    constexpr double kSentinel = 77;
    TypedBuffer g_out(dtype, block * n_);
    for (size_t i = 0; i < g_out.size(); ++i) g_out.set(i, kSentinel);
    if (run("gather", [&] { return comm_.gather(in.view(), g_out.view(), 0); })) {
      for (size_t i = 0; i < g_out.size(); ++i)
        expect("gather", dtype, i, g_out.get(i), r_ == 0 ? val(i / block, i % block) : kSentinel);
    }
    const int s_root = n_ - 1;
    TypedBuffer s_in(dtype, block * n_), s_out(dtype, block);
    for (size_t i = 0; i < s_in.size(); ++i) s_in.set(i, val(i / block, i % block));
    if (run("scatter", [&] { return comm_.scatter(s_in.view(), s_out.view(), s_root); })) {
      for (size_t i = 0; i < block; ++i) expect("scatter", dtype, i, s_out.get(i), val(r_, i));
      for (size_t i = 0; i < s_in.size(); ++i)
        expect("scatter input", dtype, i, s_in.get(i), val(i / block, i % block));
    }
    // Every collective with zero elements completes and touches nothing.
    TypedBuffer empty(dtype, 0);
    for (const auto& [what, call] :
         std::vector<std::pair<std::string, std::function<WorkHandle()>>>{
             {"all_reduce", [&] { return comm_.all_reduce(empty.view()); }},
             {"broadcast", [&] { return comm_.broadcast(empty.view(), 0); }},
             {"reduce", [&] { return comm_.reduce(empty.view(), 0); }},
             {"all_gather", [&] { return comm_.all_gather(empty.view(), empty.view()); }},
             {"reduce_scatter", [&] { return comm_.reduce_scatter(empty.view(), empty.view()); }},
             {"all_to_all", [&] { return comm_.all_to_all(empty.view(), empty.view()); }},
             {"gather", [&] { return comm_.gather(empty.view(), empty.view(), 0); }},
             {"scatter", [&] { return comm_.scatter(empty.view(), empty.view(), 0); }}}) {
      run(what + " of 0 elements", call);
    }
  }

  // A histogram bin: 12 bytes, so no dtype folds it.
  struct Bin {
    float grad;
    float hess;
    int32_t count;
  };
  static_assert(sizeof(Bin) == 12);

  static Bin bin(int r, size_t i) {
    return {static_cast<float>(r + i % 1000), static_cast<float>((r * 3 + i) % 7) / 2, 1};
  }
  static BufferView bin_view(std::vector<Bin>& v) {
    return records(v.data(), v.size(), sizeof(Bin));
  }
  static std::shared_ptr<const Reducer> bin_sum() {
    static const auto reducer =
        Reducer::create("bin_sum", sizeof(Bin), [](const void* in, void* inout, size_t count) {
          const Bin* a = static_cast<const Bin*>(in);
          Bin* b = static_cast<Bin*>(inout);
          for (size_t i = 0; i < count; ++i) {
            b[i].grad += a[i].grad;
            b[i].hess += a[i].hess;
            b[i].count += a[i].count;
          }
        });
    return reducer;
  }
  void expect_bin(const std::string& what, size_t k, const Bin& got, size_t i) {
    Bin want{0, 0, 0};
    for (int q = 0; q < n_; ++q) {
      const Bin b = bin(q, i);
      want.grad += b.grad;
      want.hess += b.hess;
      want.count += b.count;
    }
    if (got.grad == want.grad && got.hess == want.hess && got.count == want.count) return;
    if (failures.size() < 50) {
      failures.push_back(fmt::format("rank {}: {} record {}: got ({}, {}, {}), want ({}, {}, {})",
                                     r_, what, k, got.grad, got.hess, got.count, want.grad,
                                     want.hess, want.count));
    }
  }

  Communicator& comm_;
  const int n_;
  const int r_;
};

// A Reducer that sums `dtype` as the built-in sum does, so the same expectations hold.
std::shared_ptr<const Reducer> custom_sum(DType dtype) {
  return Reducer::create(
      fmt::format("custom_sum_{}", dtype_name(dtype)), dtype_size_bytes(dtype),
      [dtype](const void* in, void* inout, size_t count) {
        reduce_elements(dtype, ReduceOp::kSum, inout, in, inout, count);
      },
      dtype);
}

}  // namespace

std::vector<std::string> check_all_collectives(Communicator& comm) {
  Checker c(comm);
  for (DType dtype : kAllDTypes) {
    // fp8 holds too few integers exactly for these sums; unit tests cover its reductions.
    if (is_fp8(dtype)) continue;
    for (ReduceOp op : kAllReduceOps) {
      if (op == ReduceOp::kAvg && !is_floating(dtype)) continue;
      c.reductions(dtype, op);
    }
    c.reductions(dtype, custom_sum(dtype));
    c.data_movement(dtype);
    c.v_collectives(dtype);
  }
  c.record_reductions();
  c.run("barrier", [&] { return comm.barrier(); });
  return c.failures;
}

// What shared-memory mailboxes make hard, on any backend: a message larger than a ring (1 MiB
// and 20 bytes: pieces, the wrap, a tail under 16 bytes), both ways at once; messages of one tag
// taken in posting order; a receive that asks for a later message than the one that came first
// (which waits aside meanwhile), small and large.
void check_p2p_matching(Checker& c, Communicator& comm, int partner) {
  const int r = comm.rank();
  auto value = [](int rank, size_t i) { return static_cast<int32_t>(rank * 1000 + i % 977); };
  const size_t big = (size_t{1} << 18) + 5;
  std::vector<int32_t> big_out(big), big_in(big, -1);
  for (size_t i = 0; i < big; ++i) big_out[i] = value(r, i);
  std::vector<int32_t> first{r, r + 1, r + 2}, second{-r, -r - 1, -r - 2}, got1(3, -1), got2(3, -1);
  if (r % 2 == 0) {
    const std::vector<P2POp> ops{{P2POp::Dir::kSend, view(first), partner, 11},
                                 {P2POp::Dir::kSend, view(big_out), partner, 12},
                                 {P2POp::Dir::kSend, view(second), partner, 11}};
    c.run("batch of three sends", [&] { return comm.batch_isend_irecv(ops); });
  } else {
    c.run("recv of the second message", [&] { return comm.recv(view(big_in), partner, 12); });
    const std::vector<P2POp> ops{{P2POp::Dir::kRecv, view(got1), partner, 11},
                                 {P2POp::Dir::kRecv, view(got2), partner, 11}};
    if (c.run("recvs of one tag", [&] { return comm.batch_isend_irecv(ops); })) {
      for (size_t i = 0; i < 3; ++i) {
        c.expect("first of tag 11", DType::kI32, i, got1[i], partner + static_cast<double>(i));
        c.expect("second of tag 11", DType::kI32, i, got2[i], -partner - static_cast<double>(i));
      }
      for (size_t i = 0; i < big; i += 4099) {
        c.expect("later tag first", DType::kI32, i, big_in[i], value(partner, i));
      }
      c.expect("later tag first", DType::kI32, big - 1, big_in[big - 1], value(partner, big - 1));
    }
  }
  // A large message that arrives before its receive is posted (Gloo passes it by reference: it
  // is copied aside, out of the sender's buffer, so that the later one can pass).
  std::fill(big_in.begin(), big_in.end(), -1);
  std::vector<int32_t> after{r + 7}, after_in{-1};
  if (r % 2 == 0) {
    const std::vector<P2POp> ops{{P2POp::Dir::kSend, view(big_out), partner, 14},
                                 {P2POp::Dir::kSend, view(after), partner, 15}};
    c.run("large then small", [&] { return comm.batch_isend_irecv(ops); });
  } else {
    c.run("recv of the small one", [&] { return comm.recv(view(after_in), partner, 15); });
    c.run("recv of the large one kept", [&] { return comm.recv(view(big_in), partner, 14); });
    c.expect("small after large", DType::kI32, 0, after_in[0], partner + 7.0);
    for (size_t i = 0; i < big; i += 4099) {
      c.expect("large kept aside", DType::kI32, i, big_in[i], value(partner, i));
    }
    c.expect("large kept aside", DType::kI32, big - 1, big_in[big - 1], value(partner, big - 1));
  }
  std::fill(big_in.begin(), big_in.end(), -1);
  const std::vector<P2POp> both{{P2POp::Dir::kSend, view(big_out), partner, 13},
                                {P2POp::Dir::kRecv, view(big_in), partner, 13}};
  if (c.run("large both ways", [&] { return comm.batch_isend_irecv(both); })) {
    for (size_t i = 0; i < big; ++i) {
      if (big_in[i] != value(partner, i)) {
        c.expect("large both ways", DType::kI32, i, big_in[i], value(partner, i));
        break;
      }
    }
  }
}

std::vector<std::string> check_p2p_and_split(Communicator& comm) {
  Checker c(comm);
  const int n = comm.size();
  const int r = comm.rank();
  if (n >= 2) {
    // Pairs (0,1), (2,3), ...: the even rank sends first, the odd one receives first.
    const int partner = r % 2 == 0 ? r + 1 : r - 1;
    if (partner < n) {
      std::vector<int64_t> out{r * 100 + 1, r * 100 + 2}, in(2, -1);
      for (int round = 0; round < 2; ++round) {
        if (r % 2 == 0) {
          c.run("send", [&] { return comm.send(view(out), partner, round); });
          c.run("recv", [&] { return comm.recv(view(in), partner, round); });
        } else {
          c.run("recv", [&] { return comm.recv(view(in), partner, round); });
          c.run("send", [&] { return comm.send(view(out), partner, round); });
        }
        for (size_t i = 0; i < 2; ++i)
          c.expect("send/recv", DType::kI64, i, in[i], partner * 100 + 1.0 + i);
      }
    }
    // A ring in one batch: every rank sends right and receives from the left at once.
    std::vector<float> to_right(4, static_cast<float>(r)), from_left(4, -1);
    const int right = (r + 1) % n, left = (r + n - 1) % n;
    std::vector<P2POp> ops{{P2POp::Dir::kRecv, view(from_left), left, 7},
                           {P2POp::Dir::kSend, view(to_right), right, 7}};
    if (c.run("batch_isend_irecv", [&] { return comm.batch_isend_irecv(ops); })) {
      for (size_t i = 0; i < 4; ++i) c.expect("batch ring", DType::kF32, i, from_left[i], left);
    }
    if (partner < n) check_p2p_matching(c, comm, partner);
  }
  // Split by parity, ordered by descending rank: new rank 0 is the highest old rank.
  auto child = comm.split(r % 2, -r);
  std::vector<int> members;
  for (int q = n - 1; q >= 0; --q) {
    if (q % 2 == r % 2) members.push_back(q);
  }
  const int want_rank =
      static_cast<int>(std::find(members.begin(), members.end(), r) - members.begin());
  if (!child || child->size() != static_cast<int>(members.size()) || child->rank() != want_rank) {
    c.failures.push_back(fmt::format("rank {}: split gave rank {} of {}, want {} of {}", r,
                                     child ? child->rank() : -1, child ? child->size() : -1,
                                     want_rank, members.size()));
    return c.failures;
  }
  for (size_t i = 0; i < members.size(); ++i) {
    if (child->global_ranks()[i] != comm.global_ranks()[members[i]]) {
      c.failures.push_back(fmt::format("rank {}: split global rank {} wrong", r, i));
    }
  }
  std::vector<int32_t> x{r};
  if (c.run("split all_reduce", [&] { return child->all_reduce(view(x)); })) {
    int sum = 0;
    for (int q : members) sum += q;
    c.expect("split all_reduce", DType::kI32, 0, x[0], sum);
  }
  // A rank passing kNoColor gets no communicator.
  auto none = comm.split(r == 0 ? kNoColor : 0, 0);
  if ((r == 0) != (none == nullptr)) {
    c.failures.push_back(fmt::format("rank {}: kNoColor split gave the wrong membership", r));
  }
  return c.failures;
}

int report_failures(const std::vector<std::string>& failures) {
  for (const auto& f : failures) std::fprintf(stderr, "FAIL %s\n", f.c_str());
  return failures.empty() ? 0 : 1;
}

}  // namespace meshrt::testing
