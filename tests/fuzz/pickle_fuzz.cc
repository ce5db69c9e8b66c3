// Fuzz target `pickle`: the safe pickle reader's two forms, read_pickle (a JSON DOM) and
// pickle_to_json_text (what parse_dump reads). Its only documented failure is PickleError; and
// whatever text the streaming form emits must be JSON, since the dump reader parses it next.
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <span>
#include <string>

#include "tests/fuzz/fuzz_target.h"
#include "trace/analyze/pickle_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  bool dom_ok = false;
  try {
    meshrt::trace::read_pickle(bytes);
    dom_ok = true;
  } catch (const meshrt::trace::PickleError&) {
  }
  bool text_ok = false;
  try {
    const std::string text = meshrt::trace::pickle_to_json_text(bytes);
    if (!nlohmann::json::accept(text)) {
      std::fprintf(stderr, "pickle_fuzz: pickle_to_json_text emitted text that is not JSON\n");
      std::abort();
    }
    text_ok = true;
  } catch (const meshrt::trace::PickleError&) {
  }
  // The two forms share one grammar: neither may reject what the other accepted.
  if (dom_ok != text_ok) {
    std::fprintf(stderr, "pickle_fuzz: read_pickle %s what pickle_to_json_text %s\n",
                 dom_ok ? "accepted" : "rejected", text_ok ? "accepted" : "rejected");
    std::abort();
  }
  return 0;
}
