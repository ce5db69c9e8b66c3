// Fuzz target `env`: trace/env.h's value parsers on arbitrary variable values. Input: byte 0
// picks the parser and which of two alias names is set, bytes 1-16 (when present) give get_int's
// bounds, the rest is the value (up to its first NUL, as the environment cannot hold one). The
// only documented failure is EnvError; a value that parses must honour the bounds asked for.
#include <cstdlib>
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
  try {
    switch (mode & 0x3) {
      case 0:
        if (const auto n = env::get_int(names, min, max); n && (*n < min || *n > max)) {
          std::abort();
        }
        break;
      case 1:
        if (const auto ms = env::get_ms(names, min); ms && ms->count() < min) std::abort();
        break;
      case 2:
        env::get_flag(names, (mode & 0x40) != 0);
        break;
      default:
        if (const auto c = env::get_choice(names, {"throw", "abort", "none"}); c && *c != value) {
          std::abort();
        }
        break;
    }
    // Unset or empty is "not given", whatever the parser.
    if (value.empty() && env::get(names).has_value()) std::abort();
  } catch (const env::EnvError& e) {
    // The message names the variable that gave the value.
    if (std::strstr(e.what(), (mode & 0x20) != 0 ? kName : kAlias) == nullptr) std::abort();
  }
  return 0;
}
