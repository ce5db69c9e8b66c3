// Fuzz target `options`: meshrun's command line. The input, split on NUL bytes, is argv[1..];
// parse_options must run or refuse (exit status 0 or 2) and never throw, and options it accepts
// must be ones an agent can use. What meshrun prints goes to /dev/null here, while fd 2 stays
// open for the sanitizers' reports.
#include <cctype>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "launcher/options.h"
#include "tests/fuzz/fuzz_target.h"

namespace {

// Swaps stdio's and iostreams' stdout and stderr for /dev/null while it lives.
class Quiet {
 public:
  Quiet() : out_(stdout), err_(stderr), cout_(std::cout.rdbuf()), cerr_(std::cerr.rdbuf()) {
    static FILE* null = std::fopen("/dev/null", "w");
    stdout = null;
    stderr = null;
    std::cout.rdbuf(sink_.rdbuf());
    std::cerr.rdbuf(sink_.rdbuf());
  }
  ~Quiet() {
    stdout = out_;
    stderr = err_;
    std::cout.rdbuf(cout_);
    std::cerr.rdbuf(cerr_);
  }
  Quiet(const Quiet&) = delete;
  Quiet& operator=(const Quiet&) = delete;

 private:
  FILE* out_;
  FILE* err_;
  std::streambuf* cout_;
  std::streambuf* cerr_;
  std::ostringstream sink_;
};

bool has_local_addr(std::string_view arg) {
  // --local-addr resolves its value (getaddrinfo): a fuzzer must not send DNS queries.
  std::string lower(arg);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return lower.find("local") != std::string::npos;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> args = {"meshrun"};
  std::string_view rest(reinterpret_cast<const char*>(data), size);
  while (!rest.empty()) {
    const size_t nul = rest.find('\0');
    args.emplace_back(rest.substr(0, nul));
    if (has_local_addr(args.back())) return 0;
    if (nul == std::string_view::npos) break;
    rest.remove_prefix(nul + 1);
  }
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  meshrt::launcher::ParsedCommandLine parsed;
  {
    Quiet quiet;
    parsed = meshrt::launcher::parse_options(static_cast<int>(argv.size()), argv.data());
  }
  if (parsed.exit_status) {
    check(*parsed.exit_status == 0 || *parsed.exit_status == 2,
          "parse_options exited with status {} (0 or 2 expected) on {} arguments",
          *parsed.exit_status, args.size() - 1);
    return 0;
  }
  if (parsed.doctor) {
    // `meshrun doctor`: each self-test gets a positive bound.
    check(parsed.doctor->self_test_timeout.count() >= 1, "accepted a self-test bound of {} ms",
          parsed.doctor->self_test_timeout.count());
    return 0;
  }
  // Accepted: what meshrun's agent relies on without checking again.
  const meshrt::launcher::LaunchOptions& o = parsed.options;
  check(o.nnodes >= 1, "accepted {} nodes", o.nnodes);
  check(o.nproc_per_node >= 1, "accepted {} ranks per node", o.nproc_per_node);
  check(o.node_rank >= -1 && o.node_rank < o.nnodes, "accepted node rank {} of {} nodes",
        o.node_rank, o.nnodes);
  check(!o.command.empty(), "accepted no program to run");
  check(!o.run_id.empty(), "accepted an empty run id");
  check(!o.role.empty(), "accepted an empty role");
  check(o.monitor_interval.count() >= 1, "accepted a monitor interval of {} ms",
        o.monitor_interval.count());
  check(o.rdzv_timeout.count() > 0, "accepted a rendezvous timeout of {} ms",
        o.rdzv_timeout.count());
  check(o.grace_period.count() >= 0, "accepted a grace period of {} ms", o.grace_period.count());
  check(o.dump_timeout.count() >= 0, "accepted a dump timeout of {} ms", o.dump_timeout.count());
  check(o.max_restarts >= 0, "accepted {} restarts", o.max_restarts);
  check(!o.status_host.empty(), "accepted an empty status host");
  check(o.rdzv_port != 0 || o.nnodes == 1, "accepted rendezvous port 0 for {} nodes", o.nnodes);
  return 0;
}
