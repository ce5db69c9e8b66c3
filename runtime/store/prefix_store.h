// PrefixStore: a namespace inside another Store, so each job or communicator can use short keys
// ("rank0", "uid") without colliding with the others sharing the same server.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "runtime/store/store.h"

namespace meshrt {

// Forwards every call to a base Store with "<prefix>/" prepended to each key. Prefix stores
// nest: PrefixStore("b", PrefixStore("a", s)) uses keys "a/b/<key>" on s. Thread-safe if the
// base store is.
class PrefixStore : public Store {
 public:
  // Throws Error(kInvalidArgument) if `base` is null.
  PrefixStore(std::string prefix, std::shared_ptr<Store> base);

  // The Store interface; see store.h. Error messages name the full (prefixed) keys.
  void set(const std::string& key, std::span<const char> value) override;
  Bytes get(const std::string& key, std::chrono::milliseconds timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  Bytes compare_set(const std::string& key, std::span<const char> expected,
                    std::span<const char> desired) override;
  void wait(std::span<const std::string> keys, std::chrono::milliseconds timeout) override;
  bool check(std::span<const std::string> keys) override;
  bool delete_key(const std::string& key) override;
  // Counts every key of the base store, not only those under this prefix.
  int64_t num_keys() override;
  std::vector<Bytes> multi_get(std::span<const std::string> keys,
                               std::chrono::milliseconds timeout) override;
  void multi_set(std::span<const std::string> keys, std::span<const Bytes> values) override;
  std::string address() const override;

  // The prefix without the trailing "/".
  const std::string& prefix() const { return prefix_; }
  // The wrapped store.
  const std::shared_ptr<Store>& base() const { return base_; }

 private:
  std::string full_key(const std::string& key) const;
  std::vector<std::string> full_keys(std::span<const std::string> keys) const;

  std::string prefix_;
  std::string key_prefix_;  // prefix_ + "/", built once.
  std::shared_ptr<Store> base_;
};

}  // namespace meshrt
