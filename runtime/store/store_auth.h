// The store's shared secret: how a job's token is made, read from the environment and checked;
// and the store's other settings from the environment (TLS files).
#pragma once

#include <string>
#include <string_view>

namespace meshrt {

// The environment variable that carries a job's store token to every process of the job.
inline constexpr const char* kStoreTokenEnv = "MESHRT_STORE_TOKEN";

// Whether `a` equals `b`, in time that depends only on their lengths, never on where they first
// differ, so a stranger cannot learn a token byte by byte from reply times.
bool constant_time_equal(std::string_view a, std::string_view b);

// A fresh token: 32 bytes from the kernel's random source (getrandom), as 64 hex digits. Throws
// Error(kStore) if the kernel gives none.
std::string generate_store_token();

// The value of MESHRT_STORE_TOKEN, or "" when it is unset or empty (no authentication).
std::string store_token_from_env();

// The value of the environment variable `name`, or "" when it is unset.
std::string store_env(const char* name);

}  // namespace meshrt
