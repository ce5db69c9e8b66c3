#include "runtime/backends/gloo/gloo_store.h"

namespace meshrt {

void GlooStore::set(const std::string& key, const std::vector<char>& data) {
  store_->set(key, data);
  keys_set_.push_back(key);
}

std::vector<char> GlooStore::get(const std::string& key) { return store_->get(key, timeout_); }

void GlooStore::wait(const std::vector<std::string>& keys) { store_->wait(keys, timeout_); }

void GlooStore::wait(const std::vector<std::string>& keys,
                     const std::chrono::milliseconds& timeout) {
  store_->wait(keys, timeout);
}

}  // namespace meshrt
