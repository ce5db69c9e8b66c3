#include "runtime/backend.h"

#include <fmt/format.h>

#include "runtime/error.h"

namespace meshrt {

// The communicator calls only the one of run() and launch() that execution_model() names.
void Backend::run(const Op& op) {
  throw Error(ErrorCode::kNotSupported, {-1, "", std::string(op_kind_name(op.kind)), -1},
              fmt::format("backend '{}' launches its ops; it runs none to completion", name()));
}

std::unique_ptr<PendingOp> Backend::launch(const Op& op) {
  throw Error(ErrorCode::kNotSupported, {-1, "", std::string(op_kind_name(op.kind)), -1},
              fmt::format("backend '{}' runs ops to completion; it launches none", name()));
}

std::unique_ptr<Backend> Backend::shrink(const SplitSpec& spec) {
  (void)spec;
  check_can_shrink();  // Throws unless a backend that overrides it also overrides shrink().
  throw Error(ErrorCode::kInternal, {},
              fmt::format("the '{}' backend allows a shrink it cannot do", name()));
}

void Backend::check_can_shrink() const {
  throw Error(ErrorCode::kNotSupported, {},
              fmt::format("the '{}' backend cannot shrink a communicator in abort mode", name()));
}

}  // namespace meshrt
