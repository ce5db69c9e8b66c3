#include "runtime/buffer.h"

#include <algorithm>

#include "runtime/error.h"

namespace meshrt {

Shape::Shape(std::initializer_list<int64_t> dims) : ndim_(dims.size()) {
  if (ndim_ > kMaxDims) {
    throw Error(
        ErrorCode::kInvalidArgument, {},
        "a shape has at most " + std::to_string(kMaxDims) + " dims, got " + std::to_string(ndim_));
  }
  std::copy_n(dims.begin(), ndim_, dims_.begin());
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (size_t i = 0; i < ndim_; ++i) n *= dims_[i];
  return n;
}

}  // namespace meshrt
