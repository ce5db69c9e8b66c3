// Collectives through a slot exchange (slot_exchange.h), written once for any transport that
// offers one: the op goes in exchanges of one chunk each; every rank writes its part of the chunk
// to its slot, waits for the others', then reads what it needs. Reductions fold the slots in rank
// order, so every rank computes the same bits.
#pragma once

#include <chrono>

#include "runtime/collectives/slot_exchange.h"
#include "runtime/op.h"

namespace meshrt {

// Runs `op` (any collective: can_run(Algorithm::kSlots, ...)) through `slots`, whose rank and
// size are the op's group's. Every exchange carries `stamp`. Throws the exchange's Error;
// kInvalidArgument on every rank alike when an uneven all_to_all's splits disagree; kInternal
// when a slot holds under one element per rank.
void run_through_slots(const Op& op, SlotExchange& slots, const SlotStamp& stamp,
                       std::chrono::steady_clock::time_point deadline);

}  // namespace meshrt
