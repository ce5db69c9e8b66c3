#include "runtime/error_file.h"

#include <cxxabi.h>
#include <execinfo.h>
#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <typeinfo>

#include "trace/atomic_file.h"

namespace meshrt {
namespace {

// Leaked: the handler may run while static destructors do.
std::string* error_file_path = nullptr;
std::terminate_handler previous_handler = nullptr;

std::string demangle(const char* name) {
  int status = 0;
  std::unique_ptr<char, decltype(&std::free)> out(
      abi::__cxa_demangle(name, nullptr, nullptr, &status), &std::free);
  return status == 0 && out ? std::string(out.get()) : std::string(name);
}

// The stack of the thread calling std::terminate. libstdc++ calls it from the throw itself when
// no handler exists (the stack is not unwound), so the frames show where the exception came
// from. Frames of the executable have names only when it was linked with -rdynamic.
[[gnu::noinline]] std::string call_stack() {
  void* frames[64];
  const int n = ::backtrace(frames, 64);
  std::unique_ptr<char*, decltype(&std::free)> symbols(::backtrace_symbols(frames, n), &std::free);
  if (!symbols) return {};
  std::string text = "C++ call stack at std::terminate (most recent call first):\n";
  // Frame 0 is this function, frame 1 the terminate handler.
  for (int i = 2; i < n; ++i) {
    std::string frame = symbols.get()[i];
    // "binary(mangled+0x1f) [0x...]": demangle the name between '(' and '+'.
    const auto open = frame.find('(');
    const auto plus = frame.find('+', open == std::string::npos ? 0 : open);
    if (open != std::string::npos && plus != std::string::npos && plus > open + 1) {
      frame = frame.substr(0, open + 1) +
              demangle(frame.substr(open + 1, plus - open - 1).c_str()) + frame.substr(plus);
    }
    text += fmt::format("  #{} {}\n", i - 2, frame);
  }
  return text;
}

[[noreturn]] void on_terminate() {
  // A second terminate (another thread, or a throw below) goes straight on to the old handler.
  static std::atomic<bool> entered{false};
  if (!entered.exchange(true)) {
    try {
      write_error_file(*error_file_path, std::current_exception(), call_stack());
    } catch (...) {
      // Out of memory, most likely: the old handler still reports the exception.
    }
  }
  if (previous_handler != nullptr) previous_handler();
  std::abort();
}

}  // namespace

std::string describe_exception(const std::exception_ptr& e) {
  if (!e) return "terminate called without an active exception";
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& ex) {
    return demangle(typeid(ex).name()) + ": " + ex.what();
  } catch (...) {
    const std::type_info* type = abi::__cxa_current_exception_type();
    return (type != nullptr ? demangle(type->name()) : std::string("unknown exception")) +
           ": (not derived from std::exception)";
  }
}

std::string error_file_json(const std::string& message, const std::string& callstack,
                            int64_t unix_seconds) {
  const nlohmann::json data = {
      {"message",
       {{"message", message},
        {"extraInfo",
         {{"py_callstack", callstack}, {"timestamp", std::to_string(unix_seconds)}}}}}};
  // what() texts need not be UTF-8; a replaced byte beats no file.
  return data.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

bool write_error_file(const std::string& path, const std::exception_ptr& e,
                      const std::string& callstack) {
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  return trace::write_file_atomically(
      path, error_file_json(describe_exception(e), callstack,
                            std::chrono::duration_cast<std::chrono::seconds>(now).count()));
}

void install_error_file_handler_from_env() {
  static std::once_flag once;
  std::call_once(once, [] {
    const char* path = std::getenv("TORCHELASTIC_ERROR_FILE");
    if (path == nullptr || *path == '\0') return;
    error_file_path = new std::string(path);
    previous_handler = std::set_terminate(on_terminate);
  });
}

}  // namespace meshrt
