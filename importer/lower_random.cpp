#include "importer/lower_random.h"

#include <cstring>
#include <numbers>

#include "core/error.h"
#include "core/sha256.h"

namespace fusetune::importer {

namespace {

// The key of this node's draw: its seed (or none) and its ordinal, hashed.
uint64_t draw_key(NodeLowering& L) {
  std::string what = "fusetune random draw ";
  if (L.has_attr("seed")) {
    const float seed = L.attr_f("seed", 0.0f);
    uint32_t bits;
    std::memcpy(&bits, &seed, sizeof bits);
    what += "seed " + std::to_string(bits);
  } else {
    what += "unseeded";
  }
  what += " ordinal " + std::to_string(L.builder().next_draw());
  return std::stoull(sha256_hex(what).substr(0, 16), nullptr, 16);
}

// Uniforms in [0, 1) of `shape`: word `word` of Philox's block at each element under key.
int uniform(NodeLowering& L, const Shape& shape, uint64_t key, int64_t word) {
  Attributes a;
  a.set("shape", shape);
  a.set("key", static_cast<int64_t>(key));
  a.set("word", word);
  return L.emit("RandomUniform", {}, a);
}

int scalar(NodeLowering& L, float v) { return L.constant(Tensor::scalar_float(DType::kF32, v)); }

bool is_float_type(DType t) { return t == DType::kF16 || t == DType::kBF16 || t == DType::kF32 || t == DType::kF64; }

// The output type: the `dtype` attribute, else `fallback`; a float type unless `any` is set.
DType output_type(NodeLowering& L, DType fallback, bool any = false) {
  const DType t = L.has_attr("dtype") ? dtype_from_onnx(static_cast<int>(L.attr_i("dtype", 1))) : fallback;
  check(t != DType::kUndefined, "dtype ", L.attr_i("dtype", 0), " is not a type fusetune holds");
  check(any || is_float_type(t), "the output type ", dtype_name(t), " is not float16, bfloat16, float or double");
  return t;
}

// The shape of the output: a Like op's input's, else the `shape` attribute.
Shape output_shape(NodeLowering& L, bool like) {
  if (like) return L.shape(0);
  check(L.has_attr("shape"), "the required attribute 'shape' is missing");
  const Shape s = L.attr_ints("shape");
  for (int64_t d : s) check(d >= 0, "shape ", shape_str(s), " has a negative extent");
  return s;
}

void uniform_op(NodeLowering& L, bool like) {
  const DType t = output_type(L, like ? L.val(0).dtype : DType::kF32);
  const float low = L.attr_f("low", 0.0f), high = L.attr_f("high", 1.0f);
  check(low <= high, "low ", low, " is above high ", high);
  int y = uniform(L, output_shape(L, like), draw_key(L), 0);
  if (high - low != 1.0f) y = L.emit("Mul", {y, scalar(L, high - low)});
  if (low != 0.0f) y = L.emit("Add", {y, scalar(L, low)});
  L.set_output(0, cast_to(L, y, t));
}

void normal_op(NodeLowering& L, bool like) {
  const DType t = output_type(L, like ? L.val(0).dtype : DType::kF32);
  const float mean = L.attr_f("mean", 0.0f), scale = L.attr_f("scale", 1.0f);
  const Shape shape = output_shape(L, like);
  const uint64_t key = draw_key(L);
  const int u0 = uniform(L, shape, key, 0), u1 = uniform(L, shape, key, 1);
  const int radius = L.emit("Sqrt", {L.emit("Mul", {L.emit("Log", {L.emit("Sub", {scalar(L, 1.0f), u0})}), scalar(L, -2.0f)})});
  const int angle = L.emit("Cos", {L.emit("Mul", {u1, scalar(L, 2.0f * std::numbers::pi_v<float>)})});
  int y = L.emit("Mul", {radius, angle});
  if (scale != 1.0f) y = L.emit("Mul", {y, scalar(L, scale)});
  if (mean != 0.0f) y = L.emit("Add", {y, scalar(L, mean)});
  L.set_output(0, cast_to(L, y, t));
}

void bernoulli(NodeLowering& L) {
  const DType in = L.val(0).dtype;
  check(is_float_type(in), "the probabilities are ", dtype_name(in), ", not a float type");
  const DType t = output_type(L, in, true);
  const int p = cast_to(L, L.input(0), DType::kF32);
  L.set_output(0, cast_to(L, L.emit("Less", {uniform(L, L.shape(0), draw_key(L), 0), p}), t));
}

// Per row, the count of classes whose cumulative probability is at most U: the first class whose
// cumulative probability exceeds U (inverse-CDF sampling), the last where rounding leaves the
// total below U.
void multinomial(NodeLowering& L) {
  const Shape x = L.shape(0);
  check(x.size() == 2, "the input has shape ", shape_str(x), ", not [batch_size, class_size]");
  check(is_float_type(L.val(0).dtype), "the input is ", dtype_name(L.val(0).dtype), ", not a float type");
  const int64_t batch = x[0], classes = x[1], samples = L.attr_i("sample_size", 1);
  check(classes >= 1 && classes <= kMaxMultinomialClasses, "class_size ", classes, " is outside [1, ", kMaxMultinomialClasses,
        "] (the cumulative probabilities are a MatMul by a class_size x class_size triangle)");
  check(samples >= 1, "sample_size ", samples, " is below 1");
  const DType t = output_type(L, DType::kI32, true);
  check(t == DType::kI32 || t == DType::kI64, "dtype ", dtype_name(t), " is not int32 or int64");
  Attributes axis;
  axis.set("axis", int64_t{1});
  const int p = L.emit("Softmax", {cast_to(L, L.input(0), DType::kF32)}, axis);
  Tensor tri(DType::kF32, {classes, classes});  // tri[i][j] = 1 for i <= j: column j sums p[0..j]
  std::vector<float> ones(static_cast<size_t>(classes * classes), 0.0f);
  for (int64_t i = 0; i < classes; ++i) {
    for (int64_t j = i; j < classes; ++j) ones[static_cast<size_t>(i * classes + j)] = 1.0f;
  }
  tri.set_floats(ones);
  const int cdf = L.reshape(L.emit("MatMul", {p, L.constant(std::move(tri))}), {batch, 1, classes});
  const int u = uniform(L, {batch, samples, 1}, draw_key(L), 0);
  const int below = cast_to(L, L.emit("LessOrEqual", {cdf, u}), DType::kI64);
  const int count = reduce_node(L, "ReduceSum", below, {2}, 0);
  const int last = L.constant(Tensor::scalar_int(DType::kI64, classes - 1));
  L.set_output(0, cast_to(L, L.emit("Min", {count, last}), t));
}

}  // namespace

void random_op(NodeLowering& L) {
  const std::string& op = L.op();
  if (op == "RandomUniform" || op == "RandomUniformLike") {
    uniform_op(L, op == "RandomUniformLike");
  } else if (op == "RandomNormal" || op == "RandomNormalLike") {
    normal_op(L, op == "RandomNormalLike");
  } else if (op == "Bernoulli") {
    bernoulli(L);
  } else {
    check(op == "Multinomial", "'", op, "' is not a random operator");
    multinomial(L);
  }
}

}  // namespace fusetune::importer
