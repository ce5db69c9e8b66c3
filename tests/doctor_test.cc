// `meshrun doctor` (launcher/doctor.h): its pure parts (verdicts, variable checks, the
// self-test's result lines, the command line) as units, suite DoctorUnit; and the built meshrun
// doctor on this host, suite DoctorHost: exit 0 with passing Gloo and in-process self-tests, its
// /dev/shm figure against statvfs, a bad MESHRT_* value, a misspelt MESHRT_* name, a
// MASTER_PORT this test holds, and a self-test stopped at its bound. Every run is bounded by
// timeout(1).
#include "launcher/doctor.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "launcher/options.h"
#include "trace/env.h"

#ifndef MESHRT_MESHRUN
#error "MESHRT_MESHRUN must name the built meshrun"
#endif

namespace meshrt::launcher {
namespace {

using json = nlohmann::json;

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

const Check* find_check(const std::vector<Check>& checks, const std::string& name) {
  for (const Check& c : checks) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

// ---------------------------------------------------------------------------------------------
// Units.

TEST(DoctorUnit, OnlyAFailureFailsTheVerdict) {
  std::vector<Check> checks = {{"a", "x", CheckStatus::kOk, "fine", "", {}},
                               {"a", "y", CheckStatus::kWarn, "meh", "do this", {}},
                               {"b", "z", CheckStatus::kSkip, "n/a", "", {}}};
  EXPECT_EQ(doctor_exit_status(checks), 0);
  EXPECT_TRUE(report_json(checks)["ok"].get<bool>());
  checks.push_back({"b", "w", CheckStatus::kFail, "broken", "fix it", {}});
  EXPECT_EQ(doctor_exit_status(checks), 1);
  const json j = report_json(checks);
  EXPECT_FALSE(j["ok"].get<bool>());
  EXPECT_EQ(j["exit_status"], 1);
  EXPECT_EQ(j["checks"][3]["status"], "FAIL");
  EXPECT_EQ(j["checks"][3]["remedy"], "fix it");
}

TEST(DoctorUnit, ReportGroupsBySectionAndEndsFailuresWithTheirRemedy) {
  const std::vector<Check> checks = {
      {"build", "meshrt", CheckStatus::kOk, "0.1.0", "", {}},
      {"limits", "nofile", CheckStatus::kFail, "low", "raise it", {}},
      {"build", "helper", CheckStatus::kWarn, "old", "update", {}}};
  const std::string text = format_report(checks, "title");
  EXPECT_EQ(text.find("title\n"), 0u);
  // Sections in order of first appearance, each check under its own.
  const size_t build = text.find("\nbuild\n"), limits = text.find("\nlimits\n");
  ASSERT_NE(build, std::string::npos);
  ASSERT_NE(limits, std::string::npos);
  EXPECT_LT(build, text.find("helper"));
  EXPECT_LT(text.find("helper"), limits);
  EXPECT_TRUE(contains(text, "  FAIL  nofile                 low -> raise it\n")) << text;
  EXPECT_TRUE(contains(text, "  OK    meshrt                 0.1.0\n")) << text;
  EXPECT_TRUE(contains(text, "NOT READY: 1 ok, 1 warning(s), 1 failed, 0 skipped")) << text;
}

TEST(DoctorUnit, ShmSpaceAgainstTheWorldSegment) {
  const uint64_t slot = 262144;
  // 8 ranks: 2 x 8 x 256 KiB = 4 MiB for the world.
  Check tight = check_shm_space(1 << 20, slot, 8);
  EXPECT_EQ(tight.status, CheckStatus::kWarn);
  EXPECT_EQ(tight.data["needed_bytes"], 4u << 20);
  EXPECT_EQ(tight.data["free_bytes"], 1u << 20);
  EXPECT_TRUE(contains(tight.remedy, "enlarge /dev/shm")) << tight.remedy;
  EXPECT_EQ(check_shm_space(8u << 20, slot, 8).status, CheckStatus::kWarn);  // Under 4 worlds.
  Check roomy = check_shm_space(uint64_t{1} << 30, slot, 8);
  EXPECT_EQ(roomy.status, CheckStatus::kOk);
  EXPECT_TRUE(contains(roomy.detail, "1.0 GiB free (1073741824 bytes)")) << roomy.detail;
  EXPECT_EQ(check_shm_space(0, 0, 8).status, CheckStatus::kOk);  // Shared memory turned off.
  EXPECT_EQ(check_shm_space(uint64_t{1} << 30, std::nullopt, 8).status, CheckStatus::kWarn);
}

TEST(DoctorUnit, OpenFilesAndLockedMemory) {
  Check low = check_open_files(1024, 1048576);
  EXPECT_EQ(low.status, CheckStatus::kWarn);
  EXPECT_EQ(low.remedy, "raise it before the job: ulimit -n 1048576");
  Check capped = check_open_files(1024, 1024);
  EXPECT_EQ(capped.status, CheckStatus::kWarn);
  EXPECT_TRUE(contains(capped.remedy, "hard limit")) << capped.remedy;
  EXPECT_EQ(check_open_files(65536, 65536).status, CheckStatus::kOk);
  EXPECT_EQ(check_open_files(RLIM_INFINITY, RLIM_INFINITY).status, CheckStatus::kOk);

  EXPECT_EQ(check_locked_memory(RLIM_INFINITY, true).status, CheckStatus::kOk);
  EXPECT_EQ(check_locked_memory(8 << 20, false).status, CheckStatus::kOk);
  Check pinned = check_locked_memory(8 << 20, true);
  EXPECT_EQ(pinned.status, CheckStatus::kWarn);
  EXPECT_TRUE(contains(pinned.remedy, "ulimit -l unlimited")) << pinned.remedy;
}

TEST(DoctorUnit, VariableInErrorMatchesWholeNamesOnly) {
  const std::vector<std::string> names = {"RANK", "LOCAL_RANK", "MESHRT_ON_TIMEOUT"};
  EXPECT_EQ(variable_in_error("meshrt [invalid_argument] init: MESHRT_ON_TIMEOUT='abrot': "
                              "expected one of abort, throw, continue",
                              names),
            "MESHRT_ON_TIMEOUT");
  EXPECT_EQ(variable_in_error("LOCAL_RANK=5 is outside [0, LOCAL_WORLD_SIZE=2)", names),
            "LOCAL_RANK");
  EXPECT_EQ(variable_in_error("no launcher environment found", names), "");
}

TEST(DoctorUnit, VariableChecks) {
  const std::vector<std::string> env = {"HOME=/root",               // Not a job variable: left out.
                                        "MESHRT_ON_TIMEOUT=abrot",  // The runtime's error names it.
                                        "MESHRT_COMMS_LGO=1",       // A typo.
                                        "MESHRT_STORE_TOKEN=s3cret",  // Never printed.
                                        "MASTER_PORT=29500",
                                        "TORCHELASTIC_RUN_ID=job"};
  const std::vector<std::string> errors = {
      "meshrt [invalid_argument] init: MESHRT_ON_TIMEOUT='abrot': expected one of abort, "
      "throw, continue (fix the value or unset the variable)",
      "something about no variable at all"};
  const std::vector<Check> checks = variable_checks(env, errors);
  EXPECT_EQ(find_check(checks, "HOME"), nullptr);

  const Check* bad = find_check(checks, "MESHRT_ON_TIMEOUT");
  ASSERT_NE(bad, nullptr);
  EXPECT_EQ(bad->status, CheckStatus::kFail);
  EXPECT_TRUE(contains(bad->detail, "'abrot'")) << bad->detail;
  EXPECT_EQ(bad->remedy, "set MESHRT_ON_TIMEOUT to a valid value or unset it");

  const Check* typo = find_check(checks, "MESHRT_COMMS_LGO");
  ASSERT_NE(typo, nullptr);
  EXPECT_EQ(typo->status, CheckStatus::kWarn);
  EXPECT_TRUE(contains(typo->remedy, "did you mean MESHRT_COMMS_LOG?")) << typo->remedy;

  const Check* token = find_check(checks, "MESHRT_STORE_TOKEN");
  ASSERT_NE(token, nullptr);
  EXPECT_FALSE(contains(token->detail, "s3cret"));
  EXPECT_FALSE(token->data.dump().find("s3cret") != std::string::npos);

  EXPECT_EQ(find_check(checks, "MASTER_PORT")->status, CheckStatus::kOk);
  EXPECT_EQ(find_check(checks, "TORCHELASTIC_RUN_ID")->status, CheckStatus::kOk);
  const Check* other = find_check(checks, "runtime");
  ASSERT_NE(other, nullptr);
  EXPECT_EQ(other->status, CheckStatus::kFail);
  EXPECT_EQ(other->detail, "something about no variable at all");
}

TEST(DoctorUnit, SelftestResultLines) {
  const std::string output =
      "meshrun: run 'x': log dir /tmp/y\n"
      "[rank1]: MESHRT_SELFTEST {\"rank\":1,\"ok\":true}\n"
      "[rank0]: MESHRT_SELFTEST {not json\n"
      "[rank0]: MESHRT_SELFTEST {\"rank\":0,\"ok\":true,\"latency_us\":12.5,\"latency_bytes\":8,"
      "\"busbw_bytes\":4194304,\"busbw_time_us\":1000.0,\"busbw_gbps\":4.19,"
      "\"backend_version\":\"gloo 0.5.0\"}\n";
  const std::vector<json> results = selftest_results(output);
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0]["rank"], 1);
  EXPECT_EQ(results[1]["rank"], 0);

  const Check ok = selftest_check("gloo", "2 processes", output, 0, false, 2);
  EXPECT_EQ(ok.status, CheckStatus::kOk) << ok.detail;
  EXPECT_DOUBLE_EQ(ok.data["latency_us"].get<double>(), 12.5);
  EXPECT_TRUE(contains(ok.detail, "8 B in 12.5 us, 4.0 MiB in 1.00 ms (busbw 4.19 GB/s)"))
      << ok.detail;

  // A rank missing, a non-zero exit, a rank's error, a timeout: each fails.
  EXPECT_EQ(selftest_check("gloo", "h", output, 1, false, 2).status, CheckStatus::kFail);
  EXPECT_EQ(selftest_check("gloo", "h", output, 0, false, 3).status, CheckStatus::kFail);
  const Check wrong = selftest_check(
      "gloo", "h",
      "MESHRT_SELFTEST {\"rank\":0,\"ok\":false,\"error\":\"element 3 of 2 is 1 instead of 3\"}\n",
      1, false, 2);
  EXPECT_EQ(wrong.status, CheckStatus::kFail);
  EXPECT_TRUE(contains(wrong.detail, "element 3 of 2 is 1 instead of 3")) << wrong.detail;
  EXPECT_EQ(selftest_check("gloo", "h", "", -1, true, 2).status, CheckStatus::kFail);
}

TEST(DoctorUnit, CommandLine) {
  const char* json_args[] = {"meshrun", "doctor", "--json", "--timeout", "5"};
  ParsedCommandLine parsed = parse_options(5, json_args);
  ASSERT_TRUE(parsed.doctor.has_value());
  EXPECT_FALSE(parsed.exit_status.has_value());
  EXPECT_TRUE(parsed.doctor->json);
  EXPECT_TRUE(parsed.doctor->self_test);
  EXPECT_EQ(parsed.doctor->self_test_timeout, std::chrono::seconds(5));

  const char* quick[] = {"meshrun", "doctor", "--no-self-test"};
  EXPECT_FALSE(parse_options(3, quick).doctor->self_test);

  const char* bad[] = {"meshrun", "doctor", "--bogus"};
  EXPECT_EQ(parse_options(3, bad).exit_status, 2);

  // A program that happens to be called doctor still runs as ./doctor.
  const char* program[] = {"meshrun", "--standalone", "./doctor"};
  ParsedCommandLine launch = parse_options(3, program);
  EXPECT_FALSE(launch.doctor.has_value());
  EXPECT_EQ(launch.options.command, std::vector<std::string>{"./doctor"});
}

// ---------------------------------------------------------------------------------------------
// The built meshrun doctor on this host.

struct DoctorRun {
  int status = -1;
  std::string output;
};

// Runs `env_prefix meshrun doctor ARGS` with stdout and stderr captured; timeout(1) kills it
// (status 124) and whatever it started dies with it (PR_SET_PDEATHSIG in meshrun's children).
DoctorRun doctor(const std::string& env_prefix, const std::string& args, int limit_s = 200) {
  const std::string command = "env " + env_prefix + " timeout -k 5 " + std::to_string(limit_s) +
                              " " + MESHRT_MESHRUN + " doctor " + args + " 2>&1";
  DoctorRun run;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return run;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), pipe)) > 0) run.output.append(buf, n);
  const int status = ::pclose(pipe);
  run.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

json doctor_json(const std::string& env_prefix, const std::string& args, int* status) {
  const DoctorRun run = doctor(env_prefix, "--json " + args);
  *status = run.status;
  // stdout holds the JSON; stderr lines (none expected) would precede it.
  const size_t start = run.output.find("{\n");
  json j = json::parse(run.output.substr(start == std::string::npos ? 0 : start), nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << run.output;
  return j;
}

const json* json_check(const json& report, const std::string& section, const std::string& name) {
  for (const json& c : report["checks"]) {
    if (c["section"] == section && c["name"] == name) return &c;
  }
  return nullptr;
}

// What a job needs is here: exit 0, and both CPU backends pass their self-test with numbers.
TEST(DoctorHost, ReadyWithPassingSelfTests) {
  int status = -1;
  const json report = doctor_json("", "", &status);
  ASSERT_EQ(status, 0) << report.dump(2);
  EXPECT_TRUE(report["ok"].get<bool>());
  for (const char* backend : {"gloo", "inproc"}) {
    const json* c = json_check(report, "self-test", backend);
    ASSERT_NE(c, nullptr) << backend;
    EXPECT_EQ((*c)["status"], "OK") << c->dump(2);
    const double latency_us = (*c)["data"]["latency_us"].get<double>();
    EXPECT_GT(latency_us, 0.0) << backend;
    EXPECT_LT(latency_us, 1e6) << backend;
    EXPECT_GT((*c)["data"]["busbw_gbps"].get<double>(), 0.0) << backend;
  }
  // The built backends are named with their versions; mpirun or not, MPI's line says what it did.
  const json* gloo = json_check(report, "backends", "gloo");
  ASSERT_NE(gloo, nullptr);
  EXPECT_TRUE(contains((*gloo)["detail"].get<std::string>(), "gloo ")) << gloo->dump();
  ASSERT_NE(json_check(report, "self-test", "mpi"), nullptr);

  // /dev/shm's free space is statvfs's (give or take what other tests allocate meanwhile).
  const json* shm = json_check(report, "shm", "/dev/shm space");
  ASSERT_NE(shm, nullptr);
  struct statvfs fs {};
  ASSERT_EQ(::statvfs("/dev/shm", &fs), 0);
  const double free_bytes = static_cast<double>(fs.f_bavail) * static_cast<double>(fs.f_frsize);
  const double reported = (*shm)["data"]["free_bytes"].get<double>();
  EXPECT_NEAR(reported, free_bytes, 256.0 * (1 << 20)) << shm->dump();
  EXPECT_TRUE(contains((*shm)["detail"].get<std::string>(),
                       std::to_string((*shm)["data"]["free_bytes"].get<uint64_t>()) + " bytes"));

  // The readable form of the same.
  const DoctorRun text = doctor("", "");
  EXPECT_EQ(text.status, 0) << text.output;
  EXPECT_TRUE(contains(text.output, "\nself-test\n")) << text.output;
  EXPECT_TRUE(contains(text.output, "  OK    gloo                   2 processes under meshrun"))
      << text.output;
  EXPECT_TRUE(contains(text.output, "\nready: ")) << text.output;
}

TEST(DoctorHost, BadValueFailsNamingTheVariableAndTheRemedy) {
  const DoctorRun run = doctor("MESHRT_ON_TIMEOUT=abrot", "--no-self-test");
  EXPECT_EQ(run.status, 1) << run.output;
  bool found = false;
  for (size_t at = 0, end; at < run.output.size(); at = end + 1) {
    end = run.output.find('\n', at);
    if (end == std::string::npos) end = run.output.size();
    const std::string line = run.output.substr(at, end - at);
    if (contains(line, "FAIL") && contains(line, "MESHRT_ON_TIMEOUT") &&
        contains(line, "'abrot'") && contains(line, "set MESHRT_ON_TIMEOUT to a valid value")) {
      found = true;
    }
  }
  EXPECT_TRUE(found) << run.output;
  EXPECT_TRUE(contains(run.output, "NOT READY")) << run.output;
}

TEST(DoctorHost, UnknownNameGetsTheClosestKnownOne) {
  int status = -1;
  const json report = doctor_json("MESHRT_COMMS_LGO=1", "--no-self-test", &status);
  EXPECT_EQ(status, 0) << report.dump(2);  // A warning: the job runs, without the setting.
  const json* c = json_check(report, "environment", "MESHRT_COMMS_LGO");
  ASSERT_NE(c, nullptr) << report.dump(2);
  EXPECT_EQ((*c)["status"], "WARN");
  EXPECT_EQ((*c)["data"]["closest"],
            std::string(trace::env::closest_known_variable("MESHRT_COMMS_LGO")));
  EXPECT_TRUE(contains((*c)["remedy"].get<std::string>(), "did you mean MESHRT_COMMS_LOG?"))
      << c->dump();
}

TEST(DoctorHost, MasterPortInUseIsReported) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)), 0);
  ASSERT_EQ(::listen(fd, 1), 0);
  socklen_t len = sizeof(sa);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len), 0);
  const int port = ntohs(sa.sin_port);

  int status = -1;
  const json busy = doctor_json("MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(port),
                                "--no-self-test", &status);
  EXPECT_EQ(status, 1) << busy.dump(2);
  const json* c = json_check(busy, "rendezvous", "MASTER_PORT");
  ASSERT_NE(c, nullptr) << busy.dump(2);
  EXPECT_EQ((*c)["status"], "FAIL");
  EXPECT_TRUE((*c)["data"]["in_use"].get<bool>());
  EXPECT_TRUE(contains((*c)["detail"].get<std::string>(),
                       "port " + std::to_string(port) + " on 127.0.0.1 (127.0.0.1) is in use"))
      << c->dump();
  EXPECT_TRUE(contains((*c)["remedy"].get<std::string>(), "set MASTER_PORT to a free port"));
  ::close(fd);

  // Released, the same port is free.
  const json free_now = doctor_json("MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(port),
                                    "--no-self-test", &status);
  const json* again = json_check(free_now, "rendezvous", "MASTER_PORT");
  ASSERT_NE(again, nullptr);
  EXPECT_EQ((*again)["status"], "OK") << again->dump();
}

// Live (not zombie) processes whose command line names meshrt-selftest.
int live_selftests() {
  int n = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string pid = entry.path().filename().string();
    if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream cmdline(entry.path() / "cmdline"), stat(entry.path() / "stat");
    std::string args((std::istreambuf_iterator<char>(cmdline)), {});
    std::string st((std::istreambuf_iterator<char>(stat)), {});
    const size_t paren = st.rfind(')');
    const char state = paren != std::string::npos && paren + 2 < st.size() ? st[paren + 2] : '?';
    if (contains(args, "meshrt-selftest") && state != 'Z') ++n;
  }
  return n;
}

// A self-test that outlives --timeout is stopped, fails with the bound in its line, and leaves
// no rank behind. 1 ms: no launcher starts its ranks that fast.
TEST(DoctorHost, ASelfTestPastItsBoundIsStoppedAndFails) {
  ASSERT_EQ(live_selftests(), 0) << "another meshrt-selftest is running";
  int status = -1;
  const json report = doctor_json("", "--timeout 0.001", &status);
  EXPECT_EQ(status, 1) << report.dump(2);
  for (const char* backend : {"gloo", "mpi"}) {
    const json* c = json_check(report, "self-test", backend);
    ASSERT_NE(c, nullptr) << backend;
    if ((*c)["status"] == "SKIP") continue;  // No mpirun here.
    EXPECT_EQ((*c)["status"], "FAIL") << c->dump(2);
    EXPECT_TRUE(contains((*c)["detail"].get<std::string>(), "no result within 0.001 s"))
        << c->dump(2);
  }
  // Ranks die with their launcher (PR_SET_PDEATHSIG), a moment after it.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (live_selftests() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(live_selftests(), 0);
}

}  // namespace
}  // namespace meshrt::launcher
