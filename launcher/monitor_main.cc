// meshrt-monitor: the live monitor and status page of a job that has no launcher (mpirun, srun,
// a hand-set MASTER_ADDR). Rank 0, which hosts the job's store then, starts it
// (runtime/monitor_process.h); it does what meshrun's node 0 does while an attempt runs (the live
// verdict, the status server) and ends with rank 0. docs/diagnosis.md, "Without meshrun".
#include <fmt/format.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <span>
#include <sstream>
#include <string>
#include <thread>

#include "launcher/live_board.h"
#include "launcher/live_monitor.h"
#include "launcher/post_mortem.h"
#include "launcher/signals.h"
#include "launcher/status_server.h"
#include "runtime/store/dump_keys.h"
#include "runtime/store/prefix_store.h"
#include "runtime/store/store_auth.h"
#include "runtime/store/tcp_store.h"
#include "trace/atomic_file.h"

namespace {

void say(const std::string& line) {
  std::fprintf(stderr, "meshrt-monitor: %s\n", line.c_str());
  std::fflush(stderr);
}

// Where the status page is, said once: at once to a terminal, else with the first stall (as
// meshrun does).
void say_url(const meshrt::launcher::StatusServer* server) {
  static bool said = false;
  if (server == nullptr || said) return;
  said = true;
  say(fmt::format("live status: {} (in a terminal: meshtrace live {})", server->url(),
                  server->url()));
}

// After a failure, what meshrun prints once the ranks have dumped: meshtrace's verdict on the
// dumps, here while the ranks wait for it (they hold the job open until kPostMortemDone), and
// in <dir>/post_mortem.txt.
void post_mortem(meshrt::Store& job, int world_size, const std::string& dump_prefix,
                 const std::string& dir, std::chrono::system_clock::time_point started) {
  using namespace meshrt::launcher;
  namespace fs = std::filesystem;
  try {
    say("the job failed: waiting for every rank's flight-recorder dump for the post-mortem");
    const int64_t written =
        wait_for_dumps(job, world_size, std::chrono::seconds(10), [] { return false; });
    const fs::path prefix(dump_prefix);
    const std::string dump_dir = prefix.has_parent_path() ? prefix.parent_path().string() : ".";
    const std::string name = prefix.filename().string();
    // The default prefix is every job's on this host: a file older than this monitor, or of a
    // rank beyond this world, is an earlier job's, and meshtrace is told to leave it out.
    const auto since = std::chrono::floor<std::chrono::seconds>(started);
    const auto written_since = std::chrono::file_clock::from_sys(since);
    std::vector<int> dumped;
    for (int r = 0; r < world_size; ++r) {
      std::error_code ec;
      const auto t = fs::last_write_time(fmt::format("{}/{}{}", dump_dir, name, r), ec);
      if (!ec && t >= written_since) dumped.push_back(r);
    }
    if (dumped.empty()) {
      say(
          fmt::format("post-mortem: no dump named {}<rank> on this host ({} of {} ranks counted "
                      "theirs)",
                      dump_prefix, written, world_size));
    } else if (const std::string meshtrace = find_meshtrace(executable_dir()); meshtrace.empty()) {
      say(fmt::format("post-mortem: {}: run `meshtrace analyze {} --prefix {}` by hand",
                      meshtrace_not_found(), dump_dir, name));
    } else {
      const MeshtraceRun run =
          analyze(meshtrace, dump_dir, name, static_cast<int>(dumped.size()) < world_size,
                  std::chrono::seconds(15), {},
                  {"--world-size", std::to_string(world_size), "--since",
                   std::to_string(since.time_since_epoch().count())});
      std::string text =
          fmt::format("post-mortem ({}, exit status {}):\n", run.command, run.exit_code);
      std::istringstream lines(run.output);
      for (std::string line; std::getline(lines, line);) text += "  " + line + "\n";
      std::fprintf(stderr, "meshrt-monitor: %s", text.c_str());
      std::fflush(stderr);
      fs::create_directories(dir);
      meshrt::trace::write_file_atomically(dir + "/post_mortem.txt", text);
    }
  } catch (const std::exception& e) {
    say(fmt::format("post-mortem failed: {}", e.what()));
  }
  try {
    job.set(meshrt::dump_keys::kPostMortemDone, std::span<const char>("1", 1));
  } catch (const std::exception& e) {
    say(fmt::format("cannot tell the ranks the post-mortem is done: {}", e.what()));
  }
}

}  // namespace

int main(int argc, char** argv) {
  using namespace meshrt;
  using namespace meshrt::launcher;
  CLI::App app{
      "meshrt-monitor: the live verdict and status page of a job without meshrun; rank 0 starts "
      "it (MESHRT_LIVE_MONITOR=0 turns that off). The store token comes in MESHRT_STORE_TOKEN."};
  std::string store_host = "127.0.0.1";
  uint16_t store_port = 0;
  std::string run_id;
  int attempt = 0;
  int world_size = 0;
  std::string dir;
  std::string status_port = "0";
  std::string status_host = "127.0.0.1";
  pid_t parent = 0;
  app.add_option("--store-host", store_host, "the job's store");
  app.add_option("--store-port", store_port, "the job's store")->required();
  app.add_option("--run-id", run_id, "the job's run id")->required();
  app.add_option("--attempt", attempt, "the job's attempt");
  app.add_option("--world-size", world_size, "ranks in the job")
      ->required()
      ->check(CLI::PositiveNumber);
  app.add_option("--dir", dir, "where the stalls' snapshots go")->required();
  app.add_option("--status-port", status_port, "the status page's port: 0 a free one, off none");
  app.add_option("--status-host", status_host, "the address the status page binds");
  app.add_option("--parent-pid", parent, "end when this process (rank 0) is gone");
  std::string dump_prefix;
  app.add_option("--dump-prefix", dump_prefix,
                 "the ranks' flight-recorder dump prefix: after a failure, the post-mortem runs "
                 "`meshtrace analyze` on those dumps");
  CLI11_PARSE(app, argc, argv);

  const auto started = std::chrono::system_clock::now();
  install_signal_handlers();
  // Dies with rank 0 even when rank 0 is killed outright.
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (parent != 0 && ::getppid() != parent) return 0;
  try {
    TcpStoreOptions co;
    co.host = store_host;
    co.port = store_port;
    co.connect_timeout = std::chrono::seconds(10);
    co.timeout = std::chrono::seconds(10);
    auto job = std::make_shared<PrefixStore>(fmt::format("meshrt/{}/{}", run_id, attempt),
                                             std::make_shared<TcpStore>(co));
    const LiveMonitorOptions options = live_monitor_options_from_env();
    LiveBoard board(run_id, options.stall.count() / 1000);
    std::unique_ptr<StatusServer> server;
    if (status_port != "off") {
      StatusServerOptions so;
      so.host = status_host;
      so.port = static_cast<uint16_t>(std::stoi(status_port));
      so.token = status_token_from_env_or_new();
      try {
        server = std::make_unique<StatusServer>(so, board);
        if (::isatty(STDERR_FILENO) == 1) say_url(server.get());
      } catch (const std::exception& e) {
        say(fmt::format("{}; going on without it", e.what()));
      }
    }
    LiveMonitor monitor(options, board, attempt, job, world_size, dir,
                        find_meshtrace(executable_dir()), [&](const std::string& line) {
                          say(line);
                          if (line.starts_with("stall ")) say_url(server.get());
                        });
    bool post_mortem_done = dump_prefix.empty();
    while (interrupt_count() == 0 && (parent == 0 || ::getppid() == parent)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      if (!post_mortem_done && dump_requested(*job)) {
        post_mortem_done = true;
        post_mortem(*job, world_size, dump_prefix, dir, started);
      }
    }
    // Rank 0 is leaving: end now, without waiting for a store reply or a meshtrace run in flight
    // (the snapshots on disk are complete files; the rest is of no use to anybody).
    std::_Exit(0);
  } catch (const std::exception& e) {
    say(e.what());
    return 1;
  }
  return 0;
}
