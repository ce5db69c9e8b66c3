// Where an op was called: the file and line its record, dumps and verdicts name ("diverged at
// train.c:88"). C++ callers get theirs from std::source_location by default; a wrapper (the C
// API, a language binding) passes its own caller's instead.
#pragma once

#include <cstdint>
#include <source_location>

namespace meshrt {

struct CallSite {
  // From the caller's source location: every op's default argument is
  // std::source_location::current(), evaluated where the op is called.
  CallSite(const std::source_location& location = std::source_location::current())  // NOLINT
      : file(location.file_name()), line(location.line()) {}
  // `file` must outlive every record of the op: a string literal such as __FILE__, or interned.
  CallSite(const char* file_name, uint32_t line_number) : file(file_name), line(line_number) {}

  const char* file;  // Static storage.
  uint32_t line;
};

}  // namespace meshrt
