#include "trace/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "trace/logging.h"

namespace meshrt::trace {
namespace {

constexpr std::string_view kRankField = "{rank}";
std::atomic<int> process_count{0};

bool fail(std::string* error, const std::string& cause) {
  if (error != nullptr) *error = cause;
  return false;
}

}  // namespace

bool write_file_atomically(const std::string& path, std::string_view text, std::string* error) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(parent, ec);
    if (ec) return fail(error, "cannot create " + parent.string() + ": " + ec.message());
  }
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return fail(error, std::strerror(errno));
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string cause = n < 0 ? std::strerror(errno) : "short write";
      ::close(fd);
      ::unlink(tmp.c_str());
      return fail(error, cause);
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    const std::string cause = std::strerror(errno);
    ::close(fd);
    ::unlink(tmp.c_str());
    return fail(error, cause);
  }
  // Some filesystems (NFS, quotas) report a full disk only when the file is closed.
  if (::close(fd) != 0) {
    const std::string cause = std::strerror(errno);
    ::unlink(tmp.c_str());
    return fail(error, cause);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string cause = std::strerror(errno);
    ::unlink(tmp.c_str());
    return fail(error, cause);
  }
  return true;
}

bool write_output_file(const std::string& path, std::string_view text, std::string_view what) {
  std::string error;
  if (write_file_atomically(path, text, &error)) return true;
  log().warn("could not write the {} to {}: {}", what, path, error);
  return false;
}

void set_process_count(int processes) { process_count.store(processes); }

std::string output_path(std::string_view pattern, int rank) {
  std::string path(pattern);
  if (path.find(kRankField) == std::string::npos) {
    if (process_count.load() <= 1) return path;
    const std::filesystem::path p(path);
    const std::string name =
        p.stem().string() + "_rank" + std::to_string(rank) + p.extension().string();
    return (p.parent_path() / name).string();
  }
  for (size_t at = path.find(kRankField); at != std::string::npos; at = path.find(kRankField)) {
    path.replace(at, kRankField.size(), std::to_string(rank));
  }
  return path;
}

}  // namespace meshrt::trace
