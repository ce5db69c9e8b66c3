// File descriptors for the launcher: an owning handle, pipes, and whole-buffer writes.
#pragma once

#include <string_view>
#include <utility>

namespace meshrt::launcher {

// Owns one file descriptor and closes it on destruction; -1 when empty.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { reset(); }
  UniqueFd(UniqueFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) {
      reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  int get() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }
  // Closes the descriptor (if any) and leaves the handle empty.
  void reset();

 private:
  int fd_ = -1;
};

// Both ends of a pipe, close-on-exec (a child gets only the end dup2'd onto its stdout/stderr).
struct Pipe {
  UniqueFd read;
  UniqueFd write;
};

// Creates a close-on-exec pipe; throws std::system_error on failure.
Pipe make_pipe();

// Writes all of `data` to `fd`, retrying on EINTR and short writes; returns false on an error
// (a closed console must not stop the launcher).
bool write_all(int fd, std::string_view data);

}  // namespace meshrt::launcher
