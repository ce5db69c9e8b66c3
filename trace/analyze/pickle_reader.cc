#include "trace/analyze/pickle_reader.h"

#include <fmt/format.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include "trace/utf8.h"

namespace meshrt::trace {
namespace {

// Python's names for every opcode, so that a rejected one is named as pickletools names it.
std::string_view opcode_name(uint8_t op) {
  switch (op) {
    case '(':
      return "MARK";
    case '.':
      return "STOP";
    case '0':
      return "POP";
    case '1':
      return "POP_MARK";
    case '2':
      return "DUP";
    case 'F':
      return "FLOAT";
    case 'I':
      return "INT";
    case 'J':
      return "BININT";
    case 'K':
      return "BININT1";
    case 'L':
      return "LONG";
    case 'M':
      return "BININT2";
    case 'N':
      return "NONE";
    case 'P':
      return "PERSID";
    case 'Q':
      return "BINPERSID";
    case 'R':
      return "REDUCE";
    case 'S':
      return "STRING";
    case 'T':
      return "BINSTRING";
    case 'U':
      return "SHORT_BINSTRING";
    case 'V':
      return "UNICODE";
    case 'X':
      return "BINUNICODE";
    case 'a':
      return "APPEND";
    case 'b':
      return "BUILD";
    case 'c':
      return "GLOBAL";
    case 'd':
      return "DICT";
    case '}':
      return "EMPTY_DICT";
    case 'e':
      return "APPENDS";
    case 'g':
      return "GET";
    case 'h':
      return "BINGET";
    case 'i':
      return "INST";
    case 'j':
      return "LONG_BINGET";
    case 'l':
      return "LIST";
    case ']':
      return "EMPTY_LIST";
    case 'o':
      return "OBJ";
    case 'p':
      return "PUT";
    case 'q':
      return "BINPUT";
    case 'r':
      return "LONG_BINPUT";
    case 's':
      return "SETITEM";
    case 't':
      return "TUPLE";
    case ')':
      return "EMPTY_TUPLE";
    case 'u':
      return "SETITEMS";
    case 'G':
      return "BINFLOAT";
    case 0x80:
      return "PROTO";
    case 0x81:
      return "NEWOBJ";
    case 0x82:
      return "EXT1";
    case 0x83:
      return "EXT2";
    case 0x84:
      return "EXT4";
    case 0x85:
      return "TUPLE1";
    case 0x86:
      return "TUPLE2";
    case 0x87:
      return "TUPLE3";
    case 0x88:
      return "NEWTRUE";
    case 0x89:
      return "NEWFALSE";
    case 0x8a:
      return "LONG1";
    case 0x8b:
      return "LONG4";
    case 'B':
      return "BINBYTES";
    case 'C':
      return "SHORT_BINBYTES";
    case 0x8c:
      return "SHORT_BINUNICODE";
    case 0x8d:
      return "BINUNICODE8";
    case 0x8e:
      return "BINBYTES8";
    case 0x8f:
      return "EMPTY_SET";
    case 0x90:
      return "ADDITEMS";
    case 0x91:
      return "FROZENSET";
    case 0x92:
      return "NEWOBJ_EX";
    case 0x93:
      return "STACK_GLOBAL";
    case 0x94:
      return "MEMOIZE";
    case 0x95:
      return "FRAME";
    case 0x96:
      return "BYTEARRAY8";
    case 0x97:
      return "NEXT_BUFFER";
    case 0x98:
      return "READONLY_BUFFER";
    default:
      return {};
  }
}

// Values live in an arena and the stack and memo hold indices, because pickle's memo shares
// objects: a list memoized when empty and filled later must be seen filled through the memo.
// A node is 16 bytes (a dump has ~60 per entry): strings stay in the pickle's bytes, and only
// containers own a vector of items.
struct Node {
  enum class Kind : uint8_t { kNone, kBool, kInt, kFloat, kStr, kList, kTuple, kDict };
  Kind kind = Kind::kNone;
  bool boolean = false;
  uint32_t length = 0;  // kStr: bytes.
  // kInt: the value; kFloat: its bits; kStr: offset in the pickle; containers: index of their
  // items (a dict's keys and values alternate).
  uint64_t value = 0;
};
static_assert(sizeof(Node) == 16);

// Deeper than any dump; bounds the conversion's recursion (and self-containing structures).
constexpr int kMaxDepth = 256;

class Reader {
 public:
  explicit Reader(std::span<const std::byte> data) : data_(data) {}

  // Runs the opcodes up to STOP; returns the root value.
  uint32_t decode() {
    while (true) {
      op_offset_ = pos_;
      const uint8_t op = u8();
      if (op == '.') break;
      step(op);
    }
    if (pos_ != data_.size()) fail(fmt::format("{} bytes after STOP", data_.size() - pos_));
    if (stack_.size() != 1 || !marks_.empty()) fail("STOP with a malformed stack");
    budget_ = 4 * data_.size() + 4096;
    const uint32_t root = stack_.back();
    // The conversion needs neither; a pickle of many small items left them as large as the tree.
    std::vector<uint32_t>().swap(stack_);
    std::vector<uint32_t>().swap(memo_);
    return root;
  }

  nlohmann::json to_json(uint32_t index, int depth) {
    const Node& n = visit(index, depth);
    switch (n.kind) {
      case Node::Kind::kNone:
        return nullptr;
      case Node::Kind::kBool:
        return n.boolean;
      case Node::Kind::kInt:
        return static_cast<int64_t>(n.value);
      case Node::Kind::kFloat:
        return std::bit_cast<double>(n.value);
      case Node::Kind::kStr:
        return std::string(text(n));
      case Node::Kind::kList:
      case Node::Kind::kTuple: {
        auto out = nlohmann::json::array();
        for (const uint32_t item : items_of(n)) out.push_back(to_json(item, depth + 1));
        return out;
      }
      case Node::Kind::kDict: {
        auto out = nlohmann::json::object();
        const std::vector<uint32_t>& kv = items_of(n);
        for (size_t i = 0; i < kv.size(); i += 2) {
          out[std::string(text(nodes_[kv[i]]))] = to_json(kv[i + 1], depth + 1);
        }
        return out;
      }
    }
    return nullptr;
  }

  void to_text(uint32_t index, int depth, std::string& out) {
    const Node& n = visit(index, depth);
    switch (n.kind) {
      case Node::Kind::kNone:
        out += "null";
        return;
      case Node::Kind::kBool:
        out += n.boolean ? "true" : "false";
        return;
      case Node::Kind::kInt:
        fmt::format_to(std::back_inserter(out), "{}", static_cast<int64_t>(n.value));
        return;
      case Node::Kind::kFloat:
        // JSON has no infinities or NaN.
        if (const double real = std::bit_cast<double>(n.value); std::isfinite(real)) {
          fmt::format_to(std::back_inserter(out), "{}", real);
        } else {
          out += "null";
        }
        return;
      case Node::Kind::kStr:
        append_json_string(text(n), out);
        return;
      case Node::Kind::kList:
      case Node::Kind::kTuple: {
        out += '[';
        const std::vector<uint32_t>& items = items_of(n);
        for (size_t i = 0; i < items.size(); ++i) {
          if (i > 0) out += ',';
          to_text(items[i], depth + 1, out);
        }
        out += ']';
        return;
      }
      case Node::Kind::kDict: {
        out += '{';
        const std::vector<uint32_t>& kv = items_of(n);
        for (size_t i = 0; i < kv.size(); i += 2) {
          if (i > 0) out += ',';
          append_json_string(text(nodes_[kv[i]]), out);
          out += ':';
          to_text(kv[i + 1], depth + 1, out);
        }
        out += '}';
        return;
      }
    }
  }

 private:
  [[noreturn]] void fail(std::string_view what) const {
    throw PickleError(fmt::format("pickle: {} at offset {}", what, op_offset_));
  }

  void need(size_t n) const {
    if (data_.size() - pos_ < n) {
      fail(fmt::format("truncated: {} needs {} more bytes, {} left",
                       opcode_name(std::to_integer<uint8_t>(data_[op_offset_])), n,
                       data_.size() - pos_));
    }
  }
  uint8_t u8() {
    if (pos_ >= data_.size()) {
      op_offset_ = pos_;
      fail("truncated: the pickle ends before STOP");
    }
    return std::to_integer<uint8_t>(data_[pos_++]);
  }
  // Little-endian unsigned integer of n bytes.
  uint64_t le(size_t n) {
    need(n);
    uint64_t v = 0;
    for (size_t i = 0; i < n; ++i) v |= std::to_integer<uint64_t>(data_[pos_ + i]) << (8 * i);
    pos_ += n;
    return v;
  }

  std::string_view text(const Node& n) const {
    return {reinterpret_cast<const char*>(data_.data() + n.value), n.length};
  }

  uint32_t add(Node node) {
    nodes_.push_back(node);
    return static_cast<uint32_t>(nodes_.size() - 1);
  }
  void push(Node node) { stack_.push_back(add(node)); }
  void push_int(int64_t v) {
    const Node node{.kind = Node::Kind::kInt, .value = static_cast<uint64_t>(v)};
    if (v >= 0 && v < kSharedInts) {
      stack_.push_back(shared(static_cast<size_t>(v), node));
    } else {
      push(node);
    }
  }
  // One node for every occurrence of an immutable value (None, a bool, a small int): a pickle
  // of one- or two-byte opcodes would otherwise cost a 16-byte node per opcode. Sharing is safe
  // since nothing modifies such a node (only containers change) and the memo keeps indices.
  uint32_t shared(size_t slot, const Node& node) {
    if (shared_.empty()) shared_.assign(kSharedInts + 3, kNoValue);
    if (shared_[slot] == kNoValue) shared_[slot] = add(node);
    return shared_[slot];
  }
  // A new container node owning `items`.
  // An empty one gets its vector when its first item comes: a pickle of empty containers (one
  // byte each) would otherwise cost 40 bytes per byte before any check could refuse it.
  void push_container(Node::Kind kind, std::vector<uint32_t> items = {}) {
    if (items.empty()) {
      push(Node{.kind = kind, .value = kNoItems});
      return;
    }
    items_.push_back(std::move(items));
    push(Node{.kind = kind, .value = items_.size() - 1});
  }
  uint32_t pop() {
    if (stack_.size() <= (marks_.empty() ? 0 : marks_.back())) fail("stack underflow");
    const uint32_t v = stack_.back();
    stack_.pop_back();
    return v;
  }
  uint32_t top() const {
    if (stack_.size() <= (marks_.empty() ? 0 : marks_.back())) fail("stack underflow");
    return stack_.back();
  }
  // Pops everything above the last MARK and the MARK itself.
  std::vector<uint32_t> pop_mark() {
    if (marks_.empty()) fail("no MARK");
    const size_t mark = marks_.back();
    marks_.pop_back();
    std::vector<uint32_t> items(stack_.begin() + static_cast<ptrdiff_t>(mark), stack_.end());
    stack_.resize(mark);
    return items;
  }
  // The items of container `index`, which must be of `kind`.
  std::vector<uint32_t>& container(uint32_t index, Node::Kind kind) {
    Node& n = nodes_[index];
    if (n.kind != kind)
      fail(kind == Node::Kind::kList ? "append to a non-list" : "set item on a non-dict");
    if (n.value == kNoItems) {
      n.value = items_.size();
      items_.emplace_back();
    }
    return items_[n.value];
  }
  const std::vector<uint32_t>& items_of(const Node& n) const {
    static const std::vector<uint32_t> kEmpty;
    return n.value == kNoItems ? kEmpty : items_[n.value];
  }
  void set_items(uint32_t dict, const std::vector<uint32_t>& kv) {
    if (kv.size() % 2 != 0) fail("odd number of dict items");
    for (size_t i = 0; i < kv.size(); i += 2) {
      if (nodes_[kv[i]].kind != Node::Kind::kStr) fail("dict key that is not a string");
    }
    std::vector<uint32_t>& d = container(dict, Node::Kind::kDict);
    d.insert(d.end(), kv.begin(), kv.end());
  }
  void str(size_t n) {
    need(n);
    if (n > UINT32_MAX) fail("string longer than 4 GiB");
    // Python refuses to unpickle these too; passed on, they would make the JSON text invalid.
    if (!is_utf8({reinterpret_cast<const char*>(data_.data() + pos_), n})) {
      fail("string that is not UTF-8");
    }
    push(Node{.kind = Node::Kind::kStr, .length = static_cast<uint32_t>(n), .value = pos_});
    pos_ += n;
  }
  void tuple(std::vector<uint32_t> items) { push_container(Node::Kind::kTuple, std::move(items)); }
  void put(uint64_t index) {
    if (index > nodes_.size() + memo_.size()) fail("memo index out of range");
    if (memo_.size() <= index) memo_.resize(index + 1, kNoValue);
    memo_[index] = top();
  }
  void get(uint64_t index) {
    if (index >= memo_.size() || memo_[index] == kNoValue) fail("memo key not found");
    stack_.push_back(memo_[index]);
  }

  void step(uint8_t op) {
    switch (op) {
      case 0x80:  // PROTO
        if (const uint8_t v = u8(); v < 2 || v > 5) fail(fmt::format("protocol {}", v));
        break;
      case 0x95:  // FRAME: a length prefix only; the opcodes inside are read as usual.
        le(8);
        break;
      case '}':
        push_container(Node::Kind::kDict);
        break;
      case ']':
        push_container(Node::Kind::kList);
        break;
      case ')':
        tuple({});
        break;
      case '(':
        marks_.push_back(stack_.size());
        break;
      case 'd': {
        const auto kv = pop_mark();
        push_container(Node::Kind::kDict);
        set_items(stack_.back(), kv);
        break;
      }
      case 'l':
        push_container(Node::Kind::kList, pop_mark());
        break;
      case 't':
        tuple(pop_mark());
        break;
      case 0x85:
      case 0x86:
      case 0x87: {
        std::vector<uint32_t> items(op - 0x84);
        for (auto it = items.rbegin(); it != items.rend(); ++it) *it = pop();
        tuple(std::move(items));
        break;
      }
      case 's': {
        const uint32_t value = pop();
        const uint32_t key = pop();
        set_items(top(), {key, value});
        break;
      }
      case 'u': {
        const auto kv = pop_mark();
        set_items(top(), kv);
        break;
      }
      case 'a': {
        const uint32_t value = pop();
        container(top(), Node::Kind::kList).push_back(value);
        break;
      }
      case 'e': {
        auto values = pop_mark();
        auto& items = container(top(), Node::Kind::kList);
        // The usual case, a list filled by one APPENDS, takes the items without a second copy.
        if (items.empty()) {
          items = std::move(values);
        } else {
          items.insert(items.end(), values.begin(), values.end());
        }
        break;
      }
      case 'X':
        str(le(4));
        break;
      case 0x8c:
        str(le(1));
        break;
      case 0x8d:
        str(le(8));
        break;
      case 'J':
        push_int(static_cast<int32_t>(le(4)));
        break;
      case 'K':
        push_int(static_cast<int64_t>(le(1)));
        break;
      case 'M':
        push_int(static_cast<int64_t>(le(2)));
        break;
      case 0x8a: {  // LONG1: two's complement, little-endian, of the given length.
        const uint64_t n = le(1);
        if (n > 8) fail(fmt::format("integer of {} bytes does not fit 64 bits", n));
        uint64_t v = le(n);
        if (n > 0 && n < 8 && (v >> (8 * n - 1)) != 0) v |= ~uint64_t{0} << (8 * n);
        push_int(static_cast<int64_t>(v));
        break;
      }
      case 'G': {  // BINFLOAT: big-endian, unlike the integers.
        need(8);
        uint64_t bits = 0;
        for (int i = 0; i < 8; ++i) bits = (bits << 8) | std::to_integer<uint64_t>(data_[pos_ + i]);
        pos_ += 8;
        push(Node{.kind = Node::Kind::kFloat, .value = bits});
        break;
      }
      case 'N':
        stack_.push_back(shared(kNoneSlot, Node{}));
        break;
      case 0x88:
      case 0x89:
        stack_.push_back(shared(op == 0x88 ? kTrueSlot : kFalseSlot,
                                Node{.kind = Node::Kind::kBool, .boolean = op == 0x88}));
        break;
      case 'q':
        put(le(1));
        break;
      case 'r':
        put(le(4));
        break;
      case 0x94:
        put(memo_.size());
        break;
      case 'h':
        get(le(1));
        break;
      case 'j':
        get(le(4));
        break;
      default: {
        const std::string_view name = opcode_name(op);
        if (name.empty()) fail(fmt::format("unknown opcode 0x{:02x}", op));
        fail(
            fmt::format("opcode {} (0x{:02x}) is not allowed: only plain data (dict, list, "
                        "tuple, str, int, float, bool, None) is read",
                        name, op));
      }
    }
  }

  // Every node the conversion visits: bounds the recursion (and self-containing structures)
  // and, since memo references can repeat a subtree, stops a small file from expanding
  // exponentially (a "billion laughs" pickle).
  const Node& visit(uint32_t index, int depth) {
    if (depth > kMaxDepth) fail("nested too deeply (or a self-containing structure)");
    if (budget_-- == 0) fail("memo references expand beyond any real dump");
    return nodes_[index];
  }

  static void append_json_string(std::string_view s, std::string& out) {
    out += '"';
    for (const char c : s) {
      if (c == '"' || c == '\\') {
        out += '\\';
        out += c;
      } else if (static_cast<unsigned char>(c) < 0x20) {
        fmt::format_to(std::back_inserter(out), "\\u{:04x}", static_cast<int>(c));
      } else {
        out += c;
      }
    }
    out += '"';
  }

  static constexpr uint32_t kNoValue = UINT32_MAX;
  static constexpr uint64_t kNoItems = UINT64_MAX;  // A container with no items yet.
  // Slots of shared_: the ints 0..kSharedInts - 1 (BININT1's and BININT2's range), then these.
  static constexpr int64_t kSharedInts = 65536;
  static constexpr size_t kNoneSlot = kSharedInts;
  static constexpr size_t kTrueSlot = kSharedInts + 1;
  static constexpr size_t kFalseSlot = kSharedInts + 2;

  std::span<const std::byte> data_;
  size_t pos_ = 0;
  size_t op_offset_ = 0;
  std::vector<Node> nodes_;
  std::vector<std::vector<uint32_t>> items_;  // Containers' items, by Node::value.
  std::vector<uint32_t> stack_;
  std::vector<size_t> marks_;
  std::vector<uint32_t> memo_;
  std::vector<uint32_t> shared_;  // By slot: the shared node, or kNoValue before its first use.
  size_t budget_ = 0;
};

}  // namespace

nlohmann::json read_pickle(std::span<const std::byte> data) {
  Reader reader(data);
  return reader.to_json(reader.decode(), 0);
}

std::string pickle_to_json_text(std::span<const std::byte> data) {
  Reader reader(data);
  const uint32_t root = reader.decode();
  std::string out;
  out.reserve(data.size() * 2);
  reader.to_text(root, 0, out);
  return out;
}

}  // namespace meshrt::trace
