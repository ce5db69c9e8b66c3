#include "trace/analyze/analyzer.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <utility>

#include "trace/analyze/explain.h"
#include "trace/analyze/format.h"
#include "trace/analyze/match.h"
#include "trace/dump_format.h"

namespace meshrt::trace {

std::string_view finding_kind_name(FindingKind kind) {
  switch (kind) {
    case FindingKind::kNotJoined:
      return "not_joined";
    case FindingKind::kTypeMismatch:
      return "type_mismatch";
    case FindingKind::kSizeMismatch:
      return "size_mismatch";
    case FindingKind::kDtypeMismatch:
      return "dtype_mismatch";
    case FindingKind::kStateMismatch:
      return "state_mismatch";
    case FindingKind::kNumelMismatch:
      return "numel_mismatch";
    case FindingKind::kMissingDump:
      return "missing_dump";
  }
  return "";
}

void check_versions(const std::vector<RankDump>& dumps) {
  // The analyzer is built with the recorder: it reads the dump version the recorder writes.
  constexpr int64_t kReadable = dump_format::kMeshrtDumpVersion;
  std::map<std::string, std::vector<int>> by_version;
  for (const RankDump& d : dumps) {
    const std::string& v = d.version;
    const size_t dot = v.find('.');
    auto digits = [](std::string_view s) {
      return !s.empty() && s.size() <= 9 &&
             std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
    };
    if (dot == std::string::npos || !digits(std::string_view(v).substr(0, dot)) ||
        !digits(std::string_view(v).substr(dot + 1))) {
      throw InputError(fmt::format("'{}': version '{}' is not '<major>.<minor>'", d.path, v));
    }
    if (d.meshrt_dump_version && *d.meshrt_dump_version > kReadable) {
      throw InputError(fmt::format(
          "'{}': meshrt_dump_version {} is newer than this meshtrace reads ({}); use a newer "
          "meshtrace",
          d.path, *d.meshrt_dump_version, kReadable));
    }
    const std::string key =
        d.meshrt_dump_version
            ? fmt::format("version {} (meshrt_dump_version {})", v, *d.meshrt_dump_version)
            : fmt::format("version {} (no meshrt_dump_version)", v);
    by_version[key].push_back(d.rank);
  }
  if (by_version.size() > 1) {
    std::vector<std::string> parts;
    for (const auto& [key, ranks] : by_version) {
      parts.push_back(fmt::format("{} from {}", key, ranks_phrase(ranks)));
    }
    throw InputError(fmt::format(
        "the dumps have different versions: {}; they cannot be matched (dumps of one run all "
        "have the same)",
        fmt::join(parts, ", ")));
  }
}

namespace {

// One job has one world: a dump claiming another (a crafted or foreign file) would make the
// analyzer expect dumps from ranks that never existed.
void check_world_sizes(const std::vector<RankDump>& dumps) {
  const RankDump* first = nullptr;
  for (const RankDump& d : dumps) {
    if (!d.world_size) continue;
    if (first == nullptr) {
      first = &d;
    } else if (*d.world_size != *first->world_size) {
      throw InputError(fmt::format("'{}' says world_size {} but '{}' says {}", d.path,
                                   *d.world_size, first->path, *first->world_size));
    }
  }
}

}  // namespace

Report analyze(std::vector<RankDump> dumps, const AnalyzeOptions& options) {
  if (dumps.empty()) throw InputError("no dumps to analyze");
  check_versions(dumps);
  check_world_sizes(dumps);
  return analysis::explain(analysis::match(std::move(dumps), options));
}

std::vector<std::string> keep_job_files(std::vector<DumpFile>& files, const JobFiles& job) {
  std::vector<std::string> left_out;
  std::erase_if(files, [&](const DumpFile& f) {
    std::error_code ec;
    if (job.world_size > 0 && f.rank >= job.world_size) {
      left_out.push_back(fmt::format("{}: rank {} is outside this job's world of {}",
                                     f.path.string(), f.rank, job.world_size));
    } else if (const auto t = std::filesystem::last_write_time(f.path, ec);
               !ec && t < job.written_since) {
      left_out.push_back(fmt::format("{}: last written before this job began", f.path.string()));
    } else {
      return false;
    }
    return true;
  });
  return left_out;
}

Report analyze_directory(const std::filesystem::path& dir, const AnalyzeOptions& options) {
  return analyze(read_dumps(find_dump_files(dir, options.prefix), options.threads, options.limits),
                 options);
}

}  // namespace meshrt::trace
