#include "planner/index_expr.h"

#include <algorithm>
#include <limits>

#include "core/error.h"
#include "core/integer.h"

namespace fusetune::planner {

namespace {

int64_t floor_mod(int64_t a, int64_t b) { return a - floor_div(a, b) * b; }

}  // namespace

IndexExpr IndexExpr::make(Kind k, int64_t value, std::vector<IndexExpr> args) {
  return IndexExpr(std::make_shared<const Node>(Node{k, value, std::move(args)}));
}

IndexExpr IndexExpr::constant(int64_t v) { return make(Kind::kConst, v, {}); }
IndexExpr IndexExpr::var(int v) { return make(Kind::kVar, v, {}); }
IndexExpr IndexExpr::data(int64_t extent) { return make(Kind::kData, extent, {}); }

IndexExpr operator+(const IndexExpr& a, const IndexExpr& b) {
  if (a.is_const() && b.is_const()) return IndexExpr::constant(a.value() + b.value());
  if (a.is_const() && a.value() == 0) return b;
  if (b.is_const() && b.value() == 0) return a;
  return IndexExpr::make(IndexExpr::Kind::kAdd, 0, {a, b});
}

IndexExpr operator*(const IndexExpr& a, int64_t c) {
  if (c == 0) return IndexExpr::constant(0);
  if (c == 1) return a;
  if (a.is_const()) return IndexExpr::constant(a.value() * c);
  return IndexExpr::make(IndexExpr::Kind::kMul, c, {a});
}

IndexExpr IndexExpr::floordiv(int64_t d) const {
  check(d > 0, "index division by ", d);
  if (d == 1) return *this;
  if (is_const()) return constant(floor_div(value(), d));
  return make(Kind::kFloorDiv, d, {*this});
}

IndexExpr IndexExpr::mod(int64_t d) const {
  check(d > 0, "index modulo by ", d);
  if (d == 1) return constant(0);
  if (is_const()) return constant(floor_mod(value(), d));
  return make(Kind::kMod, d, {*this});
}

bool IndexExpr::is_affine() const {
  switch (kind()) {
    case Kind::kConst:
    case Kind::kVar: return true;
    case Kind::kAdd: return node_->args[0].is_affine() && node_->args[1].is_affine();
    case Kind::kMul: return node_->args[0].is_affine();
    default: return false;
  }
}

bool IndexExpr::uses(int v) const {
  if (kind() == Kind::kVar) return value() == v;
  return std::any_of(node_->args.begin(), node_->args.end(), [v](const IndexExpr& a) { return a.uses(v); });
}

bool IndexExpr::has_data() const {
  if (kind() == Kind::kData) return true;
  return std::any_of(node_->args.begin(), node_->args.end(), [](const IndexExpr& a) { return a.has_data(); });
}

int64_t IndexExpr::eval(std::span<const int64_t> vars) const {
  const auto& a = node_->args;
  switch (kind()) {
    case Kind::kConst: return value();
    case Kind::kVar: return vars[static_cast<size_t>(value())];
    case Kind::kAdd: return a[0].eval(vars) + a[1].eval(vars);
    case Kind::kMul: return a[0].eval(vars) * value();
    case Kind::kFloorDiv: return floor_div(a[0].eval(vars), value());
    case Kind::kMod: return floor_mod(a[0].eval(vars), value());
    case Kind::kData: break;
  }
  fail("a run-time index has no static value");
}

Interval IndexExpr::bounds(std::span<const Interval> vars) const {
  const auto& a = node_->args;
  switch (kind()) {
    case Kind::kConst: return {value(), value()};
    case Kind::kVar: return vars[static_cast<size_t>(value())];
    case Kind::kAdd: {
      const Interval x = a[0].bounds(vars), y = a[1].bounds(vars);
      if (x.empty() || y.empty()) return {0, -1};
      return {x.lo + y.lo, x.hi + y.hi};
    }
    case Kind::kMul: {
      const Interval x = a[0].bounds(vars);
      if (x.empty()) return x;
      const int64_t p = x.lo * value(), q = x.hi * value();
      return {std::min(p, q), std::max(p, q)};
    }
    case Kind::kFloorDiv: {
      const Interval x = a[0].bounds(vars);
      if (x.empty()) return x;
      return {floor_div(x.lo, value()), floor_div(x.hi, value())};
    }
    case Kind::kMod: {
      const Interval x = a[0].bounds(vars);
      if (x.empty()) return x;
      if (floor_div(x.lo, value()) == floor_div(x.hi, value())) return {floor_mod(x.lo, value()), floor_mod(x.hi, value())};
      return {0, value() - 1};
    }
    case Kind::kData: return {0, value() - 1};
  }
  return {0, -1};
}

std::string IndexExpr::str(const std::function<std::string(int)>& var_name) const {
  const auto& a = node_->args;
  switch (kind()) {
    case Kind::kConst: return std::to_string(value());
    case Kind::kVar: return var_name(static_cast<int>(value()));
    case Kind::kAdd: {
      if (a[1].is_const() && a[1].value() < 0) return "(" + a[0].str(var_name) + " - " + std::to_string(-a[1].value()) + ")";
      return "(" + a[0].str(var_name) + " + " + a[1].str(var_name) + ")";
    }
    case Kind::kMul: return "(" + a[0].str(var_name) + " * " + std::to_string(value()) + ")";
    // Index arithmetic in generated code is on non-negative values where division and modulo
    // are emitted; negative operands only arise inside guarded (padded) accesses.
    case Kind::kFloorDiv: return "(" + a[0].str(var_name) + " / " + std::to_string(value()) + ")";
    case Kind::kMod: return "(" + a[0].str(var_name) + " % " + std::to_string(value()) + ")";
    case Kind::kData: return "<data>";
  }
  return "?";
}

std::string index_literal(int64_t v) {
  const bool fits = v >= std::numeric_limits<int32_t>::min() && v <= std::numeric_limits<int32_t>::max();
  return std::to_string(v) + (fits ? "" : "LL");
}

std::string IndexExpr::code(const std::function<std::string(int)>& var_name) const {
  const auto& a = node_->args;
  switch (kind()) {
    case Kind::kConst: return index_literal(value());
    case Kind::kVar: return var_name(static_cast<int>(value()));
    case Kind::kAdd: return "(" + a[0].code(var_name) + " + " + a[1].code(var_name) + ")";
    case Kind::kMul: return "(" + a[0].code(var_name) + " * " + index_literal(value()) + ")";
    case Kind::kFloorDiv: return "ft_fdiv(" + a[0].code(var_name) + ", " + index_literal(value()) + ")";
    case Kind::kMod: return "ft_fmod(" + a[0].code(var_name) + ", " + index_literal(value()) + ")";
    case Kind::kData: break;
  }
  fail("a run-time index has no code form; the caller substitutes it");
}

std::pair<std::string, std::string> IndexExpr::bounds_code(const std::function<std::string(int)>& var_lo,
                                                           const std::function<std::string(int)>& var_hi) const {
  const auto& a = node_->args;
  const std::string c = index_literal(value());
  switch (kind()) {
    case Kind::kConst: return {c, c};
    case Kind::kVar: return {var_lo(static_cast<int>(value())), var_hi(static_cast<int>(value()))};
    case Kind::kAdd: {
      const auto x = a[0].bounds_code(var_lo, var_hi), y = a[1].bounds_code(var_lo, var_hi);
      return {"(" + x.first + " + " + y.first + ")", "(" + x.second + " + " + y.second + ")"};
    }
    case Kind::kMul: {
      const auto x = a[0].bounds_code(var_lo, var_hi);
      if (value() >= 0) return {"(" + x.first + " * " + c + ")", "(" + x.second + " * " + c + ")"};
      return {"(" + x.second + " * " + c + ")", "(" + x.first + " * " + c + ")"};
    }
    case Kind::kFloorDiv: {
      const auto x = a[0].bounds_code(var_lo, var_hi);
      return {"ft_fdiv(" + x.first + ", " + c + ")", "ft_fdiv(" + x.second + ", " + c + ")"};
    }
    case Kind::kMod: {
      const auto x = a[0].bounds_code(var_lo, var_hi);
      const std::string same = "(ft_fdiv(" + x.first + ", " + c + ") == ft_fdiv(" + x.second + ", " + c + "))";
      return {"(" + same + " ? ft_fmod(" + x.first + ", " + c + ") : 0)",
              "(" + same + " ? ft_fmod(" + x.second + ", " + c + ") : " + index_literal(value() - 1) + ")"};
    }
    case Kind::kData: return {"0", index_literal(value() - 1)};
  }
  return {"0", "-1"};
}

}  // namespace fusetune::planner
