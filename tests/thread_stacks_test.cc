// trace/thread_stacks.h: every thread's stack, symbolised, with system and meshrt frames folded.
#include "trace/thread_stacks.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>
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

// Many threads are asked at once and waited for together: a thread that blocks the signal costs
// one budget, is reported unanswered, and every other thread (more than one batch of slots)
// answers.
TEST(ThreadStacks, AThreadThatNeverAnswersCostsOneBudgetAndTheOthersAllAnswer) {
  constexpr int kParked = 80;
  std::mutex park_mu;
  std::condition_variable park_cv;
  bool go = false;
  std::atomic<int> parked{0};
  std::atomic<int> deaf_tid{0};
  std::set<int> tids = {static_cast<int>(::getpid())};  // The main thread captures.
  std::vector<std::thread> threads;
  for (int i = 0; i < kParked; ++i) {
    threads.emplace_back([&, i] {
      const int tid = static_cast<int>(::syscall(SYS_gettid));
      if (i == 0) {
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGRTMIN + 4);
        pthread_sigmask(SIG_BLOCK, &set, nullptr);
        deaf_tid = tid;
      }
      std::unique_lock lock(park_mu);
      tids.insert(tid);
      ++parked;
      park_cv.wait(lock, [&] { return go; });
    });
  }
  while (parked < kParked) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  for (int capture = 0; capture < 2; ++capture) {  // The second reuses the slots.
    const auto start = std::chrono::steady_clock::now();
    const std::vector<ThreadStack> stacks = capture_thread_stacks(std::chrono::milliseconds(500));
    const auto took = std::chrono::steady_clock::now() - start;
    EXPECT_GE(took, std::chrono::milliseconds(500));
    EXPECT_LT(took, std::chrono::seconds(5)) << "asked one by one, not together";
    // Only this test's threads are checked: a sanitizer's own threads may keep the signal out.
    int answered = 0, seen = 0;
    for (const ThreadStack& s : stacks) {
      if (!tids.contains(s.tid)) continue;
      ++seen;
      if (s.tid == deaf_tid) {
        EXPECT_FALSE(s.answered);
        EXPECT_EQ(format_stack(s), "(the thread did not answer)");
      } else {
        EXPECT_TRUE(s.answered) << "thread " << s.tid << " in capture " << capture;
        answered += s.answered ? 1 : 0;
      }
    }
    EXPECT_EQ(seen, kParked + 1);
    EXPECT_EQ(answered, kParked);
  }
  {
    std::lock_guard lock(park_mu);
    go = true;
  }
  park_cv.notify_all();
  for (std::thread& t : threads) t.join();
}

}  // namespace
}  // namespace meshrt::trace
