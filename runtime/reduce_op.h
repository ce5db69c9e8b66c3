// Reduction operators of all_reduce, reduce and reduce_scatter.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "dtype.h"

namespace meshrt {

// Element-wise reduction. 16-bit floats reduce in float and round once per step; integer sums and
// products wrap around.
enum class ReduceOp : uint8_t {
  kSum,    // a + b.
  kProd,   // a * b.
  kMin,    // The smaller.
  kMax,    // The larger.
  kAvg,    // The sum divided by the group size; floating dtypes only (else kInvalidArgument).
  kCustom  // A caller's Reducer (below), which the op carries; CPU backends only.
};

// Every reduce op, for tests and tables.
inline constexpr ReduceOp kAllReduceOps[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin,
                                             ReduceOp::kMax, ReduceOp::kAvg};

// Lowercase name: "sum", "prod", "min", "max", "avg", "custom"; "unknown" outside the enum.
std::string_view reduce_op_name(ReduceOp op);

// out[i] = a[i] (op) b[i] for n elements; out may alias a or b. kAvg reduces as kSum: the caller
// divides once at the end with divide_elements.
void reduce_elements(DType dtype, ReduceOp op, void* out, const void* a, const void* b, size_t n);

// data[i] /= divisor for n elements of a floating dtype (the last step of kAvg); integer dtypes
// are left unchanged.
void divide_elements(DType dtype, void* data, size_t n, size_t divisor);

// A caller's fold (MPI_Op_create's user function): inout[i] = in[i] (op) inout[i] for `count`
// elements. It must be associative and commutative: algorithms fold in whatever order they run.
using ReduceFn = std::function<void(const void* in, void* inout, size_t count)>;

// A named user-defined reduction over elements of `element_bytes()`: a dtype's (a Kahan sum of
// f64) or opaque records' (records() views: histogram bins, value-and-index pairs). Immutable;
// ops share it, so it lives until their last record is gone.
class Reducer {
 public:
  // Throws Error(kInvalidArgument) for an empty name, an empty fn, element_bytes 0, or a dtype
  // whose size is not element_bytes.
  static std::shared_ptr<const Reducer> create(std::string_view name, size_t element_bytes,
                                               ReduceFn fn, std::optional<DType> dtype = {});

  // The name given; the storage lives as long as the process, as records and dumps keep it.
  std::string_view name() const { return name_; }
  // Size of one element in bytes.
  size_t element_bytes() const { return element_bytes_; }
  // The dtype its buffers must have; nullopt: opaque records of element_bytes().
  std::optional<DType> dtype() const { return dtype_; }
  // Calls fn; what fn throws is caught and returned as "reducer 'argmax' threw: ...", else
  // nullopt. Never throws: the caller decides how the op fails.
  std::optional<std::string> fold_into(const void* in, void* inout, size_t count) const noexcept;

  // Only create() makes one (it checks the arguments).
  class Key {
    Key() = default;
    friend class Reducer;
  };
  Reducer(Key key, std::string_view name, size_t element_bytes, ReduceFn fn,
          std::optional<DType> dtype);

 private:
  std::string_view name_;
  size_t element_bytes_;
  ReduceFn fn_;
  std::optional<DType> dtype_;
};

// What an op of the API folds by: a built-in ReduceOp or a caller's Reducer. Converts from either,
// so `all_reduce(v, ReduceOp::kMax)` and `all_reduce(v, argmax)` both read as they should.
struct ReduceBy {
  // A built-in op.
  ReduceBy(ReduceOp op = ReduceOp::kSum) : op(op) {}  // NOLINT: implicit by design.
  // A caller's Reducer (op kCustom).
  ReduceBy(std::shared_ptr<const Reducer> reducer)  // NOLINT: implicit by design.
      : op(ReduceOp::kCustom), reducer(std::move(reducer)) {}
  ReduceOp op;                             // kCustom exactly when `reducer` is set.
  std::shared_ptr<const Reducer> reducer;  // The caller's, or null.
};

// What a collective folds with, in the form the collectives layer passes around: a built-in op on
// a dtype's elements, or a Reducer.
struct Reduction {
  DType dtype = DType::kF32;        // Of the elements (kU8 for records).
  ReduceOp op = ReduceOp::kSum;     // kAvg folds as kSum; kCustom: `custom` folds.
  const Reducer* custom = nullptr;  // Set exactly when op is kCustom.
  size_t element_bytes = 4;         // The dtype's or the Reducer's.

  // out[i] = a[i] (op) b[i] for n elements; out may alias a or b. A Reducer that throws has its
  // first message kept for this thread (take_reducer_failure()); the fold goes on, so that the
  // op's peers stay in step.
  void operator()(void* out, const void* a, const void* b, size_t n) const;
};

// A built-in reduction of `dtype` elements by `op`.
inline Reduction builtin_reduction(DType dtype, ReduceOp op) {
  return {dtype, op, nullptr, dtype_size_bytes(dtype)};
}

// The message of the first Reducer failure on this thread since the last call ("reducer 'argmax'
// threw: ..."), and clears it; nullopt when none failed.
std::optional<std::string> take_reducer_failure();

}  // namespace meshrt
