#include "planner/toeplitz.h"

#include <algorithm>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/ops.h"
#include "reference/kernels.h"

namespace fusetune::planner {
namespace {

// A value's form over its last two indices (i, j), the same for every leading index.
struct Form {
  enum class Kind { kUniform, kAffine, kDiagonal } kind = Kind::kUniform;
  int64_t rows = 1, cols = 1;
  Tensor values;                // kUniform: one element (shape {}); kDiagonal: rows + cols - 1
  int64_t a = 0, b = 0, c = 0;  // kAffine: a i + b j + c, in an integer dtype
  DType dtype = DType::kUndefined;
};

bool affine_type(DType t) { return t == DType::kI64 || t == DType::kI32; }

std::pair<int64_t, int64_t> last_two(const Shape& s) {
  const size_t r = s.size();
  return {r >= 2 ? s[r - 2] : 1, r >= 1 ? s[r - 1] : 1};
}

Form uniform(Tensor t) {
  Form f;
  f.dtype = t.dtype();
  f.values = t.reshaped({});
  return f;
}

Form affine(DType t, int64_t rows, int64_t cols, int64_t a, int64_t b, int64_t c) {
  Form f;
  f.kind = Form::Kind::kAffine;
  f.dtype = t;
  f.rows = rows;
  f.cols = cols;
  f.a = rows == 1 ? 0 : a;  // an axis of extent 1 has index 0 only
  f.b = cols == 1 ? 0 : b;
  f.c = c;
  return f;
}

// The affine form where every value a i + b j + c over its extents fits its dtype (no wrap, no
// int64 overflow: the integer rules below hold for exact arithmetic alone), else none.
std::optional<Form> checked(Form f) {
  int64_t lo = f.c, hi = f.c;
  for (const auto& [coefficient, extent] : {std::pair{f.a, f.rows}, std::pair{f.b, f.cols}}) {
    int64_t t = 0;
    if (__builtin_mul_overflow(coefficient, extent - 1, &t)) return std::nullopt;
    if (t < 0 ? __builtin_add_overflow(lo, t, &lo) : __builtin_add_overflow(hi, t, &hi)) return std::nullopt;
  }
  if (f.dtype == DType::kI32 && (lo < std::numeric_limits<int32_t>::min() || hi > std::numeric_limits<int32_t>::max())) {
    return std::nullopt;
  }
  return f;
}

// An affine form as a diagonal: where a == -b, or a row or a column (trivially Toeplitz).
std::optional<Tensor> diagonal_of(const Form& f) {
  if (f.kind == Form::Kind::kDiagonal) return f.values;
  if (f.kind != Form::Kind::kAffine || !(f.a == -f.b || f.rows == 1 || f.cols == 1)) return std::nullopt;
  std::vector<int64_t> d(static_cast<size_t>(f.rows + f.cols - 1));
  for (int64_t k = 0; k < static_cast<int64_t>(d.size()); ++k) {
    const int64_t diff = k - (f.rows - 1);  // j - i
    const int64_t i = diff < 0 ? -diff : 0, j = diff < 0 ? 0 : diff;  // an element on that diagonal
    d[static_cast<size_t>(k)] = f.a * i + f.b * j + f.c;
  }
  return Tensor::from_ints(f.dtype, {static_cast<int64_t>(d.size())}, d);
}

// An integer constant varying along one of its last two axes alone, as an arithmetic progression.
std::optional<Form> leaf(const Tensor& t) {
  if (t.numel() == 1) return uniform(t);
  if (t.numel() < 2 || !affine_type(t.dtype())) return std::nullopt;
  const Shape& s = t.shape();
  const auto [rows, cols] = last_two(s);
  for (size_t d = 0; d + 2 < s.size(); ++d) {
    if (s[d] != 1) return std::nullopt;
  }
  if (rows != 1 && cols != 1) return std::nullopt;
  const std::vector<int64_t> v = t.to_ints();
  int64_t step = 0;
  if (__builtin_sub_overflow(v[1], v[0], &step)) return std::nullopt;
  for (size_t k = 1; k < v.size(); ++k) {
    int64_t d = 0;
    if (__builtin_sub_overflow(v[k], v[k - 1], &d) || d != step) return std::nullopt;
  }
  return checked(affine(t.dtype(), rows, cols, rows == 1 ? 0 : step, rows == 1 ? step : 0, v[0]));
}

bool comparison(const std::string& op) {
  return op == "Greater" || op == "Less" || op == "GreaterOrEqual" || op == "LessOrEqual" || op == "Equal";
}

class Finder {
 public:
  Finder(const Graph& g, const std::set<int>& members) : g_(g) {
    for (int id : members) {
      for (int o : g.nodes()[static_cast<size_t>(id)].outputs) producer_[o] = id;
    }
  }

  std::optional<Form> form(int v) {
    if (auto it = memo_.find(v); it != memo_.end()) return it->second;
    std::optional<Form> f = compute(v);
    memo_[v] = f;
    return f;
  }

 private:
  std::optional<Form> compute(int v) {
    const Value& value = g_.value(v);
    if (numel(value.shape) == 0) return std::nullopt;
    if (value.is_constant()) return leaf(*value.data);
    const auto p = producer_.find(v);
    if (p == producer_.end()) return std::nullopt;
    const Node& n = g_.nodes()[static_cast<size_t>(p->second)];
    if (n.inputs.empty() || n.outputs.size() != 1) return std::nullopt;
    std::vector<Form> in;
    for (int x : n.inputs) {
      if (x == kNoValue) return std::nullopt;
      std::optional<Form> f = form(x);
      if (!f) return std::nullopt;
      in.push_back(std::move(*f));
    }
    const auto [rows, cols] = last_two(value.shape);
    const OpSchema* schema = find_op(n.op);
    if (n.op == "Reshape" || n.op == "Expand") return moved(in[0], rows, cols);
    if (n.op == "Slice") return sliced(n, in[0], rows, cols);
    if (n.op == "Transpose") return transposed(n, in[0], rows, cols);
    if (schema == nullptr || schema->kind != OpKind::kElementwise) return std::nullopt;
    if (std::optional<Form> f = integer_arithmetic(n, in, value.dtype, rows, cols)) return f;
    return elementwise(n, in, value.dtype, rows, cols);
  }

  // Reshape or Expand: the last two extents kept, or an affine value broadcast along one of 1.
  static std::optional<Form> moved(Form f, int64_t rows, int64_t cols) {
    if (f.kind == Form::Kind::kUniform || (f.rows == rows && f.cols == cols)) return f;
    if (f.kind == Form::Kind::kAffine && (f.rows == rows || f.rows == 1) && (f.cols == cols || f.cols == 1)) {
      return checked(affine(f.dtype, rows, cols, f.a, f.b, f.c));
    }
    return std::nullopt;
  }

  std::optional<Form> sliced(const Node& n, Form f, int64_t rows, int64_t cols) const {
    if (f.kind == Form::Kind::kUniform) return f;
    const std::vector<int64_t> starts = n.attrs.ints("starts"), steps = n.attrs.ints("steps");
    const size_t r = starts.size();
    if (r < 2 || steps[r - 1] != 1 || steps[r - 2] != 1) return std::nullopt;
    const int64_t si = starts[r - 2], sj = starts[r - 1];
    if (f.kind == Form::Kind::kAffine) {
      int64_t ti = 0, tj = 0, c = 0;
      if (__builtin_mul_overflow(f.a, si, &ti) || __builtin_mul_overflow(f.b, sj, &tj) || __builtin_add_overflow(f.c, ti, &c) ||
          __builtin_add_overflow(c, tj, &c)) {
        return std::nullopt;
      }
      return checked(affine(f.dtype, rows, cols, f.a, f.b, c));
    }
    // Diagonal j' - i' of the slice is diagonal j' - i' + sj - si of the input.
    const int64_t first = -(rows - 1) + sj - si + (f.rows - 1);
    Node take;
    take.op = "Slice";
    take.attrs.set("starts", std::vector<int64_t>{first});
    take.attrs.set("ends", std::vector<int64_t>{first + rows + cols - 1});
    take.attrs.set("steps", std::vector<int64_t>{1});
    const Tensor* arg = &f.values;
    f.values = std::move(reference::run_node(take, {&arg, 1})[0]);
    f.rows = rows;
    f.cols = cols;
    return f;
  }

  static std::optional<Form> transposed(const Node& n, Form f, int64_t rows, int64_t cols) {
    const std::vector<int64_t> perm = n.attrs.ints("perm");
    const int64_t r = static_cast<int64_t>(perm.size());
    if (f.kind == Form::Kind::kUniform) return f;
    if (r < 2) return std::nullopt;
    if (perm[static_cast<size_t>(r - 2)] == r - 2 && perm[static_cast<size_t>(r - 1)] == r - 1) return f;
    if (f.kind == Form::Kind::kAffine && perm[static_cast<size_t>(r - 2)] == r - 1 && perm[static_cast<size_t>(r - 1)] == r - 2) {
      return affine(f.dtype, rows, cols, f.b, f.a, f.c);
    }
    return std::nullopt;
  }

  // Integer values affine in the indices stay so through Add, Sub, Neg, Mul by a scalar and
  // integer Casts, in exact arithmetic (a form whose values would wrap is none); a comparison of
  // two such values is a comparison of their difference, in int64, with zero.
  static std::optional<Form> integer_arithmetic(const Node& n, const std::vector<Form>& in, DType t, int64_t rows,
                                                int64_t cols) {
    const auto as_affine = [&](const Form& f) -> std::optional<Form> {
      if (!affine_type(f.dtype)) return std::nullopt;
      if (f.kind == Form::Kind::kAffine) return f;
      if (f.kind == Form::Kind::kUniform) return affine(f.dtype, 1, 1, 0, 0, f.values.to_ints()[0]);
      return std::nullopt;
    };
    const bool any_affine = std::any_of(in.begin(), in.end(), [](const Form& f) { return f.kind == Form::Kind::kAffine; });
    if (!any_affine) return std::nullopt;
    if (n.op == "Neg" || (n.op == "Cast" && affine_type(t))) {
      const std::optional<Form> x = as_affine(in[0]);
      if (!x) return std::nullopt;
      if (n.op == "Cast") return checked(affine(t, rows, cols, x->a, x->b, x->c));
      int64_t a = 0, b = 0, c = 0;
      if (__builtin_sub_overflow(int64_t{0}, x->a, &a) || __builtin_sub_overflow(int64_t{0}, x->b, &b) ||
          __builtin_sub_overflow(int64_t{0}, x->c, &c)) {
        return std::nullopt;
      }
      return checked(affine(t, rows, cols, a, b, c));
    }
    if (in.size() != 2) return std::nullopt;
    const std::optional<Form> x = as_affine(in[0]), y = as_affine(in[1]);
    if (!x || !y) return std::nullopt;
    int64_t a = 0, b = 0, c = 0;
    if (n.op == "Add" || n.op == "Sub" || comparison(n.op)) {
      const bool add = n.op == "Add";
      if (add ? (__builtin_add_overflow(x->a, y->a, &a) || __builtin_add_overflow(x->b, y->b, &b) || __builtin_add_overflow(x->c, y->c, &c))
              : (__builtin_sub_overflow(x->a, y->a, &a) || __builtin_sub_overflow(x->b, y->b, &b) || __builtin_sub_overflow(x->c, y->c, &c))) {
        return std::nullopt;
      }
      if (!comparison(n.op)) return checked(affine(t, rows, cols, a, b, c));
      const std::optional<Form> d = checked(affine(DType::kI64, rows, cols, a, b, c));
      if (!d) return std::nullopt;
      return elementwise(n, {*d, uniform(Tensor::scalar_int(DType::kI64, 0))}, t, rows, cols);
    }
    // Mul of an affine value by a scalar (as the operands came, before as_affine).
    if (n.op == "Mul" && (in[0].kind == Form::Kind::kAffine) != (in[1].kind == Form::Kind::kAffine)) {
      const Form& k = in[0].kind == Form::Kind::kAffine ? *y : *x;
      const Form& f = in[0].kind == Form::Kind::kAffine ? *x : *y;
      if (__builtin_mul_overflow(f.a, k.c, &a) || __builtin_mul_overflow(f.b, k.c, &b) || __builtin_mul_overflow(f.c, k.c, &c)) {
        return std::nullopt;
      }
      return checked(affine(t, rows, cols, a, b, c));
    }
    return std::nullopt;
  }

  // Any other element-wise op on the diagonals (and scalars) of operands at the result's extents.
  static std::optional<Form> elementwise(const Node& n, const std::vector<Form>& in, DType t, int64_t rows, int64_t cols) {
    std::vector<Tensor> args;
    bool diagonal = false;
    for (const Form& f : in) {
      if (f.kind == Form::Kind::kUniform) {
        args.push_back(f.values);
        continue;
      }
      if (f.rows != rows || f.cols != cols) return std::nullopt;
      std::optional<Tensor> d = diagonal_of(f);
      if (!d) return std::nullopt;
      args.push_back(std::move(*d));
      diagonal = true;
    }
    std::vector<const Tensor*> ptrs;
    for (const Tensor& a : args) ptrs.push_back(&a);
    Form out;
    out.dtype = t;
    out.values = std::move(reference::run_node(n, ptrs)[0]);
    if (!diagonal) return out;
    out.kind = Form::Kind::kDiagonal;
    out.rows = rows;
    out.cols = cols;
    return out;
  }

  const Graph& g_;
  std::map<int, int> producer_;
  std::map<int, std::optional<Form>> memo_;
};

}  // namespace

std::optional<Toeplitz> toeplitz_of(const Graph& g, const std::set<int>& members, int v) {
  std::optional<Form> f = Finder(g, members).form(v);
  if (!f) return std::nullopt;
  const auto [rows, cols] = last_two(g.value(v).shape);
  if (f->kind == Form::Kind::kUniform) {
    // Every diagonal holds the one value.
    Node fill;
    fill.op = "Expand";
    fill.attrs.set("shape", std::vector<int64_t>{rows + cols - 1});
    const Tensor* arg = &f->values;
    return Toeplitz{rows, cols, std::move(reference::run_node(fill, {&arg, 1})[0])};
  }
  std::optional<Tensor> d = diagonal_of(*f);
  if (!d) return std::nullopt;
  return Toeplitz{rows, cols, std::move(*d)};
}

}  // namespace fusetune::planner
