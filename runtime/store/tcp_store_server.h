// The server side of TcpStore: an in-memory key-value map served over TCP on its own thread.
// Rank 0 (or a launcher) runs one; every rank connects a TcpStore to it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace meshrt {

// Settings of a TcpStoreServer.
struct TcpStoreServerOptions {
  // Address to listen on (an IP literal or a resolvable host name).
  std::string host = "127.0.0.1";
  // Port to listen on; 0 picks a free port (read it back with TcpStoreServer::port()).
  uint16_t port = 0;
  // Longest key accepted; longer keys are refused with kInvalidArgument.
  size_t max_key_bytes = 4096;
  // Largest value accepted (also bounds compare_set's expected value).
  size_t max_value_bytes = size_t{64} << 20;
  // Largest request frame buffered; bigger frames are drained unread and refused, which keeps
  // the connection usable without holding the whole frame in memory.
  size_t max_request_bytes = size_t{256} << 20;
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
  // Binds and listens; throws Error(kStore) naming the address if it cannot.
  explicit TcpStoreServer(TcpStoreServerOptions options = {});
  // Shuts down (see shutdown()).
  ~TcpStoreServer();

  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  // The port actually bound (the picked one when options.port was 0).
  uint16_t port() const;
  // "host:port" from options.host and the bound port, for messages and for clients to dial.
  std::string address() const;

  // Closes the listener and every connection and joins the io thread. Clients blocked in a
  // request see the connection close and fail with kPeerFailure instead of hanging. Idempotent;
  // must not be called from the server's own thread (there is no user code on it).
  void shutdown();

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace meshrt
