#include "runtime/store/torch_store.h"

#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "runtime/error.h"

namespace meshrt {
namespace {

using Clock = std::chrono::steady_clock;

// PyTorch 1.13's c10d::detail::QueryType (TCPStore.cpp); WATCH_KEY (7) is not used.
enum class Query : uint8_t {
  kSet = 0,
  kCompareSet = 1,
  kGet = 2,
  kAdd = 3,
  kCheck = 4,
  kWait = 5,
  kNumKeys = 6,
  kDeleteKey = 8,
};
constexpr uint8_t kReady = 0;        // CheckResponseType::READY.
constexpr uint8_t kStopWaiting = 0;  // WaitResponseType::STOP_WAITING.

// PyTorch's clients put "/" before every key (TCPStore::keyPrefix_): so do we, so that the keys
// are the same to both.
std::string wire_key(const std::string& key) { return "/" + key; }

// A request in PyTorch's framing: the query byte, then values in host byte order, strings and
// byte vectors as a uint64 length and the bytes.
class Request {
 public:
  explicit Request(Query q) { bytes_.push_back(static_cast<char>(q)); }
  Request& u64(uint64_t v) { return raw(&v, sizeof(v)); }
  Request& i64(int64_t v) { return raw(&v, sizeof(v)); }
  Request& str(std::span<const char> s) {
    u64(s.size());
    bytes_.insert(bytes_.end(), s.begin(), s.end());
    return *this;
  }
  Request& key(const std::string& k) { return str(as_bytes(wire_key(k))); }
  Request& keys(std::span<const std::string> keys) {
    u64(keys.size());
    for (const std::string& k : keys) key(k);
    return *this;
  }
  const std::vector<char>& bytes() const { return bytes_; }

 private:
  Request& raw(const void* p, size_t n) {
    const char* c = static_cast<const char*>(p);
    bytes_.insert(bytes_.end(), c, c + n);
    return *this;
  }
  std::vector<char> bytes_;
};

std::string keys_text(std::span<const std::string> keys) {
  return keys.size() == 1 ? fmt::format("key '{}'", keys[0])
                          : fmt::format("{} keys ('{}', ...)", keys.size(), keys[0]);
}

}  // namespace

TorchStore::TorchStore(TorchStoreOptions options) : options_(std::move(options)) {
  std::lock_guard lock(mu_);
  connect_locked(options_.connect_timeout);
}

TorchStore::~TorchStore() { close_locked(); }

std::string TorchStore::address() const {
  return fmt::format("{}:{} (torchrun's agent store)", options_.host, options_.port);
}

void TorchStore::close_locked() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void TorchStore::connect_locked(std::chrono::milliseconds timeout) {
  const auto until = Clock::now() + timeout;
  std::string last_error = "no attempt";
  for (auto pause = std::chrono::milliseconds(10);;
       pause = std::min(pause * 2, std::chrono::milliseconds(1000))) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    const std::string port = std::to_string(options_.port);
    if (const int rc = ::getaddrinfo(options_.host.c_str(), port.c_str(), &hints, &found);
        rc != 0) {
      last_error = ::gai_strerror(rc);
    } else {
      for (addrinfo* a = found; a != nullptr && fd_ < 0; a = a->ai_next) {
        const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) continue;
        if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
          const int one = 1;
          ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
          fd_ = fd;
        } else {
          last_error = std::strerror(errno);
          ::close(fd);
        }
      }
      ::freeaddrinfo(found);
    }
    if (fd_ >= 0) return;
    if (Clock::now() + pause >= until) {
      throw Error(ErrorCode::kTimeout, {},
                  fmt::format("cannot connect to {} within {} ms: {}", address(), timeout.count(),
                              last_error));
    }
    std::this_thread::sleep_for(pause);
  }
}

void TorchStore::read(void* out, size_t bytes, Clock::time_point until) {
  char* p = static_cast<char*>(out);
  while (bytes > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
    if (left.count() <= 0) throw Error(ErrorCode::kTimeout, {}, "no reply in time");
    pollfd pfd{fd_, POLLIN, 0};
    const int ready = ::poll(&pfd, 1, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
    if (ready < 0 && errno != EINTR) throw Error(ErrorCode::kStore, {}, std::strerror(errno));
    if (ready <= 0) continue;
    const ssize_t n = ::recv(fd_, p, bytes, 0);
    if (n == 0) throw Error(ErrorCode::kPeerFailure, {}, "the server closed the connection");
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      throw Error(ErrorCode::kPeerFailure, {}, std::strerror(errno));
    }
    p += n;
    bytes -= static_cast<size_t>(n);
  }
}

Bytes TorchStore::read_bytes(Clock::time_point until) {
  uint64_t size = 0;
  read(&size, sizeof(size), until);
  // PyTorch's values are small (addresses, counters); a huge length is a broken stream.
  if (size > (uint64_t{1} << 30)) {
    throw Error(ErrorCode::kStore, {}, fmt::format("a reply of {} bytes: not a TCPStore", size));
  }
  Bytes value(size);
  read(value.data(), value.size(), until);
  return value;
}

template <typename Reply>
auto TorchStore::call(std::string_view what, const std::vector<char>& request,
                      std::chrono::milliseconds deadline, Reply&& reply) {
  std::lock_guard lock(mu_);
  try {
    if (fd_ < 0) connect_locked(options_.connect_timeout);
    for (size_t sent = 0; sent < request.size();) {
      const ssize_t n = ::send(fd_, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throw Error(ErrorCode::kPeerFailure, {}, std::strerror(errno));
      sent += static_cast<size_t>(n);
    }
    return reply(Clock::now() + deadline);
  } catch (const Error& e) {
    close_locked();
    throw Error(e.code(), {}, fmt::format("{} on {}: {}", what, address(), e.detail()));
  }
}

void TorchStore::set(const std::string& key, std::span<const char> value) {
  call(fmt::format("set of key '{}'", key),
       Request(Query::kSet).key(key).str(value).bytes(), options_.timeout,
       [](Clock::time_point) {});
}

Bytes TorchStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  // PyTorch's server fails a get of a missing key: its own clients wait first, as here.
  wait(std::span<const std::string>(&key, 1), timeout);
  return call(fmt::format("get of key '{}'", key), Request(Query::kGet).key(key).bytes(),
              options_.timeout, [this](Clock::time_point until) { return read_bytes(until); });
}

int64_t TorchStore::add(const std::string& key, int64_t delta) {
  return call(fmt::format("add to key '{}'", key),
              Request(Query::kAdd).key(key).i64(delta).bytes(), options_.timeout,
              [this](Clock::time_point until) {
                int64_t value = 0;
                read(&value, sizeof(value), until);
                return value;
              });
}

Bytes TorchStore::compare_set(const std::string& key, std::span<const char> expected,
                              std::span<const char> desired) {
  return call(fmt::format("compare_set of key '{}'", key),
              Request(Query::kCompareSet).key(key).str(expected).str(desired).bytes(),
              options_.timeout, [this](Clock::time_point until) { return read_bytes(until); });
}

void TorchStore::wait(std::span<const std::string> keys, std::chrono::milliseconds timeout) {
  if (keys.empty()) return;
  call(fmt::format("wait for {}", keys_text(keys)), Request(Query::kWait).keys(keys).bytes(),
       timeout, [this](Clock::time_point until) {
         uint8_t response = 0xff;
         read(&response, 1, until);
         if (response != kStopWaiting) {
           throw Error(ErrorCode::kStore, {}, fmt::format("unexpected reply {}", response));
         }
       });
}

bool TorchStore::check(std::span<const std::string> keys) {
  return call(fmt::format("check of {}", keys.empty() ? "no key" : keys_text(keys)),
              Request(Query::kCheck).keys(keys).bytes(), options_.timeout,
              [this](Clock::time_point until) {
                uint8_t response = 0xff;
                read(&response, 1, until);
                return response == kReady;
              });
}

bool TorchStore::delete_key(const std::string& key) {
  return call(fmt::format("delete of key '{}'", key),
              Request(Query::kDeleteKey).key(key).bytes(), options_.timeout,
              [this](Clock::time_point until) {
                int64_t deleted = 0;
                read(&deleted, sizeof(deleted), until);
                return deleted == 1;
              });
}

int64_t TorchStore::num_keys() {
  return call("num_keys", Request(Query::kNumKeys).bytes(), options_.timeout,
              [this](Clock::time_point until) {
                int64_t n = 0;
                read(&n, sizeof(n), until);
                return n;
              });
}

std::vector<Bytes> TorchStore::multi_get(std::span<const std::string> keys,
                                         std::chrono::milliseconds timeout) {
  wait(keys, timeout);
  std::vector<Bytes> values;
  values.reserve(keys.size());
  for (const std::string& key : keys) values.push_back(get(key, timeout));
  return values;
}

void TorchStore::multi_set(std::span<const std::string> keys, std::span<const Bytes> values) {
  for (size_t i = 0; i < keys.size(); ++i) set(keys[i], values[i]);
}

}  // namespace meshrt
