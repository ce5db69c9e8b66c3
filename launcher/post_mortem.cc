#include "launcher/post_mortem.h"

#include <fmt/format.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <thread>

#include "launcher/child_process.h"
#include "launcher/files.h"
#include "launcher/unique_fd.h"
#include "runtime/store/dump_keys.h"
#include "trace/env.h"

namespace meshrt::launcher {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr milliseconds kDumpPoll{50};

std::string dump_key(int attempt, int rank) { return fmt::format("dumps/{}/{}/", attempt, rank); }

}  // namespace

bool dump_requested(Store& job) {
  const std::string key = dump_keys::kDumpSignal;
  return job.check({&key, 1});
}

int64_t wait_for_dumps(Store& job, int world_size, milliseconds timeout,
                       const std::function<bool()>& should_stop,
                       const std::function<void()>& on_poll) {
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    if (on_poll) on_poll();
    const int64_t written = job.add(dump_keys::kDumpsWritten, 0);
    if (written >= world_size || Clock::now() >= deadline || should_stop()) return written;
    std::this_thread::sleep_for(kDumpPoll);
  }
}

void publish_dump(Store& launcher, int attempt, int rank, const std::string& contents) {
  dump_keys::set_chunked(launcher, dump_key(attempt, rank), contents);
}

std::string fetch_dump(Store& launcher, int attempt, int rank, milliseconds timeout) {
  return dump_keys::get_chunked(launcher, dump_key(attempt, rank), timeout);
}

std::string executable_dir() {
  char self[4096] = {};
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  return n > 0 ? dir_name(std::string(self, static_cast<size_t>(n))) : std::string();
}

std::string find_meshtrace(const std::string& exe_dir) {
  if (auto env = trace::env::get({"MESHRT_MESHTRACE"})) {
    return ::access(env->c_str(), X_OK) == 0 ? *env : "";
  }
  if (!exe_dir.empty()) {
    const std::string candidate = exe_dir + "/meshtrace";
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return find_program("meshtrace");
}

std::string meshtrace_not_found() {
  if (auto env = trace::env::get({"MESHRT_MESHTRACE"})) {
    return fmt::format("meshtrace not found: MESHRT_MESHTRACE={} is not executable", *env);
  }
  return fmt::format(
      "meshtrace not found (in $MESHRT_MESHTRACE, next to this program in {}, or on PATH)",
      executable_dir());
}

MeshtraceRun run_meshtrace(const std::string& meshtrace, const std::vector<std::string>& args,
                           milliseconds timeout) {
  std::vector<std::string> argv = {meshtrace};
  argv.insert(argv.end(), args.begin(), args.end());
  MeshtraceRun run;
  run.command = fmt::format("{}", fmt::join(argv, " "));
  CapturedRun captured = run_captured(argv, current_environment(), timeout);
  run.output = std::move(captured.output);
  run.exit_code = captured.status.exit_code;
  if (captured.status.signal != 0) {
    run.output += fmt::format("\n(meshtrace killed by {}: limit {} ms)",
                              signal_name(captured.status.signal), timeout.count());
  }
  return run;
}

MeshtraceRun analyze(const std::string& meshtrace, const std::string& dir,
                     const std::string& prefix, bool incomplete, milliseconds timeout,
                     const std::map<int, std::string>& rank_notes,
                     const std::vector<std::string>& more_args) {
  std::vector<std::string> args = {"analyze", dir, "--prefix", prefix};
  if (incomplete) args.push_back("--allow-incomplete-ranks");
  for (const auto& [rank, note] : rank_notes) {
    args.push_back(fmt::format("--rank-note={}={}", rank, note));
  }
  args.insert(args.end(), more_args.begin(), more_args.end());
  return run_meshtrace(meshtrace, args, timeout);
}

MeshtraceRun make_report(const std::string& meshtrace, const std::string& dir,
                         const std::string& dumps_dir, const std::string& prefix,
                         milliseconds timeout) {
  std::vector<std::string> args = {"report", dir};
  if (!dumps_dir.empty()) args.insert(args.end(), {"--dumps", dumps_dir, "--prefix", prefix});
  return run_meshtrace(meshtrace, args, timeout);
}

std::optional<ErrorFile> read_error_file(const std::string& path) {
  const std::optional<std::string> text = read_file(path);
  if (!text) return std::nullopt;
  ErrorFile file{path, "(not torchelastic's error file JSON)"};
  const auto j = nlohmann::json::parse(*text, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("message")) return file;
  // torchelastic's two layouts: {"message": "text"} and {"message": {"message": "text", ...}}.
  const auto& m = j["message"];
  if (m.is_string()) {
    file.message = m.get<std::string>();
  } else if (m.is_object() && m.contains("message") && m["message"].is_string()) {
    file.message = m["message"].get<std::string>();
  }
  return file;
}

}  // namespace meshrt::launcher
