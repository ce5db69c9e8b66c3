#include "mesh/device_mesh.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <numeric>
#include <optional>
#include <set>
#include <stdexcept>

#include "runtime/backend_factory.h"
#include "runtime/error.h"
#include "runtime/init.h"
#include "trace/scope.h"

namespace meshrt {

// State shared by a mesh and everything sliced, flattened or unflattened from it.
struct MeshRoot {
  std::shared_ptr<Communicator> world;
  std::string device;
  std::string name;                             // "mesh0": prefix of communicator names.
  std::vector<int> rank_map;                    // Mesh position -> rank in `world`.
  int64_t my_position = -1;                     // This rank's position; -1 when not in the mesh.
  std::vector<std::string> dim_names;           // The root's dims, for flatten name clashes.
  std::map<std::string, std::string> backends;  // MeshOptions::backend_override.
  std::mutex mu;
  // Flattened dims by name. Not meshes: a mesh holds its root, which would make a cycle.
  struct Flat {
    mesh::Dim dim;
    std::shared_ptr<Communicator> comm;
  };
  std::map<std::string, Flat> flattened;
  int communicators_created = 0;
  int epoch = 0;  // The world's repair epoch: a shrunk mesh names its dims "mesh0/dp@1".
};

namespace {

std::string joined(std::span<const std::string> names, std::string_view sep) {
  return fmt::format("{}", fmt::join(names, sep));
}

// FNV-1a: equal on every rank for equal text (std::hash makes no such promise).
uint64_t fnv1a(std::string_view s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

[[noreturn]] void fail_at(const Communicator& world, std::string_view mesh, std::string_view op,
                          const std::string& problem) {
  throw Error(ErrorCode::kInvalidArgument,
              {world.global_rank(), std::string(mesh), std::string(op), -1}, problem);
}

// Numbers meshes per world communicator, so that names agree across ranks even when many
// in-process ranks share this process.
std::string next_mesh_name(const Communicator& world) {
  static std::mutex mu;
  static std::map<uint64_t, int> counts;
  std::lock_guard lock(mu);
  return fmt::format("mesh{}", counts[world.info()->uid]++);
}

// Every rank gathers every rank's description of the mesh it is building. A one-word hash goes
// first; the texts are exchanged only when the hashes differ, to name who passed what.
void check_same_everywhere(Communicator& world, const std::string& mesh_name,
                           const std::string& description, std::chrono::milliseconds timeout) {
  const trace::SetupOps setup;  // Reports tell these all_gathers from the program's own.
  const OpOptions opts{timeout};
  const int n = world.size();
  std::vector<int64_t> mine{static_cast<int64_t>(fnv1a(description))};
  std::vector<int64_t> hashes(n);
  world.all_gather(view(mine), view(hashes), opts)->wait();
  if (std::all_of(hashes.begin(), hashes.end(), [&](int64_t h) { return h == hashes[0]; })) {
    return;
  }
  std::vector<int64_t> len{static_cast<int64_t>(description.size())}, lens(n);
  world.all_gather(view(len), view(lens), opts)->wait();
  const size_t width = static_cast<size_t>(*std::max_element(lens.begin(), lens.end()));
  std::vector<uint8_t> padded(width, 0), all(width * n);
  std::copy(description.begin(), description.end(), padded.begin());
  world.all_gather(view(padded), view(all), opts)->wait();
  std::map<std::string, std::vector<int>> by_text;
  for (int r = 0; r < n; ++r) {
    const char* begin = reinterpret_cast<const char*>(all.data()) + r * width;
    by_text[std::string(begin, static_cast<size_t>(lens[r]))].push_back(world.global_ranks()[r]);
  }
  std::vector<std::pair<std::string, std::vector<int>>> groups(by_text.begin(), by_text.end());
  std::stable_sort(groups.begin(), groups.end(),
                   [](const auto& a, const auto& b) { return a.second.size() > b.second.size(); });
  std::vector<std::string> parts;
  for (const auto& [text, ranks] : groups) {
    parts.push_back(fmt::format("rank{} [{}] passed {}", ranks.size() > 1 ? "s" : "",
                                fmt::join(ranks, ", "), text));
  }
  fail_at(world, mesh_name, "init_device_mesh",
          fmt::format("ranks built different meshes: {}", fmt::join(parts, "; ")));
}

std::vector<std::string> default_names(size_t ndim) {
  std::vector<std::string> names;
  for (size_t i = 0; i < ndim; ++i) names.push_back(fmt::format("dim{}", i));
  return names;
}

void check_names(const Communicator& world, std::string_view mesh, std::string_view op,
                 std::span<const std::string> names) {
  std::set<std::string_view> seen;
  for (const auto& n : names) {
    if (n.empty()) fail_at(world, mesh, op, "a dim name is empty");
    if (!seen.insert(n).second) {
      fail_at(world, mesh, op,
              fmt::format("dim name '{}' is repeated in [{}]: each name must be unique", n,
                          joined(names, ", ")));
    }
  }
}

// Before any split: a dim or backend that does not exist fails every rank alike.
void check_backends(const Communicator& world, std::string_view mesh,
                    std::span<const std::string> names,
                    const std::map<std::string, std::string>& overrides) {
  std::vector<std::string> known = built_backends();
  known.emplace_back(world.backend_name());
  for (const auto& [dim, backend] : overrides) {
    if (std::find(names.begin(), names.end(), dim) == names.end()) {
      fail_at(world, mesh, "init_device_mesh",
              fmt::format("backend_override names dim '{}', which is not among [{}]", dim,
                          joined(names, ", ")));
    }
    if (std::find(known.begin(), known.end(), backend) == known.end()) {
      fail_at(world, mesh, "init_device_mesh",
              fmt::format("backend_override gives dim '{}' backend '{}', which this build does not "
                          "have; it has: {}",
                          dim, backend, fmt::join(known, ", ")));
    }
  }
}

std::shared_ptr<DeviceMesh> build(std::shared_ptr<Communicator> world, std::string_view device,
                                  std::vector<int64_t> shape, std::vector<int> ranks,
                                  bool explicit_ranks, std::vector<std::string> names,
                                  MeshOptions options) {
  // A mesh made on a shrunk world belongs to its repair epoch.
  const int epoch = world ? world->epoch() : 0;
  if (!world)
    throw Error(ErrorCode::kInvalidArgument, {}, "init_device_mesh: no world communicator");
  const std::string mesh_name = options.name.empty() ? next_mesh_name(*world) : options.name;
  const auto timeout = options.timeout.count() > 0 ? options.timeout : world->timeout();
  std::string description = fmt::format(
      "device={} shape=[{}] names=[{}] ranks={}", device, fmt::join(shape, ","), joined(names, ","),
      explicit_ranks ? fmt::format("[{}]", fmt::join(ranks, ",")) : "row-major");
  if (!options.backend_override.empty()) {
    std::vector<std::string> overrides;
    for (const auto& [dim, backend] : options.backend_override) {
      overrides.push_back(dim + "=" + backend);
    }
    description += fmt::format(" backends=[{}]", joined(overrides, ","));
  }
  // First agree, then validate: a rank with bad arguments then fails together with the others
  // instead of leaving them waiting in the first split.
  check_same_everywhere(*world, mesh_name, description, timeout);

  const char* op = "init_device_mesh";
  if (device.find(':') != std::string_view::npos) {
    fail_at(*world, mesh_name, op,
            fmt::format("device '{}' has an index: give the type only (e.g. 'cuda')", device));
  }
  if (shape.empty()) fail_at(*world, mesh_name, op, "the shape has no dims");
  if (names.empty()) names = default_names(shape.size());
  if (names.size() != shape.size()) {
    fail_at(*world, mesh_name, op,
            fmt::format("{} names [{}] for {} dims of shape [{}]: give one name per dim",
                        names.size(), joined(names, ", "), shape.size(), fmt::join(shape, ", ")));
  }
  check_names(*world, mesh_name, op, names);
  check_backends(*world, mesh_name, names, options.backend_override);
  int64_t total = 1;
  bool overflow = false;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] <= 0) {
      fail_at(*world, mesh_name, op,
              fmt::format("dim '{}' has size {}: sizes must be positive", names[i], shape[i]));
    }
    overflow |= __builtin_mul_overflow(total, shape[i], &total);
  }
  if (overflow || total > world->size()) {
    fail_at(*world, mesh_name, op,
            fmt::format("mesh [{}] needs {} ranks but the world has {}", fmt::join(shape, ", "),
                        overflow ? "more than 2^63" : std::to_string(total), world->size()));
  }
  if (explicit_ranks) {
    if (static_cast<int64_t>(ranks.size()) != total) {
      fail_at(*world, mesh_name, op,
              fmt::format("{} ranks given for a mesh of {} positions", ranks.size(), total));
    }
    std::set<int> seen;
    for (int r : ranks) {
      if (r < 0 || r >= world->size()) {
        fail_at(*world, mesh_name, op,
                fmt::format("rank {} is outside the world [0, {})", r, world->size()));
      }
      if (!seen.insert(r).second) {
        fail_at(*world, mesh_name, op, fmt::format("rank {} appears twice in the mesh", r));
      }
    }
  } else {
    ranks.resize(static_cast<size_t>(total));
    std::iota(ranks.begin(), ranks.end(), 0);
  }

  auto root = std::make_shared<MeshRoot>();
  root->world = world;
  root->device = std::string(device);
  root->name = mesh_name;
  root->rank_map = std::move(ranks);
  const auto it = std::find(root->rank_map.begin(), root->rank_map.end(), world->rank());
  root->my_position = it == root->rank_map.end() ? -1 : it - root->rank_map.begin();
  root->dim_names = names;
  root->backends = std::move(options.backend_override);
  root->epoch = epoch;
  auto mesh = std::make_shared<DeviceMesh>(root, mesh::row_major(shape, names),
                                           std::vector<std::shared_ptr<Communicator>>{});
  return mesh;
}

}  // namespace

DeviceMesh::DeviceMesh(std::shared_ptr<MeshRoot> root, std::vector<mesh::Dim> dims,
                       std::vector<std::shared_ptr<Communicator>> comms)
    : root_(std::move(root)), dims_(std::move(dims)), comms_(std::move(comms)) {
  for (const auto& d : dims_) {
    shape_.push_back(d.size());
    names_.push_back(d.name);
    if (root_->my_position >= 0) coordinate_.push_back(d.coordinate(root_->my_position));
  }
  // A mesh made without communicators gets one split per dim, in dim order on every rank.
  if (comms_.empty()) {
    for (const auto& d : dims_) comms_.push_back(split_dim(d));
  }
}

std::shared_ptr<Communicator> DeviceMesh::split_dim(const mesh::Dim& d) const {
  const int64_t p = root_->my_position;
  // A dim over the whole world in its rank order is the world: reuse it, as PyTorch does, rather
  // than open a second set of connections (and shared memory) between the same ranks. Every rank
  // decides alike from the agreed mesh, so the splits stay collective.
  if (d.size() == root_->world->size() && !root_->backends.contains(d.name)) {
    bool in_order = true;
    for (int64_t t = 0; t < d.size() && in_order; ++t) {
      in_order = root_->rank_map[d.member(d.base(0), t)] == t;
    }
    if (in_order) return root_->world;
  }
  CommOptions options;
  options.name = root_->name + "/" + d.name;
  if (root_->epoch > 0) options.name += "@" + std::to_string(root_->epoch);
  options.description = "mesh_" + d.name;
  options.mesh_dim = d.name;
  if (auto it = root_->backends.find(d.name); it != root_->backends.end()) {
    options.backend = it->second;
  }
  auto comm = root_->world->split(p >= 0 ? static_cast<int>(d.base(p)) : kNoColor,
                                  p >= 0 ? static_cast<int>(d.coordinate(p)) : 0, options);
  if (comm) {
    std::lock_guard lock(root_->mu);
    ++root_->communicators_created;
  }
  return comm;
}

std::shared_ptr<DeviceMesh> DeviceMesh::shrink(std::span<const int> failed,
                                               std::string_view replica_dim) const {
  constexpr std::string_view op = "shrink";
  const bool is_root = names_.size() == root_->dim_names.size() &&
                       std::equal(names_.begin(), names_.end(), root_->dim_names.begin());
  if (!is_root) fail(op, "shrink the whole mesh, not a slice or flattened part of it");
  const int d = replica_dim.empty() ? 0 : dim_index(replica_dim);
  const Communicator& world = *root_->world;
  const std::span<const int> world_globals = world.global_ranks();
  // The replicas along dim d that hold a failed rank leave whole: their siblings along the other
  // dims cannot go on without the failed rank's part.
  std::set<int64_t> dropped;
  std::set<int> excluded;  // World ranks.
  for (int g : failed) {
    const auto w = std::find(world_globals.begin(), world_globals.end(), g);
    if (w == world_globals.end()) {
      fail(op, fmt::format("failed rank {} is not in the world [{}] this mesh was made on", g,
                           fmt::join(world_globals, ", ")));
    }
    const int wr = static_cast<int>(w - world_globals.begin());
    excluded.insert(wr);
    const auto p = std::find(root_->rank_map.begin(), root_->rank_map.end(), wr);
    if (p != root_->rank_map.end())
      dropped.insert(dims_[d].coordinate(p - root_->rank_map.begin()));
  }
  if (static_cast<int64_t>(dropped.size()) == shape_[d]) {
    fail(op, fmt::format("every one of the {} '{}' replicas holds a failed rank (global [{}]): "
                         "no replica is left to go on with; restart the job instead",
                         shape_[d], names_[d], fmt::join(failed, ", ")));
  }
  std::vector<int> kept;  // World ranks, in the shrunk mesh's row-major order.
  for (int64_t p = 0; p < static_cast<int64_t>(root_->rank_map.size()); ++p) {
    if (dropped.contains(dims_[d].coordinate(p))) {
      excluded.insert(root_->rank_map[p]);
    } else {
      kept.push_back(root_->rank_map[p]);
    }
  }
  // Every communicator of the mesh stops at once: ops in flight fail, none is waited out.
  for (const auto& c : comms_) {
    if (c && c != root_->world) c->abort();
  }
  {
    std::lock_guard lock(root_->mu);
    for (auto& [name, flat] : root_->flattened) {
      if (flat.comm && flat.comm != root_->world) flat.comm->abort();
    }
  }
  const std::vector<int> out(excluded.begin(), excluded.end());
  if (excluded.contains(world.rank())) {
    root_->world->abort();
    return nullptr;
  }
  auto survivors = root_->world->shrink(out, ShrinkMode::kAbort);
  // The shrunk world numbers the survivors in their old order.
  for (int& r : kept) {
    r -= static_cast<int>(std::distance(excluded.begin(), excluded.lower_bound(r)));
  }
  std::vector<int64_t> shape = shape_;
  shape[d] -= static_cast<int64_t>(dropped.size());
  MeshOptions options;
  options.name = root_->name;
  options.backend_override = root_->backends;
  return build(std::move(survivors), root_->device, std::move(shape), std::move(kept), true, names_,
               std::move(options));
}

std::vector<int> DeviceMesh::failed_ranks() const {
  std::vector<int> failed;
  for (int r : root_->world->failed_ranks()) failed.push_back(root_->world->global_ranks()[r]);
  return failed;
}

void DeviceMesh::fail(std::string_view op, const std::string& problem) const {
  fail_at(*root_->world, root_->name, op, problem);
}

const std::string& DeviceMesh::device_type() const { return root_->device; }

int64_t DeviceMesh::size() const {
  return std::accumulate(shape_.begin(), shape_.end(), int64_t{1}, std::multiplies<>());
}

const mesh::Dim& DeviceMesh::dim(int index) const {
  if (index < 0 || index >= ndim()) {
    fail("dim", fmt::format("dim {} is out of range [0, {})", index, ndim()));
  }
  return dims_[index];
}

int64_t DeviceMesh::size(int d) const { return dim(d).size(); }

int DeviceMesh::dim_index(std::string_view name) const {
  for (int i = 0; i < ndim(); ++i) {
    if (names_[i] == name) return i;
  }
  fail("dim", fmt::format("no dim named '{}'; the dims are [{}]", name, joined(names_, ", ")));
}

int64_t DeviceMesh::local_rank(int d) const {
  const mesh::Dim& x = dim(d);
  if (!is_member())
    fail("local_rank", fmt::format("rank {} is not in the mesh", root_->world->rank()));
  return x.coordinate(root_->my_position);
}
int64_t DeviceMesh::local_rank(std::string_view name) const { return local_rank(dim_index(name)); }
int64_t DeviceMesh::local_rank() const {
  if (ndim() != 1) fail("local_rank", fmt::format("the mesh has {} dims: name one", ndim()));
  return local_rank(0);
}

std::shared_ptr<Communicator> DeviceMesh::comm_ptr(int d) const {
  dim(d);
  if (!comms_[d]) {
    fail("comm", fmt::format("rank {} is not in the mesh: it has no communicator for dim '{}'",
                             root_->world->rank(), names_[d]));
  }
  return comms_[d];
}
Communicator& DeviceMesh::comm(int d) const { return *comm_ptr(d); }
Communicator& DeviceMesh::comm(std::string_view name) const {
  for (int i = 0; i < ndim(); ++i) {
    if (names_[i] == name) return comm(i);
  }
  {
    std::lock_guard lock(root_->mu);
    auto it = root_->flattened.find(std::string(name));
    if (it != root_->flattened.end()) {
      if (!it->second.comm) {
        fail("comm", fmt::format("rank {} is not in the mesh: it has no communicator for '{}'",
                                 root_->world->rank(), name));
      }
      return *it->second.comm;
    }
  }
  return comm(dim_index(name));  // throws, listing the dims
}
Communicator& DeviceMesh::comm() const {
  if (ndim() != 1) fail("comm", fmt::format("the mesh has {} dims: name one", ndim()));
  return comm(0);
}

std::vector<int64_t> DeviceMesh::positions() const {
  const int64_t n = static_cast<int64_t>(root_->rank_map.size());
  std::vector<int64_t> out;
  if (size() == n) {
    out.resize(static_cast<size_t>(n));
    std::iota(out.begin(), out.end(), 0);
    return out;
  }
  // A slice or a flattened part is this rank's sub-mesh, as in PyTorch, which is undefined for a
  // rank outside it.
  if (!is_member()) {
    fail("groups", fmt::format("rank {} is not in the mesh, and a sub-mesh is the one that "
                               "contains the calling rank",
                               root_->world->rank()));
  }
  int64_t base = root_->my_position;
  for (const auto& d : dims_) base = d.base(base);
  out = {base};
  for (const auto& d : dims_) {
    std::vector<int64_t> next;
    for (const int64_t q : out) {
      for (int64_t t = 0; t < d.size(); ++t) next.push_back(q + d.member(base, t) - base);
    }
    out = std::move(next);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::vector<int>> DeviceMesh::groups(int d) const {
  const mesh::Dim& x = dim(d);
  const auto world_ranks = root_->world->global_ranks();
  std::vector<std::vector<int>> out;
  for (const int64_t p : positions()) {
    if (x.coordinate(p) != 0) continue;
    std::vector<int> g;
    for (int64_t t = 0; t < x.size(); ++t)
      g.push_back(world_ranks[root_->rank_map[x.member(p, t)]]);
    out.push_back(std::move(g));
  }
  return out;
}
std::vector<std::vector<int>> DeviceMesh::groups(std::string_view name) const {
  return groups(dim_index(name));
}

std::vector<int> DeviceMesh::group_ranks(int d) const {
  const mesh::Dim& x = dim(d);
  if (!is_member()) return {};
  const auto world_ranks = root_->world->global_ranks();
  const int64_t base = x.base(root_->my_position);
  std::vector<int> g;
  for (int64_t t = 0; t < x.size(); ++t)
    g.push_back(world_ranks[root_->rank_map[x.member(base, t)]]);
  return g;
}

std::shared_ptr<DeviceMesh> DeviceMesh::slice(std::span<const std::string> names) const {
  const bool is_root = names_ == root_->dim_names;
  std::vector<mesh::Dim> dims;
  std::vector<std::shared_ptr<Communicator>> comms;
  for (const auto& n : names) {
    const auto it = std::find(names_.begin(), names_.end(), n);
    if (it != names_.end()) {
      dims.push_back(dims_[it - names_.begin()]);
      comms.push_back(comms_[it - names_.begin()]);
      continue;
    }
    std::optional<MeshRoot::Flat> flat;
    if (is_root) {
      std::lock_guard lock(root_->mu);
      if (auto f = root_->flattened.find(n); f != root_->flattened.end()) flat = f->second;
    }
    if (!flat) {
      fail("slice", fmt::format("no dim named '{}'; the dims are [{}]{}", n, joined(names_, ", "),
                                is_root ? " plus names flattened on this mesh" : ""));
    }
    dims.push_back(flat->dim);
    comms.push_back(flat->comm);
  }
  // Overlap: the parts of all dims, sorted by stride, must not share positions (each part's span
  // stride x size reaches at most the next stride), else two dims cover the same ranks. Then
  // ascending mesh order: each dim's outermost stride is below the previous dim's.
  std::vector<mesh::Part> all;
  for (const auto& d : dims) {
    for (const auto& p : d.parts) {
      if (p.size > 1) all.push_back(p);
    }
  }
  std::sort(all.begin(), all.end(),
            [](const auto& a, const auto& b) { return a.stride < b.stride; });
  for (size_t i = 1; i < all.size(); ++i) {
    if (all[i].stride < all[i - 1].stride * all[i - 1].size) {
      fail("slice", fmt::format("dims [{}] overlap: slicing dims that cover the same ranks (a "
                                "flattened dim and one of its parts) is not allowed",
                                joined(names, ", ")));
    }
  }
  // PyTorch's rule: the dims, read in the order given, must run outermost to innermost, so every
  // part of a dim lies outside every part of the next. A flattened dim whose parts lie on both
  // sides of another named dim would make a transposed mesh, which neither PyTorch nor meshrt
  // builds.
  auto strides = [](const mesh::Dim& d) {
    std::vector<int64_t> out;
    for (const auto& p : d.parts) {
      if (p.size > 1) out.push_back(p.stride);
    }
    return out;
  };
  for (size_t i = 0; i < dims.size(); ++i) {
    for (size_t j = i + 1; j < dims.size(); ++j) {
      const auto outer = strides(dims[i]), inner = strides(dims[j]);
      if (outer.empty() || inner.empty()) continue;
      const int64_t outer_min = *std::min_element(outer.begin(), outer.end());
      const int64_t outer_max = *std::max_element(outer.begin(), outer.end());
      const int64_t inner_max = *std::max_element(inner.begin(), inner.end());
      if (outer_min > inner_max) continue;
      const std::string why =
          outer_max > inner_max
              ? fmt::format("'{}' has ranks both outside and inside '{}'", names[i], names[j])
              : fmt::format("'{}' is inside '{}' in the mesh, so it must come after it", names[i],
                            names[j]);
      fail("slice", fmt::format("dims [{}] are not in ascending mesh order [{}]: {}; list dims "
                                "outermost first, and do not slice a flattened dim together "
                                "with a dim that lies between its parts",
                                joined(names, ", "), joined(names_, ", "), why));
    }
  }
  if (dims.empty()) fail("slice", "no dims named");
  return std::make_shared<DeviceMesh>(root_, std::move(dims), std::move(comms));
}

std::shared_ptr<DeviceMesh> DeviceMesh::slice(std::initializer_list<std::string> names) const {
  return slice(std::span<const std::string>(names.begin(), names.size()));
}

std::shared_ptr<DeviceMesh> DeviceMesh::flatten(std::span<const std::string> names,
                                                std::string name) {
  if (names.empty()) fail("flatten", "no dims named");
  if (name.empty()) name = joined(names, "_");
  std::vector<mesh::Dim> dims;
  int last = -1;
  for (const auto& n : names) {
    const int i = dim_index(n);
    if (i <= last) {
      fail("flatten", fmt::format("dims [{}] are not distinct and in ascending mesh order [{}]",
                                  joined(names, ", "), joined(names_, ", ")));
    }
    last = i;
    dims.push_back(dims_[i]);
  }
  if (ndim() == 1 && names.size() == 1 && name == names_[0]) {
    return std::make_shared<DeviceMesh>(root_, dims_, comms_);
  }
  if (std::find(root_->dim_names.begin(), root_->dim_names.end(), name) != root_->dim_names.end()) {
    fail("flatten", fmt::format("'{}' is already a dim of the mesh: choose another name", name));
  }
  mesh::Dim flat = mesh::flatten(dims, name);
  std::shared_ptr<Communicator> comm;
  {
    std::lock_guard lock(root_->mu);
    if (auto it = root_->flattened.find(name); it != root_->flattened.end()) {
      if (it->second.dim.parts != flat.parts) {
        fail("flatten",
             fmt::format("'{}' was flattened before from other dims: choose another name", name));
      }
      comm = it->second.comm;  // Same name and layout: no new communicator.
    }
  }
  if (!comm) {
    comm = split_dim(flat);
    std::lock_guard lock(root_->mu);
    root_->flattened.emplace(name, MeshRoot::Flat{flat, comm});
  }
  return std::make_shared<DeviceMesh>(root_, std::vector<mesh::Dim>{std::move(flat)},
                                      std::vector<std::shared_ptr<Communicator>>{comm});
}

std::shared_ptr<DeviceMesh> DeviceMesh::flatten(std::initializer_list<std::string> names,
                                                std::string name) {
  return flatten(std::span<const std::string>(names.begin(), names.size()), std::move(name));
}

std::shared_ptr<DeviceMesh> DeviceMesh::unflatten(std::string_view dim_name,
                                                  std::vector<int64_t> sizes,
                                                  std::vector<std::string> names) {
  const int d = dim_index(dim_name);
  if (sizes.empty() || sizes.size() != names.size()) {
    fail("unflatten",
         fmt::format("{} sizes and {} names: give one name per size", sizes.size(), names.size()));
  }
  check_names(*root_->world, root_->name, "unflatten", names);
  int64_t product = 1;
  bool overflow = false;
  for (int64_t s : sizes) {
    if (s <= 0) fail("unflatten", fmt::format("size {} is not positive", s));
    overflow |= __builtin_mul_overflow(product, s, &product);
  }
  if (overflow || product != shape_[d]) {
    fail("unflatten",
         fmt::format("sizes [{}] multiply to {} but dim '{}' has {}", fmt::join(sizes, ", "),
                     overflow ? "more than 2^63" : std::to_string(product), dim_name, shape_[d]));
  }
  for (int i = 0; i < ndim(); ++i) {
    if (i == d) continue;
    if (std::find(names.begin(), names.end(), names_[i]) != names.end()) {
      fail("unflatten", fmt::format("'{}' is already a dim of the mesh", names_[i]));
    }
  }
  std::vector<mesh::Dim> parts;
  try {
    parts = mesh::unflatten(dims_[d], sizes, names);
  } catch (const std::invalid_argument& e) {
    fail("unflatten", fmt::format("dim '{}' cannot be split into [{}]: {}", dim_name,
                                  fmt::join(sizes, ", "), e.what()));
  }
  std::vector<mesh::Dim> dims(dims_.begin(), dims_.begin() + d);
  std::vector<std::shared_ptr<Communicator>> comms(comms_.begin(), comms_.begin() + d);
  for (auto& p : parts) {
    comms.push_back(split_dim(p));
    dims.push_back(std::move(p));
  }
  dims.insert(dims.end(), dims_.begin() + d + 1, dims_.end());
  comms.insert(comms.end(), comms_.begin() + d + 1, comms_.end());
  return std::make_shared<DeviceMesh>(root_, std::move(dims), std::move(comms));
}

int DeviceMesh::communicators_created() const {
  std::lock_guard lock(root_->mu);
  return root_->communicators_created;
}

std::string DeviceMesh::describe() const {
  std::vector<std::string> dims;
  for (int i = 0; i < ndim(); ++i) dims.push_back(fmt::format("{}={}", names_[i], shape_[i]));
  return fmt::format("DeviceMesh({}: {}, '{}')", root_->name, fmt::join(dims, ", "), root_->device);
}

std::shared_ptr<DeviceMesh> init_device_mesh(std::shared_ptr<Communicator> world,
                                             std::string_view device, std::vector<int64_t> shape,
                                             std::vector<std::string> names, MeshOptions options) {
  return build(std::move(world), device, std::move(shape), {}, false, std::move(names),
               std::move(options));
}

std::shared_ptr<DeviceMesh> init_device_mesh(std::vector<int64_t> shape,
                                             std::vector<std::string> names,
                                             std::string_view device) {
  return init_device_mesh(default_world(), device, std::move(shape), std::move(names));
}

std::shared_ptr<DeviceMesh> device_mesh_from_ranks(
    std::shared_ptr<Communicator> world, std::string_view device, std::vector<int64_t> shape,
    std::vector<int> ranks, std::vector<std::string> names, MeshOptions options) {
  return build(std::move(world), device, std::move(shape), std::move(ranks), true, std::move(names),
               std::move(options));
}

std::shared_ptr<DeviceMesh> init_megatron_mesh(std::shared_ptr<Communicator> world,
                                               std::string_view device, std::string_view order,
                                               std::vector<int64_t> sizes, MeshOptions options) {
  std::vector<std::string> tokens;
  size_t start = 0;
  while (start <= order.size()) {
    const size_t end = std::min(order.find('-', start), order.size());
    tokens.emplace_back(order.substr(start, end - start));
    start = end + 1;
  }
  if (tokens.size() != sizes.size()) {
    throw Error(ErrorCode::kInvalidArgument,
                {world ? world->global_rank() : -1, "", "init_megatron_mesh", -1},
                fmt::format("order '{}' has {} dims but {} sizes were given", order, tokens.size(),
                            sizes.size()));
  }
  // Megatron's RankGenerator asserts the same: EP lives only in its expert generator and CP only
  // in its dense one, which lay out the same world twice. Build those as two meshes (or one mesh
  // and unflatten()) instead.
  auto size_of = [&](std::string_view token) -> int64_t {
    const auto it = std::find(tokens.begin(), tokens.end(), token);
    return it == tokens.end() ? 1 : sizes[it - tokens.begin()];
  };
  if (size_of("ep") > 1 && size_of("cp") > 1) {
    throw Error(ErrorCode::kInvalidArgument,
                {world ? world->global_rank() : -1, "", "init_megatron_mesh", -1},
                fmt::format("order '{}' has ep={} and cp={}: Megatron-LM does not allow EP and CP "
                            "both above 1 in one rank generator (CP belongs to the dense layout, "
                            "EP to the expert layout); make one mesh per layout",
                            order, size_of("ep"), size_of("cp")));
  }
  // Megatron lists the fastest dim first; a row-major mesh lists it last.
  std::reverse(tokens.begin(), tokens.end());
  std::reverse(sizes.begin(), sizes.end());
  return init_device_mesh(std::move(world), device, std::move(sizes), std::move(tokens),
                          std::move(options));
}

}  // namespace meshrt
