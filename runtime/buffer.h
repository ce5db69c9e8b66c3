// A non-owning view of the memory a collective reads or writes: no tensor library needed.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <vector>

#include "dtype.h"

namespace meshrt {

// Where a buffer lives. CPU backends (all of today's) reject kCuda with kInvalidArgument.
struct Device {
  // The kind of memory.
  enum class Kind : uint8_t {
    kCpu,  // Host memory.
    kCuda  // Memory of CUDA device `index`.
  };
  Kind kind = Kind::kCpu;  // Host or CUDA memory.
  int index = -1;          // CUDA device ordinal; -1 for the CPU.

  // Host memory.
  static Device cpu() { return {}; }
  // Memory of CUDA device `index`.
  static Device cuda(int index) { return {Kind::kCuda, index}; }
  // Same kind and index.
  friend bool operator==(const Device&, const Device&) = default;
};

// An optional tensor shape kept inline (no allocation); empty means "flat, count elements".
class Shape {
 public:
  // The most dims a shape holds.
  static constexpr size_t kMaxDims = 8;

  // No shape: the buffer is flat.
  Shape() = default;
  // The shape `dims`, outermost first. Beyond kMaxDims dims only the first kMaxDims are kept
  // and the op given it refuses it (Error(kInvalidArgument) naming rank, communicator and op).
  Shape(std::initializer_list<int64_t> dims);

  // Number of dims as given; 0 when unset. Above kMaxDims the shape is refused by every op.
  size_t ndim() const { return ndim_; }
  // Size of dim `i`; `i` must be below ndim() and kMaxDims (unchecked).
  int64_t operator[](size_t i) const { return dims_[i]; }
  // The sizes of the dims kept, outermost first.
  std::span<const int64_t> dims() const { return {dims_.data(), std::min(ndim_, kMaxDims)}; }
  // Product of the dims; 1 for an empty shape (which means unset, not 0-d).
  int64_t numel() const;
  // True when no shape was given.
  bool empty() const { return ndim_ == 0; }

 private:
  std::array<int64_t, kMaxDims> dims_{};
  size_t ndim_ = 0;
};

// Pointer + element count + dtype + device (+ optional shape). Views used only as inputs are never
// written through, so const data may be viewed. The memory must stay valid until its ops are done.
struct BufferView {
  void* data = nullptr;       // First element; may be null only when count is 0.
  size_t count = 0;           // Elements, not bytes.
  DType dtype = DType::kF32;  // Element type.
  Device device;              // Where `data` lives.
  Shape shape;                // Optional, for traces; when set, its numel() must equal count.
  // Opaque records (records()): when non-zero, the size of one element in bytes, and `dtype` is
  // kU8. Only custom reductions (reduce_op.h's Reducer) take them; other ops move bytes (kU8).
  size_t record_bytes = 0;

  // Size of one element in bytes: the record's, else the dtype's.
  size_t element_bytes() const {
    return record_bytes != 0 ? record_bytes : dtype_size_bytes(dtype);
  }
  // Size of the viewed memory in bytes: count x element_bytes().
  size_t bytes() const { return count * element_bytes(); }
  // `n` elements of this view's type and device at `at` (shape dropped).
  BufferView retarget(void* at, size_t n) const { return {at, n, dtype, device, {}, record_bytes}; }
  // The elements [offset, offset + n) as a view of the same type and device (shape dropped). Not
  // bounds-checked.
  BufferView slice(size_t offset, size_t n) const {
    return retarget(static_cast<char*>(data) + offset * element_bytes(), n);
  }
};

// A CPU view of a typed span; the dtype follows from T.
template <typename T>
BufferView view(std::span<T> s, Shape shape = {}) {
  using U = std::remove_const_t<T>;
  return {const_cast<U*>(s.data()), s.size(), dtype_of<U>(), Device::cpu(), shape};
}
// A CPU view of `count` elements of `dtype` at `data`: a trainer's own memory (a raw array, an
// arena, a buffer from C or another language).
inline BufferView view(void* data, size_t count, DType dtype, Shape shape = {}) {
  return {data, count, dtype, Device::cpu(), shape};
}
// A CPU view of `count` opaque records of `record_bytes` each at `data` (a histogram bin, a
// value-and-index pair): what a custom reduction (reduce_op.h's Reducer) of that size folds.
inline BufferView records(void* data, size_t count, size_t record_bytes) {
  return {data, count, DType::kU8, Device::cpu(), {}, record_bytes};
}
// A CPU view of `count` elements at `data`; the dtype follows from T.
template <typename T>
BufferView view(T* data, size_t count, Shape shape = {}) {
  return view(std::span<T>(data, count), shape);
}
// A CPU view of a whole vector.
template <typename T>
BufferView view(std::vector<T>& v, Shape shape = {}) {
  return view(std::span<T>(v), shape);
}
// A CPU view of a const vector, for inputs only: an op that writes it would write const memory.
template <typename T>
BufferView view(const std::vector<T>& v, Shape shape = {}) {
  return view(std::span<const T>(v), shape);
}

}  // namespace meshrt
