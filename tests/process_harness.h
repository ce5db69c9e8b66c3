// Starts real rank processes the way a launcher would (torchrun's environment on loopback), bounds
// their time and cleans them up, for the multi-process tests.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

namespace meshrt::testing {

// How one rank process ended.
struct RankResult {
  int exit_code = -1;  // -1 when killed by a signal.
  int signal = 0;
  std::string output;  // stdout and stderr together.
};

// A free TCP port on 127.0.0.1 (bound once, then released).
int free_port();

// Pids of live processes (not this one) whose command line contains `marker`; zombies have none.
// Tests pass a unique marker argument to the processes they start, to find any left behind.
std::vector<int> processes_with(const std::string& marker);

// Runs `argv` as `world_size` processes with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
// MASTER_ADDR=127.0.0.1 and a free MASTER_PORT, plus `extra_env`. Kills every process still
// running after `limit` (SIGKILL) and reports it as signal 9.
std::vector<RankResult> run_ranks(const std::vector<std::string>& argv, int world_size,
                                  std::chrono::milliseconds limit,
                                  const std::map<std::string, std::string>& extra_env = {});

// Every rank's exit status and output, for test failure messages.
std::string describe(const std::vector<RankResult>& results);

}  // namespace meshrt::testing
