// `meshtrace report DIR`: a whole job on one self-contained HTML page (inline CSS and SVG, no
// script, no network) built from what `meshrun --report DIR` has every rank write:
//
//   DIR/comms_<rank>.json       MESHRT_COMMS_SUMMARY      busbw against message size per mesh
//                                                         dim and op; time in collectives per rank
//                                                         and dim
//   DIR/stragglers.json         MESHRT_STRAGGLER_REPORT   rank x dim heat map of lateness
//   DIR/scope_tree_<rank>.json  MESHRT_SCOPE_TREE         every rank's scope tree
//   flight-recorder dumps       --dumps DIR --prefix P    the analyzer's verdict and the entries
//                               (or dumps found in DIR)   around the culprit's op
//
// A missing input (a job that failed writes less) leaves its section saying what is missing and
// which variable or flag produces it. The numbers are also embedded as JSON
// (<script type="application/json" id="report-data">), and the page shows nothing else:
//
//   dir, ranks (every rank an input mentions), dims [{name, in_mesh, group_sizes}] (the order and
//   colours of every chart), missing [{section, text}],
//   comms: null | {ranks, missing_ranks,
//          series [{dim, op, group_sizes, points [{bytes, min_bytes, max_bytes, bucket_bytes,
//                   count, total_ms, avg_ms, algbw_gbps, busbw_gbps,
//                   ranks [{rank, count, avg_ms, busbw_gbps}]}]}],
//          time [{rank, total_ms, dims {dim: ms}}]}
//     points aggregate the ranks' rows of one size bucket (bucket_bytes, its floor): bytes is the
//     ops' mean size, min/max_bytes their range; count and total_ms are sums, avg_ms
//     = total_ms / count, algbw and busbw the ranks' values weighted by their time (= bytes moved
//     over time spent, as the comm logger defines them per rank);
//   stragglers: null | {matched_ops, incomplete_ops, mismatched_ops, missing_ranks, clock,
//          dims [{dim, ops, skew_ms {min, mean, p50, max}, max_skew, most_often_last}],
//          ranks [{rank, lateness_ms {dim: ms | null}, times_last {dim: n | null},
//          total_lateness_ms,
//                  wait_ms, times_last_total}]}   (null: not among the dim's top late ranks);
//   scope_trees: null | {ranks, missing_ranks, trees [{rank, rows [{depth, scope, name, phase,
//          collectives {op: n}, dims {dim: {count, bytes, time_ms}}}]}]}   (rows in tree order;
//          counts and dims include the scope's descendants);
//   failure: null | {dumps_dir, prefix, error | (ranks, collectives_checked, verdict (the text
//          `meshtrace analyze` prints), findings (as its --json), entries [{rank, role ("culprit"
//          or "waiting"), caption, rows [{record_id, time_ms (relative to the culprit's op), group,
//          dim, seq, op, sizes, dtypes, state, scope, caller, focus}]}])}.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace meshrt::trace {

// Where the report's inputs are.
struct JobReportOptions {
  std::filesystem::path dir;        // comms_<rank>.json, stragglers.json, scope_tree_<rank>.json.
  std::filesystem::path dumps_dir;  // Flight-recorder dumps; empty: looked for in `dir`.
  std::string prefix;               // Dump file prefix; empty: inferred.
};

// A built report.
struct JobReport {
  std::string data;                  // The JSON document above.
  std::string html;                  // The page.
  std::vector<std::string> missing;  // One line per missing input, as the page says it.
  std::filesystem::path path;        // Where write_job_report wrote the page.
};

// Reads the inputs and builds the page. Throws InputError (trace/analyze/dump_reader.h) naming the
// file when an input is not valid JSON or not the document its writer writes, or when a dump
// cannot be parsed.
JobReport make_job_report(const JobReportOptions& options);

// make_job_report, then the page written atomically to `output` (empty: <dir>/report.html).
// Throws InputError as make_job_report does, and when the page cannot be written.
JobReport write_job_report(const JobReportOptions& options, std::filesystem::path output);

}  // namespace meshrt::trace
