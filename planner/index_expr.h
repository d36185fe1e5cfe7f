// IndexExpr: the index arithmetic of tensor expressions. An expression over integer iteration
// variables (a tensor expression's output axes, then its reduction axes) built from constants,
// addition, multiplication by a constant, floor division and modulo by a positive constant, and
// "data" leaves standing for an index read from a tensor at run time (Gather) or another access
// the planner does not model exactly (Resize, reflect padding).
//
// Guarantees: simplifying constructors (x*1 -> x, x+0 -> x, constant folding); eval() computes the
// exact index for given variable values (data leaves excluded); bounds() returns an interval that
// contains every value the expression takes when each variable ranges over its interval (exact for
// affine expressions of distinct variables, conservative otherwise; data leaves give their whole
// extent); str() prints a C expression in which variable v is named by the caller.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace fusetune::planner {

struct Interval {
  int64_t lo = 0;
  int64_t hi = -1;  // inclusive; lo > hi is empty
  bool empty() const { return lo > hi; }
  int64_t size() const { return empty() ? 0 : hi - lo + 1; }
  bool operator==(const Interval&) const = default;
};

// An integer literal of generated index arithmetic: a plain (int) literal when the value fits 32
// bits, so that the arithmetic it meets keeps the width of its other operand (codegen/index_width.h
// decides the width of the kernels' index type), with the LL suffix beyond.
std::string index_literal(int64_t v);

class IndexExpr {
 public:
  enum class Kind { kConst, kVar, kAdd, kMul, kFloorDiv, kMod, kData };

  IndexExpr() : IndexExpr(constant(0)) {}
  static IndexExpr constant(int64_t v);
  static IndexExpr var(int v);
  // A run-time index in [0, extent).
  static IndexExpr data(int64_t extent);

  friend IndexExpr operator+(const IndexExpr& a, const IndexExpr& b);
  friend IndexExpr operator-(const IndexExpr& a, int64_t c) { return a + constant(-c); }
  friend IndexExpr operator+(const IndexExpr& a, int64_t c) { return a + constant(c); }
  friend IndexExpr operator*(const IndexExpr& a, int64_t c);
  IndexExpr floordiv(int64_t d) const;
  IndexExpr mod(int64_t d) const;

  Kind kind() const { return node_->kind; }
  int64_t value() const { return node_->value; }  // constant, variable id, divisor or data extent
  bool is_const() const { return kind() == Kind::kConst; }
  bool is_var(int v) const { return kind() == Kind::kVar && value() == v; }
  // True if the expression is affine in the variables with no data leaves, div or mod.
  bool is_affine() const;
  // True if variable v occurs.
  bool uses(int v) const;
  bool has_data() const;

  int64_t eval(std::span<const int64_t> vars) const;
  Interval bounds(std::span<const Interval> vars) const;
  std::string str(const std::function<std::string(int)>& var_name) const;
  // The same as code valid in generated kernels: floor division and modulo through the prelude's
  // ft_fdiv/ft_fmod, so negative operands (inside padded accesses) divide correctly.
  std::string code(const std::function<std::string(int)>& var_name) const;
  // Code for the bounds of this expression given code for each variable's inclusive bounds.
  std::pair<std::string, std::string> bounds_code(const std::function<std::string(int)>& var_lo,
                                                  const std::function<std::string(int)>& var_hi) const;

 private:
  struct Node {
    Kind kind;
    int64_t value;
    std::vector<IndexExpr> args;
  };
  explicit IndexExpr(std::shared_ptr<const Node> n) : node_(std::move(n)) {}
  static IndexExpr make(Kind k, int64_t value, std::vector<IndexExpr> args);
  std::shared_ptr<const Node> node_;
};

}  // namespace fusetune::planner
