// Fuzz target `mesh`: the closed-form rank math of mesh/layout.h (what DeviceMesh's shapes, slices,
// flatten and unflatten become) under sequences of unflatten and flatten with arbitrary shapes.
// Every dim must stay a bijection between (base, coordinate) and positions, an unflattened dim's
// coordinate must be the mixed-radix number of its new dims' coordinates, and a flattened one
// that of the dims it joins, as DeviceMesh's groups rely on. The one documented failure is
// std::invalid_argument from mesh::unflatten, for sizes that do not divide the dim's parts; on a
// dim of one part it must come exactly when their product is not the dim's size. Input: byte 0 the
// number of dims, one byte per dim size, then up to 8 ops (kind, dim, and for unflatten a count and
// sizes).
#include <fmt/ranges.h>  // check()'s sizes

#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "mesh/layout.h"
#include "tests/fuzz/fuzz_target.h"

namespace mesh = meshrt::mesh;

namespace {

// Positions checked exhaustively; the fuzzer's shapes stay below it.
constexpr int64_t kMaxPositions = 1024;

class Input {
 public:
  Input(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  bool empty() const { return at_ >= size_; }
  uint8_t byte() { return at_ < size_ ? data_[at_++] : 0; }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t at_ = 0;
};

int64_t product(const std::vector<int64_t>& sizes) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

// Every position's coordinate is in range, its base has coordinate 0, and member(base, c) gives
// the position back.
void check_dim(const mesh::Dim& d, int64_t positions) {
  const int64_t size = d.size();
  check(size >= 1 && positions % size == 0, "dim {}: size {} does not divide the {} positions",
        d.name, size, positions);
  for (int64_t p = 0; p < positions; ++p) {
    const int64_t c = d.coordinate(p);
    const int64_t b = d.base(p);
    check(c >= 0 && c < size, "dim {}: coordinate {} of position {} out of range", d.name, c, p);
    check(b >= 0 && b < positions && d.coordinate(b) == 0,
          "dim {}: base {} of position {} is not coordinate 0", d.name, b, p);
    check(d.base(b) == b, "dim {}: the base of base {} moved", d.name, b);
    check(d.member(b, c) == p, "dim {}: member(base {}, coordinate {}) is not position {}", d.name,
          b, c, p);
  }
}

// Parts of the dim that step at all (size 1 parts are no-ops).
size_t real_parts(const mesh::Dim& d) {
  size_t n = 0;
  for (const mesh::Part& p : d.parts) n += p.size != 1 ? 1 : 0;
  return n;
}

// The coordinates of `dims` (outermost first) as one mixed-radix number at `p`.
int64_t mixed_radix(std::span<const mesh::Dim> dims, int64_t p) {
  int64_t c = 0;
  for (const mesh::Dim& d : dims) c = c * d.size() + d.coordinate(p);
  return c;
}

std::vector<int64_t> read_sizes(Input& in, size_t max_count) {
  std::vector<int64_t> sizes(1 + in.byte() % max_count);
  for (int64_t& s : sizes) s = 1 + in.byte() % 12;
  return sizes;
}

std::vector<std::string> names_for(size_t n, std::string_view prefix) {
  std::vector<std::string> names;
  for (size_t i = 0; i < n; ++i) names.push_back(std::string(prefix) + std::to_string(i));
  return names;
}

void layout_ops(Input& in) {
  std::vector<int64_t> shape = read_sizes(in, 4);
  const int64_t positions = product(shape);
  if (positions > kMaxPositions) return;
  std::vector<mesh::Dim> dims = mesh::row_major(shape, names_for(shape.size(), "d"));
  // Each op's new dims are checked where they are made; the others do not change.
  for (const mesh::Dim& d : dims) check_dim(d, positions);
  for (int op = 0; op < 8 && !in.empty(); ++op) {
    const uint8_t kind = in.byte();
    const size_t i = in.byte() % dims.size();
    if (kind % 2 == 0) {
      // Unflatten dim i into arbitrary sizes: refused unless they fit, exact when accepted.
      const std::vector<int64_t> sizes = read_sizes(in, 4);
      std::vector<mesh::Dim> parts;
      try {
        parts = mesh::unflatten(dims[i], sizes, names_for(sizes.size(), "u"));
      } catch (const std::invalid_argument&) {
        // A dim of one part splits into any sizes of its size; a flattened one only where the
        // sizes fall on its parts (tests/mesh_test.cc: a flattened 2 x 3 is not cut into 3 x 2).
        check(product(sizes) != dims[i].size() || real_parts(dims[i]) > 1,
              "unflatten refused sizes {} of one-part dim {} of size {}", sizes, dims[i].name,
              dims[i].size());
        continue;
      }
      check(product(sizes) == dims[i].size(), "unflatten accepted sizes {} for dim {} of size {}",
            sizes, dims[i].name, dims[i].size());
      check(parts.size() == sizes.size(), "unflatten made {} dims of sizes {}", parts.size(),
            sizes);
      for (size_t k = 0; k < parts.size(); ++k) {
        check(parts[k].size() == sizes[k], "unflatten into {} made dim {} of size {}", sizes, k,
              parts[k].size());
        check_dim(parts[k], positions);
      }
      for (int64_t p = 0; p < positions; ++p) {
        check(mixed_radix(parts, p) == dims[i].coordinate(p),
              "unflatten of dim {} into {} moved the coordinate of position {}", dims[i].name,
              sizes, p);
      }
      dims.erase(dims.begin() + static_cast<std::ptrdiff_t>(i));
      dims.insert(dims.begin() + static_cast<std::ptrdiff_t>(i), parts.begin(), parts.end());
    } else {
      // Flatten a run of dims: its coordinate is theirs in mixed radix.
      const size_t n = 1 + in.byte() % (dims.size() - i);
      const std::span<const mesh::Dim> run(dims.data() + i, n);
      const mesh::Dim flat = mesh::flatten(run, "flat");
      int64_t size = 1;
      for (const mesh::Dim& d : run) size *= d.size();
      check(flat.size() == size, "flatten of {} dims from {} made size {}, not {}", n, i,
            flat.size(), size);
      check_dim(flat, positions);
      for (int64_t p = 0; p < positions; ++p) {
        check(flat.coordinate(p) == mixed_radix(run, p),
              "flatten of {} dims from {} moved the coordinate of position {}", n, i, p);
      }
      dims.erase(dims.begin() + static_cast<std::ptrdiff_t>(i),
                 dims.begin() + static_cast<std::ptrdiff_t>(i + n));
      dims.insert(dims.begin() + static_cast<std::ptrdiff_t>(i), flat);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Input in(data, size);
  layout_ops(in);
  return 0;
}
