#include "tests/process_harness.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace meshrt::testing {

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    throw std::runtime_error("bind to a free port failed");
  }
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

std::vector<RankResult> run_ranks(const std::vector<std::string>& argv, int world_size,
                                  std::chrono::milliseconds limit,
                                  const std::map<std::string, std::string>& extra_env) {
  const int port = free_port();
  std::vector<pid_t> pids(world_size);
  std::vector<std::string> logs(world_size);
  for (int r = 0; r < world_size; ++r) {
    char tmpl[] = "/tmp/meshrt-rank-XXXXXX";
    const int log_fd = ::mkstemp(tmpl);
    logs[r] = tmpl;
    const pid_t pid = ::fork();
    if (pid == 0) {
      // Child: own process group so the harness can kill whatever it starts.
      ::setpgid(0, 0);
      ::dup2(log_fd, 1);
      ::dup2(log_fd, 2);
      ::setenv("RANK", std::to_string(r).c_str(), 1);
      ::setenv("WORLD_SIZE", std::to_string(world_size).c_str(), 1);
      ::setenv("LOCAL_RANK", std::to_string(r).c_str(), 1);
      ::setenv("LOCAL_WORLD_SIZE", std::to_string(world_size).c_str(), 1);
      ::setenv("MASTER_ADDR", "127.0.0.1", 1);
      ::setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
      for (const auto& [k, v] : extra_env) ::setenv(k.c_str(), v.c_str(), 1);
      std::vector<char*> args;
      for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      ::execv(args[0], args.data());
      std::perror("execv");
      ::_exit(127);
    }
    ::close(log_fd);
    pids[r] = pid;
  }
  std::vector<RankResult> results(world_size);
  std::vector<bool> done(world_size, false);
  const auto deadline = std::chrono::steady_clock::now() + limit;
  int remaining = world_size;
  while (remaining > 0) {
    for (int r = 0; r < world_size; ++r) {
      if (done[r]) continue;
      int status = 0;
      if (::waitpid(pids[r], &status, WNOHANG) == pids[r]) {
        done[r] = true;
        --remaining;
        if (WIFEXITED(status)) results[r].exit_code = WEXITSTATUS(status);
        if (WIFSIGNALED(status)) results[r].signal = WTERMSIG(status);
      }
    }
    if (remaining == 0) break;
    if (std::chrono::steady_clock::now() > deadline) {
      for (int r = 0; r < world_size; ++r) {
        if (!done[r]) ::kill(-pids[r], SIGKILL);
      }
      for (int r = 0; r < world_size; ++r) {
        if (done[r]) continue;
        ::waitpid(pids[r], nullptr, 0);
        results[r].signal = SIGKILL;
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (int r = 0; r < world_size; ++r) {
    std::ifstream in(logs[r]);
    std::stringstream ss;
    ss << in.rdbuf();
    results[r].output = ss.str();
    std::remove(logs[r].c_str());
  }
  return results;
}

std::string describe(const std::vector<RankResult>& results) {
  std::string out;
  for (size_t r = 0; r < results.size(); ++r) {
    out += "--- rank " + std::to_string(r) + " exit " + std::to_string(results[r].exit_code) +
           " signal " + std::to_string(results[r].signal) + "\n" + results[r].output;
  }
  return out;
}

std::vector<int> processes_with(const std::string& marker) {
  std::vector<int> pids;
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return pids;
  while (dirent* e = ::readdir(proc)) {
    const int pid = std::atoi(e->d_name);
    if (pid <= 0 || pid == ::getpid()) continue;
    std::ifstream in("/proc/" + std::to_string(pid) + "/cmdline");
    const std::string cmdline((std::istreambuf_iterator<char>(in)),
                              std::istreambuf_iterator<char>());
    if (cmdline.find(marker) != std::string::npos) pids.push_back(pid);
  }
  ::closedir(proc);
  return pids;
}

}  // namespace meshrt::testing
