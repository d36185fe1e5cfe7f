// Integer evaluation of the Kernel IR's scalar expressions, for analyses that must know which
// thread touches which element of a buffer (codegen/barrier_ownership.h).
//
// Takes the C expressions the lowering stages write (codegen/kernel_ir.h): integer and float
// literals, variables, C's unary and binary operators, casts, the ternary, calls of the prelude's
// helpers (codegen/emit_common.h) and of the math library, subscripts of buffers and of
// thread-local arrays, float4 components. parse() reads one into a tree once, its variables bound
// to slots of an environment by the caller's `slot` function; eval() gives a known 64-bit integer
// or unknown. Unknown are: float values (literals, float variables, casts to float, math calls),
// loaded values and anything computed from an unknown, except that &&, || and ?: evaluate only
// the operand a known condition selects, as C does. Integer casts truncate as C's do on the
// platforms CUDA targets; the integer helpers (ft_min, ft_max, ft_fdiv, ft_fmod, ft_idiv, ...)
// compute what the prelude's do. Every subscript of a buffer evaluated reports its buffer and
// index (or unknown index) to the caller; under an unknown condition both operands of ?:, && and
// || are evaluated, so the loads reported over-approximate what the thread does. Guarantees: a
// value reported known is the value the CUDA text computes; parse() fails (core/error.h) naming
// the expression on anything outside this grammar, so an analysis never guesses.
// range() bounds an expression's values from bounds of its variables (interval arithmetic, exact
// where each operand's extremes give the result's, wider elsewhere) and types it as C does: each
// node is not an integer, a 32-bit int or 64-bit, from its literals' suffixes, the casts, the
// variables' and buffers' types (Binding::bits, and the index type ft_i's width the caller says)
// and C's arithmetic conversions; the prelude's ft_min, ft_max, ft_fdiv and ft_fmod are templates
// that compute in their operands' common type. Every node computed in 32 bits whose values may
// leave int's range is reported (codegen/index_width.h decides ft_i's width with it).
// A divisor whose bounds reach zero from one side is taken as nonzero: a division runs only where
// its divisor is not zero (C leaves it undefined; the host executor traps on one).
// Guarantees: the value the C text computes lies in the bounds returned, when no node was
// reported.
// shift() relates an expression's values under two environments (two blocks of one kernel) from
// how the variables relate, without enumerating threads: the same value in both, or the one
// value plus a known constant, or no known relation (codegen/barrier_ownership.h's translated
// blocks). Guarantees: a relation reported holds for every value of the variables related so.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace fusetune::codegen {

// A value: known integer, or unknown.
using IndexValue = std::optional<int64_t>;

// How an expression's value in one environment relates to its value in another: the same (both
// unknown, or equal), the other's plus `by` (or both unknown), or not known to relate.
struct Shift {
  enum class Kind { kSame, kBy, kOther } kind = Kind::kSame;
  int64_t by = 0;

  static Shift same() { return {}; }
  static Shift other() { return {Kind::kOther, 0}; }
  static Shift of(int64_t d) { return d == 0 ? same() : Shift{Kind::kBy, d}; }
  bool known() const { return kind != Kind::kOther; }
  int64_t offset() const { return kind == Kind::kBy ? by : 0; }
  bool operator==(const Shift& o) const { return kind == o.kind && offset() == o.offset(); }
  // The relation that holds for both: equal ones, else none.
  Shift join(const Shift& o) const { return *this == o ? *this : other(); }
};

// Bounds of an expression's values and its C type: bits 0 (not an integer: a float, a pointer, a
// value of unknown type), 32 (int) or 64 (long long). Unknown bounds are int64's whole range.
struct ValueRange {
  int64_t lo = INT64_MIN;
  int64_t hi = INT64_MAX;
  int bits = 64;

  static ValueRange point(int64_t v, int bits = 64) { return {v, v, bits}; }
  static ValueRange of(int64_t lo, int64_t hi, int bits = 64) { return {lo, hi, bits}; }
  bool fits_int() const { return lo >= INT32_MIN && hi <= INT32_MAX; }
  bool is_point() const { return lo == hi; }
};

struct IndexExprNode;

class IndexExpr {
 public:
  // What a name in an expression is, as the caller binds it.
  struct Binding {
    enum class Kind { kSlot, kBuffer, kLocalArray, kUnknown } kind = Kind::kUnknown;
    int index = -1;  // kSlot: the environment slot; kBuffer: the buffer's id
    bool invariant = false;  // kSlot: the same value for every thread of a block (a block-uniform let)
    // kBuffer, kLocalArray: the integer width of an element in C arithmetic (0: not an integer,
    // 32: int or narrower, promoted to int; 64: long long); range() reads it (slots' widths come
    // with their bounds).
    int bits = 0;
  };
  using Resolver = std::function<Binding(const std::string& name)>;
  // A subscript of buffer `buffer` at `index` (nullopt: an index that is not known).
  using LoadVisitor = std::function<void(int buffer, IndexValue index)>;

  IndexExpr();
  ~IndexExpr();
  IndexExpr(IndexExpr&&) noexcept;
  IndexExpr& operator=(IndexExpr&&) noexcept;

  // Parses `text`; names resolve through `resolve` (called once per name occurrence).
  static IndexExpr parse(const std::string& text, const Resolver& resolve);

  // The value under `env` (slot values), reporting the buffer loads it makes to `on_load`.
  // Subexpressions of invariant slots and constants only are computed once per `block_stamp`
  // (the caller's count of blocks: a new stamp whenever the invariant slots change).
  IndexValue eval(const std::vector<IndexValue>& env, const LoadVisitor& on_load, uint64_t block_stamp = 0) const;

  // A subscript of buffer `buffer` whose index in the second environment relates so to its index
  // in the first (kOther also for a subscript made in one environment and perhaps not the other).
  using ShiftVisitor = std::function<void(int buffer, Shift index)>;

  // How the value under a second environment relates to the value under a first, given how each
  // slot's values relate (`slots`) and the first environment's invariant slots (`first`, for the
  // factors a shifted value is multiplied by). Integer casts, divisions, comparisons and helpers
  // of a shifted value relate by nothing known, except where `aligned` says slot s's values in
  // the first environment are multiples of 2^aligned[s] (a run's first element, codegen/stages/
  // context.h along_reads): a value x moved by 0 <= d < 2^t, compared with or floor-divided by
  // (ft_fdiv, ft_fmod) a value y the same in both, both multiples of 2^t (twos() with the slots'
  // bits), compares as x and divides as x (the remainder moved by d); a branch on a condition not
  // the same in both reports its subscripts unrelated.
  Shift shift(const std::vector<Shift>& slots, const std::vector<IndexValue>& first, const ShiftVisitor& on_load,
              const std::vector<int>& aligned = {}) const;

  // The bounds and C type of the value under variables bounded by `slots` (a slot's bits: its
  // variable's type), with ft_i `index_bits` wide; `overflow` is called, with what overflows, for
  // each node computed in 32 bits that may leave int's range (casts to ft_i included when it is
  // int).
  using OverflowVisitor = std::function<void(const std::string& what)>;
  ValueRange range(const std::vector<ValueRange>& slots, int index_bits, const OverflowVisitor& overflow) const;

  // The trailing zero bits every value of the expression has, whatever its variables (each taken
  // as any integer: none known), capped at 62 (zero has them all): sums and differences keep the
  // fewer of their operands', products add them, shifts by a literal add it, truncating integer
  // casts keep them (the low bits survive), anything else has none known. So the value is a
  // multiple of 2^twos() (the alignment of a shared-memory index, codegen/verify_ir.h).
  int twos() const;

  // The buffers the expression subscripts (ids, possibly repeated).
  const std::vector<int>& buffers() const { return buffers_; }

 private:
  std::unique_ptr<IndexExprNode> root_;
  std::vector<int> buffers_;
};

}  // namespace fusetune::codegen
