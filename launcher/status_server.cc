#include "launcher/status_server.h"

#include <fmt/format.h>

// clang-format off
#include <algorithm>
#include <utility>  // Before Asio: Boost 1.74's awaitable.hpp uses std::exchange unincluded.
// clang-format on

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cctype>
#include <charconv>
#include <list>
#include <mutex>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <thread>

#include "launcher/status_page.h"
#include "runtime/store/store_auth.h"
#include "trace/env.h"

namespace meshrt::launcher {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

constexpr size_t kMaxHeaderBytes = 8192;
// A snapshot asked for twice within this is not asked of the ranks again (a page that shows one
// rank's snapshot and then its stacks costs the ranks one request).
constexpr std::chrono::milliseconds kSnapshotReuse{2000};

std::string_view as_view(beast::string_view s) { return {s.data(), s.size()}; }

HttpReply text_reply(int status, std::string text) {
  return {status, "text/plain; charset=utf-8", std::move(text) + "\n"};
}

// The value of `name` in a query string "a=1&token=...", or "".
std::string_view query_value(std::string_view query, std::string_view name) {
  while (!query.empty()) {
    const size_t amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    if (pair.size() > name.size() && pair.substr(0, name.size()) == name &&
        pair[name.size()] == '=') {
      return pair.substr(name.size() + 1);
    }
    if (amp == std::string_view::npos) break;
    query.remove_prefix(amp + 1);
  }
  return {};
}

// Whether the request carries `token`: as ?token= or as "Authorization: Bearer <token>" (the
// scheme's name in any case, as RFC 9110 has it). An empty `token` is never matched: the server
// always has one.
bool has_token(const std::string& token, std::string_view query, std::string_view authorization) {
  if (token.empty()) return false;
  if (constant_time_equal(query_value(query, "token"), token)) return true;
  constexpr std::string_view kBearer = "bearer ";
  if (authorization.size() <= kBearer.size()) return false;
  for (size_t i = 0; i < kBearer.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(authorization[i])) != kBearer[i]) return false;
  }
  std::string_view given = authorization.substr(kBearer.size());
  while (!given.empty() && given.front() == ' ') given.remove_prefix(1);
  while (!given.empty() && (given.back() == ' ' || given.back() == '\t')) given.remove_suffix(1);
  return constant_time_equal(given, token);
}

// "/ranks/<n>/<what>" -> n and what; false for any other path.
bool parse_rank_path(std::string_view path, int* rank, std::string_view* what) {
  constexpr std::string_view kPrefix = "/ranks/";
  if (path.substr(0, kPrefix.size()) != kPrefix) return false;
  path.remove_prefix(kPrefix.size());
  const size_t slash = path.find('/');
  if (slash == std::string_view::npos || slash == 0) return false;
  const auto [end, ec] = std::from_chars(path.data(), path.data() + slash, *rank);
  if (ec != std::errc() || end != path.data() + slash || *rank < 0) return false;
  *what = path.substr(slash + 1);
  return true;
}

HttpReply rank_reply(LiveBoard& board, const StatusServerOptions& options, int rank,
                     std::string_view what) {
  if (what != "snapshot" && what != "stacks") return text_reply(404, "no such page");
  const Snapshots s = board.snapshots(options.snapshot_wait, kSnapshotReuse);
  if (s.request == 0) return text_reply(503, "no attempt of the job is running");
  if (rank >= static_cast<int>(s.by_rank.size())) {
    return text_reply(
        404, fmt::format("the job has no rank {} (world size {})", rank, s.by_rank.size()));
  }
  if (s.by_rank[rank].empty()) {
    return text_reply(503, fmt::format("rank {} did not answer the snapshot request within {} ms "
                                       "(ended, wedged, or its flight recorder is off)",
                                       rank, options.snapshot_wait.count()));
  }
  if (what == "snapshot") return {200, "application/json", s.by_rank[rank]};
  return text_reply(200, fmt::format("rank {}:\n{}", rank, stacks_text(s.by_rank[rank])));
}

}  // namespace

std::string stacks_text(const std::string& snapshot_json) {
  const auto j = nlohmann::json::parse(snapshot_json, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("meshrt_threads")) {
    return "(the snapshot carries no thread stacks)";
  }
  std::string out;
  try {
    for (const auto& t : j.at("meshrt_threads")) {
      out += fmt::format("thread {} '{}'{}\n", t.value("tid", 0), t.value("name", ""),
                         t.value("main", false) ? " (main thread)" : "");
      if (!t.value("answered", false)) {
        out += "    (did not answer in time)\n";
        continue;
      }
      const auto& frames = t.at("frames");
      if (frames.empty()) out += "    (no frames of the program)\n";
      for (const auto& f : frames) {
        const std::string fn = f.value("function", "");
        const std::string file = f.value("file", "");
        const int line = f.value("line", 0);
        out += fmt::format("    {}{}\n", fn.empty() ? "??" : fn,
                           file.empty() ? ""
                           : line > 0   ? fmt::format(" ({}:{})", file, line)
                                        : fmt::format(" ({})", file));
      }
    }
  } catch (const nlohmann::json::exception& e) {
    out += fmt::format("(malformed stacks: {})\n", e.what());
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

std::string status_token_from_env_or_new() {
  const auto fixed = trace::env::get({"MESHRT_STATUS_TOKEN"});
  return fixed && !fixed->empty() ? *fixed : generate_store_token();
}

HttpReply answer_status_request(LiveBoard& board, const StatusServerOptions& options,
                                std::string_view method, std::string_view target,
                                std::string_view authorization) {
  if (method != "GET" && method != "HEAD") return text_reply(405, "only GET and HEAD");
  const size_t q = target.find('?');
  const std::string_view path = target.substr(0, q);
  const std::string_view query = q == std::string_view::npos ? "" : target.substr(q + 1);
  if (!has_token(options.token, query, authorization)) {
    return text_reply(403,
                      "this status server wants the job's token: the ?token=... of the URL meshrun "
                      "printed (or <log dir>/status_url), or an 'Authorization: Bearer' header");
  }
  if (path == "/" || path == "/index.html") {
    return {200, "text/html; charset=utf-8", std::string(status_page_html())};
  }
  if (path == "/status.json") return {200, "application/json", board.status_json(wall_now_ns())};
  if (path == "/metrics") {
    return {200, "text/plain; version=0.0.4; charset=utf-8", board.metrics_text(wall_now_ns())};
  }
  int rank = 0;
  std::string_view what;
  if (parse_rank_path(path, &rank, &what)) return rank_reply(board, options, rank, what);
  return text_reply(404, "no such page: try / or /status.json");
}

struct StatusServer::Impl {
  // One connection, served on a thread of its own with its own io_context, so that a slow rank
  // snapshot or a slow client holds up nobody else; every read and write has a deadline.
  struct Connection {
    std::shared_ptr<net::io_context> io;
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
    // True until its request has arrived: a slow (slowloris) client sits here.
    std::shared_ptr<std::atomic<bool>> reading;
  };

  Impl(StatusServerOptions o, LiveBoard& b) : options(std::move(o)), board(b), acceptor(io) {}

  void accept_next() {
    auto conn_io = std::make_shared<net::io_context>(1);
    acceptor.async_accept(*conn_io, [this, conn_io](beast::error_code ec, tcp::socket socket) {
      if (ec == net::error::operation_aborted) return;
      if (!ec) start(conn_io, std::move(socket));
      accept_next();
    });
  }

  void start(std::shared_ptr<net::io_context> conn_io, tcp::socket socket) {
    std::lock_guard lock(mu);
    connections.remove_if([](Connection& c) {
      if (!*c.done) return false;
      c.thread.join();
      return true;
    });
    if (static_cast<int>(connections.size()) >= options.max_connections) {
      // Full: the oldest connection still waiting for its request makes room, so clients that
      // connect and dribble (or send nothing) cannot keep complete requests out.
      const auto slow = std::find_if(connections.begin(), connections.end(), [](Connection& c) {
        return !*c.done && c.reading->exchange(false);
      });
      if (slow == connections.end()) {
        static constexpr std::string_view kBusy =
            "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: "
            "close\r\n\r\n";
        beast::error_code ignored;
        net::write(socket, net::buffer(kBusy), ignored);
        return;
      }
      slow->io->stop();
    }
    auto done = std::make_shared<std::atomic<bool>>(false);
    auto reading = std::make_shared<std::atomic<bool>>(true);
    Connection& c = connections.emplace_back();
    c.io = conn_io;
    c.done = done;
    c.reading = reading;
    c.thread = std::thread([this, conn_io, done, reading, s = std::move(socket)]() mutable {
      serve(*conn_io, std::move(s), *reading);
      *done = true;
    });
  }

  void serve(net::io_context& conn_io, tcp::socket socket, std::atomic<bool>& reading) {
    beast::tcp_stream stream(std::move(socket));
    beast::flat_buffer buffer(kMaxHeaderBytes);
    http::request_parser<http::empty_body> parser;
    parser.header_limit(kMaxHeaderBytes);
    http::response<http::string_body> res;
    stream.expires_after(std::min(options.io_timeout, options.request_timeout));
    http::async_read(stream, buffer, parser, [&](beast::error_code ec, size_t) {
      // Answering now: no longer a candidate to make room for others.
      if (!reading.exchange(false) && !ec) return;  // Chosen to make room just as it arrived.
      if (ec == beast::error::timeout || ec == net::error::eof ||
          ec == net::error::connection_reset) {
        return;
      }
      const auto& req = parser.get();
      HttpReply reply = ec ? text_reply(400, fmt::format("bad request: {}", ec.message()))
                           : answer_status_request(board, options, as_view(req.method_string()),
                                                   as_view(req.target()),
                                                   as_view(req[http::field::authorization]));
      res = http::response<http::string_body>(static_cast<http::status>(reply.status),
                                              ec ? 11 : req.version());
      res.set(http::field::server, "meshrun");
      res.set(http::field::content_type, reply.content_type);
      res.set(http::field::cache_control, "no-store");
      res.keep_alive(false);
      res.body() = std::move(reply.body);
      res.prepare_payload();
      if (!ec && req.method() == http::verb::head) res.body().clear();
      stream.expires_after(options.io_timeout);
      http::async_write(stream, res, [&](beast::error_code, size_t) {
        beast::error_code ignored;
        stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
      });
    });
    conn_io.run();
  }

  void stop() {
    io.stop();
    if (accept_thread.joinable()) accept_thread.join();
    std::lock_guard lock(mu);
    for (Connection& c : connections) c.io->stop();
    for (Connection& c : connections) c.thread.join();
    connections.clear();
  }

  StatusServerOptions options;
  LiveBoard& board;
  net::io_context io{1};  // The acceptor's.
  tcp::acceptor acceptor;
  std::thread accept_thread;
  std::mutex mu;  // Guards connections.
  std::list<Connection> connections;
};

StatusServer::StatusServer(StatusServerOptions options, LiveBoard& board)
    : impl_(std::make_unique<Impl>(std::move(options), board)) {
  const StatusServerOptions& o = impl_->options;
  try {
    tcp::resolver resolver(impl_->io);
    const tcp::endpoint at = *resolver.resolve(o.host, std::to_string(o.port)).begin();
    impl_->acceptor.open(at.protocol());
    impl_->acceptor.set_option(net::socket_base::reuse_address(true));
    impl_->acceptor.bind(at);
    impl_->acceptor.listen();
    if (o.token.empty()) impl_->options.token = generate_store_token();
  } catch (const boost::system::system_error& e) {
    throw std::runtime_error(fmt::format("cannot serve the status page on {}:{}: {}", o.host,
                                         o.port, e.code().message()));
  }
  impl_->accept_next();
  impl_->accept_thread = std::thread([this] { impl_->io.run(); });
}

StatusServer::~StatusServer() { impl_->stop(); }

uint16_t StatusServer::port() const { return impl_->acceptor.local_endpoint().port(); }

std::string StatusServer::url() const {
  const std::string& host = impl_->options.host;
  const bool v6 = host.find(':') != std::string::npos;
  return fmt::format("http://{}{}{}:{}/?token={}", v6 ? "[" : "", host, v6 ? "]" : "", port(),
                     impl_->options.token);
}

const std::string& StatusServer::token() const { return impl_->options.token; }

}  // namespace meshrt::launcher
