// Tests of TcpStoreServer, TcpStore, PrefixStore and the store wire format, all on 127.0.0.1
// with short timeouts so the whole file runs in a few seconds.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <numeric>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

// Asio after the standard headers: Boost 1.74 uses std::exchange without including <utility>.
#include <boost/asio.hpp>

#include "runtime/error.h"
#include "runtime/store/prefix_store.h"
#include "runtime/store/store.h"
#include "runtime/store/store_protocol.h"
#include "runtime/store/tcp_store.h"
#include "runtime/store/tcp_store_server.h"

namespace meshrt {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

TcpStoreOptions client_options(uint16_t port) {
  TcpStoreOptions options;
  options.host = "127.0.0.1";
  options.port = port;
  options.connect_timeout = 2000ms;
  options.timeout = 5000ms;
  return options;
}

std::unique_ptr<TcpStore> connect(const TcpStoreServer& server) {
  return std::make_unique<TcpStore>(client_options(server.port()));
}

// A port nothing listens on right now: bound by a throwaway server, then released.
uint16_t free_port() {
  TcpStoreServer probe;
  return probe.port();
}

int64_t elapsed_ms(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
}

// Runs `fn`, expecting a meshrt::Error, and returns it.
template <typename Fn>
Error expect_error(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "expected meshrt::Error";
  return Error(ErrorCode::kInternal, {}, "no error thrown");
}

testing::AssertionResult Contains(std::string_view text, std::string_view part) {
  if (text.find(part) != std::string_view::npos) return testing::AssertionSuccess();
  return testing::AssertionFailure() << "'" << text << "' does not contain '" << part << "'";
}

Bytes bytes_of(std::string_view s) { return Bytes(s.begin(), s.end()); }

TEST(TcpStoreTest, SetGetRoundTripsBinaryValues) {
  TcpStoreServer server;
  auto store = connect(server);
  const std::string binary("a\0b\0\xff\x01", 6);
  store->set("bin", binary);
  EXPECT_EQ(to_string(store->get("bin", 1000ms)), binary);

  store->set("empty", std::string());
  EXPECT_TRUE(store->get("empty").empty());

  Bytes big(1 << 20);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 131);
  store->set("big", big);
  EXPECT_EQ(store->get("big"), big);
}

TEST(TcpStoreTest, SetReplacesValueAndOverloadsAgree) {
  TcpStoreServer server;
  auto store = connect(server);
  store->set("k", "first");
  store->set("k", std::string("second"));
  EXPECT_EQ(to_string(store->get("k")), "second");
  store->set("k", as_bytes(std::string("third")));
  EXPECT_EQ(to_string(store->get("k", 100ms)), "third");
  EXPECT_EQ(store->address(), server.address());
  EXPECT_EQ(server.address(), "127.0.0.1:" + std::to_string(server.port()));
  store->ping();
}

TEST(TcpStoreTest, GetWaitsForLaterSetFromAnotherThread) {
  TcpStoreServer server;
  auto reader = connect(server);
  auto writer = connect(server);
  const auto start = Clock::now();
  std::thread setter([&] {
    std::this_thread::sleep_for(150ms);
    writer->set("late", "value");
  });
  const Bytes value = reader->get("late", 5000ms);
  const int64_t waited_ms = elapsed_ms(start);
  setter.join();
  EXPECT_EQ(to_string(value), "value");
  EXPECT_GE(waited_ms, 140);
  EXPECT_LT(waited_ms, 3000);
}

TEST(TcpStoreTest, GetTimesOutNamingKeyAndAddress) {
  TcpStoreServer server;
  auto store = connect(server);
  const auto start = Clock::now();
  const Error e = expect_error([&] { store->get("missing/key", 200ms); });
  const int64_t waited_ms = elapsed_ms(start);
  EXPECT_EQ(e.code(), ErrorCode::kTimeout);
  EXPECT_EQ(e.context().op, "store.get");
  EXPECT_TRUE(Contains(e.what(), "'missing/key'"));
  EXPECT_TRUE(Contains(e.what(), server.address()));
  EXPECT_GE(waited_ms, 190);
  EXPECT_LT(waited_ms, 1500);
  // The connection is still in step after a timeout.
  store->set("missing/key", "now");
  EXPECT_EQ(to_string(store->get("missing/key", 100ms)), "now");
}

TEST(TcpStoreTest, ZeroTimeoutGetFailsWithoutWaiting) {
  TcpStoreServer server;
  auto store = connect(server);
  const auto start = Clock::now();
  EXPECT_EQ(expect_error([&] { store->get("nope", 0ms); }).code(), ErrorCode::kTimeout);
  EXPECT_EQ(expect_error([&] { store->get("nope", -5ms); }).code(), ErrorCode::kTimeout);
  EXPECT_LT(elapsed_ms(start), 500);
}

TEST(TcpStoreTest, WaitReturnsOnceAllKeysAreSet) {
  TcpStoreServer server;
  auto waiter = connect(server);
  auto writer = connect(server);
  const std::vector<std::string> keys = {"a", "b", "c"};
  std::thread setter([&] {
    writer->set("a", "1");
    std::this_thread::sleep_for(50ms);
    writer->set("c", "3");
    std::this_thread::sleep_for(50ms);
    writer->set("b", "2");
  });
  const auto start = Clock::now();
  waiter->wait(keys, 5000ms);
  const int64_t waited_ms = elapsed_ms(start);
  setter.join();
  EXPECT_TRUE(waiter->check(keys));
  EXPECT_LT(waited_ms, 3000);
  waiter->wait(keys);  // Already set: returns at once with the default timeout.
}

TEST(TcpStoreTest, WaitTimesOutNamingMissingKeys) {
  TcpStoreServer server;
  auto store = connect(server);
  store->set("present", "x");
  const std::vector<std::string> keys = {"present", "absent1", "absent2"};
  const auto start = Clock::now();
  const Error e = expect_error([&] { store->wait(keys, 150ms); });
  const int64_t waited_ms = elapsed_ms(start);
  EXPECT_EQ(e.code(), ErrorCode::kTimeout);
  EXPECT_EQ(e.context().op, "store.wait");
  EXPECT_TRUE(Contains(e.what(), "'absent1'"));
  EXPECT_TRUE(Contains(e.what(), "'absent2'"));
  EXPECT_TRUE(Contains(e.what(), server.address()));
  EXPECT_GE(waited_ms, 140);
  EXPECT_LT(waited_ms, 1500);
}

TEST(TcpStoreTest, OneSetWakesManyParkedWaiters) {
  TcpStoreServer server;
  constexpr int kClients = 64;
  std::vector<std::unique_ptr<TcpStore>> clients;
  for (int i = 0; i < kClients; ++i) clients.push_back(connect(server));
  std::atomic<int> woken{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] {
      if (to_string(clients[i]->get("go", 5000ms)) == "now") ++woken;
    });
  }
  // The io thread must stay free while all of them are parked.
  std::this_thread::sleep_for(100ms);
  auto setter = connect(server);
  EXPECT_EQ(setter->num_keys(), 0);
  setter->set("go", "now");
  for (auto& t : threads) t.join();
  EXPECT_EQ(woken.load(), kClients);
}

TEST(TcpStoreTest, AddIsAtomicAcross64Clients) {
  TcpStoreServer server;
  constexpr int kClients = 64;
  constexpr int kAddsPerClient = 100;
  std::vector<std::vector<int64_t>> seen(kClients);
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] {
      auto store = connect(server);
      for (int j = 0; j < kAddsPerClient; ++j) seen[i].push_back(store->add("counter", 1));
    });
  }
  for (auto& t : threads) t.join();
  auto store = connect(server);
  constexpr int64_t kTotal = int64_t{kClients} * kAddsPerClient;
  EXPECT_EQ(store->add("counter", 0), kTotal);
  EXPECT_EQ(to_string(store->get("counter")), std::to_string(kTotal));
  // Every add returned a distinct intermediate value: no two saw the same state.
  std::vector<int64_t> all;
  for (const auto& v : seen) all.insert(all.end(), v.begin(), v.end());
  std::sort(all.begin(), all.end());
  std::vector<int64_t> expected(kTotal);
  std::iota(expected.begin(), expected.end(), 1);
  EXPECT_EQ(all, expected);
}

TEST(TcpStoreTest, AddStoresDecimalTextAndRejectsNonIntegers) {
  TcpStoreServer server;
  auto store = connect(server);
  EXPECT_EQ(store->add("n", 5), 5);
  EXPECT_EQ(store->add("n", -12), -7);
  EXPECT_EQ(to_string(store->get("n")), "-7");
  store->set("m", "40");
  EXPECT_EQ(store->add("m", 2), 42);

  store->set("text", "abc");
  const Error e = expect_error([&] { store->add("text", 1); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(Contains(e.what(), "'text'"));
  store->set("max", std::to_string(INT64_MAX));
  EXPECT_EQ(expect_error([&] { store->add("max", 1); }).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(to_string(store->get("text")), "abc");
}

TEST(TcpStoreTest, CompareSetSemantics) {
  TcpStoreServer server;
  auto store = connect(server);
  // Missing key with a non-empty expected value: no change, the key stays missing.
  EXPECT_TRUE(store->compare_set("k", as_bytes("x"), as_bytes("y")).empty());
  EXPECT_FALSE(store->check(std::vector<std::string>{"k"}));
  // Missing key matches an empty expected value.
  EXPECT_EQ(to_string(store->compare_set("k", {}, as_bytes("v1"))), "v1");
  EXPECT_EQ(to_string(store->get("k")), "v1");
  // Match replaces.
  EXPECT_EQ(to_string(store->compare_set("k", as_bytes("v1"), as_bytes("v2"))), "v2");
  // Mismatch returns the current value and leaves it.
  EXPECT_EQ(to_string(store->compare_set("k", as_bytes("v1"), as_bytes("v3"))), "v2");
  EXPECT_EQ(to_string(store->get("k")), "v2");
  // Present key does not match empty expected.
  EXPECT_EQ(to_string(store->compare_set("k", {}, as_bytes("v4"))), "v2");
}

TEST(TcpStoreTest, CompareSetWakesWaiters) {
  TcpStoreServer server;
  auto waiter = connect(server);
  auto writer = connect(server);
  std::thread t([&] {
    std::this_thread::sleep_for(50ms);
    writer->compare_set("leader", {}, as_bytes("rank3"));
  });
  EXPECT_EQ(to_string(waiter->get("leader", 5000ms)), "rank3");
  t.join();
}

TEST(TcpStoreTest, CheckDeleteAndNumKeys) {
  TcpStoreServer server;
  auto store = connect(server);
  EXPECT_EQ(store->num_keys(), 0);
  store->set("a", "1");
  store->set("b", "2");
  EXPECT_EQ(store->num_keys(), 2);
  EXPECT_TRUE(store->check(std::vector<std::string>{"a", "b"}));
  EXPECT_FALSE(store->check(std::vector<std::string>{"a", "c"}));
  EXPECT_TRUE(store->check(std::vector<std::string>{}));
  EXPECT_TRUE(store->delete_key("a"));
  EXPECT_FALSE(store->delete_key("a"));
  EXPECT_FALSE(store->check(std::vector<std::string>{"a"}));
  EXPECT_EQ(store->num_keys(), 1);
  EXPECT_EQ(expect_error([&] { store->get("a", 50ms); }).code(), ErrorCode::kTimeout);
}

TEST(TcpStoreTest, MultiSetAndMultiGet) {
  TcpStoreServer server;
  auto store = connect(server);
  const std::vector<std::string> keys = {"x", "y", "z"};
  const std::vector<Bytes> values = {bytes_of("1"), bytes_of(std::string("\0\0", 2)), {}};
  store->multi_set(keys, values);
  EXPECT_EQ(store->num_keys(), 3);
  EXPECT_EQ(store->multi_get(keys, 1000ms), values);
  const std::vector<std::string> reordered = {"z", "x"};
  EXPECT_EQ(store->multi_get(reordered, 1000ms), (std::vector<Bytes>{{}, bytes_of("1")}));

  const std::vector<Bytes> too_few = {bytes_of("1")};
  const Error e = expect_error([&] { store->multi_set(keys, too_few); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
}

TEST(TcpStoreTest, MultiGetWaitsForEveryKeyAndTimesOut) {
  TcpStoreServer server;
  auto reader = connect(server);
  auto writer = connect(server);
  const std::vector<std::string> keys = {"p", "q"};
  std::thread t([&] {
    std::this_thread::sleep_for(50ms);
    writer->set("q", "Q");
    std::this_thread::sleep_for(50ms);
    writer->set("p", "P");
  });
  EXPECT_EQ(reader->multi_get(keys, 5000ms), (std::vector<Bytes>{bytes_of("P"), bytes_of("Q")}));
  t.join();

  const std::vector<std::string> partly = {"p", "never"};
  const Error e = expect_error([&] { reader->multi_get(partly, 100ms); });
  EXPECT_EQ(e.code(), ErrorCode::kTimeout);
  EXPECT_EQ(e.context().op, "store.multi_get");
  EXPECT_TRUE(Contains(e.what(), "'never'"));
}

TEST(TcpStoreTest, ConcurrentCallsOnOneClientAreSerialized) {
  TcpStoreServer server;
  auto store = connect(server);
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      for (int j = 0; j < 100; ++j) {
        store->add("shared", 1);
        store->set("t" + std::to_string(i), std::to_string(j));
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(store->add("shared", 0), 800);
  EXPECT_EQ(to_string(store->get("t7")), "99");
}

TEST(TcpStoreTest, OversizedKeyAndValueAreRejectedAndConnectionStaysUsable) {
  TcpStoreServerOptions options;
  options.max_key_bytes = 64;
  options.max_value_bytes = 1024;
  TcpStoreServer server(options);
  auto store = connect(server);

  const std::string long_key(100, 'k');
  Error e = expect_error([&] { store->set(long_key, "v"); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(Contains(e.what(), "max_key_bytes 64"));
  EXPECT_TRUE(Contains(e.what(), "100 bytes"));
  EXPECT_EQ(expect_error([&] { store->get(long_key, 10ms); }).code(), ErrorCode::kInvalidArgument);

  const std::string big_value(2000, 'v');
  e = expect_error([&] { store->set("ok_key", big_value); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(e.context().op, "store.set");
  EXPECT_TRUE(Contains(e.what(), "max_value_bytes 1024"));
  EXPECT_TRUE(Contains(e.what(), "2000 bytes"));
  EXPECT_TRUE(Contains(e.what(), "'ok_key'"));

  // A refused multi_set changes nothing, even its valid items.
  const std::vector<std::string> keys = {"fine", "too_big"};
  const std::vector<Bytes> values = {bytes_of("1"), Bytes(2000)};
  EXPECT_EQ(expect_error([&] { store->multi_set(keys, values); }).code(),
            ErrorCode::kInvalidArgument);

  // Same connection, still in step.
  EXPECT_EQ(store->num_keys(), 0);
  store->set("ok_key", std::string(1024, 'v'));
  EXPECT_EQ(store->get("ok_key").size(), 1024u);
}

TEST(TcpStoreTest, OversizedRequestIsDrainedAndConnectionStaysUsable) {
  TcpStoreServerOptions options;
  options.max_request_bytes = 4096;
  TcpStoreServer server(options);
  auto store = connect(server);
  const std::string huge(300000, 'h');
  const Error e = expect_error([&] { store->set("huge", huge); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(Contains(e.what(), "max_request_bytes 4096"));
  EXPECT_TRUE(Contains(e.what(), "set request"));
  store->set("small", "s");
  EXPECT_EQ(to_string(store->get("small")), "s");
  EXPECT_FALSE(store->check(std::vector<std::string>{"huge"}));
}

TEST(TcpStoreTest, ServerShutdownFailsBlockedClientsPromptly) {
  auto server = std::make_unique<TcpStoreServer>();
  constexpr int kClients = 4;
  std::vector<std::unique_ptr<TcpStore>> clients;
  for (int i = 0; i < kClients; ++i) clients.push_back(connect(*server));
  std::vector<std::optional<ErrorCode>> codes(kClients);
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] {
      try {
        if (i % 2 == 0) {
          clients[i]->get("never", 10000ms);
        } else {
          const std::vector<std::string> keys = {"never", "also_never"};
          clients[i]->wait(keys, 10000ms);
        }
      } catch (const Error& e) {
        codes[i] = e.code();
      }
    });
  }
  std::this_thread::sleep_for(200ms);
  const auto start = Clock::now();
  server.reset();
  for (auto& t : threads) t.join();
  EXPECT_LT(elapsed_ms(start), 2000);
  for (int i = 0; i < kClients; ++i) {
    ASSERT_TRUE(codes[i].has_value()) << "client " << i << " returned normally";
    EXPECT_TRUE(*codes[i] == ErrorCode::kPeerFailure || *codes[i] == ErrorCode::kStore)
        << "client " << i << ": " << error_code_name(*codes[i]);
  }
}

TEST(TcpStoreTest, CallAfterServerShutdownFailsWithinConnectTimeout) {
  auto server = std::make_unique<TcpStoreServer>();
  TcpStoreOptions options = client_options(server->port());
  options.connect_timeout = 200ms;
  TcpStore store(options);
  store.set("k", "v");
  server->shutdown();
  server->shutdown();  // Idempotent.
  const auto start = Clock::now();
  const Error first = expect_error([&] { store.get("k", 1000ms); });
  EXPECT_TRUE(first.code() == ErrorCode::kPeerFailure || first.code() == ErrorCode::kTimeout)
      << first.what();
  // Reconnecting fails too, after connect_timeout.
  EXPECT_EQ(expect_error([&] { store.ping(); }).code(), ErrorCode::kTimeout);
  EXPECT_LT(elapsed_ms(start), 2000);
}

TEST(TcpStoreTest, ClientConnectsBeforeServerStarts) {
  const uint16_t port = free_port();
  std::unique_ptr<TcpStoreServer> server;
  std::thread starter([&] {
    std::this_thread::sleep_for(300ms);
    TcpStoreServerOptions options;
    options.port = port;
    server = std::make_unique<TcpStoreServer>(options);
  });
  const auto start = Clock::now();
  TcpStoreOptions options = client_options(port);
  options.connect_timeout = 5000ms;
  TcpStore store(options);
  const int64_t waited_ms = elapsed_ms(start);
  starter.join();
  EXPECT_GE(waited_ms, 250);
  store.set("hello", "world");
  EXPECT_EQ(to_string(store.get("hello")), "world");
  EXPECT_EQ(server->port(), port);
}

TEST(TcpStoreTest, ConnectTimesOutWithoutServer) {
  const uint16_t port = free_port();
  TcpStoreOptions options = client_options(port);
  options.connect_timeout = 300ms;
  const auto start = Clock::now();
  const Error e = expect_error([&] { TcpStore store(options); });
  const int64_t waited_ms = elapsed_ms(start);
  EXPECT_EQ(e.code(), ErrorCode::kTimeout);
  EXPECT_EQ(e.context().op, "store.connect");
  EXPECT_TRUE(Contains(e.what(), "127.0.0.1:" + std::to_string(port)));
  EXPECT_GE(waited_ms, 290);
  EXPECT_LT(waited_ms, 1500);
}

TEST(TcpStoreServerTest, PortZeroPicksAPortAndBusyPortIsRefused) {
  TcpStoreServer server;
  EXPECT_NE(server.port(), 0);
  TcpStoreServerOptions options;
  options.port = server.port();
  const Error e = expect_error([&] { TcpStoreServer second(options); });
  EXPECT_EQ(e.code(), ErrorCode::kStore);
  EXPECT_TRUE(Contains(e.what(), server.address()));
}

// Speaks the wire protocol directly, to send what TcpStore never would.
class RawConnection {
 public:
  explicit RawConnection(uint16_t port) : socket_(io_) {
    socket_.connect({boost::asio::ip::make_address("127.0.0.1"), port});
  }

  // Sends `body` as one frame and returns the reply's status byte and payload.
  std::pair<store_protocol::Status, std::string> call(const std::vector<char>& frame) {
    send(frame);
    std::array<char, store_protocol::kFrameHeaderBytes> header;
    boost::asio::read(socket_, boost::asio::buffer(header));
    std::string body(store_protocol::decode_u32(header.data()), '\0');
    boost::asio::read(socket_, boost::asio::buffer(body));
    return {static_cast<store_protocol::Status>(body.at(0)), body.substr(1)};
  }

  void send(const std::vector<char>& frame) {
    boost::asio::write(socket_, boost::asio::buffer(frame));
  }

 private:
  boost::asio::io_context io_;
  boost::asio::ip::tcp::socket socket_;
};

TEST(TcpStoreServerTest, MalformedRequestsGetErrorRepliesAndHangupsAreHandled) {
  using store_protocol::Command;
  using store_protocol::Status;
  TcpStoreServer server;
  RawConnection raw(server.port());
  std::vector<char> frame;

  store_protocol::FrameWriter unknown(frame);
  unknown.u8(99);
  unknown.finish();
  auto [status, message] = raw.call(frame);
  EXPECT_EQ(status, Status::kInvalidArgument);
  EXPECT_TRUE(Contains(message, "unknown command 99"));

  store_protocol::FrameWriter truncated(frame);
  truncated.u8(static_cast<uint8_t>(Command::kSet));
  truncated.u32(100);  // Claims a 100-byte key, sends 3 bytes.
  truncated.u8('a');
  truncated.u8('b');
  truncated.u8('c');
  truncated.finish();
  std::tie(status, message) = raw.call(frame);
  EXPECT_EQ(status, Status::kError);
  EXPECT_TRUE(Contains(message, "malformed"));

  store_protocol::FrameWriter ping(frame);
  ping.u8(static_cast<uint8_t>(Command::kPing));
  ping.finish();
  EXPECT_EQ(raw.call(frame).first, Status::kOk);

  {
    // A client that parks a get and hangs up must not disturb anyone else.
    RawConnection quitter(server.port());
    store_protocol::FrameWriter get(frame);
    get.u8(static_cast<uint8_t>(Command::kGet));
    get.i64(10000);
    get.bytes(std::string_view("parked"));
    get.finish();
    quitter.send(frame);
    std::this_thread::sleep_for(50ms);
  }
  std::this_thread::sleep_for(50ms);
  auto store = connect(server);
  store->set("parked", "v");
  EXPECT_EQ(to_string(store->get("parked")), "v");
  store->ping();
}

TEST(PrefixStoreTest, IsolatesNamespacesOnOneServer) {
  TcpStoreServer server;
  std::shared_ptr<Store> base = connect(server);
  PrefixStore job_a("job_a", base);
  PrefixStore job_b("job_b", base);
  job_a.set("rank0", as_bytes("A"));
  job_b.set("rank0", as_bytes("B"));
  EXPECT_EQ(to_string(job_a.get("rank0", 100ms)), "A");
  EXPECT_EQ(to_string(job_b.get("rank0", 100ms)), "B");
  EXPECT_EQ(to_string(base->get("job_a/rank0", 100ms)), "A");

  job_a.set("only_a", as_bytes("1"));
  EXPECT_FALSE(job_b.check(std::vector<std::string>{"only_a"}));
  EXPECT_EQ(expect_error([&] { job_b.get("only_a", 50ms); }).code(), ErrorCode::kTimeout);

  EXPECT_EQ(job_a.add("count", 2), 2);
  EXPECT_EQ(job_b.add("count", 5), 5);
  EXPECT_TRUE(job_a.delete_key("count"));
  EXPECT_EQ(job_b.add("count", 0), 5);

  const std::vector<std::string> keys = {"m1", "m2"};
  job_b.multi_set(keys, std::vector<Bytes>{bytes_of("1"), bytes_of("2")});
  EXPECT_EQ(job_b.multi_get(keys, 100ms), (std::vector<Bytes>{bytes_of("1"), bytes_of("2")}));
  EXPECT_FALSE(job_a.check(keys));
  EXPECT_EQ(to_string(job_a.compare_set("rank0", as_bytes("A"), as_bytes("A2"))), "A2");
  EXPECT_EQ(to_string(job_b.get("rank0", 100ms)), "B");

  // num_keys counts the whole store.
  EXPECT_EQ(job_a.num_keys(), base->num_keys());
  EXPECT_EQ(job_a.num_keys(), 6);
  EXPECT_EQ(job_a.address(), server.address());
}

TEST(PrefixStoreTest, NestedPrefixesCompose) {
  TcpStoreServer server;
  std::shared_ptr<Store> base = connect(server);
  auto outer = std::make_shared<PrefixStore>("job", base);
  PrefixStore inner("comm0", outer);
  inner.set("uid", as_bytes("42"));
  EXPECT_EQ(to_string(base->get("job/comm0/uid", 100ms)), "42");
  EXPECT_EQ(to_string(outer->get("comm0/uid", 100ms)), "42");
  const std::vector<std::string> keys = {"uid"};
  inner.wait(keys, 100ms);
  // Timeout messages name the full key so it can be found on the server.
  const Error e = expect_error([&] { inner.get("missing", 50ms); });
  EXPECT_TRUE(Contains(e.what(), "'job/comm0/missing'"));
}

TEST(PrefixStoreTest, RejectsNullBase) {
  EXPECT_EQ(expect_error([] { PrefixStore store("p", nullptr); }).code(),
            ErrorCode::kInvalidArgument);
}

TEST(StoreProtocolTest, FramesRoundTrip) {
  std::vector<char> buffer;
  store_protocol::FrameWriter w(buffer);
  w.u8(7);
  w.u32(0xdeadbeef);
  w.i64(-42);
  w.bytes(std::string("a\0b", 3));
  w.finish();
  ASSERT_EQ(store_protocol::decode_u32(buffer.data()),
            buffer.size() - store_protocol::kFrameHeaderBytes);
  store_protocol::FrameReader r(
      std::span<const char>(buffer).subspan(store_protocol::kFrameHeaderBytes));
  EXPECT_EQ(r.u8(), 7);
  EXPECT_EQ(r.u32(), 0xdeadbeefu);
  EXPECT_EQ(r.i64(), -42);
  EXPECT_EQ(r.bytes(), std::string_view("a\0b", 3));
  EXPECT_EQ(r.remaining(), 0u);
  EXPECT_EQ(expect_error([&] { r.u8(); }).code(), ErrorCode::kStore);
}

TEST(StoreProtocolTest, BogusCountsAndLengthsAreRejected) {
  std::vector<char> buffer;
  store_protocol::FrameWriter w(buffer);
  w.u32(1000000);  // Claims a million keys in a 4-byte body.
  w.finish();
  store_protocol::FrameReader counts(
      std::span<const char>(buffer).subspan(store_protocol::kFrameHeaderBytes));
  EXPECT_EQ(expect_error([&] { counts.count(4); }).code(), ErrorCode::kStore);
  store_protocol::FrameReader lengths(
      std::span<const char>(buffer).subspan(store_protocol::kFrameHeaderBytes));
  EXPECT_EQ(expect_error([&] { lengths.bytes(); }).code(), ErrorCode::kStore);
}

TEST(StoreProtocolTest, QuoteKeyEscapesAndShortens) {
  EXPECT_EQ(store_protocol::quote_key("a/b"), "'a/b'");
  EXPECT_EQ(store_protocol::quote_key(std::string("\0\n'", 3)), "'\\x00\\x0a\\''");
  EXPECT_TRUE(Contains(store_protocol::quote_key(std::string(1000, 'k')), "(1000 bytes)"));
  const std::vector<std::string> keys = {"a", "b"};
  EXPECT_EQ(store_protocol::describe_keys(keys), "keys ['a', 'b']");
}

}  // namespace
}  // namespace meshrt
