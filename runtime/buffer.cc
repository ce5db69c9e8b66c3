#include "runtime/buffer.h"

#include <algorithm>

namespace meshrt {

Shape::Shape(std::initializer_list<int64_t> dims) : ndim_(dims.size()) {
  // Too many dims are kept as a count, not thrown here: the op that gets the shape refuses it
  // with the rank, communicator and op that an error here could not name.
  std::copy_n(dims.begin(), std::min(ndim_, kMaxDims), dims_.begin());
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (const int64_t d : dims()) n *= d;
  return n;
}

}  // namespace meshrt
