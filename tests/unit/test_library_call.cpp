// Library calls (planner/library_call.h): which groups cuBLASLt can run whole, the library
// candidate in the planner's lists, the host backend's equivalent GEMM against the reference on
// odd shapes (float32 and float16), cuBLASLt's TF32 mode under the TF32 precision policy, and a
// plan bundle whose plan takes the library call, run through the plan runner against the
// reference interpreter.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <numeric>
#include <random>

#include "backend/backend.h"
#include "backend/verify.h"
#include "codegen/lower_group.h"
#include "core/error.h"
#include "graph_helpers.h"
#include "planner/device.h"
#include "planner/library_call.h"
#include "planner/select.h"
#include "planner/tiling.h"
#include "reference/interpreter.h"
#include "runtime/bundle.h"
#include "runtime/plan_runner.h"
#include "tests/unit/test_seed.h"

namespace fusetune {
namespace {

using testing::add_input;
using testing::add_op;
using testing::random_constant;

struct Gemm {
  Graph g;
  planner::FusionGroup group;
};

// Y = [Relu](A·B [+ bias] [+ residual]) over every node of a fresh graph.
Gemm make_gemm(DType dt, int64_t batch, int64_t m, int64_t n, int64_t k, bool b_batched, bool bias, bool residual,
               bool relu, bool residual_first = false) {
  Gemm t;
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
  t.group.nodes.resize(g.nodes().size());
  std::iota(t.group.nodes.begin(), t.group.nodes.end(), 0);
  planner::describe_group(g, t.group);
  return t;
}

TEST(LibraryCall, MatchesTheGemmEpiloguePatternsAndNothingElse) {
  const Gemm plain = make_gemm(DType::kF32, 1, 7, 5, 3, false, false, false, false);
  auto m = planner::match_library_call(plain.g, plain.group);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->call.m, 7);
  EXPECT_EQ(m->call.n, 5);
  EXPECT_EQ(m->call.k, 3);
  EXPECT_EQ(m->inputs.size(), 2u);
  const Gemm full = make_gemm(DType::kF32, 3, 4, 6, 8, true, true, true, true, /*residual_first=*/true);
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
    planner::FusionGroup grp{{0, 1}, {}, {}, "", 0};
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
    planner::FusionGroup grp{{0, 1}, {}, {}, "", 0};
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
    planner::FusionGroup grp{{0, 1}, {}, {}, "", 0};
    planner::describe_group(g, grp);
    EXPECT_FALSE(planner::match_library_call(g, grp).has_value()) << "the product is exported too";
  }
}

TEST(LibraryCall, IsAlwaysAmongTheCandidatesOfAMatchingGroup) {
  const Gemm t = make_gemm(DType::kF32, 1, 64, 64, 64, false, true, false, true);
  planner::TilingOptions opt;
  opt.top_k = 1;
  const auto cands = planner::tile_candidates(t.g, t.group, planner::find_device("h100"), opt);
  ASSERT_EQ(cands.size(), 1u);
  EXPECT_EQ(cands[0].config.library, "cublasLt");
  EXPECT_EQ(cands[0].config.str(), "library=cublasLt");
  EXPECT_TRUE(cands[0].cost.valid);
  opt.top_k = 6;
  const auto more = planner::tile_candidates(t.g, t.group, planner::find_device("h100"), opt);
  EXPECT_EQ(std::count_if(more.begin(), more.end(), [](const planner::Candidate& c) { return !c.config.library.empty(); }), 1);
}

TEST(LibraryCall, HostGemmMatchesTheReferenceOnOddShapes) {
  auto backend = backend::make_host_backend();
  const unsigned seed = testing::test_seed();
  std::mt19937 rng(seed);
  struct Case {
    DType dt;
    int64_t batch, m, n, k;
    bool b_batched, bias, residual, relu;
  };
  const std::vector<Case> cases = {
      {DType::kF32, 1, 1, 1, 1, false, false, false, false},  {DType::kF32, 1, 7, 5, 3, false, true, false, false},
      {DType::kF32, 1, 33, 65, 100, false, true, true, true}, {DType::kF32, 3, 7, 13, 9, false, true, false, true},
      {DType::kF32, 2, 17, 3, 1000, true, false, true, false}, {DType::kF16, 1, 16, 24, 40, false, true, false, true},
      {DType::kF16, 2, 5, 7, 33, true, true, true, false},
  };
  for (const Case& c : cases) {
    const Gemm t = make_gemm(c.dt, c.batch, c.m, c.n, c.k, c.b_batched, c.bias, c.residual, c.relu);
    planner::TileConfig cfg;
    cfg.tile = t.g.value(t.g.outputs()[0]).shape;
    cfg.library = "cublasLt";
    const codegen::LoweredKernel lk = codegen::lower_group(t.g, t.group, cfg, "lib");
    EXPECT_NE(codegen::to_text(lk.kernel).find("library call"), std::string::npos);
    auto module = backend->load(std::vector<codegen::Kernel>{lk.kernel});
    const backend::VerifyResult v = backend::verify_kernel(t.g, t.group, "lib", lk.inputs, lk.outputs, *backend, *module, rng, {.redzone_bytes = 256});
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
  const Gemm big = make_gemm(DType::kF32, 1, 2048, 4096, 1024, false, true, false, true);
  planner::TilingOptions exact, tf32;
  exact.top_k = tf32.top_k = 1;
  tf32.tf32 = true;
  const auto plain = planner::tile_candidates(big.g, big.group, h100, exact);
  const auto fast = planner::tile_candidates(big.g, big.group, h100, tf32);
  ASSERT_EQ(plain.size(), 1u);
  ASSERT_EQ(fast.size(), 1u);
  EXPECT_EQ(plain[0].config.str(), "library=cublasLt");
  EXPECT_EQ(fast[0].config.str(), "library=cublasLt-tf32");
  EXPECT_LT(fast[0].cost.modeled_us * 4, plain[0].cost.modeled_us);  // 495 against 67 TFLOP/s
  EXPECT_FALSE(planner::evaluate_tile(big.g, big.group, h100, fast[0].config, exact).valid);
  const Gemm half = make_gemm(DType::kF16, 1, 64, 64, 64, false, false, false, false);
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
  const Gemm deep = make_gemm(DType::kF32, 1, 9, 17, 1000, false, true, false, false);
  planner::TileConfig cfg;
  cfg.tile = deep.g.value(deep.g.outputs()[0]).shape;
  cfg.library = planner::kCublasLtTf32;
  const codegen::LoweredKernel lk = codegen::lower_group(deep.g, deep.group, cfg, "lib");
  EXPECT_TRUE(planner::LibraryCall::from_json(lk.kernel.library).tf32);
  EXPECT_TRUE(backend::tf32_kernel(deep.g, deep.group, cfg.str()));
  auto backend = backend::make_host_backend();
  auto module = backend->load(std::vector<codegen::Kernel>{lk.kernel});
  const unsigned seed = testing::test_seed();
  std::mt19937 rng(seed), same(seed);
  backend::VerifyOptions at_tf32;
  at_tf32.tf32 = true;
  const backend::VerifyResult ok = backend::verify_kernel(deep.g, deep.group, "lib", lk.inputs, lk.outputs, *backend, *module, rng, at_tf32);
  EXPECT_TRUE(ok.ok) << ok.detail;
  EXPECT_FALSE(backend::verify_kernel(deep.g, deep.group, "lib", lk.inputs, lk.outputs, *backend, *module, same).ok);
  EXPECT_EQ(round_to_tf32(1.0f + 0x1.0p-11f), 1.0f + 0x1.0p-10f);  // a tie, away from zero
  EXPECT_EQ(round_to_tf32(-(1.0f + 0x1.8p-12f)), -1.0f);
}

TEST(LibraryCall, APlanThatTakesTheLibraryCallRunsAndMatchesTheReference) {
  // Two GEMM layers: the measurements say the library call is the fastest for every group it can run.
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
    for (const planner::Candidate& c : gp.candidates) fast[{gp.signature, c.config.str()}] = c.config.library.empty() ? 100.0 : 1.0;
  }
  const planner::ModelPlan plan = planner::plan_model(g, dev, {}, &fast);
  int library_groups = 0;
  for (const planner::GroupPlan& gp : plan.groups) library_groups += !gp.candidates[gp.chosen].config.library.empty();
  ASSERT_GE(library_groups, 1) << "no group of the plan took the library call";
  const runtime::Bundle bundle = runtime::compile_bundle(g, plan, dev, "gemms");
  EXPECT_NE(bundle.manifest.find("\"library\""), std::string::npos);
  auto backend = backend::make_host_backend();
  runtime::PlanRunner runner(bundle, *backend);
  std::mt19937 rng(11);
  std::normal_distribution<float> dist;
  std::vector<float> xs(24 * 40);
  for (float& v : xs) v = dist(rng);
  const Tensor input = Tensor::from_floats(DType::kF32, {1, 24, 40}, xs);
  const std::vector<Tensor> got = runner.run({input});
  const std::vector<Tensor> inputs = {input};
  const std::vector<Tensor> want = reference::run_graph(g, inputs);
  ASSERT_EQ(got.size(), 1u);
  const auto want_v = want[0].to_floats(), got_v = got[0].to_floats();
  for (size_t i = 0; i < want_v.size(); ++i) EXPECT_NEAR(got_v[i], want_v[i], 1e-4) << i;
}

}  // namespace
}  // namespace fusetune
