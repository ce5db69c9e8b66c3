// meshrt's one way to read environment variables. Every variable is parsed the same way: unset
// and empty mean "not given"; a value that does not parse or is out of range throws EnvError,
// whose message names the variable, its value and what was expected. Aliases (PyTorch's names for
// the same setting) are given as a list, meshrt's own name first: the first one set wins.
#pragma once

#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace meshrt::trace::env {

// A variable's value is malformed: "MESHRT_TIMEOUT_MS='ten': expected an integer >= 1".
class EnvError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// Names of one setting: meshrt's own first, then its aliases.
using Names = std::initializer_list<const char*>;

// The value of the first of `names` that is set and non-empty, with the name that gave it.
struct Value {
  std::string name;
  std::string text;
};
std::optional<Value> lookup(Names names);

// The text of the first of `names` that is set and non-empty.
std::optional<std::string> get(Names names);
// An integer in [min, max]; throws EnvError otherwise.
std::optional<int64_t> get_int(Names names, int64_t min = std::numeric_limits<int64_t>::min(),
                               int64_t max = std::numeric_limits<int64_t>::max());
// A duration in milliseconds, at least `min_ms`; throws EnvError otherwise.
std::optional<std::chrono::milliseconds> get_ms(Names names, int64_t min_ms = 0);
// 1/true/yes/on or 0/false/no/off (any case); unset or empty gives `fallback`. Throws EnvError
// for anything else.
bool get_flag(Names names, bool fallback = false);
// One of `choices`; throws EnvError naming them otherwise.
std::optional<std::string> get_choice(Names names, std::initializer_list<std::string_view> choices);

// Every MESHRT_* variable meshrt reads; docs/architecture.md lists each with where it is read.
const std::vector<std::string_view>& known_variables();
// The known variable nearest to `name` (fewest single-character edits).
std::string_view closest_known_variable(std::string_view name);
// Warns once per process about each MESHRT_* variable set in the environment that meshrt does not
// read (a typo's setting is silently lost otherwise), naming the closest known one.
void warn_unknown_variables();

}  // namespace meshrt::trace::env
