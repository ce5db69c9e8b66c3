// The report a rank prints at the end of a run: the comm logger's summary (when the logger is
// on) and the scope tree at noise level 0 (a bare root when the tree was never enabled), as the
// demos print them.
#pragma once

#include <string>

namespace meshrt::trace {

// The report of global rank `global_rank` (a rank of this process); `color` adds terminal colours
// to the scope tree.
std::string run_report(int global_rank, bool color);

}  // namespace meshrt::trace
