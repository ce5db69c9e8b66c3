#include "runtime/store/tcp_store_server.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <chrono>
#include <mutex>
#include <span>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

// Asio after the standard headers: Boost 1.74 uses std::exchange without including <utility>.
#include <boost/asio.hpp>

#include "runtime/error.h"
#include "runtime/store/store_protocol.h"
#include "runtime/timeout.h"

namespace meshrt {
namespace {

namespace asio = boost::asio;
namespace proto = store_protocol;
using asio::ip::tcp;
using boost::system::error_code;
using proto::Command;
using proto::Status;

// Oversized frames are drained in chunks of this size instead of being buffered whole.
constexpr size_t kDrainChunkBytes = size_t{64} << 10;
// Per-connection buffers that grew past this for one big request are released afterwards, so an
// idle connection does not pin a 64 MiB buffer.
constexpr size_t kKeepBufferBytes = size_t{1} << 20;
// Pause before accepting again after an accept error such as EMFILE, so it cannot spin.
constexpr auto kAcceptRetryDelay = std::chrono::milliseconds(50);

// A refusal of one request; it becomes an error reply and the connection stays usable.
struct Refusal {
  Status status;
  std::string message;
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

 private:
  // One client connection. It carries one request at a time: while a request is parked the
  // connection is only watched for a hangup, and the next request is read after the reply.
  struct Session {
    Session(asio::io_context& io, tcp::socket s) : socket(std::move(s)), timer(io) {}

    tcp::socket socket;
    std::array<char, proto::kFrameHeaderBytes> header{};
    std::vector<char> in;   // Current request body.
    std::vector<char> out;  // Current reply frame.
    std::vector<char> drain;
    bool closed = false;
    bool watching = false;  // An async_wait for readability is outstanding.

    // The parked request, valid while `parked`.
    bool parked = false;
    Command wait_command = Command::kGet;
    std::vector<std::string> wait_keys;
    std::string watched_key;  // The missing key whose waiter list holds this session.
    int64_t wait_ms = 0;
    uint64_t wait_generation = 0;  // Tells a stale timer expiry from the current one.
    asio::steady_timer timer;
  };
  using SessionPtr = std::shared_ptr<Session>;

  // Everything below runs on the io thread only, so the store needs no locks.
  void start_accept();
  void close_all();
  void read_header(const SessionPtr& s);
  void drain(const SessionPtr& s, size_t remaining, size_t total, Command command);
  void send(const SessionPtr& s);
  void drop(const SessionPtr& s);
  void watch_for_hangup(const SessionPtr& s);

  void handle_request(const SessionPtr& s);
  void dispatch(const SessionPtr& s, proto::FrameReader& r);
  proto::FrameWriter begin_reply(const SessionPtr& s, Status status);
  void reply_error(const SessionPtr& s, Status status, std::string_view message);

  void check_key(std::string_view key) const;
  void check_value(std::string_view key, std::string_view value) const;
  std::vector<std::string> read_keys(proto::FrameReader& r) const;

  void park(const SessionPtr& s, Command command, std::vector<std::string> keys,
            int64_t timeout_ms);
  bool try_complete(const SessionPtr& s);
  void on_wait_timeout(const SessionPtr& s);
  void unregister_waiter(const SessionPtr& s);
  void notify(const std::string& key);
  void store(std::string_view key, std::string_view value);

  const TcpStoreServerOptions options_;
  asio::io_context io_;
  tcp::acceptor acceptor_{io_};
  asio::steady_timer accept_retry_timer_{io_};
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  uint16_t port_ = 0;
  std::string address_;
  bool stopping_ = false;

  StringMap<std::string> values_;
  // Parked sessions by the one missing key each currently waits for.
  StringMap<std::vector<SessionPtr>> waiters_;
  std::unordered_set<SessionPtr> sessions_;

  std::mutex shutdown_mu_;
  bool shut_down_ = false;  // Guarded by shutdown_mu_.
  std::thread thread_;      // Last: started once everything above exists.
};

TcpStoreServer::Impl::Impl(TcpStoreServerOptions options)
    : options_(std::move(options)), work_(asio::make_work_guard(io_)) {
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
    if (!ec) port_ = acceptor_.local_endpoint(ec).port();
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
    // Closing (not just cancelling) is what wakes a blocked client: it reads EOF.
    s->socket.shutdown(tcp::socket::shutdown_both, ignored);
    s->socket.close(ignored);
  }
  sessions_.clear();
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
    auto s = std::make_shared<Session>(io_, std::move(socket));
    sessions_.insert(s);
    read_header(s);
    start_accept();
  });
}

void TcpStoreServer::Impl::read_header(const SessionPtr& s) {
  asio::async_read(s->socket, asio::buffer(s->header), [this, s](error_code ec, size_t) {
    if (ec || s->closed) return drop(s);
    const uint32_t body_bytes = proto::decode_u32(s->header.data());
    if (body_bytes > options_.max_request_bytes) {
      return drain(s, body_bytes, body_bytes, Command{0});
    }
    try {
      s->in.resize(body_bytes);
    } catch (const std::bad_alloc&) {
      return drain(s, body_bytes, body_bytes, Command{0});
    }
    asio::async_read(s->socket, asio::buffer(s->in), [this, s](error_code body_ec, size_t) {
      if (body_ec || s->closed) return drop(s);
      handle_request(s);
    });
  });
}

void TcpStoreServer::Impl::drain(const SessionPtr& s, size_t remaining, size_t total,
                                 Command command) {
  if (remaining == 0) {
    const std::string_view name = proto::command_name(command);
    return reply_error(
        s, Status::kInvalidArgument,
        fmt::format("{} request of {} bytes exceeds the server's max_request_bytes "
                    "{}; it was discarded",
                    name == "unknown" ? "a" : name, total, options_.max_request_bytes));
  }
  s->drain.resize(std::min(remaining, kDrainChunkBytes));
  asio::async_read(s->socket, asio::buffer(s->drain),
                   [this, s, remaining, total, command](error_code ec, size_t n) {
                     if (ec || s->closed) return drop(s);
                     // The first chunk starts with the command byte: name it in the message.
                     const Command c =
                         remaining == total && n > 0 ? static_cast<Command>(s->drain[0]) : command;
                     drain(s, remaining - n, total, c);
                   });
}

void TcpStoreServer::Impl::send(const SessionPtr& s) {
  if (s->closed) return;
  asio::async_write(s->socket, asio::buffer(s->out), [this, s](error_code ec, size_t) {
    if (ec || s->closed) return drop(s);
    if (s->in.capacity() > kKeepBufferBytes) std::vector<char>().swap(s->in);
    if (s->out.capacity() > kKeepBufferBytes) std::vector<char>().swap(s->out);
    read_header(s);
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
  error_code ignored;
  s->socket.close(ignored);
  sessions_.erase(s);
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
    // Otherwise the client sent more bytes early; they are read after this reply.
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

void TcpStoreServer::Impl::handle_request(const SessionPtr& s) {
  try {
    proto::FrameReader r(s->in);
    dispatch(s, r);
  } catch (const Refusal& refusal) {
    reply_error(s, refusal.status, refusal.message);
  } catch (const Error& e) {
    // A decode error: the frame boundary is intact, so only this request is lost.
    reply_error(s, Status::kError, fmt::format("malformed request: {}", e.detail()));
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
      store(key, fmt::format("{}", result));
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
      if (existed) values_.erase(it);
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
      for (const auto& [key, value] : items) store(key, value);
      begin_reply(s, Status::kOk).finish();
      return send(s);
    }
    case Command::kPing: {
      expect_end();
      begin_reply(s, Status::kOk).finish();
      return send(s);
    }
  }
  refuse(fmt::format("unknown command {}", static_cast<int>(command)));
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
  } else {
    it->second.assign(value);
  }
  notify(it->first);
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

void TcpStoreServer::shutdown() { impl_->shutdown(); }

}  // namespace meshrt
