// Fuzz target `dump`: one flight-recorder dump (meshrt JSON, or a PyTorch pickle when it starts
// with the PROTO opcode) through parse_dump and, when it parses, the analyzer over that rank and
// meshtrace's text and JSON reports of it. Dumps are untrusted input: the only documented failure
// is trace::InputError.
#include <string_view>
#include <utility>
#include <vector>

#include "tests/fuzz/fuzz_target.h"
#include "trace/analyze/analyzer.h"
#include "trace/analyze/dump_reader.h"
#include "trace/analyze/format.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  try {
    std::vector<meshrt::trace::RankDump> dumps;
    dumps.push_back(meshrt::trace::parse_dump(bytes, 0));
    dumps.back().path = "fr_0";
    meshrt::trace::AnalyzeOptions options;
    options.allow_incomplete_ranks = true;  // The dump's other ranks are missing, by design.
    options.threads = 1;
    const meshrt::trace::Report report = meshrt::trace::analyze(std::move(dumps), options);
    meshrt::trace::format_text(report);
    meshrt::trace::format_json(report);
  } catch (const meshrt::trace::InputError&) {
  }
  return 0;
}
