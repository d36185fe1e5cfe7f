#include "importer/lower.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>

#include "core/error.h"
#include "core/ops.h"
#include "importer/control_flow.h"
#include "importer/lower_conv_transpose.h"
#include "importer/lower_data_sized.h"
#include "importer/lower_deform_conv.h"
#include "importer/lower_det.h"
#include "importer/lower_dft.h"
#include "importer/lower_grid_sample.h"
#include "importer/lower_quant.h"
#include "importer/lower_random.h"
#include "importer/lower_recurrent.h"
#include "importer/lower_roi_align.h"
#include "importer/lower_state_space.h"
#include "importer/lower_tfidf.h"
#include "importer/lower_topk.h"
#include "importer/sequences.h"
#include "importer/onnx_io.h"

namespace fusetune::importer {

NodeLowering::NodeLowering(const onnx::NodeProto& proto, int64_t opset, GraphBuilder& b, std::vector<int> inputs,
                           std::filesystem::path base_dir)
    : proto_(proto), opset_(opset), b_(b), inputs_(std::move(inputs)), base_dir_(std::move(base_dir)) {
  name_ = proto.name().empty() ? (proto.output_size() > 0 ? proto.output(0) : proto.op_type()) : proto.name();
  for (const auto& a : proto.attribute()) attrs_[a.name()] = &a;
  outputs_.assign(static_cast<size_t>(proto.output_size()), kNoValue);
}

int64_t NodeLowering::attr_i(const std::string& n, int64_t fallback) const {
  read_.insert(n);
  auto it = attrs_.find(n);
  return it == attrs_.end() ? fallback : it->second->i();
}

float NodeLowering::attr_f(const std::string& n, float fallback) const {
  read_.insert(n);
  auto it = attrs_.find(n);
  return it == attrs_.end() ? fallback : it->second->f();
}

std::string NodeLowering::attr_s(const std::string& n, const std::string& fallback) const {
  read_.insert(n);
  auto it = attrs_.find(n);
  return it == attrs_.end() ? fallback : it->second->s();
}

std::vector<int64_t> NodeLowering::attr_ints(const std::string& n, std::vector<int64_t> fallback) const {
  read_.insert(n);
  auto it = attrs_.find(n);
  return it == attrs_.end() ? fallback : std::vector<int64_t>(it->second->ints().begin(), it->second->ints().end());
}

std::vector<float> NodeLowering::attr_floats(const std::string& n, std::vector<float> fallback) const {
  read_.insert(n);
  auto it = attrs_.find(n);
  return it == attrs_.end() ? fallback : std::vector<float>(it->second->floats().begin(), it->second->floats().end());
}

std::vector<std::string> NodeLowering::attr_strings(const std::string& n) const {
  read_.insert(n);
  auto it = attrs_.find(n);
  return it == attrs_.end() ? std::vector<std::string>{} : std::vector<std::string>(it->second->strings().begin(), it->second->strings().end());
}

Tensor NodeLowering::attr_tensor(const std::string& n) const {
  read_.insert(n);
  auto it = attrs_.find(n);
  check(it != attrs_.end() && it->second->has_t(), "attribute '", n, "' (a tensor) is missing");
  return decode_tensor(it->second->t(), base_dir_);
}

void NodeLowering::check_attributes_read() const {
  for (const auto& [n, a] : attrs_) {
    check(read_.count(n) != 0, "attribute '", n, "' is not supported (fusetune reads ", op(), " at opset ", opset_,
          " without it)");
  }
}

int NodeLowering::input(size_t k) const {
  check(has_input(k), "required input ", k, " is missing");
  return inputs_[k];
}

const Tensor& NodeLowering::const_input(size_t k, const char* what) const {
  const Value& v = val(k);
  if (const Tensor* t = b_.known(input(k))) return *t;
  check(v.is_constant(), "input ", k, " ('", v.name, "', the ", what,
        ") is not a constant; fusetune needs it known at import time (static shapes)");
  return *v.data;
}

int NodeLowering::emit(const std::string& op, std::vector<int> inputs, Attributes attrs) {
  const std::string n = emitted_++ == 0 ? name_ : name_ + "/" + op + std::to_string(emitted_ - 1);
  return b_.emit(op, std::move(inputs), std::move(attrs), n);
}

int NodeLowering::constant(Tensor t) { return b_.constant(std::move(t), name_ + "/const" + std::to_string(emitted_++)); }

int NodeLowering::reshape(int v, const Shape& to) {
  if (b_.value(v).shape == to) return v;
  if (const Node* p = b_.producer(v); p != nullptr && p->op == "Reshape") v = p->inputs[0];  // collapse chains
  if (b_.value(v).shape == to) return v;
  Attributes a;
  a.set("shape", to);
  return emit("Reshape", {v}, a);
}

void NodeLowering::set_output(size_t k, int v) {
  if (k < outputs_.size()) outputs_[k] = v;
}

int transpose2d(NodeLowering& L, int v) {
  Attributes a;
  a.set("perm", std::vector<int64_t>{1, 0});
  return L.emit("Transpose", {v}, a);
}

int cast_to(NodeLowering& L, int v, DType to) {
  if (L.builder().value(v).dtype == to) return v;
  Attributes a;
  a.set("to", static_cast<int64_t>(dtype_to_onnx(to)));
  return L.emit("Cast", {v}, a);
}

std::pair<int64_t, int64_t> integer_range(DType t) {
  switch (t) {
    case DType::kI8: return {INT8_MIN, INT8_MAX};
    case DType::kI16: return {INT16_MIN, INT16_MAX};
    case DType::kI32: return {INT32_MIN, INT32_MAX};
    case DType::kI64: return {INT64_MIN, INT64_MAX};
    case DType::kU8: return {0, UINT8_MAX};
    case DType::kU16: return {0, UINT16_MAX};
    case DType::kU32: return {0, UINT32_MAX};
    case DType::kU64: return {0, -1};
    case DType::kBool: return {0, 1};
    case DType::kI4: return {-8, 7};
    case DType::kU4: return {0, 15};
    case DType::kI2: return {-2, 1};
    case DType::kU2: return {0, 3};
    default: fail("no integer range for ", dtype_name(t));
  }
}

int iota_along(NodeLowering& L, size_t rank, int64_t axis, int64_t n) {
  Shape along(rank, 1);
  along[static_cast<size_t>(axis)] = n;
  std::vector<int64_t> iota(static_cast<size_t>(n));
  std::iota(iota.begin(), iota.end(), int64_t{0});
  return L.constant(Tensor::from_ints(DType::kI64, along, iota));
}

int reduce_node(NodeLowering& L, const std::string& op, int x, const std::vector<int64_t>& axes, int64_t keep) {
  Attributes a;
  a.set("axes", axes);
  a.set("keepdims", keep);
  return L.emit(op, {x}, a);
}

int zero_pad(NodeLowering& L, int v, const std::vector<int64_t>& pads) {
  Attributes a;
  a.set("pads", pads);
  a.set("mode", std::string("constant"));
  a.set("value", 0.0f);
  return L.emit("Pad", {v}, a);
}

int slice_axes(NodeLowering& L, int v, const std::vector<int64_t>& starts_in, const std::vector<int64_t>& ends_in,
               const std::vector<int64_t>& axes_in, const std::vector<int64_t>& steps_in) {
  const Shape& s = L.builder().value(v).shape;
  const size_t r = s.size();
  std::vector<int64_t> starts(r, 0), ends(s.begin(), s.end()), steps(r, 1);
  check(starts_in.size() == ends_in.size() && axes_in.size() == starts_in.size() && steps_in.size() == starts_in.size(),
        "starts, ends, axes and steps differ in length");
  check(r > 0 || axes_in.empty(), "cannot slice a scalar");  // normalize_axis accepts axis 0 of a scalar
  std::vector<bool> seen(r, false);
  for (size_t i = 0; i < axes_in.size(); ++i) {
    const auto d = static_cast<size_t>(normalize_axis(axes_in[i], static_cast<int64_t>(r), "axes"));
    check(!seen[d], "axis ", d, " is sliced twice");
    seen[d] = true;
    const int64_t dim = s[d];
    const int64_t step = steps_in[i];
    check(step != 0, "step of axis ", d, " is zero");
    int64_t st = starts_in[i];
    int64_t en = ends_in[i];
    if (st < 0) st += dim;
    if (en < 0 && en > std::numeric_limits<int64_t>::min() + dim) en += dim;
    if (step > 0) {
      st = std::clamp<int64_t>(st, 0, dim);
      en = std::clamp<int64_t>(en, 0, dim);
    } else {
      st = std::clamp<int64_t>(st, -1, dim - 1);
      en = std::clamp<int64_t>(en, -1, dim - 1);
    }
    starts[d] = st;
    ends[d] = en;
    steps[d] = step;
  }
  bool whole = true;
  for (size_t d = 0; d < r; ++d) whole = whole && starts[d] == 0 && ends[d] == s[d] && steps[d] == 1;
  if (whole) return v;
  Attributes a;
  a.set("starts", starts);
  a.set("ends", ends);
  a.set("steps", steps);
  return L.emit("Slice", {v}, a);
}

namespace {

using Lowering = void (*)(NodeLowering&);

int64_t axis_of(NodeLowering& L, const std::string& attr, int64_t fallback, int64_t rank) {
  return normalize_axis(L.attr_i(attr, fallback), rank, attr);
}

int scalar_like(NodeLowering& L, size_t k, double v) {
  const DType t = L.val(k).dtype;
  return L.constant(is_float(t) ? Tensor::scalar_float(t, static_cast<float>(v))
                                : Tensor::scalar_int(t, static_cast<int64_t>(v)));
}

// A constant input that ONNX defines as a scalar (a one-element tensor of any rank is accepted).
const Tensor& scalar_input(NodeLowering& L, size_t k, const char* what) {
  const Tensor& t = L.const_input(k, what);
  check(t.numel() == 1, "input ", k, " (the ", what, ") must hold one value, it has shape ", shape_str(t.shape()));
  return t;
}

// Ops whose canonical form is the ONNX op with the same inputs and attributes.
void pass_through(NodeLowering& L) {
  std::vector<int> ins;
  for (size_t k = 0; k < L.input_count(); ++k) ins.push_back(L.has_input(k) ? L.input(k) : kNoValue);
  L.set_output(0, L.emit(L.op(), ins));
}

// Binary element-wise ops. Before opset 7 they broadcast only when `broadcast` is 1, ONNX's
// legacy way: B's shape matches A's from `axis` on (by default A's trailing axes), which a
// Reshape of B to A's rank turns into numpy broadcasting; opset 1's `consumed_inputs` (a hint
// for reusing buffers) means nothing here.
void binary(NodeLowering& L) {
  int b = L.input(1);
  if (L.opset() < 7) {
    L.attr_ints("consumed_inputs");
    const int64_t ra = L.rank(0), rb = L.rank(1);
    const int64_t axis = L.attr_i("axis", ra - rb);
    if (L.attr_i("broadcast", 0) != 0 && rb < ra) {
      const int64_t at = axis < 0 ? axis + ra : axis;
      check(at >= 0 && at + rb <= ra, "axis ", axis, ": B of shape ", shape_str(L.shape(1)), " does not fit A of shape ",
            shape_str(L.shape(0)), " from there");
      Shape aligned(static_cast<size_t>(ra), 1);
      const Shape bs = L.shape(1);
      std::copy(bs.begin(), bs.end(), aligned.begin() + at);
      b = L.reshape(b, aligned);
    }
  }
  L.set_output(0, L.emit(L.op(), {L.input(0), b}));
}

// Unary ops with float attributes whose ONNX defaults become explicit canonical attributes.
void unary_with_defaults(NodeLowering& L) {
  static const std::map<std::string, std::vector<std::pair<std::string, float>>> kDefaults = {
      {"Elu", {{"alpha", 1.0f}}},
      {"HardSigmoid", {{"alpha", 0.2f}, {"beta", 0.5f}}},
      {"LeakyRelu", {{"alpha", 0.01f}}},
      {"Selu", {{"alpha", 1.67326319217681884765625f}, {"gamma", 1.05070102214813232421875f}}},
      {"ThresholdedRelu", {{"alpha", 1.0f}}},
  };
  Attributes a;
  for (const auto& [name, def] : kDefaults.at(L.op())) a.set(name, L.attr_f(name, def));
  L.set_output(0, L.emit(L.op(), {L.input(0)}, a));
}

void is_inf(NodeLowering& L) {
  Attributes a;
  a.set("detect_negative", L.attr_i("detect_negative", 1));
  a.set("detect_positive", L.attr_i("detect_positive", 1));
  L.set_output(0, L.emit("IsInf", {L.input(0)}, a));
}

void clip(NodeLowering& L) {
  float lo = -std::numeric_limits<float>::infinity();
  float hi = std::numeric_limits<float>::infinity();
  if (L.opset() < 11) {
    lo = L.attr_f("min", lo);
    hi = L.attr_f("max", hi);
  } else {
    if (L.has_input(1)) lo = scalar_input(L, 1, "min").to_floats()[0];
    if (L.has_input(2)) hi = scalar_input(L, 2, "max").to_floats()[0];
  }
  Attributes a;
  a.set("min", lo);
  a.set("max", hi);
  L.set_output(0, L.emit("Clip", {L.input(0)}, a));
}

// Cast's `saturate` (19) and `round_mode` (24) concern float8, E8M0 and float4 targets only;
// they become attributes of the canonical Cast for those (other Casts keep their signature).
void set_narrow_cast_attributes(NodeLowering& L, DType to, Attributes& a) {
  const int64_t saturate = L.attr_i("saturate", 1);
  const std::string round_mode = L.attr_s("round_mode", "up");
  if (!is_narrow_float(to)) return;
  a.set("saturate", saturate != 0 ? int64_t{1} : int64_t{0});
  try {
    a.set("round_mode", static_cast<int64_t>(round_mode_from_name(round_mode)));
  } catch (const Error& e) {
    fail("attribute round_mode: ", e.what());
  }
}

void cast(NodeLowering& L) {
  const int64_t to = L.attr_i("to", 0);
  const DType dt = dtype_from_onnx(static_cast<int>(to));
  check(dt != DType::kUndefined, "Cast to unsupported type ", onnx_type_name(static_cast<int>(to)));
  Attributes a;
  a.set("to", to);
  set_narrow_cast_attributes(L, dt, a);
  if (dt == L.val(0).dtype) {  // to the type it has: the value itself (exporters write such casts around every layer)
    L.set_output(0, L.input(0));
    return;
  }
  L.set_output(0, L.emit("Cast", {L.input(0)}, a));
}

// BitCast (26): the same bits as another type of the same width (a canonical BitCast; none for
// the same type). To bool only from bool: a byte other than 0 and 1 is no bool.
void bit_cast(NodeLowering& L) {
  const int64_t to = L.attr_i("to", 0);
  const DType dt = dtype_from_onnx(static_cast<int>(to)), from = L.val(0).dtype;
  check(dt != DType::kUndefined, "BitCast to unsupported type ", onnx_type_name(static_cast<int>(to)));
  check(dt != DType::kBool || from == DType::kBool, "BitCast of ", dtype_name(from), " to bool: a byte other than 0 and 1 is no bool");
  if (dt == from) {
    L.set_output(0, L.input(0));
    return;
  }
  Attributes a;
  a.set("to", to);
  L.set_output(0, L.emit("BitCast", {L.input(0)}, a));
}

void cast_like(NodeLowering& L) {
  const DType dt = L.val(1).dtype;
  Attributes a;
  a.set("to", static_cast<int64_t>(dtype_to_onnx(dt)));
  set_narrow_cast_attributes(L, dt, a);
  if (dt == L.val(0).dtype) {
    L.set_output(0, L.input(0));
    return;
  }
  L.set_output(0, L.emit("Cast", {L.input(0)}, a));
}

void mod(NodeLowering& L) {
  Attributes a;
  a.set("fmod", L.attr_i("fmod", 0));
  L.set_output(0, L.emit("Mod", {L.input(0), L.input(1)}, a));
}

void identity(NodeLowering& L) { L.set_output(0, L.input(0)); }

void dropout(NodeLowering& L) {
  // Inference: the identity. training_mode=true with a ratio of zero is the identity as well.
  // `seed` only seeds training's random masks; before opset 12 `ratio` is an attribute, and before
  // 7 `is_test` = 0 asks for training; `consumed_inputs` (opset 1) is a legacy optimisation hint.
  L.attr_i("seed", 0);
  L.attr_ints("consumed_inputs", {});
  const float ratio_attr = L.attr_f("ratio", 0.5f);
  check(L.attr_i("is_test", 1) != 0 || ratio_attr == 0.0f, "training-mode Dropout (is_test = 0) with ratio ", ratio_attr,
        " is random; only inference is supported");
  if (L.has_input(2) && scalar_input(L, 2, "training_mode").to_ints()[0] != 0) {
    const float ratio = L.has_input(1) ? scalar_input(L, 1, "ratio").to_floats()[0] : 0.5f;
    check(ratio == 0.0f, "training-mode Dropout with ratio ", ratio, " is random; only inference is supported");
  }
  L.set_output(0, L.input(0));
  if (L.output_used(1)) {
    Tensor ones(DType::kBool, L.shape(0));
    ones.set_ints(std::vector<int64_t>(static_cast<size_t>(ones.numel()), 1));
    L.set_output(1, L.constant(std::move(ones)));
  }
}

void variadic(NodeLowering& L) {  // Sum, Max, Min, Mean -> chains of binary ops
  const std::string op = L.op() == "Sum" || L.op() == "Mean" ? "Add" : L.op();
  int acc = L.input(0);
  for (size_t k = 1; k < L.input_count(); ++k) acc = L.emit(op, {acc, L.input(k)});
  if (L.op() == "Mean") acc = L.emit("Div", {acc, scalar_like(L, 0, static_cast<double>(L.input_count()))});
  if (L.input_count() == 1 && acc == L.input(0)) acc = L.reshape(acc, L.shape(0));
  L.set_output(0, acc);
}


// Axes of a Reduce*: from the attribute (older opsets) or the second input (ReduceSum 13+, all 18+).
std::vector<int64_t> reduce_axes(NodeLowering& L, bool& noop) {
  std::vector<int64_t> axes;
  const bool axes_as_input = (L.op() == "ReduceSum" && L.opset() >= 13) || L.opset() >= 18;
  if (axes_as_input) {
    if (L.has_input(1)) axes = L.const_ints(1, "axes");
  } else {
    axes = L.attr_ints("axes");
  }
  noop = false;
  const bool noop_if_empty = L.attr_i("noop_with_empty_axes", 0) != 0;
  if (axes.empty()) {
    if (noop_if_empty) {
      noop = true;
    } else {
      axes.resize(static_cast<size_t>(L.rank(0)));
      std::iota(axes.begin(), axes.end(), 0);
    }
  }
  for (int64_t& a : axes) a = normalize_axis(a, L.rank(0), "axes");
  std::sort(axes.begin(), axes.end());
  return axes;
}


void reduce(NodeLowering& L) {
  bool noop = false;
  const std::vector<int64_t> axes = reduce_axes(L, noop);
  const int64_t keep = L.attr_i("keepdims", 1) != 0 ? 1 : 0;
  int x = L.input(0);
  if (noop) {
    L.set_output(0, x);
    return;
  }
  const std::string& op = L.op();
  const Shape in = L.shape(0);
  const bool empty = std::any_of(axes.begin(), axes.end(), [&](int64_t a) { return in[static_cast<size_t>(a)] == 0; });
  if (empty && (op == "ReduceMax" || op == "ReduceMin" || op == "ReduceMean")) {
    // Over an empty set: the identity of max (-inf, the type's lowest, false) or of min, or NaN
    // for the mean (0 / 0), as ONNX defines it.
    Shape out;
    for (int64_t d = 0; d < static_cast<int64_t>(in.size()); ++d) {
      if (std::find(axes.begin(), axes.end(), d) == axes.end()) out.push_back(in[static_cast<size_t>(d)]);
      else if (keep != 0) out.push_back(1);
    }
    const DType dt = L.val(0).dtype;
    Tensor t(dt, out);
    if (is_float(dt)) {
      const double v = op == "ReduceMean" ? std::numeric_limits<double>::quiet_NaN()
                                          : (op == "ReduceMax" ? -1 : 1) * std::numeric_limits<double>::infinity();
      t.set_doubles(std::vector<double>(static_cast<size_t>(t.numel()), v));
    } else {
      check(op != "ReduceMean", "the mean of an empty set of integers is not defined");
      const auto [lowest, highest] = integer_range(dt);
      const int64_t v = op == "ReduceMax" ? lowest : highest;
      t.set_ints(std::vector<int64_t>(static_cast<size_t>(t.numel()), v));
    }
    L.set_output(0, L.constant(std::move(t)));
    return;
  }
  if (op == "ReduceL1") {
    L.set_output(0, reduce_node(L, "ReduceSum", L.emit("Abs", {x}), axes, keep));
  } else if (op == "ReduceL2") {
    L.set_output(0, L.emit("Sqrt", {reduce_node(L, "ReduceSum", L.emit("Mul", {x, x}), axes, keep)}));
  } else if (op == "ReduceSumSquare") {
    L.set_output(0, reduce_node(L, "ReduceSum", L.emit("Mul", {x, x}), axes, keep));
  } else if (op == "ReduceLogSum") {
    L.set_output(0, L.emit("Log", {reduce_node(L, "ReduceSum", x, axes, keep)}));
  } else if (op == "ReduceLogSumExp") {
    L.set_output(0, L.emit("Log", {reduce_node(L, "ReduceSum", L.emit("Exp", {x}), axes, keep)}));
  } else {
    L.set_output(0, reduce_node(L, op, x, axes, keep));
  }
}

void arg_reduce(NodeLowering& L) {
  Attributes a;
  a.set("axis", axis_of(L, "axis", 0, L.rank(0)));
  a.set("keepdims", L.attr_i("keepdims", 1) != 0 ? int64_t{1} : int64_t{0});
  a.set("select_last_index", L.attr_i("select_last_index", 0));
  L.set_output(0, L.emit(L.op(), {L.input(0)}, a));
}

void softmax(NodeLowering& L) {
  const int64_t r = L.rank(0);
  const int64_t axis = axis_of(L, "axis", L.opset() >= 13 ? -1 : 1, r);
  Attributes a;
  if (L.opset() >= 13 || axis == r - 1) {
    a.set("axis", axis);
    L.set_output(0, L.emit(L.op(), {L.input(0)}, a));
    return;
  }
  // Before opset 13 the op works on the input coerced to 2-D at `axis`. A copy: emitting nodes
  // grows the graph's value table, which would leave a reference into it dangling.
  const Shape s = L.shape(0);
  const int64_t outer = numel(Shape(s.begin(), s.begin() + axis));
  const int64_t inner = numel(Shape(s.begin() + axis, s.end()));
  a.set("axis", int64_t{1});
  const int y = L.emit(L.op(), {L.reshape(L.input(0), {outer, inner})}, a);
  L.set_output(0, L.reshape(y, s));
}

// Indices v as int64, negative ones counted from the end of `n`: Where(v < 0, v + n, v).
int from_end(NodeLowering& L, int v, int64_t n) {
  const int idx = cast_to(L, v, DType::kI64);
  return L.emit("Where", {L.emit("Less", {idx, L.constant(Tensor::scalar_int(DType::kI64, 0))}),
                          L.emit("Add", {idx, L.constant(Tensor::scalar_int(DType::kI64, n))}), idx});
}

// Hardmax: 1 where an element is the first maximum of its row along the axis, else 0: ArgMax
// (keeping the axis) against a constant iota along the axis. Before opset 13 on the input coerced
// to 2-D at the axis, as Softmax.
int hardmax_along(NodeLowering& L, int v, int64_t axis) {
  const Shape s = L.builder().value(v).shape;  // a copy: emitting grows the value table
  const DType dt = L.builder().value(v).dtype;
  Attributes a;
  a.set("axis", axis);
  a.set("keepdims", int64_t{1});
  a.set("select_last_index", int64_t{0});
  const int arg = L.emit("ArgMax", {v}, a);
  return cast_to(L, L.emit("Equal", {iota_along(L, s.size(), axis, s[static_cast<size_t>(axis)]), arg}), dt);
}

void hardmax(NodeLowering& L) {
  const int64_t r = L.rank(0);
  const int64_t axis = axis_of(L, "axis", L.opset() >= 13 ? -1 : 1, r);
  if (L.opset() >= 13 || axis == r - 1) {
    L.set_output(0, hardmax_along(L, L.input(0), axis));
    return;
  }
  const Shape s = L.shape(0);
  const int64_t outer = numel(Shape(s.begin(), s.begin() + axis));
  const int64_t inner = numel(Shape(s.begin() + axis, s.end()));
  L.set_output(0, L.reshape(hardmax_along(L, L.reshape(L.input(0), {outer, inner}), 1), s));
}

// stash_type: the precision of a normalization's statistics, 1 (float). The canonical ops compute
// them in float or wider for every input type.
void require_float_stash(NodeLowering& L) {
  const int64_t stash = L.attr_i("stash_type", 1);
  check(stash == 1, "stash_type ", stash, " is not supported (1, float, is)");
}

void layer_norm(NodeLowering& L) {
  require_float_stash(L);
  const int64_t axis = axis_of(L, "axis", -1, L.rank(0));
  if (L.output_used(1) || L.output_used(2)) {
    // The statistics are wanted too: spell the normalization out so they are values of the graph.
    std::vector<int64_t> axes(static_cast<size_t>(L.rank(0) - axis));
    std::iota(axes.begin(), axes.end(), axis);
    const int x = L.input(0);
    const int mean = reduce_node(L, "ReduceMean", x, axes, 1);
    const int d = L.emit("Sub", {x, mean});
    const int var = reduce_node(L, "ReduceMean", L.emit("Mul", {d, d}), axes, 1);
    const int eps = scalar_like(L, 0, L.attr_f("epsilon", 1e-5f));
    const int inv = L.emit("Reciprocal", {L.emit("Sqrt", {L.emit("Add", {var, eps})})});
    int y = L.emit("Mul", {L.emit("Mul", {d, inv}), L.input(1)});
    if (L.has_input(2)) y = L.emit("Add", {y, L.input(2)});
    L.set_output(0, y);
    L.set_output(1, mean);
    L.set_output(2, inv);
    return;
  }
  Attributes a;
  a.set("axis", axis);
  a.set("epsilon", L.attr_f("epsilon", 1e-5f));
  std::vector<int> ins = {L.input(0), L.input(1)};
  if (L.has_input(2)) ins.push_back(L.input(2));
  L.set_output(0, L.emit("LayerNormalization", ins, a));
}

// GroupNormalization: the channels in num_groups groups, each group of each batch element
// normalized over its channels and spatial elements: X reshaped to (N, groups, rest), a
// LayerNormalization over the last axis (unit scale), reshaped back, then the scale and bias per
// channel (opset 21; per group before, opset 18, applied before reshaping back).
void group_norm(NodeLowering& L) {
  require_float_stash(L);
  const Shape s = L.shape(0);
  check(s.size() >= 2, "input must be at least 2-D (N, C, ...), got ", shape_str(s));
  const int64_t groups = L.attr_i("num_groups", 0), channels = s[1];
  check(groups > 0 && channels % groups == 0, "num_groups ", groups, " does not divide the ", channels, " channels");
  const int64_t per_group = L.opset() < 21 ? groups : channels;  // scale and bias entries
  check(L.shape(1) == Shape{per_group} && L.shape(2) == Shape{per_group}, "scale and bias must hold ", per_group,
        " values, got ", shape_str(L.shape(1)), " and ", shape_str(L.shape(2)));
  const int64_t rest = numel(s) / (s[0] * groups);
  const DType dt = L.val(0).dtype;
  Attributes a;
  a.set("axis", int64_t{2});
  a.set("epsilon", L.attr_f("epsilon", 1e-5f));
  const int unit = L.constant(Tensor::from_floats(dt, {rest}, std::vector<float>(static_cast<size_t>(rest), 1.0f)));
  int y = L.emit("LayerNormalization", {L.reshape(L.input(0), {s[0], groups, rest}), unit}, a);
  Shape affine(s.size(), 1);  // per channel, or per group on the grouped view
  if (L.opset() < 21) {
    y = L.emit("Add", {L.emit("Mul", {y, L.reshape(L.input(1), {groups, 1})}), L.reshape(L.input(2), {groups, 1})});
    L.set_output(0, L.reshape(y, s));
    return;
  }
  affine[1] = channels;
  y = L.reshape(y, s);
  L.set_output(0, L.emit("Add", {L.emit("Mul", {y, L.reshape(L.input(1), affine)}), L.reshape(L.input(2), affine)}));
}

// LRN: x / (bias + alpha / size x the sum of x^2 over a window of `size` channels around c)^beta,
// the window's sum as an AveragePool (padding counted) of x^2 over the channels (a unit axis
// before them) times size.
void lrn(NodeLowering& L) {
  const Shape s = L.shape(0);
  check(s.size() >= 3, "input must be at least 3-D (N, C, ...), got ", shape_str(s));
  const int64_t size = L.attr_i("size", 0);
  check(size > 0, "size must be positive, got ", size);
  const float alpha = L.attr_f("alpha", 1e-4f), beta = L.attr_f("beta", 0.75f), bias = L.attr_f("bias", 1.0f);
  const int x = L.input(0);
  const DType dt = L.val(0).dtype;
  Attributes a;
  a.set("kernel_shape", std::vector<int64_t>{size, 1});
  a.set("strides", std::vector<int64_t>{1, 1});
  a.set("dilations", std::vector<int64_t>{1, 1});
  a.set("pads", std::vector<int64_t>{(size - 1) / 2, 0, size - 1 - (size - 1) / 2, 0});
  a.set("ceil_mode", int64_t{0});
  a.set("count_include_pad", int64_t{1});
  const int64_t inner = numel(s) / (s[0] * s[1]);
  const int mean = L.emit("AveragePool", {L.reshape(L.emit("Mul", {x, x}), {s[0], 1, s[1], inner})}, a);
  const int scaled = L.emit("Mul", {L.reshape(mean, s), L.constant(Tensor::scalar_float(dt, alpha))});
  const int base = L.emit("Add", {scaled, L.constant(Tensor::scalar_float(dt, bias))});
  L.set_output(0, L.emit("Div", {x, L.emit("Pow", {base, L.constant(Tensor::scalar_float(dt, beta))})}));
}

// RMSNormalization (opset 23): X / sqrt(mean(X^2 over axis..) + epsilon) * scale, the first
// stage in float for 16-bit inputs (stash_type 1), as ONNX's function body spells it.
void rms_norm(NodeLowering& L) {
  require_float_stash(L);
  const int64_t axis = axis_of(L, "axis", -1, L.rank(0));
  std::vector<int64_t> axes(static_cast<size_t>(L.rank(0) - axis));
  std::iota(axes.begin(), axes.end(), axis);
  const DType dt = L.val(0).dtype;
  check(is_float(dt), "RMSNormalization of ", dtype_name(dt), " is not defined");
  const bool widen = dt == DType::kF16 || dt == DType::kBF16;
  const int x = widen ? cast_to(L, L.input(0), DType::kF32) : L.input(0);
  const int mean_square = reduce_node(L, "ReduceMean", L.emit("Mul", {x, x}), axes, 1);
  const float epsilon = L.attr_f("epsilon", 1e-5f);
  const int eps = L.constant(widen ? Tensor::scalar_float(DType::kF32, epsilon) : Tensor::scalar_float(dt, epsilon));
  int normalized = L.emit("Div", {x, L.emit("Sqrt", {L.emit("Add", {mean_square, eps})})});
  if (widen) normalized = cast_to(L, normalized, dt);
  L.set_output(0, L.emit("Mul", {normalized, L.input(1)}));
}

// Gelu (opset 20): x * (1 + erf(x / sqrt 2)) / 2, or with approximate = "tanh"
// x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 x^3))) / 2.
void gelu(NodeLowering& L) {
  const std::string approximate = L.attr_s("approximate", "none");
  check(approximate == "none" || approximate == "tanh", "approximate '", approximate, "' is not none or tanh");
  const int x = L.input(0);
  int inner;
  if (approximate == "none") {
    inner = L.emit("Erf", {L.emit("Mul", {x, scalar_like(L, 0, 1.0 / std::sqrt(2.0))})});
  } else {
    const int cube = L.emit("Mul", {L.emit("Mul", {x, x}), x});
    const int poly = L.emit("Add", {x, L.emit("Mul", {cube, scalar_like(L, 0, 0.044715)})});
    inner = L.emit("Tanh", {L.emit("Mul", {poly, scalar_like(L, 0, std::sqrt(2.0 / M_PI))})});
  }
  const int half_x = L.emit("Mul", {x, scalar_like(L, 0, 0.5)});
  L.set_output(0, L.emit("Mul", {half_x, L.emit("Add", {inner, scalar_like(L, 0, 1.0)})}));
}

// Swish (24): x * sigmoid(alpha x); SwiGLU (28): Swish(A) * B, A and B of one shape.
void swish(NodeLowering& L) {
  const float alpha = L.attr_f("alpha", 1.0f);
  const int x = L.input(0);
  const int scaled = alpha == 1.0f ? x : L.emit("Mul", {x, scalar_like(L, 0, alpha)});
  int y = L.emit("Mul", {x, L.emit("Sigmoid", {scaled})});
  if (L.op() == "SwiGLU") {
    check(L.shape(0) == L.shape(1), "A is ", shape_str(L.shape(0)), " and B ", shape_str(L.shape(1)),
          ": SwiGLU does not broadcast");
    y = L.emit("Mul", {y, L.input(1)});
  }
  L.set_output(0, y);
}

// Mish (22): x * tanh(softplus(x)).
void mish(NodeLowering& L) {
  L.set_output(0, L.emit("Mul", {L.input(0), L.emit("Tanh", {L.emit("Softplus", {L.input(0)})})}));
}

// Shrink (9): x + bias where x < -lambd, x - bias where x > lambd, else 0.
void shrink(NodeLowering& L) {
  const float lambd = L.attr_f("lambd", 0.5f), bias = L.attr_f("bias", 0.0f);
  const int x = L.input(0);
  const int above = L.emit("Where", {L.emit("Greater", {x, scalar_like(L, 0, lambd)}), L.emit("Sub", {x, scalar_like(L, 0, bias)}),
                                     scalar_like(L, 0, 0.0)});
  L.set_output(0, L.emit("Where", {L.emit("Less", {x, scalar_like(L, 0, -lambd)}), L.emit("Add", {x, scalar_like(L, 0, bias)}), above}));
}

// LpNormalization (1): x over its L1 (p = 1) or L2 (p = 2) norm along the axis; 0 where the norm
// is 0 (the operator's reference: 0 / 0 = 0).
// MeanVarianceNormalization: (x - E[x]) / (sqrt(E[x^2] - E[x]^2) + 1e-9) over `axes` (default
// 0, 2, 3), as the operator's function body computes it: ReduceMeans kept as axes, Mul, Sub,
// Sqrt, Add, Div.
void mean_variance_normalization(NodeLowering& L) {
  std::vector<int64_t> axes = L.attr_ints("axes", {0, 2, 3});
  for (int64_t& d : axes) d = normalize_axis(d, L.rank(0), "axes");
  const int x = L.input(0);
  const int mean = reduce_node(L, "ReduceMean", x, axes, 1);
  const int mean_of_squares = reduce_node(L, "ReduceMean", L.emit("Mul", {x, x}), axes, 1);
  const int deviation = L.emit("Sqrt", {L.emit("Sub", {mean_of_squares, L.emit("Mul", {mean, mean})})});
  const int std_eps = L.emit("Add", {deviation, L.constant(Tensor::scalar_float(L.val(0).dtype, 1e-9f))});
  L.set_output(0, L.emit("Div", {L.emit("Sub", {x, mean}), std_eps}));
}

void lp_normalization(NodeLowering& L) {
  const int64_t axis = axis_of(L, "axis", -1, L.rank(0)), p = L.attr_i("p", 2);
  check(p == 1 || p == 2, "p = ", p, " is not defined (1 or 2)");
  const int x = L.input(0);
  const int norm = p == 1 ? reduce_node(L, "ReduceSum", L.emit("Abs", {x}), {axis}, 1)
                          : L.emit("Sqrt", {reduce_node(L, "ReduceSum", L.emit("Mul", {x, x}), {axis}, 1)});
  const int zero = L.emit("Equal", {norm, scalar_like(L, 0, 0.0)});
  L.set_output(0, L.emit("Where", {zero, scalar_like(L, 0, 0.0), L.emit("Div", {x, L.emit("Where", {zero, scalar_like(L, 0, 1.0), norm})})}));
}

// EyeLike (9): a constant of the input's 2-D shape, ones on the k-th diagonal, in `dtype` (the
// input's by default).
void eye_like(NodeLowering& L) {
  check(L.rank(0) == 2, "input must be 2-D, got ", shape_str(L.shape(0)));
  const DType dt = L.attr_i("dtype", 0) != 0 ? dtype_from_onnx(static_cast<int>(L.attr_i("dtype", 0))) : L.val(0).dtype;
  const int64_t k = L.attr_i("k", 0), rows = L.shape(0)[0], cols = L.shape(0)[1];
  check(rows * cols <= kFoldLimit, "a ", rows, "x", cols, " identity is too large");
  std::vector<int64_t> ones(static_cast<size_t>(rows * cols), 0);
  for (int64_t i = 0; i < rows; ++i) {
    if (i + k >= 0 && i + k < cols) ones[static_cast<size_t>(i * cols + i + k)] = 1;
  }
  Tensor t(dt, {rows, cols});
  t.set_ints(ones);
  L.set_output(0, L.constant(std::move(t)));
}

// Celu (12): max(0, x) + min(0, alpha * (exp(x / alpha) - 1)).
void celu(NodeLowering& L) {
  const float alpha = L.attr_f("alpha", 1.0f);
  check(alpha != 0.0f, "alpha is zero");
  const int x = L.input(0);
  const int zero = scalar_like(L, 0, 0.0);
  const int e = L.emit("Sub", {L.emit("Exp", {L.emit("Div", {x, scalar_like(L, 0, alpha)})}), scalar_like(L, 0, 1.0)});
  L.set_output(0, L.emit("Add", {L.emit("Max", {x, zero}), L.emit("Min", {L.emit("Mul", {e, scalar_like(L, 0, alpha)}), zero})}));
}

// Hyperbolic and inverse trigonometric functions from exp, log, sqrt and atan:
// sinh = (e^x - e^-x) / 2, cosh = (e^x + e^-x) / 2, asinh = log(x + sqrt(x^2 + 1)),
// acosh = log(x + sqrt(x^2 - 1)), atanh = log((1 + x) / (1 - x)) / 2,
// asin = atan(x / sqrt(1 - x^2)), acos = pi / 2 - asin.
void trig_by_formula(NodeLowering& L) {
  const std::string& op = L.op();
  const int x = L.input(0);
  const auto c = [&](double v) { return scalar_like(L, 0, v); };
  const auto e = [&](const std::string& f, int a) { return L.emit(f, {a}); };
  const auto bin = [&](const std::string& f, int a, int b) { return L.emit(f, {a, b}); };
  const int x2 = bin("Mul", x, x);
  int y;
  if (op == "Sinh" || op == "Cosh") {
    y = bin("Mul", bin(op == "Sinh" ? "Sub" : "Add", e("Exp", x), e("Exp", e("Neg", x))), c(0.5));
  } else if (op == "Asinh" || op == "Acosh") {
    y = e("Log", bin("Add", x, e("Sqrt", bin(op == "Asinh" ? "Add" : "Sub", x2, c(1.0)))));
  } else if (op == "Atanh") {
    y = bin("Mul", e("Log", bin("Div", bin("Add", c(1.0), x), bin("Sub", c(1.0), x))), c(0.5));
  } else {
    y = e("Atan", bin("Div", x, e("Sqrt", bin("Sub", c(1.0), x2))));
    if (op == "Acos") y = bin("Sub", c(M_PI / 2), y);
  }
  L.set_output(0, y);
}

// Per-channel (axis 1) broadcast shape for a vector of C values on an input of `rank`.
Shape channel_shape(int64_t c, int64_t rank) {
  Shape s(static_cast<size_t>(std::max<int64_t>(rank - 1, 1)), 1);
  s[0] = c;
  return s;
}

void batch_norm(NodeLowering& L) {
  check(L.attr_i("training_mode", 0) == 0 && !L.output_used(1) && !L.output_used(2),
        "training-mode BatchNormalization is not supported");
  // Attributes of earlier opsets: `momentum` (opsets 1-15) only updates running statistics in
  // training; `consumed_inputs` (opset 1) is a legacy optimisation hint; `is_test` = 0 (opsets
  // 1-6) asks for training, and `spatial` = 0 (opsets 1-8) for statistics per element rather than
  // per channel, which inference with per-channel parameters cannot mean here.
  L.attr_f("momentum", 0.9f);
  L.attr_ints("consumed_inputs", {});
  check(L.attr_i("is_test", 1) != 0, "training-mode BatchNormalization (is_test = 0) is not supported");
  check(L.attr_i("spatial", 1) != 0, "BatchNormalization with spatial = 0 (statistics per element) is not supported");
  const double eps = L.attr_f("epsilon", 1e-5f);
  const int64_t r = L.rank(0);
  check(r >= 2, "input must have a channel axis");
  const int64_t c = L.shape(0)[1];
  for (size_t k = 1; k <= 4; ++k) {
    check(L.shape(k) == Shape{c}, "parameter input ", k, " has shape ", shape_str(L.shape(k)), ", expected [", c, "]");
  }
  const DType dt = L.val(0).dtype;
  const bool params_constant = L.val(1).is_constant() && L.val(2).is_constant() && L.val(3).is_constant() &&
                               L.val(4).is_constant();
  if (params_constant) {  // y = x * a + b with a = scale / sqrt(var + eps), b = bias - mean * a
    const auto scale = L.const_input(1, "scale").to_doubles();
    const auto bias = L.const_input(2, "B").to_doubles();
    const auto mean = L.const_input(3, "mean").to_doubles();
    const auto var = L.const_input(4, "var").to_doubles();
    std::vector<double> mul(static_cast<size_t>(c)), add(static_cast<size_t>(c));
    for (size_t i = 0; i < mul.size(); ++i) {
      mul[i] = scale[i] / std::sqrt(var[i] + eps);
      add[i] = bias[i] - mean[i] * mul[i];
    }
    Tensor tm(dt, channel_shape(c, r));
    tm.set_doubles(mul);
    Tensor ta(dt, channel_shape(c, r));
    ta.set_doubles(add);
    const int y = L.emit("Mul", {L.input(0), L.constant(std::move(tm))});
    L.set_output(0, L.emit("Add", {y, L.constant(std::move(ta))}));
    return;
  }
  const Shape cs = channel_shape(c, r);
  const int scale = L.reshape(L.input(1), cs);
  const int bias = L.reshape(L.input(2), cs);
  const int mean = L.reshape(L.input(3), cs);
  const int var = L.reshape(L.input(4), cs);
  const int denom = L.emit("Sqrt", {L.emit("Add", {var, L.constant(Tensor::scalar_float(dt, static_cast<float>(eps)))})});
  const int norm = L.emit("Div", {L.emit("Sub", {L.input(0), mean}), denom});
  L.set_output(0, L.emit("Add", {L.emit("Mul", {norm, scale}), bias}));
}

void instance_norm(NodeLowering& L) {
  const int64_t r = L.rank(0);
  check(r >= 3, "input must have spatial axes");
  const DType dt = L.val(0).dtype;
  std::vector<int64_t> axes(static_cast<size_t>(r - 2));
  std::iota(axes.begin(), axes.end(), 2);
  const int x = L.input(0);
  const int mean = reduce_node(L, "ReduceMean", x, axes, 1);
  const int d = L.emit("Sub", {x, mean});
  const int var = reduce_node(L, "ReduceMean", L.emit("Mul", {d, d}), axes, 1);
  const int eps = L.constant(Tensor::scalar_float(dt, L.attr_f("epsilon", 1e-5f)));
  const int norm = L.emit("Div", {d, L.emit("Sqrt", {L.emit("Add", {var, eps})})});
  const Shape cs = channel_shape(L.shape(0)[1], r);
  L.set_output(0, L.emit("Add", {L.emit("Mul", {norm, L.reshape(L.input(1), cs)}), L.reshape(L.input(2), cs)}));
}

void gemm(NodeLowering& L) {
  check(L.rank(0) == 2 && L.rank(1) == 2, "A and B must be matrices, got ", shape_str(L.shape(0)), " and ",
        shape_str(L.shape(1)));
  int a = L.input(0);
  int b = L.input(1);
  const bool trans_a = L.attr_i("transA", 0) != 0, trans_b = L.attr_i("transB", 0) != 0;
  const float alpha = L.attr_f("alpha", 1.0f);
  const float beta = L.attr_f("beta", 1.0f);
  if (L.opset() < 7) L.attr_i("broadcast", 0);  // whether C may broadcast: the Add below broadcasts it either way
  int y = fold_dequantized_matmul(L, a, trans_a, b, trans_b, alpha);  // a QDQ pair's integer product
  if (y == kNoValue) {
    if (trans_a) a = transpose2d(L, a);
    if (trans_b) b = transpose2d(L, b);
    if (alpha != 1.0f) b = L.emit("Mul", {b, scalar_like(L, 1, alpha)});  // folds when B is a weight
    y = L.emit("MatMul", {a, b});
  }
  if (L.has_input(2) && beta != 0.0f) {
    int c = L.input(2);
    if (beta != 1.0f) c = L.emit("Mul", {c, scalar_like(L, 2, beta)});
    y = L.emit("Add", {y, c});
  }
  L.set_output(0, y);
}

// Explicit begin/end pads for a windowed op, resolving auto_pad.
std::vector<int64_t> window_pads(NodeLowering& L, const Shape& in_spatial, const std::vector<int64_t>& kernel,
                                 const std::vector<int64_t>& strides, const std::vector<int64_t>& dil) {
  const size_t sp = in_spatial.size();
  const std::string auto_pad = L.attr_s("auto_pad", "NOTSET");
  if (auto_pad == "NOTSET") {
    std::vector<int64_t> pads = L.attr_ints("pads", std::vector<int64_t>(2 * sp, 0));
    check(pads.size() == 2 * sp, "pads has ", pads.size(), " entries, expected ", 2 * sp);
    return pads;
  }
  std::vector<int64_t> pads(2 * sp, 0);
  if (auto_pad == "VALID") return pads;
  check(auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER", "unknown auto_pad '", auto_pad, "'");
  for (size_t i = 0; i < sp; ++i) {
    check(kernel[i] > 0 && strides[i] > 0 && dil[i] > 0 && kernel[i] <= kMaxElements && strides[i] <= kMaxElements &&
              dil[i] <= kMaxElements && kernel[i] - 1 <= kMaxElements / dil[i],
          "kernel ", kernel[i], ", stride ", strides[i], " and dilation ", dil[i], " of spatial axis ", i,
          " must be positive and not absurdly large");
    const int64_t out = (in_spatial[i] + strides[i] - 1) / strides[i];
    const int64_t total = std::max<int64_t>(0, (out - 1) * strides[i] + (kernel[i] - 1) * dil[i] + 1 - in_spatial[i]);
    const int64_t small = total / 2;
    pads[i] = auto_pad == "SAME_UPPER" ? small : total - small;
    pads[i + sp] = total - pads[i];
  }
  return pads;
}

}  // namespace

int clip_between(NodeLowering& L, int v, double lo, double hi) {
  Attributes a;
  a.set("min", static_cast<float>(lo));
  a.set("max", static_cast<float>(hi));
  return L.emit("Clip", {v}, a);
}

int slice_axis(NodeLowering& L, int v, size_t axis, int64_t begin, int64_t end) {
  const Shape s = L.builder().value(v).shape;
  std::vector<int64_t> starts(s.size(), 0), ends(s.begin(), s.end()), steps(s.size(), 1);
  starts[axis] = begin;
  ends[axis] = end;
  Attributes a;
  a.set("starts", starts);
  a.set("ends", ends);
  a.set("steps", steps);
  return L.emit("Slice", {v}, a);
}

int slice_last_axis(NodeLowering& L, int v, int64_t begin, int64_t end) {
  return slice_axis(L, v, L.builder().value(v).shape.size() - 1, begin, end);
}

Attributes conv_attributes(NodeLowering& L, size_t x, size_t w) {
  check(L.rank(x) >= 3, "input must be at least 3-D (N, C, spatial...), got ", shape_str(L.shape(x)));
  const size_t sp = static_cast<size_t>(L.rank(x) - 2);
  check(L.rank(w) == L.rank(x), "weight of shape ", shape_str(L.shape(w)), " does not match input rank");
  const Shape w_shape = L.shape(w);
  const Shape x_shape = L.shape(x);
  const std::vector<int64_t> kernel(w_shape.begin() + 2, w_shape.end());
  if (L.has_attr("kernel_shape")) check(L.attr_ints("kernel_shape") == kernel, "kernel_shape disagrees with the weight");
  const auto strides = L.attr_ints("strides", std::vector<int64_t>(sp, 1));
  const auto dil = L.attr_ints("dilations", std::vector<int64_t>(sp, 1));
  check(strides.size() == sp && dil.size() == sp, "strides/dilations must have ", sp, " entries");
  Attributes a;
  a.set("strides", strides);
  a.set("dilations", dil);
  a.set("pads", window_pads(L, Shape(x_shape.begin() + 2, x_shape.end()), kernel, strides, dil));
  a.set("group", L.attr_i("group", 1));
  return a;
}

namespace {

void conv(NodeLowering& L) {
  const Attributes a = conv_attributes(L, 0, 1);
  // A QDQ pair's integer product.
  const int folded = fold_dequantized_conv(L, L.input(0), L.input(1), L.has_input(2) ? L.input(2) : kNoValue, a);
  if (folded != kNoValue) {
    L.set_output(0, folded);
    return;
  }
  std::vector<int> ins = {L.input(0), L.input(1)};
  if (L.has_input(2)) ins.push_back(L.input(2));
  L.set_output(0, L.emit("Conv", ins, a));
}

// A pooling window's attributes as the canonical pools take them: kernel_shape, strides,
// dilations, explicit pads (auto_pad resolved) and ceil_mode.
Attributes window_attrs(NodeLowering& L) {
  check(L.rank(0) >= 3, "input must be at least 3-D (N, C, spatial...), got ", shape_str(L.shape(0)));
  const size_t sp = static_cast<size_t>(L.rank(0) - 2);
  const auto kernel = L.attr_ints("kernel_shape");
  check(kernel.size() == sp, "kernel_shape must have ", sp, " entries");
  const auto strides = L.attr_ints("strides", std::vector<int64_t>(sp, 1));
  const auto dil = L.attr_ints("dilations", std::vector<int64_t>(sp, 1));
  check(strides.size() == sp && dil.size() == sp, "strides/dilations must have ", sp, " entries");
  Attributes a;
  a.set("kernel_shape", kernel);
  a.set("strides", strides);
  a.set("dilations", dil);
  const Shape x_shape = L.shape(0);
  a.set("pads", window_pads(L, Shape(x_shape.begin() + 2, x_shape.end()), kernel, strides, dil));
  a.set("ceil_mode", L.attr_i("ceil_mode", 0));
  return a;
}

void pool(NodeLowering& L) {
  check(!L.output_used(1), "the Indices output of MaxPool is not supported");
  L.attr_i("storage_order", 0);  // the layout of the Indices output alone, which is refused
  Attributes a = window_attrs(L);
  if (L.op() == "AveragePool") a.set("count_include_pad", L.attr_i("count_include_pad", 0));
  L.set_output(0, L.emit(L.op(), {L.input(0)}, a));
}

// LpPool: (sum over the window of |x|^p)^(1/p), padding contributing nothing: the sum as
// AveragePool (padding not counted) of |x|^p times a constant holding each output position's
// count of taps inside the input (a product of per-axis counts), then the p-th root (Abs, Mul,
// Sqrt for p = 1, 2; Pow otherwise).
void lp_pool(NodeLowering& L) {
  const int64_t p = L.attr_i("p", 2);
  check(p >= 1, "p must be at least 1, got ", p);
  Attributes a = window_attrs(L);
  a.set("count_include_pad", int64_t{0});
  const auto kernel = a.ints("kernel_shape"), strides = a.ints("strides"), dil = a.ints("dilations"), pads = a.ints("pads");
  const int x = L.input(0);
  const DType dt = L.val(0).dtype;
  const auto power = [&](int v, float e) { return L.emit("Pow", {v, L.constant(Tensor::scalar_float(dt, e))}); };
  const int magnitude = p == 1 ? L.emit("Abs", {x}) : p == 2 ? L.emit("Mul", {x, x}) : power(L.emit("Abs", {x}), static_cast<float>(p));
  const int mean = L.emit("AveragePool", {magnitude}, a);
  const Shape in = L.shape(0), out = L.builder().value(mean).shape;
  const size_t sp = kernel.size();
  Shape counts_shape(2, 1);
  counts_shape.insert(counts_shape.end(), out.begin() + 2, out.end());
  const int64_t n = numel(counts_shape);
  check(n <= kFoldLimit, "LpPool of ", n, " output positions is too large");
  std::vector<float> counts(static_cast<size_t>(n), 1.0f);
  for (int64_t i = 0; i < n; ++i) {
    int64_t rest = i;
    for (size_t d = sp; d-- > 0;) {
      const int64_t o = rest % out[d + 2];
      rest /= out[d + 2];
      int64_t inside = 0;
      for (int64_t t = 0; t < kernel[d]; ++t) {
        const int64_t at = o * strides[d] - pads[d] + t * dil[d];
        inside += at >= 0 && at < in[d + 2] ? 1 : 0;
      }
      counts[static_cast<size_t>(i)] *= static_cast<float>(inside);
    }
  }
  const int sum = L.emit("Mul", {mean, L.constant(Tensor::from_floats(dt, counts_shape, counts))});
  L.set_output(0, p == 1 ? sum : p == 2 ? L.emit("Sqrt", {sum}) : power(sum, 1.0f / static_cast<float>(p)));
}

void global_pool(NodeLowering& L) {
  check(L.rank(0) >= 3, "input must be at least 3-D (N, C, spatial...), got ", shape_str(L.shape(0)));
  std::vector<int64_t> axes(static_cast<size_t>(L.rank(0) - 2));
  std::iota(axes.begin(), axes.end(), 2);
  L.set_output(0, reduce_node(L, L.op() == "GlobalAveragePool" ? "ReduceMean" : "ReduceMax", L.input(0), axes, 1));
}

void matmul(NodeLowering& L) {
  const int folded = fold_dequantized_matmul(L, L.input(0), false, L.input(1), false);
  L.set_output(0, folded != kNoValue ? folded : L.emit("MatMul", {L.input(0), L.input(1)}));
}

void reshape(NodeLowering& L) {
  std::vector<int64_t> target = L.const_ints(1, "shape");
  const Shape& in = L.shape(0);
  const bool allow_zero = L.attr_i("allowzero", 0) != 0;
  int64_t infer_at = -1;
  int64_t known = 1;
  for (size_t i = 0; i < target.size(); ++i) {
    if (target[i] == 0 && !allow_zero) {
      check(i < in.size(), "shape entry ", i, " is 0 (copy) but the input has rank ", in.size());
      target[i] = in[i];
    }
    if (target[i] == -1) {
      check(infer_at < 0, "shape ", shape_str(target), " has more than one -1");
      infer_at = static_cast<int64_t>(i);
      continue;
    }
    check(target[i] >= 0, "shape entry ", i, " is ", target[i]);
    const int64_t d = target[i] == 0 ? 1 : target[i];
    check(d <= kMaxElements && known <= kMaxElements / d, "shape ", shape_str(target), " is absurdly large");
    known *= d;
  }
  if (infer_at >= 0) {
    const int64_t total = numel(in);
    check(known > 0 && total % known == 0, "cannot infer the -1 in shape for ", shape_str(in));
    target[static_cast<size_t>(infer_at)] = total / known;
  }
  L.set_output(0, L.reshape(L.input(0), target));
}

void flatten(NodeLowering& L) {
  const Shape& s = L.shape(0);
  const int64_t r = static_cast<int64_t>(s.size());
  int64_t axis = L.attr_i("axis", 1);
  check(axis >= -r && axis <= r, "axis ", axis, " out of range for rank ", r);
  if (axis < 0) axis += r;
  L.set_output(0, L.reshape(L.input(0), {numel(Shape(s.begin(), s.begin() + axis)), numel(Shape(s.begin() + axis, s.end()))}));
}

std::vector<int64_t> axes_attr_or_input(NodeLowering& L, int64_t since_opset) {
  if (L.opset() >= since_opset) return L.has_input(1) ? L.const_ints(1, "axes") : std::vector<int64_t>{};
  return L.attr_ints("axes");
}

void squeeze(NodeLowering& L) {
  const Shape& s = L.shape(0);
  std::vector<int64_t> axes = axes_attr_or_input(L, 13);
  for (int64_t& a : axes) a = normalize_axis(a, static_cast<int64_t>(s.size()), "axes");
  Shape out;
  for (size_t d = 0; d < s.size(); ++d) {
    const bool listed = std::find(axes.begin(), axes.end(), static_cast<int64_t>(d)) != axes.end();
    if (listed) check(s[d] == 1, "cannot squeeze axis ", d, " of extent ", s[d]);
    if (axes.empty() ? s[d] != 1 : !listed) out.push_back(s[d]);
  }
  L.set_output(0, L.reshape(L.input(0), out));
}

void unsqueeze(NodeLowering& L) {
  const Shape& s = L.shape(0);
  std::vector<int64_t> axes = axes_attr_or_input(L, 13);
  const int64_t r = static_cast<int64_t>(s.size() + axes.size());
  for (int64_t& a : axes) a = normalize_axis(a, r, "axes");
  std::sort(axes.begin(), axes.end());
  check(std::adjacent_find(axes.begin(), axes.end()) == axes.end(), "axes repeat an axis");
  Shape out;
  size_t next = 0;
  for (int64_t d = 0; d < r; ++d) {
    if (std::binary_search(axes.begin(), axes.end(), d)) {
      out.push_back(1);
    } else {
      out.push_back(s[next++]);
    }
  }
  L.set_output(0, L.reshape(L.input(0), out));
}

void transpose(NodeLowering& L) {
  std::vector<int64_t> perm = L.attr_ints("perm");
  if (perm.empty()) {
    perm.resize(static_cast<size_t>(L.rank(0)));
    std::iota(perm.rbegin(), perm.rend(), 0);
  }
  bool identity_perm = true;
  for (size_t i = 0; i < perm.size(); ++i) identity_perm = identity_perm && perm[i] == static_cast<int64_t>(i);
  if (identity_perm && static_cast<int64_t>(perm.size()) == L.rank(0)) {
    L.set_output(0, L.input(0));
    return;
  }
  Attributes a;
  a.set("perm", perm);
  L.set_output(0, L.emit("Transpose", {L.input(0)}, a));
}

void concat(NodeLowering& L) {
  std::vector<int> present, nonempty;
  for (size_t k = 0; k < L.input_count(); ++k) {
    if (!L.has_input(k)) continue;
    present.push_back(L.input(k));
    if (numel(L.shape(k)) > 0) nonempty.push_back(L.input(k));
  }
  check(!present.empty(), "no inputs");
  Attributes a;
  a.set("axis", axis_of(L, "axis", 0, L.rank(0)));
  const std::vector<int>& ins = nonempty.empty() ? present : nonempty;
  L.set_output(0, ins.size() == 1 ? ins[0] : L.emit("Concat", ins, a));
}

void slice(NodeLowering& L) {
  std::vector<int64_t> starts, ends, axes, steps;
  if (L.opset() < 10) {
    starts = L.attr_ints("starts");
    ends = L.attr_ints("ends");
    axes = L.attr_ints("axes");
  } else {
    starts = L.const_ints(1, "starts");
    ends = L.const_ints(2, "ends");
    if (L.has_input(3)) axes = L.const_ints(3, "axes");
    if (L.has_input(4)) steps = L.const_ints(4, "steps");
  }
  if (axes.empty()) {
    axes.resize(starts.size());
    std::iota(axes.begin(), axes.end(), 0);
  }
  if (steps.empty()) steps.assign(starts.size(), 1);
  L.set_output(0, slice_axes(L, L.input(0), starts, ends, axes, steps));
}

void split(NodeLowering& L) {
  check(L.rank(0) > 0, "cannot split a scalar");
  const int64_t axis = axis_of(L, "axis", 0, L.rank(0));
  const int64_t dim = L.shape(0)[static_cast<size_t>(axis)];
  std::vector<int64_t> sizes;
  if (L.opset() >= 13) {
    if (L.has_input(1)) sizes = L.const_ints(1, "split");
  } else {
    sizes = L.attr_ints("split");
  }
  const auto n = static_cast<int64_t>(L.output_count());
  if (sizes.empty()) {
    const int64_t parts = L.has_attr("num_outputs") ? L.attr_i("num_outputs", n) : n;
    check(parts > 0, "no outputs");
    const int64_t chunk = (dim + parts - 1) / parts;  // the last part may be smaller (opset 18)
    for (int64_t k = 0; k < parts; ++k) sizes.push_back(std::max<int64_t>(0, std::min(chunk, dim - k * chunk)));
  }
  check(static_cast<int64_t>(sizes.size()) == n, "split has ", sizes.size(), " entries for ", n, " outputs");
  check(std::accumulate(sizes.begin(), sizes.end(), int64_t{0}) == dim, "split sizes do not add up to ", dim);
  int64_t at = 0;
  for (int64_t k = 0; k < n; ++k) {
    check(sizes[static_cast<size_t>(k)] >= 0, "negative split size");
    L.set_output(static_cast<size_t>(k),
                 slice_axes(L, L.input(0), {at}, {at + sizes[static_cast<size_t>(k)]}, {axis}, {1}));
    at += sizes[static_cast<size_t>(k)];
  }
}

void gather(NodeLowering& L) {
  Attributes a;
  a.set("axis", axis_of(L, "axis", 0, L.rank(0)));
  L.set_output(0, L.emit("Gather", {L.input(0), L.input(1)}, a));
}

// Compress: the slices along `axis` (of the flattened input without one) whose condition entry is
// true; entries past the condition's length count as false. The condition must be constant (or a
// graph input whose value the import was given), so the output's extent is static: a Gather at
// the true entries' indices.
void compress(NodeLowering& L) {
  const std::vector<int64_t> cond = L.const_ints(1, "condition");
  check(L.rank(1) == 1, "condition must be 1-D, not ", shape_str(L.shape(1)));
  int data = L.input(0);
  int64_t axis = 0;
  if (L.has_attr("axis")) {
    axis = axis_of(L, "axis", 0, L.rank(0));
  } else {
    data = L.reshape(data, {numel(L.shape(0))});
  }
  const int64_t extent = L.builder().value(data).shape[static_cast<size_t>(axis)];
  std::vector<int64_t> picked;
  for (int64_t i = 0; i < std::min<int64_t>(extent, static_cast<int64_t>(cond.size())); ++i) {
    if (cond[static_cast<size_t>(i)] != 0) picked.push_back(i);
  }
  check(!picked.empty(), "the condition selects no slice: an empty result is not supported");
  Attributes a;
  a.set("axis", axis);
  const auto n = static_cast<int64_t>(picked.size());
  L.set_output(0, L.emit("Gather", {data, L.constant(Tensor::from_ints(DType::kI64, {n}, picked))}, a));
}

// The flat index into data of shape `ds` of each element i of `indices` (shape `is`, the data's
// rank), i with its coordinate along `axis` replaced by the index there (negative ones counted
// from the end): C[i] + idx[i] x the axis's stride, C a constant holding the other coordinates'
// part of i's offset. GatherElements and ScatterElements address their data so.
int elements_flat_index(NodeLowering& L, const Shape& ds, const Shape& is, int64_t axis, int indices) {
  const auto r = static_cast<int64_t>(ds.size());
  check(static_cast<int64_t>(is.size()) == r, "indices must have the data's rank ", r, ", got ", shape_str(is));
  std::vector<int64_t> strides(static_cast<size_t>(r), 1);
  for (int64_t d = r - 1; d > 0; --d) strides[static_cast<size_t>(d - 1)] = strides[static_cast<size_t>(d)] * ds[static_cast<size_t>(d)];
  for (int64_t d = 0; d < r; ++d) {
    check(d == axis || is[static_cast<size_t>(d)] <= ds[static_cast<size_t>(d)], "indices' extent ", is[static_cast<size_t>(d)],
          " along axis ", d, " exceeds the data's ", ds[static_cast<size_t>(d)]);
  }
  const int64_t n = numel(is);
  check(n <= kFoldLimit, L.op(), " of ", n, " indices is too large");
  std::vector<int64_t> base(static_cast<size_t>(n), 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t rest = i;
    for (int64_t d = r - 1; d >= 0; --d) {
      const int64_t c = rest % is[static_cast<size_t>(d)];
      rest /= is[static_cast<size_t>(d)];
      if (d != axis) base[static_cast<size_t>(i)] += c * strides[static_cast<size_t>(d)];
    }
  }
  const int idx = from_end(L, indices, ds[static_cast<size_t>(axis)]);
  return L.emit("Add", {L.constant(Tensor::from_ints(DType::kI64, is, base)),
                        L.emit("Mul", {idx, L.constant(Tensor::scalar_int(DType::kI64, strides[static_cast<size_t>(axis)]))})});
}

// GatherElements: out[i] = data at i with its axis coordinate replaced by indices[i], as a
// Gather from the flattened data at elements_flat_index.
void gather_elements(NodeLowering& L) {
  const Shape ds = L.shape(0), is = L.shape(1);
  const int flat = elements_flat_index(L, ds, is, axis_of(L, "axis", 0, L.rank(0)), L.input(1));
  Attributes a;
  a.set("axis", int64_t{0});
  L.set_output(0, L.emit("Gather", {L.reshape(L.input(0), {numel(ds)}), flat}, a));
}

// ScatterElements (and Scatter, its name before opset 11): data with updates[i] written (or, with
// `reduction`, combined) where GatherElements would read element i: a ScatterND into the
// flattened data with elements_flat_index's indices as one-coordinate tuples, in i's order (so
// that repeated indices apply in the order the operator defines).
void scatter_elements(NodeLowering& L) {
  const Shape ds = L.shape(0), is = L.shape(1);
  check(L.shape(2) == is, "updates must have the indices' shape ", shape_str(is), ", got ", shape_str(L.shape(2)));
  const int flat = elements_flat_index(L, ds, is, axis_of(L, "axis", 0, L.rank(0)), L.input(1));
  Shape tuples = is;
  tuples.push_back(1);
  Attributes a;
  a.set("reduction", L.attr_s("reduction", "none"));
  const int y = L.emit("ScatterND", {L.reshape(L.input(0), {numel(ds)}), L.reshape(flat, tuples), L.input(2)}, a);
  L.set_output(0, L.reshape(y, ds));
}

// TensorScatter (opset 24, a KV cache's update): the past cache with `update` written along `axis`
// from each batch sample's write index on (write_indices[b], 0 when absent), modulo the cache's
// extent there in circular mode: ScatterElements' form (a ScatterND into the cache reshaped flat)
// at indices write_indices[b] + s for the update's position s along the axis, the same coordinates
// elsewhere. The batch is axis 0, so the sequence axis may not be.
void tensor_scatter(NodeLowering& L) {
  const Shape cs = L.shape(0), us = L.shape(1);
  const int64_t r = L.rank(0);
  const int64_t axis = axis_of(L, "axis", -2, r);
  check(axis != 0, "axis 0 is the batch; the sequence axis must be another");
  check(static_cast<int64_t>(us.size()) == r, "update must have the cache's rank ", r, ", got ", shape_str(us));
  for (int64_t d = 0; d < r; ++d) {
    const auto k = static_cast<size_t>(d);
    check(d == axis ? us[k] <= cs[k] : us[k] == cs[k], "update of shape ", shape_str(us), " does not fit the cache of shape ",
          shape_str(cs), " (only the sequence axis ", axis, " may be shorter)");
  }
  const std::string mode = L.attr_s("mode", "linear");
  check(mode == "linear" || mode == "circular", "mode '", mode, "' is not one of linear, circular");
  int idx = iota_along(L, static_cast<size_t>(r), axis, us[static_cast<size_t>(axis)]);
  if (L.has_input(2)) {
    check(L.shape(2) == Shape{cs[0]}, "write_indices must have one index per batch sample (", cs[0], "), got shape ",
          shape_str(L.shape(2)));
    Shape per_sample(static_cast<size_t>(r), 1);
    per_sample[0] = cs[0];
    idx = L.emit("Add", {L.reshape(cast_to(L, L.input(2), DType::kI64), per_sample), idx});
  }
  if (mode == "circular") {
    Attributes python_mod;
    python_mod.set("fmod", int64_t{0});
    idx = L.emit("Mod", {idx, L.constant(Tensor::scalar_int(DType::kI64, cs[static_cast<size_t>(axis)]))}, python_mod);
  }
  const int flat = elements_flat_index(L, cs, us, axis, idx);
  Shape tuples = us;
  tuples.push_back(1);
  Attributes a;
  a.set("reduction", std::string("none"));
  const int y = L.emit("ScatterND", {L.reshape(L.input(0), {numel(cs)}), L.reshape(flat, tuples), L.input(1)}, a);
  L.set_output(0, L.reshape(y, cs));
}

// GatherND: out[i] = data's slice at batch i[:batch_dims] and index tuple indices[i] (k
// coordinates, negative ones counted from the end of their axes), shape indices[:-1] +
// data[batch_dims + k:]: a Gather along axis 0 of the data with its first batch_dims + k axes
// flattened, at B[i] + sum_j idx[i, j] x stride_j (the strides of the k indexed axes, a constant
// vector the tuples are multiplied by and summed over; B the batch's offset, a constant).
void gather_nd(NodeLowering& L) {
  const Shape ds = L.shape(0), is = L.shape(1);
  const auto r = static_cast<int64_t>(ds.size()), q = static_cast<int64_t>(is.size());
  const int64_t b = L.attr_i("batch_dims", 0);
  check(b >= 0 && b < std::min(r, q), "batch_dims ", b, " must be less than both ranks (", r, ", ", q, ")");
  const int64_t k = is.back();
  check(k >= 1 && b + k <= r, "index tuples of ", k, " coordinates do not fit data of rank ", r, " after ", b, " batch axes");
  for (int64_t d = 0; d < b; ++d) {
    check(is[static_cast<size_t>(d)] == ds[static_cast<size_t>(d)], "batch axis ", d, ": indices' extent ",
          is[static_cast<size_t>(d)], " differs from the data's ", ds[static_cast<size_t>(d)]);
  }
  std::vector<int64_t> extents(static_cast<size_t>(k)), strides(static_cast<size_t>(k));
  int64_t block = 1;  // elements of a batch's indexed axes
  for (int64_t j = k - 1; j >= 0; --j) {
    extents[static_cast<size_t>(j)] = ds[static_cast<size_t>(b + j)];
    strides[static_cast<size_t>(j)] = block;
    block *= ds[static_cast<size_t>(b + j)];
  }
  const int idx = cast_to(L, L.input(1), DType::kI64);
  const int wrapped = L.emit("Where", {L.emit("Less", {idx, L.constant(Tensor::scalar_int(DType::kI64, 0))}),
                                       L.emit("Add", {idx, L.constant(Tensor::from_ints(DType::kI64, {k}, extents))}), idx});
  Attributes sum;
  sum.set("axes", std::vector<int64_t>{q - 1});
  sum.set("keepdims", int64_t{0});
  int flat = L.emit("ReduceSum", {L.emit("Mul", {wrapped, L.constant(Tensor::from_ints(DType::kI64, {k}, strides))})}, sum);
  const Shape outer(is.begin(), is.end() - 1);
  if (b > 0) {
    const int64_t n = numel(outer), per_batch = numel(Shape(is.begin() + b, is.end() - 1));
    check(n <= kFoldLimit, "GatherND of ", n, " index tuples is too large");
    std::vector<int64_t> base(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) base[static_cast<size_t>(i)] = i / per_batch * block;
    flat = L.emit("Add", {L.constant(Tensor::from_ints(DType::kI64, outer, base)), flat});
  }
  Shape flattened(ds.begin() + b + k, ds.end());
  flattened.insert(flattened.begin(), numel(Shape(ds.begin(), ds.begin() + b + k)));
  Attributes a;
  a.set("axis", int64_t{0});
  L.set_output(0, L.emit("Gather", {L.reshape(L.input(0), flattened), flat}, a));
}

// OneHot (11): `values[1]` where the output's coordinate along the new axis equals the index
// (negative ones counted from the end of depth), `values[0]` elsewhere: Equal against a constant
// iota along that axis, then Where. depth must be known at import.
void one_hot(NodeLowering& L) {
  const Shape is = L.shape(0);
  const int64_t r = static_cast<int64_t>(is.size()) + 1;
  const int64_t axis = axis_of(L, "axis", -1, r);
  const Tensor& d = L.const_input(1, "depth");
  check(d.numel() == 1, "depth must hold one value, got ", shape_str(d.shape()));
  const auto depth = static_cast<int64_t>(d.to_doubles()[0]);
  check(depth > 0 && depth <= kFoldLimit, "depth ", depth, " is outside 1 ..", kFoldLimit);
  check(L.val(2).shape.size() == 1 && L.val(2).shape[0] == 2, "values must hold two elements (off, on), got ",
        shape_str(L.val(2).shape));
  Shape at = is;
  at.insert(at.begin() + axis, 1);
  const int idx = L.reshape(from_end(L, L.input(0), depth), at);
  const int hit = L.emit("Equal", {iota_along(L, static_cast<size_t>(r), axis, depth), idx});
  Attributes a;
  a.set("axis", int64_t{0});
  const int values = L.input(2);
  const int off = L.emit("Gather", {values, L.constant(Tensor::scalar_int(DType::kI64, 0))}, a);
  const int on = L.emit("Gather", {values, L.constant(Tensor::scalar_int(DType::kI64, 1))}, a);
  L.set_output(0, L.emit("Where", {hit, on, off}));
}

void expand(NodeLowering& L) {
  const Shape target = broadcast_shapes(L.shape(0), L.const_ints(1, "shape"), "input and shape");
  if (target == L.shape(0)) {
    L.set_output(0, L.input(0));
    return;
  }
  Attributes a;
  a.set("shape", target);
  L.set_output(0, L.emit("Expand", {L.input(0)}, a));
}

void tile(NodeLowering& L) {
  Attributes a;
  a.set("repeats", L.const_ints(1, "repeats"));
  L.set_output(0, L.emit("Tile", {L.input(0)}, a));
}

// Pad in wrap mode (opset 19): each axis grows by its last p0 elements before it and its first
// p1 after it, as Slices and a Concat. Pads must lie in 0 .. the axis's extent.
int wrap_pad(NodeLowering& L, int v, const std::vector<int64_t>& pads) {
  const int64_t r = L.rank(0);
  for (int64_t d = 0; d < r; ++d) {
    const int64_t b = pads[static_cast<size_t>(d)], e = pads[static_cast<size_t>(d + r)];
    if (b == 0 && e == 0) continue;
    const int64_t n = L.shape(0)[static_cast<size_t>(d)];
    check(b >= 0 && e >= 0 && b <= n && e <= n, "wrap pads of axis ", d, " (", b, ", ", e,
          ") must lie in 0 .. its extent ", n);
    std::vector<int> parts;
    if (b > 0) parts.push_back(slice_axes(L, v, {n - b}, {n}, {d}, {1}));
    parts.push_back(v);
    if (e > 0) parts.push_back(slice_axes(L, v, {0}, {e}, {d}, {1}));
    Attributes a;
    a.set("axis", d);
    v = L.emit("Concat", parts, a);
  }
  return v;
}


void pad(NodeLowering& L) {
  const int64_t r = L.rank(0);
  std::vector<int64_t> pads;
  float value = 0;
  if (L.opset() < 11) {
    pads = L.attr_ints("pads");
    value = L.attr_f("value", 0.0f);
  } else {
    pads = L.const_ints(1, "pads");
    if (L.has_input(2)) value = scalar_input(L, 2, "constant_value").to_floats()[0];
    if (L.has_input(3)) {  // opset 18 axes: expand to every axis
      std::vector<int64_t> axes = L.const_ints(3, "axes");
      check(r > 0 || axes.empty(), "axes given for a scalar");
      std::vector<int64_t> full(static_cast<size_t>(2 * r), 0);
      check(pads.size() == 2 * axes.size(), "pads has ", pads.size(), " entries for ", axes.size(), " axes");
      for (size_t i = 0; i < axes.size(); ++i) {
        const auto d = static_cast<size_t>(normalize_axis(axes[i], r, "axes"));
        full[d] = pads[i];
        full[d + static_cast<size_t>(r)] = pads[i + axes.size()];
      }
      pads = full;
    }
  }
  check(pads.size() == static_cast<size_t>(2 * r), "pads has ", pads.size(), " entries, expected ", 2 * r, " (a begin and an end for each of ",
        r, " axes)");
  const std::string mode = L.attr_s("mode", "constant");
  if (mode == "wrap") {
    L.set_output(0, wrap_pad(L, L.input(0), pads));
    return;
  }
  Attributes a;
  a.set("pads", pads);
  a.set("mode", mode);
  a.set("value", value);
  if (std::all_of(pads.begin(), pads.end(), [](int64_t p) { return p == 0; })) {
    L.set_output(0, L.input(0));
    return;
  }
  L.set_output(0, L.emit("Pad", {L.input(0)}, a));
}

// CenterCropPad: each axis of `axes` (default all) cropped or zero-padded to its target extent
// (the `shape` input, known), centred: a crop starts at (extent - target) / 2, a pad puts
// (target - extent) / 2 before and the rest after. One Slice and one Pad.
void center_crop_pad(NodeLowering& L) {
  const Shape s = L.shape(0);
  const auto r = static_cast<int64_t>(s.size());
  const std::vector<int64_t> target = L.const_ints(1, "shape");
  std::vector<int64_t> axes = L.attr_ints("axes");
  if (axes.empty()) {
    axes.resize(static_cast<size_t>(r));
    std::iota(axes.begin(), axes.end(), 0);
  }
  check(target.size() == axes.size(), "shape has ", target.size(), " entries for ", axes.size(), " axes");
  std::vector<int64_t> starts, ends, crop_axes, pads(static_cast<size_t>(2 * r), 0);
  for (size_t i = 0; i < axes.size(); ++i) {
    const int64_t d = normalize_axis(axes[i], r, "axes"), dim = s[static_cast<size_t>(d)], want = target[i];
    check(want >= 0, "shape entry ", i, " is ", want);
    if (want < dim) {
      starts.push_back((dim - want) / 2);
      ends.push_back((dim - want) / 2 + want);
      crop_axes.push_back(d);
    } else {
      pads[static_cast<size_t>(d)] = (want - dim) / 2;
      pads[static_cast<size_t>(d + r)] = want - dim - (want - dim) / 2;
    }
  }
  int y = crop_axes.empty() ? L.input(0) : slice_axes(L, L.input(0), starts, ends, crop_axes, std::vector<int64_t>(crop_axes.size(), 1));
  if (std::any_of(pads.begin(), pads.end(), [](int64_t p) { return p != 0; })) y = zero_pad(L, y, pads);
  L.set_output(0, y);
}

// ReverseSequence: along time_axis, the first sequence_lens[b] elements of batch element b in
// reverse order, the rest as they are: a Gather from the flattened data at GatherElements' flat
// indices (elements_flat_index) for the time coordinates Where(t < len, len - 1 - t, t), t a
// constant iota, broadcast to the data's shape.
void reverse_sequence(NodeLowering& L) {
  const Shape ds = L.shape(0);
  const auto r = static_cast<int64_t>(ds.size());
  check(r >= 2, "input must be at least 2-D, got ", shape_str(ds));
  const int64_t batch = normalize_axis(L.attr_i("batch_axis", 1), r, "batch_axis");
  const int64_t time = normalize_axis(L.attr_i("time_axis", 0), r, "time_axis");
  check(batch + time == 1, "batch_axis and time_axis must be 0 and 1, got ", batch, " and ", time);
  check(L.shape(1) == Shape{ds[static_cast<size_t>(batch)]}, "sequence_lens must hold ", ds[static_cast<size_t>(batch)],
        " lengths, got ", shape_str(L.shape(1)));
  Shape along_batch(static_cast<size_t>(r), 1);
  along_batch[static_cast<size_t>(batch)] = ds[static_cast<size_t>(batch)];
  const int len = L.reshape(cast_to(L, L.input(1), DType::kI64), along_batch);
  const int t = iota_along(L, static_cast<size_t>(r), time, ds[static_cast<size_t>(time)]);
  const int one = L.constant(Tensor::scalar_int(DType::kI64, 1));
  const int idx = L.emit("Where", {L.emit("Less", {t, len}), L.emit("Sub", {L.emit("Sub", {len, one}), t}), t});
  check(numel(ds) <= kFoldLimit, "ReverseSequence of ", numel(ds), " elements is too large");
  const int full = L.emit("Add", {idx, L.constant(Tensor::from_ints(DType::kI64, ds, std::vector<int64_t>(static_cast<size_t>(numel(ds)), 0)))});
  Attributes a;
  a.set("axis", int64_t{0});
  L.set_output(0, L.emit("Gather", {L.reshape(L.input(0), {numel(ds)}), elements_flat_index(L, ds, ds, time, full)}, a));
}

// Resize, and Upsample (opsets 7 and 9: its scales an attribute, then an input; nearest takes the
// floor of the asymmetric source coordinate, as the operator repeats each element).
void resize(NodeLowering& L) {
  const Shape& in = L.shape(0);
  const size_t r = in.size();
  std::vector<float> scales;
  std::vector<int64_t> sizes;
  std::vector<float> roi;
  if (L.opset() >= 11) {
    if (L.has_input(1) && numel(L.shape(1)) > 0) roi = L.const_floats(1, "roi");
    if (L.has_input(2) && numel(L.shape(2)) > 0) scales = L.const_floats(2, "scales");
    if (L.has_input(3) && numel(L.shape(3)) > 0) sizes = L.const_ints(3, "sizes");
  } else if (L.op() == "Upsample" && L.opset() < 9) {
    scales = L.attr_floats("scales");
  } else {
    scales = L.const_floats(1, "scales");
  }
  check(scales.empty() != sizes.empty(), "exactly one of scales and sizes must be given");
  check(L.attr_i("antialias", 0) == 0, "antialias is not supported");
  // Cubic interpolation's parameters: cubic mode is refused below.
  L.attr_f("cubic_coeff_a", -0.75f);
  check(L.attr_i("exclude_outside", 0) == 0 || L.attr_s("mode", "nearest") == "nearest",
        "exclude_outside is not supported with linear interpolation");
  const std::string mode = L.attr_s("mode", "nearest");
  check(mode == "nearest" || mode == "linear", "mode '", mode, "' is not supported (nearest and linear are)");
  // Opset 18 `axes`: scales, sizes and roi name these axes only; the others keep their extent.
  std::vector<int64_t> axes = L.attr_ints("axes");
  for (int64_t& d : axes) d = normalize_axis(d, static_cast<int64_t>(r), "axes");
  if (axes.empty()) {
    axes.resize(r);
    std::iota(axes.begin(), axes.end(), 0);
  }
  const size_t given = scales.empty() ? sizes.size() : scales.size();
  check(given == axes.size(), scales.empty() ? "sizes" : "scales", " has ", given, " entries for ", axes.size(), " axes");
  check(roi.empty() || roi.size() == 2 * axes.size(), "roi has ", roi.size(), " entries for ", axes.size(), " axes");
  if (!roi.empty() && axes.size() != r) {
    std::vector<float> full(2 * r, 0.0f);
    std::fill(full.begin() + static_cast<std::ptrdiff_t>(r), full.end(), 1.0f);
    for (size_t i = 0; i < axes.size(); ++i) {
      full[static_cast<size_t>(axes[i])] = roi[i];
      full[r + static_cast<size_t>(axes[i])] = roi[axes.size() + i];
    }
    roi = full;
  }
  const auto on_axes = [&](const auto& values, auto other) {
    std::vector<decltype(other(size_t{0}))> full(r);
    for (size_t d = 0; d < r; ++d) full[d] = other(d);
    for (size_t i = 0; i < axes.size(); ++i) full[static_cast<size_t>(axes[i])] = values[i];
    return full;
  };
  const std::string policy = L.attr_s("keep_aspect_ratio_policy", "stretch");
  check(policy == "stretch" || policy == "not_larger" || policy == "not_smaller", "keep_aspect_ratio_policy '", policy,
        "' is not stretch, not_larger or not_smaller");
  if (!scales.empty()) {
    scales = on_axes(scales, [](size_t) { return 1.0f; });
    for (size_t d = 0; d < r; ++d) {
      check(scales[d] > 0, "scale of axis ", d, " is not positive");
      const double extent = std::floor(static_cast<double>(in[d]) * scales[d]);
      check(extent <= static_cast<double>(kMaxElements), "scale ", scales[d], " of axis ", d,
            " makes the output absurdly large");
      sizes.push_back(static_cast<int64_t>(extent));
    }
  } else {
    sizes = on_axes(sizes, [&](size_t d) { return in[d]; });
    for (size_t d = 0; d < r; ++d) {
      check(in[d] > 0, "cannot resize an empty axis");
      scales.push_back(static_cast<float>(static_cast<double>(sizes[d]) / static_cast<double>(in[d])));
    }
    if (policy != "stretch") {
      // One scale for the named axes, the smallest (not_larger) or the largest (not_smaller);
      // sizes rounded half up.
      float scale = scales[static_cast<size_t>(axes[0])];
      for (const int64_t d : axes) {
        const float s = scales[static_cast<size_t>(d)];
        scale = policy == "not_larger" ? std::min(scale, s) : std::max(scale, s);
      }
      for (const int64_t d : axes) {
        const auto u = static_cast<size_t>(d);
        scales[u] = scale;
        const double extent = static_cast<double>(scale) * static_cast<double>(in[u]) + 0.5;
        check(extent <= static_cast<double>(kMaxElements), "the sizes make the output absurdly large");
        sizes[u] = static_cast<int64_t>(extent);
      }
    }
  }
  Attributes a;
  a.set("mode", mode);
  a.set("coordinate_transformation_mode", L.attr_s("coordinate_transformation_mode", L.opset() >= 11 ? "half_pixel" : "asymmetric"));
  a.set("nearest_mode", L.attr_s("nearest_mode", L.op() == "Upsample" ? "floor" : "round_prefer_floor"));
  a.set("extrapolation_value", L.attr_f("extrapolation_value", 0.0f));
  a.set("scales", scales);
  a.set("sizes", sizes);
  if (!roi.empty()) a.set("roi", roi);
  L.set_output(0, L.emit("Resize", {L.input(0)}, a));
}

void scatter_nd(NodeLowering& L) {
  Attributes a;
  a.set("reduction", L.attr_s("reduction", "none"));
  L.set_output(0, L.emit("ScatterND", {L.input(0), L.input(1), L.input(2)}, a));
}

// Col2Im (opset 18, PyTorch's fold): input [N, C x prod(block_shape), L] holds, for each channel,
// block offset and sliding position (the image's blocks in row-major order, padded, strided,
// dilated as a convolution's), a value to add at that position of the image [N, C,
// image_shape...]; positions inside the padding are dropped. A ScatterND adding the input
// (flattened) into zeros at constant flat indices, those in the padding sent to one slot past the
// image that a Slice then drops. image_shape and block_shape must be constant.
void col2im(NodeLowering& L) {
  const Shape xs = L.shape(0);
  check(xs.size() == 3, "input must be [N, C x prod(block_shape), L], got ", shape_str(xs));
  const std::vector<int64_t> image = L.const_ints(1, "image_shape"), block = L.const_ints(2, "block_shape");
  const size_t dims = image.size();
  check(dims >= 1 && block.size() == dims, "image_shape (", dims, " axes) and block_shape (", block.size(),
        " axes) must name the same axes");
  const std::vector<int64_t> dilations = L.attr_ints("dilations", std::vector<int64_t>(dims, 1));
  const std::vector<int64_t> strides = L.attr_ints("strides", std::vector<int64_t>(dims, 1));
  const std::vector<int64_t> pads = L.attr_ints("pads", std::vector<int64_t>(2 * dims, 0));
  check(dilations.size() == dims && strides.size() == dims && pads.size() == 2 * dims, "dilations, strides and pads must have ",
        dims, ", ", dims, " and ", 2 * dims, " entries");
  std::vector<int64_t> blocks(dims);  // sliding positions per axis
  for (size_t d = 0; d < dims; ++d) {
    check(image[d] > 0 && block[d] > 0 && dilations[d] > 0 && strides[d] > 0 && image[d] <= kMaxElements,
          "image_shape, block_shape, dilations and strides must be positive");
    blocks[d] = (image[d] + pads[d] + pads[d + dims] - dilations[d] * (block[d] - 1) - 1) / strides[d] + 1;
    check(blocks[d] >= 1, "block ", block[d], " does not fit image axis ", d, " of ", image[d], " with its pads");
  }
  const int64_t per_block = numel(block), columns = numel(blocks), plane = checked_numel(image, "Col2Im image");
  check(per_block > 0 && xs[1] % per_block == 0, "input's axis 1 (", xs[1], ") is not a multiple of the block's ", per_block,
        " elements");
  check(xs[2] == columns, "input's axis 2 (", xs[2], ") is not the ", columns, " sliding positions of the block");
  const int64_t channels = xs[1] / per_block, n = numel(xs);
  check(n <= kFoldLimit, "Col2Im of ", n, " elements is too large");
  const int64_t dump = xs[0] * channels * plane;  // where a value in the padding goes
  std::vector<int64_t> index(static_cast<size_t>(n));
  std::vector<int64_t> at(dims), offset(dims);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t l = i % columns, row = (i / columns) % xs[1], batch = i / (columns * xs[1]);
    const int64_t c = row / per_block;
    for (int64_t d = static_cast<int64_t>(dims) - 1, rest = l, k = row % per_block; d >= 0; --d) {
      const auto u = static_cast<size_t>(d);
      at[u] = rest % blocks[u];
      rest /= blocks[u];
      offset[u] = k % block[u];
      k /= block[u];
    }
    int64_t flat = 0;
    bool inside = true;
    for (size_t d = 0; d < dims; ++d) {
      const int64_t p = at[d] * strides[d] - pads[d] + offset[d] * dilations[d];
      inside = inside && p >= 0 && p < image[d];
      flat = flat * image[d] + p;
    }
    index[static_cast<size_t>(i)] = inside ? (batch * channels + c) * plane + flat : dump;
  }
  Attributes expand;
  expand.set("shape", Shape{dump + 1});
  const int zeros = L.emit("Expand", {scalar_like(L, 0, 0.0)}, expand);
  Attributes add;
  add.set("reduction", std::string("add"));
  const int summed = L.emit("ScatterND", {zeros, L.constant(Tensor::from_ints(DType::kI64, {n, 1}, index)),
                                          L.reshape(L.input(0), {n})},
                            add);
  Shape out = {xs[0], channels};
  out.insert(out.end(), image.begin(), image.end());
  L.set_output(0, L.reshape(slice_last_axis(L, summed, 0, dump), out));
}

// MaxUnpool: zeros of the unpooled shape, per spatial axis (in - 1) x stride - pad begin - pad end
// + kernel, with each element of X at its index in I (MaxPool's Indices: flat over that whole
// tensor): a ScatterND of the flattened X into flattened zeros. An output_shape (constant, at
// least the unpooled shape) pads it with zeros at the end of each axis, as onnx's reference does.
void max_unpool(NodeLowering& L) {
  const Shape x = L.shape(0);
  check(x.size() >= 3, "X must be (N, C, D1, ...), not ", shape_str(x));
  check(L.shape(1) == x, "I must have X's shape ", shape_str(x), ", not ", shape_str(L.shape(1)));
  const size_t spatial = x.size() - 2;
  const std::vector<int64_t> kernel = L.attr_ints("kernel_shape");
  const std::vector<int64_t> strides = L.attr_ints("strides", std::vector<int64_t>(spatial, 1));
  const std::vector<int64_t> pads = L.attr_ints("pads", std::vector<int64_t>(2 * spatial, 0));
  check(kernel.size() == spatial && strides.size() == spatial && pads.size() == 2 * spatial, "kernel_shape, strides and pads must have ",
        spatial, ", ", spatial, " and ", 2 * spatial, " entries for X ", shape_str(x));
  Shape unpooled = {x[0], x[1]};
  for (size_t d = 0; d < spatial; ++d) {
    check(strides[d] > 0 && kernel[d] > 0 && x[d + 2] <= kMaxElements / strides[d], "kernel_shape and strides must be positive and small");
    unpooled.push_back((x[d + 2] - 1) * strides[d] - pads[d] - pads[d + spatial] + kernel[d]);
    check(unpooled.back() > 0, "the unpooled shape ", shape_str(unpooled), " has an empty extent");
  }
  const int64_t total = checked_numel(unpooled, "MaxUnpool output"), n = numel(x);
  Attributes expand;
  expand.set("shape", Shape{total});
  const int zeros = L.emit("Expand", {scalar_like(L, 0, 0.0)}, expand);
  Attributes none;
  none.set("reduction", std::string("none"));
  int y = L.reshape(L.emit("ScatterND", {zeros, L.reshape(L.input(1), {n, 1}), L.reshape(L.input(0), {n})}, none), unpooled);
  if (L.has_input(2)) {
    const Shape out = L.const_ints(2, "output_shape");
    check(out.size() == x.size(), "output_shape ", shape_str(out), " must have X's rank ", x.size());
    std::vector<int64_t> grow(2 * x.size(), 0);
    for (size_t d = 0; d < x.size(); ++d) {
      check(out[d] >= unpooled[d] && (d >= 2 || out[d] == unpooled[d]), "output_shape ", shape_str(out),
            " is smaller than the unpooled shape ", shape_str(unpooled), " or changes N or C");
      grow[d + x.size()] = out[d] - unpooled[d];
    }
    if (out != unpooled) y = zero_pad(L, y, grow);
  }
  L.set_output(0, y);
}

// Trilu: Where(mask, x, 0) with the mask over the last two axes computed from the indices (j - i
// >= k for the upper triangle, <= k for the lower): a constant that folds where it is small enough
// (with x, a causal mask), else element-wise ops on two index vectors, so that a mask of any
// length (a 4,096-token prefill's 4,096 x 4,097) costs no constant of its size.
void trilu(NodeLowering& L) {
  check(L.rank(0) >= 2, "input must be at least 2-D, got ", shape_str(L.shape(0)));
  const bool upper = L.attr_i("upper", 1) != 0;
  const int64_t k = L.has_input(1) ? scalar_input(L, 1, "k").to_ints()[0] : 0;
  const Shape s = L.shape(0);
  const int64_t n = s[s.size() - 2], m = s[s.size() - 1];
  const int apart = L.emit("Sub", {iota_along(L, 2, 1, m), iota_along(L, 2, 0, n)});  // j - i, [n, m]
  const int mask = L.emit(upper ? "GreaterOrEqual" : "LessOrEqual", {apart, L.constant(Tensor::scalar_int(DType::kI64, k))});
  L.set_output(0, L.emit("Where", {mask, L.input(0), scalar_like(L, 0, 0.0)}));
}

// Attention (opset 23; sliding windows 25): scaled dot-product attention as ONNX's function
// spells it, over 3-D (batch, seq, heads * size) or 4-D (batch, heads, seq, size) Q, K, V:
// Q and K scaled by sqrt(scale), QK^T, the soft cap, the bias (a float mask added; a bool mask, the
// causal rule j <= i + past and the windows disallowing with -inf), softmax (in
// softmax_precision), times V; a query row with no key allowed gives zeros. past_key/past_value
// are concatenated in front of K and V (the present outputs). Grouped-query attention groups the
// queries of each K/V head instead of repeating K and V: Q (B, Hq, S, D) is viewed as
// (B, Hkv, G * S, D), so both MatMuls read every K and V row once. With nonpad_kv_seqlen (an
// external cache: batch b's keys past its length are padding, and its causal offset is its length
// less the query length) the rules are computed at run time from those lengths.
void attention(NodeLowering& L) {
  check(L.has_input(4) == L.has_input(5), "past_key and past_value must be given together");
  check(!L.has_input(6) || !L.has_input(4), "nonpad_kv_seqlen and past_key/past_value exclude each other");
  const DType dt = L.val(0).dtype;
  check(is_float(dt), "Attention of ", dtype_name(dt), " is not defined");
  const int64_t rank = L.rank(0);
  check((rank == 3 || rank == 4) && L.rank(1) == rank && L.rank(2) == rank, "Q, K and V must be all 3-D or all 4-D");
  const Shape qs = L.shape(0), ks = L.shape(1), vs = L.shape(2);
  const int64_t b = qs[0];
  int64_t qh = L.attr_i("q_num_heads", rank == 4 ? qs[1] : 0), kvh = L.attr_i("kv_num_heads", rank == 4 ? ks[1] : 0);
  Attributes swap_12;
  swap_12.set("perm", std::vector<int64_t>{0, 2, 1, 3});
  int q = L.input(0), k = L.input(1), v = L.input(2);
  if (rank == 3) {
    check(qh > 0 && kvh > 0, "3-D inputs need q_num_heads and kv_num_heads");
    const auto heads = [&](int x, const Shape& xs, int64_t n, const char* what) {
      check(xs[2] % n == 0, what, "'s hidden size ", xs[2], " is not a multiple of its ", n, " heads");
      return L.emit("Transpose", {L.reshape(x, {xs[0], xs[1], n, xs[2] / n})}, swap_12);
    };
    q = heads(q, qs, qh, "Q");
    k = heads(k, ks, kvh, "K");
    v = heads(v, vs, kvh, "V");
  } else {
    check(qh == qs[1] && kvh == ks[1] && vs[1] == kvh, "q_num_heads ", qh, " and kv_num_heads ", kvh,
          " disagree with Q's ", qs[1], " heads, K's ", ks[1], " and V's ", vs[1]);
  }
  check(qh % kvh == 0, "q_num_heads ", qh, " is not a multiple of kv_num_heads ", kvh);
  const auto shape_of = [&](int x) { return L.builder().value(x).shape; };
  const int64_t sq = shape_of(q)[2], d = shape_of(q)[3];
  int64_t past = 0;
  if (L.has_input(4)) {
    past = L.shape(4)[2];
    Attributes seq;
    seq.set("axis", int64_t{2});
    k = L.emit("Concat", {L.input(4), k}, seq);
    v = L.emit("Concat", {L.input(5), v}, seq);
  }
  L.set_output(1, k);
  L.set_output(2, v);
  const int64_t t = shape_of(k)[2], dv = shape_of(v)[3];
  check(shape_of(k)[3] == d && shape_of(v)[2] == t, "K's head size or V's length disagrees with Q and K");
  const double scale = L.has_attr("scale") ? L.attr_f("scale", 1.0f) : 1.0 / std::sqrt(static_cast<double>(d));
  const int root = L.constant(Tensor::scalar_float(dt, static_cast<float>(std::sqrt(scale))));
  const int64_t g = qh / kvh;
  const int qg = L.reshape(L.emit("Mul", {q, root}), {b, kvh, g * sq, d});
  Attributes last_two;
  last_two.set("perm", std::vector<int64_t>{0, 1, 3, 2});
  const int kt = L.emit("Transpose", {L.emit("Mul", {k, root})}, last_two);
  int scores = L.reshape(L.emit("MatMul", {qg, kt}), {b, qh, sq, t});
  const int qk_raw = scores;
  const float softcap = L.attr_f("softcap", 0.0f);
  if (softcap > 0) {
    const int cap = L.constant(Tensor::scalar_float(dt, softcap));
    scores = L.emit("Mul", {L.emit("Tanh", {L.emit("Div", {scores, cap})}), cap});
  }
  const int qk_capped = scores;
  // Keys each query may attend, as far as import knows them: causal and window rules.
  const bool causal = L.attr_i("is_causal", 0) != 0;
  const int64_t left = L.attr_i("left_window_size", -1), right = L.attr_i("right_window_size", -1);
  std::vector<int64_t> allowed(static_cast<size_t>(sq * t), 1);
  bool constrained = false, empty_row = false;
  for (int64_t i = 0; i < sq; ++i) {
    bool any = false;
    for (int64_t j = 0; j < t; ++j) {
      const int64_t p = past + i;
      const bool ok = (!causal || j <= p) && (left < 0 || j >= p - left) && (right < 0 || j <= p + right);
      allowed[static_cast<size_t>(i * t + j)] = ok;
      constrained = constrained || !ok;
      any = any || ok;
    }
    empty_row = empty_row || !any;
  }
  const int minus_inf = L.constant(Tensor::scalar_float(dt, -std::numeric_limits<float>::infinity()));
  int cond = constrained ? L.constant(Tensor::from_ints(DType::kBool, {sq, t}, allowed)) : kNoValue;
  bool runtime_cond = false;
  if (L.has_input(6)) {
    // Key j of batch b: valid when j < n_b; causal when j - i + S <= n_b; in the windows when
    // j - i + S + left >= n_b and j - i + S - right <= n_b (position p = n_b - S + i).
    check(L.shape(6) == Shape{b}, "nonpad_kv_seqlen must have shape (", b, ")");
    const int n = L.reshape(cast_to(L, L.input(6), DType::kI64), {b, 1, 1, 1});
    const auto offsets = [&](int64_t add) {
      std::vector<int64_t> o(static_cast<size_t>(sq * t));
      for (int64_t i = 0; i < sq; ++i) {
        for (int64_t j = 0; j < t; ++j) o[static_cast<size_t>(i * t + j)] = j - i + sq + add;
      }
      return L.constant(Tensor::from_ints(DType::kI64, {sq, t}, o));
    };
    std::vector<int64_t> js(static_cast<size_t>(t));
    std::iota(js.begin(), js.end(), 0);
    cond = L.emit("Less", {L.constant(Tensor::from_ints(DType::kI64, {t}, js)), n});
    if (causal) cond = L.emit("And", {cond, L.emit("LessOrEqual", {offsets(0), n})});
    if (left >= 0) cond = L.emit("And", {cond, L.emit("GreaterOrEqual", {offsets(left), n})});
    if (right >= 0) cond = L.emit("And", {cond, L.emit("LessOrEqual", {offsets(-right), n})});
    runtime_cond = true;
  }
  if (L.has_input(3)) {
    int mask = L.input(3);
    const Shape ms = L.shape(3);
    const bool is_bool = L.val(3).dtype == DType::kBool;
    check(is_bool || L.val(3).dtype == dt, "attn_mask must be bool or of Q's type");
    if (!ms.empty() && ms.back() > 1 && ms.back() < t) {  // shorter than the keys: padded, disallowed
      Shape fill = ms;
      fill.back() = t - ms.back();
      Tensor pad(is_bool ? DType::kBool : dt, fill);
      if (is_bool) pad.set_ints(std::vector<int64_t>(static_cast<size_t>(pad.numel()), 0));
      else pad.set_doubles(std::vector<double>(static_cast<size_t>(pad.numel()), -std::numeric_limits<double>::infinity()));
      Attributes keys;
      keys.set("axis", static_cast<int64_t>(ms.size()) - 1);
      mask = L.emit("Concat", {mask, L.constant(std::move(pad))}, keys);
    }
    if (is_bool) {
      cond = cond == kNoValue ? mask : L.emit("And", {mask, cond});
      runtime_cond = true;
    } else {
      scores = L.emit("Add", {scores, mask});
    }
  }
  if (cond != kNoValue) scores = L.emit("Where", {cond, scores, minus_inf});
  const int qk_biased = scores;
  const int64_t precision = L.attr_i("softmax_precision", dtype_to_onnx(dt));
  const DType softmax_dt = dtype_from_onnx(static_cast<int>(precision));
  check(softmax_dt != DType::kUndefined && is_float(softmax_dt), "softmax_precision ", precision, " is not a float type");
  Attributes keys_axis;
  keys_axis.set("axis", int64_t{3});
  int probs = cast_to(L, L.emit("Softmax", {cast_to(L, scores, softmax_dt)}, keys_axis), dt);
  if (runtime_cond || empty_row) {  // a row with no key allowed: zeros, not NaN
    const int allowed_f = cast_to(L, cond, dt);
    const auto last = static_cast<int64_t>(L.builder().value(allowed_f).shape.size()) - 1;
    const int row_any = L.emit("Greater", {reduce_node(L, "ReduceMax", allowed_f, {last}, 1), scalar_like(L, 0, 0.0)});
    probs = L.emit("Where", {row_any, probs, scalar_like(L, 0, 0.0)});
  }
  int y = L.reshape(L.emit("MatMul", {L.reshape(probs, {b, kvh, g * sq, t}), v}), {b, qh, sq, dv});
  if (rank == 3) y = L.reshape(L.emit("Transpose", {y}, swap_12), {b, sq, qh * dv});
  L.set_output(0, y);
  const int64_t mode = L.attr_i("qk_matmul_output_mode", 0);
  check(mode >= 0 && mode <= 3, "qk_matmul_output_mode ", mode, " is not 0 to 3");
  L.set_output(3, mode == 0 ? qk_raw : mode == 1 ? qk_capped : mode == 2 ? qk_biased : probs);
}

// RotaryEmbedding (opset 23): in the (batch, seq, heads, size) layout, the first
// rotary_embedding_dim entries of each head (all when 0) split into halves x1, x2 (or the even and
// odd entries when interleaved) become x1 cos - x2 sin and x1 sin + x2 cos, cos and sin picked by
// position_ids from the caches (or given per batch and position); Slices, Gathers, element-wise
// ops and Concats, which the planner fuses into the projection that produces X.
void rotary_embedding(NodeLowering& L) {
  const int64_t rank = L.rank(0);
  check(rank == 3 || rank == 4, "X must be 3-D (batch, seq, hidden) or 4-D (batch, heads, seq, size)");
  const Shape xs = L.shape(0);
  const int64_t b = xs[0];
  const int64_t heads = rank == 4 ? xs[1] : L.attr_i("num_heads", 0);
  check(heads > 0, "a 3-D X needs num_heads");
  const int64_t seq = rank == 4 ? xs[2] : xs[1];
  check(rank == 4 || xs[2] % heads == 0, "hidden size ", xs[2], " is not a multiple of num_heads ", heads);
  const int64_t size = rank == 4 ? xs[3] : xs[2] / heads;
  const int64_t dim = L.attr_i("rotary_embedding_dim", 0) == 0 ? size : L.attr_i("rotary_embedding_dim", 0);
  check(dim > 0 && dim <= size && dim % 2 == 0, "rotary_embedding_dim ", dim, " must be even and at most the head size ", size);
  const int64_t half = dim / 2;
  const bool interleaved = L.attr_i("interleaved", 0) != 0;
  Attributes swap_12;
  swap_12.set("perm", std::vector<int64_t>{0, 2, 1, 3});
  const int x = rank == 4 ? L.emit("Transpose", {L.input(0)}, swap_12) : L.reshape(L.input(0), {b, seq, heads, size});
  const auto cache = [&](size_t k) {
    int c = L.input(k);
    if (L.has_input(3)) {
      Attributes rows;
      rows.set("axis", int64_t{0});
      c = L.emit("Gather", {c, L.input(3)}, rows);
    }
    const Shape cs = L.builder().value(c).shape;
    check(cs.size() == 3 && cs[0] == b && cs[1] == seq && cs[2] == half, "the ", k == 1 ? "cos" : "sin", " cache gives ",
          shape_str(cs), " per token, not (", b, ", ", seq, ", ", half, ")");
    return L.reshape(c, {b, seq, 1, half});
  };
  const int cos = cache(1), sin = cache(2);
  const auto part = [&](int64_t start, int64_t end, int64_t step) { return slice_axes(L, x, {start}, {end}, {3}, {step}); };
  const int x1 = interleaved ? part(0, dim, 2) : part(0, half, 1);
  const int x2 = interleaved ? part(1, dim, 2) : part(half, dim, 1);
  const int real = L.emit("Sub", {L.emit("Mul", {cos, x1}), L.emit("Mul", {sin, x2})});
  const int imag = L.emit("Add", {L.emit("Mul", {sin, x1}), L.emit("Mul", {cos, x2})});
  Attributes last;
  last.set("axis", int64_t{3});
  int rotated;
  if (interleaved) {
    Attributes pair;
    pair.set("axis", int64_t{4});
    const int both = L.emit("Concat", {L.reshape(real, {b, seq, heads, half, 1}), L.reshape(imag, {b, seq, heads, half, 1})}, pair);
    rotated = L.reshape(both, {b, seq, heads, dim});
  } else {
    rotated = L.emit("Concat", {real, imag}, last);
  }
  if (dim < size) rotated = L.emit("Concat", {rotated, part(dim, size, 1)}, last);
  L.set_output(0, rank == 4 ? L.emit("Transpose", {rotated}, swap_12) : L.reshape(rotated, xs));
}

// What CumSum and CumProd share: along `axis` (a known input), element j takes the elements i at
// or before it (at or after it when reversed; not itself when exclusive): a 0/1 triangle of n x n,
// row-major (i, j); the axis is moved last and back by `last` (a Transpose swapping it with the
// last, its own inverse).
struct Cumulative {
  int64_t axis = 0, n = 0, rank = 0;
  std::vector<int64_t> triangle;
  Attributes move;
  int last(NodeLowering& L, int v) const { return axis == rank - 1 ? v : L.emit("Transpose", {v}, move); }
};

Cumulative cumulative(NodeLowering& L) {
  Cumulative c;
  c.rank = L.rank(0);
  check(c.rank > 0, L.op(), " of a scalar");
  c.axis = normalize_axis(scalar_input(L, 1, "axis").to_ints()[0], c.rank, "axis");
  const bool exclusive = L.attr_i("exclusive", 0) != 0, reverse = L.attr_i("reverse", 0) != 0;
  c.n = L.shape(0)[static_cast<size_t>(c.axis)];
  check(c.n * c.n <= kFoldLimit, "a ", L.op(), " over ", c.n, " elements is too long");
  c.triangle.assign(static_cast<size_t>(c.n * c.n), 0);
  for (int64_t i = 0; i < c.n; ++i) {
    for (int64_t j = 0; j < c.n; ++j) {
      c.triangle[static_cast<size_t>(i * c.n + j)] = (reverse ? (exclusive ? i > j : i >= j) : (exclusive ? i < j : i <= j)) ? 1 : 0;
    }
  }
  std::vector<int64_t> perm(static_cast<size_t>(c.rank));
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[static_cast<size_t>(c.axis)], perm.back());
  c.move.set("perm", perm);
  return c;
}

// CumSum: y[j] = sum over i of x[i] x T[i][j], a MatMul with the triangle, the axis moved last
// and back. Integers are summed in float64, exact while the sums stay below 2^53.
void cum_sum(NodeLowering& L) {
  const Cumulative c = cumulative(L);
  const DType dt = L.val(0).dtype;
  const DType acc = is_float(dt) ? dt : DType::kF64;
  Tensor t(acc, {c.n, c.n});
  t.set_doubles(std::vector<double>(c.triangle.begin(), c.triangle.end()));
  const int y = L.emit("MatMul", {c.last(L, cast_to(L, L.input(0), acc)), L.constant(std::move(t))});
  L.set_output(0, cast_to(L, c.last(L, y), dt));
}

// CumProd: y[j] = the product of x[i] over the i the triangle holds for j: x moved last and given
// a unit axis for j, Where(triangle, x, 1) broadcast to n x n, ReduceProd over i, moved back (n x
// n elements, as CumSum's MatMul reads).
void cum_prod(NodeLowering& L) {
  const Cumulative c = cumulative(L);
  const DType dt = L.val(0).dtype;
  const int x = c.last(L, L.input(0));
  Shape column = L.builder().value(x).shape;  // ..., n (i) -> ..., n (i), 1 (j)
  column.push_back(1);
  const int mask = L.constant(Tensor::from_ints(DType::kBool, {c.n, c.n}, c.triangle));
  const int one = L.constant(is_float(dt) ? Tensor::scalar_float(dt, 1.0f) : Tensor::scalar_int(dt, 1));
  const int y = reduce_node(L, "ReduceProd", L.emit("Where", {mask, L.reshape(x, column), one}), {c.rank - 1}, 0);
  L.set_output(0, c.last(L, y));
}

// BitShift, BitwiseAnd, BitwiseOr, BitwiseXor, BitwiseNot on 8- to 64-bit integers: the canonical
// ops of the same names; BitShift with its direction and the element type's width and signedness
// as attributes (a shift outside [0, width) gives 0, or -1 for a negative value shifted right).
void bitwise(NodeLowering& L) {
  const DType dt = L.val(0).dtype;
  const bool is_signed = dt == DType::kI8 || dt == DType::kI16 || dt == DType::kI32 || dt == DType::kI64;
  check(is_signed || dt == DType::kU8 || dt == DType::kU16 || dt == DType::kU32 || dt == DType::kU64, L.op(), " of ",
        dtype_name(dt), " (8- to 64-bit integers are supported)");
  std::vector<int> ins;
  for (size_t k = 0; k < L.input_count(); ++k) ins.push_back(L.input(k));
  Attributes a;
  if (L.op() == "BitShift") {
    const std::string direction = L.attr_s("direction", "");
    check(direction == "LEFT" || direction == "RIGHT", "direction must be LEFT or RIGHT, got '", direction, "'");
    a.set("direction", direction);
    a.set("bits", static_cast<int64_t>(8 * dtype_size(dt)));
    a.set("signed", int64_t{is_signed ? 1 : 0});
  }
  L.set_output(0, L.emit(L.op(), ins, a));
}

// HannWindow, HammingWindow, BlackmanWindow: a constant of `size` (a known input) values
// a0 - a1 cos(2 pi n / N) + a2 cos(4 pi n / N), N = size if periodic (the default) else size - 1,
// with the operator's coefficients (0.5, 0.5; 25/46, 21/46; 0.42, 0.5, 0.08), of output_datatype.
void window(NodeLowering& L) {
  const int64_t size = scalar_input(L, 0, "size").to_ints()[0];
  check(size >= 0 && size <= kFoldLimit, "size ", size, " is outside 0 ..", kFoldLimit);
  const DType dt = dtype_from_onnx(static_cast<int>(L.attr_i("output_datatype", 1)));
  check(dt != DType::kUndefined && is_float(dt), "output_datatype ", L.attr_i("output_datatype", 1), " is not a floating-point type");
  const bool periodic = L.attr_i("periodic", 1) != 0;
  double a0 = 0.42, a1 = 0.5, a2 = 0.08;
  if (L.op() == "HannWindow") a0 = 0.5, a1 = 0.5, a2 = 0.0;
  if (L.op() == "HammingWindow") a0 = 25.0 / 46.0, a1 = 21.0 / 46.0, a2 = 0.0;
  const double period = static_cast<double>(periodic ? size : size - 1), pi = 3.14159265358979323846;
  std::vector<double> w(static_cast<size_t>(size));
  for (int64_t k = 0; k < size; ++k) {
    const double t = static_cast<double>(k) / period;
    w[static_cast<size_t>(k)] = a0 - a1 * std::cos(2.0 * pi * t) + a2 * std::cos(4.0 * pi * t);
  }
  Tensor t(dt, {size});
  t.set_doubles(w);
  L.set_output(0, L.constant(std::move(t)));
}

// Einsum of one or two operands as Transposes, ReduceSums, Reshapes and one batched MatMul:
// letters only in one operand and not in the output are summed first; then the letters of both
// operands and the output are batch axes, those of both and not the output are contracted, and
// the rest are the rows and columns of the MatMul. "..." stands for the same leading axes in every
// term. A letter twice in one term (a diagonal) is refused.
void einsum(NodeLowering& L) {
  std::string eq;
  for (const char c : L.attr_s("equation", "")) {
    if (c != ' ') eq += c;
  }
  check(L.input_count() == 1 || L.input_count() == 2, "Einsum of ", L.input_count(), " operands is not supported (1 or 2 are)");
  const size_t arrow = eq.find("->");
  std::string lhs = eq.substr(0, arrow);
  std::vector<std::string> terms;
  for (size_t start = 0;;) {
    const size_t comma = lhs.find(',', start);
    terms.push_back(lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  check(terms.size() == L.input_count(), "equation '", eq, "' has ", terms.size(), " terms for ", L.input_count(), " inputs");
  // "..." becomes digits '0', '1', ...: one per leading axis it covers (digits are not letters).
  int64_t ellipsis = -1;
  const auto expand = [&](std::string term, int64_t rank) {
    const size_t dots = term.find("...");
    if (dots == std::string::npos) return term;
    const int64_t n = rank - static_cast<int64_t>(term.size() - 3);
    check(n >= 0 && (ellipsis < 0 || ellipsis == n), "'...' covers ", n, " axes here and ", ellipsis, " elsewhere");
    ellipsis = n;
    std::string axes;
    for (int64_t i = 0; i < n; ++i) axes += static_cast<char>('0' + i);
    return term.substr(0, dots) + axes + term.substr(dots + 3);
  };
  std::map<char, int64_t> extent, uses;
  for (size_t k = 0; k < terms.size(); ++k) {
    terms[k] = expand(terms[k], L.rank(k));
    check(static_cast<int64_t>(terms[k].size()) == L.rank(k), "term '", terms[k], "' has ", terms[k].size(),
          " indices for input ", k, " of rank ", L.rank(k));
    for (size_t i = 0; i < terms[k].size(); ++i) {
      const char c = terms[k][i];
      check(terms[k].find(c) == i, "index '", c, "' repeats in term ", k, " (a diagonal), which is not supported");
      const int64_t e = L.shape(k)[i];
      const auto seen = extent.find(c);
      check(seen == extent.end() || seen->second == e, "index '", c, "' has extents ",
            seen == extent.end() ? e : seen->second, " and ", e);
      extent[c] = e;
      ++uses[c];
    }
  }
  std::string out;
  if (arrow != std::string::npos) {
    out = eq.substr(arrow + 2);
    if (const size_t dots = out.find("..."); dots != std::string::npos) {
      std::string axes;
      for (int64_t i = 0; i < ellipsis; ++i) axes += static_cast<char>('0' + i);
      out = out.substr(0, dots) + axes + out.substr(dots + 3);
    }
  } else {  // implicit: the "..." axes, then the letters used once, in alphabetical order
    for (int64_t i = 0; i < ellipsis; ++i) out += static_cast<char>('0' + i);
    for (const auto& [c, n] : extent) {
      if (n > 0 && uses[c] == 1 && !(c >= '0' && c <= '9')) out += c;
    }
  }
  for (const char c : out) check(extent.count(c) != 0, "output index '", c, "' is in no input");
  const auto in_out = [&](char c) { return out.find(c) != std::string::npos; };
  // Moves the axes of v (named by `from`) into the order `to` names.
  const auto permute = [&](int v, const std::string& from, const std::string& to) {
    if (from == to) return v;
    std::vector<int64_t> perm;
    for (const char c : to) perm.push_back(static_cast<int64_t>(from.find(c)));
    Attributes a;
    a.set("perm", perm);
    return L.emit("Transpose", {v}, a);
  };
  // Sums the axes of v that no other term nor the output names.
  const auto sum_private = [&](int v, std::string& term, const std::string& other) {
    std::vector<int64_t> axes;
    std::string kept;
    for (size_t i = 0; i < term.size(); ++i) {
      if (!in_out(term[i]) && other.find(term[i]) == std::string::npos) axes.push_back(static_cast<int64_t>(i));
      else kept += term[i];
    }
    term = kept;
    return axes.empty() ? v : reduce_node(L, "ReduceSum", v, axes, 0);
  };
  const auto extents = [&](const std::string& letters) {
    Shape s;
    for (const char c : letters) s.push_back(extent[c]);
    return s;
  };
  const auto product = [&](const std::string& letters) {
    int64_t p = 1;
    for (const char c : letters) p *= extent[c];
    return p;
  };
  if (terms.size() == 1) {
    std::string t = terms[0];
    const int v = sum_private(L.input(0), t, "");
    L.set_output(0, permute(v, t, out));
    return;
  }
  std::string a = terms[0], b = terms[1];
  int va = sum_private(L.input(0), a, b), vb = sum_private(L.input(1), b, a);
  std::string batch, contract, rows, cols;
  for (const char c : a) {
    const bool both = b.find(c) != std::string::npos;
    (both ? (in_out(c) ? batch : contract) : rows) += c;
  }
  for (const char c : b) {
    if (a.find(c) == std::string::npos) cols += c;
  }
  va = L.reshape(permute(va, a, batch + rows + contract), {product(batch), product(rows), product(contract)});
  vb = L.reshape(permute(vb, b, batch + contract + cols), {product(batch), product(contract), product(cols)});
  const int y = L.reshape(L.emit("MatMul", {va, vb}), extents(batch + rows + cols));
  L.set_output(0, permute(y, batch + rows + cols, out));
}

void where(NodeLowering& L) { L.set_output(0, L.emit("Where", {L.input(0), L.input(1), L.input(2)})); }

void shape_op(NodeLowering& L) {
  const Shape& s = L.shape(0);
  const int64_t r = static_cast<int64_t>(s.size());
  int64_t start = L.attr_i("start", 0);
  int64_t end = L.attr_i("end", r);
  if (start < 0) start += r;
  if (end < 0) end += r;
  start = std::clamp<int64_t>(start, 0, r);
  end = std::clamp<int64_t>(end, start, r);
  const std::vector<int64_t> dims(s.begin() + start, s.begin() + end);
  L.set_output(0, L.constant(Tensor::from_ints(DType::kI64, {static_cast<int64_t>(dims.size())}, dims)));
}

void size_op(NodeLowering& L) { L.set_output(0, L.constant(Tensor::scalar_int(DType::kI64, numel(L.shape(0))))); }

void constant_op(NodeLowering& L) {
  if (L.has_attr("value")) {
    L.set_output(0, L.constant(L.attr_tensor("value")));
  } else if (L.has_attr("value_float")) {
    L.set_output(0, L.constant(Tensor::scalar_float(DType::kF32, L.attr_f("value_float", 0))));
  } else if (L.has_attr("value_floats")) {
    const auto v = L.attr_floats("value_floats");
    L.set_output(0, L.constant(Tensor::from_floats(DType::kF32, {static_cast<int64_t>(v.size())}, v)));
  } else if (L.has_attr("value_int")) {
    L.set_output(0, L.constant(Tensor::scalar_int(DType::kI64, L.attr_i("value_int", 0))));
  } else if (L.has_attr("value_ints")) {
    const auto v = L.attr_ints("value_ints");
    L.set_output(0, L.constant(Tensor::from_ints(DType::kI64, {static_cast<int64_t>(v.size())}, v)));
  } else {
    fail("no supported value attribute (value, value_float(s), value_int(s)); strings and sparse tensors are not supported");
  }
}

void constant_of_shape(NodeLowering& L) {
  const std::vector<int64_t> shape = L.const_ints(0, "shape");
  Tensor value = L.has_attr("value") ? L.attr_tensor("value") : Tensor::scalar_float(DType::kF32, 0.0f);
  check(value.numel() == 1, "value must hold one element");
  checked_numel(shape, "ConstantOfShape output");
  value = value.reshaped({});
  if (numel(shape) <= kFoldLimit) {
    Tensor out(value.dtype(), shape);
    const size_t elem = dtype_size(value.dtype());
    for (int64_t i = 0; i < out.numel(); ++i) std::memcpy(out.data() + i * static_cast<int64_t>(elem), value.data(), elem);
    L.set_output(0, L.constant(std::move(out)));
    return;
  }
  Attributes a;
  a.set("shape", shape);
  L.set_output(0, L.emit("Expand", {L.constant(std::move(value))}, a));
}

void range(NodeLowering& L) {
  const Tensor& start = L.const_input(0, "start");
  const DType dt = start.dtype();
  // Opset 27: float16 and bfloat16 ranges are computed in `stash_type` (1 float, 11 double) as
  // start + i * delta and then rounded to 16 bits; below, in double for every float type.
  const int64_t stash = L.attr_i("stash_type", 1);
  check(stash == 1 || stash == 11, "stash_type ", stash, " is not supported (1, float, and 11, double, are)");
  if (is_float(dt)) {
    const double s = scalar_input(L, 0, "start").to_doubles()[0];
    const double lim = scalar_input(L, 1, "limit").to_doubles()[0];
    const double d = scalar_input(L, 2, "delta").to_doubles()[0];
    check(d != 0, "delta is zero");
    const double count = std::max(0.0, std::ceil((lim - s) / d));
    check(count <= static_cast<double>(kFoldLimit), "Range of ", count, " elements is too large");
    std::vector<double> v(static_cast<size_t>(count));
    for (size_t i = 0; i < v.size(); ++i) v[i] = s + static_cast<double>(i) * d;
    Tensor t(dt, {static_cast<int64_t>(v.size())});
    t.set_doubles(v);
    L.set_output(0, L.constant(std::move(t)));
    return;
  }
  const int64_t s = scalar_input(L, 0, "start").to_ints()[0];
  const int64_t lim = scalar_input(L, 1, "limit").to_ints()[0];
  const int64_t d = scalar_input(L, 2, "delta").to_ints()[0];
  check(d != 0, "delta is zero");
  const double count_d = std::max(0.0, std::ceil((static_cast<double>(lim) - static_cast<double>(s)) / static_cast<double>(d)));
  check(count_d <= static_cast<double>(kFoldLimit), "Range of ", count_d, " elements is too large");
  std::vector<int64_t> v(static_cast<size_t>(count_d));
  // In wrapping arithmetic: i * d may overflow int64 even where s + i * d does not.
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int64_t>(static_cast<uint64_t>(s) + i * static_cast<uint64_t>(d));
  L.set_output(0, L.constant(Tensor::from_ints(dt, {static_cast<int64_t>(v.size())}, v)));
}

void non_zero(NodeLowering& L) {
  if (!L.val(0).is_constant()) {
    non_zero_padded(L);
    return;
  }
  const Tensor& x = *L.val(0).data;
  const std::vector<double> v = x.to_doubles();
  const auto strides = strides_of(x.shape());
  std::vector<int64_t> hits;
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] != 0) hits.push_back(static_cast<int64_t>(i));
  }
  const auto r = static_cast<int64_t>(x.shape().size());
  const auto n = static_cast<int64_t>(hits.size());
  std::vector<int64_t> out(static_cast<size_t>(r * n));
  for (int64_t k = 0; k < n; ++k) {
    int64_t rem = hits[static_cast<size_t>(k)];
    for (int64_t d = 0; d < r; ++d) {
      out[static_cast<size_t>(d * n + k)] = rem / strides[static_cast<size_t>(d)];
      rem %= strides[static_cast<size_t>(d)];
    }
  }
  L.set_output(0, L.constant(Tensor::from_ints(DType::kI64, {r, n}, out)));
}

// AffineGrid (opset 20): grid[n, (d,) h, w, i] = sum over j of theta[n, i, j] * base[(d,) h, w, j],
// where base holds the homogeneous coordinates (x_w, y_h, (z_d,) 1) of the output's positions
// normalized to [-1, 1]: pixel centres, (2i + 1) / extent - 1, or with align_corners the corner
// pixels at -1 and 1, -1 + 2i / (extent - 1). The base grid is a constant of theta's type (size
// must be constant); one MatMul of it by theta transposed, broadcast over the batch, gives the grid.
void affine_grid(NodeLowering& L) {
  const std::vector<int64_t> size = L.const_ints(1, "size");
  check(size.size() == 4 || size.size() == 5, "size must be (N, C, H, W) or (N, C, D, H, W); it has ", size.size(), " entries");
  const bool align = L.attr_i("align_corners", 0) != 0;
  const int64_t dims = static_cast<int64_t>(size.size()) - 2;
  const Shape theta = L.shape(0);
  check(theta.size() == 3 && theta[0] == size[0] && theta[1] == dims && theta[2] == dims + 1, "theta must be (", size[0], ", ",
        dims, ", ", dims + 1, ") for size ", shape_str(size), ", not ", shape_str(theta));
  const std::vector<int64_t> extents(size.begin() + 2, size.end());  // (D,) H, W
  for (int64_t e : extents) check(e > 0, "size ", shape_str(size), " has an empty spatial extent");
  const int64_t points = checked_numel(extents, "AffineGrid output");
  check(points <= kMaxElements / (dims + 1), "size ", shape_str(size), " makes the grid absurdly large");
  std::vector<double> base(static_cast<size_t>(points * (dims + 1)));
  for (int64_t p = 0; p < points; ++p) {
    int64_t rest = p;
    for (int64_t a = dims; a-- > 0;) {  // W first: coordinate 0 is x, along the last extent
      const int64_t m = extents[static_cast<size_t>(a)], i = rest % m;
      rest /= m;
      const double c = align ? (m == 1 ? -1.0 : -1.0 + 2.0 * static_cast<double>(i) / static_cast<double>(m - 1))
                             : (2.0 * static_cast<double>(i) + 1.0) / static_cast<double>(m) - 1.0;
      base[static_cast<size_t>(p * (dims + 1) + (dims - 1 - a))] = c;
    }
    base[static_cast<size_t>(p * (dims + 1) + dims)] = 1.0;
  }
  Tensor grid(L.val(0).dtype, {points, dims + 1});
  grid.set_doubles(base);
  Attributes t;
  t.set("perm", std::vector<int64_t>{0, 2, 1});
  const int product = L.emit("MatMul", {L.constant(std::move(grid)), L.emit("Transpose", {L.input(0)}, t)});
  Shape out = {size[0]};
  out.insert(out.end(), extents.begin(), extents.end());
  out.push_back(dims);
  L.set_output(0, L.reshape(product, out));
}

void depth_space(NodeLowering& L) {
  check(L.rank(0) == 4, "input must be 4-D (N, C, H, W)");
  const int64_t bs = L.attr_i("blocksize", 0);
  check(bs > 0 && bs <= (int64_t{1} << 20), "blocksize ", bs, " is not in 1..2^20");  // so bs * bs cannot overflow
  const Shape& s = L.shape(0);
  const int64_t n = s[0], c = s[1], h = s[2], w = s[3];
  check(L.op() == "DepthToSpace" || c <= kMaxElements / (bs * bs), "blocksize ", bs, " makes the output absurdly large");
  Attributes a;
  if (L.op() == "DepthToSpace") {
    check(c % (bs * bs) == 0, "channels ", c, " not divisible by blocksize^2");
    const std::string mode = L.attr_s("mode", "DCR");
    check(mode == "DCR" || mode == "CRD", "mode '", mode, "' is not DCR or CRD");
    const bool crd = mode == "CRD";
    const int t = crd ? L.reshape(L.input(0), {n, c / (bs * bs), bs, bs, h, w}) : L.reshape(L.input(0), {n, bs, bs, c / (bs * bs), h, w});
    a.set("perm", crd ? std::vector<int64_t>{0, 1, 4, 2, 5, 3} : std::vector<int64_t>{0, 3, 4, 1, 5, 2});
    L.set_output(0, L.reshape(L.emit("Transpose", {t}, a), {n, c / (bs * bs), h * bs, w * bs}));
  } else {
    check(h % bs == 0 && w % bs == 0, "spatial size not divisible by blocksize");
    const std::string mode = L.attr_s("mode", "DCR");  // an attribute since opset 28
    check(mode == "DCR" || mode == "CRD", "mode '", mode, "' is not DCR or CRD");
    const int t = L.reshape(L.input(0), {n, c, h / bs, bs, w / bs, bs});
    // Output channel (by * bs + bx) * C + c for DCR, c * bs * bs + by * bs + bx for CRD.
    a.set("perm", mode == "DCR" ? std::vector<int64_t>{0, 3, 5, 1, 2, 4} : std::vector<int64_t>{0, 1, 3, 5, 2, 4});
    L.set_output(0, L.reshape(L.emit("Transpose", {t}, a), {n, c * bs * bs, h / bs, w / bs}));
  }
}

const std::map<std::string, Lowering>& lowerings() {
  static const std::map<std::string, Lowering> table = {
      {"Abs", pass_through}, {"Acos", trig_by_formula}, {"Acosh", trig_by_formula}, {"Add", binary}, {"AffineGrid", affine_grid}, {"And", binary}, {"ArgMax", arg_reduce},
      {"ArgMin", arg_reduce}, {"Asin", trig_by_formula}, {"Asinh", trig_by_formula}, {"Atan", pass_through}, {"Atanh", trig_by_formula}, {"Attention", attention}, {"AveragePool", pool}, {"BatchNormalization", batch_norm}, {"Bernoulli", random_op}, {"BitCast", bit_cast}, {"BitShift", bitwise}, {"BitwiseAnd", bitwise}, {"BitwiseNot", bitwise}, {"BitwiseOr", bitwise}, {"BitwiseXor", bitwise}, {"BlackmanWindow", window},
      {"Cast", cast}, {"CastLike", cast_like}, {"Ceil", pass_through}, {"Celu", celu}, {"CenterCropPad", center_crop_pad}, {"Clip", clip}, {"Col2Im", col2im}, {"Compress", compress}, {"Concat", concat},
      {"CausalConvWithState", causal_conv_with_state}, {"Constant", constant_op}, {"ConstantOfShape", constant_of_shape}, {"Conv", conv}, {"ConvTranspose", conv_transpose}, {"ConvInteger", conv_integer}, {"Cos", pass_through}, {"Cosh", trig_by_formula}, {"CumProd", cum_prod}, {"CumSum", cum_sum}, {"DFT", dft},
      {"DeformConv", deform_conv}, {"DepthToSpace", depth_space}, {"DequantizeLinear", dequantize_linear}, {"Det", det}, {"Div", binary}, {"Dropout", dropout}, {"DynamicQuantizeLinear", dynamic_quantize_linear}, {"Einsum", einsum}, {"Elu", unary_with_defaults},
      {"Equal", binary}, {"Erf", pass_through}, {"Exp", pass_through}, {"Expand", expand}, {"EyeLike", eye_like},
      {"Flatten", flatten}, {"Floor", pass_through}, {"Gather", gather}, {"GatherElements", gather_elements}, {"GatherND", gather_nd}, {"Gelu", gelu}, {"Gemm", gemm},
      {"GlobalAveragePool", global_pool}, {"GRU", recurrent}, {"GlobalMaxPool", global_pool}, {"Greater", binary}, {"GridSample", grid_sample},
      {"GreaterOrEqual", pass_through}, {"GroupNormalization", group_norm}, {"HammingWindow", window}, {"HannWindow", window}, {"HardSigmoid", unary_with_defaults}, {"HardSwish", pass_through}, {"Hardmax", hardmax},
      {"Identity", identity}, {"InstanceNormalization", instance_norm}, {"IsInf", is_inf}, {"IsNaN", pass_through},
      {"LRN", lrn}, {"LSTM", recurrent}, {"LayerNormalization", layer_norm}, {"LeakyRelu", unary_with_defaults}, {"Less", binary}, {"LinearAttention", linear_attention},
      {"LessOrEqual", pass_through}, {"Log", pass_through}, {"LogSoftmax", softmax}, {"LpNormalization", lp_normalization}, {"LpPool", lp_pool}, {"MatMul", matmul}, {"MatMulInteger", matmul_integer},
      {"Max", variadic}, {"MaxPool", pool}, {"MaxUnpool", max_unpool}, {"Mean", variadic}, {"MeanVarianceNormalization", mean_variance_normalization}, {"MelWeightMatrix", mel_weight_matrix}, {"Min", variadic}, {"Mish", mish}, {"Mod", mod}, {"Multinomial", random_op},
      {"Mul", binary}, {"Neg", pass_through}, {"NonMaxSuppression", non_max_suppression}, {"NonZero", non_zero}, {"Not", pass_through}, {"OneHot", one_hot},
      {"Or", binary}, {"PRelu", pass_through}, {"Pad", pad}, {"Pow", binary}, {"QLinearConv", qlinear_conv}, {"QLinearMatMul", qlinear_matmul}, {"QuantizeLinear", quantize_linear}, {"RMSNormalization", rms_norm}, {"RNN", recurrent}, {"RandomNormal", random_op}, {"RandomNormalLike", random_op}, {"RandomUniform", random_op}, {"RandomUniformLike", random_op}, {"Range", range},
      {"Reciprocal", pass_through}, {"ReduceL1", reduce}, {"ReduceL2", reduce}, {"ReduceLogSum", reduce},
      {"ReduceLogSumExp", reduce}, {"ReduceMax", reduce}, {"ReduceMean", reduce}, {"ReduceMin", reduce},
      {"ReduceProd", reduce}, {"ReduceSum", reduce}, {"ReduceSumSquare", reduce}, {"Relu", pass_through},
      {"Reshape", reshape}, {"Resize", resize}, {"ReverseSequence", reverse_sequence}, {"RoiAlign", roi_align}, {"RotaryEmbedding", rotary_embedding}, {"Round", pass_through}, {"Scatter", scatter_elements}, {"ScatterElements", scatter_elements}, {"ScatterND", scatter_nd},
      {"Selu", unary_with_defaults}, {"Shape", shape_op}, {"Shrink", shrink}, {"Sigmoid", pass_through}, {"Sign", pass_through},
      {"Sin", pass_through}, {"Sinh", trig_by_formula}, {"Size", size_op}, {"Slice", slice}, {"Softmax", softmax}, {"Softplus", pass_through},
      {"Softsign", pass_through}, {"STFT", stft}, {"SpaceToDepth", depth_space}, {"Split", split}, {"Sqrt", pass_through},
      {"Squeeze", squeeze}, {"Sub", binary}, {"Sum", variadic}, {"SwiGLU", swish}, {"Swish", swish}, {"Tan", pass_through}, {"Tanh", pass_through},
      {"TensorScatter", tensor_scatter},
      {"TfIdfVectorizer", tfidf_vectorizer}, {"ThresholdedRelu", unary_with_defaults}, {"Tile", tile}, {"TopK", top_k}, {"Transpose", transpose}, {"Trilu", trilu},
      {"Unique", unique}, {"Unsqueeze", unsqueeze}, {"Upsample", resize},
      {"Where", where}, {"Xor", binary},
  };
  return table;
}

}  // namespace

std::string unsupported_op_reason(const std::string& op_type) {
  static const std::vector<std::pair<std::vector<std::string>, std::string>> classes = {
      {{"Adagrad", "Adam", "Momentum", "Gradient", "NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"},
       "a training operator: fusetune plans inference graphs"},
      {{"RegexFullMatch", "StringConcat", "StringNormalizer", "StringSplit"},
       "it operates on strings, which kernels do not hold: tokenize before the model"},
      {{"ImageDecoder"}, "it decodes compressed image bytes: decode before the model"},
  };
  for (const auto& [ops, why] : classes) {
    if (std::find(ops.begin(), ops.end(), op_type) != ops.end()) return why;
  }
  return "";
}

bool is_supported_onnx_op(const std::string& op_type) {
  return lowerings().count(op_type) != 0 || is_control_flow(op_type) || is_sequence_op(op_type);
}

void lower_node(NodeLowering& node) {
  auto it = lowerings().find(node.op());
  check(it != lowerings().end(), "op '", node.op(), "' is not supported");
  it->second(node);
  node.check_attributes_read();
}

}  // namespace fusetune::importer
