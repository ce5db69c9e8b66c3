#include "runtime/store/tcp_store_server.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <charconv>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

// Asio after the standard headers: Boost 1.74 uses std::exchange without including <utility>.
#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>

#include "runtime/error.h"
#include "runtime/store/store_auth.h"
#include "runtime/store/store_protocol.h"
#include "runtime/timeout.h"
#include "trace/logging.h"

namespace meshrt {
namespace {

namespace asio = boost::asio;
namespace proto = store_protocol;
using asio::ip::tcp;
using boost::system::error_code;
using proto::Command;
using proto::Status;

// A frame's buffer grows by at most this much per read, so its memory follows the bytes that
// arrived, never the length its header claims.
constexpr size_t kReadChunkBytes = size_t{64} << 10;
// A frame's first read: its header and a small request's whole body, in one system call.
constexpr size_t kFirstReadBytes = 512;
// What a connection being closed after a refusal reads (and discards) per read.
constexpr size_t kDiscardChunkBytes = size_t{4} << 10;
// At most this many refusal lines are logged per second; the rest are counted.
constexpr int kMaxRefusalLogsPerSecond = 20;
// Per-connection buffers that grew past this for one big request are released afterwards, so an
// idle connection does not pin a 64 MiB buffer.
constexpr size_t kKeepBufferBytes = size_t{1} << 20;
// Pause before accepting again after an accept error such as EMFILE, so it cannot spin.
constexpr auto kAcceptRetryDelay = std::chrono::milliseconds(50);

// A refusal of one request; it becomes an error reply. The connection stays usable unless
// `close` (the client broke the protocol).
struct Refusal {
  Status status;
  std::string message;
  bool close = false;
};

// Lets the maps be probed with a string_view key without building a std::string.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
template <typename V>
using StringMap = std::unordered_map<std::string, V, StringHash, std::equal_to<>>;

[[noreturn]] void refuse(std::string message) {
  throw Refusal{Status::kInvalidArgument, std::move(message)};
}

std::string format_host_port(const std::string& host, uint16_t port) {
  // Bracket IPv6 literals so the port stays unambiguous.
  if (host.find(':') != std::string::npos) return fmt::format("[{}]:{}", host, port);
  return fmt::format("{}:{}", host, port);
}

}  // namespace

class TcpStoreServer::Impl {
 public:
  explicit Impl(TcpStoreServerOptions options);
  ~Impl() { shutdown(); }

  void shutdown();
  uint16_t port() const { return port_; }
  const std::string& address() const { return address_; }
  bool is_loopback() const { return loopback_; }
  size_t client_count() const { return client_count_.load(std::memory_order_relaxed); }

 private:
  // One client connection. It carries one request at a time: while a request is parked the
  // connection is only watched for a hangup, and the next request is read after the reply.
  struct Session {
    Session(asio::io_context& io, tcp::socket s, std::string peer_address)
        : socket(std::move(s)), peer(std::move(peer_address)), frame_timer(io), timer(io) {}

    tcp::socket socket;
    // With TLS, the encrypted stream over `socket`; every read and write goes through it.
    std::unique_ptr<asio::ssl::stream<tcp::socket&>> tls;
    const std::string peer;  // "ip:port" of the client, for log lines.
    // A frame's first read: the header and, for most requests, the whole body in one call.
    std::array<char, kFirstReadBytes> first{};
    size_t first_have = 0;
    size_t body_bytes = 0;  // What the current frame's header claims.
    std::vector<char> in;   // The current request body, as much of it as has arrived.
    std::vector<char> out;  // Current reply frame.
    bool closed = false;
    bool watching = false;       // An async_wait for readability is outstanding.
    bool authenticated = false;  // Set at accept when the server has no token.
    bool close_after_send = false;

    // Request rate: a token bucket refilled at max_requests_per_second.
    double rate_tokens = 0;
    std::chrono::steady_clock::time_point rate_refilled_at;

    // Bounds a frame in flight (read or write) and, before auth, the whole handshake.
    asio::steady_timer frame_timer;
    uint64_t frame_generation = 0;   // Tells a stale frame-timer expiry from the current one.
    bool frame_timer_armed = false;  // Disarming an idle timer costs a system call: skipped.

    // The parked request, valid while `parked`.
    bool parked = false;
    Command wait_command = Command::kGet;
    std::vector<std::string> wait_keys;
    std::string watched_key;  // The missing key whose waiter list holds this session.
    int64_t wait_ms = 0;
    uint64_t wait_generation = 0;  // Tells a stale timer expiry from the current one.
    asio::steady_timer timer;      // The parked request's deadline, or a rate-limit pause.
  };
  using SessionPtr = std::shared_ptr<Session>;

  // Reads some bytes / writes all of `buffer`, through TLS when the session has it.
  template <typename Buffer, typename Handler>
  static void read_some(Session& s, const Buffer& buffer, Handler&& handler) {
    if (s.tls) return s.tls->async_read_some(buffer, std::forward<Handler>(handler));
    s.socket.async_read_some(buffer, std::forward<Handler>(handler));
  }
  template <typename Buffer, typename Handler>
  static void write_all(Session& s, const Buffer& buffer, Handler&& handler) {
    if (s.tls) return asio::async_write(*s.tls, buffer, std::forward<Handler>(handler));
    asio::async_write(s.socket, buffer, std::forward<Handler>(handler));
  }

  // Everything below runs on the io thread only, so the store needs no locks.
  void start_accept();
  void start_session(const SessionPtr& s);
  void close_all();
  void read_header(const SessionPtr& s);
  // After a reply went out: close if asked, else read the next request.
  void after_send(const SessionPtr& s);
  void read_body(const SessionPtr& s);
  void on_frame(const SessionPtr& s);
  void send(const SessionPtr& s);
  void drop(const SessionPtr& s);
  void linger_then_close(const SessionPtr& s);
  void discard_until_hangup(const SessionPtr& s);
  void watch_for_hangup(const SessionPtr& s);
  void arm_frame_timer(const SessionPtr& s, int64_t timeout_ms, const char* reason);
  void disarm_frame_timer(const SessionPtr& s);
  void log_refusal(const SessionPtr& s, std::string_view reason);

  void handle_request(const SessionPtr& s);
  void authenticate(const SessionPtr& s);
  void refuse_unauthenticated(const SessionPtr& s, const std::string& reason);
  void dispatch(const SessionPtr& s, proto::FrameReader& r);
  proto::FrameWriter begin_reply(const SessionPtr& s, Status status);
  void reply_error(const SessionPtr& s, Status status, std::string_view message);
  void reply_and_close(const SessionPtr& s, Status status, std::string_view message);

  void check_key(std::string_view key) const;
  void check_value(std::string_view key, std::string_view value) const;
  void check_room(std::span<const std::pair<std::string_view, std::string_view>> writes) const;
  std::vector<std::string> read_keys(proto::FrameReader& r) const;

  void park(const SessionPtr& s, Command command, std::vector<std::string> keys,
            int64_t timeout_ms);
  bool try_complete(const SessionPtr& s);
  void on_wait_timeout(const SessionPtr& s);
  void unregister_waiter(const SessionPtr& s);
  void notify(const std::string& key);
  void store(std::string_view key, std::string_view value);
  void erase(StringMap<std::string>::iterator it);

  const TcpStoreServerOptions options_;
  std::optional<asio::ssl::context> tls_context_;  // Set when TLS is on.
  asio::io_context io_;
  tcp::acceptor acceptor_{io_};
  asio::steady_timer accept_retry_timer_{io_};
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  uint16_t port_ = 0;
  std::string address_;
  bool loopback_ = false;
  bool stopping_ = false;

  StringMap<std::string> values_;
  size_t stored_bytes_ = 0;  // Keys plus values in values_.
  // Parked sessions by the one missing key each currently waits for.
  StringMap<std::vector<SessionPtr>> waiters_;
  std::unordered_set<SessionPtr> sessions_;
  std::atomic<size_t> client_count_{0};  // sessions_.size(), readable from other threads.

  // Refusal log lines in the current second, and those left out.
  std::chrono::steady_clock::time_point refusal_window_start_;
  int refusals_logged_ = 0;
  int64_t refusals_suppressed_ = 0;

  std::mutex shutdown_mu_;
  bool shut_down_ = false;  // Guarded by shutdown_mu_.
  std::thread thread_;      // Last: started once everything above exists.
};

TcpStoreServer::Impl::Impl(TcpStoreServerOptions options)
    : options_(std::move(options)), work_(asio::make_work_guard(io_)) {
  if (options_.tls_cert_file.empty() != options_.tls_key_file.empty()) {
    throw Error(ErrorCode::kInvalidArgument, proto::op_context("store.listen"),
                "TLS needs both a certificate and its key (tls_cert_file, tls_key_file; "
                "MESHRT_STORE_TLS_CERT, MESHRT_STORE_TLS_KEY)");
  }
  if (!options_.tls_cert_file.empty()) {
    tls_context_.emplace(asio::ssl::context::tls_server);
    tls_context_->set_options(asio::ssl::context::default_workarounds |
                              asio::ssl::context::no_sslv2 | asio::ssl::context::no_sslv3 |
                              asio::ssl::context::no_tlsv1 | asio::ssl::context::no_tlsv1_1);
    auto load = [](const std::string& file, auto&& use) {
      try {
        use();
      } catch (const boost::system::system_error& e) {
        throw Error(ErrorCode::kStore, proto::op_context("store.listen"),
                    fmt::format("cannot load the store's TLS file {}: {}", file, e.what()));
      }
    };
    load(options_.tls_cert_file,
         [this] { tls_context_->use_certificate_chain_file(options_.tls_cert_file); });
    load(options_.tls_key_file, [this] {
      tls_context_->use_private_key_file(options_.tls_key_file, asio::ssl::context::pem);
    });
  }
  error_code ec;
  tcp::resolver resolver(io_);
  auto endpoints = resolver.resolve(options_.host, std::to_string(options_.port),
                                    tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (!ec && endpoints.empty()) ec = asio::error::host_not_found;
  if (!ec) {
    const tcp::endpoint endpoint = endpoints.begin()->endpoint();
    acceptor_.open(endpoint.protocol(), ec);
    if (!ec && options_.reuse_address) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec) acceptor_.bind(endpoint, ec);
    if (!ec) acceptor_.listen(options_.backlog, ec);
    if (!ec) {
      const tcp::endpoint bound = acceptor_.local_endpoint(ec);
      port_ = bound.port();
      loopback_ = bound.address().is_loopback();
    }
  }
  if (ec) {
    throw Error(ErrorCode::kStore, proto::op_context("store.listen"),
                fmt::format("cannot listen on {}: {}",
                            format_host_port(options_.host, options_.port), ec.message()));
  }
  address_ = format_host_port(options_.host, port_);
  start_accept();
  thread_ = std::thread([this] { io_.run(); });
}

void TcpStoreServer::Impl::shutdown() {
  std::lock_guard lock(shutdown_mu_);
  if (shut_down_) return;
  shut_down_ = true;
  asio::post(io_, [this] { close_all(); });
  thread_.join();
}

void TcpStoreServer::Impl::close_all() {
  stopping_ = true;
  error_code ignored;
  acceptor_.close(ignored);
  accept_retry_timer_.cancel();
  waiters_.clear();
  for (const auto& s : sessions_) {
    s->closed = true;
    s->parked = false;
    s->timer.cancel();
    s->frame_timer.cancel();
    // Closing (not just cancelling) is what wakes a blocked client: it reads EOF.
    s->socket.shutdown(tcp::socket::shutdown_both, ignored);
    s->socket.close(ignored);
  }
  sessions_.clear();
  client_count_.store(0, std::memory_order_relaxed);
  // Without the guard, run() returns once the aborted handlers above have drained.
  work_.reset();
}

void TcpStoreServer::Impl::start_accept() {
  acceptor_.async_accept([this](error_code ec, tcp::socket socket) {
    if (stopping_ || ec == asio::error::operation_aborted) return;
    if (ec) {
      accept_retry_timer_.expires_after(kAcceptRetryDelay);
      accept_retry_timer_.async_wait([this](error_code wait_ec) {
        if (!wait_ec && !stopping_) start_accept();
      });
      return;
    }
    error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);
    // Only the hangup probe uses a synchronous call, and it must never block the io thread.
    socket.non_blocking(true, ignored);
    const tcp::endpoint remote = socket.remote_endpoint(ignored);
    auto s = std::make_shared<Session>(
        io_, std::move(socket), format_host_port(remote.address().to_string(), remote.port()));
    s->authenticated = options_.token.empty();
    s->rate_tokens = options_.max_requests_per_second;
    s->rate_refilled_at = std::chrono::steady_clock::now();
    const bool full = sessions_.size() >= options_.max_clients;
    sessions_.insert(s);
    client_count_.store(sessions_.size(), std::memory_order_relaxed);
    if (full) {
      const std::string reason =
          fmt::format("the store at {} already serves max_clients {} connections", address_,
                      options_.max_clients);
      log_refusal(s, reason);
      reply_and_close(s, Status::kError, reason);
    } else {
      start_session(s);
    }
    start_accept();
  });
}

void TcpStoreServer::Impl::start_session(const SessionPtr& s) {
  if (!tls_context_) {
    if (!s->authenticated) {
      arm_frame_timer(s, options_.auth_timeout_ms, "did not authenticate in time");
    }
    return read_header(s);
  }
  // The handshake and the auth request share one deadline: a stranger's connection is bounded
  // from its first byte.
  s->tls = std::make_unique<asio::ssl::stream<tcp::socket&>>(s->socket, *tls_context_);
  arm_frame_timer(s, options_.auth_timeout_ms, "did not complete the TLS handshake in time");
  s->tls->async_handshake(asio::ssl::stream_base::server, [this, s](error_code ec) {
    if (s->closed) return;
    if (ec) {
      log_refusal(s, fmt::format("TLS handshake failed: {}; closing it", ec.message()));
      return drop(s);
    }
    if (s->authenticated) {
      disarm_frame_timer(s);
    } else {
      arm_frame_timer(s, options_.auth_timeout_ms, "did not authenticate in time");
    }
    read_header(s);
  });
}

void TcpStoreServer::Impl::arm_frame_timer(const SessionPtr& s, int64_t timeout_ms,
                                           const char* reason) {
  const uint64_t generation = ++s->frame_generation;
  s->frame_timer_armed = true;
  s->frame_timer.expires_after(std::chrono::milliseconds(std::max<int64_t>(timeout_ms, 1)));
  s->frame_timer.async_wait([this, s, generation, reason, timeout_ms](error_code ec) {
    if (ec || s->closed || s->frame_generation != generation) return;
    log_refusal(s, fmt::format("{} ({} ms); closing it", reason, timeout_ms));
    drop(s);
  });
}

void TcpStoreServer::Impl::disarm_frame_timer(const SessionPtr& s) {
  if (!std::exchange(s->frame_timer_armed, false)) return;
  ++s->frame_generation;
  s->frame_timer.cancel();
}

void TcpStoreServer::Impl::log_refusal(const SessionPtr& s, std::string_view reason) {
  // A connection storm must not turn into a log storm: a few lines a second, then a count.
  const auto now = std::chrono::steady_clock::now();
  if (now - refusal_window_start_ >= std::chrono::seconds(1)) {
    if (refusals_suppressed_ > 0) {
      log().warn("store {}: {} more refused or closed connections not logged", address_,
                 refusals_suppressed_);
    }
    refusal_window_start_ = now;
    refusals_logged_ = 0;
    refusals_suppressed_ = 0;
  }
  if (refusals_logged_ >= kMaxRefusalLogsPerSecond) {
    ++refusals_suppressed_;
    return;
  }
  ++refusals_logged_;
  log().warn("store {}: connection from {}: {}", address_, s->peer, reason);
}

void TcpStoreServer::Impl::read_header(const SessionPtr& s) {
  auto buffer = asio::buffer(s->first.data() + s->first_have, s->first.size() - s->first_have);
  read_some(*s, buffer, [this, s](error_code ec, size_t n) {
    if (ec || s->closed) return drop(s);
    s->first_have += n;
    // The frame's clock starts with its first byte, unless the frame came whole in one read (the
    // usual case, and no timer to set); an authenticating connection has the auth timer.
    const bool authenticated_and_idle = s->authenticated && !s->frame_timer_armed;
    auto start_frame_clock = [&] {
      if (authenticated_and_idle) {
        arm_frame_timer(s, options_.frame_timeout_ms, "a frame did not arrive whole in time");
      }
    };
    if (s->first_have < proto::kFrameHeaderBytes) {
      start_frame_clock();
      return read_header(s);
    }
    const size_t got = std::exchange(s->first_have, 0);
    s->body_bytes = proto::decode_u32(s->first.data());
    if (!s->authenticated && s->body_bytes > proto::kMaxUnauthenticatedFrameBytes) {
      return refuse_unauthenticated(
          s, fmt::format("first frame of {} bytes is not an auth request", s->body_bytes));
    }
    if (s->body_bytes > options_.max_request_bytes) {
      const std::string reason = fmt::format(
          "a request of {} bytes exceeds the server's max_request_bytes {}; it was discarded "
          "and the connection closed",
          s->body_bytes, options_.max_request_bytes);
      log_refusal(s, reason);
      return reply_and_close(s, Status::kInvalidArgument, reason);
    }
    const size_t extra = got - proto::kFrameHeaderBytes;
    if (extra > s->body_bytes) {
      // One request at a time: bytes past this frame were sent before its reply was read.
      const std::string reason = "sent a second request before reading the reply to the first";
      log_refusal(s, reason);
      return reply_and_close(s, Status::kInvalidArgument, reason);
    }
    const char* body = s->first.data() + proto::kFrameHeaderBytes;
    s->in.assign(body, body + extra);
    if (extra < s->body_bytes) start_frame_clock();
    read_body(s);
  });
}

void TcpStoreServer::Impl::read_body(const SessionPtr& s) {
  const size_t have = s->in.size();
  if (have == s->body_bytes) return on_frame(s);
  const size_t chunk = std::min(s->body_bytes - have, kReadChunkBytes);
  s->in.resize(have + chunk);
  read_some(*s, asio::buffer(s->in.data() + have, chunk), [this, s, have](error_code ec, size_t n) {
    if (ec || s->closed) return drop(s);
    s->in.resize(have + n);
    read_body(s);
  });
}

void TcpStoreServer::Impl::on_frame(const SessionPtr& s) {
  if (s->authenticated) disarm_frame_timer(s);
  const uint32_t rate = options_.max_requests_per_second;
  if (rate == 0 || !s->authenticated) return handle_request(s);
  const auto now = std::chrono::steady_clock::now();
  const double elapsed_s = std::chrono::duration<double>(now - s->rate_refilled_at).count();
  s->rate_refilled_at = now;
  s->rate_tokens = std::min<double>(rate, s->rate_tokens + elapsed_s * rate);
  if (s->rate_tokens >= 1) {
    s->rate_tokens -= 1;
    return handle_request(s);
  }
  // Over the rate: this request waits for its token. The client is slowed down, not failed.
  const auto pause = std::chrono::duration<double>((1 - s->rate_tokens) / rate);
  s->timer.expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(pause));
  s->timer.async_wait([this, s](error_code ec) {
    if (ec || s->closed) return;
    on_frame(s);
  });
}

void TcpStoreServer::Impl::send(const SessionPtr& s) {
  if (s->closed) return;
  size_t sent = 0;
  if (!s->tls) {
    // A reply fits the socket's buffer nearly always: written at once, it needs neither the
    // reactor nor the frame timer (the socket is non-blocking, see start_accept).
    error_code ec;
    sent = s->socket.write_some(asio::buffer(s->out), ec);
    if (ec == asio::error::would_block || ec == asio::error::try_again) {
      sent = 0;
    } else if (ec) {
      return drop(s);
    } else if (sent == s->out.size()) {
      return after_send(s);
    }
  }
  arm_frame_timer(s, options_.frame_timeout_ms, "the client did not read its reply in time");
  write_all(*s, asio::buffer(s->out) + sent, [this, s](error_code ec, size_t) {
    if (ec || s->closed) return drop(s);
    disarm_frame_timer(s);
    after_send(s);
  });
}

void TcpStoreServer::Impl::after_send(const SessionPtr& s) {
  if (s->close_after_send) return linger_then_close(s);
  if (s->in.capacity() > kKeepBufferBytes) std::vector<char>().swap(s->in);
  if (s->out.capacity() > kKeepBufferBytes) std::vector<char>().swap(s->out);
  read_header(s);
}

void TcpStoreServer::Impl::linger_then_close(const SessionPtr& s) {
  // Closing with unread bytes would reset the connection, and a reset can discard the reply
  // before the client reads it. So stop sending, then read and discard until the client hangs
  // up, within one frame timeout; nothing read is kept beyond one small chunk.
  error_code ignored;
  s->socket.shutdown(tcp::socket::shutdown_send, ignored);
  std::vector<char>().swap(s->out);
  std::vector<char>(kDiscardChunkBytes).swap(s->in);
  arm_frame_timer(s, options_.frame_timeout_ms, "a refused client did not hang up in time");
  discard_until_hangup(s);
}

void TcpStoreServer::Impl::discard_until_hangup(const SessionPtr& s) {
  read_some(*s, asio::buffer(s->in), [this, s](error_code ec, size_t) {
    if (ec || s->closed) return drop(s);
    discard_until_hangup(s);
  });
}

void TcpStoreServer::Impl::drop(const SessionPtr& s) {
  if (s->closed) return;
  s->closed = true;
  if (s->parked) {
    unregister_waiter(s);
    s->parked = false;
  }
  s->timer.cancel();
  s->frame_timer.cancel();
  error_code ignored;
  s->socket.close(ignored);
  sessions_.erase(s);
  client_count_.store(sessions_.size(), std::memory_order_relaxed);
}

void TcpStoreServer::Impl::watch_for_hangup(const SessionPtr& s) {
  if (s->watching) return;
  s->watching = true;
  s->socket.async_wait(tcp::socket::wait_read, [this, s](error_code ec) {
    s->watching = false;
    if (ec || s->closed || !s->parked) return;
    char probe;
    error_code peek_ec;
    const size_t n = s->socket.receive(asio::buffer(&probe, 1), tcp::socket::message_peek, peek_ec);
    if (peek_ec == asio::error::would_block || peek_ec == asio::error::try_again) {
      return watch_for_hangup(s);
    }
    // EOF or a reset: the client is gone, so its waiter must not linger until the deadline.
    if (peek_ec || n == 0) return drop(s);
    // Bytes while its request is parked: a second request before the reply, which the protocol
    // refuses anyway (read_header), or data and then a hang-up that a peek cannot see past.
    // Either way the connection and its waiter go now, not at the request's deadline.
    log_refusal(s, "sent bytes while its request was parked (one request at a time); closed");
    drop(s);
  });
}

proto::FrameWriter TcpStoreServer::Impl::begin_reply(const SessionPtr& s, Status status) {
  proto::FrameWriter w(s->out);
  w.u8(static_cast<uint8_t>(status));
  return w;
}

void TcpStoreServer::Impl::reply_error(const SessionPtr& s, Status status,
                                       std::string_view message) {
  auto w = begin_reply(s, status);
  w.bytes(message);
  w.finish();
  send(s);
}

void TcpStoreServer::Impl::reply_and_close(const SessionPtr& s, Status status,
                                           std::string_view message) {
  s->close_after_send = true;
  reply_error(s, status, message);
}

void TcpStoreServer::Impl::refuse_unauthenticated(const SessionPtr& s, const std::string& reason) {
  // The reason names the peer and what it sent, never the token either side holds.
  log_refusal(s, fmt::format("authentication refused: {}", reason));
  reply_and_close(s, Status::kUnauthenticated, fmt::format("authentication refused: {}", reason));
}

void TcpStoreServer::Impl::authenticate(const SessionPtr& s) {
  proto::FrameReader r(s->in);
  Command command{};
  std::string_view token;
  try {
    command = static_cast<Command>(r.u8());
    if (command == Command::kAuth) {
      token = r.bytes();
      if (r.remaining() != 0) throw Error(ErrorCode::kStore, {}, "trailing bytes");
    }
  } catch (const Error&) {
    return refuse_unauthenticated(s, "malformed first frame");
  }
  if (command != Command::kAuth) {
    return refuse_unauthenticated(
        s, fmt::format("first request was '{}' (command {}), not auth",
                       proto::command_name(command), static_cast<int>(command)));
  }
  if (!constant_time_equal(token, options_.token)) {
    return refuse_unauthenticated(s, "wrong token");
  }
  s->authenticated = true;
  disarm_frame_timer(s);
  begin_reply(s, Status::kOk).finish();
  send(s);
}

void TcpStoreServer::Impl::handle_request(const SessionPtr& s) {
  if (!s->authenticated) return authenticate(s);
  try {
    proto::FrameReader r(s->in);
    dispatch(s, r);
  } catch (const Refusal& refusal) {
    if (refusal.close) {
      log_refusal(s, refusal.message);
      return reply_and_close(s, refusal.status, refusal.message);
    }
    reply_error(s, refusal.status, refusal.message);
  } catch (const Error& e) {
    // A decode error: the client does not speak the protocol; it gets the reason, then the
    // connection is closed.
    const std::string message = fmt::format("malformed request: {}", e.detail());
    log_refusal(s, message);
    reply_and_close(s, Status::kError, message);
  } catch (const std::exception& e) {
    reply_error(s, Status::kError, fmt::format("server error: {}", e.what()));
  }
}

void TcpStoreServer::Impl::dispatch(const SessionPtr& s, proto::FrameReader& r) {
  const auto command = static_cast<Command>(r.u8());
  auto expect_end = [&r, command] {
    if (r.remaining() != 0) {
      throw Error(ErrorCode::kStore, {},
                  fmt::format("{} trailing bytes after a {} request", r.remaining(),
                              proto::command_name(command)));
    }
  };
  switch (command) {
    case Command::kSet: {
      const std::string_view key = r.bytes();
      const std::string_view value = r.bytes();
      expect_end();
      check_key(key);
      check_value(key, value);
      const std::pair<std::string_view, std::string_view> write{key, value};
      check_room({&write, 1});
      store(key, value);
      begin_reply(s, Status::kOk).finish();
      return send(s);
    }
    case Command::kGet: {
      const int64_t timeout_ms = r.i64();
      const std::string_view key = r.bytes();
      expect_end();
      check_key(key);
      return park(s, command, {std::string(key)}, timeout_ms);
    }
    case Command::kAdd: {
      const std::string_view key = r.bytes();
      const int64_t delta = r.i64();
      expect_end();
      check_key(key);
      int64_t current = 0;
      auto it = values_.find(key);
      if (it != values_.end()) {
        const std::string& text = it->second;
        const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), current);
        if (ec != std::errc() || end != text.data() + text.size() || text.empty()) {
          refuse(fmt::format("add on key {}: its value {} is not a decimal integer",
                             proto::quote_key(key), proto::quote_key(text)));
        }
      }
      int64_t result = 0;
      if (__builtin_add_overflow(current, delta, &result)) {
        refuse(fmt::format("add on key {}: {} + {} overflows int64", proto::quote_key(key), current,
                           delta));
      }
      const std::string text = fmt::format("{}", result);
      const std::pair<std::string_view, std::string_view> write{key, text};
      check_room({&write, 1});
      store(key, text);
      auto w = begin_reply(s, Status::kOk);
      w.i64(result);
      w.finish();
      return send(s);
    }
    case Command::kCompareSet: {
      const std::string_view key = r.bytes();
      const std::string_view expected = r.bytes();
      const std::string_view desired = r.bytes();
      expect_end();
      check_key(key);
      check_value(key, desired);
      auto w = begin_reply(s, Status::kOk);
      auto it = values_.find(key);
      const bool matches = it == values_.end() ? expected.empty() : it->second == expected;
      if (matches) {
        const std::pair<std::string_view, std::string_view> write{key, desired};
        check_room({&write, 1});
        store(key, desired);
        w.bytes(desired);
      } else {
        // A missing key that did not match stays missing: its value after the call is empty.
        w.bytes(it == values_.end() ? std::string_view() : std::string_view(it->second));
      }
      w.finish();
      return send(s);
    }
    case Command::kWait:
    case Command::kMultiGet: {
      const int64_t timeout_ms = r.i64();
      std::vector<std::string> keys = read_keys(r);
      expect_end();
      return park(s, command, std::move(keys), timeout_ms);
    }
    case Command::kCheck: {
      const std::vector<std::string> keys = read_keys(r);
      expect_end();
      const bool all_set = std::all_of(
          keys.begin(), keys.end(), [this](const std::string& k) { return values_.contains(k); });
      auto w = begin_reply(s, Status::kOk);
      w.u8(all_set ? 1 : 0);
      w.finish();
      return send(s);
    }
    case Command::kDelete: {
      const std::string_view key = r.bytes();
      expect_end();
      check_key(key);
      auto it = values_.find(key);
      const bool existed = it != values_.end();
      if (existed) erase(it);
      auto w = begin_reply(s, Status::kOk);
      w.u8(existed ? 1 : 0);
      w.finish();
      return send(s);
    }
    case Command::kNumKeys: {
      expect_end();
      auto w = begin_reply(s, Status::kOk);
      w.i64(static_cast<int64_t>(values_.size()));
      w.finish();
      return send(s);
    }
    case Command::kMultiSet: {
      const uint32_t n = r.count(8);
      std::vector<std::pair<std::string_view, std::string_view>> items;
      items.reserve(n);
      for (uint32_t i = 0; i < n; ++i) {
        const std::string_view key = r.bytes();
        const std::string_view value = r.bytes();
        items.emplace_back(key, value);
      }
      expect_end();
      // Validate everything first so a refused multi_set changes nothing.
      for (const auto& [key, value] : items) {
        check_key(key);
        check_value(key, value);
      }
      check_room(items);
      for (const auto& [key, value] : items) store(key, value);
      begin_reply(s, Status::kOk).finish();
      return send(s);
    }
    case Command::kPing: {
      expect_end();
      begin_reply(s, Status::kOk).finish();
      return send(s);
    }
    case Command::kAuth: {
      // Only a repeated auth gets here (the first is handled before dispatch); it must carry
      // the same token, and a server without one accepts any.
      const std::string_view token = r.bytes();
      expect_end();
      if (!options_.token.empty() && !constant_time_equal(token, options_.token)) {
        return refuse_unauthenticated(s, "wrong token on a repeated auth request");
      }
      begin_reply(s, Status::kOk).finish();
      return send(s);
    }
  }
  throw Refusal{Status::kInvalidArgument,
                fmt::format("unknown command {}", static_cast<int>(command)), true};
}

void TcpStoreServer::Impl::check_key(std::string_view key) const {
  if (key.size() > options_.max_key_bytes) {
    refuse(fmt::format("key of {} bytes exceeds max_key_bytes {}: {}", key.size(),
                       options_.max_key_bytes, proto::quote_key(key)));
  }
}

void TcpStoreServer::Impl::check_value(std::string_view key, std::string_view value) const {
  if (value.size() > options_.max_value_bytes) {
    refuse(fmt::format("value of {} bytes for key {} exceeds max_value_bytes {}", value.size(),
                       proto::quote_key(key), options_.max_value_bytes));
  }
}

void TcpStoreServer::Impl::check_room(
    std::span<const std::pair<std::string_view, std::string_view>> writes) const {
  // A batch that writes one key twice is counted twice: conservative, never over the limit.
  int64_t bytes = static_cast<int64_t>(stored_bytes_);
  size_t keys = values_.size();
  for (const auto& [key, value] : writes) {
    auto it = values_.find(key);
    if (it == values_.end()) {
      bytes += static_cast<int64_t>(key.size() + value.size());
      ++keys;
    } else {
      bytes += static_cast<int64_t>(value.size()) - static_cast<int64_t>(it->second.size());
    }
  }
  const std::string_view first_key = writes.empty() ? std::string_view() : writes[0].first;
  if (keys > options_.max_keys && keys > values_.size()) {
    refuse(
        fmt::format("store full: writing key {} would make {} keys, over max_keys {}; "
                    "nothing was written",
                    proto::quote_key(first_key), keys, options_.max_keys));
  }
  if (bytes > static_cast<int64_t>(options_.max_total_bytes) &&
      bytes > static_cast<int64_t>(stored_bytes_)) {
    refuse(
        fmt::format("store full: writing key {} would hold {} bytes of keys and values, over "
                    "max_total_bytes {}; nothing was written",
                    proto::quote_key(first_key), bytes, options_.max_total_bytes));
  }
}

std::vector<std::string> TcpStoreServer::Impl::read_keys(proto::FrameReader& r) const {
  const uint32_t n = r.count(4);
  std::vector<std::string> keys;
  keys.reserve(n);
  for (uint32_t i = 0; i < n; ++i) {
    const std::string_view key = r.bytes();
    check_key(key);
    keys.emplace_back(key);
  }
  return keys;
}

void TcpStoreServer::Impl::store(std::string_view key, std::string_view value) {
  auto it = values_.find(key);
  if (it == values_.end()) {
    it = values_.emplace(std::string(key), std::string(value)).first;
    stored_bytes_ += key.size() + value.size();
  } else {
    stored_bytes_ = stored_bytes_ - it->second.size() + value.size();
    it->second.assign(value);
  }
  notify(it->first);
}

void TcpStoreServer::Impl::erase(StringMap<std::string>::iterator it) {
  stored_bytes_ -= it->first.size() + it->second.size();
  values_.erase(it);
}

void TcpStoreServer::Impl::park(const SessionPtr& s, Command command, std::vector<std::string> keys,
                                int64_t timeout_ms) {
  s->parked = true;
  s->wait_command = command;
  s->wait_keys = std::move(keys);
  s->wait_ms = capped_timeout(std::chrono::milliseconds(timeout_ms)).count();
  const uint64_t generation = ++s->wait_generation;
  if (try_complete(s)) return;
  if (s->wait_ms == 0) return on_wait_timeout(s);
  s->timer.expires_after(std::chrono::milliseconds(s->wait_ms));
  s->timer.async_wait([this, s, generation](error_code ec) {
    if (ec || !s->parked || s->wait_generation != generation) return;
    on_wait_timeout(s);
  });
  watch_for_hangup(s);
}

bool TcpStoreServer::Impl::try_complete(const SessionPtr& s) {
  for (const std::string& key : s->wait_keys) {
    if (!values_.contains(key)) {
      s->watched_key = key;
      waiters_[key].push_back(s);
      return false;
    }
  }
  s->parked = false;
  s->timer.cancel();
  if (s->wait_command == Command::kGet || s->wait_command == Command::kMultiGet) {
    size_t reply_bytes = proto::kFrameHeaderBytes + 1;
    for (const std::string& key : s->wait_keys) reply_bytes += 4 + values_.find(key)->second.size();
    if (reply_bytes > options_.max_reply_bytes) {
      const std::string message =
          fmt::format("the reply to {} of {} would be {} bytes, over max_reply_bytes {}",
                      proto::command_name(s->wait_command), proto::describe_keys(s->wait_keys),
                      reply_bytes, options_.max_reply_bytes);
      s->wait_keys.clear();
      reply_error(s, Status::kInvalidArgument, message);
      return true;
    }
  }
  try {
    auto w = begin_reply(s, Status::kOk);
    if (s->wait_command == Command::kGet || s->wait_command == Command::kMultiGet) {
      for (const std::string& key : s->wait_keys) w.bytes(values_.find(key)->second);
    }
    w.finish();
  } catch (const std::exception& e) {
    // Runs inside another client's request (a set woke us): the failure is this client's.
    s->wait_keys.clear();
    reply_error(s, Status::kError, fmt::format("cannot build the reply: {}", e.what()));
    return true;
  }
  s->wait_keys.clear();
  send(s);
  return true;
}

void TcpStoreServer::Impl::on_wait_timeout(const SessionPtr& s) {
  unregister_waiter(s);
  s->parked = false;
  std::vector<std::string> missing;
  for (const std::string& key : s->wait_keys) {
    if (!values_.contains(key)) missing.push_back(key);
  }
  std::string message;
  if (s->wait_keys.size() == 1) {
    message = fmt::format("key {} was not set within {} ms", proto::quote_key(s->wait_keys[0]),
                          s->wait_ms);
  } else {
    message = fmt::format("{} of {} keys not set within {} ms, missing {}", missing.size(),
                          s->wait_keys.size(), s->wait_ms, proto::describe_keys(missing));
  }
  s->wait_keys.clear();
  reply_error(s, Status::kTimeout, message);
}

void TcpStoreServer::Impl::unregister_waiter(const SessionPtr& s) {
  auto it = waiters_.find(s->watched_key);
  if (it == waiters_.end()) return;
  std::erase(it->second, s);
  if (it->second.empty()) waiters_.erase(it);
}

void TcpStoreServer::Impl::notify(const std::string& key) {
  auto it = waiters_.find(key);
  if (it == waiters_.end()) return;
  std::vector<SessionPtr> woken = std::move(it->second);
  waiters_.erase(it);
  // Each either replies or re-registers under its next missing key.
  for (const SessionPtr& s : woken) try_complete(s);
}

TcpStoreServer::TcpStoreServer(TcpStoreServerOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {}

TcpStoreServer::~TcpStoreServer() = default;

uint16_t TcpStoreServer::port() const { return impl_->port(); }

std::string TcpStoreServer::address() const { return impl_->address(); }

bool TcpStoreServer::is_loopback() const { return impl_->is_loopback(); }

size_t TcpStoreServer::client_count() const { return impl_->client_count(); }

void TcpStoreServer::shutdown() { impl_->shutdown(); }

}  // namespace meshrt
