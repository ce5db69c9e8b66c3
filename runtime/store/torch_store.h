// TorchStore: a client of PyTorch's TCPStore, so that ranks started by torchrun join the store its
// agent already serves on MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE=True), as PyTorch's own ranks
// do, instead of binding that port a second time. It speaks the wire protocol of PyTorch 1.13
// (Debian 12's torchrun); launcher/README.md says what later versions change.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "runtime/store/store.h"

namespace meshrt {

// Settings of a TorchStore client.
struct TorchStoreOptions {
  std::string host = "127.0.0.1";  // The agent's store: MASTER_ADDR.
  uint16_t port = 0;               // MASTER_PORT.
  // How long to keep retrying the connection (the agent may start its store after its workers).
  std::chrono::milliseconds connect_timeout{30000};
  // The reply deadline of every call, and the default wait of those without a timeout.
  std::chrono::milliseconds timeout{300000};
};

// A Store on a PyTorch TCPStore server over one TCP connection. Thread-safe (calls are serialized
// on the connection). PyTorch's server has no token and no TLS: it trusts every local client, as
// PyTorch's ranks do. A call that times out or fails drops the connection (a late reply would
// desynchronize it); the next call reconnects. Errors are Error(kTimeout / kStore / kPeerFailure)
// naming the key and the address.
class TorchStore : public Store {
 public:
  // Connects, retrying until options.connect_timeout; throws Error(kTimeout) naming the address
  // when no server answers by then.
  explicit TorchStore(TorchStoreOptions options);
  ~TorchStore() override;
  TorchStore(const TorchStore&) = delete;
  TorchStore& operator=(const TorchStore&) = delete;

  // The Store interface; see store.h. multi_get and multi_set are a get or set per key (PyTorch
  // 1.13 has no batched form).
  void set(const std::string& key, std::span<const char> value) override;
  Bytes get(const std::string& key, std::chrono::milliseconds timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  Bytes compare_set(const std::string& key, std::span<const char> expected,
                    std::span<const char> desired) override;
  void wait(std::span<const std::string> keys, std::chrono::milliseconds timeout) override;
  bool check(std::span<const std::string> keys) override;
  bool delete_key(const std::string& key) override;
  int64_t num_keys() override;
  std::vector<Bytes> multi_get(std::span<const std::string> keys,
                               std::chrono::milliseconds timeout) override;
  void multi_set(std::span<const std::string> keys, std::span<const Bytes> values) override;
  std::string address() const override;

 private:
  // One request: connects if needed, sends `request`, runs `reply` (which reads with read()),
  // and drops the connection if anything fails. `what` names the call in errors.
  template <typename Reply>
  auto call(std::string_view what, const std::vector<char>& request,
            std::chrono::milliseconds deadline, Reply&& reply);
  void connect_locked(std::chrono::milliseconds timeout);
  void close_locked() noexcept;
  // Reads exactly `bytes` bytes before `until`; throws Error.
  void read(void* out, size_t bytes, std::chrono::steady_clock::time_point until);
  Bytes read_bytes(std::chrono::steady_clock::time_point until);

  const TorchStoreOptions options_;
  std::mutex mu_;
  int fd_ = -1;
};

}  // namespace meshrt
