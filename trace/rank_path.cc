#include "trace/rank_path.h"

#include <string_view>

namespace meshrt::trace {

std::string path_for_rank(std::string pattern, int global_rank) {
  constexpr std::string_view kField = "{rank}";
  const std::string rank = std::to_string(global_rank);
  // Searching on after the inserted digits: a rank never contains the field again.
  for (size_t at = pattern.find(kField); at != std::string::npos;
       at = pattern.find(kField, at + rank.size())) {
    pattern.replace(at, kField.size(), rank);
  }
  return pattern;
}

}  // namespace meshrt::trace
