#include "trace/logging.h"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <string>

#include "trace/env.h"

namespace meshrt {
namespace {

std::atomic<int> process_rank{-1};
thread_local int thread_rank = -1;

// Renders "%*" as the rank of the thread, or of the process, or "?" before init.
class RankFlag : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg&, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    const int r = thread_rank >= 0 ? thread_rank : process_rank.load(std::memory_order_relaxed);
    if (r < 0) {
      dest.push_back('?');
    } else {
      fmt::format_to(std::back_inserter(dest), "{}", r);
    }
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<RankFlag>();
  }
};

std::string host_name() {
  char name[256] = {};
  ::gethostname(name, sizeof(name) - 1);
  return name;
}

std::shared_ptr<spdlog::logger> make_logger() {
  auto logger =
      std::make_shared<spdlog::logger>("meshrt", std::make_shared<spdlog::sinks::stderr_sink_mt>());
  auto formatter = std::make_unique<spdlog::pattern_formatter>();
  // "[meshrt warning rank 3 node7:4242] message": the rank once, and where it runs (%P is the pid
  // at the time of the line, right after a fork too).
  std::string host = host_name();
  std::replace(host.begin(), host.end(), '%', '_');
  formatter->add_flag<RankFlag>('*').set_pattern("[meshrt %l rank %* " + host + ":%P] %v");
  logger->set_formatter(std::move(formatter));
  logger->set_level(spdlog::level::warn);
  try {
    if (auto level = trace::env::get_choice(
            {"MESHRT_LOG_LEVEL"}, {"trace", "debug", "info", "warn", "error", "critical", "off"})) {
      logger->set_level(spdlog::level::from_str(*level));
    }
  } catch (const trace::env::EnvError& e) {
    // The logger cannot fail its first caller: a typo must not silence the logs either.
    logger->warn("{}; using warn", e.what());
  }
  logger->flush_on(spdlog::level::warn);
  return logger;
}

}  // namespace

spdlog::logger& log() {
  // Leaked: the watchdog's detached threads log until the process is gone.
  static auto* logger = new std::shared_ptr<spdlog::logger>(make_logger());
  return **logger;
}

void set_log_rank(int rank) { process_rank.store(rank, std::memory_order_relaxed); }

void set_log_thread_rank(int rank) { thread_rank = rank; }

}  // namespace meshrt
