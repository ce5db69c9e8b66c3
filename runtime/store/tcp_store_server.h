// The server side of TcpStore: an in-memory key-value map served over TCP on its own thread.
// Rank 0 (or a launcher) runs one; every rank connects a TcpStore to it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "runtime/store/store_auth.h"

namespace meshrt {

// Settings of a TcpStoreServer. The limits bound what one client, or a stranger who reaches the
// port, can make the server hold; docs/reliability.md lists them with their defaults.
struct TcpStoreServerOptions {
  // Address to listen on (an IP literal or a resolvable host name). Loopback by default: a store
  // other hosts must reach binds the address they dial, never every interface unless asked.
  std::string host = "127.0.0.1";
  // Port to listen on; 0 picks a free port (read it back with TcpStoreServer::port()).
  uint16_t port = 0;
  // Shared secret (MESHRT_STORE_TOKEN): when non-empty, the first frame of every connection must
  // be an auth request carrying it, else the connection is refused and closed. Empty: no auth.
  std::string token;
  // Longest key accepted; longer keys are refused with kInvalidArgument.
  size_t max_key_bytes = 4096;
  // Largest value accepted (also bounds compare_set's expected value).
  size_t max_value_bytes = size_t{64} << 20;
  // Largest request frame one connection may send: a bigger one is read and discarded in small
  // chunks (never buffered), refused with kInvalidArgument, and the connection closed.
  size_t max_request_bytes = size_t{256} << 20;
  // Largest reply one connection may be sent (a multi_get of big values); a request whose reply
  // would be bigger is refused with kInvalidArgument. With max_request_bytes, this bounds what
  // one connection buffers.
  size_t max_reply_bytes = size_t{256} << 20;
  // Bytes of keys plus values the store may hold; a write that would pass it is refused with
  // kInvalidArgument and changes nothing.
  size_t max_total_bytes = size_t{2} << 30;
  // Keys the store may hold; a write that would add one more is refused likewise.
  size_t max_keys = 1000000;
  // Connections served at once; one more gets an error reply and is closed.
  size_t max_clients = 16384;
  // Requests per second one connection may make (bursts of one second's worth pass); above it
  // the server reads that connection's next request later. 0: no limit.
  uint32_t max_requests_per_second = 50000;
  // How long a frame may take from its first byte to its last, and a reply to be written; a
  // connection that takes longer is closed. Idle time between frames is not limited: a blocking
  // client waits legitimately.
  int64_t frame_timeout_ms = 30000;
  // With a token, how long a new connection may take to authenticate before it is closed.
  int64_t auth_timeout_ms = 10000;
  // TLS: a PEM certificate (chain) and its private key; both set turns TLS on for every
  // connection (clients need the CA, TcpStoreOptions::tls_ca_file). Default: the files named by
  // MESHRT_STORE_TLS_CERT and MESHRT_STORE_TLS_KEY; empty: plain TCP.
  std::string tls_cert_file = store_env("MESHRT_STORE_TLS_CERT");
  std::string tls_key_file = store_env("MESHRT_STORE_TLS_KEY");
  // Listen backlog: a whole job may connect at once at startup.
  int backlog = 1024;
  // Lets a restarted server bind a port still in TIME_WAIT from its predecessor.
  bool reuse_address = true;
};

// Serves the TcpStore protocol. Listens from construction on, so port() is valid right away, and
// serves on one internal io thread: blocking requests (get, wait, multi_get) are parked until
// their keys appear or their deadline passes, so one waiting client never stalls the others.
class TcpStoreServer {
 public:
  // Binds and listens; throws Error(kStore) naming the address if it cannot, or naming the file
  // when a TLS certificate or key cannot be loaded.
  explicit TcpStoreServer(TcpStoreServerOptions options = {});
  // Shuts down (see shutdown()).
  ~TcpStoreServer();

  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  // The port actually bound (the picked one when options.port was 0).
  uint16_t port() const;
  // "host:port" from options.host and the bound port, for messages and for clients to dial.
  std::string address() const;
  // Whether the bound address is a loopback one (only this host can connect).
  bool is_loopback() const;
  // Connections open right now (authenticated or not); for tests and monitoring.
  size_t client_count() const;

  // Closes the listener and every connection and joins the io thread. Clients blocked in a
  // request see the connection close and fail with kPeerFailure instead of hanging. Idempotent;
  // must not be called from the server's own thread (there is no user code on it).
  void shutdown();

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace meshrt
