// Library calls (planner/library_call.h): which groups cuBLASLt and cuDNN can run whole, the
// library candidate in the planner's lists, the host backend's equivalent GEMM and convolution
// against the reference on odd shapes (float32 and float16), the TF32 mode under the TF32
// precision policy, and plan bundles whose plans take library calls (GEMMs; every convolution of
// exported CNNs), run through the plan runner against the reference interpreter.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "backend/backend.h"
#include "backend/cudnn.h"
#include "backend/verify.h"
#include "codegen/lower_group.h"
#include "compiler/compile_bundle.h"
#include "core/error.h"
#include "graph_helpers.h"
#include "planner/device.h"
#include "planner/library_call.h"
#include "planner/library_match.h"
#include "planner/select.h"
#include "planner/tiling.h"
#include "reference/interpreter.h"
#include "runtime/bundle.h"
#include "runtime/plan_runner.h"
#include "tests/unit/test_seed.h"
#include "unit/cli_run.h"
#include "unit/plan_check.h"

namespace fusetune {
namespace {

using testing::add_input;
using testing::add_op;
using testing::expect_plan_matches_reference;
using testing::random_constant;

struct OneGroup {
  Graph g;
  planner::FusionGroup group;
};

// Y = [Relu](A·B [+ bias] [+ residual]) over every node of a fresh graph.
OneGroup make_gemm(DType dt, int64_t batch, int64_t m, int64_t n, int64_t k, bool b_batched, bool bias, bool residual,
               bool relu, bool residual_first = false) {
  OneGroup t;
  Graph& g = t.g;
  Shape a_shape = {m, k}, b_shape = {k, n}, y_shape = {m, n};
  if (batch > 1) {
    a_shape.insert(a_shape.begin(), batch);
    y_shape.insert(y_shape.begin(), batch);
    if (b_batched) b_shape.insert(b_shape.begin(), batch);
  }
  const int a = add_input(g, "a", dt, a_shape);
  const int b = random_constant(g, "b", dt, b_shape, 3);
  int y = add_op(g, "MatMul", {a, b});
  const int bias_v = bias ? random_constant(g, "bias", dt, {n}, 5) : -1;
  const int res_v = residual ? add_input(g, "res", dt, y_shape) : -1;
  if (residual_first && residual) y = add_op(g, "Add", {res_v, y});
  if (bias) y = add_op(g, "Add", {y, bias_v});
  if (!residual_first && residual) y = add_op(g, "Add", {y, res_v});
  if (relu) y = add_op(g, "Relu", {y});
  g.outputs() = {y};
  t.group = testing::whole_graph_group(g);
  return t;
}

TEST(LibraryCall, MatchesTheGemmEpiloguePatternsAndNothingElse) {
  const OneGroup plain = make_gemm(DType::kF32, 1, 7, 5, 3, false, false, false, false);
  auto m = planner::match_library_call(plain.g, plain.group);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->call.m, 7);
  EXPECT_EQ(m->call.n, 5);
  EXPECT_EQ(m->call.k, 3);
  EXPECT_EQ(m->inputs.size(), 2u);
  const OneGroup full = make_gemm(DType::kF32, 3, 4, 6, 8, true, true, true, true, /*residual_first=*/true);
  m = planner::match_library_call(full.g, full.group);
  ASSERT_TRUE(m.has_value());
  EXPECT_TRUE(m->call.bias && m->call.residual && m->call.relu && m->call.b_batched);
  EXPECT_EQ(m->call.batch, 3);
  ASSERT_EQ(m->inputs.size(), 4u);
  EXPECT_EQ(full.g.value(m->inputs[2]).name, "bias");
  EXPECT_EQ(full.g.value(m->inputs[3]).name, "res");
  EXPECT_EQ(planner::LibraryCall::from_json(m->call.to_json()), m->call);

  // Not a library pattern: a bias along m, a Transpose inside, an integer GEMM, an exported intermediate.
  {
    Graph g;
    const int a = add_input(g, "a", DType::kF32, {4, 3});
    const int b = random_constant(g, "b", DType::kF32, {3, 5}, 1);
    const int col = random_constant(g, "col", DType::kF32, {4, 1}, 2);
    g.outputs() = {add_op(g, "Add", {add_op(g, "MatMul", {a, b}), col})};
    planner::FusionGroup grp{{0, 1}, {}, {}, "", 0, {}};
    planner::describe_group(g, grp);
    EXPECT_FALSE(planner::match_library_call(g, grp).has_value()) << "bias along m";
  }
  {
    Graph g;
    const int a = add_input(g, "a", DType::kF32, {3, 4});
    const int b = random_constant(g, "b", DType::kF32, {3, 5}, 1);
    Attributes perm;
    perm.set("perm", std::vector<int64_t>{1, 0});
    g.outputs() = {add_op(g, "MatMul", {add_op(g, "Transpose", {a}, perm), b})};
    planner::FusionGroup grp{{0, 1}, {}, {}, "", 0, {}};
    planner::describe_group(g, grp);
    EXPECT_FALSE(planner::match_library_call(g, grp).has_value()) << "a transposed operand inside the group";
  }
  {
    Graph g;
    const int a = add_input(g, "a", DType::kF32, {4, 3});
    const int b = random_constant(g, "b", DType::kF32, {3, 5}, 1);
    const int y = add_op(g, "MatMul", {a, b});
    const int r = add_op(g, "Relu", {y});
    g.outputs() = {y, r};
    planner::FusionGroup grp{{0, 1}, {}, {}, "", 0, {}};
    planner::describe_group(g, grp);
    EXPECT_FALSE(planner::match_library_call(g, grp).has_value()) << "the product is exported too";
  }
}

// The group lowered as a call of `library` over its whole output.
codegen::LoweredKernel lower_as(const OneGroup& t, const std::string& library) {
  planner::TileConfig cfg;
  cfg.tile = t.g.value(t.g.outputs()[0]).shape;
  cfg.library = library;
  return codegen::lower_group(t.g, t.group, cfg, "lib");
}

// A lowered library call run on the host backend and checked against the reference.
backend::VerifyResult verify_on_host(const OneGroup& t, const codegen::LoweredKernel& lk, std::mt19937& rng,
                                     const backend::VerifyOptions& options = {.redzone_bytes = 256}) {
  auto backend = backend::make_host_backend();
  auto module = backend->load(std::vector<codegen::Kernel>{lk.kernel});
  return backend::verify_kernel(t.g, t.group, "lib", lk.inputs, lk.outputs, *backend, *module, rng, options);
}

// A convolution group: Conv(X, W [, bias]) [+ bias as an Add] [+ residual] [Relu | Clip(lo, hi)].
struct ConvCase {
  DType dt = DType::kF32;
  int64_t n = 1, c = 3, h = 9, w = 7, k = 4, r = 3, s = 3, groups = 1;
  std::vector<int64_t> strides{1, 1}, dilations{1, 1}, pads{1, 1, 1, 1};
  bool conv_bias = true;  // Conv's third input
  bool add_bias = false;  // an Add of a [1, K, 1, 1] constant
  bool residual = false;
  std::string act;  // "", "Relu" or "Clip"
  float lo = 0.0f, hi = 6.0f;
  std::string str() const {
    std::ostringstream o;
    o << dtype_name(dt) << " n" << n << " c" << c << " " << h << "x" << w << " k" << k << " " << r << "x" << s << " groups "
      << groups << " strides " << strides[0] << "," << strides[1] << " dilations " << dilations[0] << "," << dilations[1]
      << " pads " << pads[0] << "," << pads[1] << "," << pads[2] << "," << pads[3] << (conv_bias ? " bias" : "")
      << (add_bias ? " add-bias" : "") << (residual ? " residual" : "") << " " << act;
    return o.str();
  }
};

OneGroup make_conv(const ConvCase& c) {
  OneGroup t;
  Graph& g = t.g;
  const int x = add_input(g, "x", c.dt, {c.n, c.c, c.h, c.w});
  std::vector<int> ins = {x, random_constant(g, "w", c.dt, {c.k, c.c / c.groups, c.r, c.s}, 3)};
  if (c.conv_bias) ins.push_back(random_constant(g, "b", c.dt, {c.k}, 5));
  int y = add_op(g, "Conv", ins,
                 testing::attrs({{"strides", c.strides}, {"dilations", c.dilations}, {"pads", c.pads}, {"group", c.groups}}));
  if (c.add_bias) y = add_op(g, "Add", {y, random_constant(g, "b2", c.dt, {1, c.k, 1, 1}, 7)});
  if (c.residual) y = add_op(g, "Add", {add_input(g, "res", c.dt, g.value(y).shape), y});
  if (c.act == "Relu") y = add_op(g, "Relu", {y});
  if (c.act == "Clip") y = add_op(g, "Clip", {y}, testing::attrs({{"min", c.lo}, {"max", c.hi}}));
  g.outputs() = {y};
  t.group = testing::whole_graph_group(g);
  return t;
}

TEST(LibraryCall, IsAlwaysAmongTheCandidatesOfAMatchingGroup) {
  const OneGroup t = make_gemm(DType::kF32, 1, 64, 64, 64, false, true, false, true);
  planner::TilingOptions opt;
  opt.top_k = 1;
  opt.library_algorithms = 1;
  const auto cands = planner::tile_candidates(t.g, t.group, planner::find_device("h100"), opt);
  ASSERT_EQ(cands.size(), 1u);
  EXPECT_EQ(cands[0].config.library, "cublasLt");
  EXPECT_EQ(cands[0].config.str(), "library=cublasLt");
  EXPECT_TRUE(cands[0].cost.valid);
  // Each of the library's first three ranked algorithms is a candidate, each displacing the last
  // generated one: the list keeps its length.
  opt.top_k = 6;
  opt.library_algorithms = 3;
  const auto more = planner::tile_candidates(t.g, t.group, planner::find_device("h100"), opt);
  std::vector<std::string> library;
  for (const planner::Candidate& c : more) {
    if (!c.config.library.empty()) library.push_back(c.config.str());
  }
  EXPECT_EQ(library, (std::vector<std::string>{"library=cublasLt", "library=cublasLt algo=1", "library=cublasLt algo=2"}));
  EXPECT_EQ(more.size(), 6u);
  // The ranked choice travels with the call and comes back; a negative one is refused.
  const auto match = planner::match_library_call(t.g, t.group);
  std::string why;
  const auto second = planner::library_call(match->call, planner::kCublasLt, 1, &why);
  ASSERT_TRUE(second.has_value()) << why;
  EXPECT_EQ(planner::LibraryCall::from_json(second->to_json()).algorithm, 1);
  EXPECT_FALSE(planner::library_call(match->call, planner::kCublasLt, -1, &why).has_value());
  planner::TileConfig cfg = more[0].config;
  for (const planner::Candidate& c : more) {
    if (c.config.str() == "library=cublasLt algo=2") cfg = c.config;
  }
  EXPECT_EQ(planner::LibraryCall::from_json(codegen::lower_group(t.g, t.group, cfg, "lib").kernel.library).algorithm, 2);
}

// What the second H200 lease's tune taught the model (bench/model_vs_measured): on BERT-base
// float16's projections at sequence 128, cuBLASLt measured 1.3x to 1.6x faster than every generated
// candidate (7.7 against 12.2 µs at 128 x 768 x 3,072; 6.6 against 9.0 at 128 x 768 x 768), and on
// its batched attention scores (12 heads of 128 x 64 x 128) the generated kernel measured faster
// (4.7 against 5.1). The model's first candidate follows those measurements; the library's rates
// (kCublasLtRates) put its calls on the generated forms' scale.
TEST(LibraryCall, TheModelPicksCublasLtWhereTheH200MeasuredItFasterAndNotElsewhere) {
  const planner::Device h200 = planner::find_device("h200");
  planner::TilingOptions opt;
  opt.top_k = 4;
  const auto first = [&](const OneGroup& t) { return planner::tile_candidates(t.g, t.group, h200, opt).front().config; };
  const OneGroup ffn = make_gemm(DType::kF16, 1, 128, 3072, 768, false, false, false, false);
  EXPECT_EQ(first(ffn).library, "cublasLt");
  EXPECT_EQ(first(make_gemm(DType::kF16, 1, 128, 768, 768, false, false, false, false)).library, "cublasLt");
  const planner::TileConfig scores = first(make_gemm(DType::kF16, 12, 128, 128, 64, true, false, false, false));
  EXPECT_TRUE(scores.library.empty()) << scores.str();
  EXPECT_TRUE(scores.mma) << scores.str();
  // The rates themselves: the fitted memory efficiency and setup of cuBLASLt, cuDNN's as they were.
  int64_t bytes = 0;
  const double us = planner::library_cost_us(planner::match_library_call(ffn.g, ffn.group)->call, h200, 2.0, &bytes);
  EXPECT_EQ(bytes, 2 * (128 * 768 + 768 * 3072 + 128 * 3072));
  // Bandwidth-bound at 5.7 MB: 55% of the H200's 4.8 TB/s, 1 µs of setup, 2 µs of launch.
  EXPECT_NEAR(us, 2.0 + 1.0 + 5701632.0 / (4800.0 * 1e3 * 0.55), 1e-9);
}

// No generated form is modeled to keep the tensor cores busier than the tuned library: every lease
// measured cuBLAS at 0.77 of the tensor peak on a 4096^3 product (kTensorSustained), yet generated
// wgmma kernels were charged the whole peak, 1.43x cuBLASLt's rate, so that TinyLlama's head (512 x 2,048
// by 2,048 x 32,000, compute-bound) took a generated wgmma kernel modeled at 86.8 µs over cuBLASLt
// at 99.9 on the H200, where the second lease measured its wgmma kernels 2.1x slower than
// cuBLASLt's on BERT's 128 x 768 x 3,072. Now the head's first candidate is the library, and each
// generated tensor-core candidate is charged at least its arithmetic at the sustained share of its
// instruction's rate.
TEST(LibraryCall, NoGeneratedFormIsModeledToUseTheTensorCoresBetterThanCublasLt) {
  const planner::Device h200 = planner::find_device("h200");
  Graph g;
  const int x = add_input(g, "x", DType::kF16, {512, 2048});
  const int w = g.add_constant("w", Tensor::from_bytes(DType::kF16, {2048, 32000}, std::vector<std::byte>(2048 * 32000 * 2)));
  g.outputs() = {add_op(g, "MatMul", {x, w})};
  planner::TilingOptions opt;
  opt.top_k = 12;
  const auto cands = planner::tile_candidates(g, testing::whole_graph_group(g), h200, opt);
  ASSERT_FALSE(cands.empty());
  EXPECT_EQ(cands.front().config.library, "cublasLt") << cands.front().config.str();
  const double flops = 2.0 * 512 * 2048 * 32000;
  int generated = 0;
  for (const planner::Candidate& c : cands) {
    if (!c.config.library.empty() || !c.config.mma) continue;
    ++generated;
    const double rate = c.config.wgmma ? h200.fp16_tensor_tflops : h200.mma_sync_fp16_tflops;
    EXPECT_GE(c.cost.modeled_us, flops / (planner::kTensorSustained * rate * 1e6)) << c.config.str();
  }
  EXPECT_GT(generated, 0);
}

TEST(LibraryCall, HostGemmMatchesTheReferenceOnOddShapes) {
  const unsigned seed = testing::test_seed();
  std::mt19937 rng(seed);
  struct GemmCase {
    DType dt;
    int64_t batch, m, n, k;
    bool b_batched, bias, residual, relu;
  };
  const std::vector<GemmCase> cases = {
      {DType::kF32, 1, 1, 1, 1, false, false, false, false},  {DType::kF32, 1, 7, 5, 3, false, true, false, false},
      {DType::kF32, 1, 33, 65, 100, false, true, true, true}, {DType::kF32, 3, 7, 13, 9, false, true, false, true},
      {DType::kF32, 2, 17, 3, 1000, true, false, true, false}, {DType::kF16, 1, 16, 24, 40, false, true, false, true},
      {DType::kF16, 2, 5, 7, 33, true, true, true, false},
  };
  for (const GemmCase& c : cases) {
    const OneGroup t = make_gemm(c.dt, c.batch, c.m, c.n, c.k, c.b_batched, c.bias, c.residual, c.relu);
    const codegen::LoweredKernel lk = lower_as(t, planner::kCublasLt);
    EXPECT_NE(codegen::to_text(lk.kernel).find("library call"), std::string::npos);
    const backend::VerifyResult v = verify_on_host(t, lk, rng);
    EXPECT_TRUE(v.ok) << dtype_name(c.dt) << " batch " << c.batch << " m " << c.m << " n " << c.n << " k " << c.k << ": "
                      << v.detail;
  }
}

// cuBLASLt's TF32 mode (the TF32 precision policy's library candidate): offered instead of the
// float32 call only under the policy and only for float32, charged at the TF32 tensor peak, carried
// by the call's JSON, and on the host computed on operands rounded to TF32: within TF32's tolerance
// of the reference, beyond float32's on a 1000-deep product.
TEST(LibraryCall, Tf32ModeOnlyUnderThePolicyForFloatThirtyTwo) {
  const planner::Device h100 = planner::find_device("h100");
  const OneGroup big = make_gemm(DType::kF32, 1, 2048, 4096, 1024, false, true, false, true);
  planner::TilingOptions exact, tf32;
  exact.top_k = tf32.top_k = 1;
  exact.library_algorithms = tf32.library_algorithms = 1;
  tf32.tf32 = true;
  const auto plain = planner::tile_candidates(big.g, big.group, h100, exact);
  const auto fast = planner::tile_candidates(big.g, big.group, h100, tf32);
  ASSERT_EQ(plain.size(), 1u);
  ASSERT_EQ(fast.size(), 1u);
  EXPECT_EQ(plain[0].config.str(), "library=cublasLt");
  EXPECT_EQ(fast[0].config.str(), "library=cublasLt-tf32");
  EXPECT_LT(fast[0].cost.modeled_us * 4, plain[0].cost.modeled_us);  // 495 against 67 TFLOP/s
  EXPECT_FALSE(planner::evaluate_tile(big.g, big.group, h100, fast[0].config, exact).valid);
  const OneGroup half = make_gemm(DType::kF16, 1, 64, 64, 64, false, false, false, false);
  planner::TileConfig half_tf32 = fast[0].config;
  half_tf32.tile = {64, 64};
  const planner::Cost refused = planner::evaluate_tile(half.g, half.group, h100, half_tf32, tf32);
  EXPECT_FALSE(refused.valid);
  EXPECT_NE(refused.reject.find("TF32 mode is for float32 calls"), std::string::npos) << refused.reject;
  // The call's JSON carries the mode; a call written before it reads as float32.
  planner::LibraryCall call = planner::match_library_call(big.g, big.group)->call;
  call.tf32 = true;
  EXPECT_TRUE(planner::LibraryCall::from_json(call.to_json()).tf32);
  nlohmann::json old = nlohmann::json::parse(call.to_json());
  old.erase("tf32");
  EXPECT_FALSE(planner::LibraryCall::from_json(old.dump()).tf32);
  old["tf32"] = true;
  old["dtype"] = "float16";
  EXPECT_THROW(planner::LibraryCall::from_json(old.dump()), Error);
  // On the host: TF32's rounding shows on a deep product.
  const OneGroup deep = make_gemm(DType::kF32, 1, 16, 32, 4096, false, true, false, false);
  const codegen::LoweredKernel lk = lower_as(deep, planner::kCublasLtTf32);
  EXPECT_TRUE(planner::LibraryCall::from_json(lk.kernel.library).tf32);
  EXPECT_TRUE(backend::tf32_kernel(deep.g, deep.group, std::string("library=") + planner::kCublasLtTf32));
  EXPECT_TRUE(backend::tf32_kernel(deep.g, deep.group, std::string("library=") + planner::kCublasLtTf32 + " algo=2"));
  const unsigned seed = testing::test_seed();
  std::mt19937 rng(seed), same(seed);
  backend::VerifyOptions at_tf32;
  at_tf32.tf32 = true;
  const backend::VerifyResult ok = verify_on_host(deep, lk, rng, at_tf32);
  EXPECT_TRUE(ok.ok) << ok.detail;
  EXPECT_FALSE(verify_on_host(deep, lk, same, {}).ok);
  EXPECT_EQ(round_to_tf32(1.0f + 0x1.0p-11f), 1.0f + 0x1.0p-10f);  // a tie, away from zero
  EXPECT_EQ(round_to_tf32(-(1.0f + 0x1.8p-12f)), -1.0f);
}

TEST(LibraryCall, APlanThatTakesTheLibraryCallRunsAndMatchesTheReference) {
  // Two GEMM layers: the measurements say the library call is the fastest for every group it can
  // run (1 µs), a generated kernel taking 100 µs a product it computes (10 without one), so the
  // plan splits the two products the back-to-back rule fused and calls the library.
  Graph g;
  const int x = add_input(g, "x", DType::kF32, {1, 24, 40});
  int h = add_op(g, "MatMul", {x, random_constant(g, "w1", DType::kF32, {40, 64}, 1)});
  h = add_op(g, "Relu", {add_op(g, "Add", {h, random_constant(g, "b1", DType::kF32, {64}, 2)})});
  h = add_op(g, "MatMul", {h, random_constant(g, "w2", DType::kF32, {64, 40}, 3)});
  h = add_op(g, "Add", {add_op(g, "Add", {h, random_constant(g, "b2", DType::kF32, {40}, 4)}), x});
  g.outputs() = {add_op(g, "Sigmoid", {h})};
  const planner::Device dev = planner::find_device("h100");
  const planner::ModelPlan modeled = planner::plan_model(g, dev);
  planner::Measurements fast;
  for (const planner::GroupPlan& gp : modeled.compared) {
    int products = 0;
    for (int n : gp.group.nodes) products += g.nodes()[static_cast<size_t>(n)].op == "MatMul";
    for (const planner::Candidate& c : gp.candidates) {
      fast[{gp.signature, c.config.str()}] = c.config.library.empty() ? (products > 0 ? 100.0 * products : 10.0) : 1.0;
    }
  }
  const planner::ModelPlan plan = planner::plan_model(g, dev, {}, &fast);
  int library_groups = 0;
  for (const planner::GroupPlan& gp : plan.groups) library_groups += !gp.candidates[gp.chosen].config.library.empty();
  ASSERT_GE(library_groups, 1) << "no group of the plan took the library call";
  const runtime::Bundle bundle = compiler::compile_bundle(g, plan, dev, "gemms");
  EXPECT_NE(bundle.manifest.find("\"library\""), std::string::npos);
  expect_plan_matches_reference(bundle, g, 11);
}

// GELU written out after MatMul + bias, as exporters spell it: `form` "torch" is GPT-2's gelu_new
// as TorchScript exports it (0.5 x, x^3 by Pow, tanh), "sigmoid" the same function as
// x sigmoid(2 sqrt(2/pi) (x + 0.044715 x x x)), "erf" the exact GELU (BERT's), "near" the tanh
// form with 0.045 for 0.044715, "float out" the torch form without the Cast back. float16 computes
// the GELU in float32 between two Casts.
OneGroup make_gemm_gelu(DType dt, int64_t m, int64_t n, int64_t k, const std::string& form) {
  OneGroup t;
  Graph& g = t.g;
  const auto scalar = [&](const char* name, float v) { return g.add_constant(name, Tensor::scalar_float(DType::kF32, v)); };
  const int a = add_input(g, "a", dt, {m, k});
  int x = add_op(g, "MatMul", {a, random_constant(g, "b", dt, {k, n}, 3)});
  x = add_op(g, "Add", {x, random_constant(g, "bias", dt, {n}, 5)});
  if (dt != DType::kF32) x = add_op(g, "Cast", {x}, testing::attrs({{"to", int64_t{1}}}));
  const float c = 0.7978845608f;
  int y = -1;
  if (form == "sigmoid") {
    const int cube = add_op(g, "Mul", {add_op(g, "Mul", {x, x}), x});
    const int inner = add_op(g, "Add", {x, add_op(g, "Mul", {cube, scalar("k", 0.044715f)})});
    y = add_op(g, "Mul", {x, add_op(g, "Sigmoid", {add_op(g, "Mul", {inner, scalar("c2", 2 * c)})})});
  } else if (form == "erf") {
    const int e = add_op(g, "Erf", {add_op(g, "Div", {x, scalar("sqrt2", 1.4142135f)})});
    y = add_op(g, "Mul", {add_op(g, "Mul", {x, add_op(g, "Add", {e, scalar("one", 1.0f)})}), scalar("half", 0.5f)});
  } else {
    const int half = add_op(g, "Mul", {scalar("half", 0.5f), x});
    const int cube = add_op(g, "Pow", {x, scalar("three", 3.0f)});
    const int inner = add_op(g, "Add", {x, add_op(g, "Mul", {scalar("k", form == "near" ? 0.045f : 0.044715f), cube})});
    const int th = add_op(g, "Tanh", {add_op(g, "Mul", {scalar("c", c), inner})});
    y = add_op(g, "Mul", {half, add_op(g, "Add", {scalar("one", 1.0f), th})});
  }
  if (dt != DType::kF32 && form != "float out") y = add_op(g, "Cast", {y}, testing::attrs({{"to", int64_t{10}}}));
  g.outputs() = {y};
  t.group = testing::whole_graph_group(g);
  return t;
}

// cuBLASLt's GELU epilogue computes GELU's tanh approximation: a group ending in that function,
// however spelled, is a library call with `gelu`, verified on the host against the reference;
// the exact GELU and a near miss of the approximation are not (they stay generated, or split).
TEST(LibraryCall, GeluItsTanhApproximationInAnySpellingIsCublasLtsGeluEpilogue) {
  const unsigned seed = testing::test_seed();
  std::mt19937 rng(seed);
  for (const DType dt : {DType::kF32, DType::kF16}) {
    for (const std::string form : {"torch", "sigmoid"}) {
      const OneGroup t = make_gemm_gelu(dt, 17, 24, 40, form);
      const auto m = planner::match_library_call(t.g, t.group);
      ASSERT_TRUE(m.has_value()) << form << " " << dtype_name(dt);
      EXPECT_TRUE(m->call.gelu && m->call.bias && !m->call.relu && !m->call.residual) << form;
      EXPECT_EQ(m->output, t.g.outputs()[0]);
      EXPECT_EQ(planner::LibraryCall::from_json(m->call.to_json()), m->call);
      const backend::VerifyResult v = verify_on_host(t, lower_as(t, planner::kCublasLt), rng);
      EXPECT_TRUE(v.ok) << form << " " << dtype_name(dt) << ": " << v.detail;
    }
    // ("float out": float16's GELU computed in float32 and left there: the call's output type is not Y's.)
    for (const std::string form : {"erf", "near", "float out"}) {
      if (form == "float out" && dt == DType::kF32) continue;
      const OneGroup t = make_gemm_gelu(dt, 17, 24, 40, form);
      EXPECT_FALSE(planner::match_library_call(t.g, t.group).has_value()) << form << " " << dtype_name(dt);
    }
  }
  // The JSON refuses GELU beside a ReLU, and for a convolution.
  planner::LibraryCall call;
  call.m = call.n = call.k = 4;
  call.gelu = call.relu = true;
  EXPECT_THROW(planner::LibraryCall::from_json(call.to_json()), Error);
  call.relu = false;
  call.op = planner::LibraryOp::kConv;
  call.library = planner::kCudnn;
  call.conv = {.c = 1, .h = 1, .w = 1, .k = 1, .r = 1, .s = 1};
  EXPECT_THROW(planner::LibraryCall::from_json(call.to_json()), Error);
  // GPT-2 (gelu_new, exported by TorchScript): fusion puts each layer's up-projection with its GELU
  // in the middle of a group (after the attention's projection and a LayerNorm, before the down
  // projection). Where the library calls measure fastest, the plan runs each of those as one
  // cuBLASLt call with the GELU epilogue, the LayerNorms generated between the calls, and matches
  // the reference.
  const Graph gpt2 = testing::load_test_model("gpt2");
  const planner::Device dev = planner::find_device("h100");
  const planner::ModelPlan modeled = planner::plan_model(gpt2, dev);
  planner::Measurements fast;  // a library call 1 us, generated code 100 us a node
  for (const planner::GroupPlan& gp : modeled.compared) {
    for (const planner::Candidate& c : gp.candidates) {
      fast[{gp.signature, c.config.str()}] = c.config.library.empty() ? 100.0 * static_cast<double>(gp.group.nodes.size()) : 1.0;
    }
  }
  const planner::ModelPlan plan = planner::plan_model(gpt2, dev, {}, &fast);
  int gelu_calls = 0;
  for (const planner::GroupPlan& gp : plan.groups) {
    if (gp.candidates[gp.chosen].config.library.empty()) continue;
    const auto m = planner::match_library_call(gpt2, gp.group);
    ASSERT_TRUE(m.has_value()) << gp.group.pattern;
    gelu_calls += m->call.gelu ? 1 : 0;
  }
  EXPECT_EQ(gelu_calls, 2) << "GPT-2's two layers";
  expect_plan_matches_reference(compiler::compile_bundle(gpt2, plan, dev, "gpt2"), gpt2, seed);
}

// A fused MatMul + bias + GELU (BERT's FFN up-projection, GELU by erf as exported) whose generated
// kernel measures slow splits into the library call for MatMul + bias and one generated group for
// the GELU, when those two measure faster than the whole and than its single nodes; and stays
// whole when it is the fastest.
TEST(LibraryCall, AFusedGroupSplitsIntoItsLibraryCallAndTheRestWhenThatMeasuresFaster) {
  Graph g;
  const int x = add_input(g, "x", DType::kF32, {1, 16, 32});
  int h = add_op(g, "MatMul", {x, random_constant(g, "w", DType::kF32, {32, 64}, 1)});
  h = add_op(g, "Add", {h, random_constant(g, "b", DType::kF32, {64}, 2)});
  const auto scalar = [&](const char* name, float v) {
    return g.add_constant(name, Tensor::from_floats(DType::kF32, {}, std::vector<float>{v}));
  };
  const int scaled = add_op(g, "Div", {h, scalar("sqrt2", 1.4142135f)});
  const int cdf = add_op(g, "Add", {add_op(g, "Erf", {scaled}), scalar("one", 1.0f)});
  g.outputs() = {add_op(g, "Mul", {add_op(g, "Mul", {h, cdf}), scalar("half", 0.5f)})};
  const planner::Device dev = planner::find_device("h100");
  const planner::ModelPlan modeled = planner::plan_model(g, dev);
  const auto starts_with_matmul = [&](const planner::GroupPlan& gp) { return g.nodes()[static_cast<size_t>(gp.group.nodes.front())].op == "MatMul"; };
  bool weighed_head = false, weighed_tail = false;
  const size_t all_nodes = g.nodes().size();
  for (const planner::GroupPlan& gp : modeled.compared) {
    weighed_head |= gp.group.nodes.size() == 2 && starts_with_matmul(gp);
    weighed_tail |= gp.group.nodes.size() == all_nodes - 2 && !starts_with_matmul(gp);
  }
  ASSERT_TRUE(weighed_head && weighed_tail) << "the library split is among the groups the tuning service measures";
  const auto measure = [&](double whole_us) {
    planner::Measurements m;
    for (const planner::GroupPlan& gp : modeled.compared) {
      for (const planner::Candidate& c : gp.candidates) {
        const size_t n = gp.group.nodes.size();
        m[{gp.signature, c.config.str()}] = !c.config.library.empty() ? 5.0 : n == all_nodes ? whole_us : n == all_nodes - 2 ? 4.0 : 50.0;
      }
    }
    return planner::plan_model(g, dev, {}, &m);
  };
  const planner::ModelPlan slow_whole = measure(100.0);
  ASSERT_EQ(slow_whole.groups.size(), 2u);
  EXPECT_EQ(slow_whole.groups[0].candidates[slow_whole.groups[0].chosen].config.library, planner::kCublasLt);
  EXPECT_EQ(slow_whole.groups[1].group.nodes.size(), all_nodes - 2);
  EXPECT_EQ(slow_whole.split_groups, 1);
  const planner::ModelPlan fast_whole = measure(8.0);
  ASSERT_EQ(fast_whole.groups.size(), 1u);
  EXPECT_EQ(fast_whole.groups[0].group.nodes.size(), all_nodes);
  // The split plan runs and matches the reference.
  const runtime::Bundle bundle = compiler::compile_bundle(g, slow_whole, dev, "ffn");
  expect_plan_matches_reference(bundle, g, 5);
}

// `--libraries`: a plan may leave a library out (a deployment host without cuDNN): its candidates
// are neither listed nor valid, in the planner and through `fusetune plan`; a name that is no
// library is refused with one line naming it.
TEST(LibraryCall, ThePlanCallsOnlyTheLibrariesItMay) {
  const planner::Device h100 = planner::find_device("h100");
  const OneGroup gemm = make_gemm(DType::kF32, 1, 64, 64, 64, false, true, false, true);
  const OneGroup conv = make_conv(ConvCase{});
  const auto libraries = [&](const OneGroup& t, const std::string& list) {
    planner::TilingOptions opt;
    opt.libraries = planner::library_set(list);
    int n = 0;
    for (const planner::Candidate& c : planner::tile_candidates(t.g, t.group, h100, opt)) n += !c.config.library.empty();
    return n;
  };
  EXPECT_EQ(libraries(gemm, "all"), 3);
  EXPECT_EQ(libraries(conv, "all"), 3);
  EXPECT_EQ(libraries(gemm, "cudnn"), 0);
  EXPECT_EQ(libraries(conv, "cudnn"), 3);
  EXPECT_EQ(libraries(conv, "cublasLt"), 0);
  EXPECT_EQ(libraries(gemm, "none"), 0);
  planner::TilingOptions no_cudnn;
  no_cudnn.libraries = {planner::kCublasLt};
  planner::TileConfig lib;
  lib.tile = conv.g.value(conv.g.outputs()[0]).shape;
  lib.library = planner::kCudnn;
  const planner::Cost refused = planner::evaluate_tile(conv.g, conv.group, h100, lib, no_cudnn);
  EXPECT_FALSE(refused.valid);
  EXPECT_NE(refused.reject.find("--libraries"), std::string::npos) << refused.reject;
  EXPECT_THROW(planner::library_set("cublasLt,"), Error);
  EXPECT_THROW(planner::library_set(""), Error);
  // The CLI: library candidates in the plan's lists only where allowed, and a refusal naming the
  // culprit.
  const std::string onnx = std::string(FUSETUNE_SOURCE_DIR) + "/tests/data/models/resnet_small/model.onnx";
  for (const char* list : {"all", "cublasLt", "none"}) {
    const testing::Outcome c = testing::run_cli("plan " + onnx + " --device h100 --json --libraries " + list);
    ASSERT_EQ(c.exit_code, 0) << c.output;
    std::map<std::string, int> listed;  // library candidates by library
    const nlohmann::json plan = nlohmann::json::parse(c.output);
    for (const nlohmann::json& group : plan["groups"]) {
      for (const nlohmann::json& cand : group["candidates"]) {
        if (const std::string library = planner::config_library(cand["config"]); !library.empty()) ++listed[library];
      }
    }
    if (std::string(list) == "all") {
      EXPECT_GT(listed["cudnn"], 0) << "resnet_small's convolutions";
      EXPECT_GT(listed["cublasLt"], 0) << "resnet_small's classifier";
    } else if (std::string(list) == "cublasLt") {
      EXPECT_EQ(listed.count("cudnn"), 0u);
      EXPECT_GT(listed["cublasLt"], 0);
    } else {
      EXPECT_TRUE(listed.empty());
    }
  }
  const testing::Outcome bad = testing::run_cli("plan " + onnx + " --device h100 --libraries cudnn,tensorrt");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("'tensorrt' is not a library"), std::string::npos) << bad.output;
  // --top-k lists; it never changes the plan (at 3 the library's candidates once displaced every
  // generated one, and the plan called cuDNN where the default plan does not).
  const auto plan_with = [&](const std::string& extra) {
    const testing::Outcome o = testing::run_cli("plan " + onnx + " --device h100 --json" + extra);
    EXPECT_EQ(o.exit_code, 0) << o.output;
    return nlohmann::json::parse(o.output);
  };
  const nlohmann::json by_default = plan_with(""), short_list = plan_with(" --top-k 3"), long_list = plan_with(" --top-k 40");
  size_t longest = 0;
  for (const nlohmann::json* p : {&short_list, &long_list}) {
    EXPECT_EQ((*p)["modeled_us"], by_default["modeled_us"]);
    ASSERT_EQ((*p)["groups"].size(), by_default["groups"].size());
    for (size_t i = 0; i < by_default["groups"].size(); ++i) {
      EXPECT_EQ((*p)["groups"][i]["best"], by_default["groups"][i]["best"]) << "group " << i;
      if (p == &short_list) {
        EXPECT_LE((*p)["groups"][i]["candidates"].size(), 3u);
      } else {
        longest = std::max(longest, (*p)["groups"][i]["candidates"].size());
      }
    }
  }
  EXPECT_GT(longest, 12u);
}

TEST(LibraryCall, MatchesTheConvolutionEpiloguePatternsAndNothingElse) {
  const auto match = [](const ConvCase& c) { return planner::match_library_call(make_conv(c).g, make_conv(c).group); };
  {  // ResNet's block end: conv, bias, residual, ReLU; parameters X, W, bias, residual, Y.
    ConvCase c;
    c.residual = true;
    c.act = "Relu";
    const OneGroup t = make_conv(c);
    const auto m = planner::match_library_call(t.g, t.group);
    ASSERT_TRUE(m.has_value()) << c.str();
    EXPECT_EQ(m->call.op, planner::LibraryOp::kConv);
    EXPECT_EQ(m->call.library, planner::kCudnn);
    EXPECT_TRUE(m->call.bias && m->call.residual && m->call.relu);
    EXPECT_EQ(m->call.relu_max, 0.0f);
    EXPECT_EQ(m->call.conv.p(), 9);
    EXPECT_EQ(m->call.conv.q(), 7);
    ASSERT_EQ(m->inputs.size(), 4u);
    EXPECT_EQ(t.g.value(m->inputs[0]).name, "x");
    EXPECT_EQ(t.g.value(m->inputs[3]).name, "res");
    EXPECT_EQ(m->output, t.g.outputs()[0]);
  }
  {  // MobileNetV2's depthwise convolution with ReLU6, strided, asymmetric pads, bias as an Add.
    ConvCase c;
    c.c = c.k = c.groups = 8;
    c.strides = {2, 2};
    c.pads = {0, 1, 1, 0};
    c.conv_bias = false;
    c.add_bias = true;
    c.act = "Clip";
    const auto m = match(c);
    ASSERT_TRUE(m.has_value()) << c.str();
    EXPECT_EQ(m->call.conv.groups, 8);
    EXPECT_EQ(m->call.relu_max, 6.0f);
    EXPECT_TRUE(m->call.bias && !m->call.residual);
    EXPECT_EQ(m->call.conv.p(), 4);
    EXPECT_EQ(m->call.conv.q(), 3);
    // The JSON form carries all of it back.
    EXPECT_EQ(planner::LibraryCall::from_json(m->call.to_json()), m->call);
  }
  {  // float16, dilated, no bias, no epilogue.
    ConvCase c;
    c.dt = DType::kF16;
    c.dilations = {2, 3};
    c.pads = {2, 3, 2, 3};
    c.conv_bias = false;
    const auto m = match(c);
    ASSERT_TRUE(m.has_value()) << c.str();
    EXPECT_FALSE(m->call.bias || m->call.residual || m->call.relu);
  }
  // Not a pattern the call runs: a Clip whose floor is not 0, a bias twice, bfloat16, an
  // activation other than ReLU, a 1-D convolution.
  ConvCase clip_low;
  clip_low.act = "Clip";
  clip_low.lo = -1.0f;
  EXPECT_FALSE(match(clip_low).has_value());
  ConvCase twice;
  twice.add_bias = true;
  EXPECT_FALSE(match(twice).has_value()) << "a second bias";
  ConvCase bf16;
  bf16.dt = DType::kBF16;
  EXPECT_FALSE(match(bf16).has_value());
  {  // A trailing Reshape (an image flattened for a product that follows) renames the library's
     // output; a Reshape before the ReLU is no epilogue the call runs.
    ConvCase c;
    c.act = "Relu";
    OneGroup t = make_conv(c);
    const Shape y = t.g.value(t.g.outputs()[0]).shape;
    Attributes flat;
    flat.set("shape", std::vector<int64_t>{y[0], y[1], y[2] * y[3]});
    const int r = add_op(t.g, "Reshape", {t.g.outputs()[0]}, flat);
    t.g.outputs() = {r};
    t.group.nodes.push_back(static_cast<int>(t.g.nodes().size()) - 1);
    planner::describe_group(t.g, t.group);
    const auto m = planner::match_library_call(t.g, t.group);
    ASSERT_TRUE(m.has_value());
    EXPECT_TRUE(m->call.relu);
    EXPECT_EQ(m->output, r);
    OneGroup mid = make_conv(ConvCase{});
    const int before = add_op(mid.g, "Reshape", {mid.g.outputs()[0]}, flat);
    mid.g.outputs() = {add_op(mid.g, "Relu", {before})};
    for (int k : {1, 2}) mid.group.nodes.push_back(static_cast<int>(mid.g.nodes().size()) - 3 + k);
    planner::describe_group(mid.g, mid.group);
    EXPECT_FALSE(planner::match_library_call(mid.g, mid.group).has_value());
  }
  {
    ConvCase c;
    OneGroup t = make_conv(c);
    const int y = add_op(t.g, "Sigmoid", {t.g.outputs()[0]});
    t.g.outputs() = {y};
    t.group.nodes.push_back(static_cast<int>(t.g.nodes().size()) - 1);
    planner::describe_group(t.g, t.group);
    EXPECT_FALSE(planner::match_library_call(t.g, t.group).has_value());
  }
  {
    Graph g;
    const int x = add_input(g, "x", DType::kF32, {1, 3, 20});
    g.outputs() = {add_op(g, "Conv", {x, random_constant(g, "w", DType::kF32, {4, 3, 3}, 1)},
                          testing::attrs({{"strides", std::vector<int64_t>{1}}, {"dilations", std::vector<int64_t>{1}},
                                          {"pads", std::vector<int64_t>{0, 0}}, {"group", int64_t{1}}}))};
    planner::FusionGroup group;
    group.nodes = {0};
    planner::describe_group(g, group);
    EXPECT_FALSE(planner::match_library_call(g, group).has_value());
  }
  // A GEMM library name does not run a convolution, nor cuDNN a GEMM.
  std::string why;
  EXPECT_FALSE(planner::library_call(match(ConvCase{})->call, planner::kCublasLt, 0, &why).has_value());
  EXPECT_NE(why.find("does not run this group's convolution"), std::string::npos) << why;
  const OneGroup gemm = make_gemm(DType::kF32, 1, 8, 8, 8, false, false, false, false);
  EXPECT_FALSE(planner::library_call(planner::match_library_call(gemm.g, gemm.group)->call, planner::kCudnn, 0, &why).has_value());
  // Calls that cannot be: the error names the field.
  nlohmann::json bad = nlohmann::json::parse(match(ConvCase{})->call.to_json());
  bad["conv"]["groups"] = 2;
  try {
    planner::LibraryCall::from_json(bad.dump());
    ADD_FAILURE() << "3 input channels in 2 groups was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("2 groups do not divide the channels"), std::string::npos) << e.what();
  }
  bad = nlohmann::json::parse(match(ConvCase{})->call.to_json());
  bad["op"] = "gemm";
  EXPECT_THROW(planner::LibraryCall::from_json(bad.dump()), Error);
}

TEST(LibraryCall, HostConvolutionMatchesTheReferenceOnOddShapes) {
  const unsigned seed = testing::test_seed();
  std::mt19937 rng(seed);
  std::vector<ConvCase> cases(9);
  cases[1].n = 2, cases[1].c = 5, cases[1].k = 7, cases[1].strides = {2, 3}, cases[1].pads = {0, 2, 1, 0}, cases[1].act = "Relu";
  cases[2].c = cases[2].k = cases[2].groups = 6, cases[2].pads = {1, 1, 1, 1}, cases[2].act = "Clip";  // depthwise
  cases[2].conv_bias = false, cases[2].add_bias = true;
  cases[3].c = 6, cases[3].k = 9, cases[3].groups = 3, cases[3].dilations = {2, 1}, cases[3].residual = true;
  cases[4].r = cases[4].s = 1, cases[4].pads = {0, 0, 0, 0}, cases[4].c = 17, cases[4].k = 13, cases[4].residual = true;
  cases[4].act = "Relu";
  cases[5].dt = DType::kF16, cases[5].c = 8, cases[5].k = 16, cases[5].act = "Clip", cases[5].hi = 0.5f;
  cases[6].dt = DType::kF16, cases[6].c = cases[6].k = cases[6].groups = 4, cases[6].strides = {2, 2}, cases[6].residual = true;
  cases[7].h = 1, cases[7].w = 1, cases[7].r = cases[7].s = 1, cases[7].pads = {0, 0, 0, 0}, cases[7].c = 64, cases[7].k = 3;
  cases[8].r = 5, cases[8].s = 2, cases[8].h = 4, cases[8].w = 3, cases[8].pads = {2, 0, 3, 1}, cases[8].conv_bias = false;
  for (const ConvCase& c : cases) {
    const OneGroup t = make_conv(c);
    ASSERT_TRUE(planner::match_library_call(t.g, t.group).has_value()) << c.str();
    const backend::VerifyResult v = verify_on_host(t, lower_as(t, planner::kCudnn), rng);
    EXPECT_TRUE(v.ok) << c.str() << ": " << v.detail;
  }
}

// The cuDNN candidate is in every matching group's list; under the TF32 policy a float32
// convolution's is cuDNN's TF32 mode, charged at the TF32 peak and rounded as TF32 on the host.
TEST(LibraryCall, ConvolutionGroupsGetTheCudnnCandidateInEitherPrecision) {
  const planner::Device h100 = planner::find_device("h100");
  ConvCase big;
  big.c = 256, big.k = 256, big.h = big.w = 56, big.act = "Relu";
  const OneGroup t = make_conv(big);
  planner::TilingOptions exact, tf32;
  exact.top_k = tf32.top_k = 4;
  exact.library_algorithms = tf32.library_algorithms = 1;
  tf32.tf32 = true;
  const auto library = [](const std::vector<planner::Candidate>& cands) {
    std::vector<std::string> names;
    for (const planner::Candidate& c : cands) {
      if (!c.config.library.empty()) names.push_back(c.config.str());
    }
    return names;
  };
  const auto plain = planner::tile_candidates(t.g, t.group, h100, exact);
  const auto fast = planner::tile_candidates(t.g, t.group, h100, tf32);
  EXPECT_EQ(library(plain), std::vector<std::string>{"library=cudnn"});
  EXPECT_EQ(library(fast), std::vector<std::string>{"library=cudnn-tf32"});
  planner::TileConfig lib;
  lib.tile = t.g.value(t.g.outputs()[0]).shape;
  lib.library = planner::kCudnn;
  const planner::Cost at_fp32 = planner::evaluate_tile(t.g, t.group, h100, lib, exact);
  lib.library = planner::kCudnnTf32;
  const planner::Cost at_tf32 = planner::evaluate_tile(t.g, t.group, h100, lib, tf32);
  ASSERT_TRUE(at_fp32.valid && at_tf32.valid);
  EXPECT_LT(at_tf32.modeled_us * 4, at_fp32.modeled_us) << "1.85 GFLOP at 495 against 67 TFLOP/s";
  EXPECT_FALSE(planner::evaluate_tile(t.g, t.group, h100, lib, exact).valid) << "TF32 outside the policy";
  ConvCase half = big;
  half.dt = DType::kF16;
  const OneGroup h = make_conv(half);
  EXPECT_EQ(library(planner::tile_candidates(h.g, h.group, h100, tf32)), std::vector<std::string>{"library=cudnn"});
  // On the host, TF32 mode rounds the operands: a 576-deep sum of products stays within TF32's
  // tolerance of the reference.
  ConvCase deep;
  deep.c = 64, deep.h = deep.w = 6;
  const OneGroup d = make_conv(deep);
  const codegen::LoweredKernel lk = lower_as(d, planner::kCudnnTf32);
  EXPECT_TRUE(planner::LibraryCall::from_json(lk.kernel.library).tf32);
  EXPECT_TRUE(backend::tf32_kernel(d.g, d.group, std::string("library=") + planner::kCudnnTf32));
  const unsigned seed = testing::test_seed();
  std::mt19937 rng(seed);
  backend::VerifyOptions at_tf32_tolerance;
  at_tf32_tolerance.tf32 = true;
  const backend::VerifyResult ok = verify_on_host(d, lk, rng, at_tf32_tolerance);
  EXPECT_TRUE(ok.ok) << ok.detail;
}

// Exported CNNs whose every convolution group runs as a cuDNN call (the measurements say it is
// fastest), run by the plan runner on the host against the reference interpreter.
TEST(LibraryCall, ExportedCnnsWithEveryConvolutionOnCudnnMatchTheReference) {
  const planner::Device dev = planner::find_device("h100");
  for (const char* model : {"resnet_small", "mobilenet_v2"}) {
    SCOPED_TRACE(model);
    const Graph g = testing::load_test_model(model);
    const planner::ModelPlan modeled = planner::plan_model(g, dev);
    planner::Measurements fast;
    for (const planner::GroupPlan& gp : modeled.compared) {
      for (const planner::Candidate& c : gp.candidates) fast[{gp.signature, c.config.str()}] = c.config.library.empty() ? 100.0 : 1.0;
    }
    const planner::ModelPlan plan = planner::plan_model(g, dev, {}, &fast);
    int convs = 0, on_cudnn = 0, pointwise = 0;
    const auto has = [&](const planner::GroupPlan& gp, const char* op) {
      return std::any_of(gp.group.nodes.begin(), gp.group.nodes.end(), [&](int n) { return g.nodes()[static_cast<size_t>(n)].op == op; });
    };
    for (const planner::GroupPlan& gp : plan.groups) {
      convs += has(gp, "Conv");
      const bool cudnn = gp.candidates[gp.chosen].config.library == planner::kCudnn;
      on_cudnn += cudnn;
      pointwise += cudnn && has(gp, "MatMul");  // a pointwise convolution imported as a product
    }
    EXPECT_GE(on_cudnn, 3) << "of " << convs << " groups with a convolution";
    if (std::string(model) == "mobilenet_v2") {
      EXPECT_GE(pointwise, 3) << "pointwise convolutions on cuDNN";
    }
    const runtime::Bundle bundle = compiler::compile_bundle(g, plan, dev, model);
    // The bundle names the library and the version this machine loads (null where it cannot).
    const nlohmann::json manifest = nlohmann::json::parse(bundle.manifest);
    EXPECT_EQ(manifest["libraries"]["cudnn"]["calls"], on_cudnn) << manifest["libraries"].dump();
    const std::string version = backend::cudnn_version();
    EXPECT_EQ(manifest["libraries"]["cudnn"]["version_where_compiled"],
              version.empty() ? nlohmann::json(nullptr) : nlohmann::json(version));
    expect_plan_matches_reference(bundle, g, testing::test_seed(), 1e-3f);  // deep float32 sums, in other orders
  }
}

}  // namespace
}  // namespace fusetune
