// Gloo's rendezvous store interface on top of a meshrt Store, so Gloo connects through our
// TCP store (Debian's Gloo calls only set, get and wait).
#pragma once

#include <gloo/rendezvous/store.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "runtime/store/store.h"

namespace meshrt {

class GlooStore : public gloo::rendezvous::Store {
 public:
  GlooStore(std::shared_ptr<meshrt::Store> store, std::chrono::milliseconds timeout)
      : store_(std::move(store)), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;
  // The keys set through this adapter, in order.
  const std::vector<std::string>& keys_set() const { return keys_set_; }

 private:
  std::shared_ptr<meshrt::Store> store_;
  std::chrono::milliseconds timeout_;
  std::vector<std::string> keys_set_;
};

}  // namespace meshrt
