// `meshrun doctor`: one command that says whether this host can run meshrt jobs, as
// torch.utils.collect_env and nccl-tests' sanity runs do for PyTorch and NCCL. meshrun links the
// store layer only, so what needs libmeshrt (backend versions, what the runtime makes of the
// environment, the 2-rank self-tests) comes from meshrt-selftest (runtime/selftest_main.cc),
// which the doctor runs as a child, bounded in time; the host checks (/dev/shm, ulimits,
// interfaces, MASTER_ADDR:MASTER_PORT, variable names) are made here. launcher/README.md shows
// a report.
#pragma once

#include <sys/resource.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "launcher/options.h"

namespace meshrt::launcher {

// A check's outcome. Only kFail makes the doctor exit non-zero: a kWarn job runs, slower or
// with a caveat; kSkip is a check that does not apply here (a backend not built, no device).
enum class CheckStatus { kOk, kWarn, kFail, kSkip };

// "OK", "WARN", "FAIL", "SKIP".
std::string_view status_name(CheckStatus status);

// One line of the report.
struct Check {
  std::string section;  // "build", "network", "shm", "limits", "rendezvous", "environment", ...
  std::string name;     // What was checked: "gloo", "/dev/shm", "MESHRT_ON_TIMEOUT", ...
  CheckStatus status = CheckStatus::kOk;
  std::string detail;                              // What was found.
  std::string remedy;                              // What to do; set on every kWarn and kFail.
  nlohmann::json data = nlohmann::json::object();  // The numbers behind `detail`, for --json.
};

// 0 when no check failed, else 1.
int doctor_exit_status(const std::vector<Check>& checks);
// The readable report: checks grouped by section in order of appearance, one line each, a
// failing or warning line ending with its remedy, then the verdict line.
std::string format_report(const std::vector<Check>& checks, const std::string& title);
// {"ok": bool, "exit_status": N, "checks": [{section, name, status, detail, remedy, data}]}.
nlohmann::json report_json(const std::vector<Check>& checks);

// /dev/shm's free space against a job of `ranks` ranks on this host whose Gloo world segment
// takes 2 x ranks x `slot_bytes` (runtime/backends/gloo/shm_group.h); a mesh adds about as
// much per dim, so less than 4 worlds' worth warns. Shared memory is an optimisation: without
// room the ranks fall back to TCP, so this never fails.
Check check_shm_space(uint64_t free_bytes, std::optional<uint64_t> slot_bytes, int ranks);
// RLIMIT_NOFILE: Gloo holds a socket per peer per communicator, so a soft limit under 4096
// warns (ulimit -n raises it up to the hard limit).
Check check_open_files(rlim_t soft, rlim_t hard);
// RLIMIT_MEMLOCK: matters for NCCL (and MPI) over RDMA, which pin memory; warns when NCCL can
// run here (built, and a CUDA device visible) and the limit is not unlimited.
Check check_locked_memory(rlim_t soft, bool nccl_usable);

// A variable that belongs in the environment section: MESHRT_*, torchrun's and torchelastic's,
// PyTorch's aliases of meshrt's (TORCH_FR_*, TORCH_NCCL_*, GLOO_SOCKET_IFNAME), OpenMPI's and
// Slurm's rank variables.
bool is_job_variable(std::string_view name);
// The first NAME=... or NAME='...' in a runtime error text whose NAME is in `names`; "" when none.
std::string variable_in_error(std::string_view error, const std::vector<std::string>& names);
// One check per job variable in `environ_entries` ("NAME=value"), sorted by name: the value, or
// a failure carrying the runtime's error for it (`errors`, the texts meshrt-selftest --info
// gave), or a warning for a MESHRT_* name meshrt does not read, with the closest known one.
// Errors that name no variable set become checks of their own.
std::vector<Check> variable_checks(const std::vector<std::string>& environ_entries,
                                   const std::vector<std::string>& errors);

// The self-test's result lines (`MESHRT_SELFTEST {json}`, maybe behind meshrun's "[rank0]: "
// prefix) in `output`, in the order printed; lines that do not parse are left out.
std::vector<nlohmann::json> selftest_results(const std::string& output);
// The check of one backend's self-test from its job's output and exit status: OK only when it
// exited 0 and every rank said ok, with rank 0's latency and busbw in the detail.
Check selftest_check(const std::string& backend, const std::string& how, const std::string& output,
                     int exit_code, bool timed_out, int ranks);

// Runs every check and prints the report (or JSON); returns the exit status.
int run_doctor(const DoctorOptions& options);

}  // namespace meshrt::launcher
