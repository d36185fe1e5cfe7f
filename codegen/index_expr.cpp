#include "codegen/index_expr.h"

#include <algorithm>
#include <cctype>
#include <map>

#include "core/error.h"
#include "core/integer.h"

namespace fusetune::codegen {

namespace {

enum class Op {
  kConst, kUnknown, kSlot, kNeg, kNot, kBitNot, kAdd, kSub, kMul, kDiv, kMod, kShl, kShr, kLt, kLe, kGt, kGe, kEq,
  kNe, kBitAnd, kBitOr, kBitXor, kAnd, kOr, kTernary, kCast, kCall, kSubscript, kAligned16
};

// Casts that change an integer's value: the width and signedness they truncate to.
enum class Cast { kNone, kI32, kU32, kU16, kU8, kI8, kFloat, kIndex };

// Integer helpers of the prelude (codegen/emit_common.h), computed as it computes them.
enum class Helper { kOther, kMin, kMax, kFdiv, kFmod, kIdiv, kIpymod, kIfmod, kWrapAdd, kWrapSub, kWrapMul };

Helper helper_of(const std::string& name) {
  static const std::map<std::string, Helper> helpers = {
      {"ft_min", Helper::kMin},       {"ft_max", Helper::kMax},         {"ft_fdiv", Helper::kFdiv},
      {"ft_fmod", Helper::kFmod},     {"ft_idiv", Helper::kIdiv},       {"ft_ipymod", Helper::kIpymod},
      {"ft_ifmod", Helper::kIfmod},   {"ft_wrap_add", Helper::kWrapAdd}, {"ft_wrap_sub", Helper::kWrapSub},
      {"ft_wrap_mul", Helper::kWrapMul}};
  const auto it = helpers.find(name);
  return it == helpers.end() ? Helper::kOther : it->second;
}

int64_t wrap_add(int64_t a, int64_t b) { return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b)); }
int64_t wrap_sub(int64_t a, int64_t b) { return static_cast<int64_t>(static_cast<uint64_t>(a) - static_cast<uint64_t>(b)); }
int64_t wrap_mul(int64_t a, int64_t b) { return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b)); }
bool divisible(int64_t a, int64_t b) { return b != 0 && !(b == -1 && a == INT64_MIN); }

}  // namespace

struct IndexExprNode {
  Op op = Op::kUnknown;
  int64_t value = 0;  // kConst: the value; kSlot: the slot; kSubscript, kAligned16: the buffer (-1: not a buffer)
  Cast cast = Cast::kNone;
  Helper helper = Helper::kOther;
  int bits = 0;  // kConst: the literal's width; kSubscript: the element's (Binding::bits)
  bool invariant = false;  // of constants and invariant slots only, and loads nothing: cached per block
  std::vector<std::unique_ptr<IndexExprNode>> kids;
  mutable uint64_t stamp = 0;
  mutable IndexValue cached;

  IndexValue eval(const std::vector<IndexValue>& env, const IndexExpr::LoadVisitor& on_load, uint64_t block) const {
    if (op == Op::kConst) return value;  // the leaves, without compute()'s frame
    if (op == Op::kSlot) return env[static_cast<size_t>(value)];
    if (!invariant || kids.empty() || block == 0) return compute(env, on_load, block);
    if (stamp != block) {
      cached = compute(env, on_load, block);
      stamp = block;
    }
    return cached;
  }
  IndexValue compute(const std::vector<IndexValue>& env, const IndexExpr::LoadVisitor& on_load, uint64_t block) const;
  ValueRange range(const std::vector<ValueRange>& slots, int index_bits, const IndexExpr::OverflowVisitor& overflow) const;
  // The trailing zero bits of every value, slot s having at least aligned[s] (none past its end).
  int twos(const std::vector<int>& aligned) const;
  // related: false under a condition not the same in both environments (its subscripts are
  // reported unrelated).
  Shift shift(const std::vector<Shift>& slots, const std::vector<IndexValue>& first, const std::vector<int>& aligned,
              const IndexExpr::ShiftVisitor& on_load, bool related) const;
};

namespace {

using NodePtr = std::unique_ptr<IndexExprNode>;

NodePtr node(Op op, std::vector<NodePtr> kids = {}) {
  auto n = std::make_unique<IndexExprNode>();
  n->op = op;
  n->invariant = op != Op::kSubscript && op != Op::kSlot;  // a slot: as bound (primary())
  for (const NodePtr& k : kids) n->invariant = n->invariant && k->invariant;
  n->kids = std::move(kids);
  return n;
}

NodePtr constant(int64_t v, int bits = 64) {
  NodePtr n = node(Op::kConst);
  n->value = v;
  n->bits = bits;
  return n;
}

bool is_type_word(const std::string& w) {
  return w == "long" || w == "int" || w == "unsigned" || w == "signed" || w == "short" || w == "char" || w == "float" ||
         w == "double" || w == "const" || w == "ft_i";
}

class Parser {
 public:
  Parser(const std::string& text, const IndexExpr::Resolver& resolve, std::vector<int>& buffers)
      : s_(text), resolve_(resolve), buffers_(buffers) {}

  NodePtr parse() {
    NodePtr n = expr();
    skip_space();
    if (pos_ != s_.size()) bad("unexpected '" + s_.substr(pos_, 12) + "'");
    return n;
  }

 private:
  [[noreturn]] void bad(const std::string& what) const {
    fail("index analysis: cannot read the expression '", s_, "' at offset ", pos_, ": ", what);
  }
  void skip_space() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  bool peek(const char* tok) {
    skip_space();
    return s_.compare(pos_, std::char_traits<char>::length(tok), tok) == 0;
  }
  bool accept(const char* tok) {
    if (!peek(tok)) return false;
    pos_ += std::char_traits<char>::length(tok);
    return true;
  }
  void expect(const char* tok) {
    if (!accept(tok)) bad(std::string("expected '") + tok + "'");
  }
  std::string word() {
    skip_space();
    const size_t start = pos_;
    while (pos_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '_')) ++pos_;
    return s_.substr(start, pos_ - start);
  }

  // expr := or ('?' expr ':' expr)?
  NodePtr expr() {
    NodePtr c = binary(0);
    if (!accept("?")) return c;
    NodePtr a = expr();
    expect(":");
    NodePtr b = expr();
    std::vector<NodePtr> kids;
    kids.push_back(std::move(c));
    kids.push_back(std::move(a));
    kids.push_back(std::move(b));
    return node(Op::kTernary, std::move(kids));
  }

  // The binary operator at the cursor with binding power at least `min`, consumed; else none.
  bool binary_op(int min, Op& op, int& power) {
    struct Entry {
      const char* tok;
      Op op;
      int power;
      const char* not_followed;  // a longer operator sharing the prefix
    };
    static const Entry table[] = {
        {"||", Op::kOr, 1, nullptr},    {"&&", Op::kAnd, 2, nullptr},    {"|", Op::kBitOr, 3, "|"},
        {"^", Op::kBitXor, 4, nullptr}, {"&", Op::kBitAnd, 5, "&"},      {"==", Op::kEq, 6, nullptr},
        {"!=", Op::kNe, 6, nullptr},    {"<<", Op::kShl, 8, nullptr},    {">>", Op::kShr, 8, nullptr},
        {"<=", Op::kLe, 7, nullptr},    {">=", Op::kGe, 7, nullptr},     {"<", Op::kLt, 7, nullptr},
        {">", Op::kGt, 7, nullptr},     {"+", Op::kAdd, 9, nullptr},     {"-", Op::kSub, 9, nullptr},
        {"*", Op::kMul, 10, nullptr},   {"/", Op::kDiv, 10, nullptr},    {"%", Op::kMod, 10, nullptr}};
    skip_space();
    for (const Entry& e : table) {
      const size_t len = std::char_traits<char>::length(e.tok);
      if (s_.compare(pos_, len, e.tok) != 0) continue;
      if (e.not_followed && s_.compare(pos_ + len, 1, e.not_followed) == 0) continue;
      if (e.power < min) return false;
      pos_ += len;
      op = e.op;
      power = e.power;
      return true;
    }
    return false;
  }

  NodePtr binary(int min) {
    NodePtr lhs = unary();
    for (;;) {
      const size_t at = pos_;
      Op op;
      int power;
      if (!binary_op(min, op, power)) {
        pos_ = at;
        return lhs;
      }
      NodePtr rhs = binary(power + 1);
      std::vector<NodePtr> kids;
      kids.push_back(std::move(lhs));
      kids.push_back(std::move(rhs));
      lhs = node(op, std::move(kids));
    }
  }

  NodePtr unary() {
    if (accept("-")) return wrap(Op::kNeg, unary());
    if (accept("+")) return unary();
    if (accept("!")) return wrap(Op::kNot, unary());
    if (accept("~")) return wrap(Op::kBitNot, unary());
    return postfix(primary());
  }

  NodePtr wrap(Op op, NodePtr kid) {
    std::vector<NodePtr> kids;
    kids.push_back(std::move(kid));
    return node(op, std::move(kids));
  }

  NodePtr postfix(NodePtr n) {
    for (;;) {
      if (accept(".")) {
        word();  // a float4 component: a float
        n = node(Op::kUnknown);
      } else if (peek("[")) {
        bad("a subscript of something other than a name");
      } else {
        return n;
      }
    }
  }

  NodePtr primary() {
    skip_space();
    if (pos_ >= s_.size()) bad("unexpected end");
    const char c = s_[pos_];
    if (c == '(') {
      ++pos_;
      const size_t at = pos_;
      const std::string w = word();
      if (is_type_word(w)) {
        std::string type = w;
        for (std::string more = word(); !more.empty(); more = word()) type += " " + more;
        accept("*");
        expect(")");
        NodePtr n = wrap(Op::kCast, unary());
        n->cast = cast_of(type);
        return n;
      }
      pos_ = at;
      NodePtr n = expr();
      expect(")");
      return n;
    }
    if (std::isdigit(static_cast<unsigned char>(c)) || c == '.') return number();
    const std::string name = word();
    if (name.empty()) bad("unexpected character");
    if (accept("(")) return call(name);
    const IndexExpr::Binding b = resolve_(name);
    if (accept(".")) {  // an element of a vector local (q.x, q.v[3]): data, never an index
      if (word().empty()) bad("a member name after '.'");
      if (accept("[")) {
        expr();
        expect("]");
      }
      return node(Op::kUnknown);
    }
    if (accept("[")) {
      NodePtr index = expr();
      expect("]");
      if (b.kind == IndexExpr::Binding::Kind::kBuffer) {
        NodePtr n = wrap(Op::kSubscript, std::move(index));
        n->value = b.index;
        n->bits = b.bits;
        buffers_.push_back(b.index);
        return n;
      }
      NodePtr n = wrap(Op::kSubscript, std::move(index));  // a thread-local array: no memory access
      n->value = -1;
      n->bits = b.kind == IndexExpr::Binding::Kind::kLocalArray ? b.bits : 0;
      return n;
    }
    if (b.kind == IndexExpr::Binding::Kind::kSlot) {
      NodePtr n = node(Op::kSlot);
      n->value = b.index;
      n->invariant = b.invariant;
      return n;
    }
    return node(Op::kUnknown);  // a float variable, a buffer's address
  }

  static Cast cast_of(const std::string& type) {
    if (type == "int") return Cast::kI32;
    if (type == "ft_i") return Cast::kIndex;
    if (type == "unsigned" || type == "unsigned int") return Cast::kU32;
    if (type == "unsigned short") return Cast::kU16;
    if (type == "unsigned char") return Cast::kU8;
    if (type == "signed char") return Cast::kI8;
    if (type.find("float") != std::string::npos || type.find("double") != std::string::npos || type.find('*') != std::string::npos) {
      return Cast::kFloat;
    }
    return Cast::kNone;  // long long, unsigned long long: the same 64 bits; ft_i: the index type, whose values fit it
  }

  NodePtr number() {
    const size_t start = pos_;
    bool is_float = false;
    if (s_.compare(pos_, 2, "0x") == 0 || s_.compare(pos_, 2, "0X") == 0) {
      pos_ += 2;
      while (pos_ < s_.size() && std::isxdigit(static_cast<unsigned char>(s_[pos_]))) ++pos_;
    } else {
      while (pos_ < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '.' ||
                                  s_[pos_] == 'e' || s_[pos_] == 'E' ||
                                  ((s_[pos_] == '-' || s_[pos_] == '+') && (s_[pos_ - 1] == 'e' || s_[pos_ - 1] == 'E')))) {
        is_float = is_float || s_[pos_] == '.' || s_[pos_] == 'e' || s_[pos_] == 'E';
        ++pos_;
      }
    }
    const std::string digits = s_.substr(start, pos_ - start);
    bool is_long = false;
    while (pos_ < s_.size() && (s_[pos_] == 'f' || s_[pos_] == 'F' || s_[pos_] == 'u' || s_[pos_] == 'U' ||
                                s_[pos_] == 'l' || s_[pos_] == 'L')) {
      is_float = is_float || s_[pos_] == 'f' || s_[pos_] == 'F';
      is_long = is_long || s_[pos_] == 'l' || s_[pos_] == 'L';
      ++pos_;
    }
    if (is_float) return node(Op::kUnknown);
    const uint64_t v = std::stoull(digits, nullptr, 0);
    // C's type for the literal: int while it fits (unsigned int for a hexadecimal one up to 32 bits),
    // else 64 bits.
    const bool is_hex = digits.size() > 1 && (digits[1] == 'x' || digits[1] == 'X');
    const bool is_unsigned = digits.size() < s_.size() && s_.find_first_of("uU", start) < pos_;
    const bool fits = v <= INT32_MAX || ((is_hex || is_unsigned) && v <= 0xffffffffULL);
    return constant(static_cast<int64_t>(v), is_long || !fits ? 64 : 32);
  }

  NodePtr call(const std::string& name) {
    std::vector<NodePtr> args;
    if (name == "ft_aligned16") {
      const IndexExpr::Binding b = resolve_(word());
      expect(",");
      args.push_back(expr());
      expect(")");
      NodePtr n = node(Op::kAligned16, std::move(args));
      n->value = b.kind == IndexExpr::Binding::Kind::kBuffer ? b.index : -1;
      return n;
    }
    if (!accept(")")) {
      do args.push_back(expr());
      while (accept(","));
      expect(")");
    }
    NodePtr n = node(Op::kCall, std::move(args));
    n->helper = helper_of(name);
    return n;
  }

  const std::string& s_;
  const IndexExpr::Resolver& resolve_;
  std::vector<int>& buffers_;
  size_t pos_ = 0;
};

IndexValue truncate(Cast c, int64_t v) {
  switch (c) {
    case Cast::kNone:
    case Cast::kIndex: return v;  // ft_i: the values it holds fit it (codegen/index_width.h)
    case Cast::kI32: return static_cast<int64_t>(static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint64_t>(v))));
    case Cast::kU32: return static_cast<int64_t>(static_cast<uint32_t>(static_cast<uint64_t>(v)));
    case Cast::kU16: return static_cast<int64_t>(static_cast<uint16_t>(static_cast<uint64_t>(v)));
    case Cast::kU8: return static_cast<int64_t>(static_cast<uint8_t>(static_cast<uint64_t>(v)));
    case Cast::kI8: return static_cast<int64_t>(static_cast<int8_t>(static_cast<uint8_t>(static_cast<uint64_t>(v))));
    case Cast::kFloat: return std::nullopt;
  }
  return std::nullopt;
}

IndexValue helper(Helper h, int64_t a, int64_t b) {
  switch (h) {
    case Helper::kMin: return a < b ? a : b;
    case Helper::kMax: return a > b ? a : b;
    case Helper::kFdiv:
      if (!divisible(a, b)) return std::nullopt;
      return floor_div(a, b);
    case Helper::kFmod:
      if (!divisible(a, b)) return std::nullopt;
      return wrap_sub(a, wrap_mul(floor_div(a, b), b));
    case Helper::kIdiv: return divisible(a, b) ? a / b : 0;
    case Helper::kIpymod: {
      if (b == 0 || b == -1) return 0;
      const int64_t r = a % b;
      return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
    }
    case Helper::kIfmod: return (b == 0 || b == -1) ? 0 : a % b;
    case Helper::kWrapAdd: return wrap_add(a, b);
    case Helper::kWrapSub: return wrap_sub(a, b);
    case Helper::kWrapMul: return wrap_mul(a, b);
    case Helper::kOther: break;
  }
  return std::nullopt;
}

IndexValue arith(Op op, int64_t a, int64_t b) {
  switch (op) {
    case Op::kAdd: return wrap_add(a, b);
    case Op::kSub: return wrap_sub(a, b);
    case Op::kMul: return wrap_mul(a, b);
    case Op::kDiv: return divisible(a, b) ? IndexValue(a / b) : std::nullopt;
    case Op::kMod: return divisible(a, b) ? IndexValue(a % b) : std::nullopt;
    case Op::kShl: return (b < 0 || b > 63) ? std::nullopt : IndexValue(static_cast<int64_t>(static_cast<uint64_t>(a) << b));
    case Op::kShr: return (b < 0 || b > 63) ? std::nullopt : IndexValue(a >> b);
    case Op::kLt: return a < b;
    case Op::kLe: return a <= b;
    case Op::kGt: return a > b;
    case Op::kGe: return a >= b;
    case Op::kEq: return a == b;
    case Op::kNe: return a != b;
    case Op::kBitAnd: return a & b;
    case Op::kBitOr: return a | b;
    case Op::kBitXor: return a ^ b;
    default: return std::nullopt;
  }
}

}  // namespace

IndexValue IndexExprNode::compute(const std::vector<IndexValue>& env, const IndexExpr::LoadVisitor& on_load,
                                  uint64_t block) const {
  switch (op) {
    case Op::kConst: return value;
    case Op::kUnknown: return std::nullopt;
    case Op::kSlot: return env[static_cast<size_t>(value)];
    case Op::kNeg: {
      const IndexValue x = kids[0]->eval(env, on_load, block);
      return x ? IndexValue(wrap_sub(0, *x)) : std::nullopt;
    }
    case Op::kNot: {
      const IndexValue x = kids[0]->eval(env, on_load, block);
      return x ? IndexValue(*x == 0) : std::nullopt;
    }
    case Op::kBitNot: {
      const IndexValue x = kids[0]->eval(env, on_load, block);
      return x ? IndexValue(~*x) : std::nullopt;
    }
    case Op::kAnd:
    case Op::kOr: {
      const IndexValue a = kids[0]->eval(env, on_load, block);
      const bool is_and = op == Op::kAnd;
      if (a && (*a != 0) != is_and) return is_and ? 0 : 1;  // short-circuit: the right side never runs
      const IndexValue b = kids[1]->eval(env, on_load, block);
      if (b && (*b != 0) != is_and) return is_and ? 0 : 1;
      if (a && b) return is_and ? 1 : 0;
      return std::nullopt;
    }
    case Op::kTernary: {
      const IndexValue c = kids[0]->eval(env, on_load, block);
      if (c) return kids[*c != 0 ? 1 : 2]->eval(env, on_load, block);
      const IndexValue a = kids[1]->eval(env, on_load, block);
      const IndexValue b = kids[2]->eval(env, on_load, block);
      return (a && b && *a == *b) ? a : std::nullopt;
    }
    case Op::kCast: {
      const IndexValue x = kids[0]->eval(env, on_load, block);
      return x ? truncate(cast, *x) : std::nullopt;
    }
    case Op::kCall: {
      IndexValue args[2];
      for (size_t i = 0; i < kids.size(); ++i) {
        const IndexValue v = kids[i]->eval(env, on_load, block);  // every argument, for the loads it makes
        if (i < 2) args[i] = v;
      }
      if (helper == Helper::kOther || kids.size() != 2 || !args[0] || !args[1]) return std::nullopt;
      return codegen::helper(helper, *args[0], *args[1]);
    }
    case Op::kSubscript: {
      const IndexValue i = kids[0]->eval(env, on_load, block);
      if (value >= 0) on_load(static_cast<int>(value), i);
      return std::nullopt;
    }
    case Op::kAligned16: {
      // Allocations (shared and global) start 16-byte aligned: float element i is aligned when i % 4 == 0.
      const IndexValue i = kids[0]->eval(env, on_load, block);
      return (i && value >= 0) ? IndexValue(((*i % 4) + 4) % 4 == 0) : std::nullopt;
    }
    default: {
      const IndexValue a = kids[0]->eval(env, on_load, block);
      const IndexValue b = kids[1]->eval(env, on_load, block);
      return (a && b) ? arith(op, *a, *b) : std::nullopt;
    }
  }
}

namespace {

__extension__ typedef __int128 Wide;  // bounds of products of two 64-bit bounds, exact

ValueRange full(int bits) {
  return bits == 32 ? ValueRange::of(INT32_MIN, INT32_MAX, 32) : ValueRange::of(INT64_MIN, INT64_MAX, bits);
}

// C's common type of two operands' widths: not an integer when either is not (a float operand).
int common(int a, int b) { return (a == 0 || b == 0) ? 0 : std::max({a, b, 32}); }

Wide floor_wide(Wide a, Wide b) {
  const Wide q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

// The bounds of f over the four corners of two ranges (f monotone in each argument).
template <class F>
std::pair<Wide, Wide> corners(const ValueRange& a, const ValueRange& b, F f) {
  const Wide v[4] = {f(Wide{a.lo}, Wide{b.lo}), f(Wide{a.lo}, Wide{b.hi}), f(Wide{a.hi}, Wide{b.lo}), f(Wide{a.hi}, Wide{b.hi})};
  return {*std::min_element(v, v + 4), *std::max_element(v, v + 4)};
}

// A divisor's values where the division runs: C leaves division by zero undefined, so a divisor
// that is zero in some blocks (an empty region's extent) is taken as nonzero where it divides (the
// host executor traps on an integer division by zero). A divisor of both signs stays unbounded.
ValueRange divisor(ValueRange r) {
  if (r.lo == 0 && r.hi > 0) r.lo = 1;
  if (r.hi == 0 && r.lo < 0) r.hi = -1;
  return r;
}
bool holds_zero(const ValueRange& r) { return r.lo <= 0 && r.hi >= 0; }

}  // namespace

ValueRange IndexExprNode::range(const std::vector<ValueRange>& slots, int index_bits,
                                const IndexExpr::OverflowVisitor& overflow) const {
  // A result whose exact bounds are [lo, hi], computed in `width` bits: outside int's range in 32
  // bits it wraps (reported), outside 64 bits it is not known.
  const auto result = [&](Wide lo, Wide hi, int width, const char* what) -> ValueRange {
    if (width == 0) return full(0);
    if (width == 32) {
      if (lo < INT32_MIN || hi > INT32_MAX) {
        overflow(what);
        return full(32);
      }
      return ValueRange::of(static_cast<int64_t>(lo), static_cast<int64_t>(hi), 32);
    }
    if (lo < INT64_MIN || hi > INT64_MAX) return full(64);
    return ValueRange::of(static_cast<int64_t>(lo), static_cast<int64_t>(hi), 64);
  };
  const auto kid = [&](size_t i) { return kids[i]->range(slots, index_bits, overflow); };
  const auto boolean = ValueRange::of(0, 1, 32);
  switch (op) {
    case Op::kConst: return ValueRange::point(value, bits);
    case Op::kUnknown: return full(0);
    case Op::kSlot: return slots[static_cast<size_t>(value)];
    case Op::kNeg: {
      const ValueRange x = kid(0);
      return result(-Wide{x.hi}, -Wide{x.lo}, common(x.bits, 32), "a negation");
    }
    case Op::kBitNot: {
      const ValueRange x = kid(0);
      return result(-Wide{x.hi} - 1, -Wide{x.lo} - 1, common(x.bits, 32), "a complement");
    }
    case Op::kNot: kid(0); return boolean;
    case Op::kAnd:
    case Op::kOr: {
      const ValueRange a = kid(0);
      const bool decided = a.is_point() && ((a.lo != 0) != (op == Op::kAnd));  // the right side never runs
      if (!decided) kid(1);
      return boolean;
    }
    case Op::kTernary: {
      const ValueRange c = kid(0);
      const auto quiet = [](const std::string&) {};
      if (c.is_point()) {  // the other branch never runs: its type only
        const size_t taken = c.lo != 0 ? 1 : 2;
        const ValueRange v = kid(taken);
        const int other = kids[3 - taken]->range(slots, index_bits, quiet).bits;
        const int width = common(v.bits, other);
        return width == 0 ? full(0) : ValueRange::of(v.lo, v.hi, width);
      }
      const ValueRange a = kid(1), b = kid(2);
      const int width = common(a.bits, b.bits);
      return width == 0 ? full(0) : ValueRange::of(std::min(a.lo, b.lo), std::max(a.hi, b.hi), width);
    }
    case Op::kCast: {
      const ValueRange x = kid(0);
      const auto narrow = [&](int64_t lo, int64_t hi) {
        return x.bits != 0 && x.lo >= lo && x.hi <= hi ? ValueRange::of(x.lo, x.hi, 32) : ValueRange::of(lo, hi, 32);
      };
      switch (cast) {
        case Cast::kFloat: return full(0);
        case Cast::kNone: return x.bits == 0 ? full(64) : ValueRange::of(x.lo, x.hi, 64);
        case Cast::kIndex:
          if (index_bits == 64) return x.bits == 0 ? full(64) : ValueRange::of(x.lo, x.hi, 64);
          if (x.bits == 0 || !x.fits_int()) {
            overflow("a conversion to ft_i");
            return full(32);
          }
          return ValueRange::of(x.lo, x.hi, 32);
        case Cast::kI32: return narrow(INT32_MIN, INT32_MAX);
        case Cast::kU32: return narrow(0, UINT32_MAX);
        case Cast::kU16: return narrow(0, UINT16_MAX);
        case Cast::kU8: return narrow(0, UINT8_MAX);
        case Cast::kI8: return narrow(INT8_MIN, INT8_MAX);
      }
      return full(0);
    }
    case Op::kCall: {
      std::vector<ValueRange> args;
      for (size_t i = 0; i < kids.size(); ++i) args.push_back(kid(i));
      if (helper == Helper::kOther || args.size() != 2) return full(0);  // math: floats
      const ValueRange& a = args[0];
      const ValueRange b = helper == Helper::kFdiv || helper == Helper::kFmod ? divisor(args[1]) : args[1];
      const int width = common(a.bits, b.bits);
      switch (helper) {
        case Helper::kMin: return width == 0 ? full(0) : ValueRange::of(std::min(a.lo, b.lo), std::min(a.hi, b.hi), width);
        case Helper::kMax: return width == 0 ? full(0) : ValueRange::of(std::max(a.lo, b.lo), std::max(a.hi, b.hi), width);
        case Helper::kFdiv: {
          if (width == 0 || holds_zero(b)) return full(width);
          const auto [lo, hi] = corners(a, b, floor_wide);
          return result(lo, hi, width, "a floor division");
        }
        case Helper::kFmod: {
          if (width == 0 || holds_zero(b)) return full(width);
          if (b.lo > 0) {
            if (a.lo >= 0 && a.hi < b.lo) return ValueRange::of(a.lo, a.hi, width);
            return ValueRange::of(0, b.hi - 1, width);
          }
          return ValueRange::of(b.lo + 1, 0, width);
        }
        default: return full(64);  // the integer data helpers (wrapping, ONNX's division): 64-bit
      }
    }
    case Op::kSubscript: kid(0); return full(bits);
    case Op::kAligned16: kid(0); return boolean;
    default: break;
  }
  const ValueRange a = kid(0), b = op == Op::kDiv || op == Op::kMod ? divisor(kid(1)) : kid(1);
  // A comparison the bounds decide is that constant (a block's region known live or empty).
  const auto decided = [](bool always, bool never) { return always ? ValueRange::point(1, 32) : never ? ValueRange::point(0, 32) : ValueRange::of(0, 1, 32); };
  const bool numbers = a.bits != 0 && b.bits != 0;
  switch (op) {
    case Op::kLt: return numbers ? decided(a.hi < b.lo, a.lo >= b.hi) : boolean;
    case Op::kLe: return numbers ? decided(a.hi <= b.lo, a.lo > b.hi) : boolean;
    case Op::kGt: return numbers ? decided(a.lo > b.hi, a.hi <= b.lo) : boolean;
    case Op::kGe: return numbers ? decided(a.lo >= b.hi, a.hi < b.lo) : boolean;
    case Op::kEq: return numbers ? decided(a.is_point() && b.is_point() && a.lo == b.lo, a.hi < b.lo || b.hi < a.lo) : boolean;
    case Op::kNe: return numbers ? decided(a.hi < b.lo || b.hi < a.lo, a.is_point() && b.is_point() && a.lo == b.lo) : boolean;
    default: break;
  }
  const int width = common(a.bits, b.bits);
  if (width == 0) return full(0);
  switch (op) {
    case Op::kAdd: return result(Wide{a.lo} + b.lo, Wide{a.hi} + b.hi, width, "an addition");
    case Op::kSub: return result(Wide{a.lo} - b.hi, Wide{a.hi} - b.lo, width, "a subtraction");
    case Op::kMul: {
      const auto [lo, hi] = corners(a, b, [](Wide x, Wide y) { return x * y; });
      return result(lo, hi, width, "a multiplication");
    }
    case Op::kDiv: {
      if (holds_zero(b)) return full(width);
      const auto [lo, hi] = corners(a, b, [](Wide x, Wide y) { return x / y; });
      return result(lo, hi, width, "a division");
    }
    case Op::kMod: {
      if (holds_zero(b)) return full(width);
      const Wide m = std::max(-Wide{b.lo}, Wide{b.hi}) - 1;  // |remainder| <= |divisor| - 1
      const Wide small = std::min(b.lo < 0 ? -Wide{b.hi} : Wide{b.lo}, b.lo < 0 ? -Wide{b.lo} : Wide{b.hi});
      if (a.lo >= 0 && Wide{a.hi} < small) return ValueRange::of(a.lo, a.hi, width);
      return result(a.lo >= 0 ? 0 : std::max(Wide{a.lo}, -m), a.hi <= 0 ? 0 : std::min(Wide{a.hi}, m), width, "a remainder");
    }
    case Op::kShl: {
      const int left = common(a.bits, 32);
      if (!b.is_point() || b.lo < 0 || b.lo > 62) {
        if (left == 32) overflow("a shift by an unknown amount");
        return full(left);
      }
      const Wide f = Wide{1} << b.lo;
      return result(Wide{a.lo} * f, Wide{a.hi} * f, left, "a left shift");
    }
    case Op::kShr: {
      const int left = common(a.bits, 32);
      if (b.is_point() && b.lo >= 0 && b.lo <= 63) return ValueRange::of(a.lo >> b.lo, a.hi >> b.lo, left);
      return a.lo >= 0 ? ValueRange::of(0, a.hi, left) : full(left);
    }
    case Op::kBitAnd:
      if (a.lo >= 0 && b.lo >= 0) return ValueRange::of(0, std::min(a.hi, b.hi), width);
      if (a.lo >= 0 || b.lo >= 0) return ValueRange::of(0, a.lo >= 0 ? a.hi : b.hi, width);
      return full(width);
    case Op::kBitOr:
    case Op::kBitXor: {
      if (a.lo < 0 || b.lo < 0) return full(width);
      int64_t top = 1;
      while (top <= std::max(a.hi, b.hi) && top < (int64_t{1} << 62)) top <<= 1;
      return ValueRange::of(0, top * 2 - 1 > 0 ? top * 2 - 1 : INT64_MAX, width);
    }
    default: return full(width);
  }
}

Shift IndexExprNode::shift(const std::vector<Shift>& slots, const std::vector<IndexValue>& first,
                           const std::vector<int>& aligned, const IndexExpr::ShiftVisitor& on_load, bool related) const {
  const auto kid = [&](size_t i, bool rel = true) { return kids[i]->shift(slots, first, aligned, on_load, related && rel); };
  // A factor the same in both: its value, when it is of constants and invariant slots only.
  const auto factor = [&](size_t i) -> IndexValue {
    if (!kids[i]->invariant) return std::nullopt;
    return kids[i]->eval(first, [](int, IndexValue) {}, 0);
  };
  // Whether kid `moved`, moved by s, and kid `fixed`, the same in both, are multiples of 2^t in the
  // first environment with 0 <= s < 2^t: then x + s lies in the same interval [k 2^t, (k + 1) 2^t)
  // as x, and its order against y and its floor quotient by y (y > 0) do not change.
  const auto within = [&](const Shift& s, size_t moved, size_t fixed) {
    if (s.kind != Shift::Kind::kBy || s.offset() < 0) return false;
    const int t = std::min(kids[moved]->twos(aligned), kids[fixed]->twos(aligned));
    return s.offset() < (int64_t{1} << t);
  };
  const auto all_same = [&]() {
    bool same = true;
    for (size_t i = 0; i < kids.size(); ++i) same = kid(i).kind == Shift::Kind::kSame && same;
    return same ? Shift::same() : Shift::other();
  };
  switch (op) {
    case Op::kConst:
    case Op::kUnknown: return Shift::same();
    case Op::kSlot: return slots[static_cast<size_t>(value)];
    case Op::kNeg: {
      const Shift x = kid(0);
      return x.known() ? Shift::of(wrap_sub(0, x.offset())) : x;
    }
    case Op::kAdd:
    case Op::kSub: {
      const Shift a = kid(0), b = kid(1);
      if (!a.known() || !b.known()) return Shift::other();
      return Shift::of(op == Op::kAdd ? wrap_add(a.offset(), b.offset()) : wrap_sub(a.offset(), b.offset()));
    }
    case Op::kMul: {
      const Shift a = kid(0), b = kid(1);
      if (!a.known() || !b.known()) return Shift::other();
      if (a.kind == Shift::Kind::kSame && b.kind == Shift::Kind::kSame) return Shift::same();
      if (a.kind == Shift::Kind::kBy && b.kind == Shift::Kind::kBy) return Shift::other();
      const IndexValue f = factor(a.kind == Shift::Kind::kSame ? 0 : 1);
      return f ? Shift::of(wrap_mul(*f, a.offset() + b.offset())) : Shift::other();
    }
    case Op::kAnd:
    case Op::kOr: {
      const Shift a = kid(0);
      const Shift b = kid(1, a.kind == Shift::Kind::kSame);  // runs only as the left side decides
      return a.kind == Shift::Kind::kSame && b.kind == Shift::Kind::kSame ? Shift::same() : Shift::other();
    }
    case Op::kTernary: {
      const Shift c = kid(0);
      const bool same = c.kind == Shift::Kind::kSame;
      const Shift a = kid(1, same), b = kid(2, same);
      return same ? a.join(b) : Shift::other();
    }
    case Op::kCast: {
      const Shift x = kid(0);
      if (cast == Cast::kFloat) return Shift::same();  // unknown in both
      return cast == Cast::kNone || cast == Cast::kIndex || x.kind == Shift::Kind::kSame ? x : Shift::other();
    }
    case Op::kCall: {
      if (helper == Helper::kOther) {
        all_same();  // for the loads of the arguments
        return Shift::same();  // a math call's value is unknown in both
      }
      if (kids.size() != 2) return all_same();
      const Shift a = kid(0), b = kid(1);
      if (!a.known() || !b.known()) return Shift::other();
      if (a == Shift::same() && b == Shift::same()) return Shift::same();
      switch (helper) {
        case Helper::kMin:
        case Helper::kMax: return a == b ? a : Shift::other();  // min(x + d, y + d) = min(x, y) + d
        case Helper::kFdiv:
        case Helper::kFmod: {
          // Floor division by a constant c: (x + d) / c = x / c + d / c when c divides d; and x / c
          // when x and c > 0 are multiples of 2^t and 0 <= d < 2^t (the remainder x mod c, a
          // multiple of 2^t below c, stays below c with d added), the remainder then moving by d.
          const IndexValue c = b == Shift::same() ? factor(1) : std::nullopt;
          if (c && *c > 0 && within(a, 0, 1)) return helper == Helper::kFdiv ? Shift::same() : a;
          if (!c || !divisible(a.offset(), *c) || a.offset() % *c != 0) return Shift::other();
          return helper == Helper::kFdiv ? Shift::of(a.offset() / *c) : Shift::same();
        }
        default: return Shift::other();
      }
    }
    case Op::kSubscript: {
      const Shift i = kid(0);
      if (value >= 0) on_load(static_cast<int>(value), related ? i : Shift::other());
      return Shift::same();  // a loaded value: unknown in both
    }
    case Op::kAligned16: {
      const Shift i = kid(0);
      if (!i.known()) return i;
      return i.offset() % 4 == 0 ? Shift::same() : Shift::other();
    }
    case Op::kBitAnd: {
      // x & (2^k - 1), x moved by a multiple of 2^k: the same low bits (a vector's alignment).
      const Shift a = kid(0), b = kid(1);
      if (a == Shift::same() && b == Shift::same()) return Shift::same();
      const IndexValue m = a.known() && b == Shift::same() ? factor(1) : std::nullopt;
      if (!m || *m < 0 || ((*m + 1) & *m) != 0 || a.offset() % (*m + 1) != 0) return Shift::other();
      return Shift::same();
    }
    case Op::kDiv:
    case Op::kMod: {
      // By 1: the value (division), 0 (remainder).
      const Shift a = kid(0), b = kid(1);
      if (a == Shift::same() && b == Shift::same()) return Shift::same();
      const IndexValue c = a.known() && b == Shift::same() ? factor(1) : std::nullopt;
      if (!c || *c != 1) return Shift::other();
      return op == Op::kDiv ? a : Shift::same();
    }
    case Op::kLt:
    case Op::kLe:
    case Op::kGt:
    case Op::kGe:
    case Op::kEq:
    case Op::kNe: {
      const Shift a = kid(0), b = kid(1);  // x + d < y + d as x < y (indices far from overflow)
      if (a.known() && a == b) return Shift::same();
      // x + d < y as x < y, where within() holds (and so >=; y > x + d, y >= x + d: <, <= turned).
      const bool left = (op == Op::kLt || op == Op::kGe) && b == Shift::same() && within(a, 0, 1);
      const bool right = (op == Op::kGt || op == Op::kLe) && a == Shift::same() && within(b, 1, 0);
      return left || right ? Shift::same() : Shift::other();
    }
    default: return all_same();  // shifts, bitwise operators
  }
}

IndexExpr::IndexExpr() = default;
IndexExpr::~IndexExpr() = default;
IndexExpr::IndexExpr(IndexExpr&&) noexcept = default;
IndexExpr& IndexExpr::operator=(IndexExpr&&) noexcept = default;

IndexExpr IndexExpr::parse(const std::string& text, const Resolver& resolve) {
  IndexExpr e;
  e.root_ = Parser(text, resolve, e.buffers_).parse();
  return e;
}

int IndexExprNode::twos(const std::vector<int>& aligned) const {
  constexpr int kAll = 62;
  const auto kid = [&](size_t i) { return kids[i]->twos(aligned); };
  switch (op) {
    case Op::kSlot: return static_cast<size_t>(value) < aligned.size() ? std::min(kAll, aligned[static_cast<size_t>(value)]) : 0;
    case Op::kConst: return value == 0 ? kAll : std::min(kAll, __builtin_ctzll(static_cast<uint64_t>(value)));
    case Op::kNeg: return kid(0);
    case Op::kAdd:
    case Op::kSub: return std::min(kid(0), kid(1));
    case Op::kMul: return std::min(kAll, kid(0) + kid(1));
    case Op::kShl: return kids[1]->op == Op::kConst && kids[1]->value >= 0 && kids[1]->value < kAll
                              ? std::min<int>(kAll, kid(0) + static_cast<int>(kids[1]->value))
                              : 0;
    case Op::kBitAnd: return std::max(kid(0), kid(1));
    case Op::kTernary: return std::min(kid(1), kid(2));
    case Op::kCast: return cast == Cast::kFloat ? 0 : kid(0);
    case Op::kCall:
      return (helper == Helper::kMin || helper == Helper::kMax) && kids.size() == 2 ? std::min(kid(0), kid(1)) : 0;
    default: return 0;
  }
}

int IndexExpr::twos() const { return root_->twos({}); }

ValueRange IndexExpr::range(const std::vector<ValueRange>& slots, int index_bits, const OverflowVisitor& overflow) const {
  return root_->range(slots, index_bits, overflow);
}

IndexValue IndexExpr::eval(const std::vector<IndexValue>& env, const LoadVisitor& on_load, uint64_t block_stamp) const {
  return root_->eval(env, on_load, block_stamp);
}

Shift IndexExpr::shift(const std::vector<Shift>& slots, const std::vector<IndexValue>& first, const ShiftVisitor& on_load,
                       const std::vector<int>& aligned) const {
  return root_->shift(slots, first, aligned, on_load, true);
}

}  // namespace fusetune::codegen
