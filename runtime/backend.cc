#include "runtime/backend.h"

#include <fmt/format.h>

#include <thread>

#include "runtime/error.h"

namespace meshrt {

void Backend::run(const Op& op) {
  auto pending = launch(op);
  while (pending->poll().state != PollResult::State::kDone) std::this_thread::yield();
}

std::unique_ptr<PendingOp> Backend::launch(const Op& op) {
  throw Error(ErrorCode::kNotSupported, {-1, "", std::string(op_kind_name(op.kind)), -1},
              fmt::format("backend '{}' runs ops to completion; it launches none", name()));
}

}  // namespace meshrt
