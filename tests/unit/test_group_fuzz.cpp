// The random-shape fuzzer of fusion groups: small graphs of the kernel kinds the code generator has
// (element-wise chains with broadcasts and transposed reads, MatMuls with bias and activation on
// float32, float16 and bfloat16, LayerNorm feeding a MatMul, scaled-dot-product attention (some
// with grouped-query heads), mean subtraction, Convs plain, strided and depthwise, an embedding
// Gather with positions and a norm;
// window ops, products of 8-bit integers, updates in place, back-to-back products, gated linear
// units and products long enough for wgmma's TMA form each from a generator of their own),
// on odd extents (rows, channels and sequence lengths that divide no tile) as often as on multiples
// of 8 (so that 16-byte vectors, cp.async chunks and their tails all run). Each graph goes through
// the planner's fusion; each group is lowered with the planner's best generated candidate, one
// drawn at random from its candidates, its best and a random in-place one where it may update in place
// (planner/in_place.h), its best tensor-core ones (mma.sync, wgmma and wgmma's TMA twin), a split-K
// form of a staged MatMul's, of a GEMV's and of a flash attention's, GEMV and flash-attention ones (flash on tensor cores by mma.sync and by wgmma, and not, and on a random key tile and thread count; blocks of several grouped-query heads) and the best one's schedule on a tile of random extents (where the cost model accepts it), and verified on the host
// executor with every check on (backend/verify.h via unit/codegen_check.h), and the module compiled
// with NVRTC. Case i of a run draws its graph from seed + i: FUSETUNE_TEST_SEED=S with
// FUSETUNE_GROUP_FUZZ_CASES=1 replays case S alone. CI runs a few cases per run and every seed kept
// in tests/fuzz/group_seeds.txt (the corpus: each seed a campaign once found failing, kept after
// its fix); bench/fuzz_groups.sh runs a campaign for as long as asked.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <set>

#include "importer/pair_gated_products.h"
#include "planner/attention.h"
#include "planner/fusion.h"
#include "planner/in_place.h"
#include "planner/tiling.h"
#include "unit/codegen_check.h"
#include "unit/graph_helpers.h"

namespace fusetune {
namespace {

using testing::add_input;
using testing::add_op;
using testing::attrs;
using testing::random_constant;

struct FuzzCase {
  Graph g;
  std::string what;
  // Fuse with a cost function that keeps every cost-checked merge (the rules that merge only
  // under one: back-to-back products), where the planner's model would decide.
  bool keep_merges = false;
};

class Draw {
 public:
  explicit Draw(unsigned seed) : rng_(seed) {}
  int64_t in(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng_); }
  bool chance(double p) { return std::bernoulli_distribution(p)(rng_); }
  // An extent: a multiple of 8 (whole 16-byte vectors of 16-bit values) or any value up to `hi`.
  int64_t extent(int64_t hi) { return chance(0.4) ? 8 * in(1, std::max<int64_t>(1, hi / 8)) : in(1, hi); }
  DType dtype(bool float32_only = false) {
    if (float32_only) return DType::kF32;
    const DType all[] = {DType::kF32, DType::kF16, DType::kBF16};
    return all[in(0, 2)];
  }
  const char* activation() {
    const char* all[] = {"Relu", "Sigmoid", "Tanh", "Abs"};
    return all[in(0, 3)];
  }
  uint32_t seed() { return static_cast<uint32_t>(rng_()); }
  std::mt19937& rng() { return rng_; }

 private:
  std::mt19937 rng_;
};

std::string shape_text(const Shape& s) {
  std::string t;
  for (int64_t d : s) t += (t.empty() ? "" : "x") + std::to_string(d);
  return t;
}

FuzzCase random_case(unsigned seed) {
  Draw d(seed);
  FuzzCase c;
  Graph& g = c.g;
  const DType dt = d.dtype();
  const std::string type(dtype_name(dt));
  switch (d.in(0, 6)) {
    case 0: {  // element-wise chain with a broadcast operand, maybe read transposed
      const Shape s = {d.in(1, 3), d.extent(40), d.extent(48)};
      int x = add_input(g, "x", dt, s);
      const bool transposed = d.chance(0.3);
      if (transposed) x = add_op(g, "Transpose", {add_input(g, "xt", dt, {s[0], s[2], s[1]})}, attrs({{"perm", std::vector<int64_t>{0, 2, 1}}}));
      const int64_t kind = d.in(0, 2);
      const Shape ys = kind == 0 ? s : (kind == 1 ? Shape{s[2]} : Shape{s[0], s[1], 1});
      const char* ops[] = {"Add", "Mul", "Sub"};
      const int y = add_op(g, ops[d.in(0, 2)], {x, add_input(g, "y", dt, ys)});
      add_op(g, d.activation(), {y});
      c.what = "element-wise " + type + " " + shape_text(s) + (transposed ? " (transposed read)" : "") + " with " + shape_text(ys);
      break;
    }
    case 1: {  // MatMul + bias + activation, maybe batched
      const int64_t m = d.extent(80), k = d.extent(96), n = d.extent(72), b = d.chance(0.3) ? d.in(2, 3) : 0;
      const Shape as = b ? Shape{b, m, k} : Shape{m, k};
      const int mm = add_op(g, "MatMul", {add_input(g, "a", dt, as), random_constant(g, "w", dt, {k, n}, d.seed())});
      add_op(g, d.activation(), {add_op(g, "Add", {mm, random_constant(g, "bias", dt, {n}, d.seed())})});
      c.what = "MatMul " + type + " " + shape_text(as) + " x " + std::to_string(k) + "x" + std::to_string(n) + " + bias";
      break;
    }
    case 2: {  // LayerNorm, then a MatMul
      const int64_t rows = d.extent(40), cols = d.extent(96), n = d.extent(64);
      const int ln = add_op(g, "LayerNormalization",
                            {add_input(g, "x", dt, {1, rows, cols}), random_constant(g, "gamma", dt, {cols}, d.seed()),
                             random_constant(g, "beta", dt, {cols}, d.seed())},
                            attrs({{"axis", int64_t{-1}}, {"epsilon", 1e-5f}}));
      add_op(g, "MatMul", {ln, random_constant(g, "w", dt, {cols, n}, d.seed())});
      c.what = "LayerNorm+MatMul " + type + " 1x" + std::to_string(rows) + "x" + std::to_string(cols) + " x " + std::to_string(n);
      break;
    }
    case 3: {  // attention: softmax(q k^T * scale) v
      const int64_t kv = d.in(1, 3), s = d.extent(48), dh = d.extent(40);
      // The scale as attention has it, 1 / sqrt(head), times a factor from 0.5 to 1.5: the
      // reference rounds the scores to the model's type before the softmax where the kernels keep
      // them in float32, and scores near 10 (a scale near 1.5 on a head of 16) move the reference's
      // own bfloat16 probabilities by several percent (case 3853419892 before this scale: one output
      // of 768 off, -0.268 from the kernel where the reference gave -0.19).
      const float factor = 0.5f + static_cast<float>(d.seed() % 1001) / 1000.0f;
      // An additive mask over the keys; a causal one; grouped-query heads, each key-value head
      // repeated as exporters do (Reshape, Expand, Reshape). Drawn after the shapes, in the order
      // earlier corpus seeds keep.
      const bool mask = d.chance(0.4), causal = d.chance(0.4);
      const int64_t group = d.chance(0.4) ? d.in(2, 4) : 1, h = kv * group;
      const auto repeat = [&](int x) {
        if (group == 1) return x;
        x = add_op(g, "Reshape", {x}, attrs({{"shape", std::vector<int64_t>{kv, 1, s, dh}}}));
        x = add_op(g, "Expand", {x}, attrs({{"shape", std::vector<int64_t>{kv, group, s, dh}}}));
        return add_op(g, "Reshape", {x}, attrs({{"shape", std::vector<int64_t>{h, s, dh}}}));
      };
      const int kt = add_op(g, "Transpose", {repeat(add_input(g, "k", dt, {kv, s, dh}))}, attrs({{"perm", std::vector<int64_t>{0, 2, 1}}}));
      const std::vector<float> scale_value = {factor / std::sqrt(static_cast<float>(dh))};
      const int scale = g.add_constant("scale", Tensor::from_floats(dt, {1}, scale_value));
      int scores = add_op(g, "Mul", {add_op(g, "MatMul", {add_input(g, "q", dt, {h, s, dh}), kt}), scale});
      c.what = "attention " + type + " heads " + std::to_string(h) + ", sequence " + std::to_string(s) + ", head " + std::to_string(dh);
      if (group > 1) c.what += ", " + std::to_string(kv) + " key-value heads";
      if (mask) {
        scores = add_op(g, "Add", {scores, add_input(g, "mask", dt, {1, 1, s})});
        c.what += ", mask";
      }
      if (causal) {
        std::vector<int64_t> allowed;
        for (int64_t i = 0; i < s; ++i) {
          for (int64_t j = 0; j < s; ++j) allowed.push_back(j <= i ? 1 : 0);
        }
        scores = add_op(g, "Where", {g.add_constant("causal", Tensor::from_ints(DType::kBool, {s, s}, allowed)), scores,
                                     g.add_constant("minus_inf", Tensor::scalar_float(dt, -1e30f))});
        c.what += ", causal";
      }
      const int p = add_op(g, "Softmax", {scores}, attrs({{"axis", int64_t{-1}}}));
      add_op(g, "MatMul", {p, repeat(add_input(g, "v", dt, {kv, s, dh}))});
      break;
    }
    case 4: {  // x - mean(x) along the last axis, scaled
      const Shape s = {d.extent(24), d.extent(64)};
      const int x = add_input(g, "x", dt, s);
      const int mean = add_op(g, "ReduceMean", {x}, attrs({{"axes", std::vector<int64_t>{1}}, {"keepdims", int64_t{1}}}));
      add_op(g, "Mul", {add_op(g, "Sub", {x, mean}), random_constant(g, "gain", dt, {s[1]}, d.seed())});
      c.what = "mean subtraction " + type + " " + shape_text(s);
      break;
    }
    case 5: {  // Conv (+ bias, Relu): plain, strided or depthwise
      const int64_t ch = d.in(1, 12), hw = d.in(3, 14), kern = d.chance(0.5) ? 3 : 1, stride = d.in(1, 2);
      const bool depthwise = d.chance(0.4);
      const int64_t out = depthwise ? ch : d.in(1, 12);
      const int64_t pad = kern / 2;
      const int conv = add_op(g, "Conv",
                              {add_input(g, "img", DType::kF32, {1, ch, hw, hw + 1}),
                               random_constant(g, "cw", DType::kF32, {out, depthwise ? 1 : ch, kern, kern}, d.seed()),
                               random_constant(g, "cb", DType::kF32, {out}, d.seed())},
                              attrs({{"group", depthwise ? ch : int64_t{1}}, {"strides", std::vector<int64_t>{stride, stride}},
                                     {"dilations", std::vector<int64_t>{1, 1}}, {"pads", std::vector<int64_t>{pad, pad, pad, pad}}}));
      add_op(g, "Relu", {conv});
      c.what = std::string(depthwise ? "depthwise " : "") + "Conv float32 " + std::to_string(ch) + "->" + std::to_string(out) +
               " channels, " + std::to_string(hw) + "x" + std::to_string(hw + 1) + ", kernel " + std::to_string(kern) +
               ", stride " + std::to_string(stride);
      break;
    }
    default: {  // embedding: Gather rows, add positions, LayerNorm
      const int64_t vocab = d.in(2, 9), seq = d.extent(32), dim = d.extent(64);
      const int rows = add_op(g, "Gather", {random_constant(g, "table", dt, {vocab, dim}, d.seed()), add_input(g, "ids", DType::kI64, {1, seq})},
                              attrs({{"axis", int64_t{0}}}));
      const int sum = add_op(g, "Add", {rows, random_constant(g, "pos", dt, {1, seq, dim}, d.seed())});
      add_op(g, "LayerNormalization",
             {sum, random_constant(g, "gamma", dt, {dim}, d.seed()), random_constant(g, "beta", dt, {dim}, d.seed())},
             attrs({{"axis", int64_t{-1}}, {"epsilon", 1e-5f}}));
      c.what = "embedding " + type + " vocabulary " + std::to_string(vocab) + ", sequence " + std::to_string(seq) + ", width " + std::to_string(dim);
      break;
    }
  }
  g.outputs().push_back(g.nodes().back().outputs[0]);
  return c;
}

// Window ops on random shapes, a generator of their own (the kinds above keep their seeds): a
// Conv whose kernel is 1x1, 3x3 or 5x5, strided and dilated, with groups anywhere from one to
// depthwise, channel counts up to 72 and maps up to 41 on a side (so that channel and pixel tiles
// divide nothing), sometimes fed by a Concat of two or three inputs (detectors' C2f blocks) and
// followed by SiLU or a residual; MaxPool and AveragePool with pads, strides, dilations and
// ceil_mode; Resize, nearest and linear, by factors that leave odd sizes. float32.
FuzzCase random_window_case(unsigned seed) {
  Draw d(seed);
  FuzzCase c;
  Graph& g = c.g;
  const int64_t batch = d.in(1, 2), h = d.in(3, 41), w = d.in(3, 41);
  const auto map_text = [&](int64_t ch) {
    return std::to_string(batch) + "x" + std::to_string(ch) + "x" + std::to_string(h) + "x" + std::to_string(w);
  };
  switch (d.in(0, 2)) {
    case 0: {
      const int64_t k = std::array<int64_t, 3>{1, 3, 5}[static_cast<size_t>(d.in(0, 2))];
      const int64_t stride = d.in(1, 2), dilation = k > 1 && d.chance(0.3) ? 2 : 1;
      const int64_t parts = d.chance(0.3) ? d.in(2, 3) : 1, part_ch = d.in(1, 24), ch = parts * part_ch;
      // Groups: 1, depthwise, or a divisor of the channels between.
      std::vector<int64_t> divisors;
      for (int64_t q = 1; q <= ch; ++q) {
        if (ch % q == 0) divisors.push_back(q);
      }
      const int64_t groups = divisors[static_cast<size_t>(d.in(0, static_cast<int64_t>(divisors.size()) - 1))];
      const int64_t out = groups * d.in(1, std::max<int64_t>(1, 72 / groups));
      int64_t pad = d.chance(0.7) ? dilation * (k / 2) : d.in(0, k - 1);
      const int64_t window = dilation * (k - 1) + 1;  // an output needs the padded map to hold one window
      if (std::min(h, w) + 2 * pad < window) pad = (window - std::min(h, w) + 1) / 2;
      int x = -1;
      if (parts > 1) {
        std::vector<int> ins;
        for (int64_t q = 0; q < parts; ++q) ins.push_back(add_input(g, "part" + std::to_string(q), DType::kF32, {batch, part_ch, h, w}));
        x = add_op(g, "Concat", ins, attrs({{"axis", int64_t{1}}}));
      } else {
        x = add_input(g, "x", DType::kF32, {batch, ch, h, w});
      }
      int y = add_op(g, "Conv",
                     {x, random_constant(g, "cw", DType::kF32, {out, ch / groups, k, k}, d.seed()),
                      random_constant(g, "cb", DType::kF32, {out}, d.seed())},
                     attrs({{"group", groups}, {"strides", std::vector<int64_t>{stride, stride}},
                            {"dilations", std::vector<int64_t>{dilation, dilation}}, {"pads", std::vector<int64_t>{pad, pad, pad, pad}}}));
      c.what = "Conv " + map_text(ch) + (parts > 1 ? " (a Concat of " + std::to_string(parts) + ")" : "") + " -> " +
               std::to_string(out) + " channels, kernel " + std::to_string(k) + ", stride " + std::to_string(stride) +
               ", dilation " + std::to_string(dilation) + ", pad " + std::to_string(pad) + ", groups " + std::to_string(groups);
      if (d.chance(0.5)) {
        y = add_op(g, "Mul", {y, add_op(g, "Sigmoid", {y})});
        c.what += ", SiLU";
      }
      break;
    }
    case 1: {
      const int64_t ch = d.in(1, 40), k = d.in(2, 4), stride = d.in(1, 3), dilation = d.chance(0.2) ? 2 : 1;
      int64_t pad = d.in(0, k - 1);
      const int64_t ceil_mode = d.chance(0.3) ? 1 : 0;
      const bool max = d.chance(0.5);
      const int64_t window = (max ? dilation : 1) * (k - 1) + 1;  // pads stay below the window
      if (std::min(h, w) + 2 * pad < window) pad = std::min(window - 1, (window - std::min(h, w) + 1) / 2);
      Attributes a = attrs({{"kernel_shape", std::vector<int64_t>{k, k}}, {"strides", std::vector<int64_t>{stride, stride}},
                            {"pads", std::vector<int64_t>{pad, pad, pad, pad}}, {"ceil_mode", ceil_mode}});
      if (max) {
        a.set("dilations", std::vector<int64_t>{dilation, dilation});
      } else {
        a.set("count_include_pad", d.chance(0.5) ? int64_t{1} : int64_t{0});
      }
      add_op(g, max ? "MaxPool" : "AveragePool", {add_input(g, "x", DType::kF32, {batch, ch, h, w})}, a);
      c.what = std::string(max ? "MaxPool " : "AveragePool ") + map_text(ch) + ", kernel " + std::to_string(k) + ", stride " +
               std::to_string(stride) + (max ? ", dilation " + std::to_string(dilation) : "") + ", pad " + std::to_string(pad) +
               (ceil_mode ? ", ceil_mode" : "");
      break;
    }
    default: {
      const int64_t ch = d.in(1, 24);
      const bool linear = d.chance(0.5);
      const float fh = static_cast<float>(d.in(2, 7)) / 2.0f, fw = static_cast<float>(d.in(2, 7)) / 2.0f;
      const int64_t oh = static_cast<int64_t>(std::floor(static_cast<float>(h) * fh)),
                    ow = static_cast<int64_t>(std::floor(static_cast<float>(w) * fw));
      const char* modes[] = {"half_pixel", "align_corners", "asymmetric", "pytorch_half_pixel"};
      const std::string coord = modes[d.in(0, 3)];
      add_op(g, "Resize", {add_input(g, "x", DType::kF32, {batch, ch, h, w})},
             attrs({{"sizes", std::vector<int64_t>{batch, ch, oh, ow}}, {"scales", std::vector<float>{1.0f, 1.0f, fh, fw}},
                    {"mode", std::string(linear ? "linear" : "nearest")}, {"coordinate_transformation_mode", coord}}));
      c.what = std::string("Resize ") + (linear ? "linear " : "nearest ") + map_text(ch) + " -> " + std::to_string(oh) + "x" +
               std::to_string(ow) + ", " + coord;
      break;
    }
  }
  g.outputs().push_back(g.nodes().back().outputs[0]);
  return c;
}

// Products of 8-bit integers (the dp4a form, codegen/stages/dp4a_matmul.h), a generator of their
// own: A int8 or uint8, an input or quantized in the group from float32 (Round, clamped, Cast), maybe
// batched; B of either signedness, an input or a constant; extents that divide no tile, word or quad;
// the int32 product left as it is, or less a per-column correction and dequantized to float32 by a
// per-column scale (MatMulInteger's and a dynamic quantization's epilogue), maybe through a Relu.
FuzzCase random_integer_case(unsigned seed) {
  Draw d(seed);
  FuzzCase c;
  Graph& g = c.g;
  const DType ta = d.chance(0.5) ? DType::kI8 : DType::kU8, tb = d.chance(0.5) ? DType::kI8 : DType::kU8;
  const int64_t m = d.extent(80), k = d.extent(160), n = d.extent(72), b = d.chance(0.3) ? d.in(2, 3) : 0;
  const Shape as = b ? Shape{b, m, k} : Shape{m, k};
  const auto ints = [&](DType t, const Shape& s) {
    std::vector<int64_t> v(static_cast<size_t>(numel(s)));
    for (auto& x : v) x = t == DType::kI8 ? d.in(-128, 127) : d.in(0, 255);
    return Tensor::from_ints(t, s, v);
  };
  int a = -1;
  const bool quantized = d.chance(0.4);
  if (quantized) {
    const auto [lo, hi] = ta == DType::kI8 ? std::pair<float, float>{-128.0f, 127.0f} : std::pair<float, float>{0.0f, 255.0f};
    const int scaled = add_op(g, "Mul", {add_input(g, "x", DType::kF32, as), g.add_constant("inv_scale", Tensor::scalar_float(DType::kF32, 90.0f))});
    const int rounded = add_op(g, "Round", {add_op(g, "Add", {scaled, g.add_constant("zp", Tensor::scalar_float(DType::kF32, ta == DType::kU8 ? 128.0f : 0.0f))})});
    const int clamped = add_op(g, "Min", {add_op(g, "Max", {rounded, g.add_constant("lo", Tensor::scalar_float(DType::kF32, lo))}),
                                          g.add_constant("hi", Tensor::scalar_float(DType::kF32, hi))});
    a = add_op(g, "Cast", {clamped}, attrs({{"to", static_cast<int64_t>(dtype_to_onnx(ta))}}));
  } else {
    a = add_input(g, "a", ta, as);
  }
  const bool b_input = d.chance(0.4);
  const int w = b_input ? add_input(g, "b", tb, {k, n}) : g.add_constant("w", ints(tb, {k, n}));
  int y = add_op(g, "MatMul", {a, w});
  c.what = "MatMul " + std::string(dtype_name(ta)) + (quantized ? " (quantized in the group)" : "") + " " + shape_text(as) + " x " +
           std::string(dtype_name(tb)) + (b_input ? " input " : " constant ") + std::to_string(k) + "x" + std::to_string(n);
  if (d.chance(0.6)) {
    std::vector<int64_t> correction(static_cast<size_t>(n));
    std::vector<float> scale(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j) {
      correction[static_cast<size_t>(j)] = d.in(-20000, 20000);
      scale[static_cast<size_t>(j)] = static_cast<float>(d.in(1, 100)) * 1e-5f;
    }
    y = add_op(g, "Sub", {y, g.add_constant("correction", Tensor::from_ints(DType::kI32, {n}, correction))});
    y = add_op(g, "Mul", {add_op(g, "Cast", {y}, attrs({{"to", static_cast<int64_t>(dtype_to_onnx(DType::kF32))}})),
                          g.add_constant("scale", Tensor::from_floats(DType::kF32, {n}, scale))});
    c.what += ", dequantized";
    if (d.chance(0.5)) {
      y = add_op(g, "Relu", {y});
      c.what += ", Relu";
    }
  }
  g.outputs().push_back(y);
  return c;
}

// A ScatterND that may update its data in place: data (Neg of an input, float32, float16, bfloat16
// or int64, rank 1 to 4) also read before the update (its maximum added to the updates, so the
// data's producer stays a group of its own), tuples of depth 1 to rank at distinct slots (some
// written negative), a random reduction.
FuzzCase random_update_case(unsigned seed) {
  Draw d(seed);
  FuzzCase c;
  Graph& g = c.g;
  const DType dt = d.chance(0.25) ? DType::kI64 : d.dtype();
  const int64_t rank = d.in(1, 4);
  Shape shape;
  for (int64_t a = 0; a < rank; ++a) shape.push_back(d.extent(rank > 2 ? 12 : 40));
  const int64_t depth = d.in(1, rank);
  int64_t slots = 1;
  for (int64_t a = 0; a < depth; ++a) slots *= shape[static_cast<size_t>(a)];
  const int64_t tuples = d.in(1, std::min<int64_t>(slots, 12));
  std::set<int64_t> taken;
  std::vector<int64_t> ids;
  while (static_cast<int64_t>(taken.size()) < tuples) {
    int64_t slot = d.in(0, slots - 1);
    if (!taken.insert(slot).second) continue;
    std::vector<int64_t> tuple(static_cast<size_t>(depth));
    for (int64_t a = depth; a-- > 0;) {
      const int64_t extent = shape[static_cast<size_t>(a)];
      tuple[static_cast<size_t>(a)] = slot % extent - (d.chance(0.3) ? extent : 0);
      slot /= extent;
    }
    ids.insert(ids.end(), tuple.begin(), tuple.end());
  }
  Shape updates = {tuples};
  updates.insert(updates.end(), shape.begin() + depth, shape.end());
  const int data = add_op(g, "Neg", {add_input(g, "x", dt, shape)});
  std::vector<int64_t> all_axes(static_cast<size_t>(rank));
  for (int64_t a = 0; a < rank; ++a) all_axes[static_cast<size_t>(a)] = a;
  const int most = add_op(g, "ReduceMax", {data}, attrs({{"axes", all_axes}, {"keepdims", int64_t{0}}}));
  const int u = add_op(g, "Add", {add_input(g, "u", dt, updates), most});
  const char* reductions[] = {"none", "add", "mul", "max", "min"};
  const std::string reduction = reductions[d.in(0, 4)];
  Attributes a;
  if (reduction != "none") a.set("reduction", reduction);
  g.outputs().push_back(add_op(g, "ScatterND", {data, g.add_constant("ids", Tensor::from_ints(DType::kI64, {tuples, depth}, ids)), u}, a));
  c.what = "ScatterND " + std::string(dtype_name(dt)) + " " + shape_text(shape) + ", " + std::to_string(tuples) + " tuples of depth " +
           std::to_string(depth) + ", reduction " + reduction;
  return c;
}

// Back-to-back products on random shapes, a generator of their own: a product of rows (M up to
// 40, K odd or not) whose N (up to 96) is the next product's K, through an activation and, as in
// a GRU step without linear_before_reset, a gate times the first product's left operand (N = K
// then); the second product's bias and activation after. float32, float16 or bfloat16, each
// product's weights of deviation 1 / sqrt(K), so that its sums stay near 1: the reference rounds
// the first product to the type where the kernel keeps float32, and on sums of several units
// bfloat16's rounding, carried through the second product, moves the reference's own outputs by
// more than the type's tolerance. Fused with every cost-checked merge kept, so the two products
// share a group.
FuzzCase random_back_to_back_case(unsigned seed) {
  Draw d(seed);
  FuzzCase c;
  c.keep_merges = true;
  Graph& g = c.g;
  const DType dt = d.dtype();
  const bool gated = d.chance(0.5);
  const int64_t m = d.in(1, 40), k = d.extent(64), n1 = gated ? k : d.extent(96), n2 = d.extent(72);
  const auto weights = [&](const std::string& name, int64_t rows, int64_t cols) {
    std::normal_distribution<float> normal(0.0f, 1.0f / std::sqrt(static_cast<float>(rows)));
    std::vector<float> v(static_cast<size_t>(rows * cols));
    for (float& e : v) e = normal(d.rng());
    return g.add_constant(name, Tensor::from_floats(dt, {rows, cols}, v));
  };
  const int x = add_input(g, "x", dt, {m, k});
  int y = add_op(g, "MatMul", {x, weights("w1", k, n1)}, {}, "first");
  y = add_op(g, d.activation(), {add_op(g, "Add", {y, random_constant(g, "b1", dt, {n1}, d.seed())})});
  if (gated) y = add_op(g, "Mul", {y, x});
  y = add_op(g, "MatMul", {y, weights("w2", n1, n2)}, {}, "second");
  g.outputs().push_back(add_op(g, d.activation(), {add_op(g, "Add", {y, random_constant(g, "b2", dt, {n2}, d.seed())})}));
  c.what = "MatMul " + std::string(dtype_name(dt)) + " " + std::to_string(m) + "x" + std::to_string(k) + " x " + std::to_string(n1) +
           (gated ? ", gated by its input" : "") + ", then x " + std::to_string(n2);
  return c;
}

// A gated linear unit on random shapes, a generator of its own: act(x Wg) x (x Wu), SiLU (g x
// Sigmoid(g)) or GELU by a sigmoid (g x Sigmoid(1.702 g)), over M rows (up to 8: the GEMV forms;
// beyond, tensor cores), maybe RMS-normalized first, its two projections made one product of
// interleaved weights by importer::pair_gated_products, as the import makes every such unit.
FuzzCase random_gated_unit_case(unsigned seed) {
  Draw d(seed);
  FuzzCase c;
  Graph& g = c.g;
  const DType dt = d.dtype();
  const bool silu = d.chance(0.5), norm = d.chance(0.5);
  const int64_t m = d.chance(0.5) ? d.in(1, 8) : d.in(9, 40), k = d.extent(96), n = d.extent(72);
  const auto weights = [&](const std::string& name) {
    std::normal_distribution<float> normal(0.0f, 1.0f / std::sqrt(static_cast<float>(k)));
    std::vector<float> v(static_cast<size_t>(k * n));
    for (float& e : v) e = normal(d.rng());
    return g.add_constant(name, Tensor::from_floats(dt, {k, n}, v));
  };
  int x = add_input(g, "x", dt, {m, k});
  if (norm) {
    const int mean = add_op(g, "ReduceMean", {add_op(g, "Mul", {x, x})}, attrs({{"axes", std::vector<int64_t>{1}}, {"keepdims", int64_t{1}}}));
    const int rms = add_op(g, "Sqrt", {add_op(g, "Add", {mean, g.add_constant("eps", Tensor::scalar_float(dt, 1e-3f))})});
    x = add_op(g, "Div", {x, rms});
  }
  const int gate = add_op(g, "MatMul", {x, weights("wg")}, {}, "gate");
  const int up = add_op(g, "MatMul", {x, weights("wu")}, {}, "up");
  const int s = add_op(g, "Sigmoid", {silu ? gate : add_op(g, "Mul", {gate, g.add_constant("k", Tensor::scalar_float(dt, 1.702f))})});
  g.outputs().push_back(add_op(g, "Mul", {add_op(g, "Mul", {gate, s}), up}));
  const int pairs = importer::pair_gated_products(g);
  c.what = "gated unit " + std::string(dtype_name(dt)) + (silu ? " SiLU" : " GELU") + (norm ? ", RMS-normalized" : "") + ", " +
           std::to_string(m) + "x" + std::to_string(k) + " x 2 x " + std::to_string(n) + ", " + std::to_string(pairs) + " pair";
  return c;
}

// A 16-bit product long enough for the TMA form (steps of 64 through its ring, often more steps
// than slots) with a bias and an activation, maybe a batch of A over one B: rows of whole 16-byte
// units (the form reads operands as laid out), M any extent, K and N multiples of 8 from 64 on.
FuzzCase random_tma_case(unsigned seed) {
  Draw d(seed);
  FuzzCase c;
  Graph& g = c.g;
  const DType dt = d.chance(0.5) ? DType::kF16 : DType::kBF16;
  const int64_t batch = d.chance(0.3) ? d.in(2, 3) : 0, m = d.in(1, 200), k = 8 * d.in(8, 80), n = 8 * d.in(8, 40);
  const Shape a = batch > 0 ? Shape{batch, m, k} : Shape{m, k};
  std::normal_distribution<float> normal(0.0f, 1.0f / std::sqrt(static_cast<float>(k)));
  std::vector<float> w(static_cast<size_t>(k * n)), bias(static_cast<size_t>(n));
  for (float& e : w) e = normal(d.rng());
  for (float& e : bias) e = normal(d.rng());
  const char* act = d.activation();
  int x = add_op(g, "MatMul", {add_input(g, "a", dt, a), g.add_constant("w", Tensor::from_floats(dt, {k, n}, w))});
  x = add_op(g, "Add", {x, g.add_constant("bias", Tensor::from_floats(dt, {n}, bias))});
  g.outputs().push_back(add_op(g, act, {x}));
  c.what = "TMA-sized product " + std::string(dtype_name(dt)) + " " + shape_text(a) + " x " + std::to_string(k) + "x" + std::to_string(n) +
           " + bias, " + act;
  return c;
}

// Every group of the case's fusion plan, each with the planner's best generated candidate, one
// drawn from its generated candidates, its best tensor-core, resident-A, B-copied-ahead, GEMV and flash ones (and flash
// blocks of several grouped-query heads): lowered,
// verified on the host and compiled (check_groups).
void check_case(unsigned seed, const FuzzCase& c) {
  std::printf("group fuzz case %u: %s\n", seed, c.what.c_str());
  planner::FusionOptions fusion;
  if (c.keep_merges) fusion.cost = [](const std::vector<int>&) { return 1.0; };
  const planner::FusionPlan plan = planner::fuse(c.g, fusion);
  std::mt19937 pick(seed);
  std::vector<planner::FusionGroup> groups;
  std::vector<planner::TileConfig> configs;
  for (const planner::FusionGroup& fg : plan.groups) {
    std::vector<planner::TileConfig> generated;
    for (const planner::Candidate& cand : planner::tile_candidates(c.g, fg, planner::find_device("h100"), {64, 2.0})) {
      if (cand.config.library.empty()) generated.push_back(cand.config);
    }
    ASSERT_FALSE(generated.empty()) << "case " << seed << " (" << c.what << "): no generated candidate for " << fg.pattern;
    std::vector<planner::TileConfig> chosen = {generated.front(),
                                               generated[std::uniform_int_distribution<size_t>(0, generated.size() - 1)(pick)]};
    if (planner::InPlaceUpdates(c.g).eligible(fg)) {
      const std::vector<planner::Candidate> in_place = planner::in_place_candidates(c.g, fg, planner::find_device("h100"), {});
      chosen.push_back(in_place.front().config);
      chosen.push_back(in_place[std::uniform_int_distribution<size_t>(0, in_place.size() - 1)(pick)].config);
    }
    for (const planner::TileConfig& cfg : generated) {  // the best tensor-core candidate by mma.sync
      if (cfg.mma && !cfg.wgmma) {
        chosen.push_back(cfg);
        break;
      }
    }
    // The best wgmma (and TMA), GEMV and flash-attention candidates (flash on tensor cores and not), however
    // they rank (on these small shapes rarely among the best 64), the SIMT flash one also with a
    // random key tile and thread count; a split-K form (below).
    bool gemv = false, flash = false, tensor_flash = false, wgmma_flash = false, wgmma = false, split = false, flash_split = false;
    bool tma[2] = {false, false};  // a TMA twin taken, unsplit and split
    bool folded[2] = {false, false};  // a flash block of several grouped-query heads taken, SIMT and mma.sync
    bool resident = false;            // a product whose A is its normalization's rows (planner::resident_a) taken
    bool ahead = false;               // a product whose B copies start before its group's first stage taken
    const auto resident_a = [&](const planner::TileConfig& cfg) {
      return std::any_of(fg.nodes.begin(), fg.nodes.end(), [&](int n) {
        const Node& node = c.g.nodes()[static_cast<size_t>(n)];
        return node.op == "MatMul" && planner::resident_a(c.g, fg, node, cfg);
      });
    };
    for (const planner::Candidate& cand : planner::tile_candidates(c.g, fg, planner::find_device("h100"), {1 << 20, 2.0})) {
      if (!resident && resident_a(cand.config)) {
        chosen.push_back(cand.config);
        std::printf("  resident A: %s\n", cand.config.str().c_str());
        resident = true;
      }
      // A staged product after another stage, its ring's first B copies issued before the group's
      // first stage (codegen's AnchorStage::ahead_of_stages; the model hides their latency).
      if (!ahead && cand.cost.fills_ahead > 0) {
        chosen.push_back(cand.config);
        std::printf("  B copied ahead: %s\n", cand.config.str().c_str());
        ahead = true;
      }
      // Split-K: offered for kernels longer than a launch, which these small shapes rarely are;
      // so the first staged MatMul candidate with 2 to 5 splits, where the cost model accepts it.
      if (cand.config.reduce_step > 0 && !cand.config.gemv && !cand.config.flash && cand.config.library.empty() && !split) {
        planner::TileConfig splitk = cand.config;
        splitk.split_k = std::uniform_int_distribution<int>(2, 5)(pick);
        if (planner::evaluate_tile(c.g, fg, planner::find_device("h100"), splitk).valid) {
          chosen.push_back(splitk);
          split = true;
          std::printf("  split-K: %s\n", splitk.str().c_str());
        }
      }
      // Flash attention's key tiles split likewise (flash-decoding), on tensor cores or not: the
      // tiles made small enough that there are as many as the splits (16 keys on tensor cores).
      if (cand.config.flash && !flash_split) {
        planner::TileConfig splitk = cand.config;
        splitk.split_k = std::uniform_int_distribution<int>(2, 5)(pick);
        const int64_t keys = planner::match_attention(c.g, fg)->keys;
        splitk.reduce_step = std::min(splitk.reduce_step, std::max<int64_t>(splitk.mma ? 16 : 1, keys / splitk.split_k));
        if (planner::evaluate_tile(c.g, fg, planner::find_device("h100"), splitk).valid) {
          chosen.push_back(splitk);
          std::printf("  split keys: %s\n", splitk.str().c_str());
          flash_split = true;
        }
      }
      if (cand.config.wgmma && !cand.config.flash && !cand.config.tma && !wgmma) {
        chosen.push_back(cand.config);
        wgmma = true;
      }
      // The first TMA twins (they rank after their twins: tensor copies, slots handed back by
      // mbarriers), one whose block walks all of K and one split; the unsplit one also
      // warp-specialized (a producer warpgroup issues the copies; the planner offers that twin
      // for tiles of one block an SM, rare on these shapes), where the cost model accepts it.
      if (cand.config.tma && !cand.config.ws && !tma[cand.config.split_k > 1]) {
        chosen.push_back(cand.config);
        std::printf("  TMA: %s\n", cand.config.str().c_str());
        tma[cand.config.split_k > 1] = true;
        planner::TileConfig ws = cand.config;
        ws.ws = true;
        if (planner::evaluate_tile(c.g, fg, planner::find_device("h100"), ws).valid) {
          chosen.push_back(ws);
          std::printf("  warp-specialized TMA: %s\n", ws.str().c_str());
        }
      }
      if (cand.config.gemv && !gemv) {
        chosen.push_back(cand.config);
        // And its steps split over 2 to 5 blocks, in the longest step (the candidate's, or 64 down
        // to 4) that leaves a step a split, where the cost model accepts it.
        planner::TileConfig splitk = cand.config;
        splitk.split_k = std::uniform_int_distribution<int>(2, 5)(pick);
        for (int64_t step : {cand.config.reduce_step, int64_t{64}, int64_t{32}, int64_t{16}, int64_t{8}, int64_t{4}}) {
          splitk.reduce_step = std::min(step, cand.config.reduce_step);
          if (planner::evaluate_tile(c.g, fg, planner::find_device("h100"), splitk).valid) {
            chosen.push_back(splitk);
            std::printf("  split GEMV: %s\n", splitk.str().c_str());
            break;
          }
        }
        gemv = true;
      }
      if (cand.config.flash && cand.config.mma && !cand.config.wgmma && !tensor_flash) {
        chosen.push_back(cand.config);
        tensor_flash = true;
      }
      // Grouped-query heads folded into a flash block's rows (planner::head_fold; the attention
      // case's root is its output, [heads, sequence, head]: a tile of more than one head), the
      // first SIMT and the first mma.sync one.
      if (cand.config.flash && !cand.config.wgmma && cand.config.tile.size() == 3 && cand.config.tile[0] > 1 &&
          !folded[cand.config.mma]) {
        chosen.push_back(cand.config);
        std::printf("  heads folded: %s\n", cand.config.str().c_str());
        folded[cand.config.mma] = true;
      }
      if (cand.config.flash && cand.config.wgmma && !wgmma_flash) {
        chosen.push_back(cand.config);
        wgmma_flash = true;
      }
      if (cand.config.flash && !cand.config.mma && !flash) {
        chosen.push_back(cand.config);
        planner::TileConfig other = cand.config;
        other.reduce_step = std::uniform_int_distribution<int64_t>(1, 80)(pick);
        other.threads = 32 * std::uniform_int_distribution<int>(1, 8)(pick);
        if (planner::evaluate_tile(c.g, fg, planner::find_device("h100"), other).valid) chosen.push_back(other);
        flash = true;
      }
    }
    // The best candidate's schedule on a tile of random extents (odd ones as likely as any), where
    // the cost model accepts it: partial vectors, unaligned tile starts, clipped edges.
    planner::TileConfig odd = generated.front();
    const Shape& out = c.g.value(planner::group_root(c.g, fg)).shape;
    for (size_t a = 0; a < odd.tile.size() && a < out.size(); ++a) {
      odd.tile[a] = std::uniform_int_distribution<int64_t>(1, std::max<int64_t>(1, out[a]))(pick);
    }
    if (planner::evaluate_tile(c.g, fg, planner::find_device("h100"), odd).valid) chosen.push_back(odd);
    for (const planner::TileConfig& cfg : chosen) {
      groups.push_back(fg);
      configs.push_back(cfg);
    }
  }
  size_t next = 0;
  // The inputs drawn from the case's seed too, so that the seed alone replays a failure.
  testing::CheckOptions options;
  options.seed = seed;
  testing::check_groups(c.g, groups, [&](const planner::FusionGroup&) { return configs[next++]; },
                        "group fuzz case " + std::to_string(seed) + " (" + c.what + ")", options);
}

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::atoi(v) : fallback;
}

TEST(GroupFuzz, RandomGroupsMatchTheReferenceUnderEveryCheck) {
  const unsigned seed = testing::test_seed();
  const int cases = env_int("FUSETUNE_GROUP_FUZZ_CASES", 6);
  for (int i = 0; i < cases && !HasFailure(); ++i) check_case(seed + static_cast<unsigned>(i), random_case(seed + static_cast<unsigned>(i)));
}

// Window ops (convolutions, pooling, resizing) on random shapes, FUSETUNE_WINDOW_FUZZ_CASES of them
// (default 2) from the test's seed: the kinds of group a detector's shipped plan read out of
// bounds in.
TEST(GroupFuzz, RandomWindowGroupsMatchTheReferenceUnderEveryCheck) {
  const unsigned seed = testing::test_seed();
  const int cases = env_int("FUSETUNE_WINDOW_FUZZ_CASES", 2);
  for (int i = 0; i < cases && !HasFailure(); ++i) {
    check_case(seed + static_cast<unsigned>(i), random_window_case(seed + static_cast<unsigned>(i)));
  }
}

// Products of 8-bit integers on random shapes, FUSETUNE_INT8_FUZZ_CASES of them (default 2) from the
// test's seed.
TEST(GroupFuzz, RandomEightBitProductsMatchTheReferenceUnderEveryCheck) {
  const unsigned seed = testing::test_seed();
  const int cases = env_int("FUSETUNE_INT8_FUZZ_CASES", 2);
  for (int i = 0; i < cases && !HasFailure(); ++i) {
    check_case(seed + static_cast<unsigned>(i), random_integer_case(seed + static_cast<unsigned>(i)));
  }
}

// Back-to-back products on random shapes, FUSETUNE_PRODUCTS_FUZZ_CASES of them (default 2) from the
// test's seed; each case's two products fuse into one group.
TEST(GroupFuzz, RandomBackToBackProductsMatchTheReferenceUnderEveryCheck) {
  const unsigned seed = testing::test_seed();
  const int cases = env_int("FUSETUNE_PRODUCTS_FUZZ_CASES", 2);
  for (int i = 0; i < cases && !HasFailure(); ++i) {
    const FuzzCase c = random_back_to_back_case(seed + static_cast<unsigned>(i));
    planner::FusionOptions fusion;
    fusion.cost = [](const std::vector<int>&) { return 1.0; };
    size_t products = 0;
    for (const planner::FusionGroup& fg : planner::fuse(c.g, fusion).groups) {
      size_t here = 0;
      for (int n : fg.nodes) here += c.g.nodes()[static_cast<size_t>(n)].op == "MatMul";
      products = std::max(products, here);
    }
    ASSERT_EQ(products, 2u) << "case " << seed + static_cast<unsigned>(i) << " (" << c.what << "): the products are apart";
    check_case(seed + static_cast<unsigned>(i), c);
  }
}

// Gated linear units on random shapes, FUSETUNE_GATED_FUZZ_CASES of them (default 2) from the test's
// seed; each case's two projections are one product of weights twice as wide.
TEST(GroupFuzz, RandomGatedUnitsMatchTheReferenceUnderEveryCheck) {
  const unsigned seed = testing::test_seed();
  const int cases = env_int("FUSETUNE_GATED_FUZZ_CASES", 2);
  for (int i = 0; i < cases && !HasFailure(); ++i) {
    const FuzzCase c = random_gated_unit_case(seed + static_cast<unsigned>(i));
    size_t products = 0;
    for (const Node& n : c.g.nodes()) {
      if (n.op != "MatMul") continue;
      ++products;
      const Shape& w = c.g.value(n.inputs[1]).shape;
      EXPECT_EQ(w.back() % 2, 0) << "case " << seed + static_cast<unsigned>(i) << " (" << c.what << ")";
    }
    ASSERT_EQ(products, 1u) << "case " << seed + static_cast<unsigned>(i) << " (" << c.what << "): the projections are apart";
    check_case(seed + static_cast<unsigned>(i), c);
  }
}

// wgmma's TMA form on random products, FUSETUNE_TMA_FUZZ_CASES of them (default 1) from the test's
// seed: each case's group must have a TMA twin among its candidates, one of which takes the
// warp-specialized form (asserted here: the product's bias and activation run from its
// registers), and check_case runs its first twins beside the other candidates.
TEST(GroupFuzz, RandomTmaProductsMatchTheReferenceUnderEveryCheck) {
  const unsigned seed = testing::test_seed();
  const int cases = env_int("FUSETUNE_TMA_FUZZ_CASES", 1);
  for (int i = 0; i < cases && !HasFailure(); ++i) {
    const FuzzCase c = random_tma_case(seed + static_cast<unsigned>(i));
    bool twin = false, ws = false;
    for (const planner::FusionGroup& fg : planner::fuse(c.g).groups) {
      for (const planner::Candidate& cand : planner::tile_candidates(c.g, fg, planner::find_device("h100"), {1 << 20, 2.0})) {
        twin = twin || cand.config.tma;
        planner::TileConfig specialized = cand.config;
        specialized.ws = true;
        ws = ws || (cand.config.tma && planner::evaluate_tile(c.g, fg, planner::find_device("h100"), specialized).valid);
      }
    }
    ASSERT_TRUE(twin) << "case " << seed + static_cast<unsigned>(i) << " (" << c.what << "): no TMA candidate";
    ASSERT_TRUE(ws) << "case " << seed + static_cast<unsigned>(i) << " (" << c.what << "): no TMA candidate takes the warp-specialized form";
    check_case(seed + static_cast<unsigned>(i), c);
  }
}

// Updates in place on random shapes, FUSETUNE_UPDATE_FUZZ_CASES of them (default 2) from the test's seed.
TEST(GroupFuzz, RandomUpdatesInPlaceMatchTheReferenceUnderEveryCheck) {
  const unsigned seed = testing::test_seed();
  const int cases = env_int("FUSETUNE_UPDATE_FUZZ_CASES", 2);
  for (int i = 0; i < cases && !HasFailure(); ++i) {
    const FuzzCase c = random_update_case(seed + static_cast<unsigned>(i));
    bool eligible = false;
    for (const planner::FusionGroup& fg : planner::fuse(c.g).groups) eligible = eligible || planner::InPlaceUpdates(c.g).eligible(fg);
    ASSERT_TRUE(eligible) << "case " << seed + static_cast<unsigned>(i) << " (" << c.what << "): no group may update in place";
    check_case(seed + static_cast<unsigned>(i), c);
  }
}

// The corpus: seeds campaigns found failing, replayed on every run (a line: the seed, then what it
// found, after a #).
TEST(GroupFuzz, TheKeptSeedsStillPass) {
  std::ifstream in(std::string(FUSETUNE_SOURCE_DIR) + "/tests/fuzz/group_seeds.txt");
  ASSERT_TRUE(in.good()) << "tests/fuzz/group_seeds.txt missing";
  int kept = 0;
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line.substr(0, line.find('#')));
    unsigned seed = 0;
    if (!(fields >> seed)) continue;
    ++kept;
    check_case(seed, random_case(seed));
  }
  std::printf("%d kept seeds replayed\n", kept);
}

}  // namespace
}  // namespace fusetune
