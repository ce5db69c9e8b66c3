// The one error type of meshrt: a code plus the context (rank, communicator, op, sequence number)
// that a user needs to find the failing call in a job of many ranks.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace meshrt {

// What went wrong, coarse enough to branch on.
enum class ErrorCode {
  kInvalidArgument,  // Bad input caught before anything was sent.
  kTimeout,          // A blocking call passed its deadline.
  kPeerFailure,      // A peer closed its connection or died.
  kBackend,          // The backend library reported an error.
  kStore,            // The key-value store failed or refused a request.
  kAborted,          // The communicator was aborted.
  kNotSupported,     // The backend or build lacks the feature.
  kInternal,         // A meshrt bug.
};

// Returns a stable lowercase name ("invalid_argument", "timeout", ...).
std::string_view error_code_name(ErrorCode code);

// Where an error happened. Unknown fields stay at their defaults and are left out of the message.
struct ErrorContext {
  int rank = -1;     // Global rank of the caller.
  std::string comm;  // Communicator name.
  std::string op;    // Operation, e.g. "all_reduce" or "store.get".
  int64_t seq = -1;  // The op's per-communicator sequence number.
};

// Thrown by every meshrt API. what() reads like
// "meshrt [timeout] rank 3, comm 'mesh0/tp', all_reduce #42: <detail>".
class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, ErrorContext context, std::string detail);

  ErrorCode code() const noexcept { return code_; }
  const ErrorContext& context() const noexcept { return context_; }
  // The message without the code and context prefix.
  const std::string& detail() const noexcept { return detail_; }

 private:
  ErrorCode code_;
  ErrorContext context_;
  std::string detail_;
};

}  // namespace meshrt
