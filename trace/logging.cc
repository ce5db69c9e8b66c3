#include "trace/logging.h"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_sinks.h>

#include <atomic>
#include <cstdlib>

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

std::shared_ptr<spdlog::logger> make_logger() {
  auto logger =
      std::make_shared<spdlog::logger>("meshrt", std::make_shared<spdlog::sinks::stderr_sink_mt>());
  auto formatter = std::make_unique<spdlog::pattern_formatter>();
  formatter->add_flag<RankFlag>('*').set_pattern("[%Y-%m-%d %H:%M:%S.%e] [meshrt rank %*] [%l] %v");
  logger->set_formatter(std::move(formatter));
  logger->set_level(spdlog::level::warn);
  if (const char* level = std::getenv("MESHRT_LOG_LEVEL")) {
    // spdlog maps unknown names to "off": a typo must not silence the logs.
    const auto parsed = spdlog::level::from_str(level);
    if (parsed == spdlog::level::off && std::string_view(level) != "off") {
      logger->warn(
          "MESHRT_LOG_LEVEL='{}' is not one of trace, debug, info, warn, error, "
          "critical, off; using warn",
          level);
    } else {
      logger->set_level(parsed);
    }
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
