#include "trace/analyze/http_get.h"

#include <fmt/format.h>

// clang-format off
#include <utility>  // Before Asio: Boost 1.74's awaitable.hpp uses std::exchange unincluded.
// clang-format on

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <charconv>
#include <filesystem>
#include <fstream>

#include "trace/analyze/dump_reader.h"
#include "trace/env.h"

namespace meshrt::trace {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

// A status page is small; anything bigger is not one.
constexpr uint64_t kMaxBodyBytes = 64u << 20;

}  // namespace

HttpEndpoint parse_http_endpoint(const std::string& text) {
  std::string_view s = text;
  if (s.substr(0, 7) == "http://") s.remove_prefix(7);
  HttpEndpoint at;
  const size_t slash = s.find_first_of("/?");
  if (slash != std::string_view::npos) {
    const size_t q = s.find('?', slash);
    if (q != std::string_view::npos) at.query = std::string(s.substr(q + 1));
    s = s.substr(0, slash);
  }
  std::string_view host = s, port;
  if (!s.empty() && s.front() == '[') {
    const size_t close = s.find(']');
    if (close != std::string_view::npos && close + 1 < s.size() && s[close + 1] == ':') {
      host = s.substr(1, close - 1);
      port = s.substr(close + 2);
    }
  } else if (const size_t colon = s.rfind(':'); colon != std::string_view::npos) {
    host = s.substr(0, colon);
    port = s.substr(colon + 1);
  }
  unsigned value = 0;
  const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (host.empty() || port.empty() || ec != std::errc() || end != port.data() + port.size() ||
      value == 0 || value > 65535) {
    throw InputError(fmt::format(
        "'{}' is not a status server: give HOST:PORT or the URL meshrun printed", text));
  }
  at.host = std::string(host);
  at.port = static_cast<uint16_t>(value);
  return at;
}

HttpEndpoint status_endpoint(const std::string& text) {
  std::string url = text;
  std::error_code ec;
  if (std::filesystem::is_regular_file(text, ec)) {
    std::ifstream in(text);
    std::getline(in, url);
    if (!in && url.empty()) throw InputError(fmt::format("cannot read {}", text));
  }
  HttpEndpoint at = parse_http_endpoint(url);
  if (at.query.find("token=") == std::string::npos) {
    if (auto token = env::get({"MESHRT_STATUS_TOKEN"})) at.bearer = *token;
  }
  return at;
}

HttpResponse http_get(const HttpEndpoint& at, const std::string& path,
                      std::chrono::milliseconds timeout) {
  const std::string target = at.query.empty() ? path : path + "?" + at.query;
  const std::string url = fmt::format("http://{}:{}{}", at.host, at.port, path);
  net::io_context io;
  beast::tcp_stream stream(io);
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(kMaxBodyBytes);
  http::request<http::empty_body> req{http::verb::get, target, 11};
  req.set(http::field::host, at.host);
  req.set(http::field::user_agent, "meshtrace");
  if (!at.bearer.empty()) req.set(http::field::authorization, "Bearer " + at.bearer);
  beast::error_code failure;
  // One deadline for the whole exchange: resolve, connect, write, read.
  tcp::resolver resolver(io);
  resolver.async_resolve(at.host, std::to_string(at.port), [&](beast::error_code ec, auto found) {
    if (ec) {
      failure = ec;
      return;
    }
    stream.expires_after(timeout);
    stream.async_connect(found, [&](beast::error_code ec, const tcp::endpoint&) {
      if (ec) {
        failure = ec;
        return;
      }
      http::async_write(stream, req, [&](beast::error_code ec, size_t) {
        if (ec) {
          failure = ec;
          return;
        }
        http::async_read(stream, buffer, parser,
                         [&](beast::error_code ec, size_t) { failure = ec; });
      });
    });
  });
  io.run_for(timeout + std::chrono::milliseconds(100));
  if (!io.stopped()) failure = beast::error::timeout;
  if (failure) throw InputError(fmt::format("GET {}: {}", url, failure.message()));
  return {static_cast<int>(parser.get().result_int()), std::move(parser.get().body())};
}

}  // namespace meshrt::trace
