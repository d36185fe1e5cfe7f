// The quantization operators (importer/lower_quant.h): integer contractions exact where float
// sums are not, on the reference interpreter and compiled (the plan run on the host executor),
// and what the lowering refuses, each refusal naming the node and what is wrong.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "compiler/pipeline.h"
#include "core/error.h"
#include "importer/importer.h"
#include "import_check.h"
#include "onnx_builder.h"
#include "reference/interpreter.h"
#include "runtime/plan_runner.h"
#include "test_dir.h"
#include "test_seed.h"

namespace fusetune {
namespace {

using testing::OnnxBuilder;

constexpr int kFloat = 1, kUint8 = 2, kInt8 = 3, kInt32 = 6;

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
  m.input("A", kUint8, {M, K}).input("X", kUint8, {1, C, H, W}).output("Y", kInt32, {M, N}).output("Z", kInt32, {1, F, H, W});
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
  for (const auto& g : r.plan.groups) {
    EXPECT_EQ(g.candidates[g.chosen].config.reduce_step, 0) << g.group.pattern << ": an integer contraction was staged";
  }
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
  blocks.input("x", kFloat, {2, 6}).output("y", kUint8, {2, 6});
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
  microsoft.opset_import("com.microsoft", 1).input("a", kUint8, {4}).output("y", kUint8, {4});
  microsoft.node("QLinearAdd", {"a", "a", "a", "a", "a", "a", "a", "a"}, {"y"}, "culprit").set_domain("com.microsoft");
  testing::expect_refused(microsoft, "culprit", "of domain 'com.microsoft'");
}

}  // namespace
}  // namespace fusetune
