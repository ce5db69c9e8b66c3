#include "trace/env.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <vector>

namespace meshrt::trace::env {
namespace {

[[noreturn]] void bad(const Value& v, std::string_view expected) {
  throw EnvError(fmt::format("{}='{}': expected {}", v.name, v.text, expected));
}

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

std::string range_text(int64_t min, int64_t max) {
  constexpr int64_t kLow = std::numeric_limits<int64_t>::min();
  constexpr int64_t kHigh = std::numeric_limits<int64_t>::max();
  if (min == kLow && max == kHigh) return "an integer";
  if (max == kHigh) return fmt::format("an integer >= {}", min);
  if (min == kLow) return fmt::format("an integer <= {}", max);
  return fmt::format("an integer in [{}, {}]", min, max);
}

}  // namespace

std::optional<Value> lookup(Names names) {
  for (const char* name : names) {
    const char* v = std::getenv(name);
    if (v != nullptr && *v != '\0') return Value{name, v};
  }
  return std::nullopt;
}

std::optional<std::string> get(Names names) {
  auto v = lookup(names);
  if (!v) return std::nullopt;
  return std::move(v->text);
}

std::optional<int64_t> get_int(Names names, int64_t min, int64_t max) {
  const auto v = lookup(names);
  if (!v) return std::nullopt;
  int64_t n = 0;
  const char* begin = v->text.data();
  const char* end = begin + v->text.size();
  const auto [ptr, ec] = std::from_chars(begin, end, n);
  if (ec != std::errc() || ptr != end || n < min || n > max) bad(*v, range_text(min, max));
  return n;
}

std::optional<std::chrono::milliseconds> get_ms(Names names, int64_t min_ms) {
  const auto n = get_int(names, min_ms);
  if (!n) return std::nullopt;
  return std::chrono::milliseconds(*n);
}

bool get_flag(Names names, bool fallback) {
  const auto v = lookup(names);
  if (!v) return fallback;
  const std::string s = lower(v->text);
  if (s == "1" || s == "true" || s == "yes" || s == "on") return true;
  if (s == "0" || s == "false" || s == "no" || s == "off") return false;
  bad(*v, "1/true/yes/on or 0/false/no/off");
}

std::optional<std::string> get_choice(Names names,
                                      std::initializer_list<std::string_view> choices) {
  const auto v = lookup(names);
  if (!v) return std::nullopt;
  for (std::string_view c : choices)
    if (v->text == c) return v->text;
  bad(*v, fmt::format("one of {}", fmt::join(choices, ", ")));
}

}  // namespace meshrt::trace::env
