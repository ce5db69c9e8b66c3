// Closed-form rank math of a device mesh: each dim is a list of (size, stride) parts over the
// positions of a rank map, row-major by default. Slicing, flattening and unflattening are
// operations on these lists; coordinates and groups follow without communication.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace meshrt::mesh {

// One factor of a dim: `size` steps of `stride` positions.
struct Part {
  int64_t size = 1;    // Number of steps.
  int64_t stride = 1;  // Positions between two steps.
  // Same size and stride.
  friend bool operator==(const Part&, const Part&) = default;
};

// A mesh dim: parts from the outermost (slowest) to the innermost (fastest). A dim of the
// original mesh has one part; a flattened dim has one part per dim it joins.
struct Dim {
  std::string name;         // The dim's name in its mesh, e.g. "tp".
  std::vector<Part> parts;  // Outermost first.

  // Number of ranks along the dim.
  int64_t size() const;
  // Index of `position` along this dim (its local rank in the dim's group).
  int64_t coordinate(int64_t position) const;
  // The position of this dim's coordinate 0 in the group through `position`.
  int64_t base(int64_t position) const;
  // Position of the member with index `index` in the group whose base is `base`.
  int64_t member(int64_t base, int64_t index) const;
};

// Row-major dims over `sizes`: stride of dim i = product of the sizes after it.
std::vector<Dim> row_major(std::span<const int64_t> sizes, std::span<const std::string> names);

// Splits `dim` into dims of `sizes` (outermost first) named `names`, carving its parts from the
// innermost; throws std::invalid_argument when the sizes do not divide the parts.
std::vector<Dim> unflatten(const Dim& dim, std::span<const int64_t> sizes,
                           std::span<const std::string> names);

// One dim joining `dims` (ascending mesh order), named `name`.
Dim flatten(std::span<const Dim> dims, std::string name);

}  // namespace meshrt::mesh
