#include "runtime/store/store_protocol.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

#include "runtime/error.h"

namespace meshrt::store_protocol {
namespace {

// Keys in messages are cut here so a runaway key cannot flood a log line.
constexpr size_t kMaxQuotedKeyChars = 128;
// Lists of keys in messages are cut here for the same reason.
constexpr size_t kMaxDescribedKeys = 8;

void append_le(std::vector<char>& buffer, uint64_t v, size_t n) {
  for (size_t i = 0; i < n; ++i) buffer.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint64_t read_le(const char* p, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v |= uint64_t{static_cast<unsigned char>(p[i])} << (8 * i);
  return v;
}

}  // namespace

std::string_view command_name(Command command) {
  switch (command) {
    case Command::kSet:
      return "set";
    case Command::kGet:
      return "get";
    case Command::kAdd:
      return "add";
    case Command::kCompareSet:
      return "compare_set";
    case Command::kWait:
      return "wait";
    case Command::kCheck:
      return "check";
    case Command::kDelete:
      return "delete";
    case Command::kNumKeys:
      return "num_keys";
    case Command::kMultiGet:
      return "multi_get";
    case Command::kMultiSet:
      return "multi_set";
    case Command::kPing:
      return "ping";
    case Command::kAuth:
      return "auth";
  }
  return "unknown";
}

FrameWriter::FrameWriter(std::vector<char>& buffer) : buffer_(buffer) {
  buffer_.clear();
  buffer_.resize(kFrameHeaderBytes);
}

void FrameWriter::u8(uint8_t v) { buffer_.push_back(static_cast<char>(v)); }

void FrameWriter::u32(uint32_t v) { append_le(buffer_, v, 4); }

void FrameWriter::i64(int64_t v) { append_le(buffer_, static_cast<uint64_t>(v), 8); }

void FrameWriter::bytes(std::span<const char> v) {
  if (v.size() > kMaxFrameBodyBytes) {
    throw Error(ErrorCode::kInvalidArgument, op_context("store.encode"),
                fmt::format("a {}-byte argument does not fit a store frame (max {} bytes)",
                            v.size(), kMaxFrameBodyBytes));
  }
  u32(static_cast<uint32_t>(v.size()));
  buffer_.insert(buffer_.end(), v.begin(), v.end());
}

std::vector<char>& FrameWriter::finish() {
  const size_t body_bytes = buffer_.size() - kFrameHeaderBytes;
  if (body_bytes > kMaxFrameBodyBytes) {
    throw Error(ErrorCode::kInvalidArgument, op_context("store.encode"),
                fmt::format("a {}-byte request does not fit a store frame (max {} bytes)",
                            body_bytes, kMaxFrameBodyBytes));
  }
  for (size_t i = 0; i < kFrameHeaderBytes; ++i) {
    buffer_[i] = static_cast<char>((body_bytes >> (8 * i)) & 0xff);
  }
  return buffer_;
}

std::span<const char> FrameReader::take(size_t n) {
  if (n > remaining()) {
    throw Error(
        ErrorCode::kStore, op_context("store.decode"),
        fmt::format("truncated frame: wanted {} bytes at offset {} of {}", n, pos_, body_.size()));
  }
  auto out = body_.subspan(pos_, n);
  pos_ += n;
  return out;
}

uint8_t FrameReader::u8() { return static_cast<uint8_t>(take(1)[0]); }

uint32_t FrameReader::u32() { return static_cast<uint32_t>(read_le(take(4).data(), 4)); }

int64_t FrameReader::i64() { return static_cast<int64_t>(read_le(take(8).data(), 8)); }

std::string_view FrameReader::bytes() {
  const uint32_t n = u32();
  auto span = take(n);
  return {span.data(), span.size()};
}

uint32_t FrameReader::count(size_t min_item_bytes) {
  const uint32_t n = u32();
  if (min_item_bytes > 0 && n > remaining() / min_item_bytes) {
    throw Error(ErrorCode::kStore, op_context("store.decode"),
                fmt::format("frame claims {} items but only {} bytes remain", n, remaining()));
  }
  return n;
}

ErrorContext op_context(std::string op) {
  ErrorContext context;
  context.op = std::move(op);
  return context;
}

uint32_t decode_u32(const char* p) { return static_cast<uint32_t>(read_le(p, 4)); }

std::string quote_key(std::string_view key) {
  std::string out = "'";
  const size_t shown = std::min(key.size(), kMaxQuotedKeyChars);
  for (size_t i = 0; i < shown; ++i) {
    const auto c = static_cast<unsigned char>(key[i]);
    if (c == '\\' || c == '\'') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      out += fmt::format("\\x{:02x}", c);
    }
  }
  out += '\'';
  if (shown < key.size()) out += fmt::format("... ({} bytes)", key.size());
  return out;
}

std::string describe_keys(std::span<const std::string> keys) {
  if (keys.size() == 1) return "key " + quote_key(keys[0]);
  std::string out = "keys [";
  const size_t shown = std::min(keys.size(), kMaxDescribedKeys);
  for (size_t i = 0; i < shown; ++i) {
    if (i > 0) out += ", ";
    out += quote_key(keys[i]);
  }
  if (shown < keys.size()) out += fmt::format(", ... ({} keys)", keys.size());
  out += ']';
  return out;
}

}  // namespace meshrt::store_protocol
