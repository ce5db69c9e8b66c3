// The small Gloo collectives a communicator runs while it sets itself up (before its first op).
#pragma once

#include <gloo/allgather.h>
#include <gloo/context.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

namespace meshrt {

// Every rank's `mine`, by rank, on Gloo slot `tag`. T must be trivially copyable.
template <typename T>
std::vector<T> gloo_all_gather_value(const std::shared_ptr<gloo::Context>& context, T mine,
                                     uint32_t tag, std::chrono::milliseconds timeout) {
  std::vector<T> all(static_cast<size_t>(context->size));
  gloo::AllgatherOptions o(context);
  o.setInput(&mine, 1);
  o.setOutput(all.data(), all.size());
  o.setTag(tag);
  o.setTimeout(timeout);
  gloo::allgather(o);
  return all;
}

}  // namespace meshrt
