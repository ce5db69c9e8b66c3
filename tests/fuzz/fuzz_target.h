// The libFuzzer entry point every harness in tests/fuzz/ defines. Linked with -fsanitize=fuzzer
// it is libFuzzer's; in the normal build replay_main.cc calls it on the saved corpus.
#pragma once

#include <cstddef>
#include <cstdint>

// Runs one input. Returns 0; a finding is a crash, a sanitizer report, or an exception of a type
// the target does not document (it escapes and terminates the process).
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
