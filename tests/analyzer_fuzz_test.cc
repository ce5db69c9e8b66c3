// A short deterministic fuzz of the dump reader and the analyzer (suite `fuzz`): real dumps of a
// simulated job (JSON and PyTorch pickle), mutated by byte flips, truncations, spliced chunks
// and huge or negative numbers, are parsed and analyzed in-process. Each mutant must give a
// result or the analyzer's InputError: anything else thrown fails, and a crash kills the test.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "trace/analyze/analyzer.h"
#include "trace/analyze/dump_fixtures.h"
#include "trace/pickle_writer.h"

namespace meshrt {
namespace {

using testing::FrJob;

// 4 ranks as 2 x 2 (dp, tp) with collectives, a coalesced group, p2p and a stuck rank.
std::vector<std::string> job_dumps() {
  FrJob job = testing::dp_tp_job(2, 2);
  for (int step = 0; step < 3; ++step) {
    job.collective("mesh0/tp", "all_reduce", 64);
    job.collective("mesh0/dp", "reduce_scatter", 128);
    job.collective("world", "all_to_all", 16);
  }
  job.coalesced(0, "mesh0/tp", {{"all_gather", 8}, {"all_gather", 8}});
  job.coalesced(1, "mesh0/tp", {{"all_gather", 8}, {"all_gather", 8}});
  job.send(0, "mesh0/dp", 2, 32);
  job.recv(2, "mesh0/dp", 0, 32);
  job.call(1, "mesh0/tp", "all_reduce", 64, "started");
  std::vector<std::string> dumps;
  for (int r = 0; r < 4; ++r) dumps.push_back(testing::to_json(job.dump(r)));
  return dumps;
}

std::string mutate(std::string bytes, std::mt19937_64& rng) {
  auto pick = [&](size_t n) { return n == 0 ? size_t{0} : static_cast<size_t>(rng() % n); };
  static const char* kNumbers[] = {"99999999999999999999", "4294967296", "2147483647", "-1",
                                   "-9223372036854775808", "1048576",    "0",          "1e300"};
  const int edits = 1 + static_cast<int>(rng() % 4);
  for (int i = 0; i < edits && !bytes.empty(); ++i) {
    switch (rng() % 5) {
      case 0:  // Flip a byte.
        bytes[pick(bytes.size())] ^= static_cast<char>(1 << (rng() % 8));
        break;
      case 1:  // Truncate.
        bytes.resize(pick(bytes.size()));
        break;
      case 2: {  // A number becomes a huge or negative one.
        size_t at = pick(bytes.size());
        while (at < bytes.size() && (bytes[at] < '0' || bytes[at] > '9')) ++at;
        size_t end = at;
        while (end < bytes.size() && bytes[end] >= '0' && bytes[end] <= '9') ++end;
        if (at < bytes.size()) bytes.replace(at, end - at, kNumbers[rng() % std::size(kNumbers)]);
        break;
      }
      case 3: {  // Splice a chunk of the file elsewhere.
        const size_t from = pick(bytes.size()), n = pick(64);
        bytes.insert(pick(bytes.size()), bytes.substr(from, n));
        break;
      }
      default:  // Drop a chunk.
        bytes.erase(pick(bytes.size()), pick(32));
        break;
    }
  }
  return bytes;
}

// Parses every rank (rank `victim` mutated) and analyzes what parsed.
void parse_and_analyze(const std::vector<std::string>& dumps, size_t victim,
                       const std::string& mutant, const std::string& what) {
  try {
    std::vector<trace::RankDump> parsed;
    for (size_t r = 0; r < dumps.size(); ++r) {
      parsed.push_back(trace::parse_dump(r == victim ? mutant : dumps[r], static_cast<int>(r)));
      parsed.back().path = fmt::format("fr_{}", r);
    }
    trace::AnalyzeOptions options;
    options.allow_incomplete_ranks = true;
    const trace::Report report = trace::analyze(std::move(parsed), options);
    EXPECT_FALSE(report.ranks.empty()) << what;
  } catch (const trace::InputError& e) {
    EXPECT_NE(std::string(e.what()), "") << what;
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": " << typeid(e).name() << ": " << e.what();
  }
}

TEST(AnalyzerFuzz, MutatedJsonAndPickleDumpsGiveAResultOrAnInputError) {
  std::vector<std::string> json = job_dumps();
  std::vector<std::string> pickles;
  for (const std::string& text : json) {
    pickles.push_back(trace::to_pickle(nlohmann::ordered_json::parse(text), {"process_group"}));
  }
  // The unmutated job parses and analyzes in both forms.
  for (const std::vector<std::string>* dumps : {&json, &pickles}) {
    std::vector<trace::RankDump> parsed;
    for (size_t r = 0; r < dumps->size(); ++r) {
      parsed.push_back(trace::parse_dump((*dumps)[r], static_cast<int>(r)));
    }
    EXPECT_FALSE(trace::analyze(std::move(parsed), {}).findings.empty());
  }
  constexpr int kMutantsPerForm = 1500;
  const auto start = std::chrono::steady_clock::now();
  for (const std::vector<std::string>* dumps : {&json, &pickles}) {
    for (int seed = 0; seed < kMutantsPerForm; ++seed) {
      std::mt19937_64 rng(static_cast<uint64_t>(seed));
      const size_t victim = rng() % dumps->size();
      const std::string what =
          fmt::format("{} seed {} (rank {})", dumps == &json ? "json" : "pickle", seed, victim);
      parse_and_analyze(*dumps, victim, mutate((*dumps)[victim], rng), what);
    }
  }
  const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
  RecordProperty("seconds", fmt::format("{:.2f}", took.count()));
}

}  // namespace
}  // namespace meshrt
