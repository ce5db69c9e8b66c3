// Dump writing under stress: a directory that cannot be created, a read-only directory and a full
// disk. Each time the writer reports the cause, a dump failure is logged naming the path, no file
// (partial or temporary) is left behind, and the process goes on.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "mesh/meshrt.h"
#include "trace/atomic_file.h"
#include "trace/flight_recorder.h"
#include "trace/logging.h"
#include "trace/tracer.h"

namespace meshrt {
namespace {

namespace fs = std::filesystem;

class DumpWrite : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("meshrt_dump_write_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    fs::permissions(dir_, fs::perms::owner_all, fs::perm_options::add);
    fs::remove_all(dir_);
  }

  // Runs write_file_atomically(path, text) in a child process that first calls `setup` (which
  // may mount or limit things for that child alone) and returns the child's error text, or
  // "written" when the write succeeded, then " left NAME" for each file in path's directory.
  static std::string write_in_child(const std::function<void()>& setup, const fs::path& path,
                                    const std::string& text) {
    int fds[2];
    EXPECT_EQ(::pipe(fds), 0);
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(fds[0]);
      setup();
      std::string error;
      std::string out =
          trace::write_file_atomically(path.string(), text, &error) ? "written" : error;
      for (const auto& f : fs::directory_iterator(path.parent_path())) {
        out += " left " + f.path().filename().string();  // As this child sees the directory.
      }
      [[maybe_unused]] const ssize_t n = ::write(fds[1], out.data(), out.size());
      ::_exit(0);
    }
    ::close(fds[1]);
    std::string got;
    char buf[256];
    for (ssize_t n; (n = ::read(fds[0], buf, sizeof(buf))) > 0;) got.append(buf, n);
    ::close(fds[0]);
    int status = 0;
    ::waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
    return got;
  }

  // Mounts a tmpfs with `options` on `at` in a mount namespace of this (child) process alone, so
  // nothing outlives it; false where that is not allowed (not root, no CAP_SYS_ADMIN).
  static bool private_tmpfs(const fs::path& at, const char* options) {
    return ::unshare(CLONE_NEWNS) == 0 &&
           ::mount("none", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0 &&
           ::mount("tmpfs", at.c_str(), "tmpfs", 0, options) == 0;
  }
  static bool can_mount() {
    return write_in_child(
               [] {
                 if (!private_tmpfs(fs::temp_directory_path(), "size=64k")) ::_exit(0);
               },
               fs::temp_directory_path() / "meshrt_probe", "x") == "written left meshrt_probe";
  }

  void expect_nothing_left() const {
    for (const auto& f : fs::recursive_directory_iterator(dir_)) ADD_FAILURE() << f.path();
  }
  fs::path dir_;
};

TEST_F(DumpWrite, DirectoryThatCannotBeCreatedIsLoggedWithPathAndCauseAndTheProcessGoesOn) {
  std::ofstream(dir_ / "file") << "a file where a directory should be";
  const fs::path prefix = dir_ / "file" / "sub" / "fr_";
  auto fr = std::make_shared<trace::FlightRecorder>(
      trace::FlightRecorderOptions{16, prefix.string(), {}});
  trace::add_sink(fr);
  auto captured = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(8);
  meshrt::log().sinks().push_back(captured);
  run_inproc(2, [](Communicator& world) { world.barrier()->wait(); });
  EXPECT_TRUE(fr->dump(trace::DumpReason::kApi).empty());
  meshrt::log().sinks().pop_back();
  trace::remove_sink(fr.get());
  std::string lines;
  for (const auto& l : captured->last_formatted()) lines += l;
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(lines.find("could not write the flight recorder dump to " + prefix.string() +
                         std::to_string(r) + ": cannot create " + (dir_ / "file" / "sub").string() +
                         ": Not a directory"),
              std::string::npos)
        << lines;
  }
  EXPECT_EQ(fs::file_size(dir_ / "file"), 34u);  // Untouched.
  // The process goes on: the next op runs.
  run_inproc(2, [](Communicator& world) { world.barrier()->wait(); });
}

TEST_F(DumpWrite, ReadOnlyDirectoryFailsWithTheCauseAndLeavesNoFile) {
  // Root ignores mode bits: it gets a read-only tmpfs instead (EROFS); others a 0555 dir (EACCES).
  const bool root = ::geteuid() == 0;
  if (root && !can_mount()) GTEST_SKIP() << "root without mount: no way to make a read-only dir";
  if (!root) fs::permissions(dir_, fs::perms::owner_read | fs::perms::owner_exec);
  const fs::path dir = dir_;
  const std::string error = write_in_child(
      [&] {
        if (root && !private_tmpfs(dir, "ro,size=64k")) ::_exit(3);
      },
      dir_ / "fr_0", "{}");
  EXPECT_EQ(error, root ? "Read-only file system" : "Permission denied");
  expect_nothing_left();
}

TEST_F(DumpWrite, FullDiskFailsWithTheCauseAndLeavesNoPartialFile) {
  // A 16 KiB tmpfs (root), else a 16 KiB file size limit (EFBIG, as a full disk would stop it).
  const bool mount = ::geteuid() == 0 && can_mount();
  const fs::path dir = dir_;
  const std::string big(1 << 20, 'x');
  const std::string error = write_in_child(
      [&] {
        if (mount) {
          if (!private_tmpfs(dir, "size=16k")) ::_exit(3);
        } else {
          ::signal(SIGXFSZ, SIG_IGN);
          const rlimit limit{16 << 10, 16 << 10};
          ::setrlimit(RLIMIT_FSIZE, &limit);
        }
      },
      dir_ / "fr_0", big);
  EXPECT_EQ(error, mount ? "No space left on device" : "File too large");
  expect_nothing_left();
}

}  // namespace
}  // namespace meshrt
