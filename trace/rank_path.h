// Output paths with a `{rank}` field (MESHRT_SCOPE_TREE=run/scope_tree_{rank}.json): the sinks
// that write one file per rank at exit expand the field here, so they all spell it the same way.
#pragma once

#include <string>

namespace meshrt::trace {

// `pattern` with every "{rank}" replaced by `global_rank`.
std::string path_for_rank(std::string pattern, int global_rank);

}  // namespace meshrt::trace
