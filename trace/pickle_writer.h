// Writes plain data as a Python pickle (protocol 2) with only the opcodes PyTorch's Flight
// Recorder dumps use, so Python's pickle and PyTorch's torchfrtrace read meshrt dumps unchanged.
#pragma once

#include <nlohmann/json.hpp>
#include <set>
#include <string>

namespace meshrt::trace {

// Encodes `value`: objects as dicts, arrays as lists (as tuples under a key in `tuple_keys`),
// strings (invalid UTF-8 replaced by U+FFFD), integers, doubles, booleans and null as their
// Python equivalents.
std::string to_pickle(const nlohmann::ordered_json& value, const std::set<std::string>& tuple_keys);

}  // namespace meshrt::trace
