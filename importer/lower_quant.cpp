#include "importer/lower_quant.h"

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <optional>

#include "core/error.h"
#include "core/ops.h"

namespace fusetune::importer {

namespace {

// The type QuantizeLinear divides x by the scale in: theirs when they agree and are floats,
// float64 when either is, float32 otherwise (numpy promotes an int32 x to float64; fusetune
// divides it in float32, as onnxruntime does, and as generated code computes).
DType division_type(DType x, DType scale) {
  if (x == scale && is_float(x)) return x;
  if (x == DType::kF64 || scale == DType::kF64) return DType::kF64;
  return DType::kF32;
}

int binary(NodeLowering& L, const char* op, int a, int b) { return L.emit(op, {a, b}); }

int float_constant(NodeLowering& L, DType t, double v) { return L.constant(Tensor::scalar_float(t, static_cast<float>(v))); }

int narrow_cast(NodeLowering& L, int v, DType to, bool saturate) {
  Attributes a;
  a.set("to", static_cast<int64_t>(dtype_to_onnx(to)));
  a.set("saturate", saturate ? int64_t{1} : int64_t{0});
  a.set("round_mode", static_cast<int64_t>(round_mode_from_name("up")));
  return L.emit("Cast", {v}, a);
}

// Input k (a scale or a zero point) made to broadcast against a tensor of shape x: one element as
// a scalar; else, without blocks, a 1-D tensor of x[axis] elements along `axis`; with blocks of
// `block` along `axis`, a tensor of x's rank whose `axis` has ceil(x[axis] / block) entries,
// each repeated over its block (a Gather, the last block cut at x[axis]).
// `axis` is the attribute as given: only a per-axis or blocked parameter needs it in range (the
// default, 1, is out of range for a 1-D x quantized per tensor).
int broadcast_param(NodeLowering& L, size_t k, const char* what, const Shape& x, int64_t attr_axis, int64_t block) {
  const Shape s = L.shape(k);
  if (numel(s) == 1) return L.reshape(L.input(k), {});
  const int64_t axis = normalize_axis(attr_axis, static_cast<int64_t>(x.size()), "axis");
  const auto ax = static_cast<size_t>(axis);
  if (block <= 0) {
    check(s.size() == 1 && s[0] == x[ax], "input ", k, " (the ", what, ") has shape ", shape_str(s), ": per-axis quantization wants ",
          x[ax], " values, one per index of axis ", axis, " of the input of shape ", shape_str(x));
    Shape along(x.size(), 1);
    along[ax] = s[0];
    return L.reshape(L.input(k), along);
  }
  bool fits = s.size() == x.size() && s[ax] == (x[ax] + block - 1) / block;
  for (size_t d = 0; fits && d < x.size(); ++d) fits = d == ax || s[d] == x[d];
  check(fits, "input ", k, " (the ", what, ") has shape ", shape_str(s), ": blocks of ", block, " along axis ", axis,
        " of the input of shape ", shape_str(x), " want ", (x[ax] + block - 1) / block, " there and the input's extents elsewhere");
  std::vector<int64_t> index(static_cast<size_t>(x[ax]));
  for (size_t i = 0; i < index.size(); ++i) index[i] = static_cast<int64_t>(i) / block;
  Attributes a;
  a.set("axis", axis);
  return L.emit("Gather", {L.input(k), L.constant(Tensor::from_ints(DType::kI64, {x[ax]}, index))}, a);
}

// A zero point of a float8 type must be zero (the reference checks it): refused when it is a
// constant holding anything else, ignored otherwise.
void require_zero(NodeLowering& L, size_t k) {
  if (!L.has_input(k) || !L.val(k).is_constant()) return;
  for (float v : L.const_floats(k, "zero point")) {
    check(v == 0.0f, "input ", k, " (the zero point) must be zero for a float8 ", L.op(), ", it holds ", v);
  }
}

bool is_float8(DType t) {
  return t == DType::kF8E4M3FN || t == DType::kF8E4M3FNUZ || t == DType::kF8E5M2 || t == DType::kF8E5M2FNUZ;
}

bool is_quant_integer(DType t) {
  return t == DType::kI8 || t == DType::kU8 || t == DType::kI16 || t == DType::kU16 || t == DType::kI4 || t == DType::kU4 ||
         t == DType::kI2 || t == DType::kU2;
}

// Round half to even, plus the zero point (a value broadcasting against v, or kNoValue),
// saturated to the integer type's range and cast to it; computed in float32, or float64 when v is.
int requantize(NodeLowering& L, int v, int zero_point, DType to) {
  const DType wide = L.builder().value(v).dtype == DType::kF64 ? DType::kF64 : DType::kF32;
  int r = cast_to(L, L.emit("Round", {v}), wide);
  if (zero_point != kNoValue) r = binary(L, "Add", r, cast_to(L, zero_point, wide));
  const auto [lo, hi] = integer_range(to);
  return cast_to(L, clip_between(L, r, static_cast<double>(lo), static_cast<double>(hi)), to);
}

// Input k (an integer operand) as int32 less its zero point (input zp, absent or one element,
// or 1-D along `axis` of the operand's shape, sized `shape[axis]`, when per_axis allows it).
int centered(NodeLowering& L, size_t k, size_t zp, int64_t axis) {
  const int x = cast_to(L, L.input(k), DType::kI32);
  if (!L.has_input(zp)) return x;
  const Shape xs = L.shape(k), zs = L.shape(zp);
  int z = cast_to(L, L.input(zp), DType::kI32);
  if (numel(zs) == 1) {
    z = L.reshape(z, {});
  } else {
    check(axis >= 0 && zs.size() == 1 && zs[0] == xs[static_cast<size_t>(axis)], "input ", zp, " (the zero point of input ", k,
          ") has shape ", shape_str(zs), ": one value, or one per index of axis ", axis, " of its shape ", shape_str(xs));
    Shape along(xs.size(), 1);
    along[static_cast<size_t>(axis)] = zs[0];
    z = L.reshape(z, along);
  }
  return binary(L, "Sub", x, z);
}

bool is_8bit(DType t) { return t == DType::kI8 || t == DType::kU8; }

// Zero point z (a value, or kNoValue for none) as int32; kNoValue for none or a constant zero
// (nothing to correct).
int int32_zero_point(NodeLowering& L, int z) {
  if (z == kNoValue) return kNoValue;
  const Value& zv = L.builder().value(z);
  if (zv.is_constant()) {
    const std::vector<double> zs = zv.data->to_doubles();
    if (std::all_of(zs.begin(), zs.end(), [](double q) { return q == 0.0; })) return kNoValue;
  }
  return cast_to(L, z, DType::kI32);
}

// The zero point (input zp) of a MatMul operand as int32 broadcasting against the product: one
// element as a scalar; else one per row of A (`row`, shape M x 1) or per column of B (1 x N);
// kNoValue when absent or a constant zero (int32_zero_point).
int product_zero_point(NodeLowering& L, size_t k, size_t zp, bool row) {
  const int z = int32_zero_point(L, L.has_input(zp) ? L.input(zp) : kNoValue);
  if (z == kNoValue) return kNoValue;
  const Shape xs = L.shape(k), zs = L.shape(zp);
  if (numel(zs) == 1) return L.reshape(z, {});
  const int64_t extent = row ? xs[xs.size() - 2] : xs.back();
  check(zs.size() == 1 && zs[0] == extent, "input ", zp, " (the zero point of input ", k, ") has shape ", shape_str(zs),
        ": one value, or one per ", row ? "row" : "column", " (", extent, ")");
  return L.reshape(z, row ? Shape{extent, 1} : Shape{1, extent});
}

// The integer product sum over k of (a - za)(b - zb) of 8-bit values a and b (int8 or uint8
// each, rank 2 or more) with int32 zero points za (a scalar or M x 1) and zb (a scalar or 1 x N),
// either kNoValue for none: the raw product of the bytes (a MatMul of int8/uint8 operands into
// int32: dp4a's form, codegen/stages/dp4a_matmul.h) less za x (B's column sums) and (A's row
// sums) x zb, plus K x za x zb, each term present only where its zero points are; exact, as every
// term is an integer and int32 arithmetic wraps alike on both sides. `b_sums`, where given, is B's
// column sums (int32, shaped as a ReduceSum over B's K axis keeping it), computed by the caller
// more cheaply than from B.
int byte_product(NodeLowering& L, int a, int za, int b, int zb, int b_sums = kNoValue) {
  const Value& av = L.builder().value(a);
  const Value& bv = L.builder().value(b);
  const auto a_rank = static_cast<int64_t>(av.shape.size()), b_rank = static_cast<int64_t>(bv.shape.size());
  const int64_t k_extent = av.shape.back();
  int c = L.emit("MatMul", {a, b});
  if (za != kNoValue) {
    const int col_sums = b_sums != kNoValue ? b_sums : reduce_node(L, "ReduceSum", cast_to(L, b, DType::kI32), {b_rank - 2}, 1);
    c = binary(L, "Sub", c, binary(L, "Mul", za, col_sums));
  }
  if (zb != kNoValue) {
    const int row_sums = reduce_node(L, "ReduceSum", cast_to(L, a, DType::kI32), {a_rank - 1}, 1);
    c = binary(L, "Sub", c, binary(L, "Mul", row_sums, zb));
  }
  if (za != kNoValue && zb != kNoValue) {
    const int k = L.constant(Tensor::scalar_int(DType::kI32, k_extent));
    c = binary(L, "Add", c, binary(L, "Mul", binary(L, "Mul", za, zb), k));
  }
  return c;
}

// The integer product of MatMulInteger and QLinearMatMul, A (input a, zero point input za) by B
// (inputs b, zb): byte_product of 8-bit operands; otherwise the operands centred in int32.
int integer_product(NodeLowering& L, size_t a, size_t za, size_t b, size_t zb) {
  if (!is_8bit(L.val(a).dtype) || !is_8bit(L.val(b).dtype)) {
    return L.emit("MatMul", {centered(L, a, za, L.rank(a) - 2), centered(L, b, zb, L.rank(b) - 1)});
  }
  return byte_product(L, L.input(a), product_zero_point(L, a, za, true), L.input(b), product_zero_point(L, b, zb, false));
}

}  // namespace

int fold_dequantized_matmul(NodeLowering& L, int a, bool trans_a, int b, bool trans_b, float alpha) {
  using Dequantization = GraphBuilder::Dequantization;
  const Dequantization* da = L.builder().dequantization(a);
  const Dequantization* db = L.builder().dequantization(b);
  if (da == nullptr || db == nullptr) return kNoValue;
  const size_t a_rank = L.builder().value(a).shape.size(), b_rank = L.builder().value(b).shape.size();
  // A per tensor (per row or column it would vary along K or be no scale of the product's rows
  // alone), B per tensor or per output column: its axis 1, or 0 when transposed.
  if (a_rank < 2 || b_rank < 2 || da->axis != -1 || (db->axis != -1 && db->axis != (trans_b ? 0 : 1))) return kNoValue;
  // The sum in int32 holds K products of at most 255 x 255 in magnitude: beyond that the float
  // product does not wrap where int32 would, so no fold.
  const Shape& as = L.builder().value(a).shape;
  if (as[trans_a ? 0 : as.size() - 1] > INT32_MAX / (255 * 255)) return kNoValue;
  const int x_a = trans_a ? transpose2d(L, da->x) : da->x;
  const int x_b = trans_b ? transpose2d(L, db->x) : db->x;
  // A parameter of B along its output columns as 1 x N (a transposed B's is N x 1).
  const auto columns = [&](int v) {
    if (v == kNoValue || db->axis != 0) return v;
    return L.reshape(v, {1, L.builder().value(v).shape[0]});
  };
  const int product = byte_product(L, x_a, int32_zero_point(L, da->zero), x_b, int32_zero_point(L, columns(db->zero)));
  int scale = binary(L, "Mul", da->scale, columns(db->scale));
  if (alpha != 1.0f) scale = binary(L, "Mul", scale, float_constant(L, DType::kF32, alpha));
  return binary(L, "Mul", cast_to(L, product, DType::kF32), scale);
}

namespace {

// A scale of a contraction's operand as the contraction's output broadcasts it: one element as a
// scalar; else 1-D along output axis `axis` of rank `rank` (A's rows, B's columns, W's channels).
int scale_along(NodeLowering& L, size_t k, int64_t axis, size_t rank, int64_t extent) {
  const Shape s = L.shape(k);
  if (numel(s) == 1) return L.reshape(L.input(k), {});
  check(s.size() == 1 && s[0] == extent, "input ", k, " (a scale) has shape ", shape_str(s), ": one value, or ", extent,
        " (one per index of output axis ", axis, ")");
  Shape along(rank, 1);
  along[static_cast<size_t>(axis)] = extent;
  return L.reshape(L.input(k), along);
}

// The QLinear ops' output: the int32 contraction c times x_scale x w_scale / y_scale (each
// broadcast by the caller, multiplied in their own type as numpy does), in float32 (onnxruntime's
// requantization; numpy's reference computes the product in float64), then requantized with y's
// zero point (input y_zp) to its type, or `fallback` without one.
int qlinear_output(NodeLowering& L, int c, int x_scale, int w_scale, int y_scale, size_t y_zp, DType fallback) {
  const int factor = binary(L, "Div", binary(L, "Mul", x_scale, w_scale), y_scale);
  const int d = binary(L, "Mul", cast_to(L, c, DType::kF32), cast_to(L, factor, DType::kF32));
  const DType to = L.has_input(y_zp) ? L.val(y_zp).dtype : fallback;
  check(to == DType::kI8 || to == DType::kU8, L.op(), " quantizes to int8 or uint8, not ", dtype_name(to));
  return requantize(L, d, L.has_input(y_zp) ? L.reshape(L.input(y_zp), {}) : kNoValue, to);
}

}  // namespace

void quantize_linear(NodeLowering& L) {
  const Shape xs = L.shape(0);
  const int64_t axis = L.attr_i("axis", 1);
  const int64_t block = L.attr_i("block_size", 0);
  const bool saturate = L.attr_i("saturate", 1) != 0;
  const bool has_output_dtype = L.has_attr("output_dtype") && L.attr_i("output_dtype", 0) != 0;
  const DType output_dtype = has_output_dtype ? dtype_from_onnx(static_cast<int>(L.attr_i("output_dtype", 0))) : DType::kU8;
  const int64_t precision = L.attr_i("precision", 0);
  DType to = output_dtype;
  if (L.has_input(2)) {
    to = L.val(2).dtype;
    check(!has_output_dtype || to == output_dtype, "output_dtype ", dtype_name(output_dtype), " disagrees with the zero point's type ",
          dtype_name(to));
  }
  check(is_quant_integer(to) || is_float8(to) || to == DType::kF4E2M1, "QuantizeLinear to ", dtype_name(to),
        " (the zero point's type or output_dtype): fusetune quantizes to 8-, 16-, 4- and 2-bit integers, float8 and float4");
  const DType div_t = precision != 0 ? dtype_from_onnx(static_cast<int>(precision)) : division_type(L.val(0).dtype, L.val(1).dtype);
  check(is_float(div_t), "precision ", precision, " is not a float type");
  const int scale = broadcast_param(L, 1, "scale", xs, axis, block);
  const int q = binary(L, "Div", cast_to(L, L.input(0), div_t), cast_to(L, scale, div_t));
  if (is_float8(to)) {
    require_zero(L, 2);
    L.set_output(0, narrow_cast(L, q, to, saturate));
    return;
  }
  const int zp = L.has_input(2) ? broadcast_param(L, 2, "zero point", xs, axis, block) : kNoValue;
  if (is_quant_integer(to)) {
    L.set_output(0, requantize(L, q, zp, to));
  } else {  // float4: the zero point added, then a (saturating) cast
    L.set_output(0, narrow_cast(L, zp == kNoValue ? q : binary(L, "Add", q, cast_to(L, zp, div_t)), to, true));
  }
}

void dequantize_linear(NodeLowering& L) {
  const Shape xs = L.shape(0);
  const int64_t axis = L.attr_i("axis", 1);
  const int64_t block = L.attr_i("block_size", 0);
  const bool has_output_dtype = L.has_attr("output_dtype") && L.attr_i("output_dtype", 0) != 0;
  const DType out = has_output_dtype ? dtype_from_onnx(static_cast<int>(L.attr_i("output_dtype", 0))) : L.val(1).dtype;
  check(is_float(out) && !is_narrow_float(out), "DequantizeLinear to ", dtype_name(out), ": the output is a float type");
  const DType xt = L.val(0).dtype;
  int dx = cast_to(L, L.input(0), DType::kF32);
  int zp = kNoValue;
  if (is_float8(xt)) {
    require_zero(L, 2);
  } else if (xt != DType::kF4E2M1 && L.has_input(2)) {
    check(L.val(2).dtype == xt, "the zero point's type ", dtype_name(L.val(2).dtype), " is not x's, ", dtype_name(xt));
    zp = broadcast_param(L, 2, "zero point", xs, axis, block);
    dx = binary(L, "Sub", dx, cast_to(L, zp, DType::kF32));
  }
  const int scale = cast_to(L, broadcast_param(L, 1, "scale", xs, axis, block), DType::kF32);
  const int y = cast_to(L, binary(L, "Mul", dx, scale), out);
  // An 8-bit x dequantized to float32 per tensor, per row or column of a matrix, or per index of
  // axis 0 (a convolution's output channels): recorded for fold_dequantized_matmul and
  // fold_dequantized_conv.
  const bool per_tensor = numel(L.shape(1)) == 1;
  const int64_t along = per_tensor ? -1 : normalize_axis(axis, static_cast<int64_t>(xs.size()), "axis");
  if (is_8bit(xt) && out == DType::kF32 && (per_tensor || (block <= 0 && (xs.size() == 2 || along == 0)))) {
    L.builder().set_dequantization(y, {L.input(0), zp, scale, static_cast<int>(along)});
  }
  L.set_output(0, y);
}

void dynamic_quantize_linear(NodeLowering& L) {
  const DType xt = L.val(0).dtype;
  check(xt == DType::kF32, "DynamicQuantizeLinear takes float32, not ", dtype_name(xt));
  std::vector<int64_t> all(static_cast<size_t>(L.rank(0)));
  std::iota(all.begin(), all.end(), 0);
  const int zero = float_constant(L, xt, 0.0);
  const int hi = binary(L, "Max", reduce_node(L, "ReduceMax", L.input(0), all, 0), zero);
  const int lo = binary(L, "Min", reduce_node(L, "ReduceMin", L.input(0), all, 0), zero);
  const int span = L.emit("Where", {binary(L, "Equal", hi, lo), float_constant(L, xt, 1.0), binary(L, "Sub", hi, lo)});
  const int scale = binary(L, "Div", span, float_constant(L, xt, 255.0));
  const int zp = L.emit("Round", {clip_between(L, binary(L, "Sub", zero, binary(L, "Div", lo, scale)), 0.0, 255.0)});
  L.set_output(0, requantize(L, binary(L, "Div", L.input(0), scale), zp, DType::kU8));
  L.set_output(1, scale);
  L.set_output(2, cast_to(L, zp, DType::kU8));
}

void matmul_integer(NodeLowering& L) {
  check(L.rank(0) >= 2 && L.rank(1) >= 2, "MatMulInteger takes matrices (or batches of them), not ", shape_str(L.shape(0)), " and ",
        shape_str(L.shape(1)));
  L.set_output(0, integer_product(L, 0, 2, 1, 3));
}

namespace {

// The K entries of a convolution's group below which its product stays a Conv of int32 operands
// (a depthwise 3x3 has 9): a dp4a word is 4 of them, a tensor-core step 32.
constexpr int64_t kLeastProductDepth = 32;
// The most entries of the patches' index map (taps x output positions, a constant of the plan and
// of each tuning task: 16 MB of int64) before the convolution stays a Conv.
constexpr int64_t kMostPatchIndices = int64_t{1} << 21;

// The Conv of 8-bit x (value x, zero point zx: one value, or kNoValue) by 8-bit w (value w, zero
// point zw: one value or one per output channel, or kNoValue) with `attrs` (conv_attributes) as an integer product, or
// kNoValue where it stays a Conv (other types, a group's K = C/groups x window below
// kLeastProductDepth, or a patch index map beyond kMostPatchIndices). x padded (with its zero point: the padded taps contribute nothing), its
// patches gathered (im2col: for each input channel, tap and output position, the element it
// reads; a constant index map, which fusion computes inside the product's group where nothing else
// reads it) into B [N, groups, K, positions], w as A [groups, F/groups, K], then byte_product:
// A x B into int32, exact, on dp4a or int8 tensor cores (codegen/stages/dp4a_matmul.h).
int conv_byte_product(NodeLowering& L, int x, int zx, int w, int zw, const Attributes& attrs) {
  const auto shape = [&](int v) { return L.builder().value(v).shape; };
  if (!is_8bit(L.builder().value(x).dtype) || !is_8bit(L.builder().value(w).dtype)) return kNoValue;
  const Shape xs = shape(x), ws = shape(w);
  const size_t sp = xs.size() - 2;
  const int64_t n = xs[0], c = xs[1], f = ws[0], cg = ws[1], groups = attrs.i("group");
  int64_t taps = 1;
  for (size_t d = 0; d < sp; ++d) taps *= ws[2 + d];
  if (cg * taps < kLeastProductDepth || groups <= 0 || c != cg * groups || f % groups != 0) return kNoValue;
  if (zx != kNoValue) check(numel(shape(zx)) == 1, "x's zero point has shape ", shape_str(shape(zx)), ": one value");
  const std::vector<int64_t> strides = attrs.ints("strides"), dil = attrs.ints("dilations"), pads = attrs.ints("pads");
  Shape padded(sp), out(sp);
  bool any_pad = false;
  for (size_t d = 0; d < sp; ++d) {
    padded[d] = xs[2 + d] + pads[d] + pads[sp + d];
    out[d] = (padded[d] - dil[d] * (ws[2 + d] - 1) - 1) / strides[d] + 1;
    check(out[d] >= 1, "the window (", ws[2 + d], " taps dilated ", dil[d], ") is longer than padded axis ", 2 + d, " (", padded[d], ")");
    any_pad = any_pad || pads[d] != 0 || pads[sp + d] != 0;
  }
  const int64_t positions = numel(out), k = cg * taps;
  if (taps * positions > kMostPatchIndices) return kNoValue;
  int xb = x;
  const int zb = int32_zero_point(L, zx != kNoValue ? L.reshape(zx, {}) : kNoValue);
  if (any_pad) {
    std::vector<int64_t> all(2 * xs.size(), 0);
    for (size_t d = 0; d < sp; ++d) {
      all[2 + d] = pads[d];
      all[xs.size() + 2 + d] = pads[sp + d];
    }
    xb = zero_pad(L, xb, all);
    if (zb != kNoValue) {  // the padding holds x's zero point
      Shape mask_shape(xs.size(), 1);
      std::copy(padded.begin(), padded.end(), mask_shape.begin() + 2);
      std::vector<int64_t> inside(static_cast<size_t>(numel(padded)), 1);
      for (int64_t e = 0; e < numel(padded); ++e) {
        int64_t rest = e;
        for (size_t d = sp; d-- > 0;) {
          const int64_t at = rest % padded[d];
          rest /= padded[d];
          if (at < pads[d] || at >= pads[d] + xs[2 + d]) inside[static_cast<size_t>(e)] = 0;
        }
      }
      xb = L.emit("Where", {L.constant(Tensor::from_ints(DType::kBool, mask_shape, inside)), xb, L.reshape(zx, {})});
    }
  }
  int cols = L.reshape(xb, {n, c, numel(padded)});
  int patches = kNoValue;  // the gather's indices: [taps, positions] into the padded map
  Attributes along;
  bool direct = !any_pad && taps == 1;
  for (size_t d = 0; d < sp; ++d) direct = direct && strides[d] == 1;
  if (!direct) {  // cols[n][c][tap][position] = x[n][c][the element the tap reads at the position]
    std::vector<int64_t> index(static_cast<size_t>(taps * positions));
    for (int64_t t = 0; t < taps; ++t) {
      for (int64_t p = 0; p < positions; ++p) {
        int64_t flat = 0, rest_t = t, rest_p = p, stride = 1;
        for (size_t d = sp; d-- > 0;) {
          const int64_t tap = rest_t % ws[2 + d], at = rest_p % out[d];
          rest_t /= ws[2 + d];
          rest_p /= out[d];
          flat += (at * strides[d] + tap * dil[d]) * stride;
          stride *= padded[d];
        }
        index[static_cast<size_t>(t * positions + p)] = flat;
      }
    }
    along.set("axis", int64_t{2});
    patches = L.constant(Tensor::from_ints(DType::kI64, {taps, positions}, index));
    cols = L.emit("Gather", {cols, patches}, along);
  }
  const int b = L.reshape(cols, {n, groups, k, positions});
  const int a = L.reshape(w, {groups, f / groups, k});
  int za = int32_zero_point(L, zw);
  int b_sums = kNoValue;
  if (za != kNoValue) {
    const int64_t count = numel(shape(zw));
    check(count == 1 || count == f, "w's zero point has shape ", shape_str(shape(zw)), ": one value, or one per output channel (",
          f, ")");
    za = L.reshape(za, count == 1 ? Shape{} : Shape{groups, f / groups, 1});
    // B's column sums (what za multiplies), from x summed over each group's channels first, then
    // over the taps of each position: x read once, not once per tap.
    const int per_group = reduce_node(L, "ReduceSum", cast_to(L, L.reshape(xb, {n, groups, cg, numel(padded)}), DType::kI32), {2}, 0);
    b_sums = patches == kNoValue ? L.reshape(per_group, {n, groups, 1, positions})
                                 : reduce_node(L, "ReduceSum", L.emit("Gather", {per_group, patches}, along), {2}, 1);
  }
  Shape y = {n, f};
  y.insert(y.end(), out.begin(), out.end());
  return L.reshape(byte_product(L, a, za, b, zb, b_sums), y);
}

}  // namespace

void conv_integer(NodeLowering& L) {
  const Attributes attrs = conv_attributes(L, 0, 1);
  const auto in = [&](size_t k) { return L.has_input(k) ? L.input(k) : kNoValue; };
  const int product = conv_byte_product(L, in(0), in(2), in(1), in(3), attrs);
  L.set_output(0, product != kNoValue ? product : L.emit("Conv", {centered(L, 0, 2, -1), centered(L, 1, 3, 0)}, attrs));
}

int fold_dequantized_conv(NodeLowering& L, int x, int w, int bias, const Attributes& attrs) {
  using Dequantization = GraphBuilder::Dequantization;
  const Dequantization* dx = L.builder().dequantization(x);
  const Dequantization* dw = L.builder().dequantization(w);
  if (dx == nullptr || dw == nullptr || dx->axis != -1 || (dw->axis != -1 && dw->axis != 0)) return kNoValue;
  const Shape ws = L.builder().value(w).shape;
  // As for the MatMul: the int32 sum holds a group's K products of at most 255 x 255.
  if (ws.empty() || numel(ws) / ws[0] > INT32_MAX / (255 * 255)) return kNoValue;
  const int c = conv_byte_product(L, dx->x, dx->zero, dw->x, dw->zero, attrs);
  if (c == kNoValue) return kNoValue;
  // The scales as the output broadcasts them: x's one value, w's one or one per output channel
  // ([F, 1, ...] of w's rank, made [F, 1, ...] of the spatial rank plus one).
  const Shape channel = [&] {
    Shape s(ws.size() - 1, 1);
    s[0] = ws[0];
    return s;
  }();
  const int w_scale = numel(L.builder().value(dw->scale).shape) == 1 ? dw->scale : L.reshape(dw->scale, channel);
  int y = binary(L, "Mul", cast_to(L, c, DType::kF32), binary(L, "Mul", dx->scale, w_scale));
  if (bias != kNoValue) y = binary(L, "Add", y, L.reshape(bias, channel));
  return y;
}

void qlinear_matmul(NodeLowering& L) {
  check(L.rank(0) >= 2 && L.rank(3) >= 2, "QLinearMatMul takes matrices (or batches of them), not ", shape_str(L.shape(0)), " and ",
        shape_str(L.shape(3)));
  const int c = integer_product(L, 0, 2, 3, 5);
  const size_t rank = L.builder().value(c).shape.size();
  const int a_scale = scale_along(L, 1, static_cast<int64_t>(rank) - 2, rank, L.shape(0)[static_cast<size_t>(L.rank(0) - 2)]);
  const int b_scale = scale_along(L, 4, static_cast<int64_t>(rank) - 1, rank, L.shape(3).back());
  L.set_output(0, qlinear_output(L, c, a_scale, b_scale, L.reshape(L.input(6), {}), 7, L.val(0).dtype));
}

void qlinear_conv(NodeLowering& L) {
  const Attributes attrs = conv_attributes(L, 0, 3);
  const auto in = [&](size_t k) { return L.has_input(k) ? L.input(k) : kNoValue; };
  int c = conv_byte_product(L, in(0), in(2), in(3), in(5), attrs);
  if (c == kNoValue) {
    std::vector<int> ins = {centered(L, 0, 2, -1), centered(L, 3, 5, 0)};
    if (L.has_input(8)) ins.push_back(cast_to(L, L.input(8), DType::kI32));
    c = L.emit("Conv", ins, attrs);
  } else if (L.has_input(8)) {  // the bias, one int32 per output channel
    Shape along(L.builder().value(c).shape.size(), 1);
    along[1] = L.shape(3)[0];
    c = binary(L, "Add", c, L.reshape(cast_to(L, L.input(8), DType::kI32), along));
  }
  const size_t rank = L.builder().value(c).shape.size();
  const int w_scale = scale_along(L, 4, 1, rank, L.shape(3)[0]);
  L.set_output(0, qlinear_output(L, c, L.reshape(L.input(1), {}), w_scale, L.reshape(L.input(6), {}), 7, L.val(0).dtype));
}

}  // namespace fusetune::importer
