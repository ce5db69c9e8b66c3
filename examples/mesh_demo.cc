// mesh_demo: builds a DeviceMesh, optionally flattens dims, runs an all_reduce on every dim and
// flattened dim, and checks the results. With --print-groups each rank prints one JSON line:
// {"rank": R, "coordinate": [..] or null, "groups": {"<dim>": [global ranks], ...}}.
// Exit 0 when all results are right, 1 on a wrong result, 2 on bad flags or an invalid mesh.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "mesh/device_mesh.h"
#include "mesh/meshrt.h"

namespace {

struct Flags {
  std::string mesh;
  std::string names;
  std::vector<std::string> flatten;
  std::string backend = "gloo";
  int world = 0;
  bool print_groups = false;
};

// Splits "a<sep>b<sep>c".
std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, sep);) out.push_back(item);
  return out;
}

[[noreturn]] void usage_error(const std::string& message) {
  std::fprintf(stderr, "mesh_demo: %s\n", message.c_str());
  std::exit(2);
}

std::vector<int64_t> parse_shape(const std::string& text) {
  std::vector<int64_t> shape;
  for (const auto& part : split(text, 'x')) {
    try {
      size_t used = 0;
      shape.push_back(std::stoll(part, &used));
      if (used != part.size()) throw std::invalid_argument(part);
    } catch (const std::exception&) {
      usage_error(fmt::format("--mesh '{}': '{}' is not a size (expected e.g. 2x3x4)", text, part));
    }
  }
  return shape;
}

// A flatten request: its dims and the name of the flattened dim.
struct Flatten {
  std::vector<std::string> dims;
  std::string name;
};

Flatten parse_flatten(const std::string& text) {
  const auto colon = text.find(':');
  Flatten f;
  f.dims = split(text.substr(0, colon), ',');
  f.name = colon == std::string::npos ? fmt::format("{}", fmt::join(f.dims, "_"))
                                      : text.substr(colon + 1);
  if (f.dims.size() < 2 || f.name.empty()) {
    usage_error(
        fmt::format("--flatten '{}': give two or more dims, e.g. dp,tp or dp,tp:dptp", text));
  }
  return f;
}

std::mutex print_mu;

// Runs the demo on one rank; returns the count of wrong elements.
int run_rank(meshrt::Communicator& world, const std::vector<int64_t>& shape,
             const std::vector<std::string>& names, const std::vector<Flatten>& flattens,
             bool print_groups) {
  auto mesh = meshrt::init_device_mesh(meshrt::default_world(), "cpu", shape, names);
  std::vector<std::pair<std::string, std::shared_ptr<meshrt::DeviceMesh>>> dims;
  for (int d = 0; d < mesh->ndim(); ++d)
    dims.emplace_back(mesh->names()[d], mesh->slice({mesh->names()[d]}));
  for (const auto& f : flattens) dims.emplace_back(f.name, mesh->flatten(f.dims, f.name));
  int wrong = 0;
  nlohmann::ordered_json groups = nlohmann::ordered_json::object();
  if (mesh->is_member()) {
    for (const auto& [name, sub] : dims) {
      const std::vector<int> members = sub->group_ranks(0);
      groups[name] = members;
      // Each rank contributes its global rank + 1: the sum names exactly the group's members.
      std::vector<int64_t> x(17, world.global_rank() + 1);
      sub->comm().all_reduce(meshrt::view(x))->wait();
      int64_t want = 0;
      for (int m : members) want += m + 1;
      for (int64_t v : x) wrong += v != want;
      if (x[0] != want) {
        std::fprintf(stderr, "rank %d: all_reduce on '%s' gave %lld, want %lld\n",
                     world.global_rank(), name.c_str(), static_cast<long long>(x[0]),
                     static_cast<long long>(want));
      }
    }
  }
  if (print_groups) {
    nlohmann::ordered_json line;
    line["rank"] = world.global_rank();
    line["coordinate"] = mesh->is_member()
                             ? nlohmann::ordered_json(std::vector<int64_t>(
                                   mesh->coordinate().begin(), mesh->coordinate().end()))
                             : nlohmann::ordered_json(nullptr);
    line["groups"] = groups;
    std::lock_guard lock(print_mu);
    std::printf("%s\n", line.dump().c_str());
    std::fflush(stdout);
  }
  // Ranks outside the mesh wait here too, so nobody leaves while others still use the world.
  world.barrier()->wait();
  return wrong;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  CLI::App app{"Build a DeviceMesh, all_reduce on every dim, check the results."};
  app.add_option("--mesh", flags.mesh, "sizes, outermost first, e.g. 2x3x4")->required();
  app.add_option("--names", flags.names, "dim names, e.g. pp,dp,tp (default dim0,dim1,...)");
  app.add_option("--flatten", flags.flatten,
                 "dims to flatten, e.g. dp,tp or dp,tp:dptp (repeatable)")
      ->take_last()
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_option("--backend", flags.backend, "gloo (processes) or inproc (threads)")
      ->check(CLI::IsMember({"gloo", "inproc"}));
  app.add_option("--world", flags.world, "in-process backend: number of ranks (threads)");
  app.add_flag("--print-groups", flags.print_groups, "print one JSON line per rank");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    usage_error(e.what());
  }
  const auto shape = parse_shape(flags.mesh);
  const auto names = flags.names.empty() ? std::vector<std::string>{} : split(flags.names, ',');
  std::vector<Flatten> flattens;
  for (const auto& f : flags.flatten) flattens.push_back(parse_flatten(f));

  int wrong = 0;
  try {
    if (flags.backend == "inproc") {
      if (flags.world < 1) usage_error("--backend inproc needs --world N (N >= 1)");
      std::mutex mu;
      meshrt::run_inproc(flags.world, [&](meshrt::Communicator& world) {
        const int w = run_rank(world, shape, names, flattens, flags.print_groups);
        std::lock_guard lock(mu);
        wrong += w;
      });
    } else {
      if (flags.world != 0)
        usage_error("--world is for --backend inproc; gloo ranks come from the environment");
      auto world = meshrt::init();
      wrong = run_rank(*world, shape, names, flattens, flags.print_groups);
    }
  } catch (const meshrt::Error& e) {
    std::fprintf(stderr, "mesh_demo: %s\n", e.what());
    return e.code() == meshrt::ErrorCode::kInvalidArgument ? 2 : 1;
  }
  return wrong == 0 ? 0 : 1;
}
