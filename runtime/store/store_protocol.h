// The TcpStore wire format, shared by TcpStore (client) and TcpStoreServer.
//
// Every message is a frame: a u32 little-endian body length, then the body. A request body is a
// command byte followed by its arguments; a reply body is a status byte followed by the payload
// (or, for a non-ok status, a human-readable message). Arguments are encoded as:
//   u8, u32, i64  fixed width, little-endian (i64 two's complement)
//   bytes         u32 length, then the bytes
//
// Requests and ok replies (`->`):
//   set          key, value                         -> (empty)
//   get          i64 timeout_ms, key                -> value
//   add          key, i64 delta                     -> i64 new value
//   compare_set  key, expected, desired             -> value after the call
//   wait         i64 timeout_ms, u32 n, n * key     -> (empty)
//   check        u32 n, n * key                     -> u8 all set
//   delete       key                                -> u8 existed
//   num_keys                                        -> i64 count
//   multi_get    i64 timeout_ms, u32 n, n * key     -> n * value
//   multi_set    u32 n, n * (key, value)            -> (empty)
//   ping                                            -> (empty)
//   auth         token                              -> (empty)
// A connection carries one request at a time: the client sends the next request only after it
// has read the reply, so the server never needs to reorder replies.
//
// A server with a token takes an auth request as the first frame of every connection; any other
// first frame, or a wrong token, gets a kUnauthenticated reply and the connection is closed. The
// server also closes a connection after a malformed or oversized frame (replying first), so a
// client drops its connection after any error reply except kTimeout.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/error.h"

namespace meshrt::store_protocol {

// Size of the length prefix in front of every frame body.
inline constexpr size_t kFrameHeaderBytes = 4;
// The largest body a u32 length prefix can describe.
inline constexpr size_t kMaxFrameBodyBytes = UINT32_MAX;

// Request command byte. Values are part of the wire format: append, never renumber.
enum class Command : uint8_t {
  kSet = 1,
  kGet = 2,
  kAdd = 3,
  kCompareSet = 4,
  kWait = 5,
  kCheck = 6,
  kDelete = 7,
  kNumKeys = 8,
  kMultiGet = 9,
  kMultiSet = 10,
  kPing = 11,
  kAuth = 12,
};

// Reply status byte. Values are part of the wire format: append, never renumber.
enum class Status : uint8_t {
  kOk = 0,
  kTimeout = 1,          // A blocking request passed its server-side deadline.
  kInvalidArgument = 2,  // The request was refused (size limits, non-integer add, bad counts).
  kError = 3,            // Anything else the server could not do (malformed frame, ...).
  kUnauthenticated = 4,  // No auth request first, or a wrong token; the connection is closed.
};

// The largest frame a server with a token reads before the client has authenticated: an auth
// request and its token fit easily, and a stranger cannot make the server buffer more.
inline constexpr size_t kMaxUnauthenticatedFrameBytes = 4096;

// Returns the lowercase name of `command` ("set", "multi_get", ...) or "unknown".
std::string_view command_name(Command command);

// Appends one frame to a caller-owned buffer, so a connection can reuse its buffer's capacity.
class FrameWriter {
 public:
  // Clears `buffer` and reserves room for the length prefix.
  explicit FrameWriter(std::vector<char>& buffer);

  // Append one fixed-width little-endian value.
  void u8(uint8_t v);
  void u32(uint32_t v);
  void i64(int64_t v);
  // Writes a u32 length, then the bytes.
  void bytes(std::span<const char> v);
  void bytes(std::string_view v) { bytes(std::span<const char>(v.data(), v.size())); }
  void bytes(const std::string& v) { bytes(std::string_view(v)); }

  // Patches the length prefix; throws Error(kInvalidArgument) if the body exceeds u32 range.
  std::vector<char>& finish();

 private:
  std::vector<char>& buffer_;
};

// Reads arguments from a frame body. Every read throws Error(kStore) on truncation, so a
// malformed frame cannot read past its end.
class FrameReader {
 public:
  explicit FrameReader(std::span<const char> body) : body_(body) {}

  // Read one fixed-width little-endian value.
  uint8_t u8();
  uint32_t u32();
  int64_t i64();
  // Reads a u32 length and returns a view of that many bytes inside the body.
  std::string_view bytes();
  // Reads a count prefix; throws if even `min_item_bytes` per item could not fit in the rest,
  // so a bogus count cannot trigger a huge reservation.
  uint32_t count(size_t min_item_bytes);
  // Bytes not read yet.
  size_t remaining() const { return body_.size() - pos_; }

 private:
  std::span<const char> take(size_t n);

  std::span<const char> body_;
  size_t pos_ = 0;
};

// Decodes a little-endian u32 (the frame length prefix).
uint32_t decode_u32(const char* p);

// An error context for the store operation `op` (e.g. "store.get").
ErrorContext op_context(std::string op);

// Renders a key for error messages: quoted, non-printable bytes escaped, long keys shortened.
std::string quote_key(std::string_view key);
// Renders "key 'a'" or "keys ['a', 'b', ...]" (long lists shortened) for error messages.
std::string describe_keys(std::span<const std::string> keys);

}  // namespace meshrt::store_protocol
