#include "codegen/scalar_ops.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <limits>

#include "core/error.h"
#include "core/ops.h"

namespace fusetune::codegen {

std::string compute_ctype(DType t) { return is_float(t) ? "float" : "long long"; }

std::string float_literal(double v) {
  if (std::isnan(v)) return "ft_nan()";
  if (std::isinf(v)) return v > 0 ? "ft_inf()" : "(-ft_inf())";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9gf", static_cast<double>(static_cast<float>(v)));
  std::string s = buf;
  if (s.find_first_of(".eE") == std::string::npos) s.insert(s.size() - 1, ".0");
  return "(" + s + ")";
}

namespace {

// The prelude's name of a float8/E8M0/float4 type ("e4m3fn" in ft_e4m3fn2f and ft_f2e4m3fn).
const char* narrow_name(DType t) {
  switch (t) {
    case DType::kF8E4M3FN: return "e4m3fn";
    case DType::kF8E4M3FNUZ: return "e4m3fnuz";
    case DType::kF8E5M2: return "e5m2";
    case DType::kF8E5M2FNUZ: return "e5m2fnuz";
    case DType::kF8E8M0: return "e8m0";
    case DType::kF4E2M1: return "e2m1";
    default: fail("no narrow float named for ", dtype_name(t));
  }
}

std::string narrow_decode(DType t, const std::string& code) { return std::string("ft_") + narrow_name(t) + "2f(" + code + ")"; }

std::string narrow_encode(DType t, const std::string& value, NarrowCast how) {
  std::string call = std::string("ft_f2") + narrow_name(t) + "((float)(" + value + "), " + (how.saturate ? "1" : "0");
  if (t == DType::kF8E8M0) call += ", " + std::to_string(static_cast<int>(how.round));
  return call + ")";
}

}  // namespace

std::string load_as_compute(DType storage, const std::string& raw) {
  if (is_narrow_float(storage)) return narrow_decode(storage, raw);
  switch (storage) {
    case DType::kF32: return raw;
    case DType::kF16: return "ft_h2f(" + raw + ")";
    case DType::kBF16: return "ft_bf2f(" + raw + ")";
    case DType::kF64: return "((float)" + raw + ")";
    default: return "((long long)" + raw + ")";
  }
}

std::string store_from_compute(DType to, const std::string& value) {
  if (is_narrow_float(to)) return narrow_encode(to, value, kStoreExact);
  switch (to) {
    case DType::kF32: return "((float)(" + value + "))";
    case DType::kF16: return "ft_f2h((float)(" + value + "))";
    case DType::kBF16: return "ft_f2bf((float)(" + value + "))";
    case DType::kF64: return "((double)(" + value + "))";
    case DType::kBool: return "((unsigned char)((" + value + ") != 0))";
    case DType::kU8: return "((unsigned char)(" + value + "))";
    case DType::kI8: return "((signed char)(" + value + "))";
    case DType::kI16: return "((short)(" + value + "))";
    case DType::kU16: return "((unsigned short)(" + value + "))";
    case DType::kI32: return "((int)(" + value + "))";
    case DType::kU32: return "((unsigned int)(" + value + "))";
    case DType::kI64: return "((long long)(" + value + "))";
    case DType::kU64: return "((unsigned long long)(" + value + "))";
    case DType::kI4: return "((signed char)ft_wrap_i4(" + value + "))";
    case DType::kU4: return "((unsigned char)ft_wrap_u4(" + value + "))";
    case DType::kI2: return "((signed char)ft_wrap_i2(" + value + "))";
    case DType::kU2: return "((unsigned char)ft_wrap_u2(" + value + "))";
    default: fail("code generation does not store dtype ", dtype_name(to));
  }
}

namespace {

std::string call(const std::string& f, const std::string& x) { return f + "(" + x + ")"; }

std::string unary_float(const Node& n, const std::string& x) {
  const std::string& op = n.op;
  const std::string alpha = float_literal(n.attrs.f("alpha", 0.0f));
  if (op == "Abs") return call("fabsf", x);
  if (op == "Atan") return call("atanf", x);
  if (op == "Ceil") return call("ceilf", x);
  if (op == "Cos") return call("cosf", x);
  if (op == "Elu") return "(" + x + " < 0.0f ? " + alpha + " * (expf(" + x + ") - 1.0f) : " + x + ")";
  if (op == "Erf") return call("erff", x);
  if (op == "Exp") return call("expf", x);
  if (op == "Floor") return call("floorf", x);
  if (op == "HardSigmoid") {
    return "fmaxf(0.0f, fminf(1.0f, " + alpha + " * " + x + " + " + float_literal(n.attrs.f("beta")) + "))";
  }
  if (op == "HardSwish") return call("ft_hardswish", x);
  if (op == "LeakyRelu") return "(" + x + " < 0.0f ? " + alpha + " * " + x + " : " + x + ")";
  if (op == "Log") return call("logf", x);
  if (op == "Neg") return "(-" + x + ")";
  if (op == "Reciprocal") return "(1.0f / " + x + ")";
  if (op == "Relu") return "(" + x + " < 0.0f ? 0.0f : " + x + ")";
  if (op == "Round") return call("rintf", x);
  if (op == "Selu") {
    const std::string gamma = float_literal(n.attrs.f("gamma"));
    return "(" + x + " > 0.0f ? " + gamma + " * " + x + " : " + gamma + " * (" + alpha + " * expf(" + x + ") - " + alpha + "))";
  }
  if (op == "Sigmoid") return call("ft_sigmoid", x);
  if (op == "Sign") return call("ft_sign", x);
  if (op == "Sin") return call("sinf", x);
  if (op == "Softplus") return call("ft_softplus", x);
  if (op == "Softsign") return "(" + x + " / (1.0f + fabsf(" + x + ")))";
  if (op == "Sqrt") return call("sqrtf", x);
  if (op == "Tan") return call("tanf", x);
  if (op == "Tanh") return call("tanhf", x);
  if (op == "ThresholdedRelu") return "(" + x + " > " + alpha + " ? " + x + " : 0.0f)";
  if (op == "Clip") {
    const float lo = n.attrs.f("min", -std::numeric_limits<float>::infinity());
    const float hi = n.attrs.f("max", std::numeric_limits<float>::infinity());
    std::string v = x;
    if (!std::isinf(lo)) v = "fmaxf(" + float_literal(lo) + ", " + v + ")";
    if (!std::isinf(hi)) v = "fminf(" + float_literal(hi) + ", " + v + ")";
    return "(" + x + " != " + x + " ? " + x + " : " + v + ")";
  }
  if (op == "IsNaN") return "((long long)(" + x + " != " + x + "))";
  if (op == "IsInf") {
    std::string c;
    if (n.attrs.i("detect_positive", 1)) c += "(" + x + " == ft_inf())";
    if (n.attrs.i("detect_negative", 1)) c += std::string(c.empty() ? "" : " || ") + "(" + x + " == -ft_inf())";
    return "((long long)(" + (c.empty() ? std::string("0") : c) + "))";
  }
  if (op == "Not") return "((long long)(" + x + " == 0.0f))";
  fail("no float form for ", op);
}

std::string unary_int(const Node& n, const std::string& x) {
  const std::string& op = n.op;
  if (op == "Abs") return "(" + x + " < 0 ? ft_wrap_sub(0, " + x + ") : " + x + ")";
  if (op == "Neg") return "ft_wrap_sub(0, " + x + ")";
  if (op == "BitwiseNot") return "(~" + x + ")";
  if (op == "Relu") return "(" + x + " < 0 ? 0LL : " + x + ")";
  if (op == "Sign") return "((long long)((" + x + " > 0) - (" + x + " < 0)))";
  if (op == "Not") return "((long long)(" + x + " == 0))";
  if (op == "IsNaN" || op == "IsInf") return "0LL";
  if (op == "Clip") {
    const float lo = n.attrs.f("min", -std::numeric_limits<float>::infinity());
    const float hi = n.attrs.f("max", std::numeric_limits<float>::infinity());
    std::string v = x;
    if (!std::isinf(lo)) v = "ft_max(" + std::to_string(static_cast<long long>(lo)) + "LL, " + v + ")";
    if (!std::isinf(hi)) v = "ft_min(" + std::to_string(static_cast<long long>(hi)) + "LL, " + v + ")";
    return v;
  }
  fail("no integer form for ", op);
}

std::string binary_float(const Node& n, const std::string& a, const std::string& b) {
  const std::string& op = n.op;
  if (op == "Add") return "(" + a + " + " + b + ")";
  if (op == "Sub") return "(" + a + " - " + b + ")";
  if (op == "Mul") return "(" + a + " * " + b + ")";
  if (op == "Div") return "(" + a + " / " + b + ")";
  if (op == "Pow") return "powf(" + a + ", " + b + ")";
  if (op == "Max") return "ft_fmaxn(" + a + ", " + b + ")";
  if (op == "Min") return "ft_fminn(" + a + ", " + b + ")";
  if (op == "PRelu") return "(" + a + " < 0.0f ? " + b + " * " + a + " : " + a + ")";
  if (op == "Mod") return n.attrs.i("fmod") ? "fmodf(" + a + ", " + b + ")" : "ft_pymod(" + a + ", " + b + ")";
  if (op == "Equal") return "((long long)(" + a + " == " + b + "))";
  if (op == "Greater") return "((long long)(" + a + " > " + b + "))";
  if (op == "Less") return "((long long)(" + a + " < " + b + "))";
  if (op == "GreaterOrEqual") return "((long long)(" + a + " >= " + b + "))";
  if (op == "LessOrEqual") return "((long long)(" + a + " <= " + b + "))";
  fail("no float form for ", op);
}

std::string binary_int(const Node& n, const std::string& a, const std::string& b) {
  const std::string& op = n.op;
  if (op == "Add") return "ft_wrap_add(" + a + ", " + b + ")";
  if (op == "Sub") return "ft_wrap_sub(" + a + ", " + b + ")";
  if (op == "Mul") return "ft_wrap_mul(" + a + ", " + b + ")";
  if (op == "Div") return "ft_idiv(" + a + ", " + b + ")";
  if (op == "Max") return "ft_max(" + a + ", " + b + ")";
  if (op == "Min") return "ft_min(" + a + ", " + b + ")";
  if (op == "PRelu") return "(" + a + " < 0 ? ft_wrap_mul(" + b + ", " + a + ") : " + a + ")";
  if (op == "Mod") return n.attrs.i("fmod") ? "ft_ifmod(" + a + ", " + b + ")" : "ft_ipymod(" + a + ", " + b + ")";
  if (op == "Equal") return "((long long)(" + a + " == " + b + "))";
  if (op == "Greater") return "((long long)(" + a + " > " + b + "))";
  if (op == "Less") return "((long long)(" + a + " < " + b + "))";
  if (op == "GreaterOrEqual") return "((long long)(" + a + " >= " + b + "))";
  if (op == "LessOrEqual") return "((long long)(" + a + " <= " + b + "))";
  if (op == "And") return "((long long)(" + a + " != 0 && " + b + " != 0))";
  if (op == "Or") return "((long long)(" + a + " != 0 || " + b + " != 0))";
  if (op == "Xor") return "((long long)((" + a + " != 0) != (" + b + " != 0)))";
  if (op == "BitwiseAnd") return "(" + a + " & " + b + ")";
  if (op == "BitwiseOr") return "(" + a + " | " + b + ")";
  if (op == "BitwiseXor") return "(" + a + " ^ " + b + ")";
  if (op == "BitShift") {  // as the reference computes it (reference/elementwise.cpp)
    const std::string bits = std::to_string(n.attrs.i("bits"));
    const std::string valid = "(" + b + " >= 0 && " + b + " < " + bits + ")";
    if (n.attrs.s("direction") == "LEFT") return "(" + valid + " ? (long long)((unsigned long long)" + a + " << " + b + ") : 0LL)";
    if (n.attrs.i("signed") != 0) return "(" + valid + " ? (" + a + " >> " + b + ") : (" + a + " < 0 ? -1LL : 0LL))";
    return "(" + valid + " ? (long long)((unsigned long long)" + a + " >> " + b + ") : 0LL)";
  }
  fail("no integer form for ", op);
}

// A float value rounded to the precision of float dtype t (float8/float4 as `how` says).
std::string round_to(DType t, const std::string& x, NarrowCast how = kStoreExact) {
  if (t == DType::kF16) return "ft_h2f(ft_f2h(" + x + "))";
  if (t == DType::kBF16) return "ft_bf2f(ft_f2bf(" + x + "))";
  if (is_narrow_float(t)) return narrow_decode(t, narrow_encode(t, x, how));
  return "((float)(" + x + "))";
}

// An integer value reduced to integer dtype t's width, as a store to t would (two's complement).
std::string wrap_to(DType t, const std::string& x) {
  switch (t) {
    case DType::kI8: return "((long long)(signed char)(" + x + "))";
    case DType::kU8: return "((long long)(unsigned char)(" + x + "))";
    case DType::kI16: return "((long long)(short)(" + x + "))";
    case DType::kU16: return "((long long)(unsigned short)(" + x + "))";
    case DType::kI32: return "((long long)(int)(" + x + "))";
    case DType::kU32: return "((long long)(unsigned int)(" + x + "))";
    case DType::kI4: return "ft_wrap_i4(" + x + ")";
    case DType::kU4: return "ft_wrap_u4(" + x + ")";
    case DType::kI2: return "ft_wrap_i2(" + x + ")";
    case DType::kU2: return "ft_wrap_u2(" + x + ")";
    default: return x;
  }
}

// A value's bits as an integer (its storage pattern, zero-extended), and a value of dtype t from
// such bits: what BitCast composes. float64 has no form here: generated code computes it in
// float, which does not keep its bits.
std::string bits_of(DType t, const std::string& x) {
  check(t != DType::kF64, "BitCast of float64: generated kernels compute float64 in float, which does not keep its bits");
  if (t == DType::kF32) return "((long long)__float_as_uint(" + x + "))";
  if (t == DType::kF16) return "((long long)ft_f2h(" + x + "))";
  if (t == DType::kBF16) return "((long long)ft_f2bf(" + x + "))";
  if (is_narrow_float(t)) return "((long long)" + narrow_encode(t, x, kStoreExact) + ")";
  return x;
}

std::string from_bits(DType t, const std::string& bits) {
  check(t != DType::kF64, "BitCast to float64: generated kernels compute float64 in float, which does not keep its bits");
  if (t == DType::kF32) return "__uint_as_float((unsigned int)(" + bits + "))";
  if (t == DType::kF16) return "ft_h2f((unsigned short)(" + bits + "))";
  if (t == DType::kBF16) return "ft_bf2f((unsigned short)(" + bits + "))";
  if (is_narrow_float(t)) return narrow_decode(t, "((unsigned char)(" + bits + "))");
  if (t == DType::kBool) return "((long long)((unsigned char)(" + bits + ") != 0))";
  return wrap_to(t, bits);
}

}  // namespace

bool rounds_when_stored(DType t) { return is_float(t) && t != DType::kF32 && t != DType::kF64; }

std::string as_stored(DType t, const std::string& value) { return rounds_when_stored(t) ? round_to(t, value) : value; }

bool result_jumps(const Graph& g, const Node& n) {
  static const char* const kOps[] = {"Equal", "Greater", "Less", "GreaterOrEqual", "LessOrEqual", "Floor", "Ceil",
                                     "Round", "Sign", "IsInf", "Mod", "ThresholdedRelu", "ArgMax", "ArgMin"};
  if (n.op == "Cast") return is_float(g.value(n.inputs[0]).dtype) && !is_float(g.value(n.outputs[0]).dtype);
  return std::any_of(std::begin(kOps), std::end(kOps), [&](const char* o) { return n.op == o; });
}

std::string elementwise_expr(const Graph& g, const Node& n, const std::vector<std::string>& args) {
  const DType in0 = g.value(n.inputs[0]).dtype;
  const DType out = g.value(n.outputs[0]).dtype;
  if (n.op == "Cast") {
    // A 16-bit float value computed inside the group (in float) takes its dtype's precision before
    // the cast makes the difference observable, as the reference stores it.
    // To an integer: truncate to 64 bits, then wrap to the width, as the reference (Tensor::cast).
    if (is_float(out) && is_float(in0)) return round_to(out, round_to(in0, args[0]), cast_rounding(n));
    if (is_float(out)) return round_to(out, "((float)(" + args[0] + "))", cast_rounding(n));
    if (out == DType::kBool) return "((long long)(" + args[0] + " != 0))";
    return wrap_to(out, is_float(in0) ? "ft_f2i(" + args[0] + ")" : args[0]);
  }
  if (n.op == "BitCast") return from_bits(out, bits_of(in0, args[0]));
  if (n.op == "Where") return "(" + args[0] + " != 0 ? " + args[1] + " : " + args[2] + ")";
  if (args.size() == 1) return is_float(in0) ? unary_float(n, args[0]) : unary_int(n, args[0]);
  const DType in1 = g.value(n.inputs[1]).dtype;
  if (is_float(in0) || is_float(in1)) {
    const std::string a = is_float(in0) ? args[0] : "((float)" + args[0] + ")";
    const std::string b = is_float(in1) ? args[1] : "((float)" + args[1] + ")";
    const std::string r = binary_float(n, a, b);
    return is_float(out) || r.rfind("((long long)", 0) == 0 ? r : "ft_f2i(" + r + ")";
  }
  if (n.op == "Pow") return "ft_ipow(" + args[0] + ", " + args[1] + ")";
  return binary_int(n, args[0], args[1]);
}

}  // namespace fusetune::codegen
