// Fuzz target `env`: trace/env.h's value parsers on arbitrary variable values. Input: byte 0
// picks the parser and which of two alias names is set, bytes 1-16 (when present) give get_int's
// bounds, the rest is the value (up to its first NUL, as the environment cannot hold one). The
// only documented failure is EnvError, which names the variable; a value that parses must honour
// the bounds asked for, and an empty one is "not given" to every parser (no value, no error).
#include <cstdlib>  // setenv, unsetenv
#include <cstring>
#include <limits>
#include <string>
#include <utility>

#include "tests/fuzz/fuzz_target.h"
#include "trace/env.h"

namespace env = meshrt::trace::env;

namespace {

constexpr const char* kName = "MESHRT_FUZZ_VALUE";
constexpr const char* kAlias = "MESHRT_FUZZ_ALIAS";
// By the input's byte 0, bits 0-1.
constexpr const char* kParsers[] = {"get_int", "get_ms", "get_flag", "get_choice"};

int64_t read_i64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t{p[i]} << (8 * i);
  return static_cast<int64_t>(v);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t mode = data[0];
  int64_t min = std::numeric_limits<int64_t>::min();
  int64_t max = std::numeric_limits<int64_t>::max();
  size_t at = 1;
  if ((mode & 0x10) != 0 && size >= 17) {
    min = read_i64(data + 1);
    max = read_i64(data + 9);
    if (min > max) std::swap(min, max);
    at = 17;
  }
  const std::string value(reinterpret_cast<const char*>(data) + at,
                          strnlen(reinterpret_cast<const char*>(data) + at, size - at));
  // The alias alone, or both (meshrt's own name must win).
  ::unsetenv(kName);
  ::setenv(kAlias, value.c_str(), 1);
  if ((mode & 0x20) != 0) ::setenv(kName, value.c_str(), 1);
  const env::Names names = {kName, kAlias};
  const char* const parser = kParsers[mode & 0x3];
  try {
    // Whether the parser gave a value of the variable's (for get_flag: other than the fallback).
    bool given = false;
    switch (mode & 0x3) {
      case 0: {
        const auto n = env::get_int(names, min, max);
        check(!n || (*n >= min && *n <= max), "get_int gave {} outside [{}, {}] for {:?}",
              n.value_or(0), min, max, value);
        given = n.has_value();
        break;
      }
      case 1: {
        const auto ms = env::get_ms(names, min);
        check(!ms || ms->count() >= min, "get_ms gave {} ms, under its minimum {}, for {:?}",
              ms ? ms->count() : 0, min, value);
        given = ms.has_value();
        break;
      }
      case 2: {
        const bool fallback = (mode & 0x40) != 0;
        given = env::get_flag(names, fallback) != fallback;
        break;
      }
      default: {
        const auto c = env::get_choice(names, {"throw", "abort", "none"});
        check(!c || *c == value, "get_choice gave {:?} for {:?}", c.value_or(""), value);
        given = c.has_value();
        break;
      }
    }
    // Unset or empty is "not given", whatever the parser.
    check(!value.empty() || !given, "{} gave a value for an empty variable", parser);
  } catch (const env::EnvError& e) {
    check(!value.empty(), "{} refused an empty variable: {}", parser, e.what());
    // The message names the variable that gave the value.
    const char* name = (mode & 0x20) != 0 ? kName : kAlias;
    check(std::strstr(e.what(), name) != nullptr, "{}'s error does not name {}: {}", parser, name,
          e.what());
  }
  return 0;
}
