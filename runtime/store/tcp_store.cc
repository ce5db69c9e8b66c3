#include "runtime/store/tcp_store.h"

#include <fmt/format.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>
#include <utility>

// Asio after the standard headers: Boost 1.74 uses std::exchange without including <utility>.
#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>

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
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

// How long past a blocking call's own timeout the client waits for the server's reply: the
// server answers at the timeout itself, so this only catches a hung or unreachable server.
constexpr milliseconds kReplyMargin{2000};
// Connect retry backoff: starts fast for the common "server is a moment late" case.
constexpr milliseconds kFirstRetryDelay{10};
constexpr milliseconds kReconnectTimeout{2000};
constexpr milliseconds kMaxRetryDelay{500};
// A reply's buffer grows by at most this much per read.
constexpr size_t kReadChunkBytes = size_t{1} << 20;
// Receive buffers that grew past this for one big reply are released afterwards.
constexpr size_t kKeepBufferBytes = size_t{1} << 20;

std::string format_host_port(const std::string& host, uint16_t port) {
  if (host.find(':') != std::string::npos) return fmt::format("[{}]:{}", host, port);
  return fmt::format("{}:{}", host, port);
}

ErrorContext context_for(Command command) {
  return proto::op_context(fmt::format("store.{}", proto::command_name(command)));
}

ErrorCode code_for(Status status) {
  switch (status) {
    case Status::kTimeout:
      return ErrorCode::kTimeout;
    case Status::kInvalidArgument:
      return ErrorCode::kInvalidArgument;
    default:
      return ErrorCode::kStore;
  }
}

// " of key 'a'" / " of keys [...]" / "" for keyless commands.
std::string of_keys(std::span<const std::string> keys) {
  return keys.empty() ? std::string() : " of " + proto::describe_keys(keys);
}

}  // namespace

class TcpStore::Impl {
 public:
  explicit Impl(TcpStoreOptions options)
      : options_(std::move(options)), address_(format_host_port(options_.host, options_.port)) {
    if (!options_.tls_ca_file.empty()) {
      tls_context_.emplace(asio::ssl::context::tls_client);
      tls_context_->set_options(asio::ssl::context::default_workarounds |
                                asio::ssl::context::no_sslv2 | asio::ssl::context::no_sslv3 |
                                asio::ssl::context::no_tlsv1 | asio::ssl::context::no_tlsv1_1);
      try {
        tls_context_->load_verify_file(options_.tls_ca_file);
      } catch (const boost::system::system_error& e) {
        throw Error(ErrorCode::kStore, proto::op_context("store.connect"),
                    fmt::format("cannot load the CA file {} for store {}: {}", options_.tls_ca_file,
                                address_, e.what()));
      }
    }
    connect();
  }

  const TcpStoreOptions& options() const { return options_; }
  const std::string& address() const { return address_; }

  // Sends one request and decodes its ok reply. `build` writes the arguments after the command
  // byte, `parse` reads the reply payload; the whole exchange must finish within `wait` plus a
  // margin. `keys` only name the request in error messages.
  template <typename Build, typename Parse>
  auto call(Command command, std::span<const std::string> keys, milliseconds wait, Build&& build,
            Parse&& parse) {
    std::lock_guard lock(mu_);
    {
      proto::FrameWriter w(out_);
      w.u8(static_cast<uint8_t>(command));
      build(w);
      w.finish();
    }
    proto::FrameReader r = exchange(command, keys, wait);
    try {
      auto result = parse(r);
      release_big_buffers();
      return result;
    } catch (const Error& e) {
      // A reply we cannot decode means the stream is out of step; start over on a new one.
      close();
      throw Error(
          ErrorCode::kStore, context_for(command),
          fmt::format("bad reply from store {}{}: {}", address_, of_keys(keys), e.detail()));
    }
  }

 private:
  // Runs one async operation until it completes or `deadline` passes. On the deadline the
  // socket is closed (cancelling the operation) and timed_out is returned.
  template <typename Start>
  error_code run_until(Start&& start, Clock::time_point deadline) {
    std::optional<error_code> result;
    start([&result](const error_code& ec, auto&&...) { result = ec; });
    io_.restart();
    io_.run_until(deadline);
    if (!result) {
      close();
      // Let the cancelled operation finish so its handler never runs after `result` is gone.
      io_.restart();
      io_.run();
      return asio::error::timed_out;
    }
    return *result;
  }

  void connect() {
    // Waiting for a server that is not up yet is rendezvous; a server that went away after we
    // reached it is usually a job that ended, so reconnecting gets a short grace, not the wait.
    const milliseconds budget = connected_once_
                                    ? std::min(options_.connect_timeout, kReconnectTimeout)
                                    : options_.connect_timeout;
    const Clock::time_point deadline = Clock::now() + capped_timeout(budget);
    milliseconds retry_delay = kFirstRetryDelay;
    error_code last_ec;
    bool reached_server = false;
    tcp::resolver resolver(io_);
    for (;;) {
      error_code ec;
      auto endpoints = resolver.resolve(options_.host, std::to_string(options_.port),
                                        tcp::resolver::numeric_service, ec);
      if (ec) last_ec = ec;
      for (const auto& entry : endpoints) {
        close();
        ec = run_until([&](auto&& handler) { socket_.async_connect(entry.endpoint(), handler); },
                       deadline);
        if (!ec) {
          error_code ignored;
          socket_.set_option(tcp::no_delay(true), ignored);
          reached_server = true;
          ec = start_tls(deadline);
        }
        if (!ec) ec = authenticate(deadline);
        if (!ec) {
          connected_once_ = true;
          return;
        }
        // A refusal says more than the deadline cutting the last attempt short.
        if (ec != asio::error::timed_out || !last_ec) last_ec = ec;
      }
      close();
      const Clock::time_point now = Clock::now();
      if (now >= deadline) {
        // Reached, then hung up on during the handshake: most likely TLS on one side only.
        const char* hint = !reached_server ? ""
                           : tls_context_  ? "; the server accepted but closed each connection"
                                             ": does it serve TLS?"
                                           : "; the server accepted but closed each connection"
                                             ": does it expect TLS (MESHRT_STORE_TLS_CA)?";
        throw Error(
            ErrorCode::kTimeout, proto::op_context("store.connect"),
            fmt::format("could not connect to store {} within {} ms (last error: {}){}", address_,
                        budget.count(), last_ec ? last_ec.message() : "none", hint));
      }
      // The server may simply not be up yet (the rendezvous case): back off and retry.
      std::this_thread::sleep_for(std::min<Clock::duration>(retry_delay, deadline - now));
      retry_delay = std::min(retry_delay * 2, kMaxRetryDelay);
    }
  }

  void close() {
    error_code ignored;
    socket_.close(ignored);
  }

  // Runs the TLS handshake on a fresh connection, checking that the server's certificate is
  // signed by the CA and names options.host. A connection lost during it is returned (retried
  // like a failed connect); a certificate that fails the checks throws.
  error_code start_tls(Clock::time_point deadline) {
    if (!tls_context_) return {};
    // A new session per connection; the old one's operations all finished (see run_until).
    tls_ = std::make_unique<asio::ssl::stream<tcp::socket&>>(socket_, *tls_context_);
    tls_->set_verify_mode(asio::ssl::verify_peer);
    tls_->set_verify_callback(asio::ssl::host_name_verification(options_.host));
    const error_code ec = run_until(
        [&](auto&& handler) { tls_->async_handshake(asio::ssl::stream_base::client, handler); },
        deadline);
    if (ec && ec.category() == asio::error::get_ssl_category()) {
      close();
      throw Error(ErrorCode::kStore, proto::op_context("store.connect"),
                  fmt::format("TLS handshake with store {} failed: {} (CA file {})", address_,
                              ec.message(), options_.tls_ca_file));
    }
    if (ec) close();
    return ec;
  }

  // Writes all of `buffer` / reads exactly `buffer`, through TLS when it is on.
  template <typename Buffer>
  error_code write_all(const Buffer& buffer, Clock::time_point deadline) {
    return run_until(
        [&](auto&& handler) {
          if (tls_) return asio::async_write(*tls_, buffer, handler);
          asio::async_write(socket_, buffer, handler);
        },
        deadline);
  }
  template <typename Buffer>
  error_code read_exactly(const Buffer& buffer, Clock::time_point deadline) {
    return run_until(
        [&](auto&& handler) {
          if (tls_) return asio::async_read(*tls_, buffer, handler);
          asio::async_read(socket_, buffer, handler);
        },
        deadline);
  }

  // Sends the token on a fresh connection. An I/O error is returned (the caller retries like a
  // failed connect); a refusal throws, since retrying with the same token cannot help.
  error_code authenticate(Clock::time_point deadline) {
    if (options_.token.empty()) return {};
    std::vector<char> request;
    proto::FrameWriter w(request);
    w.u8(static_cast<uint8_t>(Command::kAuth));
    w.bytes(options_.token);
    w.finish();
    std::vector<char> reply;
    const error_code ec = round_trip(request, reply, deadline);
    if (ec) {
      close();
      return ec;
    }
    check_reply_status(reply, Command::kAuth);
    return {};
  }

  // Writes `request` and reads one reply frame into `reply`, by `deadline`.
  error_code round_trip(const std::vector<char>& request, std::vector<char>& reply,
                        Clock::time_point deadline) {
    if (!tls_) return round_trip_plain(request, reply, deadline);
    error_code ec = write_all(asio::buffer(request), deadline);
    if (!ec) ec = read_exactly(asio::buffer(header_), deadline);
    // The reply's memory follows its bytes, not its header: whatever answers on the port (it
    // may not be our server yet) cannot make us allocate 4 GiB with five bytes.
    const size_t reply_bytes = ec ? 0 : proto::decode_u32(header_.data());
    reply.clear();
    while (!ec && reply.size() < reply_bytes) {
      const size_t have = reply.size();
      reply.resize(have + std::min(reply_bytes - have, kReadChunkBytes));
      ec = read_exactly(asio::buffer(reply.data() + have, reply.size() - have), deadline);
    }
    return ec;
  }

  // round_trip without TLS, on the socket's descriptor: a send, then poll() and recv() until the
  // reply is whole, header and body together when they arrive together. Three system calls for
  // a small op, where Asio's run_until() made seven (an epoll_wait per operation and a
  // speculative recv that fails first); docs/performance.md, "Store".
  error_code round_trip_plain(const std::vector<char>& request, std::vector<char>& reply,
                              Clock::time_point deadline) {
    const int fd = socket_.native_handle();
    auto fail = [this](error_code ec) {
      close();
      return ec;
    };
    // Waits until `fd` is ready for `events`; timed_out once `deadline` has passed.
    auto ready = [&](short events) -> error_code {
      for (;;) {
        const auto left = std::chrono::ceil<milliseconds>(deadline - Clock::now());
        if (left.count() <= 0) return asio::error::timed_out;
        pollfd p{fd, events, 0};
        const int n = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), INT32_MAX)));
        if (n > 0) return {};
        if (n < 0 && errno != EINTR) return {errno, boost::system::system_category()};
      }
    };
    for (size_t sent = 0; sent < request.size();) {
      const ssize_t n =
          ::send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        sent += static_cast<size_t>(n);
      } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
        if (const error_code ec = ready(POLLOUT)) return fail(ec);
      } else if (errno != EINTR) {
        return fail({errno, boost::system::system_category()});
      }
    }
    // The header lands in header_ and, when it came in the same segment, the start of the body
    // in reply; the reply's memory still follows its bytes, never its header's say-so.
    reply.clear();
    size_t header_have = 0;
    size_t reply_bytes = 0;
    std::array<char, 4096> scratch;
    for (;;) {
      if (const error_code ec = ready(POLLIN)) return fail(ec);
      const bool in_header = header_have < header_.size();
      char* into = in_header ? scratch.data() : nullptr;
      size_t room = scratch.size();
      if (!in_header) {
        const size_t have = reply.size();
        reply.resize(have + std::min(reply_bytes - have, kReadChunkBytes));
        into = reply.data() + have;
        room = reply.size() - have;
      }
      const ssize_t n = ::recv(fd, into, room, MSG_DONTWAIT);
      if (n == 0) return fail(asio::error::eof);
      if (n < 0) {
        if (!in_header) reply.resize(reply.size() - room);
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) continue;
        return fail({errno, boost::system::system_category()});
      }
      size_t got = static_cast<size_t>(n);
      if (!in_header) {
        reply.resize(reply.size() - room + got);
      } else {
        const size_t take = std::min(got, header_.size() - header_have);
        std::copy_n(scratch.data(), take, header_.data() + header_have);
        header_have += take;
        if (header_have < header_.size()) continue;
        reply_bytes = proto::decode_u32(header_.data());
        // Bytes beyond this reply would be a reply to nothing: the stream is out of step.
        if (got - take > reply_bytes) return fail(asio::error::message_size);
        reply.assign(scratch.data() + take, scratch.data() + got);
      }
      if (reply.size() == reply_bytes) return {};
    }
  }

  // Throws for an error reply; returns a reader positioned after an ok status.
  proto::FrameReader check_reply_status(const std::vector<char>& reply, Command command) {
    proto::FrameReader r(reply);
    const auto status = static_cast<Status>(r.u8());
    if (status == Status::kOk) return r;
    const std::string message(r.bytes());
    // After any refusal but a timeout the server may close the connection: start afresh.
    if (status != Status::kTimeout) close();
    if (status == Status::kUnauthenticated) {
      throw Error(ErrorCode::kStore, context_for(command),
                  fmt::format("store {} refused this client: {} ({})", address_, message,
                              options_.token.empty()
                                  ? "this client has no token; set MESHRT_STORE_TOKEN to the job's"
                                  : "this client's token is not the job's MESHRT_STORE_TOKEN"));
    }
    throw Error(code_for(status), context_for(command),
                fmt::format("{} (store {})", message, address_));
  }

  void release_big_buffers() {
    if (in_.capacity() > kKeepBufferBytes) std::vector<char>().swap(in_);
    if (out_.capacity() > kKeepBufferBytes) std::vector<char>().swap(out_);
  }

  // Writes out_ and reads the reply into in_; returns a reader positioned after an ok status.
  proto::FrameReader exchange(Command command, std::span<const std::string> keys,
                              milliseconds wait) {
    if (!socket_.is_open()) connect();
    const Clock::time_point deadline = Clock::now() + capped_timeout(wait) + kReplyMargin;
    const error_code ec = round_trip(out_, in_, deadline);
    if (ec == asio::error::timed_out) {
      throw Error(ErrorCode::kTimeout, context_for(command),
                  fmt::format("no reply from store {} within {} ms to {}{}; connection dropped",
                              address_, (capped_timeout(wait) + kReplyMargin).count(),
                              proto::command_name(command), of_keys(keys)));
    }
    if (ec) {
      close();
      throw Error(ErrorCode::kPeerFailure, context_for(command),
                  fmt::format("store {} closed the connection during {}{}: {}", address_,
                              proto::command_name(command), of_keys(keys), ec.message()));
    }
    return check_reply_status(in_, command);
  }

  const TcpStoreOptions options_;
  const std::string address_;
  std::mutex mu_;  // Serializes calls: the connection carries one request at a time.
  asio::io_context io_;
  tcp::socket socket_{io_};
  std::optional<asio::ssl::context> tls_context_;         // Set when TLS is on.
  std::unique_ptr<asio::ssl::stream<tcp::socket&>> tls_;  // The current connection's.
  bool connected_once_ = false;
  std::array<char, proto::kFrameHeaderBytes> header_{};
  std::vector<char> out_;
  std::vector<char> in_;
};

namespace {

std::span<const std::string> one(const std::string& key) { return {&key, 1}; }

Bytes to_bytes(std::string_view v) { return Bytes(v.begin(), v.end()); }

void write_keys(proto::FrameWriter& w, std::span<const std::string> keys, Command command) {
  if (keys.size() > UINT32_MAX) {
    throw Error(ErrorCode::kInvalidArgument, context_for(command),
                fmt::format("{} keys do not fit one request", keys.size()));
  }
  w.u32(static_cast<uint32_t>(keys.size()));
  for (const std::string& key : keys) w.bytes(key);
}

}  // namespace

TcpStore::TcpStore(TcpStoreOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}

TcpStore::~TcpStore() = default;

void TcpStore::set(const std::string& key, std::span<const char> value) {
  impl_->call(
      Command::kSet, one(key), impl_->options().timeout,
      [&](proto::FrameWriter& w) {
        w.bytes(key);
        w.bytes(value);
      },
      [](proto::FrameReader&) { return 0; });
}

Bytes TcpStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  return impl_->call(
      Command::kGet, one(key), timeout,
      [&](proto::FrameWriter& w) {
        w.i64(capped_timeout(timeout).count());
        w.bytes(key);
      },
      [](proto::FrameReader& r) { return to_bytes(r.bytes()); });
}

int64_t TcpStore::add(const std::string& key, int64_t delta) {
  return impl_->call(
      Command::kAdd, one(key), impl_->options().timeout,
      [&](proto::FrameWriter& w) {
        w.bytes(key);
        w.i64(delta);
      },
      [](proto::FrameReader& r) { return r.i64(); });
}

Bytes TcpStore::compare_set(const std::string& key, std::span<const char> expected,
                            std::span<const char> desired) {
  return impl_->call(
      Command::kCompareSet, one(key), impl_->options().timeout,
      [&](proto::FrameWriter& w) {
        w.bytes(key);
        w.bytes(expected);
        w.bytes(desired);
      },
      [](proto::FrameReader& r) { return to_bytes(r.bytes()); });
}

void TcpStore::wait(std::span<const std::string> keys, std::chrono::milliseconds timeout) {
  impl_->call(
      Command::kWait, keys, timeout,
      [&](proto::FrameWriter& w) {
        w.i64(capped_timeout(timeout).count());
        write_keys(w, keys, Command::kWait);
      },
      [](proto::FrameReader&) { return 0; });
}

bool TcpStore::check(std::span<const std::string> keys) {
  return impl_->call(
      Command::kCheck, keys, impl_->options().timeout,
      [&](proto::FrameWriter& w) { write_keys(w, keys, Command::kCheck); },
      [](proto::FrameReader& r) { return r.u8() != 0; });
}

bool TcpStore::delete_key(const std::string& key) {
  return impl_->call(
      Command::kDelete, one(key), impl_->options().timeout,
      [&](proto::FrameWriter& w) { w.bytes(key); },
      [](proto::FrameReader& r) { return r.u8() != 0; });
}

int64_t TcpStore::num_keys() {
  return impl_->call(
      Command::kNumKeys, {}, impl_->options().timeout, [](proto::FrameWriter&) {},
      [](proto::FrameReader& r) { return r.i64(); });
}

std::vector<Bytes> TcpStore::multi_get(std::span<const std::string> keys,
                                       std::chrono::milliseconds timeout) {
  return impl_->call(
      Command::kMultiGet, keys, timeout,
      [&](proto::FrameWriter& w) {
        w.i64(capped_timeout(timeout).count());
        write_keys(w, keys, Command::kMultiGet);
      },
      [&](proto::FrameReader& r) {
        std::vector<Bytes> values;
        values.reserve(keys.size());
        for (size_t i = 0; i < keys.size(); ++i) values.push_back(to_bytes(r.bytes()));
        return values;
      });
}

void TcpStore::multi_set(std::span<const std::string> keys, std::span<const Bytes> values) {
  if (keys.size() != values.size()) {
    throw Error(
        ErrorCode::kInvalidArgument, context_for(Command::kMultiSet),
        fmt::format("{} keys but {} values for store {}", keys.size(), values.size(), address()));
  }
  if (keys.size() > UINT32_MAX) {
    throw Error(ErrorCode::kInvalidArgument, context_for(Command::kMultiSet),
                fmt::format("{} keys do not fit one request", keys.size()));
  }
  impl_->call(
      Command::kMultiSet, keys, impl_->options().timeout,
      [&](proto::FrameWriter& w) {
        w.u32(static_cast<uint32_t>(keys.size()));
        for (size_t i = 0; i < keys.size(); ++i) {
          w.bytes(keys[i]);
          w.bytes(values[i]);
        }
      },
      [](proto::FrameReader&) { return 0; });
}

std::string TcpStore::address() const { return impl_->address(); }

void TcpStore::set(const std::string& key, const std::string& value) {
  set(key, std::span<const char>(value.data(), value.size()));
}

void TcpStore::set(const std::string& key, const char* value) {
  const std::string_view view(value);
  set(key, std::span<const char>(view.data(), view.size()));
}

Bytes TcpStore::get(const std::string& key) { return get(key, impl_->options().timeout); }

void TcpStore::wait(std::span<const std::string> keys) { wait(keys, impl_->options().timeout); }

void TcpStore::ping() {
  impl_->call(
      Command::kPing, {}, impl_->options().timeout, [](proto::FrameWriter&) {},
      [](proto::FrameReader&) { return 0; });
}

}  // namespace meshrt
