// A non-owning view of the memory a collective reads or writes: no tensor library needed.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <vector>

#include "dtype.h"

namespace meshrt {

// Where a buffer lives. CPU backends accept only kCpu.
struct Device {
  enum class Kind : uint8_t { kCpu, kCuda };
  Kind kind = Kind::kCpu;
  int index = -1;  // CUDA device ordinal; -1 for the CPU.

  static Device cpu() { return {}; }
  static Device cuda(int index) { return {Kind::kCuda, index}; }
  friend bool operator==(const Device&, const Device&) = default;
};

// An optional tensor shape kept inline (no allocation); empty means "flat, count elements".
class Shape {
 public:
  static constexpr size_t kMaxDims = 8;

  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);

  size_t ndim() const { return ndim_; }
  int64_t operator[](size_t i) const { return dims_[i]; }
  std::span<const int64_t> dims() const { return {dims_.data(), ndim_}; }
  // Product of the dims (1 for a 0-d shape with ndim 0 is not used: empty means unset).
  int64_t numel() const;
  bool empty() const { return ndim_ == 0; }

 private:
  std::array<int64_t, kMaxDims> dims_{};
  size_t ndim_ = 0;
};

// Pointer + element count + dtype + device (+ optional shape). Views used only as inputs are never
// written through, so const data may be viewed.
struct BufferView {
  void* data = nullptr;
  size_t count = 0;  // Elements, not bytes.
  DType dtype = DType::kF32;
  Device device;
  Shape shape;

  size_t bytes() const { return count * dtype_size_bytes(dtype); }
  // The elements [offset, offset + n) as a view of the same dtype and device (shape dropped).
  BufferView slice(size_t offset, size_t n) const {
    return {static_cast<char*>(data) + offset * dtype_size_bytes(dtype), n, dtype, device, {}};
  }
};

// A CPU view of a typed span; the dtype follows from T.
template <typename T>
BufferView view(std::span<T> s, Shape shape = {}) {
  using U = std::remove_const_t<T>;
  return {const_cast<U*>(s.data()), s.size(), dtype_of<U>(), Device::cpu(), shape};
}
// A CPU view of a whole vector.
template <typename T>
BufferView view(std::vector<T>& v, Shape shape = {}) {
  return view(std::span<T>(v), shape);
}
// A CPU view of a const vector, for inputs.
template <typename T>
BufferView view(const std::vector<T>& v, Shape shape = {}) {
  return view(std::span<const T>(v), shape);
}

}  // namespace meshrt
