#include "launcher/rank_status.h"

#include <fmt/chrono.h>
#include <fmt/format.h>

#include <chrono>
#include <nlohmann/json.hpp>

namespace meshrt::launcher {
namespace {

nlohmann::json exit_json(const ExitStatus& e) {
  return {{"exit_code", e.exit_code}, {"signal", e.signal}};
}

ExitStatus exit_from(const nlohmann::json& j) {
  return {j.at("exit_code").get<int>(), j.at("signal").get<int>()};
}

}  // namespace

std::string utc_now() {
  const auto now = std::chrono::system_clock::now();
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  return fmt::format("{:%Y-%m-%dT%H:%M:%S}.{:03}Z",
                     fmt::gmtime(std::chrono::system_clock::to_time_t(now)), ms);
}

std::string describe(const ExitStatus& exit) {
  if (exit.signal != 0) return "killed by " + signal_name(exit.signal);
  if (exit.exit_code == kWatchdogExitCode) {
    return fmt::format("exited with code {} (its watchdog: an op timed out or failed)",
                       exit.exit_code);
  }
  return fmt::format("exited with code {}", exit.exit_code);
}

std::string describe_death(const RankStatus& s) {
  return fmt::format(
      "rank {} (pid {}, node {}) {} at {}", s.rank, s.pid, s.node,
      s.exit.signal != 0 ? "died of " + signal_name(s.exit.signal) : describe(s.exit), s.end_time);
}

std::string describe(const RankStatus& s) {
  if (s.stop_signal == 0) return s.exit.success() ? "exited 0" : describe(s.exit);
  if (s.exit.signal == s.stop_signal) {
    return fmt::format("stopped by meshrun ({})", signal_name(s.stop_signal));
  }
  return fmt::format("{} after meshrun sent {}", s.exit.success() ? "exited 0" : describe(s.exit),
                     signal_name(s.stop_signal));
}

std::string describe(const Failure& f) {
  if (f.interrupt_signal != 0) {
    return fmt::format("meshrun on node {} (host {}) received {} at {}", f.node, f.host,
                       signal_name(f.interrupt_signal), f.time);
  }
  if (f.agent_lost) {
    return fmt::format(
        "node {} (host {}): its agent (pid {}) stopped answering at {}; its ranks "
        "from rank {} on were lost with it",
        f.node, f.host, f.pid, f.time, f.rank);
  }
  return fmt::format("rank {} (node {} on host {}, local rank {}, pid {}) {} at {}", f.rank, f.node,
                     f.host, f.local_rank, f.pid, describe(f.exit), f.time);
}

std::string fate_without_dump(const RankStatus& s) {
  if (s.frozen) {
    return "meshrun found it stopped (SIGSTOP or a debugger) when the ranks dumped: alive but "
           "not answering, it could not dump";
  }
  if (s.exit.signal != 0 && s.exit.signal != s.stop_signal) {
    return fmt::format("it was killed by {} before it could dump", signal_name(s.exit.signal));
  }
  if (s.stop_signal != 0) {
    return fmt::format("meshrun stopped it ({}) before it dumped", signal_name(s.stop_signal));
  }
  if (s.exit.success()) return "it exited 0 without dumping (it left the job early)";
  return fmt::format("it {} before dumping", describe(s.exit));
}

std::string to_json(const std::vector<RankStatus>& statuses) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& s : statuses) {
    out.push_back({{"rank", s.rank},
                   {"local_rank", s.local_rank},
                   {"node", s.node},
                   {"pid", s.pid},
                   {"exit", exit_json(s.exit)},
                   {"stop_signal", s.stop_signal},
                   {"end_time", s.end_time},
                   {"dumped", s.dumped},
                   {"frozen", s.frozen},
                   {"left_behind", s.left_behind}});
  }
  return out.dump();
}

std::vector<RankStatus> statuses_from_json(const std::string& text) {
  std::vector<RankStatus> out;
  for (const auto& j : nlohmann::json::parse(text)) {
    RankStatus s;
    s.rank = j.at("rank").get<int>();
    s.local_rank = j.at("local_rank").get<int>();
    s.node = j.at("node").get<int>();
    s.pid = j.at("pid").get<int>();
    s.exit = exit_from(j.at("exit"));
    s.stop_signal = j.at("stop_signal").get<int>();
    s.end_time = j.at("end_time").get<std::string>();
    s.dumped = j.at("dumped").get<bool>();
    s.frozen = j.value("frozen", false);
    s.left_behind = j.value("left_behind", false);
    out.push_back(std::move(s));
  }
  return out;
}

std::string to_json(const Failure& f) {
  return nlohmann::json{{"rank", f.rank},
                        {"local_rank", f.local_rank},
                        {"node", f.node},
                        {"host", f.host},
                        {"pid", f.pid},
                        {"exit", exit_json(f.exit)},
                        {"interrupt_signal", f.interrupt_signal},
                        {"agent_lost", f.agent_lost},
                        {"time", f.time},
                        {"error_file", f.error_file},
                        {"error_message", f.error_message}}
      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

Failure failure_from_json(const std::string& text) {
  const auto j = nlohmann::json::parse(text);
  Failure f;
  f.rank = j.at("rank").get<int>();
  f.local_rank = j.at("local_rank").get<int>();
  f.node = j.at("node").get<int>();
  f.host = j.at("host").get<std::string>();
  f.pid = j.at("pid").get<int>();
  f.exit = exit_from(j.at("exit"));
  f.interrupt_signal = j.at("interrupt_signal").get<int>();
  f.agent_lost = j.value("agent_lost", false);
  f.time = j.at("time").get<std::string>();
  f.error_file = j.at("error_file").get<std::string>();
  f.error_message = j.at("error_message").get<std::string>();
  return f;
}

}  // namespace meshrt::launcher
