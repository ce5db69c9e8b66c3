// The agents' rendezvous: node 0's agent hosts the job's store (embedded, no outside service),
// every agent joins through it, gets a node rank and learns the other nodes.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/store/store.h"
#include "runtime/store/tcp_store_server.h"

namespace meshrt::launcher {

// What one agent brings to the rendezvous.
struct RendezvousOptions {
  std::string host;    // Node 0's address; its agent serves the store there (one node: loopback).
  uint16_t port = 0;   // 0 (one node only): node 0 picks a free port.
  std::string run_id;  // Store keys live under "meshrun/<run_id>/".
  std::string token;   // The store's shared secret (MESHRT_STORE_TOKEN); empty: none.
  int nnodes = 1;
  int node_rank = -1;    // -1: assigned (the agent that manages to host the store is node 0).
  int nproc = 1;         // Ranks this agent starts.
  int max_restarts = 0;  // Must agree on every node.
  // --on-rank-failure's value ("restart-job", "continue"): must agree on every node, or a death
  // would stop the ranks of some nodes and leave the others to repair around it.
  std::string on_rank_failure = "restart-job";
  std::string log_dir;     // Reported to the others for the summary.
  std::string local_addr;  // This node's address as the others see it; empty: the host name.
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};  // For every wait on the others.
  std::function<bool()> should_stop;  // Polled while waiting; true aborts the wait.
};

// One node as the rendezvous saw it.
struct NodeInfo {
  int node_rank = -1;
  int nproc = 0;
  int rank_offset = 0;  // Global rank of its local rank 0: ranks are numbered node by node.
  std::string host;     // Its --local-addr, else the host name of its agent.
  int pid = 0;          // Process id of its agent.
  std::string log_dir;
};

// Joins the job. Node 0 keeps the store up until every agent has left (see leave()).
class Rendezvous {
 public:
  // Hosts the store if this is node 0 (or, with no node rank given, if the address is local and
  // the port free), connects, claims a node rank, and waits for every node. Throws
  // Error(kTimeout) naming the missing nodes, Error(kInvalidArgument) when the agents disagree
  // (node rank taken twice, different --nnodes or --max-restarts), Error(kAborted) when
  // should_stop returned true.
  explicit Rendezvous(RendezvousOptions options);
  // Shuts the store down when hosting it.
  ~Rendezvous();

  Rendezvous(const Rendezvous&) = delete;
  Rendezvous& operator=(const Rendezvous&) = delete;

  int node_rank() const { return node_rank_; }
  int nnodes() const { return options_.nnodes; }
  // Ranks in the whole job.
  int world_size() const { return world_size_; }
  // Every node, by node rank.
  const std::vector<NodeInfo>& nodes() const { return nodes_; }
  const NodeInfo& self() const { return nodes_[node_rank_]; }
  // Where the store is served: the ranks get this as MASTER_ADDR/MASTER_PORT.
  const std::string& store_host() const { return options_.host; }
  uint16_t store_port() const { return port_; }
  // Whether this agent hosts the store on an address other hosts can reach.
  bool hosts_reachable_store() const { return server_ && !server_->is_loopback(); }
  // The connection to the store, without a prefix.
  const std::shared_ptr<Store>& client() const { return client_; }
  // The launcher's namespace, "meshrun/<run_id>/".
  Store& store() { return *store_; }

  // Waits until every node reached the barrier `name` (within options.timeout).
  void barrier(const std::string& name);
  // Waits (polling should_stop) until every key is set or options.timeout passes; then throws
  // Error(kTimeout) whose message says which nodes are missing: key i belongs to node i.
  void wait_for_nodes(const std::vector<std::string>& keys, const std::string& what);
  // Tells the others this agent is done with the store. Node 0 then waits, up to `timeout`, for
  // every agent but `lost` ones (agents known dead) to leave before the store can go down.
  void leave(std::chrono::milliseconds timeout, int lost = 0);

 private:
  void host_or_connect();
  void claim_node_rank();
  void exchange_node_info();

  RendezvousOptions options_;
  std::unique_ptr<TcpStoreServer> server_;
  std::shared_ptr<Store> client_;
  std::unique_ptr<Store> store_;
  uint16_t port_ = 0;
  int node_rank_ = -1;
  int world_size_ = 0;
  std::vector<NodeInfo> nodes_;
  std::string identity_;  // "host:pid", the value of our node-rank claim.
};

}  // namespace meshrt::launcher
