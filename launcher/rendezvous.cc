#include "launcher/rendezvous.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <thread>

#include "runtime/error.h"
#include "runtime/store/prefix_store.h"
#include "runtime/store/tcp_store.h"

namespace meshrt::launcher {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Each wait on the store is cut in slices this long so that a signal to meshrun is noticed.
constexpr milliseconds kPollSlice{200};
// Each connection attempt: short, for the same reason.
constexpr milliseconds kConnectSlice{1000};

ErrorContext context() { return {-1, "", "meshrun.rendezvous", -1}; }

std::string host_name() {
  char name[256] = {};
  ::gethostname(name, sizeof(name) - 1);
  return name;
}

std::string seconds(milliseconds ms) { return fmt::format("{:.1f} s", ms.count() / 1000.0); }

}  // namespace

Rendezvous::Rendezvous(RendezvousOptions options) : options_(std::move(options)) {
  identity_ = fmt::format("{}:{}", host_name(), ::getpid());
  host_or_connect();
  store_ = std::make_unique<PrefixStore>("meshrun/" + options_.run_id, client_);
  claim_node_rank();
  exchange_node_info();
}

Rendezvous::~Rendezvous() = default;

void Rendezvous::host_or_connect() {
  // One node: every client is on this host, so nothing else needs to reach the store.
  if (options_.nnodes == 1) options_.host = "127.0.0.1";
  const bool must_host = options_.node_rank == 0 || options_.nnodes == 1;
  if (must_host || options_.node_rank < 0) {
    TcpStoreServerOptions so;
    so.host = options_.host;
    so.port = options_.port;
    so.token = options_.token;
    try {
      server_ = std::make_unique<TcpStoreServer>(so);
    } catch (const Error& e) {
      // Without a node rank, failing to bind means another agent (or host) serves it.
      if (must_host) {
        throw Error(ErrorCode::kStore, context(),
                    fmt::format("node 0 cannot host the store at {}:{}: {}", options_.host,
                                options_.port, e.detail()));
      }
    }
  }
  port_ = server_ ? server_->port() : options_.port;
  const auto deadline = Clock::now() + options_.timeout;
  std::string last_error;
  for (;;) {
    TcpStoreOptions co;
    co.host = options_.host;
    co.port = port_;
    co.connect_timeout = std::min<milliseconds>(
        kConnectSlice, std::chrono::duration_cast<milliseconds>(deadline - Clock::now()));
    co.timeout = options_.timeout;
    co.token = options_.token;
    try {
      client_ = std::make_shared<TcpStore>(co);
      return;
    } catch (const Error& e) {
      if (e.code() != ErrorCode::kTimeout) throw;
      // A slice cut short by the deadline says less than one that reached the server (and may
      // say why it hung up): keep the latter.
      if (last_error.empty() || e.detail().find("the server accepted") != std::string::npos ||
          last_error.find("the server accepted") == std::string::npos) {
        last_error = e.detail();
      }
    }
    if (options_.should_stop && options_.should_stop()) {
      throw Error(ErrorCode::kAborted, context(), "interrupted while connecting to the store");
    }
    if (Clock::now() >= deadline) {
      throw Error(ErrorCode::kTimeout, context(),
                  fmt::format("no store at {}:{} within {}: is node 0's meshrun running there? "
                              "(last: {})",
                              options_.host, port_, seconds(options_.timeout), last_error));
    }
  }
}

void Rendezvous::claim_node_rank() {
  // Returns the agent holding rank k after our attempt to take it.
  auto claim = [this](int k) {
    return to_string(
        store_->compare_set(fmt::format("nodes/claim/{}", k), {}, as_bytes(identity_)));
  };
  if (options_.node_rank >= 0 || server_) {
    // The store's host is node 0, so that the node that gathers the dumps is the one with the
    // store, and node 0 is always somebody.
    const int k = server_ ? 0 : options_.node_rank;
    const std::string holder = claim(k);
    if (holder != identity_) {
      throw Error(ErrorCode::kInvalidArgument, context(),
                  fmt::format("node rank {} is already taken by the agent {}; give every agent "
                              "its own --node-rank, or none of them",
                              k, holder));
    }
    node_rank_ = k;
    return;
  }
  for (int k = 1; k < options_.nnodes; ++k) {
    if (claim(k) == identity_) {
      node_rank_ = k;
      return;
    }
  }
  throw Error(ErrorCode::kInvalidArgument, context(),
              fmt::format("all {} node ranks are taken: more agents than --nnodes {}?",
                          options_.nnodes, options_.nnodes));
}

void Rendezvous::exchange_node_info() {
  const nlohmann::json mine = {
      {"nproc", options_.nproc},
      {"host", options_.local_addr.empty() ? host_name() : options_.local_addr},
      {"pid", ::getpid()},
      {"log_dir", options_.log_dir},
      {"nnodes", options_.nnodes},
      {"max_restarts", options_.max_restarts},
      {"on_rank_failure", options_.on_rank_failure}};
  store_->set(fmt::format("nodes/info/{}", node_rank_), as_bytes(mine.dump()));
  std::vector<std::string> keys;
  for (int k = 0; k < options_.nnodes; ++k) keys.push_back(fmt::format("nodes/info/{}", k));
  wait_for_nodes(keys, "join");
  const auto values = store_->multi_get(keys, options_.timeout);
  for (int k = 0; k < options_.nnodes; ++k) {
    const auto j = nlohmann::json::parse(to_string(values[k]));
    for (const auto& [field, flag] :
         {std::pair{"nnodes", "--nnodes"}, std::pair{"max_restarts", "--max-restarts"},
          std::pair{"on_rank_failure", "--on-rank-failure"}}) {
      const nlohmann::json theirs = j.value(field, nlohmann::json());  // null: an older agent.
      if (theirs != mine[field]) {
        throw Error(ErrorCode::kInvalidArgument, context(),
                    fmt::format("node {} (agent {}:{}) has {} {} but node {} has {}", k,
                                j["host"].get<std::string>(), j["pid"].get<int>(), flag,
                                theirs.dump(), node_rank_, mine[field].dump()));
      }
    }
    NodeInfo n;
    n.node_rank = k;
    n.nproc = j["nproc"].get<int>();
    n.rank_offset = world_size_;
    n.host = j["host"].get<std::string>();
    n.pid = j["pid"].get<int>();
    n.log_dir = j["log_dir"].get<std::string>();
    world_size_ += n.nproc;
    nodes_.push_back(std::move(n));
  }
}

void Rendezvous::barrier(const std::string& name) {
  store_->set(fmt::format("{}/{}", name, node_rank_), "1");
  std::vector<std::string> keys;
  for (int k = 0; k < options_.nnodes; ++k) keys.push_back(fmt::format("{}/{}", name, k));
  wait_for_nodes(keys, name);
}

void Rendezvous::wait_for_nodes(const std::vector<std::string>& keys, const std::string& what) {
  const auto deadline = Clock::now() + options_.timeout;
  for (;;) {
    if (options_.should_stop && options_.should_stop()) {
      throw Error(ErrorCode::kAborted, context(),
                  fmt::format("interrupted while waiting for the other nodes ({})", what));
    }
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) break;
    try {
      store_->wait(keys, std::min(left, kPollSlice));
      return;
    } catch (const Error& e) {
      if (e.code() != ErrorCode::kTimeout) throw;
    }
  }
  std::vector<int> missing;
  for (size_t k = 0; k < keys.size(); ++k) {
    if (!store_->check({&keys[k], 1})) missing.push_back(static_cast<int>(k));
  }
  if (missing.empty()) return;
  throw Error(ErrorCode::kTimeout, context(),
              fmt::format("rendezvous '{}' of run '{}' at {}:{} timed out after {}: node(s) {} "
                          "of {} missing (do all agents use the same --rdzv-endpoint, "
                          "--rdzv-id and --nnodes?)",
                          what, options_.run_id, options_.host, port_, seconds(options_.timeout),
                          fmt::join(missing, ", "), keys.size()));
}

void Rendezvous::leave(milliseconds timeout, int lost) {
  store_->add("left", 1);
  if (!server_) return;
  const auto deadline = Clock::now() + timeout;
  while (store_->add("left", 0) < options_.nnodes - lost && Clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(20));
  }
}

}  // namespace meshrt::launcher
