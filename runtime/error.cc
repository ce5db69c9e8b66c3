#include "runtime/error.h"

#include <fmt/format.h>

#include "trace/op_kind.h"

namespace meshrt {
namespace {

std::string format_message(ErrorCode code, const ErrorContext& c, const std::string& detail) {
  std::string out = fmt::format("meshrt [{}]", error_code_name(code));
  std::string where;
  auto add = [&where](const std::string& part) {
    if (!where.empty()) where += ", ";
    where += part;
  };
  if (c.rank >= 0) add(fmt::format("rank {}", c.rank));
  if (!c.comm.empty()) add(fmt::format("comm '{}'", c.comm));
  if (!c.op.empty()) {
    std::string op = c.seq >= 0 ? fmt::format("{} #{}", c.op, c.seq) : c.op;
    if (c.peer >= 0 && c.channel_seq > 0) {
      op = trace::p2p_op_text(c.op, c.channel_seq, c.peer);
      if (c.seq >= 0) op += fmt::format(" (p2p_seq_id {})", c.seq);
    } else if (c.op_id >= 0 && c.op_id != c.seq) {
      op += fmt::format(" (op_id {})", c.op_id);
    }
    add(op);
  }
  if (!where.empty()) out += " " + where;
  out += ": ";
  out += detail;
  return out;
}

}  // namespace

std::string_view error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument:
      return "invalid_argument";
    case ErrorCode::kTimeout:
      return "timeout";
    case ErrorCode::kPeerFailure:
      return "peer_failure";
    case ErrorCode::kBackend:
      return "backend";
    case ErrorCode::kStore:
      return "store";
    case ErrorCode::kAborted:
      return "aborted";
    case ErrorCode::kNotSupported:
      return "not_supported";
    case ErrorCode::kInternal:
      return "internal";
  }
  return "unknown";
}

Error::Error(ErrorCode code, ErrorContext context, std::string detail)
    : std::runtime_error(format_message(code, context, detail)),
      code_(code),
      context_(std::move(context)),
      detail_(std::move(detail)) {}

}  // namespace meshrt
