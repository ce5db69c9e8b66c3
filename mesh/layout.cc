#include "mesh/layout.h"

#include <fmt/format.h>

#include <stdexcept>

namespace meshrt::mesh {

int64_t Dim::size() const {
  int64_t n = 1;
  for (const Part& p : parts) n *= p.size;
  return n;
}

int64_t Dim::coordinate(int64_t position) const {
  int64_t c = 0;
  for (const Part& p : parts) c = c * p.size + (position / p.stride) % p.size;
  return c;
}

int64_t Dim::base(int64_t position) const {
  for (const Part& p : parts) position -= ((position / p.stride) % p.size) * p.stride;
  return position;
}

int64_t Dim::member(int64_t base, int64_t index) const {
  int64_t position = base;
  for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
    position += (index % it->size) * it->stride;
    index /= it->size;
  }
  return position;
}

std::vector<Dim> row_major(std::span<const int64_t> sizes, std::span<const std::string> names) {
  std::vector<Dim> dims(sizes.size());
  int64_t stride = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    dims[i] = Dim{names[i], {Part{sizes[i], stride}}};
    stride *= sizes[i];
  }
  return dims;
}

std::vector<Dim> unflatten(const Dim& dim, std::span<const int64_t> sizes,
                           std::span<const std::string> names) {
  std::vector<Part> remaining = dim.parts;  // consumed from the back (innermost)
  std::vector<Dim> out(sizes.size());
  for (size_t i = sizes.size(); i-- > 0;) {
    int64_t need = sizes[i];
    std::vector<Part> parts;
    while (need > 1) {
      if (remaining.empty()) throw std::invalid_argument("sizes exceed the dim");
      Part& inner = remaining.back();
      if (inner.size == 1) {
        remaining.pop_back();
        continue;
      }
      if (inner.size % need == 0) {
        parts.insert(parts.begin(), Part{need, inner.stride});
        inner = Part{inner.size / need, inner.stride * need};
        need = 1;
      } else if (need % inner.size == 0) {
        parts.insert(parts.begin(), inner);
        need /= inner.size;
        remaining.pop_back();
      } else {
        throw std::invalid_argument(
            fmt::format("size {} does not divide the dim's factor {}", need, inner.size));
      }
    }
    if (parts.empty()) parts.push_back(Part{1, 1});
    out[i] = Dim{names[i], std::move(parts)};
  }
  for (const Part& p : remaining) {
    if (p.size != 1) throw std::invalid_argument("sizes do not cover the dim");
  }
  return out;
}

Dim flatten(std::span<const Dim> dims, std::string name) {
  Dim out{std::move(name), {}};
  for (const Dim& d : dims) {
    for (const Part& p : d.parts) {
      if (p.size != 1) out.parts.push_back(p);
    }
  }
  if (out.parts.empty()) out.parts.push_back(Part{1, 1});
  return out;
}

}  // namespace meshrt::mesh
