#include "importer/lower_grid_sample.h"

#include <functional>

#include "core/error.h"

namespace fusetune::importer {

namespace {

// Element-wise arithmetic on float32 values of the coordinate computations.
struct Arith {
  NodeLowering& L;

  int c(double v) const { return L.constant(Tensor::scalar_float(DType::kF32, static_cast<float>(v))); }
  int op(const char* name, int a, int b) const { return L.emit(name, {a, b}); }
  int add(int a, int b) const { return op("Add", a, b); }
  int sub(int a, int b) const { return op("Sub", a, b); }
  int mul(int a, int b) const { return op("Mul", a, b); }
  int div(int a, int b) const { return op("Div", a, b); }
  int floor(int a) const { return L.emit("Floor", {a}); }
  int where(int cond, int a, int b) const { return L.emit("Where", {cond, a, b}); }
  int less(int a, int b) const { return op("Less", a, b); }
  int greater(int a, int b) const { return op("Greater", a, b); }
  int clamp(int v, double lo, double hi) const { return clip_between(L, v, lo, hi); }
  // x reflected by the nearer border until inside [lo, hi] (onnx's _gs_reflect): outside by dx,
  // n = floor(dx / range) whole ranges and r = dx - n x range left over, from the border crossed
  // when n is even, from the other one when odd.
  int reflect(int x, double lo, double hi) const {
    const double range = hi - lo;
    const auto side = [&](int dx, double near, double far, double sign) {
      const int n = floor(div(dx, c(range)));
      const int r = sub(dx, mul(n, c(range)));
      const int even = op("Equal", sub(n, mul(floor(div(n, c(2.0))), c(2.0))), c(0.0));
      return where(even, add(c(near), mul(c(sign), r)), add(c(far), mul(c(-sign), r)));
    };
    const int below = side(sub(c(lo), x), lo, hi, 1.0), above = side(sub(x, c(hi)), hi, lo, -1.0);
    return where(less(x, c(lo)), below, where(greater(x, c(hi)), above, x));
  }
};

// Keys' cubic convolution coefficient (A = -0.75) of a tap at distance t (onnx's
// _gs_get_cubic_coeffs): t in [1, 2] for the outer taps, [0, 1] for the inner ones.
int cubic_outer(const Arith& a, int t) {  // ((A t - 5A) t + 8A) t - 4A
  constexpr double A = -0.75;
  return a.sub(a.mul(a.add(a.mul(a.sub(a.mul(a.c(A), t), a.c(5 * A)), t), a.c(8 * A)), t), a.c(4 * A));
}
int cubic_inner(const Arith& a, int t) {  // ((A + 2) t - (A + 3)) t t + 1
  constexpr double A = -0.75;
  return a.add(a.mul(a.mul(a.sub(a.mul(a.c(A + 2), t), a.c(A + 3)), t), t), a.c(1.0));
}

struct Tap {
  int index = kNoValue;   // int64 index along the axis, inside it
  int weight = kNoValue;  // float32 coefficient (masked to 0 outside the input for zeros padding)
};

}  // namespace

void grid_sample(NodeLowering& L) {
  const Shape xs = L.shape(0), gs = L.shape(1);
  check(xs.size() >= 3, "X must be at least 3-D (N, C, spatial...), got ", shape_str(xs));
  const size_t dims = xs.size() - 2;
  check(gs.size() == dims + 2 && gs.back() == static_cast<int64_t>(dims) && gs[0] == xs[0], "grid of shape ", shape_str(gs),
        " does not fit X of shape ", shape_str(xs), ": it must be [N, output spatial..., ", dims, "]");
  std::string mode = L.attr_s("mode", L.opset() < 20 ? "bilinear" : "linear");
  if (mode == "bilinear") mode = "linear";
  if (mode == "bicubic") mode = "cubic";
  check(mode == "linear" || mode == "nearest" || mode == "cubic", "mode '", mode, "' is not one of linear, nearest, cubic");
  const std::string padding = L.attr_s("padding_mode", "zeros");
  check(padding == "zeros" || padding == "border" || padding == "reflection", "padding_mode '", padding,
        "' is not one of zeros, border, reflection");
  const bool align = L.attr_i("align_corners", 0) != 0;
  const Arith a{L};
  // The grid as float32 [N, 1, O...] per axis: coordinate D - 1 - d of its last axis is axis d's.
  const int grid = cast_to(L, L.input(1), DType::kF32);
  Shape coord_shape = {gs[0], 1};
  coord_shape.insert(coord_shape.end(), gs.begin() + 1, gs.end() - 1);
  std::vector<std::vector<Tap>> taps(dims);
  for (size_t d = 0; d < dims; ++d) {
    const auto extent = static_cast<double>(xs[d + 2]);
    const auto at = static_cast<int64_t>(dims - 1 - d);
    const int g = L.reshape(slice_last_axis(L, grid, at, at + 1), coord_shape);
    int x = align ? a.mul(a.div(a.add(g, a.c(1.0)), a.c(2.0)), a.c(extent - 1))
                  : a.div(a.sub(a.mul(a.add(g, a.c(1.0)), a.c(extent)), a.c(1.0)), a.c(2.0));
    if (mode == "nearest") x = L.emit("Round", {x});
    const double lo = align ? 0.0 : -0.5, hi = align ? extent - 1 : extent - 0.5;
    if (padding != "zeros") {
      const int outside = L.emit("Or", {a.less(x, a.c(lo)), a.greater(x, a.c(hi))});
      x = a.where(outside, padding == "border" ? a.clamp(x, 0, extent - 1) : a.reflect(x, lo, hi), x);
    }
    // A tap at float index i (integral): inside the axis by the padding mode, as int64.
    const auto tap = [&](int i, int weight) {
      Tap t;
      if (padding == "zeros") {
        const int inside = L.emit("And", {L.emit("GreaterOrEqual", {i, a.c(0.0)}), a.less(i, a.c(extent))});
        t.weight = a.where(inside, weight, a.c(0.0));
        i = a.clamp(i, 0, extent - 1);
      } else {
        t.weight = weight;
        i = padding == "border" ? a.clamp(i, 0, extent - 1) : a.reflect(i, lo, hi);
      }
      t.index = cast_to(L, i, DType::kI64);  // truncates toward zero, as int() does
      return t;
    };
    if (mode == "nearest") {
      // The rounded coordinate truncated (an in-range reflection may leave a half), then padded.
      taps[d].push_back(tap(cast_to(L, cast_to(L, x, DType::kI64), DType::kF32), a.c(1.0)));
      continue;
    }
    const int x0 = a.floor(x), t = a.sub(x, x0);
    if (mode == "linear") {
      taps[d].push_back(tap(x0, a.sub(a.c(1.0), t)));
      taps[d].push_back(tap(a.add(x0, a.c(1.0)), t));
    } else {
      const int one_minus = a.sub(a.c(1.0), t);
      taps[d].push_back(tap(a.sub(x0, a.c(1.0)), cubic_outer(a, a.add(t, a.c(1.0)))));
      taps[d].push_back(tap(x0, cubic_inner(a, t)));
      taps[d].push_back(tap(a.add(x0, a.c(1.0)), cubic_inner(a, one_minus)));
      taps[d].push_back(tap(a.add(x0, a.c(2.0)), cubic_outer(a, a.add(one_minus, a.c(1.0)))));
    }
  }
  // Each (n, c) plane's first element in X flattened: [N, C, 1...].
  int64_t plane = 1;
  for (size_t d = 0; d < dims; ++d) plane *= xs[d + 2];
  Shape base_shape(xs.size(), 1);
  base_shape[0] = xs[0];
  base_shape[1] = xs[1];
  std::vector<int64_t> base(static_cast<size_t>(xs[0] * xs[1]));
  for (size_t k = 0; k < base.size(); ++k) base[k] = static_cast<int64_t>(k) * plane;
  const int bases = L.constant(Tensor::from_ints(DType::kI64, base_shape, base));
  const int flat = L.reshape(L.input(0), {numel(xs)});
  const DType xt = L.val(0).dtype;
  Attributes gather;
  gather.set("axis", int64_t{0});
  // Every combination of one tap per axis: its flat offset and weight, gathered and summed.
  int sum = kNoValue;
  std::function<void(size_t, int, int)> combine = [&](size_t d, int offset, int weight) {
    if (d == dims) {
      const int value = L.emit("Gather", {flat, a.add(bases, offset)}, gather);
      const int term = L.emit("Mul", {value, cast_to(L, weight, xt)});
      sum = sum == kNoValue ? term : L.emit("Add", {sum, term});
      return;
    }
    int64_t stride = 1;
    for (size_t e = d + 1; e < dims; ++e) stride *= xs[e + 2];
    for (const Tap& t : taps[d]) {
      const int along = stride == 1 ? t.index : a.mul(t.index, L.constant(Tensor::scalar_int(DType::kI64, stride)));
      combine(d + 1, offset == kNoValue ? along : a.add(offset, along), weight == kNoValue ? t.weight : a.mul(weight, t.weight));
    }
  };
  combine(0, kNoValue, kNoValue);
  L.set_output(0, sum);
}

}  // namespace fusetune::importer
