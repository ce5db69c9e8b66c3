// Fuzz target `store`: the TcpStore server's request handling, on a real TcpStoreServer (its
// frame reading, decoding, dispatch, limits, parking and auth) over one loopback connection. The
// server's dispatch lives on its io thread behind the socket, with no in-process entry point, so
// the input goes through the socket: byte 0 bit 0 gives the server a token ("fuzz-token"), the
// rest is sent as the client's byte stream (length-prefixed frames, however well formed). Every
// byte the server sends back must be whole reply frames with a known status. A fresh server per
// input keeps a finding reproducible from its input alone.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>

#include "runtime/store/store_protocol.h"
#include "runtime/store/tcp_store_server.h"
#include "tests/fuzz/fuzz_target.h"

namespace proto = meshrt::store_protocol;

namespace {

// How long the client waits for the server to answer and close; a request parked behind
// pipelined bytes legitimately waits for its own deadline, so this only bounds the harness.
constexpr int kReplyWaitMs = 50;
// How long an interrupted connect() may take to finish over loopback (it is immediate unless the
// machine is starved).
constexpr int kConnectWaitMs = 5000;

meshrt::TcpStoreServerOptions small_server(bool with_token) {
  meshrt::TcpStoreServerOptions o;
  o.host = "127.0.0.1";
  o.token = with_token ? "fuzz-token" : "";
  // Small limits, so that the fuzzer reaches every refusal with inputs of a few KiB.
  o.max_key_bytes = 64;
  o.max_value_bytes = 256;
  o.max_request_bytes = 2048;
  o.max_reply_bytes = 1024;
  o.max_total_bytes = 2048;
  o.max_keys = 16;
  o.max_requests_per_second = 0;
  o.frame_timeout_ms = 1000;
  o.auth_timeout_ms = 1000;
  o.tls_cert_file.clear();
  o.tls_key_file.clear();
  return o;
}

// The outcome of a connect() that a signal interrupted (libFuzzer's timers): the kernel goes on
// connecting, so wait for the socket to become writable and read the result; 0 = connected.
int finish_interrupted_connect(int fd) {
  pollfd p{fd, POLLOUT, 0};
  int ready;
  do {
    ready = ::poll(&p, 1, kConnectWaitMs);
  } while (ready < 0 && errno == EINTR);
  if (ready <= 0) return ready == 0 ? ETIMEDOUT : errno;
  int error = 0;
  socklen_t length = sizeof(error);
  if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) != 0) return errno;
  return error;
}

int connect_to(uint16_t port) {
  // Thousands of inputs a second leave as many connections in TIME_WAIT (the harness closes its
  // half first); a new server's port can meet one of them, and connect() then finds no free
  // 4-tuple (EADDRNOTAVAIL): a loopback artifact, retried. Anything else is a finding.
  for (int attempt = 0;; ++attempt) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    check(fd >= 0, "socket: {}", std::strerror(errno));
    const linger no_linger{1, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &no_linger, sizeof(no_linger));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0) return fd;
    int error = errno;
    if (error == EINTR) error = finish_interrupted_connect(fd);
    if (error == 0) return fd;
    ::close(fd);
    check(error == EADDRNOTAVAIL && attempt < 10, "connect to 127.0.0.1:{} (attempt {}): {}", port,
          attempt + 1, std::strerror(error));
  }
}

// Reads until EOF, a reset or the deadline; returns false unless it saw a clean EOF.
bool read_all(int fd, std::string& out) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kReplyWaitMs);
  char buffer[4096];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    const ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
    if (n == 0) return true;
    if (n < 0) {
      if (errno == EINTR) continue;  // Within the same deadline.
      return false;
    }
    out.append(buffer, static_cast<size_t>(n));
  }
}

// Whether `stream` is whole reply frames, each a known status byte and its payload.
bool whole_replies(const std::string& stream) {
  size_t at = 0;
  while (at < stream.size()) {
    if (stream.size() - at < proto::kFrameHeaderBytes) return false;
    const size_t body = proto::decode_u32(stream.data() + at);
    at += proto::kFrameHeaderBytes;
    if (body == 0 || body > stream.size() - at) return false;
    if (static_cast<uint8_t>(stream[at]) > static_cast<uint8_t>(proto::Status::kUnauthenticated)) {
      return false;
    }
    at += body;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  [[maybe_unused]] static const bool quiet = [] {
    return ::setenv("MESHRT_LOG_LEVEL", "off", 0) == 0;
  }();
  if (size == 0) return 0;
  meshrt::TcpStoreServer server(small_server((data[0] & 1) != 0));
  const int fd = connect_to(server.port());
  size_t sent = 1;
  while (sent < size) {
    const ssize_t n = ::send(fd, data + sent, size - sent, MSG_NOSIGNAL);
    if (n <= 0) break;  // The server closed the connection (after a refusal).
    sent += static_cast<size_t>(n);
  }
  ::shutdown(fd, SHUT_WR);
  std::string replies;
  const bool clean_eof = read_all(fd, replies);
  ::close(fd);
  // After a reset or at the deadline the last frame may be cut: only a clean end is judged.
  check(!clean_eof || whole_replies(replies),
        "the server sent {} bytes that are not whole replies to {} bytes (token: {})",
        replies.size(), size - 1, (data[0] & 1) != 0);
  return 0;
}
