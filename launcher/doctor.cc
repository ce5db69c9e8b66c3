#include "launcher/doctor.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>

#include "launcher/child_process.h"
#include "launcher/post_mortem.h"
#include "launcher/unique_fd.h"
#include "meshrt_config.h"
#include "trace/env.h"

namespace meshrt::launcher {
namespace {

using json = nlohmann::json;
using std::chrono::milliseconds;

constexpr const char* kHelper = "meshrt-selftest";
constexpr const char* kResultTag = "MESHRT_SELFTEST ";
// The helper's --info is quick; the bound only guards against a wedged CUDA driver.
constexpr milliseconds kInfoTimeout{30000};
constexpr rlim_t kMinOpenFiles = 4096;
// A self-test past its bound gets SIGTERM, so that meshrun or mpirun stop and reap their ranks,
// and SIGKILL after this (meshrun's own grace before its SIGKILL is --grace-period, below).
constexpr milliseconds kStopGrace{5000};
// A mesh adds a segment per dim beside the world's; room for 3 dims is a comfortable job.
constexpr uint64_t kShmWorldsWanted = 4;

Check make(std::string section, std::string name, CheckStatus status, std::string detail,
           std::string remedy = "", json data = json::object()) {
  return {std::move(section), std::move(name),   status,
          std::move(detail),  std::move(remedy), std::move(data)};
}

std::string human_bytes(uint64_t bytes) {
  constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 4) {
    value /= 1024;
    ++unit;
  }
  return unit == 0 ? fmt::format("{} B", bytes) : fmt::format("{:.1f} {}", value, kUnits[unit]);
}

std::string human_us(double us) {
  if (us >= 1000) return fmt::format("{:.2f} ms", us / 1000);
  return fmt::format("{:.1f} us", us);
}

std::string last_line(const std::string& text) {
  size_t end = text.find_last_not_of(" \n\r\t");
  if (end == std::string::npos) return "";
  const size_t start = text.rfind('\n', end);
  std::string line = text.substr(start == std::string::npos ? 0 : start + 1,
                                 end + 1 - (start == std::string::npos ? 0 : start + 1));
  if (line.size() > 300) line = line.substr(0, 300) + "...";
  return line;
}

// A library's version as one short phrase: OpenMPI's text goes on after a comma with its
// package and build ("Open MPI v4.1.4, package: Debian OpenMPI, ..."); --json keeps it whole.
std::string short_version(const std::string& version) {
  return version.substr(0, version.find(','));
}

std::string tail(const std::string& text, size_t bytes) {
  return text.size() <= bytes ? text : text.substr(text.size() - bytes);
}

std::optional<std::string> getenv_nonempty(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

bool is_loopback_host(const std::string& host) {
  return host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1";
}

std::string self_path() {
  char self[4096] = {};
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  return n > 0 ? std::string(self, static_cast<size_t>(n)) : "meshrun";
}

// --------------------------------------------------------------------------------------------
// build, backends, CUDA: what meshrt-selftest --info says.

std::string find_helper() {
  const std::string dir = executable_dir();
  if (!dir.empty()) {
    const std::string candidate = dir + "/" + kHelper;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return find_program(kHelper);
}

// The helper's JSON line, or nullopt with `why`.
std::optional<json> helper_info(const std::string& helper, std::string& why) {
  const CapturedRun run = run_captured({helper, "--info"}, current_environment(), kInfoTimeout);
  // Its log lines (unknown-variable warnings) share the stream; the JSON is the line that is
  // an object.
  size_t pos = run.output.size();
  while (pos > 0) {
    const size_t start = run.output.rfind('\n', pos - 1);
    const size_t from = start == std::string::npos ? 0 : start + 1;
    const std::string line = run.output.substr(from, pos - from);
    if (line.starts_with("{")) {
      json info = json::parse(line, nullptr, false);
      if (!info.is_discarded() && info.is_object()) return info;
    }
    if (start == std::string::npos) break;
    pos = start;
  }
  why = run.timed_out ? "it did not answer within 30 s"
                      : fmt::format("exit status {}, signal {}: {}", run.status.exit_code,
                                    run.status.signal, last_line(run.output));
  return std::nullopt;
}

void build_checks(const std::string& helper, const std::optional<json>& info,
                  const std::string& why, std::vector<Check>& out) {
  out.push_back(make(
      "build", "meshrt", CheckStatus::kOk,
      fmt::format("{} (meshrun {}; built with MPI: {}, NCCL + CUDA: {})", MESHRT_VERSION,
                  self_path(), MESHRT_HAVE_MPI ? "yes" : "no", MESHRT_HAVE_NCCL ? "yes" : "no"),
      "",
      {{"version", MESHRT_VERSION},
       {"have_mpi", MESHRT_HAVE_MPI != 0},
       {"have_nccl", MESHRT_HAVE_NCCL != 0}}));
  if (helper.empty()) {
    out.push_back(make("build", kHelper, CheckStatus::kFail,
                       "not found next to meshrun nor on PATH: no backend checks, no self-test",
                       "install meshrt-selftest with meshrun (`ninja install` puts both in bin/)"));
    return;
  }
  if (!info) {
    out.push_back(make("build", kHelper, CheckStatus::kFail,
                       fmt::format("{} --info failed ({})", helper, why),
                       "reinstall meshrt (meshrt-selftest must load libmeshrt from its own tree)"));
    return;
  }
  const std::string version = info->value("version", "");
  if (version != MESHRT_VERSION) {
    out.push_back(
        make("build", kHelper, CheckStatus::kFail,
             fmt::format("{} is meshrt {}, meshrun is {}", helper, version, MESHRT_VERSION),
             "install meshrun and libmeshrt from the same build"));
  } else {
    out.push_back(make("build", kHelper, CheckStatus::kOk,
                       fmt::format("{} (libmeshrt {})", helper, version)));
  }
  for (const json& b : info->value("backends", json::array())) {
    const std::string name = b.value("name", "?");
    if (b.value("built", false)) {
      out.push_back(make(
          "backends", name, CheckStatus::kOk,
          fmt::format("built: {}", short_version(b.value("version", "version unknown"))), "", b));
    } else {
      out.push_back(make("backends", name, CheckStatus::kSkip,
                         name == "nccl" ? "not built (no CUDA toolkit with NCCL at meson setup: "
                                          "-Dgpu=enabled -Dgpu_root=DIR)"
                                        : "not built (no MPI at meson setup)",
                         "", b));
    }
  }
  const json cuda = info->value("cuda", json::object());
  if (!cuda.value("built", false)) {
    out.push_back(make("cuda", "CUDA", CheckStatus::kSkip, "not built", "", cuda));
    return;
  }
  const json devices = cuda.value("devices", json::array());
  const int dev_nodes = count_cuda_devices("/dev", std::getenv("CUDA_VISIBLE_DEVICES"));
  std::string versions =
      fmt::format("runtime {}, driver {}", cuda.value("runtime", "?"),
                  cuda.contains("driver") ? cuda["driver"].get<std::string>() : "not loaded");
  if (devices.empty()) {
    const std::string error = cuda.value("error", "");
    if (dev_nodes > 0) {
      out.push_back(make("cuda", "CUDA", CheckStatus::kWarn,
                         fmt::format("{}; {} /dev/nvidia device(s) but CUDA sees none{}", versions,
                                     dev_nodes, error.empty() ? "" : " (" + error + ")"),
                         "check `nvidia-smi`; the driver must be as new as the CUDA runtime",
                         cuda));
    } else {
      out.push_back(make("cuda", "CUDA", CheckStatus::kSkip,
                         fmt::format("{}; no CUDA device visible{}", versions,
                                     error.empty() ? "" : " (" + error + ")"),
                         "", cuda));
    }
    return;
  }
  out.push_back(make("cuda", "CUDA", CheckStatus::kOk,
                     fmt::format("{}; {} device(s)", versions, devices.size()), "", cuda));
  for (const json& d : devices) {
    out.push_back(make("cuda", fmt::format("device {}", d.value("index", -1)), CheckStatus::kOk,
                       fmt::format("{}, {}", d.value("name", "?"),
                                   human_bytes(d.value("memory_bytes", uint64_t{0}))),
                       "", d));
  }
}

// --------------------------------------------------------------------------------------------
// network

struct Interface {
  std::string name;
  std::vector<std::string> addresses;
  bool up = false;
  bool loopback = false;
};

std::vector<Interface> interfaces() {
  std::vector<Interface> out;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return out;
  for (const ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    auto it = std::find_if(out.begin(), out.end(),
                           [&](const Interface& x) { return x.name == i->ifa_name; });
    if (it == out.end()) {
      out.push_back(
          {i->ifa_name, {}, (i->ifa_flags & IFF_UP) != 0, (i->ifa_flags & IFF_LOOPBACK) != 0});
      it = out.end() - 1;
    }
    if (i->ifa_addr == nullptr) continue;
    char text[INET6_ADDRSTRLEN] = {};
    if (i->ifa_addr->sa_family == AF_INET) {
      ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr, text,
                  sizeof(text));
    } else if (i->ifa_addr->sa_family == AF_INET6) {
      ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(i->ifa_addr)->sin6_addr, text,
                  sizeof(text));
    } else {
      continue;
    }
    it->addresses.emplace_back(text);
  }
  ::freeifaddrs(list);
  return out;
}

std::string first_address(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* resolved = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &resolved) != 0 || resolved == nullptr) {
    return "";
  }
  char text[NI_MAXHOST] = {};
  ::getnameinfo(resolved->ai_addr, resolved->ai_addrlen, text, sizeof(text), nullptr, 0,
                NI_NUMERICHOST);
  ::freeaddrinfo(resolved);
  return text;
}

void network_checks(std::vector<Check>& out) {
  const std::vector<Interface> ifs = interfaces();
  std::set<std::string> names;
  for (const Interface& i : ifs) {
    names.insert(i.name);
    std::string flags = i.up ? "up" : "down";
    if (i.loopback) flags += ", loopback";
    out.push_back(
        make("network", i.name, CheckStatus::kOk,
             fmt::format("{} ({})",
                         i.addresses.empty() ? "no address"
                                             : fmt::format("{}", fmt::join(i.addresses, ", ")),
                         flags),
             "", {{"addresses", i.addresses}, {"up", i.up}, {"loopback", i.loopback}}));
  }
  const std::string all = fmt::format("{}", fmt::join(names, ", "));
  std::vector<std::string> routable;
  for (const Interface& i : ifs) {
    if (i.up && !i.loopback && !i.addresses.empty()) routable.push_back(i.name);
  }
  const std::string candidates =
      routable.empty() ? "none is up" : fmt::format("{}", fmt::join(routable, ", "));
  // The runtime's rule (runtime/init.cc): the named interface, else 127.0.0.1 when the store is
  // on loopback, else the address the host name resolves to.
  std::optional<trace::env::Value> named;
  try {
    named = trace::env::lookup({"MESHRT_GLOO_IFNAME", "GLOO_SOCKET_IFNAME"});
  } catch (const std::exception&) {
  }
  if (named) {
    const bool exists = names.count(named->text) != 0;
    out.push_back(make(
        "network", "gloo interface", exists ? CheckStatus::kOk : CheckStatus::kFail,
        fmt::format("{} (from {})", named->text, named->name),
        exists ? "" : fmt::format("set {} to one of this host's interfaces: {}", named->name, all),
        {{"interface", named->text}, {"from", named->name}}));
    return;
  }
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  const std::string host_addr = first_address(host);
  const std::string host_iface = interface_with_address(host);
  const std::optional<std::string> master = getenv_nonempty("MASTER_ADDR");
  if (!master || is_loopback_host(*master)) {
    out.push_back(make("network", "gloo interface", CheckStatus::kOk,
                       fmt::format("127.0.0.1 (lo): the store is on loopback{}, as in every "
                                   "one-node meshrun job",
                                   master ? " (MASTER_ADDR=" + *master + ")" : ""),
                       "", {{"address", "127.0.0.1"}}));
  }
  // Across nodes, peers dial the host name's address unless an interface is named.
  const json data = {{"host", host}, {"address", host_addr}, {"interface", host_iface}};
  // A warning even with a remote-looking MASTER_ADDR: a one-node job still runs.
  const CheckStatus bad = CheckStatus::kWarn;
  const std::string name =
      master && !is_loopback_host(*master) ? "gloo interface" : "gloo across nodes";
  if (host_iface.empty()) {
    out.push_back(make("network", name, bad,
                       fmt::format("host name {} resolves to {}, which no interface here holds",
                                   host, host_addr.empty() ? "nothing" : host_addr),
                       fmt::format("for jobs across nodes set MESHRT_GLOO_IFNAME to a routable "
                                   "interface ({}), or meshrun --local-addr ADDR",
                                   candidates),
                       data));
  } else if (is_loopback_host(host_addr)) {
    out.push_back(make("network", name, bad,
                       fmt::format("host name {} resolves to {} on {}: other nodes cannot reach "
                                   "a rank there",
                                   host, host_addr, host_iface),
                       fmt::format("for jobs across nodes set MESHRT_GLOO_IFNAME to a routable "
                                   "interface ({}), or meshrun --local-addr ADDR",
                                   candidates),
                       data));
  } else {
    out.push_back(make("network", name, CheckStatus::kOk,
                       fmt::format("host name {} -> {} on {}", host, host_addr, host_iface), "",
                       data));
  }
}

// --------------------------------------------------------------------------------------------
// /dev/shm

void shm_checks(const std::optional<json>& info, std::vector<Check>& out) {
  // What rank 0 of a Gloo group does (runtime/backends/gloo/shm_group.cc), in small.
  const std::string name = fmt::format("/meshrt-doctor-{}", ::getpid());
  constexpr size_t kBytes = 64 * 1024;
  std::string failure;
  const int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) {
    failure = fmt::format("shm_open: {}", std::strerror(errno));
  } else {
    if (const int e = ::posix_fallocate(fd, 0, kBytes); e != 0) {
      failure = fmt::format("posix_fallocate of {}: {}", human_bytes(kBytes), std::strerror(e));
    } else if (void* p = ::mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
               p == MAP_FAILED) {
      failure = fmt::format("mmap: {}", std::strerror(errno));
    } else {
      std::memset(p, 0x5a, kBytes);
      if (static_cast<unsigned char*>(p)[kBytes - 1] != 0x5a) failure = "read back differs";
      ::munmap(p, kBytes);
    }
    ::close(fd);
    ::shm_unlink(name.c_str());
  }
  if (!failure.empty()) {
    out.push_back(make("shm", "/dev/shm", CheckStatus::kWarn,
                       fmt::format("cannot create, map and remove a segment ({})", failure),
                       "mount a writable tmpfs on /dev/shm (containers: --ipc=host or "
                       "--shm-size=1g); until then ranks on one host talk over TCP"));
  } else {
    out.push_back(
        make("shm", "/dev/shm", CheckStatus::kOk,
             fmt::format("created, mapped and removed a {} segment", human_bytes(kBytes))));
  }
  struct statvfs fs {};
  if (::statvfs("/dev/shm", &fs) != 0) {
    out.push_back(make("shm", "/dev/shm space", CheckStatus::kWarn,
                       fmt::format("statvfs: {}", std::strerror(errno)),
                       "mount a tmpfs on /dev/shm"));
    return;
  }
  const uint64_t free_bytes = static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize;
  std::optional<uint64_t> slot;
  if (info && info->contains("gloo_shm_slot_bytes")) {
    slot = (*info)["gloo_shm_slot_bytes"].get<uint64_t>();
  }
  const int ranks = resolve_nproc_per_node(
      "auto", count_cuda_devices("/dev", std::getenv("CUDA_VISIBLE_DEVICES")), count_cpus());
  out.push_back(check_shm_space(free_bytes, slot, ranks));
}

// --------------------------------------------------------------------------------------------
// MASTER_ADDR:MASTER_PORT

void rendezvous_checks(std::vector<Check>& out) {
  const std::optional<std::string> addr = getenv_nonempty("MASTER_ADDR");
  const std::optional<std::string> port_text = getenv_nonempty("MASTER_PORT");
  if (!addr && !port_text) {
    out.push_back(make("rendezvous", "MASTER_ADDR", CheckStatus::kSkip,
                       "not set: meshrun and torchrun set it for their ranks (meshrun "
                       "--standalone picks a free port on 127.0.0.1)"));
    return;
  }
  const std::string host = addr.value_or("127.0.0.1");
  int port = 29500;
  if (port_text) {
    const auto* end = port_text->data() + port_text->size();
    const auto [ptr, ec] = std::from_chars(port_text->data(), end, port);
    if (ec != std::errc() || ptr != end || port < 1 || port > 65535) {
      out.push_back(make("rendezvous", "MASTER_PORT", CheckStatus::kFail,
                         fmt::format("'{}' is not a port", *port_text),
                         "set MASTER_PORT to a free port in 1-65535 (29500 is the default)"));
      return;
    }
  }
  const std::string endpoint = fmt::format("{}:{}", host, port);
  json data = {{"host", host}, {"port", port}};
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* resolved = nullptr;
  if (const int e = ::getaddrinfo(host.c_str(), nullptr, &hints, &resolved);
      e != 0 || resolved == nullptr) {
    out.push_back(make("rendezvous", "MASTER_ADDR", CheckStatus::kFail,
                       fmt::format("{} does not resolve ({})", host, ::gai_strerror(e)),
                       "set MASTER_ADDR to node 0's host name or address, as every node sees it",
                       data));
    return;
  }
  const std::string address = first_address(host);
  data["address"] = address;
  const bool local = is_loopback_host(host) || !interface_with_address(host).empty();
  if (!local) {
    ::freeaddrinfo(resolved);
    out.push_back(make(
        "rendezvous", "MASTER_ADDR", CheckStatus::kOk,
        fmt::format("{} resolves to {}, another host (its port is checked there)", host, address),
        "", data));
    return;
  }
  // Bind as the store's server would (SO_REUSEADDR, so TIME_WAIT leftovers do not count).
  int bind_errno = 0;
  {
    UniqueFd s(::socket(resolved->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_storage sa{};
    std::memcpy(&sa, resolved->ai_addr, resolved->ai_addrlen);
    if (sa.ss_family == AF_INET) {
      reinterpret_cast<sockaddr_in*>(&sa)->sin_port = htons(static_cast<uint16_t>(port));
    } else {
      reinterpret_cast<sockaddr_in6*>(&sa)->sin6_port = htons(static_cast<uint16_t>(port));
    }
    const int one = 1;
    ::setsockopt(s.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(s.get(), reinterpret_cast<sockaddr*>(&sa), resolved->ai_addrlen) != 0) {
      bind_errno = errno;
    }
  }
  ::freeaddrinfo(resolved);
  data["in_use"] = bind_errno == EADDRINUSE;
  if (bind_errno == 0) {
    out.push_back(make(
        "rendezvous", "MASTER_PORT", CheckStatus::kOk,
        fmt::format("{} resolves to {} on this host; port {} is free to bind", host, address, port),
        "", data));
    return;
  }
  // Under torchrun's static rendezvous its agent serves the store there; under meshrun, meshrun.
  const bool agent_store = getenv_nonempty("TORCHELASTIC_USE_AGENT_STORE") == "True";
  const bool external = getenv_nonempty("MESHRT_STORE_EXTERNAL") == "1";
  if (bind_errno == EADDRINUSE && (agent_store || external)) {
    out.push_back(make(
        "rendezvous", "MASTER_PORT", CheckStatus::kOk,
        fmt::format("port {} on {} is in use, by the launcher's store ({})", port, host,
                    agent_store ? "TORCHELASTIC_USE_AGENT_STORE=True" : "MESHRT_STORE_EXTERNAL=1"),
        "", data));
    return;
  }
  out.push_back(make(
      "rendezvous", "MASTER_PORT", CheckStatus::kFail,
      bind_errno == EADDRINUSE
          ? fmt::format("port {} on {} ({}) is in use: rank 0 could not host the store there", port,
                        host, address)
          : fmt::format("cannot bind {} ({}): {}", endpoint, address, std::strerror(bind_errno)),
      bind_errno == EADDRINUSE
          ? fmt::format("stop what listens there (ss -ltnp 'sport = :{}') or set MASTER_PORT to a "
                        "free port; meshrun --standalone picks one itself",
                        port)
          : "set MASTER_ADDR to an address of this host, and MASTER_PORT to a port above 1023",
      data));
}

// --------------------------------------------------------------------------------------------
// environment

void environment_checks(const std::optional<json>& info, std::vector<Check>& out) {
  std::vector<std::string> errors;
  if (info) {
    for (const json& e : info->value("environment_errors", json::array())) {
      errors.push_back(e.get<std::string>());
    }
    const json job = info->value("job", json::object());
    if (job.value("in_job", false) && job.contains("world_size")) {
      out.push_back(make("environment", "job", CheckStatus::kOk,
                         fmt::format("rank {} of {} (from {}), backend {}, store {}:{}",
                                     job.value("rank", -1), job.value("world_size", -1),
                                     job.value("source", "?"), job.value("backend", "?"),
                                     job.value("master_addr", "?"), job.value("master_port", 0)),
                         "", job));
    }
  }
  std::vector<Check> vars = variable_checks(current_environment(), errors);
  if (vars.empty()) {
    vars.push_back(make("environment", "variables", CheckStatus::kOk,
                        "no MESHRT_* or torchrun variable set (meshrt's defaults apply)"));
  }
  out.insert(out.end(), vars.begin(), vars.end());
}

// --------------------------------------------------------------------------------------------
// self-tests

// The environment of a self-test job: the user's meshrt settings (they are part of what is
// tested), without the variables of a job this process may be in, without the interface choice,
// so that every byte stays on loopback, without a fixed CUDA device (each NCCL rank takes its
// local rank's), and without the output paths, so that a self-test never overwrites a real
// job's summaries, traces or dumps (--info checked their values).
std::vector<std::string> selftest_environment(const std::string& backend) {
  static const std::set<std::string> kDropped = {"RANK",
                                                 "WORLD_SIZE",
                                                 "LOCAL_RANK",
                                                 "LOCAL_WORLD_SIZE",
                                                 "GROUP_RANK",
                                                 "GROUP_WORLD_SIZE",
                                                 "ROLE_RANK",
                                                 "ROLE_WORLD_SIZE",
                                                 "MASTER_ADDR",
                                                 "MASTER_PORT",
                                                 "MESHRT_STORE_EXTERNAL",
                                                 "MESHRT_LAUNCHER",
                                                 "MESHRT_RUN_ID",
                                                 "MESHRT_RESTART_COUNT",
                                                 "MESHRT_BACKEND",
                                                 "MESHRT_GLOO_IFNAME",
                                                 "MESHRT_CUDA_DEVICE",
                                                 "GLOO_SOCKET_IFNAME",
                                                 "PMIX_RANK",
                                                 "SLURM_PROCID",
                                                 "SLURM_NTASKS",
                                                 "SLURM_LOCALID",
                                                 "SLURM_NTASKS_PER_NODE",
                                                 "SLURM_LAUNCH_NODE_IPADDR",
                                                 "MESHRT_COMMS_LOG",
                                                 "MESHRT_COMMS_LOG_VERBOSE",
                                                 "MESHRT_COMMS_SUMMARY",
                                                 "MESHRT_TRACE_CHROME",
                                                 "MESHRT_TRACE_JSONL",
                                                 "MESHRT_TRACE_PROMETHEUS",
                                                 "MESHRT_STRAGGLER_REPORT",
                                                 "MESHRT_SCOPE_TREE",
                                                 "MESHRT_SCOPE_TREE_HTML",
                                                 "MESHRT_DUMP_PREFIX",
                                                 "TORCH_FR_DUMP_TEMP_FILE",
                                                 "TORCH_NCCL_DEBUG_INFO_TEMP_FILE",
                                                 "MESHRT_DUMP_PIPE",
                                                 "TORCH_NCCL_DEBUG_INFO_PIPE_FILE",
                                                 "MESHRT_LOG_DIR"};
  std::vector<std::string> env;
  for (const std::string& entry : current_environment()) {
    const std::string name = entry.substr(0, entry.find('='));
    if (kDropped.count(name) != 0 || name.starts_with("TORCHELASTIC_") ||
        name.starts_with("OMPI_COMM_WORLD_")) {
      continue;
    }
    env.push_back(entry);
  }
  env.push_back("MESHRT_BACKEND=" + backend);
  return env;
}

Check run_selftest(const std::string& backend, const std::string& how,
                   const std::vector<std::string>& argv, int ranks, milliseconds timeout) {
  const CapturedRun run = run_captured(argv, selftest_environment(backend), timeout, kStopGrace);
  Check c = selftest_check(backend, how, run.output, run.status.exit_code, run.timed_out, ranks);
  if (run.timed_out) {
    c.detail = fmt::format("{}: no result within {:g} s; the job was stopped", how,
                           static_cast<double>(timeout.count()) / 1000);
  }
  return c;
}

void selftest_checks(const DoctorOptions& options, const std::string& helper,
                     const std::optional<json>& info, std::vector<Check>& out) {
  if (!options.self_test) {
    out.push_back(make("self-test", "all", CheckStatus::kSkip, "skipped: --no-self-test"));
    return;
  }
  if (helper.empty() || !info) {
    out.push_back(make("self-test", "all", CheckStatus::kFail, "no meshrt-selftest to run",
                       "install meshrt-selftest beside meshrun"));
    return;
  }
  const milliseconds timeout = options.self_test_timeout;
  // Launched as meshrun launches any job: a store on a free port of 127.0.0.1, its token, the
  // ranks' variables. No status page; a short grace when it is stopped at the bound.
  const std::vector<std::string> under_meshrun = {
      self_path(),     "--standalone", "--nproc-per-node", "2",
      "--status-port", "off",          "--grace-period",   "2",
      helper,          "--rank"};
  out.push_back(
      run_selftest("gloo", "2 processes under meshrun --standalone", under_meshrun, 2, timeout));
  out.push_back(
      run_selftest("inproc", "2 threads of one process", {helper, "--inproc"}, 2, timeout));
  if (!info->value("have_mpi", false)) {
    out.push_back(make("self-test", "mpi", CheckStatus::kSkip, "skipped: MPI not built"));
  } else if (const std::string mpirun = find_program("mpirun"); mpirun.empty()) {
    out.push_back(make("self-test", "mpi", CheckStatus::kSkip, "skipped: mpirun not found"));
  } else {
    std::vector<std::string> argv = {mpirun, "-np", "2", "--oversubscribe"};
    // OpenMPI refuses root unless told; the doctor runs where its user runs jobs.
    if (::geteuid() == 0) argv.push_back("--allow-run-as-root");
    argv.insert(argv.end(), {"--mca", "btl", "self,vader", helper, "--rank"});
    out.push_back(run_selftest("mpi", "2 processes under mpirun, shared memory", argv, 2, timeout));
  }
  const size_t devices = info->value("cuda", json::object()).value("devices", json::array()).size();
  if (!info->value("have_nccl", false)) {
    out.push_back(make("self-test", "nccl", CheckStatus::kSkip, "skipped: NCCL not built"));
  } else if (devices == 0) {
    out.push_back(make("self-test", "nccl", CheckStatus::kSkip, "skipped: no CUDA device"));
  } else if (devices == 1) {
    out.push_back(make("self-test", "nccl", CheckStatus::kSkip,
                       "skipped: 1 CUDA device; 2 NCCL ranks need a device each"));
  } else {
    out.push_back(run_selftest("nccl", "2 processes under meshrun --standalone, devices 0 and 1",
                               under_meshrun, 2, timeout));
  }
}

}  // namespace

// ----------------------------------------------------------------------------------------------
// Pure parts.

std::string_view status_name(CheckStatus status) {
  switch (status) {
    case CheckStatus::kOk:
      return "OK";
    case CheckStatus::kWarn:
      return "WARN";
    case CheckStatus::kFail:
      return "FAIL";
    case CheckStatus::kSkip:
      return "SKIP";
  }
  return "?";
}

int doctor_exit_status(const std::vector<Check>& checks) {
  return std::any_of(checks.begin(), checks.end(),
                     [](const Check& c) { return c.status == CheckStatus::kFail; })
             ? 1
             : 0;
}

std::string format_report(const std::vector<Check>& checks, const std::string& title) {
  std::vector<std::string> sections;
  for (const Check& c : checks) {
    if (std::find(sections.begin(), sections.end(), c.section) == sections.end()) {
      sections.push_back(c.section);
    }
  }
  std::string out = title + "\n";
  std::map<CheckStatus, int> counts;
  for (const std::string& section : sections) {
    out += fmt::format("\n{}\n", section);
    for (const Check& c : checks) {
      if (c.section != section) continue;
      ++counts[c.status];
      std::string line = fmt::format("  {:<4}  {:<22} {}", status_name(c.status), c.name, c.detail);
      if (!c.remedy.empty()) line += " -> " + c.remedy;
      out += line + "\n";
    }
  }
  const int failed = counts[CheckStatus::kFail];
  out += fmt::format("\n{}: {} ok, {} warning(s), {} failed, {} skipped\n",
                     failed == 0 ? "ready" : "NOT READY", counts[CheckStatus::kOk],
                     counts[CheckStatus::kWarn], failed, counts[CheckStatus::kSkip]);
  return out;
}

json report_json(const std::vector<Check>& checks) {
  json list = json::array();
  for (const Check& c : checks) {
    list.push_back({{"section", c.section},
                    {"name", c.name},
                    {"status", status_name(c.status)},
                    {"detail", c.detail},
                    {"remedy", c.remedy},
                    {"data", c.data}});
  }
  const int status = doctor_exit_status(checks);
  return {{"ok", status == 0}, {"exit_status", status}, {"checks", list}};
}

Check check_shm_space(uint64_t free_bytes, std::optional<uint64_t> slot_bytes, int ranks) {
  json data = {{"free_bytes", free_bytes}, {"ranks", ranks}};
  const std::string free_text =
      fmt::format("{} free ({} bytes)", human_bytes(free_bytes), free_bytes);
  if (!slot_bytes) {
    return make("shm", "/dev/shm space", CheckStatus::kWarn,
                free_text + "; a job's need is unknown without meshrt-selftest",
                "install meshrt-selftest beside meshrun", data);
  }
  data["slot_bytes"] = *slot_bytes;
  if (*slot_bytes == 0) {
    return make("shm", "/dev/shm space", CheckStatus::kOk,
                free_text + "; MESHRT_GLOO_SHM_SLOT_BYTES=0: Gloo uses TCP only", "", data);
  }
  const uint64_t world = 2 * static_cast<uint64_t>(ranks) * *slot_bytes;
  data["needed_bytes"] = world;
  const std::string need = fmt::format(
      "a world of {} ranks (--nproc-per-node auto) takes {} (2 x ranks x {} slot), "
      "a mesh as much again per dim",
      ranks, human_bytes(world), human_bytes(*slot_bytes));
  if (free_bytes < world) {
    return make("shm", "/dev/shm space", CheckStatus::kWarn, free_text + "; " + need,
                "enlarge /dev/shm (containers: --shm-size) or lower MESHRT_GLOO_SHM_SLOT_BYTES; "
                "until then such groups use TCP",
                data);
  }
  if (free_bytes < kShmWorldsWanted * world) {
    return make("shm", "/dev/shm space", CheckStatus::kWarn, free_text + "; " + need,
                fmt::format("a mesh of 3 dims wants {}: enlarge /dev/shm",
                            human_bytes(kShmWorldsWanted * world)),
                data);
  }
  return make("shm", "/dev/shm space", CheckStatus::kOk, free_text + "; " + need, "", data);
}

Check check_open_files(rlim_t soft, rlim_t hard) {
  const auto text = [](rlim_t v) {
    return v == RLIM_INFINITY ? std::string("unlimited") : std::to_string(v);
  };
  json data = {{"soft", soft == RLIM_INFINITY ? json(nullptr) : json(soft)},
               {"hard", hard == RLIM_INFINITY ? json(nullptr) : json(hard)}};
  const std::string detail = fmt::format("ulimit -n: soft {}, hard {}", text(soft), text(hard));
  if (soft != RLIM_INFINITY && soft < kMinOpenFiles) {
    return make("limits", "open files", CheckStatus::kWarn,
                detail + ": Gloo holds a socket per peer per communicator",
                hard == RLIM_INFINITY || hard >= kMinOpenFiles
                    ? fmt::format("raise it before the job: ulimit -n {}", text(hard))
                    : fmt::format("raise the hard limit to at least {} (limits.conf, "
                                  "systemd LimitNOFILE, docker --ulimit nofile=)",
                                  kMinOpenFiles),
                data);
  }
  return make("limits", "open files", CheckStatus::kOk, detail, "", data);
}

Check check_locked_memory(rlim_t soft, bool nccl_usable) {
  const std::string value =
      "ulimit -l: " +
      (soft == RLIM_INFINITY ? std::string("unlimited") : human_bytes(static_cast<uint64_t>(soft)));
  json data = {{"soft_bytes", soft == RLIM_INFINITY ? json(nullptr) : json(soft)}};
  if (soft == RLIM_INFINITY) {
    return make("limits", "locked memory", CheckStatus::kOk, value, "", data);
  }
  if (nccl_usable) {
    return make("limits", "locked memory", CheckStatus::kWarn,
                value + ": NCCL over InfiniBand/RoCE pins its buffers",
                "ulimit -l unlimited (docker: --ulimit memlock=-1) on hosts with RDMA NICs", data);
  }
  return make("limits", "locked memory", CheckStatus::kOk,
              value + " (matters only to NCCL and MPI over RDMA)", "", data);
}

bool is_job_variable(std::string_view name) {
  static const std::set<std::string_view> kNames = {"RANK",
                                                    "WORLD_SIZE",
                                                    "LOCAL_RANK",
                                                    "LOCAL_WORLD_SIZE",
                                                    "GROUP_RANK",
                                                    "GROUP_WORLD_SIZE",
                                                    "ROLE_RANK",
                                                    "ROLE_WORLD_SIZE",
                                                    "ROLE_NAME",
                                                    "MASTER_ADDR",
                                                    "MASTER_PORT",
                                                    "GLOO_SOCKET_IFNAME",
                                                    "PMIX_RANK",
                                                    "SLURM_PROCID",
                                                    "SLURM_NTASKS",
                                                    "SLURM_LOCALID",
                                                    "SLURM_NTASKS_PER_NODE",
                                                    "SLURM_LAUNCH_NODE_IPADDR",
                                                    "OMP_NUM_THREADS",
                                                    "CUDA_VISIBLE_DEVICES"};
  return kNames.count(name) != 0 || name.starts_with("MESHRT_") ||
         name.starts_with("TORCHELASTIC_") || name.starts_with("TORCH_FR_") ||
         name.starts_with("TORCH_NCCL_") || name.starts_with("OMPI_COMM_WORLD_");
}

std::string variable_in_error(std::string_view error, const std::vector<std::string>& names) {
  size_t best = std::string_view::npos;
  std::string found;
  for (const std::string& name : names) {
    for (size_t at = error.find(name); at != std::string_view::npos;
         at = error.find(name, at + 1)) {
      const size_t after = at + name.size();
      const bool starts = at == 0 || !(std::isalnum(static_cast<unsigned char>(error[at - 1])) ||
                                       error[at - 1] == '_');
      if (starts && after < error.size() && error[after] == '=' && at < best) {
        best = at;
        found = name;
      }
    }
  }
  return found;
}

std::vector<Check> variable_checks(const std::vector<std::string>& environ_entries,
                                   const std::vector<std::string>& errors) {
  std::map<std::string, std::string> vars;
  for (const std::string& entry : environ_entries) {
    const size_t eq = entry.find('=');
    if (eq == std::string::npos) continue;
    std::string name = entry.substr(0, eq);
    if (is_job_variable(name)) vars[name] = entry.substr(eq + 1);
  }
  std::vector<std::string> names;
  for (const auto& [name, value] : vars) names.push_back(name);
  std::map<std::string, std::string> error_of;
  std::vector<std::string> unattributed;
  for (const std::string& e : errors) {
    const std::string name = variable_in_error(e, names);
    if (name.empty()) {
      unattributed.push_back(e);
    } else if (error_of.count(name) == 0) {
      error_of[name] = e;
    }
  }
  const auto& known = trace::env::known_variables();
  std::vector<Check> out;
  for (const auto& [name, value] : vars) {
    // A secret is never printed.
    const std::string shown = name == "MESHRT_STORE_TOKEN"
                                  ? fmt::format("(set, {} characters)", value.size())
                                  : "'" + value + "'";
    json data = {{"variable", name}};
    if (name != "MESHRT_STORE_TOKEN") data["value"] = value;
    if (auto e = error_of.find(name); e != error_of.end()) {
      data["error"] = e->second;
      out.push_back(make("environment", name, CheckStatus::kFail, e->second,
                         fmt::format("set {} to a valid value or unset it", name), data));
      continue;
    }
    if (name.starts_with("MESHRT_") && std::find(known.begin(), known.end(), name) == known.end()) {
      const std::string closest(trace::env::closest_known_variable(name));
      data["closest"] = closest;
      out.push_back(
          make("environment", name, CheckStatus::kWarn,
               fmt::format("{}: not a variable meshrt reads, so it changes nothing", shown),
               fmt::format("did you mean {}? rename it, or unset {}", closest, name), data));
      continue;
    }
    out.push_back(make("environment", name, CheckStatus::kOk, shown, "", data));
  }
  for (const std::string& e : unattributed) {
    out.push_back(make("environment", "runtime", CheckStatus::kFail, e,
                       "fix the variable the error names, or unset it", {{"error", e}}));
  }
  return out;
}

std::vector<json> selftest_results(const std::string& output) {
  std::vector<json> results;
  size_t at = 0;
  while ((at = output.find(kResultTag, at)) != std::string::npos) {
    at += std::strlen(kResultTag);
    const size_t end = output.find('\n', at);
    json j =
        json::parse(output.substr(at, end == std::string::npos ? end : end - at), nullptr, false);
    if (!j.is_discarded() && j.is_object()) results.push_back(std::move(j));
    if (end == std::string::npos) break;
    at = end;
  }
  return results;
}

Check selftest_check(const std::string& backend, const std::string& how, const std::string& output,
                     int exit_code, bool timed_out, int ranks) {
  const std::vector<json> results = selftest_results(output);
  json data = {{"how", how}, {"exit_code", exit_code}, {"ranks", json::array()}};
  for (const json& r : results) data["ranks"].push_back(r);
  const std::string remedy =
      "the error names the cause; `meshrun doctor --json` has the job's whole output";
  if (timed_out) {
    data["output_tail"] = tail(output, 4000);
    return make("self-test", backend, CheckStatus::kFail, "no result in time; the job was stopped",
                "rerun with MESHRT_LOG_LEVEL=info to see where it stops (a peer that never "
                "connects: a firewall on loopback?)",
                data);
  }
  for (const json& r : results) {
    if (!r.value("ok", false)) {
      data["output_tail"] = tail(output, 4000);
      return make("self-test", backend, CheckStatus::kFail,
                  fmt::format("{}: {}", how, r.value("error", "failed")), remedy, data);
    }
  }
  int ok = 0;
  const json* rank0 = nullptr;
  for (const json& r : results) {
    ++ok;
    if (r.value("rank", -1) == 0 && rank0 == nullptr) rank0 = &r;
  }
  if (exit_code != 0 || ok < ranks || rank0 == nullptr) {
    data["output_tail"] = tail(output, 4000);
    return make("self-test", backend, CheckStatus::kFail,
                fmt::format("{}: exit status {}, {} of {} ranks reported; last line: {}", how,
                            exit_code, ok, ranks, last_line(output)),
                remedy, data);
  }
  const json& r = *rank0;
  data["latency_us"] = r.value("latency_us", 0.0);
  data["busbw_gbps"] = r.value("busbw_gbps", 0.0);
  return make("self-test", backend, CheckStatus::kOk,
              fmt::format("{}: all_reduce checked element-wise; {} in {}, {} in {} (busbw {:.2f} "
                          "GB/s); {}",
                          how, human_bytes(r.value("latency_bytes", uint64_t{0})),
                          human_us(r.value("latency_us", 0.0)),
                          human_bytes(r.value("busbw_bytes", uint64_t{0})),
                          human_us(r.value("busbw_time_us", 0.0)), r.value("busbw_gbps", 0.0),
                          short_version(r.value("backend_version", backend))),
              "", data);
}

// ----------------------------------------------------------------------------------------------

int run_doctor(const DoctorOptions& options) {
  std::vector<Check> checks;
  const std::string helper = find_helper();
  std::string why;
  std::optional<json> info;
  if (!helper.empty()) info = helper_info(helper, why);
  build_checks(helper, info, why, checks);
  network_checks(checks);
  shm_checks(info, checks);
  rlimit nofile{}, memlock{};
  ::getrlimit(RLIMIT_NOFILE, &nofile);
  ::getrlimit(RLIMIT_MEMLOCK, &memlock);
  checks.push_back(check_open_files(nofile.rlim_cur, nofile.rlim_max));
  const bool nccl_usable =
      info && info->value("have_nccl", false) &&
      !info->value("cuda", json::object()).value("devices", json::array()).empty();
  checks.push_back(check_locked_memory(memlock.rlim_cur, nccl_usable));
  rendezvous_checks(checks);
  environment_checks(info, checks);
  selftest_checks(options, helper, info, checks);

  if (options.json) {
    std::printf("%s\n", report_json(checks).dump(2).c_str());
  } else {
    char host[256] = {};
    ::gethostname(host, sizeof(host) - 1);
    std::fputs(
        format_report(checks, fmt::format("meshrun doctor: meshrt {} on {}", MESHRT_VERSION, host))
            .c_str(),
        stdout);
  }
  return doctor_exit_status(checks);
}

}  // namespace meshrt::launcher
