#include "trace/analyze/json_cursor.h"

#include <fmt/format.h>

#include <charconv>

namespace meshrt::trace {
namespace {

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

}  // namespace

void JsonCursor::fail(std::string_view what) const {
  throw JsonSyntaxError(fmt::format("invalid JSON at byte {}: {}", offset(), what));
}

void JsonCursor::fail_truncated() const { fail("unexpected end of the text (truncated file?)"); }

void JsonCursor::fail_expected(char c) const {
  fail(fmt::format("expected '{}', found '{}'", c, *p_));
}

void JsonCursor::fail_unexpected() const { fail(fmt::format("unexpected character '{}'", *p_)); }

void JsonCursor::expect_literal(std::string_view word) {
  if (static_cast<size_t>(end_ - p_) < word.size()) {
    p_ = end_;
    fail_truncated();
  }
  if (std::string_view(p_, word.size()) != word) fail(fmt::format("expected '{}'", word));
  p_ += word.size();
}

std::string_view JsonCursor::read_string_slow(const char* start) {
  scratch_.assign(start, p_);
  while (true) {
    if (p_ >= end_) fail("unterminated string (truncated file?)");
    const auto c = static_cast<unsigned char>(*p_);
    if (c == '"') {
      ++p_;
      return scratch_;
    }
    if (c < 0x20) fail("control character in a string");
    if (c != '\\') {
      scratch_ += static_cast<char>(c);
      ++p_;
      continue;
    }
    if (++p_ >= end_) fail("unterminated string (truncated file?)");
    const char e = *p_++;
    switch (e) {
      case '"':
      case '\\':
      case '/':
        scratch_ += e;
        break;
      case 'b':
        scratch_ += '\b';
        break;
      case 'f':
        scratch_ += '\f';
        break;
      case 'n':
        scratch_ += '\n';
        break;
      case 'r':
        scratch_ += '\r';
        break;
      case 't':
        scratch_ += '\t';
        break;
      case 'u': {
        auto hex4 = [&] {
          uint32_t v = 0;
          if (end_ - p_ < 4) fail("unterminated string (truncated file?)");
          const auto r = std::from_chars(p_, p_ + 4, v, 16);
          if (r.ptr != p_ + 4) fail("bad \\u escape");
          p_ += 4;
          return v;
        };
        uint32_t cp = hex4();
        // A UTF-16 surrogate pair is one code point.
        if (cp >= 0xD800 && cp < 0xDC00 && end_ - p_ >= 6 && p_[0] == '\\' && p_[1] == 'u') {
          p_ += 2;
          const uint32_t low = hex4();
          if (low >= 0xDC00 && low < 0xE000) {
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          } else {
            append_utf8(scratch_, cp);
            cp = low;
          }
        }
        append_utf8(scratch_, cp);
        break;
      }
      default:
        fail(fmt::format("bad escape '\\{}'", e));
    }
  }
}

std::string_view JsonCursor::number_token() {
  next_char();
  const char* start = p_;
  if (*p_ == '-') ++p_;
  const char* int_start = p_;
  while (p_ < end_ && is_digit(*p_)) ++p_;
  if (p_ == int_start) fail("expected a number");
  if (p_ - int_start > 1 && *int_start == '0') fail("number with a leading zero");
  if (p_ < end_ && *p_ == '.') {
    const char* frac = ++p_;
    while (p_ < end_ && is_digit(*p_)) ++p_;
    if (p_ == frac) fail("number without digits after '.'");
  }
  if (p_ < end_ && (*p_ == 'e' || *p_ == 'E')) {
    ++p_;
    if (p_ < end_ && (*p_ == '+' || *p_ == '-')) ++p_;
    const char* exp = p_;
    while (p_ < end_ && is_digit(*p_)) ++p_;
    if (p_ == exp) fail("number without exponent digits");
  }
  return {start, static_cast<size_t>(p_ - start)};
}

void JsonCursor::skip_value() {
  std::string_view key;
  switch (peek()) {
    case JsonKind::kObject:
      begin_object();
      while (next_key(key)) skip_value();
      return;
    case JsonKind::kArray:
      begin_array();
      skip_compact_integers();
      while (next_element()) skip_value();
      return;
    case JsonKind::kString:
      read_string();
      return;
    case JsonKind::kNumber:
      number_token();
      return;
    case JsonKind::kBool:
      read_bool();
      return;
    case JsonKind::kNull:
      expect_literal("null");
      return;
  }
}

void JsonCursor::skip_compact_integers() {
  // Rank lists and shapes ("[0,1,2,...]") are the bulk of what is skipped: step over integers
  // separated by bare commas in one tight loop. Anything else (spaces, fractions, a malformed
  // number) is left to the element-by-element path, which validates it; p_ only ever moves
  // past a complete integer, so that path resumes at a ',' or ']'.
  const char* q = p_;
  while (true) {
    const char* n = q;
    if (n < end_ && *n == '-') ++n;
    const char* digits = n;
    while (n < end_ && is_digit(*n)) ++n;
    if (n == digits || (n - digits > 1 && *digits == '0') ||
        (n < end_ && (*n == '.' || *n == 'e' || *n == 'E'))) {
      return;
    }
    p_ = n;
    first_ = false;
    if (n == end_ || *n != ',') return;
    q = n + 1;
  }
}

void JsonCursor::expect_end() {
  while (p_ < end_ && (*p_ == ' ' || *p_ == '\n' || *p_ == '\r' || *p_ == '\t')) ++p_;
  if (p_ != end_) fail("unexpected data after the top-level value");
}

}  // namespace meshrt::trace
