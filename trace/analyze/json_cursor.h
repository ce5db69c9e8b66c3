// A pull parser over JSON text that validates as it goes and builds nothing: the analyzer reads
// a thousand 2 MB dumps in seconds, which a DOM (nlohmann::json::parse: ~15 ms a dump) cannot.
// Callers walk objects key by key, read the values they need and skip the rest. The per-token
// steps are inline: they run tens of millions of times per analysis.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <string_view>

namespace meshrt::trace {

// Malformed or truncated JSON; what() names the byte offset.
class JsonSyntaxError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The kind of the next value, from its first character.
enum class JsonKind { kObject, kArray, kString, kNumber, kBool, kNull };

static_assert(std::endian::native == std::endian::little, "read_string scans little-endian words");

class JsonCursor {
 public:
  explicit JsonCursor(std::string_view text)
      : begin_(text.data()), p_(text.data()), end_(text.data() + text.size()) {}

  // The kind of the next value, without consuming it.
  JsonKind peek() {
    switch (next_char()) {
      case '{':
        return JsonKind::kObject;
      case '[':
        return JsonKind::kArray;
      case '"':
        return JsonKind::kString;
      case 't':
      case 'f':
        return JsonKind::kBool;
      case 'n':
        return JsonKind::kNull;
      default:
        if (*p_ == '-' || is_digit(*p_)) return JsonKind::kNumber;
        fail_unexpected();
    }
  }

  // Consumes `null` when it comes next.
  bool read_null() {
    if (next_char() != 'n') return false;
    expect_literal("null");
    return true;
  }

  // Objects: begin_object(), then next_key() until it returns false (it consumes the separators
  // and the closing brace); read or skip the value after each key.
  void begin_object() {
    expect('{');
    enter();
  }
  bool next_key(std::string_view& key) {
    char c = next_char();
    if (first_) {
      first_ = false;
    } else if (c == ',') {
      ++p_;
      c = next_char();
      if (c != '"') fail("expected a key after ','");
    } else if (c != '}') {
      fail("expected ',' or '}'");
    }
    if (c == '}') {
      ++p_;
      --depth_;
      return false;
    }
    if (c != '"') fail("expected a string key");
    key = read_string();
    expect(':');
    return true;
  }

  // Arrays: begin_array(), then next_element() before each element until it returns false.
  void begin_array() {
    expect('[');
    enter();
  }
  bool next_element() {
    const char c = next_char();
    if (first_) {
      first_ = false;
    } else if (c == ',') {
      ++p_;
      if (next_char() == ']') fail("expected a value after ','");
      return true;
    } else if (c != ']') {
      fail("expected ',' or ']'");
    }
    if (c == ']') {
      ++p_;
      --depth_;
      return false;
    }
    return true;
  }

  // A string, unescaped. The view is valid until the next call on this cursor.
  std::string_view read_string() {
    expect('"');
    const char* start = p_;
    // Eight bytes at a time until one of them is a quote, a backslash or a control character
    // (the lowest flagged byte is exact; little-endian word order).
    constexpr uint64_t kOnes = 0x0101010101010101ULL, kHigh = 0x8080808080808080ULL;
    auto zero_byte = [](uint64_t v) { return (v - kOnes) & ~v & kHigh; };
    while (end_ - p_ >= 8) {
      uint64_t w = 0;
      std::memcpy(&w, p_, 8);
      const uint64_t hit = zero_byte(w ^ (kOnes * '"')) | zero_byte(w ^ (kOnes * '\\')) |
                           ((w - kOnes * 0x20) & ~w & kHigh);
      if (hit != 0) {
        p_ += std::countr_zero(hit) / 8;
        break;
      }
      p_ += 8;
    }
    for (; p_ < end_; ++p_) {
      const auto c = static_cast<unsigned char>(*p_);
      if (c == '"') return {start, static_cast<size_t>(p_++ - start)};
      if (c == '\\' || c < 0x20) return read_string_slow(start);
    }
    return read_string_slow(start);
  }

  // An integer; a number with a fraction or exponent, or beyond 64 bits, is an error.
  int64_t read_int() {
    next_char();
    const char* p = p_;
    const bool negative = *p == '-';
    if (negative) ++p;
    const char* digits = p;
    uint64_t v = 0;
    while (p < end_ && is_digit(*p)) v = v * 10 + static_cast<uint64_t>(*p++ - '0');
    const auto n = p - digits;
    if (n == 0 || n > 19 || (n > 1 && *digits == '0') ||
        v > static_cast<uint64_t>(INT64_MAX) + (negative ? 1 : 0) ||
        (p < end_ && (*p == '.' || *p == 'e' || *p == 'E'))) {
      fail("expected a 64-bit integer");
    }
    p_ = p;
    return negative ? static_cast<int64_t>(0 - v) : static_cast<int64_t>(v);
  }

  // `true` or `false`.
  bool read_bool() {
    if (next_char() == 't') {
      expect_literal("true");
      return true;
    }
    expect_literal("false");
    return false;
  }

  // Validates and steps over one value of any kind.
  void skip_value();
  // Fails unless only whitespace is left.
  void expect_end();

  // Bytes consumed so far.
  size_t offset() const { return static_cast<size_t>(p_ - begin_); }
  // Throws JsonSyntaxError naming the offset.
  [[noreturn]] void fail(std::string_view what) const;

 private:
  static bool is_digit(char c) { return c >= '0' && c <= '9'; }

  // The next non-whitespace character, left unconsumed; fails at the end of the text.
  char next_char() {
    while (p_ < end_ && (*p_ == ' ' || *p_ == '\n' || *p_ == '\r' || *p_ == '\t')) ++p_;
    if (p_ == end_) fail_truncated();
    return *p_;
  }
  void expect(char c) {
    if (next_char() != c) fail_expected(c);
    ++p_;
  }
  void enter() {
    // Deeper than any dump; bounds skip_value's recursion on hostile input.
    if (++depth_ > 256) fail("nested too deeply");
    first_ = true;
  }

  void expect_literal(std::string_view word);
  void skip_compact_integers();
  std::string_view number_token();
  std::string_view read_string_slow(const char* start);
  [[noreturn]] void fail_truncated() const;
  [[noreturn]] void fail_expected(char c) const;
  [[noreturn]] void fail_unexpected() const;

  const char* begin_;
  const char* p_;
  const char* end_;
  size_t depth_ = 0;
  bool first_ = false;  // The next next_key/next_element is the container's first.
  std::string scratch_;
};

}  // namespace meshrt::trace
