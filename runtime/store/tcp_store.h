// TcpStore: the client of a TcpStoreServer, the rendezvous store every rank of a job uses.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "runtime/store/store.h"
#include "runtime/store/store_auth.h"

namespace meshrt {

// Settings of a TcpStore client.
struct TcpStoreOptions {
  // Server host (an IP literal or a resolvable host name) and port.
  std::string host = "127.0.0.1";
  uint16_t port = 0;
  // How long to keep retrying the connection: ranks may start before the server does.
  std::chrono::milliseconds connect_timeout{30000};
  // Default timeout of the blocking calls without one, and the reply deadline of the others.
  std::chrono::milliseconds timeout{300000};
  // The job's shared secret, sent right after every (re)connect; empty sends none. Defaults to
  // MESHRT_STORE_TOKEN so every client in a job's process carries the job's token.
  std::string token = store_token_from_env();
  // TLS: the PEM file of the CA that signed the server's certificate; set, the client speaks TLS
  // and checks that the certificate names options.host. Default: MESHRT_STORE_TLS_CA; empty:
  // plain TCP.
  std::string tls_ca_file = store_env("MESHRT_STORE_TLS_CA");
};

// A Store backed by a TcpStoreServer over one TCP connection. Thread-safe: calls from several
// threads are serialized on the connection, so a thread blocked in get() delays the others;
// give each thread its own TcpStore when that matters. If a call fails on the connection
// (server gone, reply deadline passed, an error reply) the connection is dropped and the next
// call reconnects. A server that refuses the token (or its absence) makes the call throw
// Error(kStore) naming the address and "authentication refused".
class TcpStore : public Store {
 public:
  // Connects and authenticates, retrying until options.connect_timeout; throws Error(kTimeout)
  // naming the address if no server answers by then, Error(kStore) if it refuses the token.
  explicit TcpStore(TcpStoreOptions options);
  ~TcpStore() override;

  TcpStore(const TcpStore&) = delete;
  TcpStore& operator=(const TcpStore&) = delete;

  // The Store interface; see store.h.
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

  // Sets `key` to the bytes of `value`.
  void set(const std::string& key, const std::string& value);
  // Sets `key` to the bytes of a C string (without its terminator); avoids an ambiguous call.
  void set(const std::string& key, const char* value);
  // get() with options.timeout.
  Bytes get(const std::string& key);
  // wait() with options.timeout.
  void wait(std::span<const std::string> keys);
  // Round-trips an empty request: checks that the server is alive and answering.
  void ping();

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace meshrt
