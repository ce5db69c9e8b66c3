// Explanation, the analyzer's second step: who is to blame for each draft finding of match.h
// (a not_joined blames the issuers when they are a minority and the missing ranks have nothing
// pending, else the missing ranks), waits followed across groups to the root cause (wait cycles
// are deadlocks), later mismatches of a group marked as consequences of its first one, and where
// the ranks of each root finding parted, with call sites.
#pragma once

#include "trace/analyze/analyzer.h"
#include "trace/analyze/match.h"

namespace meshrt::trace::analysis {

// The report of a matched job: its findings explained, root causes first.
Report explain(Matching matching);

}  // namespace meshrt::trace::analysis
