// Copies the children's output, line by line, to the console with a "[rank<r>]: " prefix and
// to per-rank log files, on one thread for all children of an attempt. meshrt's own log lines
// name their rank already and reach the console as they are.
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "launcher/unique_fd.h"

namespace meshrt::launcher {

// True for a line of meshrt's logger that names its rank: "[meshrt warning rank 3 node7:4242] ..."
// (not "... rank ? ...", a line logged before init).
bool is_meshrt_log_line(std::string_view line);

// One stream to copy: the read end of a child's stdout or stderr pipe.
struct OutputStream {
  UniqueFd fd;          // Read end; the prefixer owns it.
  std::string prefix;   // Put before each console line (but meshrt's log lines), e.g. "[rank3]: ".
  int console_fd = -1;  // 1 or 2; -1: not shown on the console.
  std::shared_ptr<UniqueFd> log;  // The rank's log file (shared by its two streams) or null.
};

// Reads every stream until it ends. Lines are written whole (one write per line) so ranks'
// lines never mix; a last line without a newline is written when its stream ends.
class OutputPrefixer {
 public:
  // Starts the copying thread.
  explicit OutputPrefixer(std::vector<OutputStream> streams);
  // finish(0).
  ~OutputPrefixer();

  OutputPrefixer(const OutputPrefixer&) = delete;
  OutputPrefixer& operator=(const OutputPrefixer&) = delete;

  // Waits up to `timeout` for every stream to end (the children exited; a grandchild may hold
  // a pipe longer), then stops copying, writes what is buffered and closes the streams.
  void finish(std::chrono::milliseconds timeout);

 private:
  void run();
  void emit(OutputStream& s, std::string_view line);

  std::vector<OutputStream> streams_;
  Pipe wake_;  // A byte written here stops the thread.
  std::mutex mu_;
  std::condition_variable all_ended_;
  bool ended_ = false;
  std::thread thread_;
};

}  // namespace meshrt::launcher
