// The words every export and the comm logger use for the same ops, decided in one place so that a
// Prometheus series, a Chrome trace slice, a JSON line and a comm-logger row of one run can be
// joined: the message-size bucket and the mesh dim an op is reported under.
#pragma once

#include <cstdint>
#include <string>

#include "trace/op_record.h"

namespace meshrt::trace {

// The message-size bucket of `bytes`: the largest power of two <= bytes (0 for 0). Ops are
// grouped by it; reports show the ops' actual sizes.
uint64_t size_bucket(uint64_t bytes);

// The bucket of `bytes` as the half-open range [bucket, 2 x bucket) in 1024-based units, the unit
// written once when both ends share it: 0 -> "0B", 1 -> "1-2B", 700 -> "512B-1KiB",
// 4000 -> "2-4KiB", 3 MiB -> "2-4MiB".
std::string size_bucket_label(uint64_t bytes);

// The mesh dim `comm`'s ops are reported under: its mesh dim, or outside any mesh its name; the
// default group is named "world", so its ops read "world" (a split outside a mesh, e.g.
// "world/split1.0", reads as its name).
const std::string& mesh_dim_label(const CommInfo& comm);

}  // namespace meshrt::trace
