#include "runtime/store/store_auth.h"

#include <fmt/format.h>
#include <sys/random.h>

#include <array>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "runtime/error.h"

namespace meshrt {

bool constant_time_equal(std::string_view a, std::string_view b) {
  // Every byte of `a` is visited whatever `b` holds; a length mismatch only reveals the length,
  // which is public (tokens meshrun makes are always 64 digits).
  unsigned diff = a.size() == b.size() ? 0U : 1U;
  for (size_t i = 0; i < a.size(); ++i) {
    const auto x = static_cast<unsigned char>(a[i]);
    const auto y = i < b.size() ? static_cast<unsigned char>(b[i]) : static_cast<unsigned char>(~x);
    diff |= static_cast<unsigned>(x ^ y);
  }
  // Read through a volatile so the compiler cannot turn the loop into an early-exit compare.
  volatile unsigned result = diff;
  return result == 0;
}

std::string generate_store_token() {
  std::array<uint8_t, 32> raw{};
  size_t filled = 0;
  while (filled < raw.size()) {
    const ssize_t n = ::getrandom(raw.data() + filled, raw.size() - filled, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      ErrorContext context;
      context.op = "store.token";
      throw Error(
          ErrorCode::kStore, context,
          fmt::format("cannot read random bytes for a store token: {}", std::strerror(errno)));
    }
    filled += static_cast<size_t>(n);
  }
  std::string hex;
  hex.reserve(raw.size() * 2);
  for (const uint8_t b : raw) hex += fmt::format("{:02x}", b);
  return hex;
}

std::string store_token_from_env() { return store_env(kStoreTokenEnv); }

std::string store_env(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? std::string(value) : std::string();
}

}  // namespace meshrt
