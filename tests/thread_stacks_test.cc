// trace/thread_stacks.h: every thread's stack, symbolised, with system and meshrt frames folded.
#include "trace/thread_stacks.h"

#include <gtest/gtest.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

namespace meshrt::trace {
namespace {

std::mutex mu;
std::condition_variable cv;
bool release = false;
std::atomic<int> parked_tid{0};
int wait_line = 0;

[[gnu::noinline]] void parked_in_known_function() {
  parked_tid = static_cast<int>(::syscall(SYS_gettid));
  std::unique_lock lock(mu);
  wait_line = __LINE__ + 1;  // The call site the stack must name.
  cv.wait(lock, [] { return release; });
}

TEST(ThreadStacks, AParkedThreadShowsItsFunctionAndLineAndTheMainThreadIsMarked) {
  std::thread t(parked_in_known_function);
  while (parked_tid == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // In the wait by now.
  const std::vector<ThreadStack> stacks = capture_thread_stacks();
  {
    std::lock_guard lock(mu);
    release = true;
  }
  cv.notify_all();
  t.join();

  const ThreadStack* parked = nullptr;
  int mains = 0;
  for (const ThreadStack& s : stacks) {
    if (s.tid == parked_tid) parked = &s;
    mains += s.main ? 1 : 0;
  }
  EXPECT_EQ(mains, 1);
  ASSERT_NE(parked, nullptr);
  EXPECT_TRUE(parked->answered);
  ASSERT_FALSE(parked->frames.empty()) << format_stack(*parked);
  // Folded: the first frame is the program's own, not the C library's futex wait or std::.
  const StackFrame& top = parked->frames.front();
  EXPECT_NE(top.function.find("parked_in_known_function"), std::string::npos)
      << format_stack(*parked);
  EXPECT_NE(top.file.find("thread_stacks_test.cc"), std::string::npos) << top.file;
  EXPECT_EQ(top.line, wait_line) << format_stack(*parked);
  EXPECT_EQ(format_stack(*parked, 1),
            "parked_in_known_function (thread_stacks_test.cc:" + std::to_string(wait_line) + ")");
}

}  // namespace
}  // namespace meshrt::trace
