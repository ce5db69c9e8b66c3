// Pure pieces: dtype conversions, reduction kernels, error messages, op validation, the trace
// hook, and reading the launcher environment.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <mutex>
#include <regex>
#include <set>
#include <thread>

#include "mesh/meshrt.h"
#include "meshrt_config.h"
#include "runtime/backends/gloo/gloo_signature.h"
#include "runtime/fatal_signal.h"
#include "runtime/monitor_process.h"
#include "runtime/validation.h"
#include "trace/bandwidth.h"
#include "trace/env.h"
#include "trace/scope.h"
#include "trace/tracer.h"
#include "trace/utf8.h"

namespace meshrt {
namespace {

TEST(DType, SizesAndNames) {
  const std::pair<DType, std::pair<size_t, const char*>> table[] = {
      {DType::kF32, {4, "f32"}},      {DType::kF64, {8, "f64"}}, {DType::kF16, {2, "f16"}},
      {DType::kBF16, {2, "bf16"}},    {DType::kI8, {1, "i8"}},   {DType::kU8, {1, "u8"}},
      {DType::kI32, {4, "i32"}},      {DType::kI64, {8, "i64"}}, {DType::kF8E4M3, {1, "f8e4m3"}},
      {DType::kF8E5M2, {1, "f8e5m2"}}};
  for (const auto& [d, want] : table) {
    EXPECT_EQ(dtype_size_bytes(d), want.first);
    EXPECT_EQ(dtype_name(d), want.second);
  }
}

TEST(DType, Fp8ConversionTables) {
  // (float, bits) pairs from the OCP fp8 spec (E4M3 "fn": bias 7, no inf; E5M2: bias 15).
  const std::pair<float, uint8_t> e4m3[] = {{0.0f, 0x00},    {1.0f, 0x38},   {-2.0f, 0xc0},
                                            {448.0f, 0x7e},  {0.125f, 0x20}, {1.0f / 512, 0x01},
                                            {1.0625f, 0x38}, {1.1875f, 0x3a}};
  for (const auto& [f, bits] : e4m3) {
    EXPECT_EQ(to_fp8_e4m3(f).bits, bits) << f;
  }
  EXPECT_EQ(to_float(Fp8E4M3{0x7e}), 448.0f);
  EXPECT_EQ(to_float(Fp8E4M3{0x01}), 1.0f / 512);
  EXPECT_TRUE(std::isnan(to_float(Fp8E4M3{0x7f})));
  EXPECT_TRUE(std::isnan(to_float(to_fp8_e4m3(1000.0f))));  // No infinity: NaN.
  const std::pair<float, uint8_t> e5m2[] = {{0.0f, 0x00},     {1.0f, 0x3c},        {-2.0f, 0xc0},
                                            {57344.0f, 0x7b}, {1e6f, 0x7c},        {1.125f, 0x3c},
                                            {1.375f, 0x3e},   {1.0f / 65536, 0x01}};
  for (const auto& [f, bits] : e5m2) {
    EXPECT_EQ(to_fp8_e5m2(f).bits, bits) << f;
  }
  EXPECT_TRUE(std::isinf(to_float(Fp8E5M2{0x7c})));
  // Every finite code round-trips.
  for (int b = 0; b < 256; ++b) {
    const float x = to_float(Fp8E4M3{static_cast<uint8_t>(b)});
    if (!std::isnan(x)) {
      EXPECT_EQ(to_fp8_e4m3(x).bits, b) << b;
    }
    const float y = to_float(Fp8E5M2{static_cast<uint8_t>(b)});
    if (!std::isnan(y)) {
      EXPECT_EQ(to_fp8_e5m2(y).bits, b) << b;
    }
  }
  // Reductions go through float and round once.
  Fp8E4M3 a{0x38}, c{0x38}, out{};
  reduce_elements(DType::kF8E4M3, ReduceOp::kSum, &out, &a, &c, 1);
  EXPECT_EQ(to_float(out), 2.0f);
  divide_elements(DType::kF8E4M3, &out, 1, 2);
  EXPECT_EQ(to_float(out), 1.0f);
}

TEST(DType, HalfConversionTable) {
  // (float, half bits) pairs from IEEE 754 binary16.
  const std::pair<float, uint16_t> table[] = {
      {0.0f, 0x0000},           {-0.0f, 0x8000},        {1.0f, 0x3c00},         {-2.0f, 0xc000},
      {65504.0f, 0x7bff},       {1e6f, 0x7c00},         {5.960464e-8f, 0x0001}, {0.333333f, 0x3555},
      {6.1035156e-05f, 0x0400}, {1.0009765625f, 0x3c01}};
  for (const auto& [f, bits] : table) {
    EXPECT_EQ(to_half(f).bits, bits) << f;
  }
  EXPECT_EQ(to_float(Half{0x3c00}), 1.0f);
  EXPECT_EQ(to_float(Half{0x0001}), std::ldexp(1.0f, -24));
  EXPECT_TRUE(std::isinf(to_float(Half{0x7c00})));
  EXPECT_TRUE(std::isnan(to_float(to_half(std::numeric_limits<float>::quiet_NaN()))));
  // Ties round to even: 1 + 2^-11 is halfway between 1 and 1 + 2^-10.
  EXPECT_EQ(to_half(1.0f + std::ldexp(1.0f, -11)).bits, 0x3c00);
}

TEST(DType, BFloat16ConversionTable) {
  const std::pair<float, uint16_t> table[] = {
      {1.0f, 0x3f80}, {-1.0f, 0xbf80}, {3.140625f, 0x4049}, {0.0f, 0x0000}, {256.0f, 0x4380}};
  for (const auto& [f, bits] : table) EXPECT_EQ(to_bfloat16(f).bits, bits) << f;
  EXPECT_EQ(to_float(BFloat16{0x4049}), 3.140625f);
  EXPECT_TRUE(std::isnan(to_float(to_bfloat16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(ReduceKernels, Table) {
  std::vector<int32_t> a{1, -5, 7}, b{4, 3, -2}, out(3);
  const std::pair<ReduceOp, std::vector<int32_t>> table[] = {{ReduceOp::kSum, {5, -2, 5}},
                                                             {ReduceOp::kProd, {4, -15, -14}},
                                                             {ReduceOp::kMin, {1, -5, -2}},
                                                             {ReduceOp::kMax, {4, 3, 7}}};
  for (const auto& [op, want] : table) {
    reduce_elements(DType::kI32, op, out.data(), a.data(), b.data(), 3);
    EXPECT_EQ(out, want) << reduce_op_name(op);
  }
  // Integer sums wrap like NCCL's.
  std::vector<int8_t> x{120}, y{10}, z(1);
  reduce_elements(DType::kI8, ReduceOp::kSum, z.data(), x.data(), y.data(), 1);
  EXPECT_EQ(z[0], static_cast<int8_t>(-126));
  // 16-bit floats reduce through float.
  std::vector<BFloat16> h{to_bfloat16(1.5f)}, k{to_bfloat16(2.25f)}, r(1);
  reduce_elements(DType::kBF16, ReduceOp::kSum, r.data(), h.data(), k.data(), 1);
  EXPECT_EQ(to_float(r[0]), 3.75f);
  std::vector<double> d{9.0};
  divide_elements(DType::kF64, d.data(), 1, 4);
  EXPECT_EQ(d[0], 2.25);
}

TEST(ErrorType, MessageNamesEveryKnownPart) {
  Error e(ErrorCode::kTimeout, {3, "mesh0/tp", "all_reduce", 42}, "peers [1] missing");
  EXPECT_STREQ(e.what(),
               "meshrt [timeout] rank 3, comm 'mesh0/tp', all_reduce #42: peers [1] missing");
  EXPECT_EQ(e.code(), ErrorCode::kTimeout);
  EXPECT_EQ(e.detail(), "peers [1] missing");
  Error bare(ErrorCode::kStore, {}, "x");
  EXPECT_STREQ(bare.what(), "meshrt [store]: x");
  // The op count follows the number only where the two differ (p2p ops on the communicator).
  Error mixed(ErrorCode::kTimeout, {0, "world", "all_reduce", 2, 3}, "late");
  EXPECT_STREQ(mixed.what(),
               "meshrt [timeout] rank 0, comm 'world', all_reduce #2 (op_id 3): late");
  Error same(ErrorCode::kTimeout, {0, "world", "all_reduce", 2, 2}, "late");
  EXPECT_STREQ(same.what(), "meshrt [timeout] rank 0, comm 'world', all_reduce #2: late");
  // A p2p op by its number on its channel with the peer, as both ends and meshtrace count it.
  Error recv(ErrorCode::kTimeout, {2, "world", "recv", 5, 9, 3, 2}, "late");
  EXPECT_STREQ(recv.what(),
               "meshrt [timeout] rank 2, comm 'world', recv #2 from rank 3 (p2p_seq_id 5): late");
}

TEST(OpText, APeerToPeerOpIsNamedByItsChannelAndPeer) {
  trace::OpRecord r;
  auto info = std::make_shared<trace::CommInfo>();
  info->global_ranks = {4, 6, 7};
  r.comm = info;
  r.kind = OpKind::kSend;
  r.op = "send";
  r.is_p2p = true;
  r.p2p_seq = 9;
  r.p2p_channel_seq = 2;
  r.root_or_peer = 2;
  EXPECT_EQ(trace::op_text(r), "send #2 to rank 7");
  r.is_p2p = false;
  r.kind = OpKind::kAllReduce;
  r.op = "all_reduce";
  r.collective_seq = 12;
  EXPECT_EQ(trace::op_text(r), "all_reduce #12");
}

// Every validation rule: on every rank of a 4-rank world the call throws kInvalidArgument with
// exactly `want` ("op: problem", "{r}" standing for the rank) after "rank R, comm 'world', ",
// and nothing is enqueued (the sequence number does not move). Validation is local, so the ranks
// are called one after the other.
class Validation : public ::testing::Test {
 protected:
  void expect_rejected(const std::function<WorkHandle(Communicator&)>& call,
                       const std::string& want) {
    auto world = make_inproc_world(4);
    for (int r = 0; r < 4; ++r) {
      Communicator& c = *world[r];
      std::string problem = want;
      for (size_t at; (at = problem.find("{r}")) != std::string::npos;) {
        problem.replace(at, 3, std::to_string(r));
      }
      try {
        call(c);
        ADD_FAILURE() << "rank " << r << " accepted: " << problem;
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
        EXPECT_EQ(e.what(),
                  fmt::format("meshrt [invalid_argument] rank {}, comm 'world', {}", r, problem));
      }
      EXPECT_EQ(c.op_seq(), 0u);
    }
  }
  std::vector<float> f8 = std::vector<float>(8), f2 = std::vector<float>(2),
                     f3 = std::vector<float>(3);
  std::vector<int32_t> i8 = std::vector<int32_t>(8);
  // A view whose memory is never touched: validation refuses it before anything reads it.
  static BufferView huge(size_t count, DType dtype = DType::kF32) {
    static char byte;
    return {&byte, count, dtype, Device::cpu(), {}};
  }
};

TEST_F(Validation, NullBuffer) {
  expect_rejected(
      [](Communicator& c) {
        BufferView b;
        b.count = 4;
        return c.all_reduce(b);
      },
      "all_reduce: buffer is null but has 4 elements");
}
TEST_F(Validation, ShapeDisagreesWithCount) {
  expect_rejected(
      [&](Communicator& c) {
        return c.all_reduce(view(f8, {3, 2}));
      },
      "all_reduce: buffer has shape of 6 elements but count 8");
}
TEST_F(Validation, NegativeShapeDim) {
  // {-2, -4} multiplies to the count: only the sign check catches it.
  expect_rejected(
      [&](Communicator& c) {
        return c.all_reduce(view(f8, {-2, -4}));
      },
      "all_reduce: buffer has shape dim 0 of size -2: sizes must not be negative");
}
TEST_F(Validation, ShapeElementCountOverflows) {
  // 2^32 x 2^32 wraps to 0 in int64 arithmetic: an empty buffer would match it.
  expect_rejected(
      [&](Communicator& c) {
        std::vector<float> none;
        return c.all_reduce(view(none, {int64_t{1} << 32, int64_t{1} << 32}));
      },
      "all_reduce: buffer has a shape whose element count overflows int64");
}
TEST_F(Validation, UnknownDtype) {
  expect_rejected(
      [&](Communicator& c) {
        BufferView b = view(f8);
        b.dtype = static_cast<DType>(42);
        return c.all_reduce(b);
      },
      "all_reduce: buffer has unknown dtype 42");
  expect_rejected(
      [&](Communicator& c) {
        BufferView out = view(f8);
        out.dtype = static_cast<DType>(200);
        return c.all_gather(view(f2), out);
      },
      "all_gather: output has unknown dtype 200");
}
TEST_F(Validation, UnknownReduceOp) {
  expect_rejected([&](Communicator& c) { return c.all_reduce(view(f8), static_cast<ReduceOp>(9)); },
                  "all_reduce: unknown reduce op 9");
}
TEST_F(Validation, ByteSizeOverflows) {
  // count x 8 bytes wraps size_t: bytes() would be small and the backend would overrun.
  expect_rejected(
      [&](Communicator& c) { return c.broadcast(huge(size_t{1} << 61, DType::kF64), 0); },
      "broadcast: buffer has 2305843009213693952 elements of f64: more than "
      "9223372036854775807 bytes");
  expect_rejected(
      [&](Communicator& c) { return c.send(huge(SIZE_MAX, DType::kU8), (c.rank() + 1) % 4); },
      "send: buffer has 18446744073709551615 elements of u8: more than 9223372036854775807 "
      "bytes");
}
TEST_F(Validation, GroupSizeProductOverflows) {
  // 2^62 elements x 4 ranks wraps to 0, which an empty output would match.
  const size_t n = size_t{1} << 62;
  const DType u8 = DType::kU8;
  expect_rejected([&](Communicator& c) { return c.all_gather(huge(n, u8), huge(0, u8)); },
                  "all_gather: input of 4611686018427387904 elements x group size 4 overflows");
  expect_rejected(
      [&](Communicator& c) { return c.reduce_scatter(huge(0, u8), huge(n, u8)); },
      "reduce_scatter: output of 4611686018427387904 elements x group size 4 overflows");
  // Non-roots of gather and scatter: their record counts input x group size.
  expect_rejected([&](Communicator& c) { return c.gather(huge(n, u8), huge(0, u8), 5 % 4); },
                  "gather: input of 4611686018427387904 elements x group size 4 overflows");
}
TEST_F(Validation, CudaBufferOnCpuBackend) {
  expect_rejected(
      [&](Communicator& c) {
        BufferView b = view(f8);
        b.device = Device::cuda(0);
        return c.broadcast(b, 0);
      },
      "broadcast: buffer is on cuda:0 but backend 'inproc' takes CPU buffers only");
}
TEST_F(Validation, AvgOnIntegers) {
  expect_rejected([&](Communicator& c) { return c.all_reduce(view(i8), ReduceOp::kAvg); },
                  "all_reduce: reduce op avg on integer dtype i32 would truncate: use sum and "
                  "divide");
}
TEST_F(Validation, RootOutOfRange) {
  expect_rejected([&](Communicator& c) { return c.broadcast(view(f8), 4); },
                  "broadcast: root 4 is out of range [0, 4)");
  expect_rejected([&](Communicator& c) { return c.reduce(view(f8), -1); },
                  "reduce: root -1 is out of range [0, 4)");
}
TEST_F(Validation, UndersizedAllGatherOutput) {
  expect_rejected([&](Communicator& c) { return c.all_gather(view(f2), view(f3)); },
                  "all_gather: output has 3 elements but must have 8 (input of 2 elements x group "
                  "size 4)");
}
TEST_F(Validation, ReduceScatterInputNotDivisible) {
  expect_rejected([&](Communicator& c) { return c.reduce_scatter(view(f3), view(f2)); },
                  "reduce_scatter: input has 3 elements but must have 8 (output of 2 elements x "
                  "group size 4)");
}
TEST_F(Validation, DtypeMismatch) {
  expect_rejected([&](Communicator& c) { return c.all_gather(view(f2), view(i8)); },
                  "all_gather: input dtype f32 differs from output dtype i32");
}
TEST_F(Validation, AllToAllNotDivisible) {
  std::vector<float> a(6), b(6);
  expect_rejected([&](Communicator& c) { return c.all_to_all(view(a), view(b)); },
                  "all_to_all: 6 elements are not divisible by group size 4");
}
TEST_F(Validation, AllToAllCountsDiffer) {
  expect_rejected([&](Communicator& c) { return c.all_to_all(view(f8), view(f2)); },
                  "all_to_all: input has 8 elements but output has 2: equal all_to_all needs the "
                  "same count");
}
TEST_F(Validation, AllToAllInPlace) {
  expect_rejected([&](Communicator& c) { return c.all_to_all(view(f8), view(f8)); },
                  "all_to_all: input and output overlap (in place means the input is exactly this "
                  "rank's block of the output, or for reduce_scatter the output is this rank's "
                  "block of the input)");
}
TEST_F(Validation, PartialOverlapOfGatherAndScatterBuffers) {
  std::vector<float> big(16);
  const std::string overlap =
      ": input and output overlap (in place means the input is exactly this rank's block of the "
      "output, or for reduce_scatter the output is this rank's block of the input)";
  // Element 1 overlaps every rank's in-place block of 2 elements (at 0, 2, 4, 6) but is none.
  expect_rejected(
      [&](Communicator& c) { return c.all_gather(view(big).slice(1, 2), view(big).slice(0, 8)); },
      "all_gather" + overlap);
  expect_rejected(
      [&](Communicator& c) {
        return c.reduce_scatter(view(big).slice(0, 8), view(big).slice(1, 2));
      },
      "reduce_scatter" + overlap);
}
TEST_F(Validation, AllToAllSplits) {
  std::vector<size_t> three{1, 1, 1}, bad_sum{1, 1, 1, 1}, wraps{SIZE_MAX, 1, 0, 0};
  expect_rejected([&](Communicator& c) { return c.all_to_all(view(f8), three, view(f2), three); },
                  "all_to_all: input splits has 3 entries but the group has 4 ranks");
  expect_rejected(
      [&](Communicator& c) { return c.all_to_all(view(f8), bad_sum, view(f3), bad_sum); },
      "all_to_all: input splits add up to 4 elements but the buffer has 8");
  // SIZE_MAX + 1 wraps to 0, which an empty buffer would match.
  expect_rejected(
      [&](Communicator& c) {
        std::vector<float> none;
        return c.all_to_all(view(none), wraps, view(none), wraps);
      },
      "all_to_all: input splits add up to more than 2^64 elements");
  expect_rejected(
      [&](Communicator& c) {
        return c.all_to_all(view(f8), bad_sum, view(f8), std::span<const size_t>{});
      },
      "all_to_all: give both input and output splits, or neither");
}
TEST_F(Validation, GatherOutputOnRoot) {
  // Every rank is its own root here: root-only checks then run on every rank.
  expect_rejected([&](Communicator& c) { return c.gather(view(f2), view(f3), c.rank()); },
                  "gather: output has 3 elements but must have 8 (input of 2 elements x group size "
                  "4)");
}
TEST_F(Validation, ScatterInputOnRoot) {
  expect_rejected([&](Communicator& c) { return c.scatter(view(f3), view(f2), c.rank()); },
                  "scatter: input has 3 elements but must have 8 (output of 2 elements x group "
                  "size 4)");
}
TEST_F(Validation, SendToSelf) {
  expect_rejected([&](Communicator& c) { return c.send(view(f2), c.rank()); },
                  "send: peer {r} is this rank itself: send/recv to self is not supported");
}
TEST_F(Validation, PeerOutOfRange) {
  expect_rejected([&](Communicator& c) { return c.recv(view(f2), 9); },
                  "recv: peer 9 is out of range [0, 4)");
  expect_rejected(
      [&](Communicator& c) {
        const std::vector<P2POp> ops{P2POp{P2POp::Dir::kSend, view(f2), -3, 0}};
        return c.batch_isend_irecv(ops);
      },
      "batch_p2p: peer -3 is out of range [0, 4)");
}
TEST_F(Validation, EmptyBatch) {
  expect_rejected([&](Communicator& c) { return c.batch_isend_irecv({}); },
                  "batch_p2p: the batch is empty");
}
TEST_F(Validation, NonPositiveTimeout) {
  expect_rejected([&](Communicator& c) { return c.barrier({std::chrono::milliseconds(-5)}); },
                  "barrier: timeout must be positive, got -5 ms");
}
TEST_F(Validation, NegativeSplitColor) {
  auto world = make_inproc_world(4);
  for (int r = 0; r < 4; ++r) {
    try {
      world[r]->split(-7, 0);
      ADD_FAILURE() << "rank " << r << " accepted color -7";
    } catch (const Error& e) {
      EXPECT_EQ(e.what(), fmt::format("meshrt [invalid_argument] rank {}, comm 'world', split: "
                                      "color -7 is negative (use kNoColor to join no group)",
                                      r));
    }
  }
}
TEST_F(Validation, CoalescingBlocks) {
  auto world = make_inproc_world(4);
  for (int r = 0; r < 4; ++r) {
    Communicator& c = *world[r];
    const std::string at = fmt::format("meshrt [invalid_argument] rank {}, comm 'world', ", r);
    try {
      c.end_coalescing();
      ADD_FAILURE() << "end without start accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.what(), at + "end_coalescing: no coalescing block is open: call "
                               "start_coalescing() first");
    }
    c.start_coalescing();
    try {
      c.start_coalescing();
      ADD_FAILURE() << "nested start accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.what(), at + "start_coalescing: a coalescing block is already open: call "
                               "end_coalescing() first");
    }
    c.end_coalescing()->wait();
  }
}
// Too many dims are refused by the op, which can name rank, communicator and op; the Shape
// itself, made before any op, could not.
TEST_F(Validation, ShapeWithTooManyDims) {
  expect_rejected(
      [&](Communicator& c) {
        return c.all_reduce(view(f8, {1, 1, 1, 1, 1, 1, 1, 2, 4}));
      },
      "all_reduce: buffer has a shape of 9 dims: a shape has at most 8");
}

TEST(GlooSignature, TagsKeepTheSeqAndSeparateEveryArgumentRanksMustShare) {
  std::vector<float> f(8);
  std::vector<int32_t> i(8);
  Op base;
  base.kind = OpKind::kAllReduce;
  base.input = base.output = view(f);
  base.collective_seq = 0x12345;
  EXPECT_EQ(gloo_signature(base), "all_reduce of 8 x f32 (32 bytes), sum");
  EXPECT_EQ(gloo_tag(base) & 0xffff, 0x2345u);
  EXPECT_EQ(gloo_tag(base), gloo_tag(Op(base)));
  std::vector<Op> others(4, base);
  others[0].input = others[0].output = view(f).slice(0, 4);
  others[1].input = others[1].output = view(i);
  others[2].reduce_op = ReduceOp::kMax;
  others[3].kind = OpKind::kBroadcast;
  for (const Op& o : others) {
    EXPECT_NE(gloo_signature(o), gloo_signature(base));
    EXPECT_NE(gloo_tag(o), gloo_tag(base)) << gloo_signature(o);
  }
  Op b = others[3];
  b.root = 1;
  EXPECT_EQ(gloo_signature(b), "broadcast of 8 x f32 (32 bytes), root 1");
  EXPECT_NE(gloo_tag(b), gloo_tag(others[3]));
}

// A sink that records the op names it saw, and one that throws.
class RecordingSink : public trace::Sink {
 public:
  void on_enqueue(const trace::OpRecord& r) override { add("enqueue " + std::string(r.op)); }
  void on_start(const trace::OpRecord& r) override { add("start " + std::string(r.op)); }
  void on_end(const trace::OpRecord& r) override {
    add("end " + std::string(r.op) + " " + std::string(trace::op_state_name(r.state)));
  }
  std::vector<std::string> events() {
    std::lock_guard lock(mu_);
    return events_;
  }

 private:
  // Enqueue arrives on the caller's thread, start and end on the worker's.
  void add(std::string e) {
    std::lock_guard lock(mu_);
    events_.push_back(std::move(e));
  }
  std::mutex mu_;
  std::vector<std::string> events_;
};
class ThrowingSink : public trace::Sink {
 public:
  void on_enqueue(const trace::OpRecord&) override { throw std::runtime_error("sink bug"); }
  void on_start(const trace::OpRecord&) override { throw std::runtime_error("sink bug"); }
  void on_end(const trace::OpRecord&) override { throw std::runtime_error("sink bug"); }
};

TEST(Tracing, EveryOpPassesThroughTheSinksAndSinkErrorsNeverReachTheOp) {
  auto recording = std::make_shared<RecordingSink>();
  auto throwing = std::make_shared<ThrowingSink>();
  trace::add_sink(recording);
  trace::add_sink(throwing);
  const uint64_t failures_before = trace::sink_failures();
  {
    auto world = make_inproc_world(1);
    std::vector<float> x(4, 1.0f), y(4);
    world[0]->all_reduce(view(x))->wait();
    world[0]->all_gather(view(x), view(y))->wait();
  }
  trace::remove_sink(recording.get());
  trace::remove_sink(throwing.get());
  EXPECT_EQ(recording->events(),
            (std::vector<std::string>{"enqueue all_reduce", "start all_reduce",
                                      "end all_reduce completed", "enqueue all_gather",
                                      "start all_gather", "end all_gather completed"}));
  EXPECT_EQ(trace::sink_failures() - failures_before, 6u);
}

TEST(Scopes, NestedScopesPhasesAndCallerReachTheRecord) {
  auto world = make_inproc_world(1);
  std::vector<float> x(4, 1.0f);
  EXPECT_EQ(world[0]->all_reduce(view(x))->record().scope->path, "");
  int line = 0;
  WorkHandle inner, after;
  {
    trace::Scope model("MLP", trace::Phase::kForward);
    {
      trace::Scope layer("fc2");
      line = __LINE__ + 1;
      inner = world[0]->all_reduce(view(x));
    }
    trace::Scope back("MLP", trace::Phase::kBackward);
    after = world[0]->all_reduce(view(x));
  }
  const auto rec = inner->record();
  EXPECT_EQ(rec.scope->path, "MLP/fc2");
  EXPECT_EQ(rec.scope->phase, trace::Phase::kForward);  // inherited from MLP
  EXPECT_EQ(rec.scope->depth, 2);
  EXPECT_EQ(rec.caller_line, static_cast<uint32_t>(line));
  EXPECT_NE(std::string(rec.caller_file).find("unit_test.cc"), std::string::npos);
  EXPECT_EQ(after->record().scope->path, "MLP/MLP");
  EXPECT_EQ(trace::phase_name(after->record().scope->phase), "backward");
  EXPECT_EQ(trace::current_scope(), trace::root_scope());
  after->wait();
}

TEST(Bandwidth, NcclTestsFactorsTable) {
  // (op, n, bus factor), from nccl-tests' PERFORMANCE.md.
  const std::tuple<const char*, int, double> table[] = {{"all_reduce", 2, 1.0},
                                                        {"all_reduce", 4, 1.5},
                                                        {"all_reduce", 8, 1.75},
                                                        {"all_gather", 4, 0.75},
                                                        {"reduce_scatter", 8, 0.875},
                                                        {"all_to_all", 2, 0.5},
                                                        {"gather", 4, 0.75},
                                                        {"scatter", 4, 0.75},
                                                        {"broadcast", 8, 1.0},
                                                        {"reduce", 8, 1.0},
                                                        {"send", 2, 1.0},
                                                        {"recv", 2, 1.0},
                                                        {"all_reduce", 1, 0.0},
                                                        {"barrier", 4, 0.0},
                                                        {"batch_p2p", 4, 1.0}};
  for (const auto& [op, n, factor] : table) {
    const auto kind = trace::op_kind_from_name(op);
    ASSERT_TRUE(kind) << op;
    EXPECT_EQ(trace::op_kind_name(*kind), op);
    EXPECT_DOUBLE_EQ(trace::bus_factor(*kind, n), factor) << op << " n=" << n;
  }
  // 64 MiB in 50 ms: algbw 1.342 GB/s; all_reduce on 2 ranks: busbw = algbw (not doubled).
  EXPECT_NEAR(trace::algbw_gbps(64u << 20, 50000.0), 1.34217728, 1e-9);
  EXPECT_NEAR(trace::busbw_gbps(OpKind::kAllReduce, 2, 64u << 20, 50000.0), 1.34217728, 1e-9);
  EXPECT_NEAR(trace::busbw_gbps(OpKind::kAllReduce, 4, 1000000, 1000.0), 1.5, 1e-12);
  EXPECT_EQ(trace::algbw_gbps(100, 0.0), 0.0);
}

// Sets environment variables for one test and restores them after.
class ScopedEnv {
 public:
  explicit ScopedEnv(std::vector<std::pair<std::string, std::string>> vars) {
    for (const char* n : kAll) {
      if (const char* v = std::getenv(n)) saved_.emplace_back(n, v);
      ::unsetenv(n);
    }
    for (const auto& [k, v] : vars) ::setenv(k.c_str(), v.c_str(), 1);
  }
  ~ScopedEnv() {
    for (const char* n : kAll) ::unsetenv(n);
    for (const auto& [k, v] : saved_) ::setenv(k.c_str(), v.c_str(), 1);
  }

 private:
  static constexpr const char* kAll[] = {"RANK",
                                         "WORLD_SIZE",
                                         "LOCAL_RANK",
                                         "LOCAL_WORLD_SIZE",
                                         "MASTER_ADDR",
                                         "MASTER_PORT",
                                         "OMPI_COMM_WORLD_RANK",
                                         "OMPI_COMM_WORLD_SIZE",
                                         "OMPI_COMM_WORLD_LOCAL_RANK",
                                         "OMPI_COMM_WORLD_LOCAL_SIZE",
                                         "SLURM_PROCID",
                                         "SLURM_NTASKS",
                                         "SLURM_LOCALID",
                                         "SLURM_NTASKS_PER_NODE",
                                         "SLURM_LAUNCH_NODE_IPADDR",
                                         "MESHRT_RUN_ID",
                                         "TORCHELASTIC_RUN_ID",
                                         "MESHRT_STORE_EXTERNAL",
                                         "MESHRT_GLOO_IFNAME",
                                         "GLOO_SOCKET_IFNAME",
                                         "MESHRT_TIMEOUT_MS",
                                         "MESHRT_INIT_TIMEOUT_MS",
                                         "MESHRT_LAUNCHER",
                                         "MESHRT_BACKEND",
                                         "PMIX_RANK"};
  std::vector<std::pair<std::string, std::string>> saved_;
};

// What Python's strict decoder accepts, byte for byte (Unicode's table 3-7): dumps must load there.
TEST(Utf8, WellFormedTable) {
  struct Case {
    std::string_view bytes;
    bool valid;
    std::string_view repaired;
  };
  const Case cases[] = {
      {"plain", true, "plain"},
      {"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", true, "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80"},
      {"a\xff"
       "b",
       false,
       "a\xef\xbf\xbd"
       "b"},                                            // Never a lead byte.
      {"\x80", false, "\xef\xbf\xbd"},                  // A stray continuation byte.
      {"\xc3", false, "\xef\xbf\xbd"},                  // Truncated.
      {"\xc0\x80", false, "\xef\xbf\xbd\xef\xbf\xbd"},  // Overlong NUL.
      {"\xe0\x80\x80", false, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"},  // Overlong.
      {"\xed\xa0\x80", false, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"},  // A surrogate, U+D800.
      {"\xf4\x90\x80\x80", false,
       "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"},  // Past U+10FFFF.
      {"\xf4\x8f\xbf\xbf", true, "\xf4\x8f\xbf\xbf"},        // U+10FFFF itself.
  };
  for (const Case& c : cases) {
    EXPECT_EQ(trace::is_utf8(c.bytes), c.valid) << testing::PrintToString(std::string(c.bytes));
    EXPECT_EQ(trace::repaired_utf8(c.bytes), c.repaired)
        << testing::PrintToString(std::string(c.bytes));
  }
}

TEST(InitEnv, Torchrun) {
  ScopedEnv env({{"RANK", "3"},
                 {"WORLD_SIZE", "8"},
                 {"LOCAL_RANK", "1"},
                 {"LOCAL_WORLD_SIZE", "2"},
                 {"MASTER_ADDR", "127.0.0.1"},
                 {"MASTER_PORT", "29511"},
                 {"TORCHELASTIC_RUN_ID", "job7"},
                 {"GLOO_SOCKET_IFNAME", "lo"}});
  const InitOptions o = init_options_from_env();
  EXPECT_EQ(o.source, "torchrun");
  EXPECT_EQ(o.rank, 3);
  EXPECT_EQ(o.world_size, 8);
  EXPECT_EQ(o.local_rank, 1);
  EXPECT_EQ(o.local_world_size, 2);
  EXPECT_EQ(o.master_port, 29511);
  EXPECT_EQ(o.run_id, "job7");
  EXPECT_EQ(o.gloo_iface, "lo");
  EXPECT_TRUE(o.host_store);
}

TEST(InitEnv, NamesWhoSetTheVariables) {
  {
    ScopedEnv env({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MESHRT_LAUNCHER", "meshrun"}});
    EXPECT_EQ(init_options_from_env().source, "meshrun");
  }
  {
    ScopedEnv env({{"RANK", "0"}, {"WORLD_SIZE", "1"}});
    EXPECT_EQ(init_options_from_env().source, "RANK/WORLD_SIZE set by hand");
  }
}

TEST(OpKinds, OneRowPerKindWithItsFacts) {
  ASSERT_EQ(trace::op_kinds().size(), static_cast<size_t>(OpKind::kCoalesced) + 1);
  for (const trace::OpKindInfo& info : trace::op_kinds()) {
    EXPECT_EQ(trace::op_kind_from_name(info.name), info.kind) << info.name;
    const bool rooted = info.kind == OpKind::kBroadcast || info.kind == OpKind::kReduce ||
                        info.kind == OpKind::kGather || info.kind == OpKind::kScatter;
    EXPECT_EQ(info.rooted, rooted) << info.name;
    const bool reduces = info.kind == OpKind::kAllReduce || info.kind == OpKind::kReduce ||
                         info.kind == OpKind::kReduceScatter ||
                         info.kind == OpKind::kReduceScatterV;
    EXPECT_EQ(info.reduces, reduces) << info.name;
    const bool p2p =
        info.kind == OpKind::kSend || info.kind == OpKind::kRecv || info.kind == OpKind::kBatchP2P;
    EXPECT_EQ(info.p2p, p2p) << info.name;
  }
  EXPECT_EQ(trace::op_kind_from_name("allreduce_coalesced"), std::nullopt);
}

TEST(OpRecord, AnOpThatNeverStartedRanForNoTime) {
  trace::OpRecord r;
  r.end_ns = 6'350'104'000'000;  // Failed while queued: no start.
  EXPECT_EQ(trace::run_ns(r), 0);
  r.start_ns = 1000;
  r.end_ns = 4000;
  EXPECT_EQ(trace::run_ns(r), 3000);
  r.end_ns = 0;  // Still running.
  EXPECT_EQ(trace::run_ns(r), 0);
}

TEST(Env, OneParserForEveryVariable) {
  ScopedEnv env({{"MESHRT_TIMEOUT_MS", "250"}, {"MESHRT_RUN_ID", ""}});
  namespace env_ = trace::env;
  EXPECT_EQ(env_::get_ms({"MESHRT_TIMEOUT_MS"}, 1), std::chrono::milliseconds(250));
  EXPECT_EQ(env_::get({"MESHRT_RUN_ID"}), std::nullopt) << "empty is unset";
  EXPECT_EQ(env_::get({"MESHRT_RUN_ID", "MESHRT_TIMEOUT_MS"}), "250") << "first set alias wins";
  EXPECT_FALSE(env_::get_flag({"MESHRT_RUN_ID"}));
  EXPECT_TRUE(env_::get_flag({"MESHRT_RUN_ID"}, true));
  const std::pair<const char*, const char*> bad[] = {
      {"-5", "MESHRT_TIMEOUT_MS='-5': expected an integer >= 1"},
      {"5ms", "MESHRT_TIMEOUT_MS='5ms': expected an integer >= 1"},
      {"99999999999999999999",
       "MESHRT_TIMEOUT_MS='99999999999999999999': expected an integer >= 1"},
  };
  for (const auto& [value, message] : bad) {
    ::setenv("MESHRT_TIMEOUT_MS", value, 1);
    try {
      env_::get_ms({"MESHRT_TIMEOUT_MS"}, 1);
      ADD_FAILURE() << "accepted " << value;
    } catch (const env_::EnvError& e) {
      EXPECT_EQ(std::string(e.what()), message);
    }
  }
  ::setenv("MESHRT_TIMEOUT_MS", "TRUE", 1);
  EXPECT_TRUE(env_::get_flag({"MESHRT_TIMEOUT_MS"}));
  EXPECT_THROW(env_::get_choice({"MESHRT_TIMEOUT_MS"}, {"abort", "throw"}), env_::EnvError);
}

TEST(InitEnv, OpenMpiWithDefaultPort) {
  ScopedEnv env({{"OMPI_COMM_WORLD_RANK", "1"},
                 {"OMPI_COMM_WORLD_SIZE", "4"},
                 {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                 {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"},
                 {"MASTER_ADDR", "127.0.0.1"}});
  const InitOptions o = init_options_from_env();
  EXPECT_EQ(o.source, "mpirun");
  EXPECT_EQ(o.rank, 1);
  EXPECT_EQ(o.world_size, 4);
  EXPECT_EQ(o.master_port, 29500);
}

TEST(InitEnv, OpenMpiWithoutMasterAddrRunsOverMpi) {
  ScopedEnv env({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "4"}});
  if (!MESHRT_HAVE_MPI) {
    EXPECT_THROW(init_options_from_env(), Error);
    return;
  }
  // The store's address then travels over MPI from rank 0 (init()).
  const InitOptions o = init_options_from_env();
  EXPECT_EQ(o.backend, "mpi");
  EXPECT_EQ(o.master_addr, "");
  EXPECT_EQ(o.master_port, 0);
  ::setenv("MESHRT_BACKEND", "gloo", 1);
  EXPECT_THROW(init_options_from_env(), Error);  // Gloo needs MASTER_ADDR.
}

TEST(InitEnv, SlurmTakesTheLaunchNodeAddress) {
  ScopedEnv env({{"SLURM_PROCID", "5"},
                 {"SLURM_NTASKS", "6"},
                 {"SLURM_LOCALID", "2"},
                 {"SLURM_NTASKS_PER_NODE", "3(x2)"},
                 {"SLURM_LAUNCH_NODE_IPADDR", "127.0.0.1"}});
  const InitOptions o = init_options_from_env();
  EXPECT_EQ(o.source, "srun");
  EXPECT_EQ(o.rank, 5);
  EXPECT_EQ(o.local_rank, 2);
  EXPECT_EQ(o.local_world_size, -1);
  EXPECT_EQ(o.master_addr, "127.0.0.1");
  // Over MPI only when srun gave PMIx (--mpi=pmix); OpenMPI cannot start without it.
  EXPECT_EQ(o.backend, "gloo");
  ::setenv("PMIX_RANK", "5", 1);
  const InitOptions pmix = init_options_from_env();
  EXPECT_EQ(pmix.backend, MESHRT_HAVE_MPI ? "mpi" : "gloo");
  // Over MPI, rank 0 sends its own address (the launch node may hold no rank).
  EXPECT_EQ(pmix.master_addr, MESHRT_HAVE_MPI ? "" : "127.0.0.1");
}

TEST(InitEnv, ErrorsListWhatWasFoundAndWhatIsNeeded) {
  const std::pair<std::vector<std::pair<std::string, std::string>>, std::string> cases[] = {
      {{}, "no launcher environment found"},
      {{{"RANK", "0"}}, "RANK is set but not WORLD_SIZE"},
      {{{"RANK", "4"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}},
       "RANK=4 is outside [0, WORLD_SIZE=4)"},
      {{{"RANK", "x"}, {"WORLD_SIZE", "4"}}, "RANK='x': expected an integer >= 0"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}}, "MASTER_PORT is not set"},
      {{{"RANK", "1"},
        {"WORLD_SIZE", "2"},
        {"LOCAL_RANK", "2"},
        {"LOCAL_WORLD_SIZE", "2"},
        {"MASTER_ADDR", "h"},
        {"MASTER_PORT", "1"}},
       "LOCAL_RANK=2 is outside [0, LOCAL_WORLD_SIZE=2)"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MESHRT_TIMEOUT_MS", "ten"}},
       "MESHRT_TIMEOUT_MS='ten': expected an integer >= 1"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MESHRT_STORE_EXTERNAL", "maybe"}},
       "MESHRT_STORE_EXTERNAL='maybe': expected 1/true/yes/on or 0/false/no/off"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_PORT", "70000"}},
       "MASTER_PORT='70000': expected an integer in [0, 65535]"},
  };
  for (const auto& [vars, problem] : cases) {
    ScopedEnv env(vars);
    try {
      init_options_from_env();
      ADD_FAILURE() << "accepted: " << problem;
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(problem), std::string::npos) << what;
      // The launcher's variables come with what was found and what is needed; a bad value of
      // meshrt's own setting only with the remedy (the rest would be noise).
      const bool own = problem.starts_with("MESHRT_");
      EXPECT_EQ(what.find("Needed: RANK and WORLD_SIZE") != std::string::npos, !own) << what;
      EXPECT_EQ(what.find("Found: ") != std::string::npos, !own) << what;
      EXPECT_EQ(what.find("(fix the value or unset the variable)") != std::string::npos, own);
    }
  }
}

TEST(Init, SingleRankWorldOverGloo) {
  InitOptions o;
  o.rank = 0;
  o.world_size = 1;
  o.master_addr = "127.0.0.1";
  o.master_port = 0;  // The store picks a free port.
  auto world = init(o);
  EXPECT_EQ(world->backend_name(), "gloo");
  EXPECT_EQ(world->description(), "default_pg");
  std::vector<double> x{1.5, 2.5};
  world->all_reduce(view(x), ReduceOp::kAvg)->wait();
  EXPECT_EQ(x, (std::vector<double>{1.5, 2.5}));
}

}  // namespace
}  // namespace meshrt

namespace meshrt {
namespace {

// meshrt's threads get a signal stack of their own, so a stack overflow on one still dumps; it
// goes away with the thread.
TEST(FatalSignal, ThreadsGetTheirOwnSignalStack) {
  stack_t seen{};
  std::thread([&] {
    stack_t before{};
    ::sigaltstack(nullptr, &before);
    EXPECT_NE(before.ss_flags & SS_DISABLE, 0);  // A new thread has none.
    use_signal_stack_on_this_thread();
    ::sigaltstack(nullptr, &seen);
    use_signal_stack_on_this_thread();  // Once is enough: the same stack stays.
    stack_t again{};
    ::sigaltstack(nullptr, &again);
    EXPECT_EQ(again.ss_sp, seen.ss_sp);
  }).join();
  EXPECT_EQ(seen.ss_flags & SS_DISABLE, 0);
  EXPECT_GE(seen.ss_size, size_t{256} * 1024);
}

}  // namespace
}  // namespace meshrt

namespace meshrt {
namespace {

// A monitor that cannot start (no binary, or one the kernel will not run) is reported, and no
// MonitorProcess stands for a child that never ran: under mpirun nothing else would say that the
// live verdict is missing.
TEST(MonitorProcess, ABinaryThatCannotRunIsReportedNotStarted) {
  const std::string bogus =
      (std::filesystem::temp_directory_path() / fmt::format("meshrt_bogus_monitor_{}", ::getpid()))
          .string();
  { std::ofstream(bogus) << "not an executable format\n"; }
  std::filesystem::permissions(bogus, std::filesystem::perms::owner_all);
  ::setenv("MESHRT_MONITOR_BIN", bogus.c_str(), 1);
  EXPECT_EQ(find_monitor_binary(), bogus);
  EXPECT_EQ(MonitorProcess::start({"127.0.0.1", 1, "", "run", 0, 2}), nullptr);
  ::setenv("MESHRT_MONITOR_BIN", "/nonexistent/meshrt-monitor", 1);
  EXPECT_EQ(find_monitor_binary(), "");
  EXPECT_EQ(MonitorProcess::start({"127.0.0.1", 1, "", "run", 0, 2}), nullptr);
  ::unsetenv("MESHRT_MONITOR_BIN");
  std::filesystem::remove(bogus);
}

}  // namespace
}  // namespace meshrt

namespace meshrt {
namespace {

// The environment as meshrt reads it: every variable it reads is known (and documented), and a
// typo is pointed at the variable meant.
TEST(Environment, KnownVariablesAreTheOnesReadAndDocumented) {
  const auto& known = trace::env::known_variables();
  const std::set<std::string> listed(known.begin(), known.end());
  EXPECT_EQ(listed.size(), known.size()) << "a name is listed twice";
  // docs/architecture.md's table names each variable in backquotes.
  std::ifstream doc(std::string(MESHRT_SOURCE_ROOT) + "/docs/architecture.md");
  const std::string text((std::istreambuf_iterator<char>(doc)), {});
  std::set<std::string> documented;
  const std::regex name("`(MESHRT_[A-Z0-9_]+)`");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), name); it != std::sregex_iterator();
       ++it) {
    documented.insert((*it)[1]);
  }
  EXPECT_EQ(listed, documented) << "trace/env.cc's list and docs/architecture.md differ";
  EXPECT_EQ(trace::env::closest_known_variable("MESHRT_ON_TIMOUT"), "MESHRT_ON_TIMEOUT");
  EXPECT_EQ(trace::env::closest_known_variable("MESHRT_DUMP_PREFX"), "MESHRT_DUMP_PREFIX");
}

// Runs `program` as rank 0 of 1 with `var` added to the environment; its exit status and what it
// printed.
std::pair<int, std::string> demo_with(const std::string& var,
                                      const std::string& program = MESHRT_COLLECTIVES_DEMO) {
  const std::string command = fmt::format(
      "env {} RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=0 timeout 60 {} 2>&1", var,
      program);
  FILE* p = ::popen(command.c_str(), "r");
  std::string out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), p)) > 0;) out.append(buf, n);
  const int status = ::pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

TEST(Environment, BadValuesAreClearErrorsAndTyposAreNamed) {
  for (const auto& [var, expected] :
       {std::pair{"MESHRT_ON_TIMEOUT=abrot",
                  "meshrt [invalid_argument] rank 0, comm 'world', init: "
                  "MESHRT_ON_TIMEOUT='abrot': expected one of abort, throw, continue"},
        std::pair{"MESHRT_DUMP_FORMAT=pkl", "MESHRT_DUMP_FORMAT='pkl': expected one of json"},
        std::pair{"MESHRT_TIMEOUT_MS=ten", "MESHRT_TIMEOUT_MS='ten'"}}) {
    const auto [status, out] = demo_with(var);
    EXPECT_EQ(status, 1) << var << "\n" << out;
    EXPECT_NE(out.find(expected), std::string::npos) << var << "\n" << out;
    EXPECT_EQ(out.find("terminate called"), std::string::npos) << out;
    EXPECT_EQ(out.find("Needed: RANK"), std::string::npos) << out;
  }
  const auto [status, out] = demo_with("MESHRT_ON_TIMOUT=abort");
  EXPECT_NE(out.find("MESHRT_ON_TIMOUT is not a variable meshrt reads (ignored); did you mean "
                     "MESHRT_ON_TIMEOUT?"),
            std::string::npos)
      << out;
}

// MESHRT_COMMS_LOG=1 alone prints each rank's summary by mesh dim at exit.
TEST(Environment, CommsLogAlonePrintsTheSummaryAtExit) {
  const auto [status, out] =
      demo_with("MESHRT_COMMS_LOG=1", std::string(MESHRT_MESH_DEMO) + " --mesh 1 --names dp");
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find("meshrt comm summary, rank 0 (MESHRT_COMMS_LOG=1):"), std::string::npos)
      << out;
  // A 1-D mesh over the whole world reuses the world communicator, so its row is the world's.
  EXPECT_NE(out.find("\nworld      all_reduce"), std::string::npos) << out;
  const auto [quiet_status, quiet] =
      demo_with("MESHRT_LOG_LEVEL=warn", std::string(MESHRT_MESH_DEMO) + " --mesh 1 --names dp");
  EXPECT_EQ(quiet.find("meshrt comm summary"), std::string::npos) << quiet;
}

// MESHRT_SCOPE_TREE_HTML writes each rank's scope-tree viewer at exit, the tree embedded.
TEST(Environment, ScopeTreeHtmlWritesTheViewerAtExit) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            fmt::format("meshrt_tree_{}_{{rank}}.html", ::getpid()))
                               .string();
  const auto [status, out] = demo_with("MESHRT_SCOPE_TREE_HTML=" + path,
                                       std::string(MESHRT_MESH_DEMO) + " --mesh 1 --names dp");
  EXPECT_EQ(status, 0) << out;
  const std::string written = fmt::format(
      "{}/meshrt_tree_{}_0.html", std::filesystem::temp_directory_path().string(), ::getpid());
  std::ifstream in(written);
  const std::string page((std::istreambuf_iterator<char>(in)), {});
  EXPECT_NE(page.find("id=\"scope-tree-data\""), std::string::npos) << written;
  EXPECT_NE(page.find("\"world\""), std::string::npos) << page.substr(0, 2000);
  std::filesystem::remove(written);
}

}  // namespace
}  // namespace meshrt
