// meshrun's live status server (docs/diagnosis.md, "A live view"): node 0 serves the live board
// over HTTP with Boost.Beast, on loopback unless asked otherwise: the page for people at "/", the
// same as JSON for tools at "/status.json" (what `meshtrace live` reads), and each rank's live
// flight-recorder snapshot and thread stacks at "/ranks/<rank>/snapshot" and ".../stacks", and
// the job's Prometheus metrics at "/metrics". Every request must carry the job's token.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "launcher/live_board.h"

namespace meshrt::launcher {

// Settings of the status server.
struct StatusServerOptions {
  std::string host = "127.0.0.1";  // Bound address; loopback keeps the page on this host.
  uint16_t port = 0;               // 0: a free port (see StatusServer::port()).
  // Every request must carry it, as ?token=<it> or "Authorization: Bearer <it>", on every bound
  // address (other users of a host reach its loopback too); the server makes a random one when
  // none is given.
  std::string token;
  std::chrono::milliseconds io_timeout{5000};  // Per read or write of one connection.
  // Bound on the whole request's arrival: a client that dribbles its headers is dropped.
  std::chrono::milliseconds request_timeout{2000};
  // Connections at once. When full, the oldest one still waiting for its request is dropped to
  // make room; only when every one is being answered is a new one told 503.
  int max_connections = 16;
  std::chrono::milliseconds snapshot_wait{3000};  // Bound on the ranks' snapshot answers.
};

// One HTTP answer.
struct HttpReply {
  int status = 200;
  std::string content_type;
  std::string body;
};

// Answers `method` `target` (path and query) from `board`; exposed for tests. `authorization`
// is the request's Authorization header ("" when none). Only GET and HEAD; a request without the
// token (in the query or as a bearer token) is 403, an unknown path 404.
HttpReply answer_status_request(LiveBoard& board, const StatusServerOptions& options,
                                std::string_view method, std::string_view target,
                                std::string_view authorization = {});

// The token to serve with: MESHRT_STATUS_TOKEN when the user set one, else a fresh random one.
std::string status_token_from_env_or_new();

// The thread stacks of a snapshot (its "meshrt_threads" key) as text, a thread per paragraph.
std::string stacks_text(const std::string& snapshot_json);

// Serves from its own threads (one accepting, one per connection) until destroyed.
class StatusServer {
 public:
  // Binds host:port and starts serving; throws std::runtime_error naming both when it cannot.
  StatusServer(StatusServerOptions options, LiveBoard& board);
  ~StatusServer();

  StatusServer(const StatusServer&) = delete;
  StatusServer& operator=(const StatusServer&) = delete;

  // The bound port.
  uint16_t port() const;
  // "http://HOST:PORT/?token=...": the way in, for the job's owner only.
  std::string url() const;
  // The token every request must carry.
  const std::string& token() const;

 private:
  struct Impl;  // Boost.Asio's and Beast's parts, kept out of this header.
  std::unique_ptr<Impl> impl_;
};

}  // namespace meshrt::launcher
