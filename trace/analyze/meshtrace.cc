// meshtrace: offline tools for meshrt's traces. `meshtrace analyze DIR` reads the flight-recorder
// dumps of a job (meshrt JSON or PyTorch FR pickle) and says which rank stopped the others;
// `meshtrace report DIR` writes the job's report page (trace/analyze/job_report.h).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "trace/analyze/analyzer.h"
#include "trace/analyze/format.h"
#include "trace/analyze/job_report.h"
#include "trace/analyze/live_verdict.h"
#include "trace/atomic_file.h"
#include "trace/chrome_trace.h"

namespace {

constexpr int kOk = 0;
constexpr int kFindings = 1;
constexpr int kBadInput = 2;

struct AnalyzeArgs {
  std::string dir;
  meshrt::trace::AnalyzeOptions options;
  bool just_print_entries = false;
  bool json = false;
  meshrt::trace::EntriesTableOptions table;
};

int run_analyze(const AnalyzeArgs& args) {
  using namespace meshrt::trace;
  if (args.just_print_entries) {
    std::vector<DumpFile> files = find_dump_files(args.dir, args.options.prefix);
    if (!args.table.ranks.empty()) {
      // Only the columns asked for: a job's dumps can be gigabytes.
      std::erase_if(files, [&](const DumpFile& f) {
        return std::find(args.table.ranks.begin(), args.table.ranks.end(), f.rank) ==
               args.table.ranks.end();
      });
    }
    const auto dumps = read_dumps(files);
    check_versions(dumps);
    std::fputs(format_entries_table(dumps, args.table).c_str(), stdout);
    return kOk;
  }
  const Report report = analyze_directory(args.dir, args.options);
  const std::string out = args.json ? format_json(report) : format_text(report);
  std::fputs(out.c_str(), stdout);
  return report.findings.empty() ? kOk : kFindings;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"meshtrace: offline tools for meshrt traces"};
  app.require_subcommand(1);
  app.footer("Exit status: 0 nothing found, 1 problems found, 2 bad input or arguments.");

  AnalyzeArgs args;
  CLI::App* analyze = app.add_subcommand(
      "analyze",
      "Match the flight-recorder dumps of every rank (meshrt JSON or PyTorch FR pickle, one "
      "file per rank named <prefix><rank>) per group and sequence number and per p2p channel, "
      "and report ranks that did not join an op or called it differently, blamed by majority, "
      "with waits followed across groups to the root cause.");
  analyze->add_option("DIR", args.dir, "Directory of dump files (searched recursively)")
      ->required();
  analyze->add_option("-p,--prefix", args.options.prefix,
                      "File name prefix before the rank (default: inferred, must be common)");
  analyze->add_flag("--allow-incomplete-ranks", args.options.allow_incomplete_ranks,
                    "Analyze even if some group members left no dump (finding missing_dump)");
  CLI::Option* entries =
      analyze->add_flag("-j,--just-print-entries", args.just_print_entries,
                        "Print the raw entries side by side, one column per rank, and exit");
  analyze->add_option("--selected-ranks", args.table.ranks, "With -j: only these ranks' columns")
      ->needs(entries);
  analyze
      ->add_option("--pg-filters", args.table.pg_filters,
                   "With -j: only entries of groups with these names or descs")
      ->needs(entries);
  analyze
      ->add_flag("--json", args.json,
                 "Print one JSON object: {\"ranks\", \"collectives_checked\", \"findings\"}")
      ->excludes(entries);

  std::vector<std::string> chrome_files;
  std::string chrome_out;
  CLI::App* merge = app.add_subcommand(
      "merge-chrome",
      "Merge per-rank Chrome trace files (MESHRT_TRACE_CHROME with {rank}) into one trace with "
      "one process per rank and one track per mesh dim, on a common clock (opens in Perfetto).");
  merge->add_option("FILES", chrome_files, "Per-rank Chrome trace files")->required();
  merge->add_option("-o,--output", chrome_out, "Merged trace file")->required();

  meshrt::trace::JobReportOptions report_args;
  std::string report_out;
  CLI::App* report = app.add_subcommand(
      "report",
      "Write one self-contained HTML page for a whole job from what `meshrun --report DIR` had "
      "the ranks write there (comm summaries, straggler report, scope trees), with the verdict "
      "of `analyze` on flight-recorder dumps after a failure.");
  report->footer("Exit status: 0 the page was written, 2 bad input or arguments.");
  report->add_option("DIR", report_args.dir, "The report directory")->required();
  report->add_option("--dumps", report_args.dumps_dir,
                     "Directory of flight-recorder dumps (default: dumps found in DIR)");
  report->add_option("-p,--prefix", report_args.prefix,
                     "Dump file name prefix before the rank (default: inferred)");
  report->add_option("-o,--output", report_out, "The page (default: DIR/report.html)");

  std::string stall_dir;
  std::string stall_prefix = "fr_";
  CLI::App* stall = app.add_subcommand(
      "stall",
      "Print the live verdict on a stalled job in one line: DIR holds the ranks' flight-recorder "
      "snapshots (<prefix><rank>) and progress records (progress_<rank>.json) that meshrun "
      "gathered; they are matched with analyze's rules (docs/diagnosis.md).");
  stall->footer("Exit status: 0 a verdict was printed, 2 bad input or arguments.");
  stall->add_option("DIR", stall_dir, "Directory of snapshots and progress records")->required();
  stall->add_option("-p,--prefix", stall_prefix, "Snapshot file name prefix before the rank");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    std::fprintf(stderr, "meshtrace: error: %s (see --help)\n", e.what());
    return kBadInput;
  }
  if (merge->parsed()) {
    try {
      const std::string merged = meshrt::trace::merge_chrome_traces(chrome_files);
      if (!meshrt::trace::write_file_atomically(chrome_out, merged)) {
        std::fprintf(stderr, "meshtrace: error: cannot write %s\n", chrome_out.c_str());
        return kBadInput;
      }
      return 0;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "meshtrace: error: %s\n", e.what());
      return kBadInput;
    }
  }
  if (stall->parsed()) {
    try {
      std::printf("%s\n",
                  meshrt::trace::live_verdict_from_directory(stall_dir, stall_prefix).c_str());
      return kOk;
    } catch (const meshrt::trace::InputError& e) {
      std::fprintf(stderr, "meshtrace: error: %s\n", e.what());
      return kBadInput;
    }
  }
  if (report->parsed()) {
    try {
      const auto made = meshrt::trace::write_job_report(report_args, report_out);
      for (const std::string& m : made.missing) std::fprintf(stderr, "meshtrace: %s\n", m.c_str());
      std::printf("meshtrace: wrote %s\n", made.path.c_str());
      return kOk;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "meshtrace: error: %s\n", e.what());
      return kBadInput;
    }
  }
  try {
    return run_analyze(args);
  } catch (const meshrt::trace::InputError& e) {
    std::fprintf(stderr, "meshtrace: error: %s\n", e.what());
    return kBadInput;
  } catch (const std::exception& e) {
    // Dumps are untrusted: whatever else reading them raised (out of memory on a dump that is
    // too big for this machine, ...) is still bad input, never an abort.
    std::fprintf(stderr, "meshtrace: error: analyzing %s: %s\n", args.dir.c_str(), e.what());
    return kBadInput;
  }
}
