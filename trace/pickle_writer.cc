#include "trace/pickle_writer.h"

#include <bit>
#include <cstdint>
#include <cstring>

#include "trace/utf8.h"

namespace meshrt::trace {
namespace {

class Encoder {
 public:
  explicit Encoder(const std::set<std::string>& tuple_keys) : tuple_keys_(tuple_keys) {}

  void value(const nlohmann::ordered_json& v, bool as_tuple = false) {
    switch (v.type()) {
      case nlohmann::json::value_t::null:
        out_ += 'N';
        break;
      case nlohmann::json::value_t::boolean:
        out_ += v.get<bool>() ? '\x88' : '\x89';
        break;
      case nlohmann::json::value_t::number_unsigned:
      case nlohmann::json::value_t::number_integer:
        integer(v.get<int64_t>());
        break;
      case nlohmann::json::value_t::number_float:
        binfloat(v.get<double>());
        break;
      case nlohmann::json::value_t::string:
        string(v.get_ref<const std::string&>());
        break;
      case nlohmann::json::value_t::array:
        if (as_tuple && v.size() == 2) {
          value(v[0]);
          value(v[1]);
          out_ += '\x86';  // TUPLE2
          break;
        }
        out_ += as_tuple ? "(" : "](";  // MARK ... TUPLE, or EMPTY_LIST MARK ... APPENDS
        for (const auto& e : v) value(e);
        out_ += as_tuple ? "t" : "e";
        break;
      case nlohmann::json::value_t::object:
        out_ += "}(";  // EMPTY_DICT MARK ... SETITEMS
        for (const auto& [k, e] : v.items()) {
          string(k);
          value(e, tuple_keys_.contains(k));
        }
        out_ += 'u';
        break;
      default:
        out_ += 'N';
    }
  }

  std::string finish() { return "\x80\x02" + out_ + "."; }

 private:
  void little_endian(uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) out_ += static_cast<char>((v >> (8 * i)) & 0xff);
  }
  // BININT1 and BININT2 are unsigned; BININT is a signed 32-bit; LONG1 holds the rest, 8 bytes as
  // PyTorch writes timestamps.
  void integer(int64_t v) {
    if (v >= 0 && v < 256) {
      out_ += 'K';
      little_endian(static_cast<uint64_t>(v), 1);
    } else if (v >= 0 && v < 65536) {
      out_ += 'M';
      little_endian(static_cast<uint64_t>(v), 2);
    } else if (v >= INT32_MIN && v <= INT32_MAX) {
      out_ += 'J';
      little_endian(static_cast<uint32_t>(static_cast<int32_t>(v)), 4);
    } else {
      out_ += "\x8a\x08";
      little_endian(static_cast<uint64_t>(v), 8);
    }
  }
  void binfloat(double d) {  // Big-endian, unlike the integers.
    out_ += 'G';
    const auto bits = std::bit_cast<uint64_t>(d);
    for (int i = 7; i >= 0; --i) out_ += static_cast<char>((bits >> (8 * i)) & 0xff);
  }
  // Python decodes BINUNICODE strictly: invalid UTF-8 (from user names, paths, library error
  // texts) is replaced by U+FFFD rather than making the whole dump unreadable.
  void string(const std::string& s) {
    const std::string& valid = is_utf8(s) ? s : (scratch_ = repaired_utf8(s));
    out_ += 'X';
    little_endian(valid.size(), 4);
    out_ += valid;
  }

  const std::set<std::string>& tuple_keys_;
  std::string out_;
  std::string scratch_;
};

}  // namespace

std::string to_pickle(const nlohmann::ordered_json& value,
                      const std::set<std::string>& tuple_keys) {
  Encoder e(tuple_keys);
  e.value(value);
  return e.finish();
}

}  // namespace meshrt::trace
