// Pointwise convolutions become matrix products at import (importer/pointwise_conv.h): a 1 x 1
// Conv with stride 1, no padding, one group and constant weights over more than one pixel is a
// MatMul of its weights by the channels-by-pixels matrix.
// Checked against the convolution's definition computed here, on the reference and compiled (host
// executor, its four checks), in float32 and float16, with and without a bias, 1-D to 3-D; the
// convolutions it must leave alone stay Conv.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "backend/backend.h"
#include "compiler/pipeline.h"
#include "core/dtype.h"
#include "codegen/emit.h"
#include "codegen/lower_group.h"
#include "importer/importer.h"
#include "planner/device.h"
#include "planner/library_match.h"
#include "planner/tiling.h"
#include "reference/interpreter.h"
#include "runtime/plan_runner.h"
#include "unit/codegen_check.h"
#include "unit/graph_helpers.h"
#include "unit/onnx_builder.h"
#include "unit/test_dir.h"
#include "unit/test_seed.h"

namespace fusetune {
namespace {

using testing::OnnxBuilder;

struct PointwiseCase {
  std::string what;
  DType dtype;
  Shape x;      // [N, C, spatial...]
  int64_t k;    // output channels
  bool bias;
  std::vector<std::pair<std::string, std::vector<int64_t>>> ints;  // extra Conv attributes
  int64_t group = 1;
  int64_t kernel = 1;  // the window's extent along each spatial axis
};

struct PointwiseModel {
  OnnxBuilder model;
  std::vector<Tensor> inputs;
  std::vector<double> expected;  // the definition's output, when the case is pointwise
  Shape out;
};

// The model, its input, and y[n, k, p] = sum_c w[k, c] x[n, c, p] + b[k] where the case is pointwise
// (`out`, the output's shape, too).
PointwiseModel pointwise_model(const PointwiseCase& c, std::mt19937& rng) {
  PointwiseModel m;
  const int64_t n = c.x[0], ch = c.x[1], cg = ch / c.group;
  int64_t pixels = 1;
  Shape w{c.k, cg}, out{n, c.k};
  for (size_t d = 2; d < c.x.size(); ++d) {
    pixels *= c.x[d];
    w.push_back(c.kernel);
    out.push_back(c.x[d] - c.kernel + 1);
  }
  m.out = out;
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const auto draw = [&](const Shape& s) {
    int64_t count = 1;
    for (int64_t e : s) count *= e;
    std::vector<float> v(static_cast<size_t>(count));
    for (float& f : v) f = dist(rng);
    // Rounded to the case's type first, so the definition computes on what the model holds.
    return Tensor::from_floats(c.dtype, s, v);
  };
  const Tensor x = draw(c.x), wt = draw(w), b = draw({c.k});
  const int elem = dtype_to_onnx(c.dtype);
  // The output's extents symbolic: the importer infers them (a strided or padded case's differ).
  m.model.input("x", elem, c.x).output("y", elem, std::vector<int64_t>(c.x.size(), -1)).initializer("w", wt);
  if (c.bias) m.model.initializer("b", b);
  auto& node = c.bias ? m.model.node("Conv", {"x", "w", "b"}, {"y"}) : m.model.node("Conv", {"x", "w"}, {"y"});
  for (const auto& [name, v] : c.ints) OnnxBuilder::attr_ints(node, name, v);
  if (c.group != 1) OnnxBuilder::attr_i(node, "group", c.group);
  m.inputs = {x};
  if (c.group != 1 || c.kernel != 1) return m;
  const std::vector<double> xv = x.to_doubles(), wv = wt.to_doubles(), bv = b.to_doubles();
  m.expected.assign(static_cast<size_t>(n * c.k * pixels), 0.0);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t k = 0; k < c.k; ++k) {
      for (int64_t p = 0; p < pixels; ++p) {
        double s = c.bias ? bv[static_cast<size_t>(k)] : 0.0;
        for (int64_t q = 0; q < ch; ++q) s += wv[static_cast<size_t>(k * ch + q)] * xv[static_cast<size_t>((i * ch + q) * pixels + p)];
        m.expected[static_cast<size_t>((i * c.k + k) * pixels + p)] = s;
      }
    }
  }
  return m;
}

double worst_relative(const Tensor& got, const std::vector<double>& want) {
  const std::vector<double> g = got.to_doubles();
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::abs(g[i] - want[i]) / (1.0 + std::abs(want[i])));
  return worst;
}

int count_op(const Graph& g, const std::string& op) {
  int n = 0;
  for (const Node& node : g.nodes()) n += node.op == op;
  return n;
}

TEST(PointwiseConv, BecomesAMatMulThatComputesTheConvolution) {
  const std::vector<PointwiseCase> cases = {
      {"2-D with a bias", DType::kF32, {1, 24, 7, 9}, 16, true, {}},
      {"2-D, batch 2, explicit stride 1 and zero pads", DType::kF32, {2, 8, 5, 4}, 12, false,
       {{"strides", {1, 1}}, {"pads", {0, 0, 0, 0}}, {"dilations", {2, 2}}}},
      {"1-D", DType::kF32, {1, 6, 33}, 5, true, {}},
      {"3-D", DType::kF32, {1, 4, 3, 4, 5}, 7, false, {}},
      {"float16", DType::kF16, {1, 32, 6, 6}, 24, true, {}}};
  std::mt19937 rng(testing::test_seed());
  auto host = backend::make_host_backend();
  for (size_t i = 0; i < cases.size(); ++i) {
    const PointwiseCase& c = cases[i];
    PointwiseModel m = pointwise_model(c, rng);
    const Graph g = importer::import_onnx_bytes(m.model.bytes(), ".").graph;
    EXPECT_EQ(count_op(g, "Conv"), 0) << c.what;
    EXPECT_EQ(count_op(g, "MatMul"), 1) << c.what;
    // cuDNN still takes the whole as a 1 x 1 convolution of the image viewed as [N, C, S, 1].
    if (c.dtype == DType::kF32 && c.x.size() == 4) {
      const auto call = planner::match_library_call(g, testing::whole_graph_group(g));
      ASSERT_TRUE(call.has_value()) << c.what;
      EXPECT_EQ(call->call.op, planner::LibraryOp::kConv) << c.what;
      EXPECT_EQ(call->call.batch, c.x[0]);
      EXPECT_EQ(call->call.conv.c, c.x[1]);
      EXPECT_EQ(call->call.conv.h, c.x[2] * c.x[3]);
      EXPECT_EQ(call->call.conv.w, 1);
      EXPECT_EQ(call->call.conv.k, c.k);
      EXPECT_EQ(call->call.bias, c.bias) << c.what;
      EXPECT_EQ(g.value(call->inputs[0]).name, "x") << c.what;
    }
    const double tolerance = c.dtype == DType::kF16 ? 2e-2 : 1e-5;
    const std::vector<Tensor> ref = reference::run_graph(g, m.inputs);
    ASSERT_EQ(ref[0].shape(), m.out) << c.what;
    EXPECT_LT(worst_relative(ref[0], m.expected), tolerance) << "reference, " << c.what;
    testing::TestDir dir("pointwise_conv_" + std::to_string(i));
    m.model.write(dir / "model.onnx");
    runtime::PlanRunner runner(compiler::compile_model(dir / "model.onnx", planner::find_device("h100"), {}).bundle, *host);
    EXPECT_LT(worst_relative(runner.run(m.inputs)[0], m.expected), tolerance) << "compiled, " << c.what;
  }
}

TEST(PointwiseConv, WhatIsNotAPointwiseProductStaysAConvolution) {
  const std::vector<PointwiseCase> cases = {
      {"strided", DType::kF32, {1, 8, 8, 8}, 4, true, {{"strides", {2, 2}}}},
      {"padded", DType::kF32, {1, 8, 5, 5}, 4, true, {{"pads", {1, 1, 1, 1}}}},
      {"grouped", DType::kF32, {1, 8, 5, 5}, 4, true, {}, 2},
      {"3 x 3", DType::kF32, {1, 8, 5, 5}, 4, true, {}, 1, 3},
      {"1 x 1 feature map (squeeze-and-excitation)", DType::kF32, {1, 40, 1, 1}, 10, true, {}}};
  std::mt19937 rng(testing::test_seed());
  for (const PointwiseCase& c : cases) {
    PointwiseModel m = pointwise_model(c, rng);
    const Graph g = importer::import_onnx_bytes(m.model.bytes(), ".").graph;
    EXPECT_EQ(count_op(g, "Conv"), 1) << c.what;
    EXPECT_EQ(count_op(g, "MatMul"), 0) << c.what;
  }
}

// cuDNN's pattern takes a bias along the channels where it meets the value: [K, 1] on the product,
// [1, K, 1, 1] after the Reshape back to the image; a [K, 1] added to the image lies along its
// rows, and is no convolution's bias.
TEST(PointwiseConv, CudnnTakesABiasOnlyAlongTheChannels) {
  for (const auto& [bias, after_image, matches] :
       std::vector<std::tuple<Shape, bool, bool>>{{{8, 1}, false, true}, {{1, 8, 1, 1}, true, true}, {{8, 1}, true, false}}) {
    Graph g;
    const int x = testing::add_input(g, "x", DType::kF32, {1, 4, 8, 8});
    Attributes flat, image;
    flat.set("shape", std::vector<int64_t>{1, 4, 64});
    image.set("shape", std::vector<int64_t>{1, 8, 8, 8});
    int y = testing::add_op(g, "MatMul", {testing::random_constant(g, "w", DType::kF32, {8, 4}, 3), testing::add_op(g, "Reshape", {x}, flat)});
    const int b = testing::random_constant(g, "b", DType::kF32, bias, 4);
    if (after_image) y = testing::add_op(g, "Reshape", {y}, image);
    y = testing::add_op(g, "Add", {y, b});
    if (!after_image) y = testing::add_op(g, "Reshape", {y}, image);
    g.outputs() = {y};
    const auto call = planner::match_library_call(g, testing::whole_graph_group(g));
    EXPECT_EQ(call.has_value(), matches) << shape_str(bias) << (after_image ? " after the image" : " on the product");
    if (call) {
      EXPECT_TRUE(call->call.bias);
    }
  }
}

// The product's channels-by-pixels operand is a Reshape of the image: staged operands copy it from
// the image's buffer (planner::computed_elements, LoweringContext::buffer_of) by cp.async, on
// tensor cores (float16; float32 under TF32) and in the SIMT ring (float32 at vector width 4),
// and match the reference under the executor's checks.
TEST(PointwiseConv, TheReshapedImageStreamsThroughTheRingsAsAnInputWould) {
  for (DType dtype : {DType::kF16, DType::kF32}) {
    Graph g;
    const int x = testing::add_input(g, "x", dtype, {1, 48, 6, 8});
    Attributes flat;
    flat.set("shape", std::vector<int64_t>{1, 48, 48});
    const int xr = testing::add_op(g, "Reshape", {x}, flat);
    const int y = testing::add_op(g, "MatMul", {testing::random_constant(g, "w", dtype, {40, 48}, 3), xr});
    g.outputs() = {testing::add_op(g, "Add", {y, testing::random_constant(g, "b", dtype, {40, 1}, 4)})};
    const planner::FusionGroup group = testing::whole_graph_group(g);
    std::set<int> produced;
    for (int n : group.nodes) produced.insert(g.nodes()[static_cast<size_t>(n)].outputs[0]);
    const std::set<int> computed = planner::computed_elements(g, group, produced);
    EXPECT_FALSE(computed.count(xr));
    EXPECT_TRUE(computed.count(y));
    std::vector<planner::TileConfig> configs = {{{1, 32, 32}, 16, 128, 1, true}};
    if (dtype == DType::kF32) configs.push_back({{1, 16, 16}, 8, 64, 4});
    for (const planner::TileConfig& cfg : configs) {
      EXPECT_TRUE((cfg.mma ? planner::mma_staging(g, g.nodes()[1], computed, cfg) : planner::simt_staging(g, g.nodes()[1], computed, cfg)).async_b)
          << cfg.str();
      const std::string ir = codegen::to_text(codegen::lower_group(g, group, cfg, "k").kernel);
      EXPECT_NE(ir.find("cp.async.16 "), std::string::npos) << cfg.str() << "\n" << ir;
      testing::check_groups(g, {group}, [&](const planner::FusionGroup&) { return cfg; },
                            "reshaped image, " + std::string(dtype_name(dtype)) + "/" + cfg.str(), {false, {"sm_80"}});
    }
  }
}

}  // namespace
}  // namespace fusetune
