// The live monitor of a job without a launcher (docs/diagnosis.md, "Without meshrun"): under
// mpirun, srun or a hand-set MASTER_ADDR, rank 0 hosts the job's store, and nobody else watches
// the ranks' progress records. Rank 0 then starts meshrt-monitor (launcher/monitor_main.cc), the
// same live monitor and status page as meshrun's node 0, in a process of its own so that the
// verdict does not depend on rank 0's threads; it ends with rank 0.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>

namespace meshrt {

// What meshrt-monitor needs to find the job.
struct MonitorProcessOptions {
  std::string store_host;
  uint16_t store_port = 0;
  std::string store_token;  // Handed over in the environment, never on the command line.
  std::string run_id;
  int attempt = 0;
  int world_size = 1;
};

// A running meshrt-monitor; stops it (SIGTERM, then SIGKILL after 2 s) when destroyed.
class MonitorProcess {
 public:
  // Starts it, or returns null (with an info line in the log) when its binary is not found:
  // MESHRT_MONITOR_BIN, else next to libmeshrt (the build tree and the install tree's bin/).
  static std::unique_ptr<MonitorProcess> start(const MonitorProcessOptions& options);
  // Adopts the running meshrt-monitor `pid`.
  explicit MonitorProcess(pid_t pid) : pid_(pid) {}
  ~MonitorProcess();

  MonitorProcess(const MonitorProcess&) = delete;
  MonitorProcess& operator=(const MonitorProcess&) = delete;

  pid_t pid() const { return pid_; }

 private:
  pid_t pid_;
};

// The meshrt-monitor binary that start() would run; "" when there is none.
std::string find_monitor_binary();

}  // namespace meshrt
