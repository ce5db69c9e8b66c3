// The key-value store interface: the rendezvous of every job (Gloo connection setup, split
// membership, later NCCL unique ids, dump signals and mesh checks). TcpStore implements it over
// TCP; PrefixStore gives each job or communicator its own namespace on any Store.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace meshrt {

// A store value: raw bytes.
using Bytes = std::vector<char>;

// Abstract key-value store. Every blocking call takes a timeout and throws meshrt::Error
// (code kTimeout) naming the key(s) and the server address when it passes.
class Store {
 public:
  virtual ~Store() = default;

  // Sets `key` to `value`, replacing any old value.
  virtual void set(const std::string& key, std::span<const char> value) = 0;
  // Returns the value of `key`, waiting up to `timeout` for it to be set.
  virtual Bytes get(const std::string& key, std::chrono::milliseconds timeout) = 0;
  // Atomically adds `delta` to the integer at `key` (missing = 0) and returns the new value.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  // Sets `key` to `desired` if its value is `expected` (a missing key matches an empty
  // `expected`); returns the value after the call.
  virtual Bytes compare_set(const std::string& key, std::span<const char> expected,
                            std::span<const char> desired) = 0;
  // Waits until every key in `keys` is set.
  virtual void wait(std::span<const std::string> keys, std::chrono::milliseconds timeout) = 0;
  // Returns true if every key in `keys` is set, without waiting.
  virtual bool check(std::span<const std::string> keys) = 0;
  // Deletes `key`; returns whether it existed.
  virtual bool delete_key(const std::string& key) = 0;
  // Returns the number of keys in the whole store (not only under a prefix).
  virtual int64_t num_keys() = 0;
  // Returns the values of `keys`, waiting up to `timeout` for all of them.
  virtual std::vector<Bytes> multi_get(std::span<const std::string> keys,
                                       std::chrono::milliseconds timeout) = 0;
  // Sets every keys[i] to values[i] in one request.
  virtual void multi_set(std::span<const std::string> keys, std::span<const Bytes> values) = 0;
  // A human-readable address for error messages, e.g. "127.0.0.1:29500".
  virtual std::string address() const = 0;
};

// Convenience: the bytes of a string.
inline std::span<const char> as_bytes(const std::string& s) { return {s.data(), s.size()}; }
// Convenience: a string from store bytes.
inline std::string to_string(const Bytes& b) { return std::string(b.begin(), b.end()); }

// Sets `key` to `value` unless some caller set it first, and only then adds 1 to `counter`: each
// key is counted once, whoever claims it and however often. Returns whether this call claimed it.
// Throws the store's Error.
inline bool claim_once(Store& store, const std::string& key, std::string_view value,
                       const std::string& counter) {
  const Bytes now = store.compare_set(key, {}, std::span<const char>(value));
  if (std::string_view(now.data(), now.size()) != value) return false;
  store.add(counter, 1);
  return true;
}

}  // namespace meshrt
