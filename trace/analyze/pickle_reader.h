// A safe reader for PyTorch Flight Recorder pickle dumps. It understands only the opcodes that
// encode plain data (dict, list, tuple, str, int, float, bool, None, the memo, protocol 2-5
// framing) and rejects everything else (GLOBAL, REDUCE, BUILD, ...) before acting on it, so a
// hostile file can never import or call anything: unpickling with Python would run its code.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <span>
#include <stdexcept>

namespace meshrt::trace {

// A pickle that is not plain data, truncated or malformed; what() names the opcode and offset.
class PickleError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Decodes one pickle. Tuples become arrays; dict keys must be strings. Throws PickleError.
nlohmann::json read_pickle(std::span<const std::byte> data);
// The same value as compact JSON text, without building a DOM (what the dump reader parses;
// several times faster than read_pickle(data).dump()). Infinite and NaN floats become null.
std::string pickle_to_json_text(std::span<const std::byte> data);

}  // namespace meshrt::trace
