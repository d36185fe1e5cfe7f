// Recurrent layers compiled (importer/lower_recurrent.h, planner/fusion.h): the time loop is one
// fused launch a step. GRU without linear_before_reset (ONNX's default), whose h gate's product
// reads the reset gate times h, takes it through the back-to-back product rule (a block computes
// the z and r products' rows whole, then the h gate's product); with linear_before_reset, LSTM and
// RNN through the state rule. Each plan, run on the host executor, matches the reference
// interpreter, and its launches are the steps plus at most three (the input projection, the
// outputs' assembly).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "compiler/pipeline.h"
#include "importer/importer.h"
#include "onnx_builder.h"
#include "reference/interpreter.h"
#include "runtime/plan_runner.h"
#include "test_dir.h"
#include "test_seed.h"

namespace fusetune {
namespace {

using testing::kFloat;
using testing::OnnxBuilder;

TEST(RecurrentSteps, EachTimeStepIsOneLaunchAndTheCompiledPlanMatchesTheReference) {
  const unsigned seed = testing::test_seed();
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.3f);
  constexpr int64_t T = 6, B = 3, I = 20, H = 48;
  const auto random = [&](int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    for (float& e : v) e = normal(rng);
    return v;
  };
  struct Case {
    const char* op;
    int64_t gates;
    int linear_before_reset;  // GRU's attribute; -1: not set (ONNX's default, 0)
    const char* direction;
  };
  const std::vector<Case> cases = {
      {"GRU", 3, -1, "forward"}, {"GRU", 3, 0, "reverse"}, {"GRU", 3, 1, "forward"}, {"LSTM", 4, -1, "forward"}, {"RNN", 1, -1, "forward"}};
  for (const Case& c : cases) {
    const std::string what = std::string(c.op) + " linear_before_reset " + std::to_string(c.linear_before_reset) + " " + c.direction +
                             ", seed " + std::to_string(seed);
    OnnxBuilder m(14);
    m.input("X", kFloat, {T, B, I}).input("h0", kFloat, {1, B, H}).output("Y", kFloat, {T, 1, B, H});
    m.initializer("W", Tensor::from_floats(DType::kF32, {1, c.gates * H, I}, random(c.gates * H * I)));
    m.initializer("R", Tensor::from_floats(DType::kF32, {1, c.gates * H, H}, random(c.gates * H * H)));
    m.initializer("B", Tensor::from_floats(DType::kF32, {1, 2 * c.gates * H}, random(2 * c.gates * H)));
    onnx::NodeProto& n = m.node(c.op, {"X", "W", "R", "B", "", "h0"}, {"Y"}, "layer");
    OnnxBuilder::attr_i(n, "hidden_size", H);
    OnnxBuilder::attr_s(n, "direction", c.direction);
    if (c.linear_before_reset >= 0) OnnxBuilder::attr_i(n, "linear_before_reset", c.linear_before_reset);
    const std::vector<Tensor> inputs = {Tensor::from_floats(DType::kF32, {T, B, I}, random(T * B * I)),
                                        Tensor::from_floats(DType::kF32, {1, B, H}, random(B * H))};
    const std::vector<float> want = reference::run_graph(importer::import_onnx_bytes(m.bytes(), ".").graph, inputs)[0].to_floats();
    testing::TestDir dir("recurrent_steps");
    m.write(dir / "model.onnx");
    const compiler::PipelineResult r = compiler::compile_model(dir / "model.onnx", planner::find_device("h100"), {});
    EXPECT_LE(r.plan.launches, T + 3) << what;
    auto host = backend::make_host_backend();
    runtime::PlanRunner runner(r.bundle, *host);
    const std::vector<float> got = runner.run(inputs)[0].to_floats();
    ASSERT_EQ(got.size(), want.size()) << what;
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5f * (1.0f + std::abs(want[i]))) << what << ", Y[" << i << "]";
  }
}

}  // namespace
}  // namespace fusetune
