#include "runtime/collectives/algorithm.h"

#include <array>

namespace meshrt {
namespace {

constexpr std::array<std::string_view, 7> kNames = {
    "library", "slots", "recursive_doubling", "ring", "hierarchical", "mailbox", "none"};

}  // namespace

std::string_view algorithm_name(Algorithm algorithm) {
  return kNames[static_cast<size_t>(algorithm)];
}

std::optional<Algorithm> algorithm_from_name(std::string_view name) {
  for (size_t i = 0; i < kNames.size(); ++i) {
    if (kNames[i] == name) return static_cast<Algorithm>(i);
  }
  return std::nullopt;
}

}  // namespace meshrt
