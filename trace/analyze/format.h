// Printing the analyzer's results: the report as text for people and as JSON for tools, the raw
// entries side by side (`meshtrace analyze -j`), and the phrases for ranks and shapes that the
// findings' details use.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "trace/analyze/analyzer.h"
#include "trace/analyze/dump_reader.h"

namespace meshrt::trace {

// The report for people: findings in mesh terms, root causes first, with where ranks diverged
// (call sites as file basenames).
std::string format_text(const Report& report);
// The report as one line of JSON {"ranks", "collectives_checked", "findings"}; call sites with
// their full paths.
std::string format_json(const Report& report);

// What `-j` prints.
struct EntriesTableOptions {
  std::vector<int> ranks;               // Columns; empty: every rank.
  std::vector<std::string> pg_filters;  // Only entries whose group name or desc is listed.
};

// The raw entries side by side, one column per rank, row i holding each rank's i-th entry.
std::string format_entries_table(const std::vector<RankDump>& dumps,
                                 const EntriesTableOptions& options);

// "[4, 5, 6, 7]"; long lists shorten: "[0-511, 513-1023]", strided "[6, 14, 22, ..., 254]".
std::string format_ranks(const std::vector<int>& ranks);
// "rank 6" or "ranks [5, 6]".
std::string ranks_phrase(const std::vector<int>& ranks);
// Shapes stored as [ndim, d0, d1, ...] one after the other: "[[4, 8], [16]]".
std::string format_shapes(std::span<const int64_t> pool);

}  // namespace meshrt::trace
