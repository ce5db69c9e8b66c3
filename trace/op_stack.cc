#include "trace/op_stack.h"

#define UNW_LOCAL_ONLY
#include <libunwind.h>

#include "trace/env.h"
#include "trace/logging.h"

namespace meshrt::trace {

bool op_stacks_enabled() {
  static const bool on = [] {
    try {
      return env::get_flag({"MESHRT_TRACE_STACKS"});
    } catch (const env::EnvError& e) {
      // An op must not fail for a tracing setting: say so once and leave stacks off.
      log().warn("{}; per-op stacks stay off", e.what());
      return false;
    }
  }();
  return on;
}

std::shared_ptr<const OpStack> capture_op_stack() {
  if (!op_stacks_enabled()) return nullptr;
  auto stack = std::make_shared<OpStack>();
  stack->depth = unw_backtrace(stack->pcs.data(), OpStack::kMaxFrames);
  return stack;
}

}  // namespace meshrt::trace
