// meshtrace: offline tools for meshrt's traces. `meshtrace analyze DIR` reads the flight-recorder
// dumps of a job (meshrt JSON or PyTorch FR pickle) and says which rank stopped the others;
// `meshtrace report DIR` writes the job's report page (trace/analyze/job_report.h); `meshtrace
// live HOST:PORT` shows a running job's live status (trace/analyze/live_status_text.h).
#include <fmt/format.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "trace/analyze/analyzer.h"
#include "trace/analyze/format.h"
#include "trace/analyze/http_get.h"
#include "trace/analyze/job_report.h"
#include "trace/analyze/live_status_text.h"
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
  uint64_t max_input_mib = meshrt::trace::InputLimits{}.file_bytes >> 20;
  uint64_t max_total_input_mib = meshrt::trace::InputLimits{}.total_bytes >> 20;
  std::vector<std::string> rank_notes;  // RANK=TEXT.
  meshrt::trace::JobFiles job;
  int64_t since_unix_s = 0;  // --since: 0, no limit.
};

int run_analyze(AnalyzeArgs args) {
  using namespace meshrt::trace;
  args.options.limits.file_bytes = args.max_input_mib << 20;
  args.options.limits.total_bytes = args.max_total_input_mib << 20;
  for (const std::string& note : args.rank_notes) {
    const size_t eq = note.find('=');
    args.options.rank_notes[std::stoi(note.substr(0, eq))] = note.substr(eq + 1);
  }
  if (args.just_print_entries) {
    std::vector<DumpFile> files = find_dump_files(args.dir, args.options.prefix);
    if (!args.table.ranks.empty()) {
      // Only the columns asked for: a job's dumps can be gigabytes.
      std::erase_if(files, [&](const DumpFile& f) {
        return std::find(args.table.ranks.begin(), args.table.ranks.end(), f.rank) ==
               args.table.ranks.end();
      });
    }
    const auto dumps = read_dumps(files, 0, args.options.limits);
    check_versions(dumps);
    std::fputs(format_entries_table(dumps, args.table).c_str(), stdout);
    return kOk;
  }
  std::vector<DumpFile> files = find_dump_files(args.dir, args.options.prefix);
  if (args.since_unix_s > 0) {
    args.job.written_since = std::chrono::file_clock::from_sys(
        std::chrono::sys_seconds(std::chrono::seconds(args.since_unix_s)));
  }
  for (const std::string& line : keep_job_files(files, args.job)) {
    std::fprintf(stderr, "meshtrace: left out %s\n", line.c_str());
  }
  const Report report =
      analyze(read_dumps(files, args.options.threads, args.options.limits), args.options);
  const std::string out = args.json ? format_json(report) : format_text(report);
  std::fputs(out.c_str(), stdout);
  return report.findings.empty() ? kOk : kFindings;
}

struct LiveArgs {
  std::string endpoint;
  bool once = false;
  double interval_s = 1;
};

// Draws the status until the server goes away (the job ended) or, with --once, one time. On a
// terminal each refresh replaces the last.
int run_live(const LiveArgs& args) {
  using namespace meshrt::trace;
  constexpr auto kTimeout = std::chrono::seconds(5);
  try {
    const HttpEndpoint at = status_endpoint(args.endpoint);
    const bool tty = ::isatty(STDOUT_FILENO) == 1;
    for (bool first = true;; first = false) {
      HttpResponse r;
      try {
        r = http_get(at, "/status.json", kTimeout);
      } catch (const InputError& e) {
        if (first) throw;
        std::printf("meshtrace: the status server is gone (the job ended?): %s\n", e.what());
        return kOk;
      }
      if (r.status != 200) {
        throw InputError(
            fmt::format("{}:{}/status.json answered {}: {}", at.host, at.port, r.status, r.body));
      }
      const std::string text = format_live_status(r.body);
      std::fputs(tty ? ("\033[H\033[2J" + text).c_str() : (first ? text : "\n" + text).c_str(),
                 stdout);
      std::fflush(stdout);
      if (args.once) return kOk;
      std::this_thread::sleep_for(std::chrono::duration<double>(args.interval_s));
    }
  } catch (const InputError& e) {
    std::fprintf(stderr, "meshtrace: error: %s\n", e.what());
    return kBadInput;
  }
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
  analyze
      ->add_option("--rank-note", args.rank_notes,
                   "RANK=TEXT: what is known of a rank without a dump (meshrun passes how it "
                   "ended), said in its missing_dump finding")
      ->check([](const std::string& v) {
        const size_t eq = v.find('=');
        return eq == std::string::npos || eq == 0 || v.find_first_not_of("0123456789") < eq
                   ? std::string("expected RANK=TEXT")
                   : std::string();
      });
  analyze
      ->add_option("--world-size", args.job.world_size,
                   "Leave out files named for ranks at or above this (another job's, in a "
                   "directory that several jobs dump into)")
      ->check(CLI::PositiveNumber);
  analyze
      ->add_option("--since", args.since_unix_s,
                   "Leave out files last written before this time (seconds since the epoch: "
                   "the job's start), an earlier job's")
      ->check(CLI::PositiveNumber);
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

  analyze
      ->add_option("--max-input-mib", args.max_input_mib,
                   fmt::format("Refuse (exit 2) a dump file larger than this many MiB: reading "
                               "one takes a multiple of its size (default {})",
                               args.max_input_mib))
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 30));
  analyze
      ->add_option("--max-total-input-mib", args.max_total_input_mib,
                   fmt::format("Refuse (exit 2) dump files larger than this many MiB in all "
                               "(default {})",
                               args.max_total_input_mib))
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 30));

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
      "Print the live verdict on a stalled job in one line (then 'culprits: [ranks]'): DIR holds "
      "the ranks' flight-recorder "
      "snapshots (<prefix><rank>) and progress records (progress_<rank>.json) that meshrun "
      "gathered; they are matched with analyze's rules (docs/diagnosis.md).");
  stall->footer("Exit status: 0 a verdict was printed, 2 bad input or arguments.");
  stall->add_option("DIR", stall_dir, "Directory of snapshots and progress records")->required();
  stall->add_option("-p,--prefix", stall_prefix, "Snapshot file name prefix before the rank");

  LiveArgs live_args;
  CLI::App* live = app.add_subcommand(
      "live",
      "Show a running job's live status in the terminal, refreshed every second: ENDPOINT is "
      "the status server meshrun printed (its URL with ?token=, or <log dir>/status_url, or "
      "HOST:PORT with the token in MESHRT_STATUS_TOKEN); the same as its page.");
  live->footer("Exit status: 0 shown (or the job ended while shown), 2 no status server there.");
  live->add_option("ENDPOINT", live_args.endpoint,
                   "http://HOST:PORT/?token=..., a file holding it, or HOST:PORT")
      ->required();
  live->add_flag("--once", live_args.once, "Print the status once and exit");
  live->add_option("--interval", live_args.interval_s, "Seconds between refreshes (default 1)")
      ->check(CLI::Range(0.1, 3600.0));

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
      // Line 2 is for meshrun's live board, which outlines the culprits on its mesh.
      std::vector<int> culprits;
      const std::string line =
          meshrt::trace::live_verdict_from_directory(stall_dir, stall_prefix, &culprits);
      std::printf("%s\nculprits: [%s]\n", line.c_str(),
                  fmt::format("{}", fmt::join(culprits, ", ")).c_str());
      return kOk;
    } catch (const meshrt::trace::InputError& e) {
      std::fprintf(stderr, "meshtrace: error: %s\n", e.what());
      return kBadInput;
    }
  }
  if (live->parsed()) return run_live(live_args);
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
