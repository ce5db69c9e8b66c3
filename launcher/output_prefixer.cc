#include "launcher/output_prefixer.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>

namespace meshrt::launcher {
namespace {

// A line longer than this is written in pieces, so a rank printing without newlines cannot
// grow the buffer without bound.
constexpr size_t kMaxLineBytes = 64 << 10;

constexpr std::string_view kLogTag = "[meshrt ";

}  // namespace

bool is_meshrt_log_line(std::string_view line) {
  // "[meshrt <level> rank <N> <host>:<pid>] ...": a line before init() says "rank ?" and keeps
  // the launcher's prefix.
  if (line.substr(0, kLogTag.size()) != kLogTag) return false;
  const auto close = line.find(']');
  if (close == std::string_view::npos) return false;
  const std::string_view tag = line.substr(0, close);
  const auto at = tag.find(" rank ");
  return at != std::string_view::npos && at + 6 < tag.size() && tag[at + 6] >= '0' &&
         tag[at + 6] <= '9';
}

OutputPrefixer::OutputPrefixer(std::vector<OutputStream> streams)
    : streams_(std::move(streams)), wake_(make_pipe()) {
  thread_ = std::thread([this] { run(); });
}

OutputPrefixer::~OutputPrefixer() { finish(std::chrono::milliseconds(0)); }

void OutputPrefixer::finish(std::chrono::milliseconds timeout) {
  if (!thread_.joinable()) return;
  {
    std::unique_lock lock(mu_);
    all_ended_.wait_for(lock, timeout, [this] { return ended_; });
  }
  write_all(wake_.write.get(), "x");
  thread_.join();
}

void OutputPrefixer::emit(OutputStream& s, std::string_view line) {
  std::string text;
  text.reserve(s.prefix.size() + line.size() + 1);
  if (s.console_fd >= 0) {
    if (!is_meshrt_log_line(line)) text.append(s.prefix);
    text.append(line).push_back('\n');
    write_all(s.console_fd, text);
  }
  if (s.log) {
    text.assign(line).push_back('\n');
    write_all(s.log->get(), text);
  }
}

void OutputPrefixer::run() {
  std::vector<std::string> pending(streams_.size());
  std::vector<pollfd> fds;
  for (const auto& s : streams_) fds.push_back({s.fd.get(), POLLIN, 0});
  fds.push_back({wake_.read.get(), POLLIN, 0});
  size_t open = streams_.size();
  char buf[16 << 10];
  bool stop = false;
  while (!stop) {
    if (open == 0) {
      std::lock_guard lock(mu_);
      ended_ = true;
      all_ended_.notify_all();
    }
    if (::poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    stop = fds.back().revents != 0;
    for (size_t i = 0; i < streams_.size(); ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      const ssize_t n = ::read(fds[i].fd, buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        fds[i].fd = -1;  // poll() skips negative descriptors.
        --open;
        continue;
      }
      std::string& p = pending[i];
      p.append(buf, static_cast<size_t>(n));
      size_t start = 0;
      for (size_t nl; (nl = p.find('\n', start)) != std::string::npos; start = nl + 1) {
        emit(streams_[i], std::string_view(p).substr(start, nl - start));
      }
      p.erase(0, start);
      if (p.size() > kMaxLineBytes) {
        emit(streams_[i], p);
        p.clear();
      }
    }
  }
  for (size_t i = 0; i < streams_.size(); ++i) {
    if (!pending[i].empty()) emit(streams_[i], pending[i]);
  }
  streams_.clear();  // Closes the read ends and the log files.
}

}  // namespace meshrt::launcher
