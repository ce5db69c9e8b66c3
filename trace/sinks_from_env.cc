#include "trace/sinks_from_env.h"

#include <mutex>
#include <sstream>

#include "trace/comm_logger.h"
#include "trace/env.h"
#include "trace/exports.h"
#include "trace/logging.h"
#include "trace/scope_tree.h"
#include "trace/straggler.h"

namespace meshrt::trace {
namespace {

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

CommLoggerOptions comm_logger_options() {
  CommLoggerOptions o;
  o.summary_path = env::get({"MESHRT_COMMS_SUMMARY"}).value_or("");
  o.print_at_exit = env::get_flag({"MESHRT_COMMS_LOG"});
  o.enabled = o.print_at_exit || !o.summary_path.empty();
  o.verbose = env::get_flag({"MESHRT_COMMS_LOG_VERBOSE"});
  if (auto ops = env::get({"MESHRT_COMMS_LOG_OPS"})) o.ops = split_list(*ops);
  return o;
}

ExportOptions export_options() {
  ExportOptions o;
  o.chrome_path = env::get({"MESHRT_TRACE_CHROME"}).value_or("");
  o.jsonl_path = env::get({"MESHRT_TRACE_JSONL"}).value_or("");
  o.prometheus_path = env::get({"MESHRT_TRACE_PROMETHEUS"}).value_or("");
  o.enabled = !o.chrome_path.empty() || !o.jsonl_path.empty() || !o.prometheus_path.empty();
  return o;
}

StragglerOptions straggler_options() {
  StragglerOptions o;
  o.report_path = env::get({"MESHRT_STRAGGLER_REPORT"}).value_or("");
  o.enabled = !o.report_path.empty();
  o.top_k = static_cast<size_t>(env::get_int({"MESHRT_STRAGGLER_TOPK"}, 1).value_or(o.top_k));
  o.ops_per_rank = static_cast<size_t>(
      env::get_int({"MESHRT_STRAGGLER_BUFFER_SIZE"}, 1).value_or(o.ops_per_rank));
  o.print_table = env::get_flag({"MESHRT_COMMS_LOG"});
  return o;
}

}  // namespace

void install_sinks_from_env() {
  static std::once_flag once;
  std::call_once(once, [] {
    // Every variable is read before any sink changes: a bad one leaves all of them as they were.
    const CommLoggerOptions logger = comm_logger_options();
    const ExportOptions exports = export_options();
    const StragglerOptions stragglers = straggler_options();
    const auto scope_tree = env::get({"MESHRT_SCOPE_TREE"});
    const auto scope_tree_html = env::get({"MESHRT_SCOPE_TREE_HTML"});
    // Verbose comm lines are the logger's info lines.
    if (logger.verbose && log().level() > spdlog::level::info) log().set_level(spdlog::level::info);
    if (logger.enabled) CommLogger::instance().configure(logger);
    if (exports.enabled) Exports::instance().configure(exports);
    if (stragglers.enabled) StragglerSink::instance().configure(stragglers);
    if (scope_tree) ScopeTree::instance().write_at_exit(*scope_tree);
    if (scope_tree_html) ScopeTree::instance().write_html_at_exit(*scope_tree_html);
  });
}

}  // namespace meshrt::trace
