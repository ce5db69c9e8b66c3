// Replays saved fuzz inputs without libFuzzer (the normal gcc build, suite `fuzz`): every regular
// file under the given files or directories goes once through LLVMFuzzerTestOneInput, so each
// corpus input and every crash found earlier is checked on every build. A path after --optional
// may be missing (a target's regressions/ before its first finding); any other missing path, or
// no input at all, exits 1. A finding crashes or aborts the process.
// Usage: replay PATH... [--optional PATH...]
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_target.h"

namespace fs = std::filesystem;

int main(int argc, char** argv) {
  std::vector<fs::path> inputs;
  bool optional = false;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--optional") {
      optional = true;
      continue;
    }
    const fs::path root = argv[i];
    if (fs::is_regular_file(root)) {
      inputs.push_back(root);
    } else if (fs::is_directory(root)) {
      for (const auto& e : fs::recursive_directory_iterator(root)) {
        if (e.is_regular_file()) inputs.push_back(e.path());
      }
    } else if (optional && !fs::exists(root)) {
      std::fprintf(stderr, "replay: %s does not exist yet: skipped\n", argv[i]);
    } else {
      std::fprintf(stderr, "replay: %s is neither a file nor a directory\n", argv[i]);
      return 1;
    }
  }
  // A fixed order, so that a failure names the same input on every run.
  std::sort(inputs.begin(), inputs.end());
  for (const fs::path& path : inputs) {
    std::ifstream in(path, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::fprintf(stderr, "replay: %s (%zu bytes)\n", path.c_str(), bytes.size());
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  }
  std::printf("replay: %zu inputs, no finding\n", inputs.size());
  return inputs.empty() ? 1 : 0;
}
