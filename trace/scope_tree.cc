#include "trace/scope_tree.h"

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>

#include "trace/atomic_file.h"
#include "trace/scope_tree_html.h"

namespace meshrt::trace {
namespace {

using Json = nlohmann::ordered_json;

std::string dim_of(const OpRecord& r) {
  return r.comm->mesh_dim.empty() ? r.comm->name : r.comm->mesh_dim;
}

}  // namespace

ScopeTree& ScopeTree::instance() {
  // Leaked, as every sink: worker threads may still deliver while static destructors run.
  static ScopeTree* tree = new ScopeTree;
  return *tree;
}

void ScopeTree::write_at_exit(std::string pattern) {
  write_at_exit(&ScopeTree::exit_pattern_, std::move(pattern));
}

void ScopeTree::write_html_at_exit(std::string pattern) {
  write_at_exit(&ScopeTree::exit_html_pattern_, std::move(pattern));
}

void ScopeTree::write_at_exit(std::string ScopeTree::*which, std::string pattern) {
  {
    std::lock_guard lock(mu_);
    this->*which = std::move(pattern);
  }
  enable();
  run_at_exit_once(write_exit_files);
}

void ScopeTree::write_exit_files() {
  ScopeTree& tree = instance();
  std::string json_pattern, html_pattern;
  {
    std::lock_guard lock(tree.mu_);
    json_pattern = tree.exit_pattern_;
    html_pattern = tree.exit_html_pattern_;
  }
  for (int rank : tree.ranks()) {
    const std::string json = tree.json(rank, 0);
    if (!json_pattern.empty()) {
      write_output_file(output_path(json_pattern, rank), json, "scope tree");
    }
    if (!html_pattern.empty()) {
      write_output_file(output_path(html_pattern, rank), scope_tree_html(json),
                        "scope tree viewer");
    }
  }
}

void ScopeTree::enable() {
  static std::shared_ptr<Sink> self(&instance(), [](Sink*) {});
  std::lock_guard lock(mu_);
  if (!enabled_) add_sink(self);
  enabled_ = true;
}

void ScopeTree::disable() {
  std::lock_guard lock(mu_);
  if (enabled_) remove_sink(this);
  enabled_ = false;
}

void ScopeTree::reset() {
  std::lock_guard lock(mu_);
  ranks_.clear();
}

void ScopeTree::on_end(const OpRecord& r) {
  if (!r.comm) return;
  std::lock_guard lock(mu_);
  if (!enabled_) return;
  RankData& rank = ranks_[r.comm->global_rank];
  NodeStats& node = rank.nodes[r.scope ? r.scope : root_scope()];
  ++node.self_counts[std::string(r.op)];
  DimStats& d = node.dims[dim_of(r)];
  ++d.count;
  d.bytes += r.bytes;
  d.time_ns += run_ns(r);
  if (rank.ops.size() < kMaxOpsPerRank) rank.ops.push_back(r);
}

std::vector<int> ScopeTree::ranks() const {
  std::lock_guard lock(mu_);
  std::vector<int> out;
  for (const auto& [rank, data] : ranks_) out.push_back(rank);
  return out;
}

std::string ScopeTree::json(int global_rank, int noise_level) const {
  std::lock_guard lock(mu_);
  Json doc = {{"rank", global_rank}, {"noise_level", noise_level}};
  const auto it = ranks_.find(global_rank);
  const RankData empty;
  const RankData& data = it == ranks_.end() ? empty : it->second;

  std::map<const ScopeNode*,
           std::set<const ScopeNode*, bool (*)(const ScopeNode*, const ScopeNode*)>>
      children;
  // Siblings in name order; the same name in two phases is two nodes.
  auto by_name = +[](const ScopeNode* a, const ScopeNode* b) {
    return std::tie(a->path, a->phase) < std::tie(b->path, b->phase);
  };
  for (const auto& [node, stats] : data.nodes) {
    for (const ScopeNode* n = node; n->parent != nullptr; n = n->parent) {
      children.try_emplace(n->parent, by_name).first->second.insert(n);
    }
  }
  std::map<const ScopeNode*, std::vector<const OpRecord*>> ops;
  if (noise_level >= 1) {
    for (const auto& r : data.ops) ops[r.scope ? r.scope : root_scope()].push_back(&r);
  }
  std::function<Json(const ScopeNode*, std::map<std::string, uint64_t>&)> build =
      [&](const ScopeNode* n, std::map<std::string, uint64_t>& total) -> Json {
    Json node = {{"scope", n->path}, {"name", n->name}, {"phase", phase_name(n->phase)}};
    std::map<std::string, uint64_t> mine;
    Json self = Json::object(), dims = Json::object();
    if (auto s = data.nodes.find(n); s != data.nodes.end()) {
      for (const auto& [op, c] : s->second.self_counts) {
        self[op] = c;
        mine[op] += c;
      }
      for (const auto& [dim, d] : s->second.dims) {
        dims[dim] = {{"count", d.count}, {"bytes", d.bytes}, {"time_ms", d.time_ns / 1e6}};
      }
    }
    Json kids = Json::array();
    if (auto c = children.find(n); c != children.end()) {
      for (const ScopeNode* child : c->second) kids.push_back(build(child, mine));
    }
    Json cumulative = Json::object();
    for (const auto& [op, c] : mine) {
      cumulative[op] = c;
      total[op] += c;
    }
    node["collectives"] = cumulative;
    node["self"] = self;
    node["dims"] = dims;
    if (noise_level >= 1) {
      Json list = Json::array();
      for (const OpRecord* r : ops[n]) {
        Json e = {{"op", r->op},
                  {"dtype", r->dtype},
                  {"mesh_dim", dim_of(*r)},
                  {"input_count", r->input_count},
                  {"output_count", r->output_count}};
        if (noise_level >= 2) {
          e["bytes"] = r->bytes;
          e["time_ms"] = run_ns(*r) / 1e6;
        }
        if (noise_level >= 3) {
          e["comm"] = r->comm->name;
          e["group_size"] = r->comm->global_ranks.size();
          e["collective_seq"] = r->collective_seq;
          e["p2p_seq"] = r->p2p_seq;
          e["op_seq"] = r->op_seq;
          e["reduce_op"] = r->reduce_op;
          e["root_or_peer"] = r->root_or_peer;
          e["state"] = op_state_name(r->state);
          e["caller"] = fmt::format("{}:{}", r->caller_file, r->caller_line);
        }
        list.push_back(std::move(e));
      }
      node["ops"] = std::move(list);
    }
    node["children"] = std::move(kids);
    return node;
  };
  std::map<std::string, uint64_t> total;
  doc["root"] = build(root_scope(), total);
  return doc.dump(2) + "\n";
}

std::string ScopeTree::table(int global_rank, int noise_level, bool color) const {
  const Json doc = Json::parse(json(global_rank, noise_level));
  const char* yellow = color ? "\x1b[33m" : "";
  const char* red = color ? "\x1b[31m" : "";
  const char* reset = color ? "\x1b[0m" : "";
  std::string out = fmt::format("scope tree, rank {} (noise level {})\n", global_rank, noise_level);
  std::function<void(const Json&, int)> print = [&](const Json& n, int depth) {
    const std::string indent(2 * depth, ' ');
    out +=
        fmt::format("{}{} [{}]\n", indent,
                    n["name"].get<std::string>().empty() ? "Global" : n["name"].get<std::string>(),
                    n["phase"].get<std::string>());
    for (const auto& [op, c] : n["collectives"].items()) {
      out += fmt::format("{}  {}*{}: {}{}\n", indent, yellow, op, c.get<uint64_t>(), reset);
    }
    if (noise_level >= 2) {
      for (const auto& [dim, d] : n["dims"].items()) {
        out += fmt::format("{}  dim {}: {} ops, {} bytes, {:.3f} ms\n", indent, dim,
                           d["count"].get<uint64_t>(), d["bytes"].get<uint64_t>(),
                           d["time_ms"].get<double>());
      }
    }
    if (noise_level >= 1 && n.contains("ops")) {
      for (const auto& e : n["ops"]) {
        out += fmt::format("{}  {}**{}{} {} on {}: {} -> {} elements", indent, red,
                           e["op"].get<std::string>(), reset, e["dtype"].get<std::string>(),
                           e["mesh_dim"].get<std::string>(), e["input_count"].get<uint64_t>(),
                           e["output_count"].get<uint64_t>());
        if (noise_level >= 2) {
          out += fmt::format(", {} bytes, {:.3f} ms", e["bytes"].get<uint64_t>(),
                             e["time_ms"].get<double>());
        }
        if (noise_level >= 3) out += fmt::format(", {}", e["caller"].get<std::string>());
        out += "\n";
      }
    }
    for (const auto& child : n["children"]) print(child, depth + 1);
  };
  print(doc["root"], 0);
  return out;
}

bool ScopeTree::write(const std::string& path, int global_rank, int noise_level,
                      bool as_json) const {
  return write_file_atomically(
      path, as_json ? json(global_rank, noise_level) : table(global_rank, noise_level, false));
}

}  // namespace meshrt::trace
