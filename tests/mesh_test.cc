// DeviceMesh: the closed-form layout math against brute force and against Megatron's rank
// generator, meshes of 1 to 4 dims on up to 64 in-process ranks (groups, collectives, slicing,
// flatten, unflatten), every validation error, and a mismatched mesh failing on every rank.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <mutex>
#include <numeric>

#include "mesh/device_mesh.h"
#include "mesh/meshrt.h"
#include "runtime/backend_factory.h"

namespace meshrt {
namespace {

// Row-major coordinates of `r` in `shape`, computed by counting (not by the formulas).
std::vector<int64_t> brute_coordinate(const std::vector<int64_t>& shape, int64_t r) {
  std::vector<int64_t> c(shape.size(), 0);
  for (int64_t i = 0; i < r; ++i) {
    for (size_t d = shape.size(); d-- > 0;) {
      if (++c[d] < shape[d]) break;
      c[d] = 0;
    }
  }
  return c;
}

// The ranks that differ from `r` only in the dims of `dims`, ordered lexicographically by their
// coordinates on those dims (outer dim slowest): the group semantics PyTorch documents.
std::vector<int64_t> brute_group(const std::vector<int64_t>& shape, int64_t r,
                                 const std::vector<int>& dims) {
  const int64_t n = std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>());
  const auto mine = brute_coordinate(shape, r);
  std::vector<std::pair<std::vector<int64_t>, int64_t>> members;
  for (int64_t q = 0; q < n; ++q) {
    const auto c = brute_coordinate(shape, q);
    bool same = true;
    std::vector<int64_t> key;
    for (size_t d = 0; d < shape.size(); ++d) {
      if (std::find(dims.begin(), dims.end(), static_cast<int>(d)) != dims.end()) {
        key.push_back(c[d]);
      } else if (c[d] != mine[d]) {
        same = false;
      }
    }
    if (same) members.emplace_back(key, q);
  }
  std::sort(members.begin(), members.end());
  std::vector<int64_t> out;
  for (const auto& m : members) out.push_back(m.second);
  return out;
}

std::vector<std::string> names_for(size_t n) {
  std::vector<std::string> out;
  for (size_t i = 0; i < n; ++i) out.push_back("d" + std::to_string(i));
  return out;
}

TEST(Layout, RowMajorCoordinatesAndGroupsMatchBruteForce) {
  const std::vector<std::vector<int64_t>> shapes = {
      {6}, {2, 3}, {3, 1, 2}, {2, 3, 4}, {2, 2, 2, 2}};
  for (const auto& shape : shapes) {
    const auto names = names_for(shape.size());
    const auto dims = mesh::row_major(shape, names);
    const int64_t n = std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>());
    for (int64_t r = 0; r < n; ++r) {
      const auto c = brute_coordinate(shape, r);
      for (size_t d = 0; d < shape.size(); ++d) {
        ASSERT_EQ(dims[d].coordinate(r), c[d]);
        std::vector<int64_t> group;
        for (int64_t t = 0; t < dims[d].size(); ++t)
          group.push_back(dims[d].member(dims[d].base(r), t));
        ASSERT_EQ(group, brute_group(shape, r, {static_cast<int>(d)}));
      }
    }
  }
}

TEST(Layout, FlattenedGroupsAreLexicographicInMeshOrder) {
  const std::vector<int64_t> shape{2, 3, 4};
  const auto dims = mesh::row_major(shape, names_for(3));
  const std::vector<std::vector<int>> subsets = {{0, 1}, {1, 2}, {0, 2}, {0, 1, 2}};
  for (const auto& subset : subsets) {
    std::vector<mesh::Dim> chosen;
    for (int d : subset) chosen.push_back(dims[d]);
    const mesh::Dim flat = mesh::flatten(chosen, "f");
    for (int64_t r = 0; r < 24; ++r) {
      std::vector<int64_t> group;
      for (int64_t t = 0; t < flat.size(); ++t) group.push_back(flat.member(flat.base(r), t));
      const auto want = brute_group(shape, r, subset);
      ASSERT_EQ(group, want);
      ASSERT_EQ(group[flat.coordinate(r)], r);  // local rank = position in that order
    }
  }
}

TEST(Layout, UnflattenEqualsTheFinerRowMajorMesh) {
  // (6, 4) with dim 0 unflattened to (2, 3) is the row-major mesh (2, 3, 4).
  const auto coarse = mesh::row_major(std::vector<int64_t>{6, 4}, names_for(2));
  const auto parts =
      mesh::unflatten(coarse[0], std::vector<int64_t>{2, 3}, std::vector<std::string>{"a", "b"});
  const auto fine = mesh::row_major(std::vector<int64_t>{2, 3, 4}, names_for(3));
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[0].parts, fine[0].parts);
  EXPECT_EQ(parts[1].parts, fine[1].parts);
  // Unflattening a flattened non-contiguous dim gives back its parts.
  const mesh::Dim flat = mesh::flatten(std::vector<mesh::Dim>{fine[0], fine[2]}, "f");
  const auto back =
      mesh::unflatten(flat, std::vector<int64_t>{2, 4}, std::vector<std::string>{"x", "y"});
  EXPECT_EQ(back[0].parts, fine[0].parts);
  EXPECT_EQ(back[1].parts, fine[2].parts);
  // (2, 3) cannot be cut into (3, 2): 2 does not divide the inner factor 3.
  const mesh::Dim two_three = mesh::flatten(std::vector<mesh::Dim>{fine[0], fine[1]}, "g");
  EXPECT_THROW(
      mesh::unflatten(two_three, std::vector<int64_t>{3, 2}, std::vector<std::string>{"x", "y"}),
      std::invalid_argument);
}

// Megatron-LM's RankGenerator, written from its description: global rank = sum of index * prefix
// product over the order's tokens (first token fastest); groups enumerate the unmasked tokens
// (first fastest) x the masked tokens (first fastest).
std::vector<std::vector<int64_t>> megatron_groups(const std::vector<int64_t>& sizes,
                                                  const std::vector<bool>& mask) {
  std::vector<int64_t> stride(sizes.size());
  int64_t s = 1;
  for (size_t i = 0; i < sizes.size(); ++i) {
    stride[i] = s;
    s *= sizes[i];
  }
  auto enumerate = [&](bool masked) {
    std::vector<std::pair<int64_t, int64_t>> dims;  // (size, stride), first fastest
    for (size_t i = 0; i < sizes.size(); ++i)
      if (mask[i] == masked) dims.emplace_back(sizes[i], stride[i]);
    std::vector<int64_t> offsets{0};
    for (const auto& [size, st] : dims) {
      std::vector<int64_t> next;
      for (int64_t k = 0; k < size; ++k)
        for (int64_t o : offsets) next.push_back(o + k * st);
      offsets = next;
    }
    return offsets;
  };
  std::vector<std::vector<int64_t>> groups;
  for (int64_t outer : enumerate(false)) {
    std::vector<int64_t> g;
    for (int64_t inner : enumerate(true)) g.push_back(outer + inner);
    groups.push_back(g);
  }
  return groups;
}

TEST(Megatron, OrderStringMeshGivesMegatronGroupsForEveryMask) {
  // order tp-cp-dp-pp with sizes (2, 1, 3, 2): world 12.
  const std::vector<std::string> tokens{"tp", "cp", "dp", "pp"};
  const std::vector<int64_t> sizes{2, 1, 3, 2};
  std::mutex mu;
  std::vector<std::string> failures;
  run_inproc(12, [&](Communicator& world) {
    auto m = init_megatron_mesh(default_world(), "cpu", "tp-cp-dp-pp", sizes);
    EXPECT_EQ(std::vector<std::string>(m->names().begin(), m->names().end()),
              (std::vector<std::string>{"pp", "dp", "cp", "tp"}));
    for (int mask_bits = 1; mask_bits < 16; ++mask_bits) {
      std::vector<bool> mask(4);
      std::vector<std::string> chosen;  // in mesh order (reversed tokens)
      for (int i = 3; i >= 0; --i) {
        mask[i] = (mask_bits >> i) & 1;
        if (mask[i]) chosen.push_back(tokens[i]);
      }
      const auto want = megatron_groups(sizes, mask);
      std::vector<int> mine;
      for (const auto& g : want)
        if (std::find(g.begin(), g.end(), world.rank()) != g.end()) mine.assign(g.begin(), g.end());
      std::vector<int> got;
      if (chosen.size() == 1) {
        got = m->group_ranks(m->dim_index(chosen[0]));
      } else {
        got = m->flatten(chosen)->group_ranks(0);
      }
      if (got != mine) {
        std::lock_guard lock(mu);
        failures.push_back(fmt::format("rank {} mask {}: got [{}] want [{}]", world.rank(),
                                       mask_bits, fmt::join(got, ","), fmt::join(mine, ",")));
      }
    }
  });
  EXPECT_TRUE(failures.empty()) << failures.front();
}

// Every rank all_reduces its global rank on every dim and checks the sum of its group.
void check_mesh_collectives(const DeviceMesh& m, Communicator& world,
                            std::vector<std::string>& failures, std::mutex& mu) {
  for (int d = 0; d < m.ndim(); ++d) {
    const auto members = m.group_ranks(d);
    Communicator& c = m.comm(d);
    std::vector<int64_t> x{world.global_rank()};
    c.all_reduce(view(x))->wait();
    const int64_t want = std::accumulate(members.begin(), members.end(), int64_t{0});
    std::vector<int> comm_ranks(c.global_ranks().begin(), c.global_ranks().end());
    // A dim over the whole world is the world itself, named as such.
    const bool named = &c == &world || (c.name() == "mesh0/" + std::string(m.names()[d]) &&
                                        c.info()->mesh_dim == m.names()[d] &&
                                        c.description() == "mesh_" + m.names()[d]);
    if (x[0] != want || comm_ranks != members || c.rank() != m.local_rank(d) || !named) {
      std::lock_guard lock(mu);
      failures.push_back(fmt::format("rank {} dim {}: sum {} want {}, comm '{}' ranks [{}] vs [{}]",
                                     world.rank(), m.names()[d], x[0], want, c.name(),
                                     fmt::join(comm_ranks, ","), fmt::join(members, ",")));
    }
  }
}

struct MeshCase {
  int world;
  std::vector<int64_t> shape;
};

class MeshShapes : public ::testing::TestWithParam<MeshCase> {};

TEST_P(MeshShapes, CoordinatesGroupsAndCollectivesOnEveryDim) {
  const auto& [world_size, shape] = GetParam();
  std::mutex mu;
  std::vector<std::string> failures;
  run_inproc(world_size, [&](Communicator& world) {
    auto m = init_device_mesh(shape, names_for(shape.size()));
    const int64_t n = m->size();
    if (world.rank() >= n) {
      EXPECT_FALSE(m->is_member());
      EXPECT_THROW(m->comm(0), Error);
      return;
    }
    EXPECT_EQ(std::vector<int64_t>(m->coordinate().begin(), m->coordinate().end()),
              brute_coordinate(shape, world.rank()));
    // Dims over the whole world reuse the world's communicator.
    const auto spanning = std::count(shape.begin(), shape.end(), int64_t{world_size});
    EXPECT_EQ(m->communicators_created(), static_cast<int>(shape.size() - spanning));
    for (int d = 0; d < m->ndim(); ++d) {
      const auto g = brute_group(shape, world.rank(), {d});
      EXPECT_EQ(m->group_ranks(d), std::vector<int>(g.begin(), g.end()));
      EXPECT_EQ(m->groups(d).size(), static_cast<size_t>(n / shape[d]));
    }
    check_mesh_collectives(*m, world, failures, mu);
  });
  EXPECT_TRUE(failures.empty()) << failures.front();
}

INSTANTIATE_TEST_SUITE_P(Sizes, MeshShapes,
                         ::testing::Values(MeshCase{4, {4}}, MeshCase{6, {2, 3}},
                                           MeshCase{7, {2, 3}}, MeshCase{24, {2, 3, 4}},
                                           MeshCase{16, {2, 2, 2, 2}}, MeshCase{64, {2, 4, 8}},
                                           MeshCase{64, {4, 2, 2, 4}}));

TEST(DeviceMesh, SliceFlattenUnflattenReuseAndCreateTheRightCommunicators) {
  std::mutex mu;
  std::vector<std::string> failures;
  run_inproc(24, [&](Communicator& world) {
    auto m = init_device_mesh({2, 3, 4}, {"pp", "dp", "tp"});
    EXPECT_EQ(m->communicators_created(), 3);
    // Slices reuse the parent's communicators.
    auto dp_tp = m->slice({"dp", "tp"});
    EXPECT_EQ(&dp_tp->comm("tp"), &m->comm("tp"));
    EXPECT_EQ(&m->slice({"pp", "tp"})->comm(1), &m->comm(2));
    EXPECT_EQ(m->communicators_created(), 3);
    // Flatten: one new communicator, registered on the root, cached by name and layout.
    auto flat = m->flatten({"dp", "tp"});
    EXPECT_EQ(flat->names()[0], "dp_tp");
    EXPECT_EQ(flat->size(), 12);
    EXPECT_EQ(m->communicators_created(), 4);
    EXPECT_EQ(&m->flatten({"dp", "tp"})->comm(), &flat->comm());
    EXPECT_EQ(m->communicators_created(), 4);
    EXPECT_EQ(&m->comm("dp_tp"), &flat->comm());
    auto pp_flat = m->slice({"pp", "dp_tp"});
    EXPECT_EQ(pp_flat->ndim(), 2);
    EXPECT_EQ(&pp_flat->comm(1), &flat->comm());
    check_mesh_collectives(*flat, world, failures, mu);
    // Non-contiguous flatten, named explicitly.
    auto pt = m->flatten({"pp", "tp"}, "pptp");
    EXPECT_EQ(pt->group_ranks(0).size(), 8u);
    std::vector<int64_t> x{1};
    pt->comm().all_reduce(view(x))->wait();
    EXPECT_EQ(x[0], 8);
    // Unflatten tp (4) into (2, 2): pp and dp keep theirs, two new ones.
    auto u = m->unflatten("tp", {2, 2}, {"tp_outer", "tp_inner"});
    EXPECT_EQ(u->ndim(), 4);
    EXPECT_EQ(&u->comm("pp"), &m->comm("pp"));
    EXPECT_EQ(&u->comm("dp"), &m->comm("dp"));
    EXPECT_EQ(m->communicators_created(), 7);
    EXPECT_EQ(u->local_rank("tp_outer") * 2 + u->local_rank("tp_inner"), m->local_rank("tp"));
  });
  EXPECT_TRUE(failures.empty()) << failures.front();
}

TEST(DeviceMesh, DestroyingAMeshReleasesItsCommunicators) {
  std::weak_ptr<Communicator> tp, flat;
  run_inproc(4, [&](Communicator& world) {
    auto m = init_device_mesh({2, 2}, {"dp", "tp"});
    m->flatten({"dp", "tp"});
    if (world.rank() == 0) {
      tp = m->comm_ptr(1);
      flat = m->flatten({"dp", "tp"})->comm_ptr(0);
    }
  });
  EXPECT_TRUE(tp.expired());
  EXPECT_TRUE(flat.expired());
}

TEST(DeviceMesh, SliceRejectsDimsCoveringTheSameRanks) {
  std::atomic<int> rejected{0};
  run_inproc(4, [&](Communicator&) {
    auto m = init_device_mesh({4}, {"a"});
    auto u = m->unflatten("a", {2, 2}, {"a1", "a2"});
    u->flatten({"a1"}, "x");
    try {
      m->slice({"x", "a"});
    } catch (const Error& e) {
      if (std::string(e.what()).find("overlap") != std::string::npos) ++rejected;
    }
  });
  EXPECT_EQ(rejected.load(), 4);
}

TEST(DeviceMesh, ExplicitRankArrayPermutationAndSubset) {
  run_inproc(6, [&](Communicator& world) {
    // 2x2 over ranks {5, 3, 1, 0}: ranks 2 and 4 are outside.
    auto m = device_mesh_from_ranks(default_world(), "cpu", {2, 2}, {5, 3, 1, 0}, {"a", "b"});
    if (world.rank() == 2 || world.rank() == 4) {
      EXPECT_FALSE(m->is_member());
      return;
    }
    const std::map<int, std::vector<int64_t>> coords = {
        {5, {0, 0}}, {3, {0, 1}}, {1, {1, 0}}, {0, {1, 1}}};
    EXPECT_EQ(std::vector<int64_t>(m->coordinate().begin(), m->coordinate().end()),
              coords.at(world.rank()));
    const std::map<int, std::vector<int>> b_groups = {
        {5, {5, 3}}, {3, {5, 3}}, {1, {1, 0}}, {0, {1, 0}}};
    EXPECT_EQ(m->group_ranks(1), b_groups.at(world.rank()));
    std::vector<int32_t> x{world.rank()};
    m->comm("a").all_reduce(view(x))->wait();
    EXPECT_EQ(x[0], world.rank() == 5 || world.rank() == 1 ? 6 : 3);
  });
}

// Runs `make` on every rank of a world (each rank on its own thread) and expects each to throw
// kInvalidArgument whose message is exactly "meshrt [invalid_argument] rank R, " + `want`, with
// "{r}" in `want` standing for the rank.
void expect_all_fail(const std::function<void(Communicator&)>& make, const std::string& want,
                     int world_size = 4) {
  std::atomic<int> failed{0};
  auto world = make_inproc_world(world_size);
  std::vector<std::thread> threads;
  for (int r = 0; r < world_size; ++r) {
    threads.emplace_back([&, r] {
      set_thread_default_world(world[r]);
      std::string expected = fmt::format("meshrt [invalid_argument] rank {}, {}", r, want);
      for (size_t at; (at = expected.find("{r}")) != std::string::npos;) {
        expected.replace(at, 3, std::to_string(r));
      }
      try {
        make(*world[r]);
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
        EXPECT_EQ(e.what(), expected);
        ++failed;
      }
      set_thread_default_world(nullptr);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failed.load(), world_size) << want;
}

TEST(DeviceMeshValidation, EveryErrorOnEveryRank) {
  const std::string init = "comm 'mesh0', init_device_mesh: ";
  expect_all_fail(
      [](Communicator&) {
        init_device_mesh({2, 2}, {"dp", "dp"});
      },
      init + "dim name 'dp' is repeated in [dp, dp]: each name must be unique");
  expect_all_fail(
      [](Communicator&) {
        init_device_mesh({2, 2}, {"dp", ""});
      },
      init + "a dim name is empty");
  expect_all_fail(
      [](Communicator&) {
        init_device_mesh({2, 2}, {"dp"});
      },
      init + "1 names [dp] for 2 dims of shape [2, 2]: give one name per dim");
  expect_all_fail([](Communicator&) { init_device_mesh({}, {}); }, init + "the shape has no dims");
  expect_all_fail(
      [](Communicator&) {
        init_device_mesh({2, 0}, {"dp", "tp"});
      },
      init + "dim 'tp' has size 0: sizes must be positive");
  expect_all_fail(
      [](Communicator&) {
        init_device_mesh({-2, 2}, {"dp", "tp"});
      },
      init + "dim 'dp' has size -2: sizes must be positive");
  expect_all_fail(
      [](Communicator&) {
        init_device_mesh({4, 2}, {"dp", "tp"});
      },
      init + "mesh [4, 2] needs 8 ranks but the world has 4");
  // 2^40 x 2^40 wraps int64 (to 0): the product must not be trusted.
  expect_all_fail(
      [](Communicator&) {
        init_device_mesh({int64_t{1} << 40, int64_t{1} << 40}, {"a", "b"});
      },
      init + "mesh [1099511627776, 1099511627776] needs more than 2^63 ranks but the world has 4");
  expect_all_fail(
      [](Communicator&) {
        init_device_mesh({2, 2}, {"dp", "tp"}, "cuda:0");
      },
      init + "device 'cuda:0' has an index: give the type only (e.g. 'cuda')");
  expect_all_fail(
      [](Communicator&) {
        device_mesh_from_ranks(default_world(), "cpu", {2, 2}, {0, 1, 1, 3});
      },
      init + "rank 1 appears twice in the mesh");
  expect_all_fail(
      [](Communicator&) {
        device_mesh_from_ranks(default_world(), "cpu", {2, 2}, {0, 1, 2});
      },
      init + "3 ranks given for a mesh of 4 positions");
  expect_all_fail(
      [](Communicator&) {
        device_mesh_from_ranks(default_world(), "cpu", {2, 2}, {0, 1, 2, 7});
      },
      init + "rank 7 is outside the world [0, 4)");
  expect_all_fail(
      [](Communicator&) {
        init_megatron_mesh(default_world(), "cpu", "tp-dp", {2, 2, 1});
      },
      "init_megatron_mesh: order 'tp-dp' has 2 dims but 3 sizes were given");
  expect_all_fail(
      [](Communicator&) {
        init_device_mesh({2, 2}, {"dp", "tp"})->slice({"ep"});
      },
      "comm 'mesh0', slice: no dim named 'ep'; the dims are [dp, tp] plus names "
      "flattened on this mesh");
  expect_all_fail(
      [](Communicator&) {
        init_device_mesh({2, 2}, {"dp", "tp"})->slice({"tp", "dp"});
      },
      "comm 'mesh0', slice: dims [tp, dp] are not in ascending mesh order [dp, tp]: 'tp' is "
      "inside 'dp' in the mesh, so it must come after it; list dims outermost first, and do not "
      "slice a flattened dim together with a dim that lies between its parts");
  expect_all_fail(
      [](Communicator&) {
        init_device_mesh({2, 2}, {"dp", "tp"})->slice(std::span<const std::string>{});
      },
      "comm 'mesh0', slice: no dims named");
  expect_all_fail(
      [](Communicator&) {
        init_device_mesh({2, 2}, {"dp", "tp"})->local_rank();
      },
      "comm 'mesh0', local_rank: the mesh has 2 dims: name one");
  expect_all_fail(
      [](Communicator&) {
        init_device_mesh({2, 2}, {"dp", "tp"})->comm();
      },
      "comm 'mesh0', comm: the mesh has 2 dims: name one");
  expect_all_fail(
      [](Communicator&) {
        init_device_mesh({2, 2}, {"dp", "tp"})->comm("ep");
      },
      "comm 'mesh0', dim: no dim named 'ep'; the dims are [dp, tp]");
  expect_all_fail(
      [](Communicator&) {
        init_device_mesh({2, 2}, {"dp", "tp"})->size(2);
      },
      "comm 'mesh0', dim: dim 2 is out of range [0, 2)");
  expect_all_fail(
      [](Communicator&) {
        init_device_mesh({2, 2}, {"dp", "tp"})->flatten({"dp", "tp"}, "tp");
      },
      "comm 'mesh0', flatten: 'tp' is already a dim of the mesh: choose another name");
  expect_all_fail(
      [](Communicator&) {
        init_device_mesh({2, 2}, {"dp", "tp"})->flatten({"tp", "dp"});
      },
      "comm 'mesh0', flatten: dims [tp, dp] are not distinct and in ascending mesh order [dp, "
      "tp]");
  expect_all_fail(
      [](Communicator&) {
        init_device_mesh({2, 2}, {"dp", "tp"})->flatten(std::span<const std::string>{}, "x");
      },
      "comm 'mesh0', flatten: no dims named");
  expect_all_fail(
      [](Communicator&) {
        auto m = init_device_mesh({1, 2, 2}, {"pp", "dp", "tp"});
        m->flatten({"dp", "tp"}, "f");
        m->flatten({"pp", "dp"}, "f");
      },
      "comm 'mesh0', flatten: 'f' was flattened before from other dims: choose another name");
  const std::string unflatten = "comm 'mesh0', unflatten: ";
  expect_all_fail(
      [](Communicator&) {
        init_device_mesh({2, 2}, {"dp", "tp"})->unflatten("tp", {3}, {"a"});
      },
      unflatten + "sizes [3] multiply to 3 but dim 'tp' has 2");
  expect_all_fail(
      [](Communicator&) {
        init_device_mesh({2, 2}, {"dp", "tp"})
            ->unflatten("tp", {int64_t{1} << 40, int64_t{1} << 40}, {"a", "b"});
      },
      unflatten +
          "sizes [1099511627776, 1099511627776] multiply to more than 2^63 but dim 'tp' has 2");
  expect_all_fail(
      [](Communicator&) {
        init_device_mesh({2, 2}, {"dp", "tp"})->unflatten("tp", {2}, {"a", "b"});
      },
      unflatten + "1 sizes and 2 names: give one name per size");
  expect_all_fail(
      [](Communicator&) {
        init_device_mesh({2, 2}, {"dp", "tp"})->unflatten("tp", {-1, -2}, {"a", "b"});
      },
      unflatten + "size -1 is not positive");
  expect_all_fail(
      [](Communicator&) {
        init_device_mesh({2, 2}, {"dp", "tp"})->unflatten("tp", {2}, {"dp"});
      },
      unflatten + "'dp' is already a dim of the mesh");
  expect_all_fail(
      [](Communicator&) {
        init_device_mesh({2, 3}, {"dp", "tp"})
            ->flatten({"dp", "tp"}, "f")
            ->unflatten("f", {3, 2}, {"a", "b"});
      },
      unflatten + "dim 'f' cannot be split into [3, 2]: size 2 does not divide the dim's factor 3",
      6);
  expect_all_fail(
      [](Communicator&) {
        auto m = init_device_mesh({2, 2}, {"dp", "tp"});
        m->flatten({"dp", "tp"});
        m->slice({"dp", "dp_tp"});
      },
      "comm 'mesh0', slice: dims [dp, dp_tp] overlap: slicing dims that cover the same ranks (a "
      "flattened dim and one of its parts) is not allowed");
  // PyTorch's slicing rule: a flattened dim may not be sliced with a dim between its parts.
  for (const auto& [shape, names, flat, slice] :
       std::vector<std::tuple<std::vector<int64_t>, std::vector<std::string>,
                              std::vector<std::string>, std::vector<std::string>>>{
           {{2, 2, 2}, {"dp", "cp", "tp"}, {"dp", "tp"}, {"dp_tp", "cp"}},
           {{2, 2, 2}, {"pp", "dp", "tp"}, {"pp", "tp"}, {"pp_tp", "dp"}}}) {
    expect_all_fail(
        [&](Communicator&) {
          auto m = init_device_mesh(shape, names);
          m->flatten(flat);
          m->slice(slice);
        },
        fmt::format("comm 'mesh0', slice: dims [{0}, {1}] are not in ascending mesh order [{2}]: "
                    "'{0}' has ranks both outside and inside '{1}'; list dims outermost first, "
                    "and do not slice a flattened dim together with a dim that lies between its "
                    "parts",
                    slice[0], slice[1], fmt::join(names, ", ")),
        8);
  }
  // Megatron-LM's RankGenerator refuses EP and CP both above 1; so does meshrt.
  expect_all_fail(
      [](Communicator&) {
        init_megatron_mesh(default_world(), "cpu", "tp-cp-ep-dp-pp", {1, 2, 2, 1, 1});
      },
      "init_megatron_mesh: order 'tp-cp-ep-dp-pp' has ep=2 and cp=2: Megatron-LM does not allow "
      "EP and CP both above 1 in one rank generator (CP belongs to the dense layout, EP to the "
      "expert layout); make one mesh per layout");
}

// A slice is this rank's sub-mesh, as in PyTorch: its groups stay inside it.
TEST(DeviceMesh, SliceGroupsStayInsideThisRanksSubMesh) {
  run_inproc(7, [](Communicator& world) {
    auto m = init_device_mesh({2, 3}, {"dp", "tp"});  // Rank 6 is outside.
    EXPECT_EQ(m->groups("tp"), (std::vector<std::vector<int>>{{0, 1, 2}, {3, 4, 5}}));
    if (world.rank() == 6) {
      EXPECT_THROW(m->slice({"tp"})->groups(0), Error);
      return;
    }
    const auto tp = m->slice({"tp"});
    EXPECT_EQ(tp->groups(0), (std::vector<std::vector<int>>{m->group_ranks(1)}));
  });
  run_inproc(24, [](Communicator& world) {
    auto m = init_device_mesh({2, 3, 4}, {"pp", "dp", "tp"});
    const auto dp_tp = m->slice({"dp", "tp"});
    const int pp = static_cast<int>(m->local_rank("pp"));
    // Only the 3 tp groups and 4 dp groups of this rank's pp stage, not the root's 6 and 8.
    const auto tp_groups = dp_tp->groups("tp");
    ASSERT_EQ(tp_groups.size(), 3u);
    for (size_t i = 0; i < 3; ++i) {
      std::vector<int> want(4);
      std::iota(want.begin(), want.end(), pp * 12 + static_cast<int>(i) * 4);
      EXPECT_EQ(tp_groups[i], want);
    }
    const auto dp_groups = dp_tp->groups("dp");
    ASSERT_EQ(dp_groups.size(), 4u);
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(dp_groups[i], (std::vector<int>{pp * 12 + i, pp * 12 + 4 + i, pp * 12 + 8 + i}));
    }
    // A non-contiguous slice: pp x tp at this rank's dp index.
    const int dp = static_cast<int>(m->local_rank("dp"));
    const auto pp_tp = m->slice({"pp", "tp"});
    ASSERT_EQ(pp_tp->groups("pp").size(), 4u);
    for (const auto& g : pp_tp->groups("pp")) EXPECT_EQ(g[1] - g[0], 12);
    for (const auto& g : pp_tp->groups("tp")) EXPECT_EQ((g[0] % 12) / 4, dp);
    EXPECT_EQ(m->groups("tp").size(), 6u);  // The root still lists all.
    (void)world;
  });
}

// A split of a dim's communicator is part of that dim: its records and findings carry it.
TEST(DeviceMesh, ASplitOfADimCommunicatorKeepsItsMeshDim) {
  run_inproc(4, [](Communicator& world) {
    auto m = init_device_mesh({2, 2}, {"dp", "tp"});
    auto nested = m->comm("dp").split(0, world.rank());
    EXPECT_EQ(nested->info()->mesh_dim, "dp");
    CommOptions options;
    options.mesh_dim = "other";
    auto named = m->comm("dp").split(0, world.rank(), options);
    EXPECT_EQ(named->info()->mesh_dim, "other");
    EXPECT_EQ(world.split(0, world.rank())->info()->mesh_dim, "");
  });
}

// A dim over the whole world in its order is the world itself, as in PyTorch: no second set of
// connections between the same ranks.
TEST(DeviceMesh, ADimSpanningTheWorldReusesTheWorldCommunicator) {
  run_inproc(4, [](Communicator& world) {
    auto one = init_device_mesh({4}, {"dp"});
    EXPECT_EQ(&one->comm("dp"), &world);
    EXPECT_EQ(one->communicators_created(), 0);
    auto two = init_device_mesh({1, 4}, {"dp", "tp"});
    EXPECT_EQ(&two->comm("tp"), &world);
    EXPECT_NE(&two->comm("dp"), &world);
    EXPECT_EQ(two->communicators_created(), 1);
    std::vector<int64_t> x{world.rank()};
    two->comm("tp").all_reduce(view(x))->wait();
    EXPECT_EQ(x[0], 6);
    // Another order is another communicator.
    auto reversed = device_mesh_from_ranks(default_world(), "cpu", {4}, {3, 2, 1, 0}, {"r"});
    EXPECT_NE(&reversed->comm("r"), &world);
    EXPECT_EQ(reversed->comm("r").rank(), 3 - world.rank());
  });
}

TEST(DeviceMeshValidation, RanksOutsideTheMeshHaveNoCoordinatesOrCommunicators) {
  std::atomic<int> failed{0};
  run_inproc(4, [&](Communicator& world) {
    auto m = device_mesh_from_ranks(default_world(), "cpu", {2}, {0, 1}, {"dp"});
    if (m->is_member()) return;
    const std::string at =
        fmt::format("meshrt [invalid_argument] rank {}, comm 'mesh0', ", world.rank());
    try {
      m->local_rank();
    } catch (const Error& e) {
      EXPECT_EQ(e.what(), at + fmt::format("local_rank: rank {} is not in the mesh", world.rank()));
      ++failed;
    }
    try {
      m->comm("dp");
    } catch (const Error& e) {
      EXPECT_EQ(e.what(),
                at + fmt::format("comm: rank {} is not in the mesh: it has no communicator for "
                                 "dim 'dp'",
                                 world.rank()));
      ++failed;
    }
  });
  EXPECT_EQ(failed.load(), 4);  // Ranks 2 and 3, twice each.
}

MeshOptions overriding(std::map<std::string, std::string> backends) {
  MeshOptions o;
  o.backend_override = std::move(backends);
  return o;
}

TEST(DeviceMeshBackends, AGlooDimOnAnInprocWorldComputesAndTheOtherDimsKeepTheirs) {
  InprocOptions with_job_store;
  with_job_store.job_store = true;
  // Like PyTorch's backend_override: dp over real Gloo pairs (loopback TCP between the rank
  // threads), tp in-process; sums on both dims checked element-wise on every rank.
  std::atomic<int> ok{0};
  run_inproc(
      4,
      [&](Communicator& world) {
        auto mesh = init_device_mesh(default_world(), "cpu", {2, 2}, {"dp", "tp"},
                                     overriding({{"dp", "gloo"}}));
        EXPECT_EQ(mesh->comm("dp").backend_name(), "gloo");
        EXPECT_EQ(mesh->comm("tp").backend_name(), "inproc");
        for (const char* dim : {"dp", "tp"}) {
          Communicator& c = mesh->comm(dim);
          std::vector<float> x(1000);
          for (size_t i = 0; i < x.size(); ++i) x[i] = float(world.rank() * 1000 + i);
          c.all_reduce(view(x))->wait();
          for (size_t i = 0; i < x.size(); ++i) {
            float want = 0;
            for (int g : c.global_ranks()) want += float(g * 1000 + i);
            ASSERT_EQ(x[i], want) << dim << " element " << i;
          }
        }
        ++ok;
      },
      with_job_store);
  EXPECT_EQ(ok.load(), 4);
}

TEST(DeviceMeshBackends, BadOverridesFailEveryRankBeforeAnySplit) {
  expect_all_fail(
      [](Communicator&) {
        init_device_mesh(default_world(), "cpu", {2, 2}, {"dp", "tp"},
                         overriding({{"ep", "gloo"}}));
      },
      "comm 'mesh0', init_device_mesh: backend_override names dim 'ep', which is not among [dp, "
      "tp]");
  expect_all_fail(
      [](Communicator&) {
        init_device_mesh(default_world(), "cpu", {2, 2}, {"dp", "tp"},
                         overriding({{"tp", "bogus"}}));
      },
      fmt::format(
          "comm 'mesh0', init_device_mesh: backend_override gives dim 'tp' backend 'bogus', "
          "which this build does not have; it has: {}, inproc",
          fmt::join(built_backends(), ", ")));
  // An in-process world without a job store has nowhere to connect Gloo pairs through.
  expect_all_fail(
      [](Communicator&) {
        init_device_mesh(default_world(), "cpu", {2, 2}, {"dp", "tp"},
                         overriding({{"dp", "gloo"}}));
      },
      "comm 'world', split: a 'gloo' group split from this 'inproc' communicator needs a job "
      "store: only communicators of an init() world can change backend");
  expect_all_fail(
      [](Communicator& world) {
        MeshOptions o;
        if (world.rank() == 1) o.backend_override = {{"dp", "gloo"}};
        init_device_mesh(default_world(), "cpu", {2, 2}, {"dp", "tp"}, o);
      },
      "comm 'mesh0', init_device_mesh: ranks built different meshes: ranks [0, 2, 3] passed "
      "device=cpu shape=[2,2] names=[dp,tp] ranks=row-major; rank [1] passed device=cpu "
      "shape=[2,2] names=[dp,tp] ranks=row-major backends=[dp=gloo]");
}

TEST(DeviceMeshValidation, MismatchedMeshFailsEveryRankNamingWhoPassedWhat) {
  const auto start = std::chrono::steady_clock::now();
  expect_all_fail(
      [](Communicator& world) {
        if (world.rank() == 2) {
          init_device_mesh({4}, {"dp"});
        } else {
          init_device_mesh({2, 2}, {"dp", "tp"});
        }
      },
      "comm 'mesh0', init_device_mesh: ranks built different meshes: ranks [0, 1, 3] passed "
      "device=cpu shape=[2,2] names=[dp,tp] ranks=row-major; rank [2] passed device=cpu "
      "shape=[4] names=[dp] ranks=row-major");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST(DeviceMeshValidation, ARankThatNeverBuildsTheMeshTimesOutTheOthers) {
  auto world = make_inproc_world(3, {.name = "world", .timeout = std::chrono::milliseconds(300)});
  std::atomic<int> failed{0};
  std::vector<std::thread> threads;
  const auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      try {
        init_device_mesh(world[r], "cpu", {3}, {"dp"});
      } catch (const Error& e) {
        // The first to time out names rank 2; the other fails with that reason.
        const bool timeout_or_peer =
            e.code() == ErrorCode::kTimeout || e.code() == ErrorCode::kPeerFailure;
        if (timeout_or_peer && std::string(e.what()).find("[2]") != std::string::npos) ++failed;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failed.load(), 2);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

}  // namespace
}  // namespace meshrt
