#include "core/ops.h"

#include <algorithm>
#include <array>
#include <numeric>
#include <set>

#include "core/error.h"

namespace fusetune {

namespace {

using Types = std::vector<TensorType>;
using Inputs = std::span<const TensorType>;

int64_t rank_of(const TensorType& t) { return static_cast<int64_t>(t.shape.size()); }

Types same_as_input(const Node&, Inputs in) { return {in[0]}; }

Types to_bool(const Node&, Inputs in) { return {{DType::kBool, in[0].shape}}; }

Types cast(const Node& n, Inputs in) {
  const DType to = dtype_from_onnx(static_cast<int>(n.attrs.i("to")));
  check(to != DType::kUndefined, "Cast to unsupported type code ", n.attrs.i("to"));
  return {{to, in[0].shape}};
}

// BitCast: the same bits as another type of the same width.
Types bit_cast(const Node& n, Inputs in) {
  const DType to = dtype_from_onnx(static_cast<int>(n.attrs.i("to")));
  check(to != DType::kUndefined, "BitCast to unsupported type code ", n.attrs.i("to"));
  check(dtype_bits(to) == dtype_bits(in[0].dtype), "BitCast of ", dtype_name(in[0].dtype), " (", dtype_bits(in[0].dtype), " bits) to ",
        dtype_name(to), " (", dtype_bits(to), " bits): the widths differ");
  return {{to, in[0].shape}};
}

void check_same_dtype(Inputs in, size_t a, size_t b) {
  check(in[a].dtype == in[b].dtype, "input ", a, " is ", dtype_name(in[a].dtype), " but input ", b,
        " is ", dtype_name(in[b].dtype));
}

Types binary(const Node&, Inputs in) {
  check_same_dtype(in, 0, 1);
  return {{in[0].dtype, broadcast_shapes(in[0].shape, in[1].shape, "inputs")}};
}

Types binary_any_exponent(const Node&, Inputs in) {  // Pow: the exponent may have another type
  return {{in[0].dtype, broadcast_shapes(in[0].shape, in[1].shape, "inputs")}};
}

Types compare(const Node&, Inputs in) {
  check_same_dtype(in, 0, 1);
  return {{DType::kBool, broadcast_shapes(in[0].shape, in[1].shape, "inputs")}};
}

Types where(const Node&, Inputs in) {
  check(in[0].dtype == DType::kBool, "condition must be bool, not ", dtype_name(in[0].dtype));
  check_same_dtype(in, 1, 2);
  Shape s = broadcast_shapes(in[0].shape, in[1].shape, "inputs");
  return {{in[1].dtype, broadcast_shapes(s, in[2].shape, "inputs")}};
}

// IfMerge(cond, then, else): one bool and two values of one type; the result is the one cond picks.
Types if_merge(const Node&, Inputs in) {
  check(in[0].dtype == DType::kBool && numel(in[0].shape) == 1, "condition must be one bool, not ", dtype_name(in[0].dtype), " ",
        shape_str(in[0].shape));
  check(in[1] == in[2], "the branches give ", dtype_name(in[1].dtype), " ", shape_str(in[1].shape), " and ", dtype_name(in[2].dtype), " ",
        shape_str(in[2].shape), ": an If decided at run time needs one type from both");
  return {in[1]};
}

std::vector<int64_t> normalized_axes(const Node& n, const std::string& attr, int64_t rank) {
  std::vector<int64_t> axes = n.attrs.ints(attr);
  for (int64_t& a : axes) a = normalize_axis(a, rank, attr);
  std::vector<int64_t> sorted = axes;
  std::sort(sorted.begin(), sorted.end());
  check(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end(), attr, " repeat an axis");
  return axes;
}

Types reduce(const Node& n, Inputs in) {
  const std::vector<int64_t> axes = normalized_axes(n, "axes", rank_of(in[0]));
  check(rank_of(in[0]) > 0 || axes.empty(), "axes given for a scalar");
  const bool keep = n.attrs.i("keepdims", 1) != 0;
  Shape out;
  for (int64_t d = 0; d < rank_of(in[0]); ++d) {
    const bool reduced = std::find(axes.begin(), axes.end(), d) != axes.end();
    if (!reduced) {
      out.push_back(in[0].shape[static_cast<size_t>(d)]);
    } else {
      check(in[0].shape[static_cast<size_t>(d)] > 0 || n.op == "ReduceSum" || n.op == "ReduceProd",
            "reduces an empty axis ", d);
      if (keep) out.push_back(1);
    }
  }
  return {{in[0].dtype, out}};
}

Types arg_reduce(const Node& n, Inputs in) {
  check(rank_of(in[0]) > 0, "expects an input of rank >= 1");  // normalize_axis accepts axis 0 of a scalar
  const int64_t axis = normalize_axis(n.attrs.i("axis"), rank_of(in[0]), "axis");
  Shape out = in[0].shape;
  check(out[static_cast<size_t>(axis)] > 0, "reduces an empty axis ", axis);
  if (n.attrs.i("keepdims", 1) != 0) {
    out[static_cast<size_t>(axis)] = 1;
  } else {
    out.erase(out.begin() + axis);
  }
  return {{DType::kI64, out}};
}

Types softmax(const Node& n, Inputs in) {
  normalize_axis(n.attrs.i("axis", -1), rank_of(in[0]), "axis");
  return {in[0]};
}

Types layer_norm(const Node& n, Inputs in) {
  const int64_t axis = normalize_axis(n.attrs.i("axis", -1), rank_of(in[0]), "axis");
  const Shape norm(in[0].shape.begin() + axis, in[0].shape.end());
  for (size_t k = 1; k < in.size(); ++k) {
    if (!in[k].present()) continue;
    check(broadcast_shapes(norm, in[k].shape, "scale/bias") == norm, "input ", k, " of shape ",
          shape_str(in[k].shape), " does not broadcast to the normalized shape ", shape_str(norm));
  }
  return {in[0]};
}

bool is_8bit_integer(DType t) { return t == DType::kI8 || t == DType::kU8; }

// MatMul: numpy's product of operands of one type; or of two 8-bit integer operands (int8 or
// uint8, either each: the raw product MatMulInteger and QLinearMatMul lower to), accumulated
// exactly into int32.
Types matmul(const Node&, Inputs in) {
  const bool bytes = is_8bit_integer(in[0].dtype) && is_8bit_integer(in[1].dtype);
  if (!bytes) check_same_dtype(in, 0, 1);
  Shape a = in[0].shape;
  Shape b = in[1].shape;
  check(!a.empty() && !b.empty(), "MatMul of a scalar");
  const bool a_vec = a.size() == 1;
  const bool b_vec = b.size() == 1;
  if (a_vec) a.insert(a.begin(), 1);
  if (b_vec) b.push_back(1);
  const int64_t k_a = a.back();
  const int64_t k_b = b[b.size() - 2];
  check(k_a == k_b, "inner dimensions differ: ", shape_str(in[0].shape), " @ ", shape_str(in[1].shape));
  const Shape batch = broadcast_shapes(Shape(a.begin(), a.end() - 2), Shape(b.begin(), b.end() - 2),
                                       "batch dimensions");
  Shape out = batch;
  if (!a_vec) out.push_back(a[a.size() - 2]);
  if (!b_vec) out.push_back(b.back());
  return {{bytes ? DType::kI32 : in[0].dtype, out}};
}

// Spatial output extent of a window of `k` taps (dilated) sliding with `stride` over `d` padded by
// `pb`/`pe`.
int64_t window_out(int64_t d, int64_t k, int64_t stride, int64_t dil, int64_t pb, int64_t pe, bool ceil_mode,
                   const char* what) {
  check(k > 0 && stride > 0 && dil > 0, what, ": kernel, stride and dilation must be positive");
  // Bounded so that the arithmetic below cannot overflow.
  check(k <= kMaxElements && stride <= kMaxElements && dil <= kMaxElements && k - 1 <= kMaxElements / dil &&
            pb <= kMaxElements && pe <= kMaxElements,
        what, ": kernel ", k, ", stride ", stride, ", dilation ", dil, " or padding ", pb, "+", pe, " is absurdly large");
  const int64_t span = dil * (k - 1) + 1;
  const int64_t avail = d + pb + pe - span;
  check(avail >= 0, what, ": window of ", span, " does not fit an input extent of ", d, " with padding ", pb,
        "+", pe);
  int64_t out = (ceil_mode ? (avail + stride - 1) / stride : avail / stride) + 1;
  if (ceil_mode && (out - 1) * stride >= d + pb) --out;  // the last window must start inside the input
  return out;
}

std::vector<int64_t> spatial_attr(const Node& n, const char* name, size_t count, int64_t fallback) {
  std::vector<int64_t> v = n.attrs.ints(name, std::vector<int64_t>(count, fallback));
  check(v.size() == count, name, " has ", v.size(), " entries, expected ", count);
  return v;
}

Types conv(const Node& n, Inputs in) {
  check_same_dtype(in, 0, 1);
  const TensorType& x = in[0];
  const TensorType& w = in[1];
  check(rank_of(x) >= 3 && rank_of(w) == rank_of(x), "expects X of rank >= 3 and W of the same rank, got ",
        shape_str(x.shape), " and ", shape_str(w.shape));
  const size_t sp = x.shape.size() - 2;
  const int64_t group = n.attrs.i("group", 1);
  check(group > 0 && x.shape[1] % group == 0 && w.shape[0] % group == 0, "group ", group,
        " does not divide channels ", x.shape[1], " and filters ", w.shape[0]);
  check(x.shape[1] / group == w.shape[1], "W expects ", w.shape[1], " input channels per group (", group,
        " groups), X has ", x.shape[1]);  // a division: w.shape[1] * group may overflow
  if (in.size() > 2 && in[2].present()) {
    check(in[2].shape == Shape{w.shape[0]}, "bias shape ", shape_str(in[2].shape), " is not [", w.shape[0], "]");
  }
  const auto strides = spatial_attr(n, "strides", sp, 1);
  const auto dil = spatial_attr(n, "dilations", sp, 1);
  const auto pads = spatial_attr(n, "pads", 2 * sp, 0);
  Shape out = {x.shape[0], w.shape[0]};
  for (size_t i = 0; i < sp; ++i) {
    check(pads[i] >= 0 && pads[i + sp] >= 0, "negative pads");
    out.push_back(window_out(x.shape[i + 2], w.shape[i + 2], strides[i], dil[i], pads[i], pads[i + sp], false,
                             "Conv"));
  }
  return {{x.dtype, out}};
}

Types pool(const Node& n, Inputs in) {
  const TensorType& x = in[0];
  check(rank_of(x) >= 3, "expects an input of rank >= 3, got ", shape_str(x.shape));
  const size_t sp = x.shape.size() - 2;
  const auto kernel = n.attrs.ints("kernel_shape");
  check(kernel.size() == sp, "kernel_shape has ", kernel.size(), " entries for ", sp, " spatial dimensions");
  const auto strides = spatial_attr(n, "strides", sp, 1);
  const auto dil = spatial_attr(n, "dilations", sp, 1);
  const auto pads = spatial_attr(n, "pads", 2 * sp, 0);
  const bool ceil_mode = n.attrs.i("ceil_mode", 0) != 0;
  Shape out = {x.shape[0], x.shape[1]};
  for (size_t i = 0; i < sp; ++i) {
    check(pads[i] >= 0 && pads[i + sp] >= 0, "negative pads");
    // window_out first: it bounds kernel and dilation, so that their product below cannot overflow.
    out.push_back(window_out(x.shape[i + 2], kernel[i], strides[i], dil[i], pads[i], pads[i + sp], ceil_mode,
                             n.op.c_str()));
    check(pads[i] < kernel[i] * dil[i] && pads[i + sp] < kernel[i] * dil[i], "pads ", pads[i], "+", pads[i + sp],
          " not smaller than the window ", kernel[i]);
  }
  return {{x.dtype, out}};
}

Types reshape(const Node& n, Inputs in) {
  const Shape out = n.attrs.ints("shape");
  check(checked_numel(out, "target shape") == numel(in[0].shape), "cannot reshape ", shape_str(in[0].shape),
        " to ", shape_str(out));
  return {{in[0].dtype, out}};
}

Types transpose(const Node& n, Inputs in) {
  const auto perm = n.attrs.ints("perm");
  check(static_cast<int64_t>(perm.size()) == rank_of(in[0]), "perm has ", perm.size(), " entries for rank ",
        rank_of(in[0]));
  std::vector<bool> seen(perm.size(), false);
  Shape out;
  for (int64_t p : perm) {
    check(p >= 0 && p < rank_of(in[0]) && !seen[static_cast<size_t>(p)], "perm is not a permutation");
    seen[static_cast<size_t>(p)] = true;
    out.push_back(in[0].shape[static_cast<size_t>(p)]);
  }
  return {{in[0].dtype, out}};
}

Types concat(const Node& n, Inputs in) {
  check(rank_of(in[0]) > 0, "cannot concatenate scalars");  // normalize_axis accepts axis 0 of a scalar
  const int64_t axis = normalize_axis(n.attrs.i("axis"), rank_of(in[0]), "axis");
  Shape out = in[0].shape;
  out[static_cast<size_t>(axis)] = 0;
  for (size_t k = 0; k < in.size(); ++k) {
    check(in[k].dtype == in[0].dtype && rank_of(in[k]) == rank_of(in[0]), "input ", k, " (",
          dtype_name(in[k].dtype), " ", shape_str(in[k].shape), ") does not match input 0");
    for (size_t d = 0; d < out.size(); ++d) {
      if (static_cast<int64_t>(d) == axis) continue;
      check(in[k].shape[d] == in[0].shape[d], "input ", k, " has shape ", shape_str(in[k].shape),
            ", input 0 has ", shape_str(in[0].shape), ": they differ off the concat axis");
    }
    out[static_cast<size_t>(axis)] += in[k].shape[static_cast<size_t>(axis)];
  }
  return {{in[0].dtype, out}};
}

Types slice(const Node& n, Inputs in) {
  const auto starts = n.attrs.ints("starts");
  const auto ends = n.attrs.ints("ends");
  const auto steps = n.attrs.ints("steps");
  const size_t r = in[0].shape.size();
  check(starts.size() == r && ends.size() == r && steps.size() == r, "starts/ends/steps must cover every axis");
  Shape out(r);
  for (size_t d = 0; d < r; ++d) {
    const int64_t dim = in[0].shape[d];
    check(steps[d] != 0, "step of axis ", d, " is zero");
    if (steps[d] > 0) {
      check(starts[d] >= 0 && starts[d] <= dim && ends[d] >= 0 && ends[d] <= dim, "bounds of axis ", d,
            " not normalized");
    } else {
      check(starts[d] >= -1 && starts[d] < std::max<int64_t>(dim, 1) && ends[d] >= -1 && ends[d] < std::max<int64_t>(dim, 1),
            "bounds of axis ", d, " not normalized");
    }
    // ceil(span / |step|), computed so that a step near the int64 limits cannot overflow.
    const int64_t span = steps[d] > 0 ? ends[d] - starts[d] : starts[d] - ends[d];
    const uint64_t mag = steps[d] > 0 ? static_cast<uint64_t>(steps[d]) : 0 - static_cast<uint64_t>(steps[d]);
    out[d] = span <= 0 ? 0 : static_cast<int64_t>((static_cast<uint64_t>(span) - 1) / mag + 1);
  }
  return {{in[0].dtype, out}};
}

Types gather(const Node& n, Inputs in) {
  check(rank_of(in[0]) > 0, "data must have rank >= 1");  // normalize_axis accepts axis 0 of a scalar
  const int64_t axis = normalize_axis(n.attrs.i("axis"), rank_of(in[0]), "axis");
  check(in[1].dtype == DType::kI64 || in[1].dtype == DType::kI32, "indices must be int32 or int64");
  Shape out(in[0].shape.begin(), in[0].shape.begin() + axis);
  out.insert(out.end(), in[1].shape.begin(), in[1].shape.end());
  out.insert(out.end(), in[0].shape.begin() + axis + 1, in[0].shape.end());
  return {{in[0].dtype, out}};
}

Types expand(const Node& n, Inputs in) {
  const Shape target = n.attrs.ints("shape");
  check(broadcast_shapes(in[0].shape, target, "input and target") == target, "input ", shape_str(in[0].shape),
        " does not broadcast to ", shape_str(target));
  checked_numel(target, "Expand target");
  return {{in[0].dtype, target}};
}

Types tile(const Node& n, Inputs in) {
  const auto reps = n.attrs.ints("repeats");
  check(static_cast<int64_t>(reps.size()) == rank_of(in[0]), "repeats has ", reps.size(), " entries for rank ",
        rank_of(in[0]));
  Shape out = in[0].shape;
  for (size_t d = 0; d < out.size(); ++d) {
    check(reps[d] >= 0, "negative repeat");
    check(reps[d] == 0 || out[d] <= kMaxElements / reps[d], "tiled shape is absurdly large");
    out[d] *= reps[d];
  }
  checked_numel(out, "Tile output");
  return {{in[0].dtype, out}};
}

Types pad(const Node& n, Inputs in) {
  const auto pads = n.attrs.ints("pads");
  const size_t r = in[0].shape.size();
  check(pads.size() == 2 * r, "pads has ", pads.size(), " entries for rank ", r);
  const std::string mode = n.attrs.s("mode", "constant");
  check(mode == "constant" || mode == "reflect" || mode == "edge", "unsupported pad mode '", mode, "'");
  Shape out = in[0].shape;
  for (size_t d = 0; d < r; ++d) {
    check(pads[d] <= kMaxElements && pads[d + r] <= kMaxElements, "absurd pads");
    out[d] += pads[d] + pads[d + r];
    check(out[d] >= 0, "pads of axis ", d, " crop more than the extent");
    if (mode == "reflect") check(in[0].shape[d] > std::max(pads[d], pads[d + r]) || (pads[d] <= 0 && pads[d + r] <= 0),
                                 "reflect pads of axis ", d, " exceed the extent");
    if (mode == "edge") check(in[0].shape[d] > 0 || (pads[d] <= 0 && pads[d + r] <= 0), "edge pad of an empty axis");
  }
  checked_numel(out, "Pad output");
  return {{in[0].dtype, out}};
}

Types resize(const Node& n, Inputs in) {
  const Shape sizes = n.attrs.ints("sizes");
  check(sizes.size() == in[0].shape.size(), "sizes has ", sizes.size(), " entries for rank ", in[0].shape.size());
  const auto scales = n.attrs.floats("scales");
  check(scales.size() == sizes.size(), "scales has ", scales.size(), " entries for rank ", sizes.size());
  const std::string mode = n.attrs.s("mode", "nearest");
  check(mode == "nearest" || mode == "linear", "unsupported Resize mode '", mode, "'");
  checked_numel(sizes, "Resize output");
  return {{in[0].dtype, sizes}};
}

Types scatter_nd(const Node&, Inputs in) {
  const TensorType& data = in[0];
  const TensorType& idx = in[1];
  check(idx.dtype == DType::kI64, "indices must be int64");
  check(!idx.shape.empty(), "indices must have rank >= 1");
  const int64_t k = idx.shape.back();
  check(k >= 1 && k <= rank_of(data), "index depth ", k, " exceeds data rank ", rank_of(data));
  Shape upd(idx.shape.begin(), idx.shape.end() - 1);
  upd.insert(upd.end(), data.shape.begin() + k, data.shape.end());
  check(in[2].shape == upd, "updates have shape ", shape_str(in[2].shape), ", expected ", shape_str(upd));
  check_same_dtype(in, 0, 2);
  return {data};
}

// RandomUniform: a generator of float32 uniforms of the `shape` attribute, no inputs.
Types random_uniform(const Node& n, Inputs) {
  check(n.attrs.has("key") && n.attrs.has("shape"), "a RandomUniform needs its key and its shape");
  const int64_t word = n.attrs.i("word", 0);
  check(word >= 0 && word <= 3, "word ", word, " is not one of Philox's four (0-3)");
  return {{DType::kF32, n.attrs.ints("shape")}};
}

Types prelu(const Node&, Inputs in) {
  check_same_dtype(in, 0, 1);
  check(broadcast_shapes(in[0].shape, in[1].shape, "slope") == in[0].shape, "slope of shape ",
        shape_str(in[1].shape), " does not broadcast to ", shape_str(in[0].shape));
  return {in[0]};
}

constexpr int kVariadic = 1 << 20;

constexpr std::array kOps = {
    // element-wise, one input
    OpSchema{"Abs", OpKind::kElementwise, 1, 1, same_as_input},
    OpSchema{"Atan", OpKind::kElementwise, 1, 1, same_as_input},
    OpSchema{"BitCast", OpKind::kElementwise, 1, 1, bit_cast},
    OpSchema{"Cast", OpKind::kElementwise, 1, 1, cast},
    OpSchema{"Ceil", OpKind::kElementwise, 1, 1, same_as_input},
    OpSchema{"Clip", OpKind::kElementwise, 1, 1, same_as_input},
    OpSchema{"BitwiseNot", OpKind::kElementwise, 1, 1, same_as_input},
    OpSchema{"Cos", OpKind::kElementwise, 1, 1, same_as_input},
    OpSchema{"Elu", OpKind::kElementwise, 1, 1, same_as_input},
    OpSchema{"Erf", OpKind::kElementwise, 1, 1, same_as_input},
    OpSchema{"Exp", OpKind::kElementwise, 1, 1, same_as_input},
    OpSchema{"Floor", OpKind::kElementwise, 1, 1, same_as_input},
    OpSchema{"HardSigmoid", OpKind::kElementwise, 1, 1, same_as_input},
    OpSchema{"HardSwish", OpKind::kElementwise, 1, 1, same_as_input},
    OpSchema{"IsInf", OpKind::kElementwise, 1, 1, to_bool},
    OpSchema{"IsNaN", OpKind::kElementwise, 1, 1, to_bool},
    OpSchema{"LeakyRelu", OpKind::kElementwise, 1, 1, same_as_input},
    OpSchema{"Log", OpKind::kElementwise, 1, 1, same_as_input},
    OpSchema{"Neg", OpKind::kElementwise, 1, 1, same_as_input},
    OpSchema{"Not", OpKind::kElementwise, 1, 1, to_bool},
    OpSchema{"Reciprocal", OpKind::kElementwise, 1, 1, same_as_input},
    OpSchema{"Relu", OpKind::kElementwise, 1, 1, same_as_input},
    OpSchema{"Round", OpKind::kElementwise, 1, 1, same_as_input},
    OpSchema{"Selu", OpKind::kElementwise, 1, 1, same_as_input},
    OpSchema{"Sigmoid", OpKind::kElementwise, 1, 1, same_as_input},
    OpSchema{"Sign", OpKind::kElementwise, 1, 1, same_as_input},
    OpSchema{"Sin", OpKind::kElementwise, 1, 1, same_as_input},
    OpSchema{"Softplus", OpKind::kElementwise, 1, 1, same_as_input},
    OpSchema{"Softsign", OpKind::kElementwise, 1, 1, same_as_input},
    OpSchema{"Sqrt", OpKind::kElementwise, 1, 1, same_as_input},
    OpSchema{"Tan", OpKind::kElementwise, 1, 1, same_as_input},
    OpSchema{"Tanh", OpKind::kElementwise, 1, 1, same_as_input},
    OpSchema{"ThresholdedRelu", OpKind::kElementwise, 1, 1, same_as_input},
    // element-wise, broadcasting
    OpSchema{"Add", OpKind::kElementwise, 2, 2, binary},
    OpSchema{"And", OpKind::kElementwise, 2, 2, compare},
    OpSchema{"BitShift", OpKind::kElementwise, 2, 2, binary},
    OpSchema{"BitwiseAnd", OpKind::kElementwise, 2, 2, binary},
    OpSchema{"BitwiseOr", OpKind::kElementwise, 2, 2, binary},
    OpSchema{"BitwiseXor", OpKind::kElementwise, 2, 2, binary},
    OpSchema{"Div", OpKind::kElementwise, 2, 2, binary},
    OpSchema{"Equal", OpKind::kElementwise, 2, 2, compare},
    OpSchema{"Greater", OpKind::kElementwise, 2, 2, compare},
    OpSchema{"GreaterOrEqual", OpKind::kElementwise, 2, 2, compare},
    OpSchema{"Less", OpKind::kElementwise, 2, 2, compare},
    OpSchema{"LessOrEqual", OpKind::kElementwise, 2, 2, compare},
    OpSchema{"Max", OpKind::kElementwise, 2, 2, binary},
    OpSchema{"Min", OpKind::kElementwise, 2, 2, binary},
    OpSchema{"Mod", OpKind::kElementwise, 2, 2, binary},
    OpSchema{"Mul", OpKind::kElementwise, 2, 2, binary},
    OpSchema{"Or", OpKind::kElementwise, 2, 2, compare},
    OpSchema{"PRelu", OpKind::kElementwise, 2, 2, prelu},
    OpSchema{"Pow", OpKind::kElementwise, 2, 2, binary_any_exponent},
    OpSchema{"RandomUniform", OpKind::kElementwise, 0, 0, random_uniform},
    OpSchema{"Sub", OpKind::kElementwise, 2, 2, binary},
    OpSchema{"Where", OpKind::kElementwise, 3, 3, where},
    OpSchema{"Xor", OpKind::kElementwise, 2, 2, compare},
    // reductions
    OpSchema{"ArgMax", OpKind::kReduction, 1, 1, arg_reduce},
    OpSchema{"ArgMin", OpKind::kReduction, 1, 1, arg_reduce},
    OpSchema{"ReduceMax", OpKind::kReduction, 1, 1, reduce},
    OpSchema{"ReduceMean", OpKind::kReduction, 1, 1, reduce},
    OpSchema{"ReduceMin", OpKind::kReduction, 1, 1, reduce},
    OpSchema{"ReduceProd", OpKind::kReduction, 1, 1, reduce},
    OpSchema{"ReduceSum", OpKind::kReduction, 1, 1, reduce},
    // normalizations
    OpSchema{"LayerNormalization", OpKind::kNormalization, 2, 3, layer_norm},
    OpSchema{"LogSoftmax", OpKind::kNormalization, 1, 1, softmax},
    OpSchema{"Softmax", OpKind::kNormalization, 1, 1, softmax},
    // contractions
    OpSchema{"Conv", OpKind::kContraction, 2, 3, conv},
    OpSchema{"MatMul", OpKind::kContraction, 2, 2, matmul},
    // pooling
    OpSchema{"AveragePool", OpKind::kPooling, 1, 1, pool},
    OpSchema{"MaxPool", OpKind::kPooling, 1, 1, pool},
    // data movement
    OpSchema{"Concat", OpKind::kDataMovement, 1, kVariadic, concat},
    OpSchema{"Expand", OpKind::kDataMovement, 1, 1, expand},
    OpSchema{"Gather", OpKind::kDataMovement, 2, 2, gather},
    OpSchema{"IfMerge", OpKind::kDataMovement, 3, 3, if_merge},
    OpSchema{"Pad", OpKind::kDataMovement, 1, 1, pad},
    OpSchema{"Reshape", OpKind::kDataMovement, 1, 1, reshape},
    OpSchema{"Resize", OpKind::kDataMovement, 1, 1, resize},
    OpSchema{"ScatterND", OpKind::kDataMovement, 3, 3, scatter_nd},
    OpSchema{"Slice", OpKind::kDataMovement, 1, 1, slice},
    OpSchema{"Tile", OpKind::kDataMovement, 1, 1, tile},
    OpSchema{"Transpose", OpKind::kDataMovement, 1, 1, transpose},
};

}  // namespace

std::string_view op_kind_name(OpKind k) {
  switch (k) {
    case OpKind::kElementwise: return "elementwise";
    case OpKind::kReduction: return "reduction";
    case OpKind::kNormalization: return "normalization";
    case OpKind::kContraction: return "contraction";
    case OpKind::kPooling: return "pooling";
    case OpKind::kDataMovement: return "data-movement";
  }
  return "?";
}

bool runs_as_stage(const Node& n) {
  const OpKind k = find_op(n.op)->kind;
  return (k != OpKind::kElementwise && k != OpKind::kDataMovement) || n.op == "ScatterND";
}

const OpSchema* find_op(std::string_view name) {
  for (const OpSchema& s : kOps) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

std::span<const OpSchema> canonical_ops() { return kOps; }

std::vector<TensorType> infer_types(const Node& node, std::span<const TensorType> inputs) {
  const OpSchema* schema = find_op(node.op);
  check(schema != nullptr, "node '", node.name, "': '", node.op, "' is not a canonical op");
  const int n = static_cast<int>(inputs.size());
  check(n >= schema->min_inputs && n <= schema->max_inputs, "node '", node.name, "' (", node.op, "): ", n,
        " inputs, expected ", schema->min_inputs, "..", std::min(schema->max_inputs, 99));
  for (int k = 0; k < std::min(n, schema->min_inputs); ++k) {
    check(inputs[static_cast<size_t>(k)].present(), "node '", node.name, "' (", node.op, "): required input ", k,
          " is missing");
  }
  try {
    std::vector<TensorType> out = schema->infer(node, inputs);
    // Shape functions may multiply or broadcast extents: reject absurd results here, once for all
    // ops, so that numel() of any value in a graph cannot overflow.
    for (const TensorType& t : out) checked_numel(t.shape, "output");
    return out;
  } catch (const Error& e) {
    fail("node '", node.name, "' (", node.op, "): ", e.what());
  }
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const std::string& what) {
  const size_t r = std::max(a.size(), b.size());
  Shape out(r);
  for (size_t i = 0; i < r; ++i) {
    const int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    const int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    check(da == db || da == 1 || db == 1, what, " of shapes ", shape_str(a), " and ", shape_str(b),
          " do not broadcast");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

int64_t normalize_axis(int64_t axis, int64_t rank, const std::string& what) {
  const int64_t lo = rank == 0 ? -1 : -rank;
  const int64_t hi = rank == 0 ? 0 : rank - 1;
  check(axis >= lo && axis <= hi, what, " ", axis, " is out of range for rank ", rank);
  return axis < 0 ? axis + std::max<int64_t>(rank, 1) : axis;
}

int64_t node_flops(const Graph& g, const Node& n) {
  const OpSchema* schema = find_op(n.op);
  if (schema == nullptr || n.outputs.empty()) return 0;
  const Shape& out = g.value(n.outputs[0]).shape;
  const int64_t out_elems = numel(out);
  // A generator (RandomUniform) has no input; its integer rounds are not floating-point work.
  if (n.inputs.empty()) return 0;
  const Shape& in0 = g.value(n.inputs[0]).shape;
  switch (schema->kind) {
    case OpKind::kElementwise: return n.op == "Cast" || n.op == "BitCast" ? 0 : out_elems;
    case OpKind::kReduction: return numel(in0);
    case OpKind::kNormalization: return (n.op == "LayerNormalization" ? 8 : 5) * numel(in0);
    case OpKind::kContraction: {
      if (n.op == "MatMul") {
        const Shape& a = in0;
        return 2 * out_elems * a.back();
      }
      const Shape& w = g.value(n.inputs[1]).shape;  // Conv: each output sums Cin/group x kernel taps
      return w[0] == 0 ? 0 : 2 * out_elems * (numel(w) / w[0]);
    }
    case OpKind::kPooling: {
      int64_t taps = 1;
      for (int64_t k : n.attrs.ints("kernel_shape")) taps *= k;
      return out_elems * taps;
    }
    case OpKind::kDataMovement: return 0;
  }
  return 0;
}

int64_t node_special_ops(const Graph& g, const Node& n) {
  static const std::set<std::string_view> transcendental = {"Acos", "Asin", "Atan", "Cos", "Cosh", "Elu", "Erf",
                                                            "Exp",  "Log",  "Pow",  "Selu", "Sigmoid", "Sin", "Sinh",
                                                            "Softplus", "Sqrt", "Tan", "Tanh"};
  if (n.outputs.empty() || n.inputs.empty()) return 0;
  const int64_t out = numel(g.value(n.outputs[0]).shape);
  if (transcendental.count(n.op)) return out;
  if (n.op == "Softmax") return 2 * out;
  if (n.op == "LogSoftmax") return out;
  if (n.op == "LayerNormalization") {
    const Shape& x = g.value(n.inputs[0]).shape;
    const int64_t axis = normalize_axis(n.attrs.i("axis", -1), static_cast<int64_t>(x.size()), "axis");
    int64_t rows = 1;
    for (int64_t a = 0; a < axis; ++a) rows *= x[static_cast<size_t>(a)];
    return rows;
  }
  return 0;
}

NarrowCast cast_rounding(const Node& n) {
  const int64_t mode = n.attrs.i("round_mode", 0);
  check(mode >= 0 && mode <= static_cast<int64_t>(RoundMode::kNearest), "Cast round_mode code ", mode, " is unknown");
  return {n.attrs.i("saturate", 1) != 0, static_cast<RoundMode>(mode)};
}

}  // namespace fusetune
