// Fuzz target `options`: meshrun's command line. The input, split on NUL bytes, is argv[1..];
// parse_options must run or refuse (exit status 0 or 2) and never throw, and options it accepts
// must be ones an agent can use. What meshrun prints goes to /dev/null here, while fd 2 stays
// open for the sanitizers' reports.
#include <cctype>
#include <cstdio>
#include <cstdlib>
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
    if (*parsed.exit_status != 0 && *parsed.exit_status != 2) std::abort();
    return 0;
  }
  // Accepted: what meshrun's agent relies on without checking again.
  const meshrt::launcher::LaunchOptions& o = parsed.options;
  const bool sane = o.nnodes >= 1 && o.nproc_per_node >= 1 && o.node_rank < o.nnodes &&
                    o.node_rank >= -1 && !o.command.empty() && !o.run_id.empty() &&
                    !o.role.empty() && o.monitor_interval.count() >= 1 &&
                    o.rdzv_timeout.count() > 0 && o.grace_period.count() >= 0 &&
                    o.dump_timeout.count() >= 0 && o.max_restarts >= 0 && !o.status_host.empty() &&
                    (o.rdzv_port != 0 || o.nnodes == 1);
  if (!sane) {
    std::fprintf(stderr, "options_fuzz: accepted options an agent cannot use\n");
    std::abort();
  }
  return 0;
}
