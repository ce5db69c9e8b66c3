#include "trace/run_report.h"

#include "trace/comm_logger.h"
#include "trace/scope_tree.h"

namespace meshrt::trace {

std::string run_report(int global_rank, bool color) {
  std::string out;
  const CommLogger& logger = CommLogger::instance();
  if (logger.options().enabled) {
    out += "\ncomm logger summary, rank " + std::to_string(global_rank) + ":\n" +
           logger.summary_table(global_rank);
  }
  out += "\n" + ScopeTree::instance().table(global_rank, 0, color);
  return out;
}

}  // namespace meshrt::trace
