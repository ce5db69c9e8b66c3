// Well-formed UTF-8, as Python's strict decoder and JSON readers want it: dumps carry names,
// scopes, paths and error texts from users and libraries, whose bytes may be anything.
#pragma once

#include <string>
#include <string_view>

namespace meshrt::trace {

// Whether `s` is well-formed UTF-8: no stray continuation bytes, truncated sequences, overlong
// forms, surrogates or code points past U+10FFFF.
bool is_utf8(std::string_view s);

// `s` with each byte that does not start a well-formed sequence replaced by U+FFFD.
std::string repaired_utf8(std::string_view s);

}  // namespace meshrt::trace
