// The quantization operators (importer/lower_quant.h): integer contractions exact where float
// sums are not, on the reference interpreter and compiled (the plan run on the host executor),
// and what the lowering refuses, each refusal naming the node and what is wrong.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/nvrtc.h"
#include "compiler/pipeline.h"
#include "core/error.h"
#include "importer/importer.h"
#include "import_check.h"
#include "onnx_builder.h"
#include "reference/interpreter.h"
#include "runtime/plan_runner.h"
#include "test_dir.h"
#include "test_seed.h"
#include "unit/codegen_check.h"

namespace fusetune {
namespace {

using testing::OnnxBuilder;

using testing::kFloat;
using testing::kInt32;
using testing::kInt8;
using testing::kUInt8;

// MatMulInteger with a zero point per row of A and per column of B, and ConvInteger with one per
// output channel of W, over reductions long enough (K = 640) that their sums pass 2^24, where a
// float accumulator rounds: the reference and the compiled plan (host executor) give exactly the
// sums of the operators' definitions, computed here in 64-bit integers.
TEST(Quantization, IntegerContractionsAreExactWhereFloatSumsAreNot) {
  const unsigned seed = testing::test_seed();
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> u8(240, 255), i8(-128, -120), small(0, 7);
  constexpr int64_t M = 5, K = 640, N = 7, C = 640, H = 3, W = 3, F = 4;
  std::vector<int64_t> a(M * K), b(K * N), azp(M), bzp(N), x(C * H * W), w(F * C), wzp(F);
  for (auto& v : a) v = u8(rng);
  for (auto& v : b) v = i8(rng);
  for (auto& v : azp) v = small(rng);
  for (auto& v : bzp) v = small(rng);
  for (auto& v : x) v = u8(rng);
  for (auto& v : w) v = i8(rng);
  for (auto& v : wzp) v = small(rng);
  OnnxBuilder m(10);
  m.input("A", kUInt8, {M, K}).input("X", kUInt8, {1, C, H, W}).output("Y", kInt32, {M, N}).output("Z", kInt32, {1, F, H, W});
  m.initializer("B", Tensor::from_ints(DType::kI8, {K, N}, b)).initializer("azp", Tensor::from_ints(DType::kU8, {M}, azp));
  m.initializer("bzp", Tensor::from_ints(DType::kI8, {N}, bzp)).initializer("W", Tensor::from_ints(DType::kI8, {F, C, 1, 1}, w));
  m.initializer("wzp", Tensor::from_ints(DType::kI8, {F}, wzp));
  m.node("MatMulInteger", {"A", "B", "azp", "bzp"}, {"Y"}, "mm");
  m.node("ConvInteger", {"X", "W", "", "wzp"}, {"Z"}, "conv");
  std::vector<int64_t> want_y(M * N), want_z(F * H * W);
  bool past_float = false;  // some sum is beyond float32's exact integers
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < N; ++j) {
      int64_t s = 0;
      for (int64_t k = 0; k < K; ++k) s += (a[i * K + k] - azp[i]) * (b[k * N + j] - bzp[j]);
      want_y[i * N + j] = s;
      past_float = past_float || std::abs(s) > (int64_t{1} << 24);
    }
  }
  for (int64_t f = 0; f < F; ++f) {
    for (int64_t p = 0; p < H * W; ++p) {
      int64_t s = 0;
      for (int64_t c = 0; c < C; ++c) s += x[c * H * W + p] * (w[f * C + c] - wzp[f]);
      want_z[f * H * W + p] = s;
    }
  }
  ASSERT_TRUE(past_float) << "seed " << seed << ": no sum beyond 2^24, the test proves nothing";
  const std::vector<Tensor> inputs = {Tensor::from_ints(DType::kU8, {M, K}, a), Tensor::from_ints(DType::kU8, {1, C, H, W}, x)};
  const importer::ImportedModel imported = importer::import_onnx_bytes(m.bytes(), ".");
  const std::vector<Tensor> ref = reference::run_graph(imported.graph, inputs);
  EXPECT_EQ(ref[0].to_ints(), want_y) << "reference, seed " << seed;
  EXPECT_EQ(ref[1].to_ints(), want_z) << "reference, seed " << seed;
  testing::TestDir dir("quant");
  m.write(dir / "model.onnx");
  const compiler::PipelineResult r = compiler::compile_model(dir / "model.onnx", planner::find_device("h100"), {});
  auto host = backend::make_host_backend();
  runtime::PlanRunner runner(r.bundle, *host);
  const std::vector<Tensor> got = runner.run(inputs);
  EXPECT_EQ(got[0].to_ints(), want_y) << "compiled, seed " << seed;
  EXPECT_EQ(got[1].to_ints(), want_z) << "compiled, seed " << seed;
  // Both products are MatMuls of 8-bit operands (the ConvInteger's too: its K is 640 entries), staged.
  int products = 0;
  for (const auto& g : r.plan.groups) {
    EXPECT_EQ(g.group.pattern.find("Conv"), std::string::npos) << g.group.pattern;
    if (g.group.pattern.find("MatMul") == std::string::npos) continue;
    ++products;
    EXPECT_GT(g.candidates[g.chosen].config.reduce_step, 0) << g.group.pattern;
  }
  EXPECT_EQ(products, 2);
}

// The dp4a form and its tensor-core form (codegen/stages/dp4a_matmul.h) on the shapes their
// staging must get right: M, K and N that no tile, word or quad divides (K = 45: a last word of
// one byte; N = 29: B read a byte a load), a batch of A against one B and one A against a batch
// of B, every pair of signedness,
// zero points per tensor, per row and per column, absent and a constant zero, A an input or
// computed in the group (a QuantizeLinear). The reference and the compiled plan (host executor,
// its four checks on) give the definition's sums exactly; each plan stages its product in the dp4a
// form or on int8 tensor cores, whose instruction (dp4a or mma m16n8k32) NVRTC's PTX for sm_90
// holds with the operands' signedness. Both forms of every case's group are also lowered, run on
// the host with every check and compiled (unit/codegen_check.h).
TEST(Quantization, EightBitProductsRunOnDp4aAndTensorCoresExactly) {
  const unsigned seed = testing::test_seed();
  std::mt19937 rng(seed);
  struct Case {
    int ta, tb;
    std::vector<int64_t> as, bs;
    int azp, bzp;  // 0 absent, 1 per tensor, 2 per row or column, 3 a constant zero
    bool quantize_a;
    const char* dp4a;
    const char* imma;
  };
  const std::vector<Case> cases = {
      {kUInt8, kInt8, {37, 45}, {45, 29}, 1, 0, false, "dp4a.u32.s32", "m16n8k32.row.col.s32.u8.s8.s32"},
      {kInt8, kUInt8, {2, 19, 64}, {64, 33}, 2, 2, false, "dp4a.s32.u32", "m16n8k32.row.col.s32.s8.u8.s32"},
      {kUInt8, kUInt8, {5, 130}, {130, 8}, 3, 1, true, "dp4a.u32.u32", "m16n8k32.row.col.s32.u8.u8.s32"},
      {kInt8, kInt8, {9, 7}, {3, 7, 12}, 0, 3, false, "dp4a.s32.s32", "m16n8k32.row.col.s32.s8.s8.s32"},
  };
  for (size_t ci = 0; ci < cases.size(); ++ci) {
    const Case& c = cases[ci];
    const DType ta = c.ta == kInt8 ? DType::kI8 : DType::kU8, tb = c.tb == kInt8 ? DType::kI8 : DType::kU8;
    const auto draw = [&](DType t, int64_t n) {
      std::uniform_int_distribution<int> d(t == DType::kI8 ? -128 : 0, t == DType::kI8 ? 127 : 255);
      std::vector<int64_t> v(static_cast<size_t>(n));
      for (auto& x : v) x = d(rng);
      return v;
    };
    const int64_t K = c.as.back(), M = c.as[c.as.size() - 2], N = c.bs.back();
    const int64_t a_batch = numel(c.as) / (M * K), b_batch = numel(c.bs) / (K * N), batch = std::max(a_batch, b_batch);
    std::vector<int64_t> a = draw(ta, numel(c.as)), b = draw(tb, numel(c.bs));
    const auto zero_points = [&](int kind, DType t, int64_t per) {
      if (kind == 0 || kind == 3) return std::vector<int64_t>(static_cast<size_t>(kind == 3 ? 1 : 0), 0);
      return draw(t, kind == 1 ? 1 : per);
    };
    const std::vector<int64_t> azp = zero_points(c.azp, ta, M), bzp = zero_points(c.bzp, tb, N);
    OnnxBuilder m(13);
    Shape ys = {M, N};
    if (batch > 1) ys.insert(ys.begin(), batch);
    m.output("Y", kInt32, ys);
    std::vector<float> af;  // the quantized A's float input: a + 0.25 quantizes (scale 1, zero point 0) to a
    if (c.quantize_a) {
      for (int64_t x : a) af.push_back(static_cast<float>(x) + 0.25f);
      m.input("F", kFloat, c.as);
      m.initializer("one", Tensor::from_floats(DType::kF32, {}, std::vector<float>{1.0f}));
      m.initializer("zero", Tensor::from_ints(ta, {}, std::vector<int64_t>{0}));
      m.node("QuantizeLinear", {"F", "one", "zero"}, {"A"}, "quantize");
    } else {
      m.input("A", c.ta, c.as);
    }
    m.input("B", c.tb, c.bs);
    std::vector<std::string> ins = {"A", "B", "", ""};
    if (c.azp != 0) {
      m.initializer("azp", Tensor::from_ints(ta, c.azp == 2 ? Shape{M} : Shape{}, azp));
      ins[2] = "azp";
    }
    if (c.bzp != 0) {
      m.initializer("bzp", Tensor::from_ints(tb, c.bzp == 2 ? Shape{N} : Shape{}, bzp));
      ins[3] = "bzp";
    }
    m.node("MatMulInteger", {ins[0], ins[1], ins[2], ins[3]}, {"Y"}, "mm");  // "": an absent zero point
    const auto zp = [](const std::vector<int64_t>& z, int64_t i) { return z.empty() ? 0 : z[z.size() == 1 ? 0 : static_cast<size_t>(i)]; };
    std::vector<int64_t> want(static_cast<size_t>(batch * M * N));
    for (int64_t bi = 0; bi < batch; ++bi) {
      const int64_t* A = a.data() + (a_batch > 1 ? bi : 0) * M * K;
      const int64_t* B = b.data() + (b_batch > 1 ? bi : 0) * K * N;
      for (int64_t i = 0; i < M; ++i) {
        for (int64_t j = 0; j < N; ++j) {
          int64_t sum = 0;
          for (int64_t k = 0; k < K; ++k) sum += (A[i * K + k] - zp(azp, i)) * (B[k * N + j] - zp(bzp, j));
          want[static_cast<size_t>((bi * M + i) * N + j)] = sum;
        }
      }
    }
    const std::vector<Tensor> inputs = {c.quantize_a ? Tensor::from_floats(DType::kF32, c.as, af) : Tensor::from_ints(ta, c.as, a),
                                        Tensor::from_ints(tb, c.bs, b)};
    const std::string what = "case " + std::to_string(ci) + ", seed " + std::to_string(seed);
    const importer::ImportedModel imported = importer::import_onnx_bytes(m.bytes(), ".");
    EXPECT_EQ(reference::run_graph(imported.graph, inputs)[0].to_ints(), want) << "reference, " << what;
    testing::TestDir dir("dp4a");
    m.write(dir / "model.onnx");
    const compiler::PipelineResult r = compiler::compile_model(dir / "model.onnx", planner::find_device("h100"), {});
    auto host = backend::make_host_backend();
    runtime::PlanRunner runner(r.bundle, *host);
    EXPECT_EQ(runner.run(inputs)[0].to_ints(), want) << "compiled, " << what;
    bool staged = false;
    for (const auto& g : r.plan.groups) {
      const bool product = g.group.pattern.find("MatMul") != std::string::npos;
      staged = staged || (product && g.candidates[g.chosen].config.reduce_step > 0);
      if (!product) continue;
      // Both forms of the product's group: the best dp4a and the best tensor-core candidate.
      std::vector<planner::TileConfig> forms;
      for (bool tensor : {false, true}) {
        for (const planner::Candidate& cand : planner::tile_candidates(r.model.graph, g.group, planner::find_device("h100"), {1 << 20, 2.0})) {
          if (cand.config.library.empty() && cand.config.reduce_step > 0 && cand.config.mma == tensor) {
            forms.push_back(cand.config);
            break;
          }
        }
      }
      ASSERT_EQ(forms.size(), 2u) << "no dp4a or no tensor-core candidate, " << what;
      // The tensor-core form's product leaves from its fragments: no 64-bit product buffer.
      for (const codegen::SharedAlloc& s : codegen::lower_group(r.model.graph, g.group, forms[1], "imma").kernel.shared) {
        EXPECT_NE(s.dtype, DType::kI64) << "the tensor-core form stages its product in shared memory (" << s.name << "), " << what;
      }
      // Split-K of each form (stages/split_k.h, the int32 accumulators summed as uint32): the
      // first candidate of the form with two steps or more, on 2 blocks a tile.
      for (bool tensor : {false, true}) {
        for (const planner::Candidate& cand : planner::tile_candidates(r.model.graph, g.group, planner::find_device("h100"), {1 << 20, 2.0})) {
          planner::TileConfig split = cand.config;
          if (!split.library.empty() || split.reduce_step <= 0 || split.mma != tensor || split.split_k > 1 || K <= split.reduce_step) continue;
          split.split_k = 2;
          if (!planner::evaluate_tile(r.model.graph, g.group, planner::find_device("h100"), split).valid) continue;
          forms.push_back(split);
          break;
        }
      }
      if (K > 32) {
        EXPECT_EQ(forms.size(), 4u) << "no split-K candidate of each form, " << what;
      }
      std::vector<planner::FusionGroup> groups(forms.size(), g.group);
      size_t next = 0;
      testing::check_groups(r.model.graph, groups, [&](const planner::FusionGroup&) { return forms[next++]; }, what);
    }
    EXPECT_TRUE(staged) << "the product is not staged, " << what;
    const std::string ptx = backend::compile_ptx(r.bundle.cuda_source, "sm_90");
    EXPECT_TRUE(ptx.find(c.dp4a) != std::string::npos || ptx.find(c.imma) != std::string::npos)
        << "neither " << c.dp4a << " nor mma." << c.imma << " in the plan's PTX, " << what;
  }
}

// A QDQ model's products (importer/lower_quant.h's fold_dequantized_matmul): a MatMul of a
// quantized-then-dequantized activation (uint8, per tensor) by a dequantized int8 weight with a
// scale per column, and a Gemm (transB, alpha 0.5, a bias) by a weight of N x K with a scale and
// zero point per row (its output columns), become integer products of the bytes (MatMuls of 8-bit
// operands into int32, no float MatMul left), scaled after. Their outputs: the definition's
// (x_q - zx)(w - zw) summed in integers and scaled in double, within float32's rounding, on the
// reference; the compiled plan (dp4a on the host executor) gives the reference's bits. A
// dequantized with a scale per K entry (its axis 1), which the sum over K mixes, is not folded.
TEST(Quantization, DequantizedPairsAroundAProductFoldIntoTheIntegerProduct) {
  const unsigned seed = testing::test_seed();
  std::mt19937 rng(seed);
  constexpr int64_t M = 6, K = 37, N = 11;
  std::uniform_real_distribution<float> xs(-3.0f, 3.0f);
  std::uniform_int_distribution<int> w8(-127, 127), zw(-3, 3);
  std::vector<float> x(M * K), w_scale(N), g_scale(N);
  std::vector<int64_t> w(K * N), g(N * K), g_zero(N);
  for (auto& v : x) v = xs(rng);
  for (auto& v : w) v = w8(rng);
  for (auto& v : g) v = w8(rng);
  for (int64_t j = 0; j < N; ++j) {
    w_scale[static_cast<size_t>(j)] = 0.001f * static_cast<float>(1 + j);
    g_scale[static_cast<size_t>(j)] = 0.002f * static_cast<float>(1 + j % 4);
    g_zero[static_cast<size_t>(j)] = zw(rng);
  }
  const float sx = 0.025f;
  const int64_t zx = 128;
  OnnxBuilder m(13);
  m.input("X", kFloat, {M, K}).output("Y", kFloat, {M, N}).output("Z", kFloat, {M, N});
  m.initializer("sx", Tensor::from_floats(DType::kF32, {}, std::vector<float>{sx}));
  m.initializer("zx", Tensor::from_ints(DType::kU8, {}, std::vector<int64_t>{zx}));
  m.initializer("W", Tensor::from_ints(DType::kI8, {K, N}, w)).initializer("sw", Tensor::from_floats(DType::kF32, {N}, w_scale));
  m.initializer("G", Tensor::from_ints(DType::kI8, {N, K}, g)).initializer("sg", Tensor::from_floats(DType::kF32, {N}, g_scale));
  m.initializer("zg", Tensor::from_ints(DType::kI8, {N}, g_zero));
  m.initializer("bias", Tensor::from_floats(DType::kF32, {N}, std::vector<float>(N, 0.5f)));
  m.node("QuantizeLinear", {"X", "sx", "zx"}, {"xq"}, "q");
  m.node("DequantizeLinear", {"xq", "sx", "zx"}, {"xd"}, "dq_x");
  OnnxBuilder::attr_i(m.node("DequantizeLinear", {"W", "sw"}, {"wd"}, "dq_w"), "axis", 1);
  OnnxBuilder::attr_i(m.node("DequantizeLinear", {"G", "sg", "zg"}, {"gd"}, "dq_g"), "axis", 0);
  m.node("MatMul", {"xd", "wd"}, {"Y"}, "mm");
  onnx::NodeProto& gemm = m.node("Gemm", {"xd", "gd", "bias"}, {"Z"}, "gemm");
  OnnxBuilder::attr_i(gemm, "transB", 1);
  OnnxBuilder::attr_f(gemm, "alpha", 0.5f);
  const importer::ImportedModel imported = importer::import_onnx_bytes(m.bytes(), ".");
  int byte_products = 0;
  for (const Node& n : imported.graph.nodes()) {
    if (n.op != "MatMul") continue;
    EXPECT_NE(imported.graph.value(n.inputs[0]).dtype, DType::kF32) << "a float MatMul is left: " << n.name;
    byte_products += imported.graph.value(n.outputs[0]).dtype == DType::kI32;
  }
  EXPECT_EQ(byte_products, 2);
  // The definition: x quantized as QuantizeLinear does (round half to even, saturated).
  std::vector<int64_t> xq(M * K);
  for (size_t i = 0; i < x.size(); ++i) xq[i] = std::clamp<int64_t>(static_cast<int64_t>(std::nearbyint(x[i] / sx)) + zx, 0, 255);
  std::vector<double> want_y(M * N), want_z(M * N);
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < N; ++j) {
      int64_t sy = 0, sz = 0;
      for (int64_t k = 0; k < K; ++k) {
        sy += (xq[i * K + k] - zx) * w[k * N + j];
        sz += (xq[i * K + k] - zx) * (g[j * K + k] - g_zero[j]);
      }
      want_y[i * N + j] = static_cast<double>(sy) * sx * w_scale[j];
      want_z[i * N + j] = 0.5 * static_cast<double>(sz) * sx * g_scale[j] + 0.5;
    }
  }
  const std::vector<Tensor> inputs = {Tensor::from_floats(DType::kF32, {M, K}, x)};
  const std::vector<Tensor> ref = reference::run_graph(imported.graph, inputs);
  const std::vector<float> ry = ref[0].to_floats(), rz = ref[1].to_floats();
  for (size_t i = 0; i < ry.size(); ++i) {
    EXPECT_NEAR(ry[i], want_y[i], 1e-6 * std::abs(want_y[i]) + 1e-7) << "Y[" << i << "], seed " << seed;
    EXPECT_NEAR(rz[i], want_z[i], 1e-6 * std::abs(want_z[i]) + 1e-6) << "Z[" << i << "], seed " << seed;
  }
  testing::TestDir dir("qdq");
  m.write(dir / "model.onnx");
  const compiler::PipelineResult r = compiler::compile_model(dir / "model.onnx", planner::find_device("h100"), {});
  auto host = backend::make_host_backend();
  runtime::PlanRunner runner(r.bundle, *host);
  const std::vector<Tensor> got = runner.run(inputs);
  EXPECT_EQ(got[0].to_floats(), ry) << "compiled, seed " << seed;
  EXPECT_EQ(got[1].to_floats(), rz) << "compiled, seed " << seed;
  // A dequantized along its axis 1 (a scale per K entry, which the sum over K mixes): no fold.
  OnnxBuilder along_k(13);
  along_k.input("A", kInt8, {M, K}).output("Y", kFloat, {M, N});
  along_k.initializer("sa", Tensor::from_floats(DType::kF32, {K}, std::vector<float>(K, 0.5f)));
  along_k.initializer("W", Tensor::from_ints(DType::kI8, {K, N}, w)).initializer("sw", Tensor::from_floats(DType::kF32, {N}, w_scale));
  OnnxBuilder::attr_i(along_k.node("DequantizeLinear", {"A", "sa"}, {"ad"}, "dq_a"), "axis", 1);
  OnnxBuilder::attr_i(along_k.node("DequantizeLinear", {"W", "sw"}, {"wd"}, "dq_w"), "axis", 1);
  along_k.node("MatMul", {"ad", "wd"}, {"Y"}, "mm");
  const Graph unfolded = importer::import_onnx_bytes(along_k.bytes(), ".").graph;
  for (const Node& n : unfolded.nodes()) {
    if (n.op == "MatMul") {
      EXPECT_EQ(unfolded.value(n.inputs[0]).dtype, DType::kF32) << "a scale along K was folded";
    }
  }
}

// ConvInteger and QLinearConv of 8-bit operands whose groups reduce over 32 entries or more become
// integer products over their patches (importer/lower_quant.cpp: x padded with its zero point, its
// patches gathered, a MatMul of bytes into int32 with the zero points' sums): on shapes that test
// the gather (asymmetric pads, strides, dilations, groups, a 1-D convolution, a batch of two),
// with zero points absent, per tensor and per output channel, and the QLinearConv's bias. The
// reference and the compiled plan (host executor) give the operators' definition, computed here in
// 64-bit integers (the padding contributes nothing: it holds x's zero point); the plan has no
// Conv left, and its product stages. A depthwise 3x3 (K = 9) stays a Conv.
TEST(Quantization, ConvolutionsOfBytesAreIntegerProductsOverTheirPatches) {
  const unsigned seed = testing::test_seed();
  std::mt19937 rng(seed);
  struct Case {
    int tx, tw;
    Shape xs, ws;
    std::vector<int64_t> pads, strides, dilations;
    int64_t group;
    int xzp, wzp;  // 0 absent, 1 per tensor, 2 per output channel (w only)
    bool qlinear;  // QLinearConv with a bias: its int32 sum is compared before requantization
    bool product;  // lowered to an integer product (else it stays a Conv)
  };
  const std::vector<Case> cases = {
      {kUInt8, kInt8, {1, 8, 9, 7}, {6, 8, 3, 3}, {1, 0, 2, 1}, {2, 1}, {1, 1}, 1, 1, 2, false, true},
      {kInt8, kUInt8, {2, 12, 8, 8}, {4, 6, 3, 2}, {1, 1, 1, 1}, {1, 2}, {2, 1}, 2, 1, 1, false, true},
      {kUInt8, kUInt8, {1, 40, 11}, {5, 40, 1}, {0, 0}, {2}, {1}, 1, 0, 0, false, true},
      {kUInt8, kInt8, {1, 16, 6, 6}, {7, 16, 3, 3}, {1, 1, 1, 1}, {1, 1}, {1, 1}, 1, 1, 2, true, true},
      {kUInt8, kInt8, {1, 8, 6, 6}, {8, 1, 3, 3}, {1, 1, 1, 1}, {1, 1}, {1, 1}, 8, 1, 1, false, false},
  };
  const auto draw = [&](int t, int64_t n, int lo = -1000) {
    std::uniform_int_distribution<int> d(t == kInt8 ? -128 : 0, t == kInt8 ? 127 : 255);
    std::vector<int64_t> v(static_cast<size_t>(n));
    for (auto& x : v) x = lo == -1000 ? d(rng) : std::uniform_int_distribution<int>(lo, lo + 9)(rng);
    return v;
  };
  for (size_t ci = 0; ci < cases.size(); ++ci) {
    const Case& c = cases[ci];
    const DType tx = c.tx == kInt8 ? DType::kI8 : DType::kU8, tw = c.tw == kInt8 ? DType::kI8 : DType::kU8;
    const size_t sp = c.xs.size() - 2;
    const int64_t n = c.xs[0], ch = c.xs[1], f = c.ws[0], cg = c.ws[1], fg = f / c.group;
    Shape out(sp);
    for (size_t d = 0; d < sp; ++d) {
      out[d] = (c.xs[2 + d] + c.pads[d] + c.pads[sp + d] - c.dilations[d] * (c.ws[2 + d] - 1) - 1) / c.strides[d] + 1;
    }
    const std::vector<int64_t> x = draw(c.tx, numel(c.xs)), w = draw(c.tw, numel(c.ws));
    const std::vector<int64_t> xzp = c.xzp ? draw(c.tx, 1, c.tx == kInt8 ? -5 : 120) : std::vector<int64_t>{};
    const std::vector<int64_t> wzp = c.wzp ? draw(c.tw, c.wzp == 2 ? f : 1, c.tw == kInt8 ? -5 : 120) : std::vector<int64_t>{};
    std::vector<int64_t> bias(static_cast<size_t>(f));
    for (auto& b : bias) b = std::uniform_int_distribution<int>(-100000, 100000)(rng);
    Shape ys = {n, f};
    ys.insert(ys.end(), out.begin(), out.end());
    // The definition, in int64.
    std::vector<int64_t> want(static_cast<size_t>(numel(ys)));
    const int64_t positions = numel(out);
    int64_t taps = 1;
    for (size_t d = 0; d < sp; ++d) taps *= c.ws[2 + d];
    for (int64_t b = 0; b < n; ++b) {
      for (int64_t o = 0; o < f; ++o) {
        const int64_t zw = wzp.empty() ? 0 : wzp[wzp.size() == 1 ? 0 : static_cast<size_t>(o)];
        for (int64_t p = 0; p < positions; ++p) {
          int64_t sum = c.qlinear ? bias[static_cast<size_t>(o)] : 0;
          for (int64_t ic = 0; ic < cg; ++ic) {
            const int64_t cin = (o / fg) * cg + ic;
            for (int64_t t = 0; t < taps; ++t) {
              int64_t flat = 0, rest_t = t, rest_p = p, stride = 1;
              bool inside = true;
              for (size_t d = sp; d-- > 0;) {
                const int64_t tap = rest_t % c.ws[2 + d], at = rest_p % out[d];
                rest_t /= c.ws[2 + d];
                rest_p /= out[d];
                const int64_t pos = at * c.strides[d] + tap * c.dilations[d] - c.pads[d];
                inside = inside && pos >= 0 && pos < c.xs[2 + d];
                flat += pos * stride;
                stride *= c.xs[2 + d];
              }
              if (!inside) continue;
              const int64_t xv = x[static_cast<size_t>((b * ch + cin) * numel(Shape(c.xs.begin() + 2, c.xs.end())) + flat)];
              const int64_t wv = w[static_cast<size_t>((o * cg + ic) * taps + t)];
              sum += (xv - (xzp.empty() ? 0 : xzp[0])) * (wv - zw);
            }
          }
          want[static_cast<size_t>((b * f + o) * positions + p)] = sum;
        }
      }
    }
    OnnxBuilder m(10);
    m.input("X", c.tx, c.xs).output("Z", c.qlinear ? c.tx : kInt32, ys);
    m.initializer("W", Tensor::from_ints(tw, c.ws, w));
    onnx::NodeProto* node = nullptr;
    std::vector<int64_t> qlinear_want;  // the QLinearConv's output: sum x 2^-6, rounded half to even, plus 128 (or 0), saturated
    if (c.qlinear) {
      m.initializer("xs", Tensor::scalar_float(DType::kF32, 1.0f)).initializer("ws", Tensor::scalar_float(DType::kF32, 1.0f));
      m.initializer("ys", Tensor::scalar_float(DType::kF32, 64.0f));
      m.initializer("xzp", Tensor::from_ints(tx, {}, xzp)).initializer("yzp", Tensor::from_ints(tx, {}, std::vector<int64_t>{c.tx == kInt8 ? 0 : 128}));
      m.initializer("wzp", Tensor::from_ints(tw, c.wzp == 2 ? Shape{f} : Shape{}, wzp)).initializer("B", Tensor::from_ints(DType::kI32, {f}, bias));
      node = &m.node("QLinearConv", {"X", "xs", "xzp", "W", "ws", "wzp", "ys", "yzp", "B"}, {"Z"}, "conv");
      for (int64_t s : want) {
        const double q = std::nearbyint(static_cast<double>(s) / 64.0) + (c.tx == kInt8 ? 0 : 128);
        qlinear_want.push_back(static_cast<int64_t>(std::clamp(q, c.tx == kInt8 ? -128.0 : 0.0, c.tx == kInt8 ? 127.0 : 255.0)));
      }
    } else {
      if (c.xzp) m.initializer("xzp", Tensor::from_ints(tx, {}, xzp));
      if (c.wzp) m.initializer("wzp", Tensor::from_ints(tw, c.wzp == 2 ? Shape{f} : Shape{}, wzp));
      node = &m.node("ConvInteger", {"X", "W", c.xzp ? "xzp" : "", c.wzp ? "wzp" : ""}, {"Z"}, "conv");
    }
    OnnxBuilder::attr_ints(*node, "pads", c.pads);
    OnnxBuilder::attr_ints(*node, "strides", c.strides);
    OnnxBuilder::attr_ints(*node, "dilations", c.dilations);
    OnnxBuilder::attr_i(*node, "group", c.group);
    const std::vector<int64_t>& expected = c.qlinear ? qlinear_want : want;
    const std::vector<Tensor> inputs = {Tensor::from_ints(tx, c.xs, x)};
    const std::string what = "case " + std::to_string(ci) + ", seed " + std::to_string(seed);
    const importer::ImportedModel imported = importer::import_onnx_bytes(m.bytes(), ".");
    EXPECT_EQ(reference::run_graph(imported.graph, inputs)[0].to_ints(), expected) << "reference, " << what;
    bool conv = false;
    for (const Node& nd : imported.graph.nodes()) conv = conv || nd.op == "Conv";
    EXPECT_EQ(conv, !c.product) << what;
    testing::TestDir dir("qconv");
    m.write(dir / "model.onnx");
    const compiler::PipelineResult r = compiler::compile_model(dir / "model.onnx", planner::find_device("h100"), {});
    auto host = backend::make_host_backend();
    runtime::PlanRunner runner(r.bundle, *host);
    EXPECT_EQ(runner.run(inputs)[0].to_ints(), expected) << "compiled, " << what;
    if (!c.product) continue;
    bool staged = false;
    for (const auto& g : r.plan.groups) {
      staged = staged || (g.group.pattern.find("MatMul") != std::string::npos && g.candidates[g.chosen].config.reduce_step > 0);
    }
    EXPECT_TRUE(staged) << what;
  }
}

// A QDQ model's convolutions (importer/lower_quant.h's fold_dequantized_conv): a quantized-then-
// dequantized activation (uint8, per tensor) convolved with a dequantized int8 weight, its scale
// per output channel (a 3x3, pad 1) or per tensor (a 3x3, stride 2, with a float bias), becomes
// the byte product over the patches (a MatMul of 8-bit operands into int32, no Conv left) times
// the two scales; a depthwise 3x3 (K = 9) stays a float Conv. The outputs: the definition's
// (x_q - zx) w summed in integers and scaled in double, within float32's rounding, on the
// reference; the compiled plan (host executor) gives the reference's bits (the depthwise Conv's up
// to its float sums' order). In the plan the
// quantization of X is not computed once per tap: the patches' Gather is in the product's group,
// and any group that quantizes X reads each element of X once.
TEST(Quantization, DequantizedPairsAroundAConvolutionFoldIntoTheByteProduct) {
  const unsigned seed = testing::test_seed();
  std::mt19937 rng(seed);
  constexpr int64_t C = 16, H = 9, W = 7, F = 12;
  std::uniform_real_distribution<float> xs(-3.0f, 3.0f);
  std::uniform_int_distribution<int> w8(-127, 127);
  std::vector<float> x(C * H * W), w_scale(F), bias(F), depth_scale(C);
  std::vector<int64_t> w(F * C * 9), v(F * C * 9), d(C * 9);
  for (auto& e : x) e = xs(rng);
  for (auto& e : w) e = w8(rng);
  for (auto& e : v) e = w8(rng);
  for (auto& e : d) e = w8(rng);
  for (int64_t f = 0; f < F; ++f) {
    w_scale[static_cast<size_t>(f)] = 0.001f * static_cast<float>(1 + f);
    bias[static_cast<size_t>(f)] = 0.25f * static_cast<float>(f % 5) - 0.5f;
  }
  for (int64_t c = 0; c < C; ++c) depth_scale[static_cast<size_t>(c)] = 0.003f;
  const float sx = 0.025f, sv = 0.0015f;
  const int64_t zx = 128;
  OnnxBuilder m(13);
  m.input("X", kFloat, {1, C, H, W}).output("Y", kFloat, {1, F, H, W}).output("Z", kFloat, {1, F, 5, 4});
  m.output("D", kFloat, {1, C, H, W});
  m.initializer("sx", Tensor::from_floats(DType::kF32, {}, std::vector<float>{sx}));
  m.initializer("zx", Tensor::from_ints(DType::kU8, {}, std::vector<int64_t>{zx}));
  m.initializer("Wq", Tensor::from_ints(DType::kI8, {F, C, 3, 3}, w)).initializer("sw", Tensor::from_floats(DType::kF32, {F}, w_scale));
  m.initializer("Vq", Tensor::from_ints(DType::kI8, {F, C, 3, 3}, v)).initializer("sv", Tensor::from_floats(DType::kF32, {}, std::vector<float>{sv}));
  m.initializer("Dq", Tensor::from_ints(DType::kI8, {C, 1, 3, 3}, d)).initializer("sd", Tensor::from_floats(DType::kF32, {C}, depth_scale));
  m.initializer("bias", Tensor::from_floats(DType::kF32, {F}, bias));
  m.node("QuantizeLinear", {"X", "sx", "zx"}, {"xq"}, "q");
  m.node("DequantizeLinear", {"xq", "sx", "zx"}, {"xd"}, "dq_x");
  OnnxBuilder::attr_i(m.node("DequantizeLinear", {"Wq", "sw"}, {"wd"}, "dq_w"), "axis", 0);
  m.node("DequantizeLinear", {"Vq", "sv"}, {"vd"}, "dq_v");
  OnnxBuilder::attr_i(m.node("DequantizeLinear", {"Dq", "sd"}, {"dd"}, "dq_d"), "axis", 0);
  OnnxBuilder::attr_ints(m.node("Conv", {"xd", "wd"}, {"Y"}, "conv_same"), "pads", {1, 1, 1, 1});
  onnx::NodeProto& strided = m.node("Conv", {"xd", "vd", "bias"}, {"Z"}, "conv_strided");
  OnnxBuilder::attr_ints(strided, "pads", {1, 1, 1, 1});
  OnnxBuilder::attr_ints(strided, "strides", {2, 2});
  onnx::NodeProto& depthwise = m.node("Conv", {"xd", "dd"}, {"D"}, "conv_depthwise");
  OnnxBuilder::attr_ints(depthwise, "pads", {1, 1, 1, 1});
  OnnxBuilder::attr_i(depthwise, "group", C);
  const importer::ImportedModel imported = importer::import_onnx_bytes(m.bytes(), ".");
  int byte_products = 0, convs = 0;
  for (const Node& n : imported.graph.nodes()) {
    convs += n.op == "Conv";
    byte_products += n.op == "MatMul" && imported.graph.value(n.outputs[0]).dtype == DType::kI32;
  }
  EXPECT_EQ(byte_products, 2) << "seed " << seed;
  EXPECT_EQ(convs, 1) << "only the depthwise convolution stays a Conv, seed " << seed;
  // The definition: x quantized as QuantizeLinear does (round half to even, saturated), the
  // padding contributing nothing.
  std::vector<int64_t> xq(x.size());
  for (size_t i = 0; i < x.size(); ++i) xq[i] = std::clamp<int64_t>(static_cast<int64_t>(std::nearbyint(x[i] / sx)) + zx, 0, 255);
  const auto conv = [&](const std::vector<int64_t>& k, int64_t stride, int64_t f, int64_t oy, int64_t ox) {
    int64_t sum = 0;
    for (int64_t c = 0; c < C; ++c) {
      for (int64_t t = 0; t < 9; ++t) {
        const int64_t iy = oy * stride + t / 3 - 1, ix = ox * stride + t % 3 - 1;
        if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
        sum += (xq[static_cast<size_t>((c * H + iy) * W + ix)] - zx) * k[static_cast<size_t>((f * C + c) * 9 + t)];
      }
    }
    return sum;
  };
  const std::vector<Tensor> inputs = {Tensor::from_floats(DType::kF32, {1, C, H, W}, x)};
  const std::vector<Tensor> ref = reference::run_graph(imported.graph, inputs);
  const std::vector<float> ry = ref[0].to_floats(), rz = ref[1].to_floats();
  for (int64_t f = 0; f < F; ++f) {
    for (int64_t p = 0; p < H * W; ++p) {
      const double want = static_cast<double>(conv(w, 1, f, p / W, p % W)) * sx * w_scale[static_cast<size_t>(f)];
      const float got = ry[static_cast<size_t>(f * H * W + p)];
      EXPECT_NEAR(got, want, 1e-6 * std::abs(want) + 1e-7) << "Y at channel " << f << ", position " << p << ", seed " << seed;
    }
    for (int64_t p = 0; p < 20; ++p) {
      const double want = static_cast<double>(conv(v, 2, f, p / 4, p % 4)) * sx * sv + bias[static_cast<size_t>(f)];
      const float got = rz[static_cast<size_t>(f * 20 + p)];
      EXPECT_NEAR(got, want, 1e-6 * std::abs(want) + 1e-6) << "Z at channel " << f << ", position " << p << ", seed " << seed;
    }
  }
  testing::TestDir dir("qdq_conv");
  m.write(dir / "model.onnx");
  const compiler::PipelineResult r = compiler::compile_model(dir / "model.onnx", planner::find_device("h100"), {});
  auto host = backend::make_host_backend();
  runtime::PlanRunner runner(r.bundle, *host);
  const std::vector<Tensor> got = runner.run(inputs);
  // The byte products exactly; the depthwise float Conv up to its float sums' order.
  EXPECT_EQ(got[0].to_floats(), ry) << "compiled Y, seed " << seed;
  EXPECT_EQ(got[1].to_floats(), rz) << "compiled Z, seed " << seed;
  const std::vector<float> gd = got[2].to_floats(), rd = ref[2].to_floats();
  ASSERT_EQ(gd.size(), rd.size());
  for (size_t i = 0; i < gd.size(); ++i) EXPECT_NEAR(gd[i], rd[i], 1e-5f * (1.0f + std::abs(rd[i]))) << "compiled D[" << i << "], seed " << seed;
  // The patches are gathered inside the products' groups; X's quantization reads X once a group.
  const Graph& pg = r.model.graph;
  for (const auto& g : r.plan.groups) {
    bool product = false, gather = false, quantize = false;
    for (int n : g.group.nodes) {
      const Node& node = pg.nodes()[static_cast<size_t>(n)];
      product = product || (node.op == "MatMul" && pg.value(node.outputs[0]).dtype == DType::kI32);
      gather = gather || node.op == "Gather";
      quantize = quantize || node.op == "Round";
    }
    if (gather) {
      EXPECT_TRUE(product) << "the patches are gathered outside a product: " << g.group.pattern;
    }
    if (quantize && !product) {
      for (int n : g.group.nodes) EXPECT_NE(pg.nodes()[static_cast<size_t>(n)].op, "Gather") << "the quantization writes the patches";
    }
  }
}

// A QDQ model's 1x1 convolution whose output, requantized, is padded for the next convolution's
// patches (ResNet-50's layer3.0, quantized by onnxruntime: its plan failed to compile, codegen's
// micro-tiles unable to cover the region of a tile that straddles the padded map's rows, which the
// planner had not looked at): each of the best 64 candidates the planner admits for each group of
// the plan lowers, and the plan compiles and matches the reference.
TEST(Quantization, EveryAdmittedCandidateOfAQuantizedConvolutionChainLowers) {
  const unsigned seed = testing::test_seed();
  std::mt19937 rng(seed);
  constexpr int64_t C = 128, F = 64, S = 28;
  std::uniform_real_distribution<float> xs(-2.0f, 2.0f);
  std::uniform_int_distribution<int> w8(-127, 127);
  std::vector<float> x(C * S * S);
  std::vector<int64_t> w1(F * C), w2(F * F * 9);
  for (auto& e : x) e = xs(rng);
  for (auto& e : w1) e = w8(rng);
  for (auto& e : w2) e = w8(rng);
  OnnxBuilder m(13);
  m.input("X", kFloat, {1, C, S, S}).output("Y", kFloat, {1, F, S / 2, S / 2});
  m.initializer("sx", Tensor::scalar_float(DType::kF32, 0.02f)).initializer("zx", Tensor::from_ints(DType::kU8, {}, std::vector<int64_t>{128}));
  m.initializer("sr", Tensor::scalar_float(DType::kF32, 0.05f)).initializer("zr", Tensor::from_ints(DType::kU8, {}, std::vector<int64_t>{0}));
  m.initializer("W1", Tensor::from_ints(DType::kI8, {F, C, 1, 1}, w1)).initializer("s1", Tensor::scalar_float(DType::kF32, 0.001f));
  m.initializer("W2", Tensor::from_ints(DType::kI8, {F, F, 3, 3}, w2)).initializer("s2", Tensor::scalar_float(DType::kF32, 0.002f));
  m.node("QuantizeLinear", {"X", "sx", "zx"}, {"xq"}, "q_x");
  m.node("DequantizeLinear", {"xq", "sx", "zx"}, {"xd"}, "dq_x");
  m.node("DequantizeLinear", {"W1", "s1"}, {"w1d"}, "dq_w1");
  m.node("DequantizeLinear", {"W2", "s2"}, {"w2d"}, "dq_w2");
  m.node("Conv", {"xd", "w1d"}, {"a"}, "pointwise");
  m.node("Relu", {"a"}, {"r"}, "relu");
  m.node("QuantizeLinear", {"r", "sr", "zr"}, {"rq"}, "q_r");
  m.node("DequantizeLinear", {"rq", "sr", "zr"}, {"rd"}, "dq_r");
  onnx::NodeProto& down = m.node("Conv", {"rd", "w2d"}, {"Y"}, "down");
  OnnxBuilder::attr_ints(down, "pads", {1, 1, 1, 1});
  OnnxBuilder::attr_ints(down, "strides", {2, 2});
  testing::TestDir dir("qdq_chain");
  m.write(dir / "model.onnx");
  const compiler::PipelineResult r = compiler::compile_model(dir / "model.onnx", planner::find_device("h100"), {});
  const std::string what = "seed " + std::to_string(seed);
  int lowered = 0;
  for (const auto& g : r.plan.groups) {  // the best 64 of each group's candidates
    for (const planner::Candidate& cand : planner::tile_candidates(r.model.graph, g.group, planner::find_device("h100"), {64, 2.0})) {
      if (!cand.config.library.empty()) continue;
      EXPECT_NO_THROW(codegen::lower_group(r.model.graph, g.group, cand.config, "k")) << g.group.pattern << " " << cand.config.str();
      ++lowered;
    }
  }
  EXPECT_GT(lowered, 64);
  const std::vector<Tensor> inputs = {Tensor::from_floats(DType::kF32, {1, C, S, S}, x)};
  const std::vector<float> want = reference::run_graph(r.model.graph, inputs)[0].to_floats();
  auto host = backend::make_host_backend();
  runtime::PlanRunner runner(r.bundle, *host);
  EXPECT_EQ(runner.run(inputs)[0].to_floats(), want) << "compiled, " << what;
}

// What the quantization lowerings refuse: a float8 QuantizeLinear with a zero point other than
// zero, a target type no quantization has, per-axis scales of the wrong length, blocks that do
// not tile the axis, a QLinearMatMul into int16; an op of Microsoft's domain is refused naming the
// domain.
TEST(Quantization, RefusalsNameTheNodeAndWhatIsWrong) {
  OnnxBuilder float8(21);
  float8.input("x", kFloat, {4}).output("y", 17, {4});
  float8.initializer("s", Tensor::from_floats(DType::kF32, {}, std::vector<float>{0.5f}));
  float8.initializer("z", Tensor::from_floats(DType::kF8E4M3FN, {}, std::vector<float>{1.0f}));
  float8.node("QuantizeLinear", {"x", "s", "z"}, {"y"}, "culprit");
  testing::expect_refused(float8, "culprit", "must be zero for a float8 QuantizeLinear, it holds 1");
  OnnxBuilder to_int32(21);
  to_int32.input("x", kFloat, {4}).output("y", kInt32, {4});
  to_int32.initializer("s", Tensor::from_floats(DType::kF32, {}, std::vector<float>{0.5f}));
  OnnxBuilder::attr_i(to_int32.node("QuantizeLinear", {"x", "s"}, {"y"}, "culprit"), "output_dtype", kInt32);
  testing::expect_refused(to_int32, "culprit", "QuantizeLinear to int32");
  OnnxBuilder per_axis(13);
  per_axis.input("x", kInt8, {2, 3}).output("y", kFloat, {2, 3});
  per_axis.initializer("s", Tensor::from_floats(DType::kF32, {2}, std::vector<float>{0.5f, 2.0f}));
  per_axis.node("DequantizeLinear", {"x", "s"}, {"y"}, "culprit");  // axis 1 has 3 entries
  testing::expect_refused(per_axis, "culprit", "per-axis quantization wants 3 values, one per index of axis 1");
  OnnxBuilder blocks(21);
  blocks.input("x", kFloat, {2, 6}).output("y", kUInt8, {2, 6});
  blocks.initializer("s", Tensor::from_floats(DType::kF32, {2, 2}, std::vector<float>{1, 2, 3, 4}));
  onnx::NodeProto& blocked = blocks.node("QuantizeLinear", {"x", "s"}, {"y"}, "culprit");
  OnnxBuilder::attr_i(blocked, "axis", 1);
  OnnxBuilder::attr_i(blocked, "block_size", 2);  // 6 / 2 = 3 blocks, not 2
  testing::expect_refused(blocks, "culprit", "blocks of 2 along axis 1 of the input of shape 2x6 want 3 there");
  OnnxBuilder wide(10);
  wide.input("a", kInt8, {2, 2}).input("b", kInt8, {2, 2}).output("y", 5, {2, 2});
  const Tensor one = Tensor::from_floats(DType::kF32, {}, std::vector<float>{1.0f});
  wide.initializer("s", one).initializer("z", Tensor::from_ints(DType::kI8, {}, std::vector<int64_t>{0}));
  wide.initializer("yz", Tensor::from_ints(DType::kI16, {}, std::vector<int64_t>{0}));
  wide.node("QLinearMatMul", {"a", "s", "z", "b", "s", "z", "s", "yz"}, {"y"}, "culprit");
  testing::expect_refused(wide, "culprit", "QLinearMatMul quantizes to int8 or uint8, not int16");
  OnnxBuilder microsoft(13);
  microsoft.opset_import("com.microsoft", 1).input("a", kUInt8, {4}).output("y", kUInt8, {4});
  microsoft.node("QLinearAdd", {"a", "a", "a", "a", "a", "a", "a", "a"}, {"y"}, "culprit").set_domain("com.microsoft");
  testing::expect_refused(microsoft, "culprit", "of domain 'com.microsoft'");
}

}  // namespace
}  // namespace fusetune
