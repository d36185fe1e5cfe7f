// Reference element-wise ops: unary maps, broadcasting binary ops, comparisons, Where, Cast and the
// RandomUniform generator.
// Float dtypes compute in double, integer and bool dtypes in int64; results round once on store.
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/ops.h"
#include "core/philox.h"
#include "reference/kernel_util.h"
#include "reference/kernels.h"

namespace fusetune::reference {

namespace {

using UnaryF = std::function<double(double)>;
using BinaryF = std::function<double(double, double)>;
using BinaryI = std::function<int64_t(int64_t, int64_t)>;

double softplus(double x) { return x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x)); }

UnaryF unary_float(const Node& n) {
  const std::string& op = n.op;
  const double alpha = n.attrs.f("alpha", 0.0f);
  if (op == "Abs") return [](double x) { return std::fabs(x); };
  if (op == "Atan") return [](double x) { return std::atan(x); };
  if (op == "Ceil") return [](double x) { return std::ceil(x); };
  if (op == "Cos") return [](double x) { return std::cos(x); };
  if (op == "Elu") return [alpha](double x) { return x < 0 ? alpha * (std::exp(x) - 1) : x; };
  if (op == "Erf") return [](double x) { return std::erf(x); };
  if (op == "Exp") return [](double x) { return std::exp(x); };
  if (op == "Floor") return [](double x) { return std::floor(x); };
  if (op == "HardSigmoid") {
    const double beta = n.attrs.f("beta");
    return [alpha, beta](double x) { return std::max(0.0, std::min(1.0, alpha * x + beta)); };
  }
  if (op == "HardSwish") return [](double x) { return x * std::max(0.0, std::min(1.0, x / 6 + 0.5)); };
  if (op == "LeakyRelu") return [alpha](double x) { return x < 0 ? alpha * x : x; };
  if (op == "Log") return [](double x) { return std::log(x); };
  if (op == "Neg") return [](double x) { return -x; };
  if (op == "Reciprocal") return [](double x) { return 1.0 / x; };
  if (op == "Relu") return [](double x) { return x < 0 ? 0.0 : x; };
  if (op == "Round") return [](double x) { return std::nearbyint(x); };  // half to even
  if (op == "Selu") {
    const double gamma = n.attrs.f("gamma");
    return [alpha, gamma](double x) { return x > 0 ? gamma * x : gamma * (alpha * std::exp(x) - alpha); };
  }
  if (op == "Sigmoid") return [](double x) { return 1.0 / (1.0 + std::exp(-x)); };
  if (op == "Sign") return [](double x) { return x > 0 ? 1.0 : (x < 0 ? -1.0 : x); };
  if (op == "Sin") return [](double x) { return std::sin(x); };
  if (op == "Softplus") return softplus;
  if (op == "Softsign") return [](double x) { return x / (1 + std::fabs(x)); };
  if (op == "Sqrt") return [](double x) { return std::sqrt(x); };
  if (op == "Tan") return [](double x) { return std::tan(x); };
  if (op == "Tanh") return [](double x) { return std::tanh(x); };
  if (op == "ThresholdedRelu") return [alpha](double x) { return x > alpha ? x : 0.0; };
  if (op == "Clip") {
    const double lo = n.attrs.f("min", -std::numeric_limits<float>::infinity());
    const double hi = n.attrs.f("max", std::numeric_limits<float>::infinity());
    return [lo, hi](double x) { return std::isnan(x) ? x : std::min(hi, std::max(lo, x)); };
  }
  if (op == "IsNaN") return [](double x) { return std::isnan(x) ? 1.0 : 0.0; };
  if (op == "IsInf") {
    const bool neg = n.attrs.i("detect_negative", 1) != 0;
    const bool pos = n.attrs.i("detect_positive", 1) != 0;
    return [neg, pos](double x) { return ((pos && x == INFINITY) || (neg && x == -INFINITY)) ? 1.0 : 0.0; };
  }
  if (op == "Not") return [](double x) { return x == 0 ? 1.0 : 0.0; };
  return nullptr;
}

// Integer unary ops: the ones ONNX defines on integer types.
std::function<int64_t(int64_t)> unary_int(const Node& n) {
  const std::string& op = n.op;
  if (op == "Abs") return [](int64_t x) { return x < 0 ? static_cast<int64_t>(0 - static_cast<uint64_t>(x)) : x; };
  if (op == "Neg") return [](int64_t x) { return static_cast<int64_t>(0 - static_cast<uint64_t>(x)); };
  if (op == "BitwiseNot") return [](int64_t x) { return ~x; };
  if (op == "Relu") return [](int64_t x) { return x < 0 ? 0 : x; };
  if (op == "Sign") return [](int64_t x) { return static_cast<int64_t>((x > 0) - (x < 0)); };
  if (op == "Not") return [](int64_t x) { return static_cast<int64_t>(x == 0); };
  if (op == "Clip") {
    const float lo_f = n.attrs.f("min", -std::numeric_limits<float>::infinity());
    const float hi_f = n.attrs.f("max", std::numeric_limits<float>::infinity());
    const int64_t lo = std::isinf(lo_f) ? std::numeric_limits<int64_t>::min() : static_cast<int64_t>(lo_f);
    const int64_t hi = std::isinf(hi_f) ? std::numeric_limits<int64_t>::max() : static_cast<int64_t>(hi_f);
    return [lo, hi](int64_t x) { return std::min(hi, std::max(lo, x)); };
  }
  if (op == "IsNaN" || op == "IsInf") return [](int64_t) { return int64_t{0}; };
  return nullptr;
}

int64_t wrap_add(int64_t a, int64_t b) { return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b)); }
int64_t wrap_sub(int64_t a, int64_t b) { return static_cast<int64_t>(static_cast<uint64_t>(a) - static_cast<uint64_t>(b)); }
int64_t wrap_mul(int64_t a, int64_t b) { return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b)); }

BinaryF binary_float(const Node& n) {
  const std::string& op = n.op;
  if (op == "Add") return std::plus<double>();
  if (op == "Sub") return std::minus<double>();
  if (op == "Mul") return std::multiplies<double>();
  if (op == "Div") return std::divides<double>();
  if (op == "Pow") return [](double a, double b) { return std::pow(a, b); };
  if (op == "Max") return [](double a, double b) { return std::isnan(a) || std::isnan(b) ? NAN : std::max(a, b); };
  if (op == "Min") return [](double a, double b) { return std::isnan(a) || std::isnan(b) ? NAN : std::min(a, b); };
  if (op == "PRelu") return [](double x, double s) { return x < 0 ? s * x : x; };
  if (op == "Mod") {
    if (n.attrs.i("fmod") != 0) return [](double a, double b) { return std::fmod(a, b); };
    return [](double a, double b) {
      const double r = std::fmod(a, b);
      return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
    };
  }
  if (op == "Equal") return [](double a, double b) { return a == b ? 1.0 : 0.0; };
  if (op == "Greater") return [](double a, double b) { return a > b ? 1.0 : 0.0; };
  if (op == "Less") return [](double a, double b) { return a < b ? 1.0 : 0.0; };
  if (op == "GreaterOrEqual") return [](double a, double b) { return a >= b ? 1.0 : 0.0; };
  if (op == "LessOrEqual") return [](double a, double b) { return a <= b ? 1.0 : 0.0; };
  return nullptr;
}

BinaryI binary_int(const Node& n) {
  const std::string& op = n.op;
  if (op == "Add") return wrap_add;
  if (op == "Sub") return wrap_sub;
  if (op == "Mul") return wrap_mul;
  if (op == "Div") return [](int64_t a, int64_t b) { return b == 0 || (b == -1 && a == INT64_MIN) ? 0 : a / b; };
  if (op == "Pow") {
    // a^b wrapped to 64 bits (by squaring); a negative b gives 1 / a^-b truncated: 1 for a of 1,
    // +-1 for a of -1, else 0. codegen's ft_ipow computes the same.
    return [](int64_t a, int64_t b) {
      if (b < 0) return a == 1 ? int64_t{1} : (a == -1 ? ((b & 1) ? int64_t{-1} : int64_t{1}) : int64_t{0});
      int64_t r = 1;
      for (int64_t base = a; b > 0; b >>= 1, base = wrap_mul(base, base)) {
        if (b & 1) r = wrap_mul(r, base);
      }
      return r;
    };
  }
  if (op == "Max") return [](int64_t a, int64_t b) { return std::max(a, b); };
  if (op == "Min") return [](int64_t a, int64_t b) { return std::min(a, b); };
  if (op == "PRelu") return [](int64_t x, int64_t s) { return x < 0 ? wrap_mul(s, x) : x; };
  if (op == "Mod") {
    if (n.attrs.i("fmod") != 0) {
      return [](int64_t a, int64_t b) { return b == 0 || (b == -1) ? 0 : a % b; };
    }
    return [](int64_t a, int64_t b) {
      if (b == 0 || b == -1) return int64_t{0};
      const int64_t r = a % b;
      return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
    };
  }
  if (op == "Equal") return [](int64_t a, int64_t b) { return static_cast<int64_t>(a == b); };
  if (op == "Greater") return [](int64_t a, int64_t b) { return static_cast<int64_t>(a > b); };
  if (op == "Less") return [](int64_t a, int64_t b) { return static_cast<int64_t>(a < b); };
  if (op == "GreaterOrEqual") return [](int64_t a, int64_t b) { return static_cast<int64_t>(a >= b); };
  if (op == "LessOrEqual") return [](int64_t a, int64_t b) { return static_cast<int64_t>(a <= b); };
  if (op == "And") return [](int64_t a, int64_t b) { return static_cast<int64_t>(a != 0 && b != 0); };
  if (op == "Or") return [](int64_t a, int64_t b) { return static_cast<int64_t>(a != 0 || b != 0); };
  if (op == "Xor") return [](int64_t a, int64_t b) { return static_cast<int64_t>((a != 0) != (b != 0)); };
  if (op == "BitwiseAnd") return [](int64_t a, int64_t b) { return a & b; };
  if (op == "BitwiseOr") return [](int64_t a, int64_t b) { return a | b; };
  if (op == "BitwiseXor") return [](int64_t a, int64_t b) { return a ^ b; };
  if (op == "BitShift") {
    // Elements of `bits` bits held in int64 (sign- or zero-extended; uint64 as its bits): a shift
    // outside [0, bits) gives 0 (or -1 for a negative signed value shifted right); the stored
    // result keeps the element's low bits.
    const bool left = n.attrs.s("direction") == "LEFT", is_signed = n.attrs.i("signed") != 0;
    const int64_t bits = n.attrs.i("bits");
    return [=](int64_t a, int64_t b) -> int64_t {
      if (b < 0 || b >= bits) return left || !is_signed || a >= 0 ? 0 : -1;
      if (left) return static_cast<int64_t>(static_cast<uint64_t>(a) << b);
      return is_signed ? a >> b : static_cast<int64_t>(static_cast<uint64_t>(a) >> b);
    };
  }
  return nullptr;
}

// Element-wise kernels stream their tensors in pieces (for_element_chunks): each piece's values
// and broadcast offsets are converted, computed and stored before the next.
void run_unary(const Node& n, const Tensor& x, Tensor& out) {
  out.data();  // the output's own bytes, before the pieces are written from several threads
  if (is_float(x.dtype())) {
    const UnaryF f = unary_float(n);
    check(f != nullptr, "no float implementation");
    for_element_chunks(out.numel(), [&](int64_t first, int64_t count) {
      std::vector<double> v(static_cast<size_t>(count));
      x.read_doubles(first, v);
      for (double& e : v) e = f(e);
      out.write_doubles(first, v);
    });
    return;
  }
  const auto f = unary_int(n);
  check(f != nullptr, "not defined on ", dtype_name(x.dtype()));
  for_element_chunks(out.numel(), [&](int64_t first, int64_t count) {
    std::vector<int64_t> v(static_cast<size_t>(count));
    x.read_ints(first, v);
    for (int64_t& e : v) e = f(e);
    out.write_ints(first, v);
  });
}

// The elements of `t` at `offsets` (broadcast into a piece of the output).
template <typename T>
void gather_piece(const Tensor& t, std::span<const int64_t> offsets, std::vector<T>& values) {
  values.resize(offsets.size());
  for (size_t i = 0; i < offsets.size(); ++i) read_range(t, offsets[i], std::span<T>(&values[i], 1));
}

// One piece of a binary op: a's and b's elements (broadcast where their shape is not the
// output's), combined by f, stored.
template <typename T, typename F>
void binary_piece(const F& f, const Tensor& a, const Tensor& b, Tensor& out, int64_t first, int64_t count) {
  std::vector<T> va(static_cast<size_t>(count)), vb(va.size());
  std::vector<int64_t> offsets;
  for (auto [t, v] : {std::pair{&a, &va}, std::pair{&b, &vb}}) {
    if (t->shape() == out.shape()) {  // no broadcast: the same elements
      read_range(*t, first, *v);
    } else {
      offsets.resize(va.size());
      broadcast_offsets_from(t->shape(), out.shape(), first, offsets);
      gather_piece(*t, offsets, *v);
    }
  }
  for (size_t i = 0; i < va.size(); ++i) va[i] = f(va[i], vb[i]);
  write_range(out, first, va);
}

void run_binary(const Node& n, const Tensor& a, const Tensor& b, Tensor& out) {
  out.data();
  if (is_float(a.dtype()) || is_float(b.dtype())) {
    const BinaryF f = binary_float(n);
    check(f != nullptr, "not defined on ", dtype_name(a.dtype()));
    for_element_chunks(out.numel(), [&](int64_t first, int64_t count) { binary_piece<double>(f, a, b, out, first, count); });
    return;
  }
  const BinaryI f = binary_int(n);
  check(f != nullptr, "not defined on ", dtype_name(a.dtype()));
  for_element_chunks(out.numel(), [&](int64_t first, int64_t count) { binary_piece<int64_t>(f, a, b, out, first, count); });
}

void run_where(const Tensor& c, const Tensor& x, const Tensor& y, Tensor& out) {
  const size_t elem = dtype_size(out.dtype());
  const auto* cond = reinterpret_cast<const uint8_t*>(c.data());
  std::byte* o = out.data();
  for_element_chunks(out.numel(), [&](int64_t first, int64_t count) {
    std::vector<int64_t> oc(static_cast<size_t>(count)), ox(oc.size()), oy(oc.size());
    broadcast_offsets_from(c.shape(), out.shape(), first, oc);
    broadcast_offsets_from(x.shape(), out.shape(), first, ox);
    broadcast_offsets_from(y.shape(), out.shape(), first, oy);
    for (size_t i = 0; i < oc.size(); ++i) {
      const bool pick_x = cond[oc[i]] != 0;
      const std::byte* src = pick_x ? x.data() + ox[i] * static_cast<int64_t>(elem)
                                    : y.data() + oy[i] * static_cast<int64_t>(elem);
      std::memcpy(o + (first + static_cast<int64_t>(i)) * static_cast<int64_t>(elem), src, elem);
    }
  });
}

}  // namespace

void run_elementwise(const Node& node, std::span<const Tensor* const> in, Tensor& out) {
  if (node.op == "Cast") {
    out = in[0]->cast(out.dtype(), cast_rounding(node));
  } else if (node.op == "BitCast") {  // the same bytes (the widths are equal: core/ops.cpp)
    std::memcpy(out.data(), in[0]->data(), out.nbytes());
  } else if (node.op == "Where") {
    run_where(*in[0], *in[1], *in[2], out);
  } else if (node.op == "RandomUniform") {  // element i: Philox's draw at counter i (core/philox.h)
    const auto key = static_cast<uint64_t>(node.attrs.i("key"));
    const int word = static_cast<int>(node.attrs.i("word", 0));
    std::vector<float> o(static_cast<size_t>(out.numel()));
    for (size_t i = 0; i < o.size(); ++i) o[i] = random_uniform(key, i, word);
    out.set_floats(o);
  } else if (in.size() == 1) {
    run_unary(node, *in[0], out);
  } else {
    run_binary(node, *in[0], *in[1], out);
  }
}

}  // namespace fusetune::reference
