// torchelastic's error file for native ranks: an uncaught exception is written to
// $TORCHELASTIC_ERROR_FILE in the JSON that torchrun's `@record` writes, so that the launcher
// (meshrun or torchrun) can name the exception in its failure summary instead of only a signal.
#pragma once

#include <cstdint>
#include <exception>
#include <string>

namespace meshrt {

// "<demangled type>: <what()>" of `e`, as torchelastic's "<type name>: <str(e)>"; for a null `e`
// (std::terminate called with no exception) "terminate called without an active exception".
std::string describe_exception(const std::exception_ptr& e);

// The file's text: {"message": {"message": <message>, "extraInfo": {"py_callstack": <callstack>,
// "timestamp": "<unix_seconds>"}}}, the layout of torchelastic's ErrorHandler.record_exception.
std::string error_file_json(const std::string& message, const std::string& callstack,
                            int64_t unix_seconds);

// Writes error_file_json for `e` (with `callstack` and the current time) to `path` through a
// temp file and a rename, so a launcher never reads half a file; false when it could not.
bool write_error_file(const std::string& path, const std::exception_ptr& e,
                      const std::string& callstack);

// When TORCHELASTIC_ERROR_FILE is set (and once per process): installs a std::terminate handler
// that writes the active exception and the call stack there, then calls the handler installed
// before it (the default one prints the exception and aborts). init() calls it.
void install_error_file_handler_from_env();

}  // namespace meshrt
