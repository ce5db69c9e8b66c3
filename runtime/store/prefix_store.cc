#include "runtime/store/prefix_store.h"

#include <utility>

#include "runtime/error.h"
#include "runtime/store/store_protocol.h"

namespace meshrt {

PrefixStore::PrefixStore(std::string prefix, std::shared_ptr<Store> base)
    : prefix_(std::move(prefix)), key_prefix_(prefix_ + "/"), base_(std::move(base)) {
  if (!base_) {
    throw Error(ErrorCode::kInvalidArgument, store_protocol::op_context("store.prefix"),
                "PrefixStore '" + prefix_ + "' needs a base store, got null");
  }
}

std::string PrefixStore::full_key(const std::string& key) const { return key_prefix_ + key; }

std::vector<std::string> PrefixStore::full_keys(std::span<const std::string> keys) const {
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const std::string& key : keys) out.push_back(full_key(key));
  return out;
}

void PrefixStore::set(const std::string& key, std::span<const char> value) {
  base_->set(full_key(key), value);
}

Bytes PrefixStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  return base_->get(full_key(key), timeout);
}

int64_t PrefixStore::add(const std::string& key, int64_t delta) {
  return base_->add(full_key(key), delta);
}

Bytes PrefixStore::compare_set(const std::string& key, std::span<const char> expected,
                               std::span<const char> desired) {
  return base_->compare_set(full_key(key), expected, desired);
}

void PrefixStore::wait(std::span<const std::string> keys, std::chrono::milliseconds timeout) {
  base_->wait(full_keys(keys), timeout);
}

bool PrefixStore::check(std::span<const std::string> keys) { return base_->check(full_keys(keys)); }

bool PrefixStore::delete_key(const std::string& key) { return base_->delete_key(full_key(key)); }

int64_t PrefixStore::num_keys() { return base_->num_keys(); }

std::vector<Bytes> PrefixStore::multi_get(std::span<const std::string> keys,
                                          std::chrono::milliseconds timeout) {
  return base_->multi_get(full_keys(keys), timeout);
}

void PrefixStore::multi_set(std::span<const std::string> keys, std::span<const Bytes> values) {
  base_->multi_set(full_keys(keys), values);
}

std::string PrefixStore::address() const { return base_->address(); }

}  // namespace meshrt
