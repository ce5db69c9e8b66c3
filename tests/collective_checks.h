// Runs every collective x dtype x reduce op on a communicator and checks each output element
// against values computed independently here. Shared by the in-process tests (threads) and the
// Gloo worker (processes), so both backends meet the same expectations.
#pragma once

#include <string>
#include <vector>

#include "runtime/communicator.h"

namespace meshrt::testing {

// Returns one line per wrong element or failed call; empty when all is right. Every rank of
// `comm` must call it at the same time.
std::vector<std::string> check_all_collectives(Communicator& comm);

// Point-to-point checks: send/recv pairs, a batched ring exchange, and split communicators.
std::vector<std::string> check_p2p_and_split(Communicator& comm);

// A worker process's exit status: prints each failure as "FAIL <line>" on stderr; 0 when none.
int report_failures(const std::vector<std::string>& failures);

}  // namespace meshrt::testing
