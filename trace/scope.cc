#include "trace/scope.h"

#include <map>
#include <memory>
#include <mutex>
#include <tuple>

namespace meshrt::trace {
namespace {

// Nodes live for the whole process: records keep pointers to them.
struct Interner {
  std::mutex mu;
  std::map<std::tuple<const ScopeNode*, std::string, Phase>, std::unique_ptr<ScopeNode>> nodes;
  ScopeNode root{"", "", Phase::kOther, nullptr, 0};
};

Interner& interner() {
  static Interner* i = new Interner();  // Never destroyed: threads may record during exit.
  return *i;
}

// Read by every op: initial-exec TLS reads them at a fixed offset, where the default model for a
// shared library calls __tls_get_addr (it showed in per-op profiles).
[[gnu::tls_model("initial-exec")]] thread_local const ScopeNode* current = nullptr;
[[gnu::tls_model("initial-exec")]] thread_local bool setup_ops = false;

const ScopeNode* intern(const ScopeNode* parent, std::string_view name, Phase phase) {
  Interner& in = interner();
  std::lock_guard lock(in.mu);
  auto& slot = in.nodes[{parent, std::string(name), phase}];
  if (!slot) {
    slot = std::make_unique<ScopeNode>();
    slot->name = std::string(name);
    slot->path = parent->path.empty() ? slot->name : parent->path + "/" + slot->name;
    slot->phase = phase;
    slot->parent = parent;
    slot->depth = parent->depth + 1;
  }
  return slot.get();
}

}  // namespace

std::string_view phase_name(Phase phase) {
  switch (phase) {
    case Phase::kForward:
      return "forward";
    case Phase::kBackward:
      return "backward";
    case Phase::kOptimizer:
      return "optimizer";
    case Phase::kInherit:
    case Phase::kOther:
      return "other";
  }
  return "other";
}

const ScopeNode* root_scope() { return &interner().root; }

const ScopeNode* current_scope() { return current ? current : root_scope(); }

Scope::Scope(std::string_view name, Phase phase) : previous_(current) {
  const ScopeNode* parent = current_scope();
  current = intern(parent, name, phase == Phase::kInherit ? parent->phase : phase);
}

Scope::~Scope() { current = previous_; }

SetupOps::SetupOps() : previous_(setup_ops) { setup_ops = true; }

SetupOps::~SetupOps() { setup_ops = previous_; }

bool in_setup_ops() { return setup_ops; }

}  // namespace meshrt::trace
