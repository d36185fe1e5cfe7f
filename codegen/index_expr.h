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

struct IndexExprNode;

class IndexExpr {
 public:
  // What a name in an expression is, as the caller binds it.
  struct Binding {
    enum class Kind { kSlot, kBuffer, kLocalArray, kUnknown } kind = Kind::kUnknown;
    int index = -1;  // kSlot: the environment slot; kBuffer: the buffer's id
    bool invariant = false;  // kSlot: the same value for every thread of a block (a block-uniform let)
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

  // The buffers the expression subscripts (ids, possibly repeated).
  const std::vector<int>& buffers() const { return buffers_; }

 private:
  std::unique_ptr<IndexExprNode> root_;
  std::vector<int> buffers_;
};

}  // namespace fusetune::codegen
