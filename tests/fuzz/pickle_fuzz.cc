// Fuzz target `pickle`: the safe pickle reader's two forms, read_pickle (a JSON DOM) and
// pickle_to_json_text (what parse_dump reads). Its only documented failure is PickleError; and
// whatever text the streaming form emits must be JSON, since the dump reader parses it next.
#include <cstddef>
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
    check(nlohmann::json::accept(text),
          "pickle_to_json_text emitted {} bytes of text that is not JSON from {} bytes",
          text.size(), size);
    text_ok = true;
  } catch (const meshrt::trace::PickleError&) {
  }
  // The two forms share one grammar: neither may reject what the other accepted.
  check(dom_ok == text_ok, "read_pickle {} what pickle_to_json_text {} ({} bytes)",
        dom_ok ? "accepted" : "rejected", text_ok ? "accepted" : "rejected", size);
  return 0;
}
