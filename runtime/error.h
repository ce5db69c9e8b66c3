// The one error type of meshrt: a code plus the context (rank, communicator, op, sequence number)
// that a user needs to find the failing call in a job of many ranks.
//
// Where errors surface: an op call (all_reduce, send, ...) throws kInvalidArgument itself when its
// own arguments are wrong, before anything is sent; every other failure of an op is thrown by
// Work::wait(). Under the watchdog's default policy for init() jobs (MESHRT_ON_TIMEOUT=abort) an op
// that fails with any code but kAborted ends the process (exit status 70) once the flight
// recorders are dumped, before wait() can throw: a program that handles op failures sets
// MESHRT_ON_TIMEOUT=throw (in-process worlds default to throw).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace meshrt {

// What went wrong, coarse enough to branch on, and whether trying again can help. "Recreate"
// means new communicators over live ranks: in practice a restarted job, since a process joins a
// run id and attempt with init() only once.
enum class ErrorCode {
  // A bad argument or configuration. Thrown by the call before anything was sent (the
  // communicator stays usable), or by wait() when ranks disagreed (send/recv sizes, all_to_all
  // splits; in-process: different collectives). Fix the call: retrying it unchanged fails again.
  kInvalidArgument,
  // A deadline passed: an op's timeout (a peer is slow, hung or dead, or ranks called different
  // ops), a store request, or init()'s rendezvous. Ranks may be out of step, so retrying the op on
  // the same communicator is unsafe: recreate it. Only Work::wait(timeout) expiring is harmless:
  // the op runs on and may be waited for again.
  kTimeout,
  // A peer closed its connection or died (Gloo I/O error), an in-process group failed because
  // another rank timed out or aborted, or the store server closed the connection mid-request.
  // Recreate the communicator. A store call may be retried (the next one reconnects), but the
  // failed request may or may not have taken effect.
  kPeerFailure,
  // The backend library failed with neither a timeout nor an I/O error, or a foreign exception
  // (e.g. std::bad_alloc) escaped an op or split. The communicator's state is unknown: recreate.
  kBackend,
  // The store server refused or failed a request, sent a reply that does not decode, or (rank 0
  // in init()) could not listen on master_addr:master_port. Connection problems are not kStore:
  // connecting is retried internally until the connect timeout and a dropped connection is
  // reopened by the next call (those fail as kTimeout or kPeerFailure). Retrying rarely helps;
  // for a listen failure, pick a free port.
  kStore,
  // This communicator was aborted (abort(), or the watchdog under MESHRT_ON_TIMEOUT=throw after
  // an op overran its timeout): every op not yet started and every later one fails with it, and
  // so does one in a Gloo shared-memory exchange. Final: create a new communicator, or shrink()
  // it. Peers waiting on the aborted rank see kPeerFailure (Gloo closes its connections and
  // leaves its shared-memory segment).
  kAborted,
  // The backend or build lacks the feature. Reserved: nothing throws it yet (CUDA buffers on a CPU
  // backend and send/recv to self are kInvalidArgument). Retrying cannot help.
  kNotSupported,
  // A meshrt bug: an internal invariant broke. Retrying cannot help; report it.
  kInternal,
};

// Returns a stable lowercase name ("invalid_argument", "timeout", ...), as what() shows it.
std::string_view error_code_name(ErrorCode code);

// Where an error happened. Unknown fields stay at their defaults and are left out of the message.
struct ErrorContext {
  int rank = -1;     // Global rank of the caller; -1 when unknown.
  std::string comm;  // Communicator (or mesh) name, e.g. "mesh0/tp"; empty when none.
  std::string op;    // Operation, e.g. "all_reduce" or "store.get"; empty when none.
  // The op's number as dumps, logs and meshtrace name it: its collective_seq, or its p2p_seq for
  // a p2p op (PyTorch's Flight Recorder numbering; first = 1); -1 before it was numbered.
  int64_t seq = -1;
  // The communicator's count of all its ops at this one (PyTorch's op_id); shown only where it
  // differs from seq. -1 when unknown.
  int64_t op_id = -1;
  // A p2p op: the peer's global rank and the op's number on the channel with it, which is how
  // what() names it ("recv #2 from rank 3 (p2p_seq_id 5)"), as both ends count it alike.
  int peer = -1;
  int64_t channel_seq = -1;
};

// Thrown by every meshrt API (mesh/layout.h's rank math excepted). what() reads like
// "meshrt [timeout] rank 3, comm 'mesh0/tp', all_reduce #42: <detail>" (with "(op_id 57)" after
// the number when a communicator mixes collectives and p2p ops).
class Error : public std::runtime_error {
 public:
  // Builds what() from the three parts.
  Error(ErrorCode code, ErrorContext context, std::string detail);

  // The code to branch on.
  ErrorCode code() const noexcept { return code_; }
  // Where it happened, as fields.
  const ErrorContext& context() const noexcept { return context_; }
  // The message without the code and context prefix.
  const std::string& detail() const noexcept { return detail_; }

 private:
  ErrorCode code_;
  ErrorContext context_;
  std::string detail_;
};

}  // namespace meshrt
