#include "trace/jsonl_export.h"

#include <nlohmann/json.hpp>

#include "trace/bandwidth.h"
#include "trace/labels.h"

namespace meshrt::trace {

void append_jsonl(const OpRecord& r, std::string& out) {
  using Json = nlohmann::ordered_json;
  const CommInfo empty;
  const CommInfo& c = r.comm ? *r.comm : empty;
  const int n = static_cast<int>(c.global_ranks.size());
  // An op that failed before it started ran for no time.
  const double us = run_ns(r) / 1e3;
  const ScopeNode* scope = r.scope ? r.scope : root_scope();
  const Json line = {{"rank", c.global_rank},
                     {"comm", c.name},
                     {"comm_uid", c.uid},
                     {"store_key", c.store_key},
                     {"description", c.description},
                     {"mesh_dim", mesh_dim_label(c)},
                     {"backend", c.backend},
                     {"group_size", n},
                     {"group_rank", c.rank},
                     {"op", r.op},
                     {"dtype", r.dtype},
                     {"reduce_op", r.reduce_op},
                     {"algorithm", r.algorithm},
                     {"collective_seq", r.collective_seq},
                     {"p2p_seq", r.p2p_seq},
                     {"op_seq", r.op_seq},
                     {"is_p2p", r.is_p2p},
                     {"input_count", r.input_count},
                     {"output_count", r.output_count},
                     {"bytes", r.bytes},
                     {"size_bucket", size_bucket_label(r.bytes)},
                     {"root_or_peer", r.root_or_peer},
                     {"timeout_ms", r.timeout_ms},
                     {"created_wall_ns", r.created_wall_ns},
                     {"enqueue_ns", r.enqueue_ns},
                     {"start_ns", r.start_ns},
                     {"end_ns", r.end_ns},
                     {"state", op_state_name(r.state)},
                     {"duration_us", us},
                     {"algbw_gbps", algbw_gbps(r.bytes, us)},
                     {"busbw_gbps", busbw_gbps(r.kind, n, r.bytes, us)},
                     {"scope", scope->path},
                     {"phase", phase_name(scope->phase)},
                     {"setup", r.setup},
                     {"thread_id", r.thread_id},
                     {"caller_file", r.caller_file},
                     {"caller_line", r.caller_line}};
  out += line.dump(-1, ' ', false, Json::error_handler_t::replace);
  out += '\n';
}

}  // namespace meshrt::trace
