// The libFuzzer entry point every harness in tests/fuzz/ defines, and the check its properties go
// through. Linked with -fsanitize=fuzzer it is libFuzzer's; in the normal build replay_main.cc
// calls it on the saved corpus.
#pragma once

#include <errno.h>  // program_invocation_short_name (GNU)
#include <fmt/core.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <utility>

// Runs one input. Returns 0; a finding is a crash, a sanitizer report, or an exception of a type
// the target does not document (it escapes and terminates the process).
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

// A property the harness checks: when `ok` is false, prints "<program>: " and `what` formatted
// with `context` (the property that failed, and what the caller knows of the input) and aborts,
// which libFuzzer and the replay report as a finding of the input at hand.
template <typename... Context>
void check(bool ok, fmt::format_string<Context...> what, Context&&... context) {
  if (ok) return;
  fmt::print(stderr, "{}: {}\n", program_invocation_short_name,
             fmt::format(what, std::forward<Context>(context)...));
  std::abort();
}
