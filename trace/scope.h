// User scopes ("MLP.fc2" in the forward pass) that every op records: an RAII guard pushes a name
// and a phase on the calling thread's scope stack. Scope nodes are interned once and never freed,
// so a record holds a plain pointer and the hot path allocates nothing.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace meshrt::trace {

// Training phase of a scope; a nested scope without one inherits its parent's.
enum class Phase : uint8_t {
  kInherit,    // The parent's phase (kOther at the top level).
  kForward,    // Forward pass.
  kBackward,   // Backward pass.
  kOptimizer,  // Optimizer step.
  kOther       // Anything else; the root's phase.
};

// "forward", "backward", "optimizer", "other" ("other" also for kInherit).
std::string_view phase_name(Phase phase);

// One interned node of the scope tree.
struct ScopeNode {
  std::string name;                   // This level, e.g. "fc2".
  std::string path;                   // From the root, joined by '/', e.g. "MLP/fc2".
  Phase phase = Phase::kOther;        // Resolved: never kInherit.
  const ScopeNode* parent = nullptr;  // Null for the root only.
  int depth = 0;                      // 0 for the root ("" path).
};

// The root node: ops outside any scope.
const ScopeNode* root_scope();
// The calling thread's innermost scope (the root outside any).
const ScopeNode* current_scope();

// Pushes `name` (with `phase`, or the parent's) for the guard's lifetime on this thread. Ops
// enqueued meanwhile on this thread record it; ops enqueued from other threads do not. Guards
// must end in reverse order of creation (stack objects do).
class Scope {
 public:
  // Enters scope `name` under the thread's current one (interning its node under a global lock).
  explicit Scope(std::string_view name, Phase phase = Phase::kInherit);
  // Returns to the scope current at construction.
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  const ScopeNode* previous_;
};

// Marks the ops this thread enqueues while the guard lives as meshrt's own setup traffic
// (OpRecord::setup): split()'s exchange and DeviceMesh creation's agreement check. Nests.
class SetupOps {
 public:
  // Marks this thread's ops as setup traffic.
  SetupOps();
  // Restores the marking in effect at construction.
  ~SetupOps();
  SetupOps(const SetupOps&) = delete;
  SetupOps& operator=(const SetupOps&) = delete;

 private:
  bool previous_;
};

// Whether the calling thread is inside a SetupOps guard.
bool in_setup_ops();

}  // namespace meshrt::trace
