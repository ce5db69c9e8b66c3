// Store ops per second, the meshrt side of bench/store_compare.sh (torch_store_bench.py is
// PyTorch's): a TcpStoreServer on 127.0.0.1 in this process and N client threads, each with its
// own TcpStore connection, run three timed phases one after the other: K sets, K gets, K adds per
// client, every op waiting for the server's reply. A phase's rate is N x K over the time from its
// start (all clients released together) to its last client's end. Prints one JSON line.
//
//   store_ops_bench [--clients N] [--ops K] [--value-bytes B] [--max-rps R] [--round I] [--echo]
//
// --max-rps is the server's per-connection request cap (TcpStoreServerOptions; default 50000, as
// a user's server has; 0 lifts it). --echo replaces the store with the physical floor: a blocking
// TCP echo over 127.0.0.1 (one server thread per connection, as simple as a server gets), whose
// request and reply have the size of a set's, so every phase is one bare round trip.
#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "runtime/store/tcp_store.h"
#include "runtime/store/tcp_store_server.h"

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

struct Args {
  int clients = 1;
  int ops = 2000;
  size_t value_bytes = 64;
  int64_t max_rps = -1;  // -1: the server's default.
  int round = 0;
  bool echo = false;
};

[[noreturn]] void usage(const std::string& msg) {
  std::fprintf(stderr,
               "store_ops_bench: %s\nusage: store_ops_bench [--clients N] [--ops K] "
               "[--value-bytes B] [--max-rps R] [--round I] [--echo]\n",
               msg.c_str());
  std::exit(2);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (k == "--echo") {
      a.echo = true;
      continue;
    }
    if (i + 1 >= argc) usage("missing value after " + k);
    const std::string v = argv[++i];
    if (k == "--clients") {
      a.clients = std::stoi(v);
    } else if (k == "--ops") {
      a.ops = std::stoi(v);
    } else if (k == "--value-bytes") {
      a.value_bytes = std::stoull(v);
    } else if (k == "--max-rps") {
      a.max_rps = std::stoll(v);
    } else if (k == "--round") {
      a.round = std::stoi(v);
    } else {
      usage("unknown argument " + k);
    }
  }
  if (a.clients < 1 || a.ops < 1) usage("--clients and --ops must be >= 1");
  return a;
}

void read_all(int fd, char* p, size_t n) {
  while (n > 0) {
    const ssize_t r = ::read(fd, p, n);
    if (r <= 0) throw std::runtime_error("echo: connection closed");
    p += r;
    n -= static_cast<size_t>(r);
  }
}

void write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t r = ::write(fd, p, n);
    if (r <= 0) throw std::runtime_error("echo: write failed");
    p += r;
    n -= static_cast<size_t>(r);
  }
}

// A blocking echo server on 127.0.0.1: one thread per connection returns every `frame` bytes.
class EchoServer {
 public:
  explicit EchoServer(size_t frame) : frame_(frame) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
        ::listen(fd_, 128) != 0 || ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len)) {
      throw std::runtime_error("echo: cannot listen on 127.0.0.1");
    }
    port_ = ntohs(addr.sin_port);
    acceptor_ = std::thread([this] {
      while (true) {
        const int c = ::accept(fd_, nullptr, nullptr);
        if (c < 0) return;
        // The frame size by value, not `this`: a detached connection thread still reads it after
        // its client closed, when the server may already be destroyed (a race TSan caught).
        std::thread([c, frame = frame_] {
          std::string buf(frame, '\0');
          try {
            while (true) {
              read_all(c, buf.data(), frame);
              write_all(c, buf.data(), frame);
            }
          } catch (const std::exception&) {
          }
          ::close(c);
        }).detach();
      }
    });
  }
  ~EchoServer() {
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    acceptor_.join();
  }
  uint16_t port() const { return port_; }

 private:
  size_t frame_;
  int fd_ = -1;
  uint16_t port_ = 0;
  std::thread acceptor_;
};

// One client connection of the echo floor: round_trip() sends a frame and waits for it back.
class EchoClient {
 public:
  EchoClient(uint16_t port, size_t frame) : buf_(frame, 'v') {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(port);
    const int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      throw std::runtime_error("echo: cannot connect");
    }
  }
  ~EchoClient() { ::close(fd_); }
  void round_trip() {
    write_all(fd_, buf_.data(), buf_.size());
    read_all(fd_, buf_.data(), buf_.size());
  }

 private:
  int fd_ = -1;
  std::string buf_;
};

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  meshrt::TcpStoreServerOptions so;
  if (a.max_rps >= 0) so.max_requests_per_second = static_cast<uint32_t>(a.max_rps);
  meshrt::TcpStoreServer server(so);
  const uint32_t cap = so.max_requests_per_second;
  // A set's request: key and value and a few header bytes.
  const size_t frame = a.value_bytes + 16;
  std::unique_ptr<EchoServer> echo_server;
  if (a.echo) echo_server = std::make_unique<EchoServer>(frame);

  constexpr int kPhases = 3;  // set, get, add
  // Phase p starts when every client arrived at sync point p; the main thread takes the time of
  // each sync point, so phase p lasts from point p to point p + 1.
  std::vector<Clock::time_point> marks(kPhases + 1);
  std::barrier sync(a.clients + 1);
  std::vector<std::thread> threads;
  for (int c = 0; c < a.clients; ++c) {
    threads.emplace_back([&, c] {
      try {
        if (a.echo) {
          EchoClient echo(echo_server->port(), frame);
          for (int p = 0; p < kPhases; ++p) {
            sync.arrive_and_wait();
            for (int i = 0; i < a.ops; ++i) echo.round_trip();
          }
          sync.arrive_and_wait();
          return;
        }
        meshrt::TcpStoreOptions o;
        o.host = "127.0.0.1";
        o.port = server.port();
        o.connect_timeout = 10s;
        o.timeout = 30s;
        meshrt::TcpStore store(o);
        const std::string key = fmt::format("bench/key{}", c);
        const std::string value(a.value_bytes, 'v');
        store.set(key, value);  // The key exists before the timed gets.
        sync.arrive_and_wait();
        for (int i = 0; i < a.ops; ++i) store.set(key, value);
        sync.arrive_and_wait();
        for (int i = 0; i < a.ops; ++i) {
          if (store.get(key).size() != a.value_bytes) throw std::runtime_error("short value");
        }
        sync.arrive_and_wait();
        // One counter for all clients: the contended case of barriers and rank assignment.
        for (int i = 0; i < a.ops; ++i) store.add("bench/counter", 1);
        sync.arrive_and_wait();
      } catch (const std::exception& e) {
        // The other clients would wait for this one at the next phase forever.
        std::fprintf(stderr, "store_ops_bench: client %d failed: %s\n", c, e.what());
        std::_Exit(1);
      }
    });
  }
  for (auto& m : marks) {
    sync.arrive_and_wait();
    m = Clock::now();
  }
  for (auto& t : threads) t.join();
  const double total = static_cast<double>(a.clients) * a.ops;
  auto rate = [&](int p) {
    return total / std::chrono::duration<double>(marks[p + 1] - marks[p]).count();
  };
  std::printf(
      "{\"impl\": \"%s\", \"round\": %d, \"clients\": %d, \"ops\": %d, \"value_bytes\": %zu, "
      "\"set_ops_s\": %.0f, \"get_ops_s\": %.0f, \"add_ops_s\": %.0f}\n",
      a.echo ? "tcp-echo"
      : cap  ? "meshrt"
             : "meshrt-nocap",
      a.round, a.clients, a.ops, a.value_bytes, rate(0), rate(1), rate(2));
  return 0;
}
