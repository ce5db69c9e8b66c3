// DeviceMesh: an N-D grid of ranks with one named communicator per dim, like PyTorch's
// DeviceMesh, with closed-form rank math, one split per dim, and a cross-rank consistency check
// that fails every rank with a clear error where PyTorch hangs.
#pragma once

#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "../runtime/communicator.h"
#include "layout.h"

namespace meshrt {

// Options of a new mesh.
struct MeshOptions {
  std::string name;  // Prefix of its communicators' names; default "mesh<N>" (N-th on this world).
  // Bound of the cross-rank consistency check; 0 = the world's op timeout. The dims'
  // communicators take the world's op timeout either way.
  std::chrono::milliseconds timeout{0};
  // A backend per dim, by dim name ({"dp", "mpi"}), like PyTorch's backend_override; dims not
  // named use the world's backend. Every rank must pass the same map (checked). Needs a world
  // made by init().
  std::map<std::string, std::string> backend_override;
};

// The state a mesh shares with every mesh sliced, flattened or unflattened from it (internal).
struct MeshRoot;

// An N-D grid of ranks with one communicator per dim, made by the factories below. Coordinates and
// groups are computed locally; only creating communicators (factories, flatten, unflatten) is
// collective. A dim over the whole world in its rank order (a 1-D mesh, a 1 x N mesh) reuses the
// world communicator, as PyTorch does: its ops are traced under the world's name. World ranks
// outside the grid get a mesh without coordinate or communicators. Misuse throws
// Error(kInvalidArgument) naming the mesh.
class DeviceMesh {
 public:
  // Device type, e.g. "cpu" or "cuda".
  const std::string& device_type() const;
  // Number of dims.
  int ndim() const { return static_cast<int>(dims_.size()); }
  // Sizes of the dims.
  std::span<const int64_t> shape() const { return shape_; }
  // Number of ranks in the mesh.
  int64_t size() const;
  // Size of dim `dim`.
  int64_t size(int dim) const;
  // Names of the dims.
  std::span<const std::string> names() const { return names_; }
  // Index of the dim named `name`; throws kInvalidArgument listing the names if unknown.
  int dim_index(std::string_view name) const;
  // Whether this rank belongs to the mesh.
  bool is_member() const { return !coordinate_.empty(); }
  // This rank's coordinate, one entry per dim; empty when it is not a member.
  std::span<const int64_t> coordinate() const { return coordinate_; }
  // This rank's index along a dim (its rank in that dim's communicator). Without a dim, only
  // for 1-D meshes. Throws for non-members and unknown dims.
  int64_t local_rank(int dim) const;
  int64_t local_rank(std::string_view name) const;
  int64_t local_rank() const;
  // The communicator of a dim; dims of a sub-mesh share the parent's. By name, also a dim
  // flattened on this mesh's root. Without a dim, only for 1-D meshes. Throws for non-members.
  Communicator& comm(int dim) const;
  Communicator& comm(std::string_view name) const;
  Communicator& comm() const;
  // comm(dim) as shared ownership, to keep the communicator beyond the mesh.
  std::shared_ptr<Communicator> comm_ptr(int dim) const;
  // Every group of a dim within this mesh as global ranks in local-rank order, groups by their
  // first member's position (for reports; allocates). A slice or a flattened part is this
  // rank's sub-mesh, as in PyTorch: its groups stay inside it, and a non-member cannot ask.
  std::vector<std::vector<int>> groups(int dim) const;
  std::vector<std::vector<int>> groups(std::string_view name) const;
  // Global ranks of this rank's group along a dim, in local-rank order (allocates); empty for
  // non-members.
  std::vector<int> group_ranks(int dim) const;

  // The sub-mesh over `names` (dims of this mesh, or names flattened on the root when this is
  // the root), in ascending mesh order. Creates no communicator; throws for unknown, overlapping
  // or out-of-order dims.
  std::shared_ptr<DeviceMesh> slice(std::span<const std::string> names) const;
  std::shared_ptr<DeviceMesh> slice(std::initializer_list<std::string> names) const;
  // A 1-D mesh joining `names` (ascending mesh order) as one dim called `name` (default: the
  // names joined by '_'), registered on the root so that slice() and comm() of the root find it.
  // Collective over the world, non-members included: one split. The same name and layout again
  // reuses that communicator without a split; the same name for other dims throws.
  std::shared_ptr<DeviceMesh> flatten(std::span<const std::string> names, std::string name = "");
  std::shared_ptr<DeviceMesh> flatten(std::initializer_list<std::string> names,
                                      std::string name = "");
  // This mesh with dim `dim` replaced by dims of `sizes` (outermost first) named `names`; the
  // other dims keep their communicators. Collective over the world, non-members included: one
  // split per new dim. Throws unless the sizes multiply to the dim's size.
  std::shared_ptr<DeviceMesh> unflatten(std::string_view dim, std::vector<int64_t> sizes,
                                        std::vector<std::string> names);
  // Repair in place (docs/repair.md): the mesh without the replicas along `replica_dim` (default:
  // dim 0, e.g. "dp") that hold a rank of `failed` (global ranks, e.g. the world's
  // failed_ranks()); their siblings along the other dims leave with them. Called by every
  // living rank of the world: it aborts this mesh's communicators and the world, shrinks the
  // world around the leavers (ShrinkMode::kAbort), then makes every dim's communicator anew
  // ("mesh0/dp@1") with one split each and the consistency check. Returns nullptr on the ranks
  // that leave. Throws kInvalidArgument, naming why, on a slice, for a rank outside the world,
  // or when every replica holds a failed rank.
  std::shared_ptr<DeviceMesh> shrink(std::span<const int> failed,
                                     std::string_view replica_dim = "") const;
  // Global ranks of the world this mesh was made on that are known to have died (the world's
  // Communicator::failed_ranks()): what shrink() takes. Any rank, member or not.
  std::vector<int> failed_ranks() const;
  // Communicators this rank created for this mesh's root and every mesh derived from it (0 for
  // non-members).
  int communicators_created() const;
  // "DeviceMesh(mesh0: pp=2, dp=3, tp=4, 'cpu')".
  std::string describe() const;

  // Used by the factories below and by slice(), flatten() and unflatten(); creates one
  // communicator per dim (collective) when `comms` is empty.
  DeviceMesh(std::shared_ptr<MeshRoot> root, std::vector<mesh::Dim> dims,
             std::vector<std::shared_ptr<Communicator>> comms);

 private:
  const mesh::Dim& dim(int index) const;
  // Root positions of this mesh: all of them, or this rank's sub-mesh for a slice.
  std::vector<int64_t> positions() const;
  std::shared_ptr<Communicator> split_dim(const mesh::Dim& dim) const;
  [[noreturn]] void fail(std::string_view op, const std::string& problem) const;

  std::shared_ptr<MeshRoot> root_;
  std::vector<mesh::Dim> dims_;
  std::vector<std::shared_ptr<Communicator>> comms_;  // Null for non-members.
  std::vector<int64_t> shape_;
  std::vector<std::string> names_;
  std::vector<int64_t> coordinate_;
};

// The row-major mesh of `shape` over world ranks 0..prod(shape)-1, dims named `names` (default
// "dim0", "dim1", ...). Ranks beyond the mesh get no coordinate and no communicators.
// Collective over `world`: checks that every rank passed the same mesh, then one split per dim.
// Throws kInvalidArgument on every rank when they differ or the mesh does not fit the world.
std::shared_ptr<DeviceMesh> init_device_mesh(std::shared_ptr<Communicator> world,
                                             std::string_view device, std::vector<int64_t> shape,
                                             std::vector<std::string> names = {},
                                             MeshOptions options = {});
// The same over meshrt's default world (the one init() or run_inproc() made for this rank);
// throws kInvalidArgument when there is none. Note `device` comes last here.
std::shared_ptr<DeviceMesh> init_device_mesh(std::vector<int64_t> shape,
                                             std::vector<std::string> names = {},
                                             std::string_view device = "cpu");

// A mesh over an explicit array of world ranks (row-major, `shape`): any permutation or subset
// of the world, each rank at most once. Collective over `world`, as init_device_mesh().
std::shared_ptr<DeviceMesh> device_mesh_from_ranks(
    std::shared_ptr<Communicator> world, std::string_view device, std::vector<int64_t> shape,
    std::vector<int> ranks, std::vector<std::string> names = {}, MeshOptions options = {});

// Megatron-LM's layout: `order` such as "tp-cp-ep-dp-pp" lists dims fastest first and `sizes`
// gives each token's size in that order. Equal to the row-major mesh with the dims reversed, so
// groups (and flattened groups) match Megatron's RankGenerator. Collective over `world`. Like
// the RankGenerator, refuses ep > 1 together with cp > 1.
std::shared_ptr<DeviceMesh> init_megatron_mesh(std::shared_ptr<Communicator> world,
                                               std::string_view device, std::string_view order,
                                               std::vector<int64_t> sizes,
                                               MeshOptions options = {});

}  // namespace meshrt
