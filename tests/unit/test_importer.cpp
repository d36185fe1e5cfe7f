// Import: lowering to the canonical op set, constant folding of shape arithmetic, static shapes,
// external data, and the rewrites docs/canonical-ops.md promises.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <set>

#include "backend/backend.h"
#include "compiler/pipeline.h"
#include "core/error.h"
#include "core/files.h"
#include "core/ops.h"
#include "importer/builder.h"
#include "importer/fold_conv_affine.h"
#include "importer/importer.h"
#include "importer/lower_topk.h"
#include "importer/onnx_io.h"
#include "planner/attention.h"
#include "planner/select.h"
#include "importer/test_data.h"
#include "reference/compare.h"
#include "reference/interpreter.h"
#include "runtime/plan_runner.h"
#include "unit/cli_run.h"
#include "unit/graph_helpers.h"
#include "unit/import_check.h"
#include "unit/onnx_builder.h"
#include "unit/test_dir.h"
#include "unit/test_seed.h"

namespace fusetune {
namespace {

namespace fs = std::filesystem;
using testing::kFloat;
using testing::kInt64;
using testing::OnnxBuilder;

fs::path model_dir(const std::string& name) { return fs::path(FUSETUNE_SOURCE_DIR) / "tests/data/models" / name; }

std::map<std::string, int> histogram(const Graph& g) {
  std::map<std::string, int> h;
  for (const Node& n : g.nodes()) ++h[n.op];
  return h;
}

Tensor iota_tensor(Shape s, float scale = 0.1f) {
  std::vector<float> v(static_cast<size_t>(numel(s)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = scale * static_cast<float>(static_cast<int>(i % 17) - 8);
  return Tensor::from_floats(DType::kF32, std::move(s), v);
}

class SmallModels : public ::testing::TestWithParam<std::string> {};

TEST_P(SmallModels, ImportToCanonicalOpsOnly) {
  importer::ImportOptions opt;
  if (GetParam() == "bert") opt.input_shapes = {{"input_ids", {1, 16}}, {"attention_mask", {1, 16}}};
  const importer::ImportedModel m = importer::import_onnx(model_dir(GetParam()) / "model.onnx", opt);
  EXPECT_NO_THROW(m.graph.validate());
  for (const Node& n : m.graph.nodes()) {
    EXPECT_NE(find_op(n.op), nullptr) << n.op << " is not canonical";
    EXPECT_NE(n.op, "Shape");
  }
  for (const char* gone : {"Gemm", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout", "BatchNormalization",
                           "Constant", "ConstantOfShape", "Range", "GlobalAveragePool"}) {
    EXPECT_EQ(histogram(m.graph).count(gone), 0u) << gone;
  }
}

INSTANTIATE_TEST_SUITE_P(Import, SmallModels,
                         ::testing::Values("bert", "cnn_small", "convnext_t", "efficientnet_b0", "mobilenet_v2",
                                           "nerf_mlp", "resnet_small", "swin_t", "unet_small", "vit"));

TEST(Import, SwinShapeArithmeticFoldsAway) {
  const importer::ImportedModel m = importer::import_onnx(model_dir("swin_t") / "model.onnx");
  const auto h = histogram(m.graph);
  EXPECT_GT(m.onnx.op_histogram.at("Shape"), 10);
  EXPECT_GT(m.onnx.op_histogram.at("ScatterND"), 0);
  for (const char* op : {"ScatterND", "Where", "Equal", "Mod", "Not", "Cast"}) EXPECT_EQ(h.count(op), 0u) << op;
  EXPECT_LT(m.graph.nodes().size(), m.onnx.nodes / 3);
}

TEST(Import, SymbolicDimensionNeedsAValue) {
  const fs::path bert = model_dir("bert") / "model.onnx";
  try {
    importer::import_onnx(bert);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("input 'input_ids' dimension 0 ('batch')"), std::string::npos) << msg;
    EXPECT_NE(msg.find("--shape"), std::string::npos) << msg;
  }
  importer::ImportOptions opt;
  opt.input_shapes = {{"input_ids", {1, 5}}, {"attention_mask", {1, 5}}};
  const importer::ImportedModel m = importer::import_onnx(bert, opt);
  EXPECT_EQ(m.graph.value(m.graph.outputs()[0]).shape, (Shape{1, 5, 64}));
}

TEST(Import, GemmBecomesMatMulAndAddWithTheTransposeFolded) {
  OnnxBuilder b;
  b.input("a", kFloat, {3, 4}).output("y", kFloat, {3, 5});
  b.initializer("w", iota_tensor({5, 4})).initializer("c", iota_tensor({5}, 1.0f));
  auto& n = b.node("Gemm", {"a", "w", "c"}, {"y"});
  OnnxBuilder::attr_i(n, "transB", 1);
  OnnxBuilder::attr_f(n, "alpha", 2.0f);
  const auto m = importer::import_onnx_bytes(b.bytes(), ".");
  EXPECT_EQ(histogram(m.graph), (std::map<std::string, int>{{"Add", 1}, {"MatMul", 1}}));
  // y = 2 * a @ w^T + c
  const Tensor a = iota_tensor({3, 4}, 0.3f);
  const Tensor y = reference::run_graph(m.graph, std::vector<Tensor>{a})[0];
  const auto av = a.to_floats(), wv = iota_tensor({5, 4}).to_floats(), cv = iota_tensor({5}, 1.0f).to_floats();
  std::vector<float> want(15);
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 5; ++j) {
      float s = 0;
      for (int k = 0; k < 4; ++k) s += av[i * 4 + k] * wv[j * 4 + k];
      want[i * 5 + j] = 2 * s + cv[j];
    }
  }
  EXPECT_TRUE(reference::compare(y, Tensor::from_floats(DType::kF32, {3, 5}, want), {1e-5, 1e-6, 0}).ok);
}

TEST(Import, BatchNormFoldsIntoThePrecedingConv) {
  OnnxBuilder b;
  b.input("x", kFloat, {1, 2, 5, 5}).output("y", kFloat, {1, 3, 5, 5});
  b.initializer("w", iota_tensor({3, 2, 3, 3})).initializer("bias", iota_tensor({3}, 1.0f));
  b.initializer("scale", iota_tensor({3}, 0.7f)).initializer("shift", iota_tensor({3}, 0.2f));
  b.initializer("mean", iota_tensor({3}, 0.05f));
  b.initializer("var", Tensor::from_floats(DType::kF32, {3}, std::vector<float>{0.5f, 1.5f, 2.0f}));
  OnnxBuilder::attr_ints(b.node("Conv", {"x", "w", "bias"}, {"c"}), "pads", {1, 1, 1, 1});
  b.node("BatchNormalization", {"c", "scale", "shift", "mean", "var"}, {"y"});
  const auto m = importer::import_onnx_bytes(b.bytes(), ".");
  EXPECT_EQ(histogram(m.graph), (std::map<std::string, int>{{"Conv", 1}}));

  // The same model without the fold (BatchNormalization after a Relu stays a Mul + Add) agrees.
  OnnxBuilder u;
  u.input("x", kFloat, {1, 2, 5, 5}).output("y", kFloat, {1, 3, 5, 5});
  for (const auto& init : b.proto().graph().initializer()) *u.proto().mutable_graph()->add_initializer() = init;
  OnnxBuilder::attr_ints(u.node("Conv", {"x", "w", "bias"}, {"c"}), "pads", {1, 1, 1, 1});
  u.node("Identity", {"c"}, {"c2"});
  u.node("BatchNormalization", {"c2", "scale", "shift", "mean", "var"}, {"y"});
  Graph unfolded = importer::import_onnx_bytes(u.bytes(), ".").graph;
  const Tensor x = iota_tensor({1, 2, 5, 5}, 0.37f);
  const Tensor want = reference::run_graph(m.graph, std::vector<Tensor>{x})[0];
  const Tensor got = reference::run_graph(unfolded, std::vector<Tensor>{x})[0];
  EXPECT_TRUE(reference::compare(got, want, {1e-5, 1e-6, 0}).ok);
}

// An NHWC model as Keras 3 exports it through PyTorch: each convolution's output moved to NHWC,
// a no-op Cast, the normalization as Sub, Mul and Add along the channels' new axis, the
// activation, and back to NCHW for the next convolution. The normalization folds into the
// convolution through the Transpose (importer/fold_conv_affine.h), the Cast vanishes, the two
// Transposes cancel around the Relu (importer/cancel_transposes.h), and the 1x1 convolution after
// them becomes a MatMul; the result equals the graph imported without those rewrites. Transposes
// that do not undo each other, or around a value the model also outputs, stay.
TEST(Import, AnNhwcNormalizationFoldsThroughItsTransposeAndTheLayoutPairCancels) {
  const auto build = [](const std::vector<int64_t>& back, bool expose) {
    OnnxBuilder b;
    b.input("x", kFloat, {1, 3, 6, 6});
    b.initializer("w", iota_tensor({4, 3, 3, 3})).initializer("w2", iota_tensor({2, 4, 1, 1}, 0.3f));
    b.initializer("mean", iota_tensor({4}, 0.05f)).initializer("scale", iota_tensor({1, 1, 1, 4}, 0.7f));
    b.initializer("beta", iota_tensor({4}, 0.2f));
    OnnxBuilder::attr_ints(b.node("Conv", {"x", "w"}, {"c"}), "pads", {1, 1, 1, 1});
    OnnxBuilder::attr_ints(b.node("Transpose", {"c"}, {"nhwc"}), "perm", {0, 2, 3, 1});
    OnnxBuilder::attr_i(b.node("Cast", {"nhwc"}, {"same"}), "to", 1);
    b.node("Sub", {"same", "mean"}, {"centred"});
    b.node("Mul", {"centred", "scale"}, {"scaled"});
    b.node("Add", {"scaled", "beta"}, {"normed"});
    b.node("Relu", {"normed"}, {"act"});
    OnnxBuilder::attr_ints(b.node("Transpose", {"act"}, {"back"}), "perm", back);
    if (back == std::vector<int64_t>{0, 3, 1, 2}) {
      b.node("Conv", {"back", "w2"}, {"y"});
      b.output("y", kFloat, {1, 2, 6, 6});
    } else {
      b.node("Relu", {"back"}, {"y"});
      b.output("y", kFloat, {1, 6, 4, 6});
    }
    if (expose) b.output("act", kFloat, {1, 6, 6, 4});
    return b;
  };
  const Tensor x = iota_tensor({1, 3, 6, 6}, 0.37f);
  for (const auto& [back, expose] : std::vector<std::pair<std::vector<int64_t>, bool>>{
           {{0, 3, 1, 2}, false}, {{0, 3, 1, 2}, true}, {{0, 2, 3, 1}, false}}) {
    const OnnxBuilder b = build(back, expose);
    const Graph folded = importer::import_onnx_bytes(b.bytes(), ".").graph;
    importer::ImportOptions raw;
    raw.fold_affines = false;
    const Graph plain = importer::import_onnx_bytes(b.bytes(), ".", raw).graph;
    const auto h = histogram(folded);
    const bool cancels = back == std::vector<int64_t>{0, 3, 1, 2} && !expose;
    SCOPED_TRACE(cancels ? "cancels" : expose ? "a chain value is an output" : "not inverse");
    const auto count = [&](const char* op) { return h.count(op) ? h.at(op) : 0; };
    EXPECT_EQ(count("Cast"), 0);
    EXPECT_EQ(count("Sub") + count("Mul"), 0);       // the normalization is in the Conv
    EXPECT_EQ(count("Transpose"), cancels ? 0 : 2);  // the pair, or both kept
    if (cancels) {
      EXPECT_EQ(count("MatMul"), 1);  // the 1x1 Conv, now reading the Relu in NCHW
    }
    const std::vector<Tensor> want = reference::run_graph(plain, std::vector<Tensor>{x});
    const std::vector<Tensor> got = reference::run_graph(folded, std::vector<Tensor>{x});
    ASSERT_EQ(got.size(), want.size());
    for (size_t k = 0; k < got.size(); ++k) {
      EXPECT_TRUE(reference::compare(got[k], want[k], {1e-5, 1e-5, 0}).ok) << k;
    }
  }

  // A Transpose of a Transpose: composed, or gone where the two undo each other, while the first
  // has another reader (which keeps it).
  OnnxBuilder d;
  d.input("x", kFloat, {1, 2, 3, 4}).output("undone", kFloat, {1, 2, 3, 4}).output("twice", kFloat, {1, 4, 2, 3});
  d.output("other", kFloat, {1, 3, 4, 2});
  OnnxBuilder::attr_ints(d.node("Transpose", {"x"}, {"a"}), "perm", {0, 2, 3, 1});
  OnnxBuilder::attr_ints(d.node("Transpose", {"a"}, {"back"}), "perm", {0, 3, 1, 2});
  d.node("Neg", {"back"}, {"undone"});
  OnnxBuilder::attr_ints(d.node("Transpose", {"a"}, {"again"}), "perm", {0, 2, 3, 1});
  d.node("Neg", {"again"}, {"twice"});
  d.node("Relu", {"a"}, {"other"});
  const Graph direct = importer::import_onnx_bytes(d.bytes(), ".").graph;
  importer::ImportOptions raw;
  raw.fold_affines = false;
  EXPECT_EQ(histogram(direct).at("Transpose"), 2);  // `a` for the Relu, and the two composed into one
  const Tensor x4 = iota_tensor({1, 2, 3, 4}, 0.5f);
  const std::vector<Tensor> want = reference::run_graph(importer::import_onnx_bytes(d.bytes(), ".", raw).graph, std::vector<Tensor>{x4});
  const std::vector<Tensor> got = reference::run_graph(direct, std::vector<Tensor>{x4});
  ASSERT_EQ(got.size(), 3u);
  for (size_t k = 0; k < got.size(); ++k) {
    EXPECT_TRUE(reference::compare(got[k], want[k], {0, 0, 0}).ok) << k;
  }
}

// BatchNormalization as exporters write it at earlier opsets (paddle2onnx: `momentum` at opset 11;
// opset 6: `is_test` and `spatial`; opset 1: `consumed_inputs` too): the attributes that mean
// nothing for inference are accepted and the result is the opset-15 node's; those that ask for
// training or per-element statistics are refused, naming the attribute.
TEST(Import, BatchNormAttributesOfEveryOpsetAreReadAsTheSpecDefinesThem) {
  const auto build = [](int64_t opset, const std::function<void(onnx::NodeProto&)>& attrs) {
    OnnxBuilder b(opset);
    b.input("x", kFloat, {1, 3, 4, 4}).output("y", kFloat, {1, 3, 4, 4});
    b.initializer("scale", iota_tensor({3}, 0.7f)).initializer("shift", iota_tensor({3}, 0.2f));
    b.initializer("mean", iota_tensor({3}, 0.05f));
    b.initializer("var", Tensor::from_floats(DType::kF32, {3}, std::vector<float>{0.5f, 1.5f, 2.0f}));
    attrs(b.node("BatchNormalization", {"x", "scale", "shift", "mean", "var"}, {"y"}));
    return b;
  };
  const Tensor x = iota_tensor({1, 3, 4, 4}, 0.37f);
  const auto run = [&](const OnnxBuilder& b) {
    return reference::run_graph(importer::import_onnx_bytes(b.bytes(), ".").graph, std::vector<Tensor>{x})[0];
  };
  const Tensor want = run(build(15, [](onnx::NodeProto&) {}));
  const Tensor at11 = run(build(11, [](onnx::NodeProto& n) { OnnxBuilder::attr_f(n, "momentum", 0.9f); }));
  EXPECT_TRUE(reference::compare(at11, want, {0, 0, 0}).ok);
  const Tensor at6 = run(build(6, [](onnx::NodeProto& n) {
    OnnxBuilder::attr_f(n, "momentum", 0.99f);
    OnnxBuilder::attr_i(n, "is_test", 1);
    OnnxBuilder::attr_i(n, "spatial", 1);
  }));
  EXPECT_TRUE(reference::compare(at6, want, {0, 0, 0}).ok);
  const Tensor at1 = run(build(1, [](onnx::NodeProto& n) {
    OnnxBuilder::attr_ints(n, "consumed_inputs", {0, 0, 0, 1, 1});
    OnnxBuilder::attr_i(n, "is_test", 1);
  }));
  EXPECT_TRUE(reference::compare(at1, want, {0, 0, 0}).ok);
  for (const char* refused : {"is_test", "spatial"}) {
    try {
      run(build(6, [&](onnx::NodeProto& n) { OnnxBuilder::attr_i(n, refused, 0); }));
      ADD_FAILURE() << refused << " = 0 was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::string(refused) + " = 0"), std::string::npos) << e.what();
    }
  }
}

// GatherElements (axis 1, negative indices, indices narrower than the data along another axis)
// and Hardmax (opset 13 along the last axis; opset 11 on the input coerced to 2-D at axis 1, ties
// going to the first maximum), imported and run by the reference, against values computed here
// from the operators' definitions; indices of another rank are refused naming the node.
TEST(Import, GatherElementsAndHardmaxLowerToCanonicalOps) {
  OnnxBuilder b(13);
  b.input("x", kFloat, {2, 3, 4}).input("i", kInt64, {2, 2, 3}).output("g", kFloat, {2, 2, 3});
  b.output("h", kFloat, {2, 3, 4});
  OnnxBuilder::attr_i(b.node("GatherElements", {"x", "i"}, {"g"}, "gather"), "axis", 1);
  b.node("Hardmax", {"x"}, {"h"});
  const std::vector<int64_t> idx = {0, -1, 2, 1, 1, -3, 2, 0, -2, -1, 1, 0};
  std::vector<float> xv(24);
  for (size_t k = 0; k < xv.size(); ++k) xv[k] = static_cast<float>((k * 7) % 5);  // ties within rows
  const Tensor x = Tensor::from_floats(DType::kF32, {2, 3, 4}, xv);
  const Graph g = importer::import_onnx_bytes(b.bytes(), ".").graph;
  const std::vector<Tensor> run = reference::run_graph(g, std::vector<Tensor>{x, Tensor::from_ints(DType::kI64, {2, 2, 3}, idx)});
  const std::vector<float> gathered = run[0].to_floats(), hard = run[1].to_floats();
  for (int64_t n = 0; n < 2; ++n) {
    for (int64_t r = 0; r < 2; ++r) {
      for (int64_t c = 0; c < 3; ++c) {
        int64_t j = idx[static_cast<size_t>((n * 2 + r) * 3 + c)];
        if (j < 0) j += 3;
        EXPECT_EQ(gathered[static_cast<size_t>((n * 2 + r) * 3 + c)], xv[static_cast<size_t>((n * 3 + j) * 4 + c)]) << n << "," << r << "," << c;
      }
    }
  }
  // Hardmax's result over rows of `width` of x: 1 at each row's first maximum.
  const auto expect_hardmax = [&](const std::vector<float>& got, int64_t width, const char* label) {
    for (int64_t row = 0; row < 24 / width; ++row) {
      int64_t first = 0;
      for (int64_t c = 1; c < width; ++c) {
        if (xv[static_cast<size_t>(row * width + c)] > xv[static_cast<size_t>(row * width + first)]) first = c;
      }
      for (int64_t c = 0; c < width; ++c) {
        EXPECT_EQ(got[static_cast<size_t>(row * width + c)], c == first ? 1.0f : 0.0f) << label << " " << row << "," << c;
      }
    }
  };
  expect_hardmax(hard, 4, "opset 13");
  // Opset 11: one row per batch element, its 12 values (axis 1 coerces to 2 x 12).
  OnnxBuilder old(11);
  old.input("x", kFloat, {2, 3, 4}).output("h", kFloat, {2, 3, 4});
  OnnxBuilder::attr_i(old.node("Hardmax", {"x"}, {"h"}), "axis", 1);
  expect_hardmax(reference::run_graph(importer::import_onnx_bytes(old.bytes(), ".").graph, std::vector<Tensor>{x})[0].to_floats(), 12,
                 "opset 11");
  OnnxBuilder bad(13);
  bad.input("x", kFloat, {2, 3, 4}).input("i", kInt64, {2, 3}).output("g", kFloat, {2, 3});
  bad.node("GatherElements", {"x", "i"}, {"g"}, "picker");
  testing::expect_refused(bad, "picker", "indices must have the data's rank 3");
}

// TensorScatter (a KV cache's decode step) becomes one ScatterND: against a loop over the
// operator's definition, with each sample's write index, linear and circular (wrapping past the
// cache's end); the batch axis as the sequence axis, or an update longer than the cache, refused.
TEST(Import, TensorScatterWritesEachSamplesUpdateAtItsIndex) {
  const int64_t batch = 2, heads = 2, max_seq = 5, seq = 3, dim = 2;
  for (const std::string mode : {"linear", "circular"}) {
    OnnxBuilder b(24);
    b.input("past", kFloat, {batch, heads, max_seq, dim}).input("update", kFloat, {batch, heads, seq, dim});
    b.input("at", kInt64, {batch}).output("present", kFloat, {batch, heads, max_seq, dim});
    OnnxBuilder::attr_s(b.node("TensorScatter", {"past", "update", "at"}, {"present"}), "mode", mode);
    const Graph g = importer::import_onnx_bytes(b.bytes(), ".").graph;
    EXPECT_EQ(histogram(g).at("ScatterND"), 1);
    std::vector<float> past(static_cast<size_t>(batch * heads * max_seq * dim)), update(static_cast<size_t>(batch * heads * seq * dim));
    for (size_t k = 0; k < past.size(); ++k) past[k] = -1.0f - static_cast<float>(k);
    for (size_t k = 0; k < update.size(); ++k) update[k] = 1.0f + static_cast<float>(k);
    const std::vector<int64_t> at = {1, mode == "circular" ? 4 : 2};  // circular: positions 4, 0, 1
    std::vector<float> want = past;
    for (int64_t n = 0; n < batch; ++n) {
      for (int64_t h = 0; h < heads; ++h) {
        for (int64_t t = 0; t < seq; ++t) {
          const int64_t to = (at[static_cast<size_t>(n)] + t) % max_seq;
          for (int64_t d = 0; d < dim; ++d) {
            want[static_cast<size_t>(((n * heads + h) * max_seq + to) * dim + d)] =
                update[static_cast<size_t>(((n * heads + h) * seq + t) * dim + d)];
          }
        }
      }
    }
    const std::vector<Tensor> run = reference::run_graph(
        g, std::vector<Tensor>{Tensor::from_floats(DType::kF32, {batch, heads, max_seq, dim}, past),
                               Tensor::from_floats(DType::kF32, {batch, heads, seq, dim}, update),
                               Tensor::from_ints(DType::kI64, {batch}, at)});
    EXPECT_EQ(run[0].to_floats(), want) << mode;
  }
  OnnxBuilder on_batch(24);
  on_batch.input("past", kFloat, {4, 3}).input("update", kFloat, {2, 3}).output("present", kFloat, {4, 3});
  OnnxBuilder::attr_i(on_batch.node("TensorScatter", {"past", "update"}, {"present"}, "culprit"), "axis", 0);
  testing::expect_refused(on_batch, "culprit", "axis 0 is the batch");
  OnnxBuilder too_long(24);
  too_long.input("past", kFloat, {1, 2, 3}).input("update", kFloat, {1, 4, 3}).output("present", kFloat, {1, 2, 3});
  too_long.node("TensorScatter", {"past", "update"}, {"present"}, "culprit");
  testing::expect_refused(too_long, "culprit", "update of shape 1x4x3 does not fit the cache of shape 1x2x3");
}

// DeformConv with zero offsets samples exactly the convolution's taps: against Conv with the same
// weight groups, strides, pads and dilations (and offset groups, which zero offsets make moot),
// with a mask of ones and a bias; then a mask of halves halves the sum before the bias.
TEST(Import, DeformConvWithZeroOffsetsIsTheConvolution) {
  const Shape xs = {2, 4, 7, 6}, ws = {6, 2, 3, 3}, ys = {2, 6, 4, 2};
  const auto build = [&](const std::string& op) {
    OnnxBuilder b(19);
    b.input("x", kFloat, xs).input("w", kFloat, ws).input("bias", kFloat, {6}).output("y", kFloat, ys);
    if (op == "DeformConv") b.input("offset", kFloat, {2, 2 * 9 * 2, 4, 2}).input("mask", kFloat, {2, 2 * 9, 4, 2});
    onnx::NodeProto& n = op == "DeformConv" ? b.node(op, {"x", "w", "offset", "bias", "mask"}, {"y"}) : b.node(op, {"x", "w", "bias"}, {"y"});
    OnnxBuilder::attr_i(n, "group", 2);
    if (op == "DeformConv") OnnxBuilder::attr_i(n, "offset_group", 2);
    OnnxBuilder::attr_ints(n, "strides", {2, 1});
    OnnxBuilder::attr_ints(n, "pads", {1, 0, 1, 0});
    OnnxBuilder::attr_ints(n, "dilations", {1, 2});
    return importer::import_onnx_bytes(b.bytes(), ".").graph;
  };
  const Tensor x = iota_tensor(xs, 0.3f), w = iota_tensor(ws, 0.05f), bias = iota_tensor({6}, 1.0f);
  const std::vector<float> conv = reference::run_graph(build("Conv"), std::vector<Tensor>{x, w, bias})[0].to_floats();
  const Tensor zeros = Tensor::from_floats(DType::kF32, {2, 36, 4, 2}, std::vector<float>(2 * 36 * 8, 0.0f));
  for (const float m : {1.0f, 0.5f}) {
    const Tensor mask = Tensor::from_floats(DType::kF32, {2, 18, 4, 2}, std::vector<float>(2 * 18 * 8, m));
    const std::vector<float> deform = reference::run_graph(build("DeformConv"), std::vector<Tensor>{x, w, bias, zeros, mask})[0].to_floats();
    ASSERT_EQ(deform.size(), conv.size());
    const std::vector<float> b = bias.to_floats();
    for (size_t k = 0; k < conv.size(); ++k) {
      const float channel_bias = b[(k / 8) % 6];
      EXPECT_NEAR(deform[k], m * (conv[k] - channel_bias) + channel_bias, 1e-4) << "mask " << m << " at " << k;
    }
  }
}

// The determinant by cofactor expansion, in double: an oracle independent of elimination.
double cofactor_det(const std::vector<double>& m, size_t n) {
  if (n == 1) return m[0];
  double sum = 0;
  for (size_t j = 0; j < n; ++j) {
    std::vector<double> minor;
    for (size_t r = 1; r < n; ++r) {
      for (size_t c = 0; c < n; ++c) {
        if (c != j) minor.push_back(m[r * n + c]);
      }
    }
    sum += (j % 2 ? -1.0 : 1.0) * m[j] * cofactor_det(minor, n - 1);
  }
  return sum;
}

// Det by unrolled elimination with partial pivoting against cofactor expansion in double, on a
// [2, 3] batch of order-5 matrices drawn from a printed seed: one with a zero leading element
// (the pivot must move), one singular (two equal rows: 0), one with a zero column, the rest random.
TEST(Import, DetMatchesCofactorExpansion) {
  std::mt19937 rng(testing::test_seed());
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  const size_t n = 5, batch = 6;
  std::vector<float> x(batch * n * n);
  for (float& v : x) v = u(rng);
  x[0] = 0.0f;  // matrix 0: no pivot in place
  for (size_t c = 0; c < n; ++c) x[n * n + 3 * n + c] = x[n * n + 1 * n + c];  // matrix 1: rows 1 and 3 equal
  for (size_t r = 0; r < n; ++r) x[2 * n * n + r * n + 2] = 0.0f;  // matrix 2: column 2 zero
  OnnxBuilder b(11);
  b.input("x", kFloat, {2, 3, 5, 5}).output("d", kFloat, {2, 3});
  b.node("Det", {"x"}, {"d"});
  const Graph g = importer::import_onnx_bytes(b.bytes(), ".").graph;
  const std::vector<float> got = reference::run_graph(g, std::vector<Tensor>{Tensor::from_floats(DType::kF32, {2, 3, 5, 5}, x)})[0].to_floats();
  ASSERT_EQ(got.size(), batch);
  for (size_t m = 0; m < batch; ++m) {
    const std::vector<double> a(x.begin() + static_cast<std::ptrdiff_t>(m * n * n), x.begin() + static_cast<std::ptrdiff_t>((m + 1) * n * n));
    const double want = cofactor_det(a, n);
    EXPECT_NEAR(got[m], want, 1e-4 * std::max(1.0, std::abs(want))) << "matrix " << m;
  }
  EXPECT_EQ(got[2], 0.0f);  // a zero column: exactly 0
  OnnxBuilder bad(11);
  bad.input("x", kFloat, {2, 3, 4}).output("d", kFloat, {2});
  bad.node("Det", {"x"}, {"d"}, "culprit");
  testing::expect_refused(bad, "culprit", "X must be [..., n, n], got 2x3x4");
}

// RoiAlign's adaptive grid (sampling_ratio 0: ceil(ROI extent / bins) points a bin, so the ROIs
// must be known at import) against the same grid given as sampling_ratio with the ROIs as data,
// in both modes and coordinate modes, ROIs partly outside the map: equal. ROIs whose adaptive grids
// differ, or ROIs that are data under sampling_ratio 0, are refused naming sampling_ratio. (onnx's
// cases check the definition itself, sampling_ratio 2.)
TEST(Import, RoiAlignsAdaptiveGridIsTheGridItComputes) {
  std::vector<float> x(2 * 3 * 6 * 7);
  for (size_t k = 0; k < x.size(); ++k) x[k] = std::sin(0.37f * static_cast<float>(k)) * 3.0f;
  // Extents 4 x 4, 3.5 x 5 and 3.5 x 6 over 2 x 3 bins: a 2 x 2 grid each.
  const std::vector<float> rois = {0.5f, 1.0f, 4.5f, 5.0f, -2.0f, -1.5f, 3.0f, 2.0f, 2.0f, 3.0f, 8.0f, 6.5f};
  const std::vector<Tensor> inputs = {Tensor::from_floats(DType::kF32, {2, 3, 6, 7}, x), Tensor::from_floats(DType::kF32, {3, 4}, rois),
                                      Tensor::from_ints(DType::kI64, {3}, std::vector<int64_t>{1, 0, 1})};
  const auto model = [](const std::string& mode, const std::string& ctm, int64_t ratio) {
    OnnxBuilder b(16);
    b.input("x", kFloat, {2, 3, 6, 7}).input("rois", kFloat, {3, 4}).input("batch", kInt64, {3}).output("y", kFloat, {3, 3, 2, 3});
    onnx::NodeProto& n = b.node("RoiAlign", {"x", "rois", "batch"}, {"y"}, "culprit");
    OnnxBuilder::attr_s(n, "mode", mode);
    OnnxBuilder::attr_s(n, "coordinate_transformation_mode", ctm);
    OnnxBuilder::attr_i(n, "output_height", 2);
    OnnxBuilder::attr_i(n, "output_width", 3);
    OnnxBuilder::attr_i(n, "sampling_ratio", ratio);
    return b;
  };
  for (const std::string mode : {"avg", "max"}) {
    for (const std::string ctm : {"half_pixel", "output_half_pixel"}) {
      importer::ImportOptions pinned;
      pinned.input_values["rois"] = inputs[1];
      const Graph adaptive = importer::import_onnx_bytes(model(mode, ctm, 0).bytes(), ".", pinned).graph;
      const Graph given = importer::import_onnx_bytes(model(mode, ctm, 2).bytes(), ".").graph;
      EXPECT_EQ(reference::run_graph(adaptive, inputs)[0].to_floats(), reference::run_graph(given, inputs)[0].to_floats())
          << mode << " " << ctm;
      EXPECT_NE(reference::run_graph(importer::import_onnx_bytes(model(mode, ctm, 1).bytes(), ".").graph, inputs)[0].to_floats(),
                reference::run_graph(given, inputs)[0].to_floats())
          << "one point a bin samples as two do: the comparison above shows nothing";
    }
  }
  testing::expect_refused(model("avg", "half_pixel", 0), "culprit",
                          "sampling_ratio 0 samples each ROI by its size, so the ROIs must be constant");
  std::vector<float> taller = rois;
  taller[11] = 10.0f;  // ROI 2's extent 7 over 2 bins: a grid of 4 rows where ROI 0 takes 2
  importer::ImportOptions pinned;
  pinned.input_values["rois"] = Tensor::from_floats(DType::kF32, {3, 4}, taller);
  try {
    importer::import_onnx_bytes(model("avg", "half_pixel", 0).bytes(), ".", pinned);
    ADD_FAILURE() << "ROIs of different grids were accepted under sampling_ratio 0";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ROI 2 samples its bins on a vertical grid of 4 where ROI 0 takes 2"), std::string::npos)
        << e.what();
  }
}

// ScatterElements becomes a ScatterND into the flattened data (repeated indices combined in
// order, negative ones from the end) and GatherND a Gather at computed flat indices (with a batch
// axis): the results against loops over the operators' definitions; bad shapes (and an LpPool of
// p 0, an integer HannWindow, a ReverseSequence whose batch and time are one axis, groups that do
// not divide the channels, a BitShift of floats) are refused naming the node and what is wrong.
TEST(Import, ScatterElementsAndGatherNdLowerToCanonicalOps) {
  OnnxBuilder b(18);
  b.input("d", kFloat, {3, 4}).input("i", kInt64, {2, 4}).input("u", kFloat, {2, 4}).output("s", kFloat, {3, 4});
  b.input("t", kFloat, {2, 3, 4}).input("ti", kInt64, {2, 2, 2}).output("n", kFloat, {2, 2});
  onnx::NodeProto& scatter = b.node("ScatterElements", {"d", "i", "u"}, {"s"});
  OnnxBuilder::attr_i(scatter, "axis", 0);
  OnnxBuilder::attr_s(scatter, "reduction", "mul");
  OnnxBuilder::attr_i(b.node("GatherND", {"t", "ti"}, {"n"}), "batch_dims", 1);
  const Graph g = importer::import_onnx_bytes(b.bytes(), ".").graph;
  const std::map<std::string, int> ops = histogram(g);
  EXPECT_EQ(ops.count("ScatterElements") + ops.count("GatherND"), 0u);
  EXPECT_EQ(ops.at("ScatterND"), 1);
  EXPECT_EQ(ops.at("Gather"), 1);
  std::vector<float> dv(12), uv(8), tv(24);
  for (size_t k = 0; k < dv.size(); ++k) dv[k] = 1.0f + static_cast<float>(k % 5);
  for (size_t k = 0; k < uv.size(); ++k) uv[k] = 2.0f + static_cast<float>(k % 3);
  for (size_t k = 0; k < tv.size(); ++k) tv[k] = static_cast<float>(k);
  const std::vector<int64_t> iv = {0, -1, 2, 0, 0, 2, -3, 1};   // column 0 takes row 0 twice
  const std::vector<int64_t> tiv = {2, -1, 0, 3, -2, 0, 1, 1};  // (row, column) pairs per batch
  const std::vector<Tensor> run = reference::run_graph(
      g, std::vector<Tensor>{Tensor::from_floats(DType::kF32, {3, 4}, dv), Tensor::from_ints(DType::kI64, {2, 4}, iv),
                             Tensor::from_floats(DType::kF32, {2, 4}, uv), Tensor::from_floats(DType::kF32, {2, 3, 4}, tv),
                             Tensor::from_ints(DType::kI64, {2, 2, 2}, tiv)});
  std::vector<float> want = dv;
  for (size_t k = 0; k < iv.size(); ++k) {
    const int64_t row = iv[k] < 0 ? iv[k] + 3 : iv[k];
    want[static_cast<size_t>(row * 4) + k % 4] *= uv[k];
  }
  EXPECT_EQ(run[0].to_floats(), want);
  std::vector<float> gathered;
  for (int64_t batch = 0; batch < 2; ++batch) {
    for (int64_t t = 0; t < 2; ++t) {
      int64_t row = tiv[static_cast<size_t>((batch * 2 + t) * 2)], col = tiv[static_cast<size_t>((batch * 2 + t) * 2 + 1)];
      row = row < 0 ? row + 3 : row;
      col = col < 0 ? col + 4 : col;
      gathered.push_back(tv[static_cast<size_t>((batch * 3 + row) * 4 + col)]);
    }
  }
  EXPECT_EQ(run[1].to_floats(), gathered);
  OnnxBuilder mismatched(18);
  mismatched.input("d", kFloat, {3, 4}).input("i", kInt64, {2, 4}).input("u", kFloat, {2, 3}).output("s", kFloat, {3, 4});
  mismatched.node("ScatterElements", {"d", "i", "u"}, {"s"}, "culprit");
  testing::expect_refused(mismatched, "culprit", "updates must have the indices' shape 2x4, got 2x3");
  OnnxBuilder too_many(18);
  too_many.input("t", kFloat, {2, 3}).input("ti", kInt64, {2, 2}).output("n", kFloat, {2});
  OnnxBuilder::attr_i(too_many.node("GatherND", {"t", "ti"}, {"n"}, "culprit"), "batch_dims", 1);
  testing::expect_refused(too_many, "culprit", "index tuples of 2 coordinates do not fit data of rank 2 after 1 batch axes");
  OnnxBuilder no_power(18);
  no_power.input("x", kFloat, {1, 1, 4, 4}).output("y", kFloat, {1, 1, 3, 3});
  onnx::NodeProto& pool = no_power.node("LpPool", {"x"}, {"y"}, "culprit");
  OnnxBuilder::attr_i(pool, "p", 0);
  OnnxBuilder::attr_ints(pool, "kernel_shape", {2, 2});
  testing::expect_refused(no_power, "culprit", "p must be at least 1, got 0");
  OnnxBuilder integer_window(18);
  integer_window.initializer("size", Tensor::from_ints(DType::kI64, {}, std::vector<int64_t>{8}));
  integer_window.output("w", kInt64, {8});
  OnnxBuilder::attr_i(integer_window.node("HannWindow", {"size"}, {"w"}, "culprit"), "output_datatype", 7);
  testing::expect_refused(integer_window, "culprit", "output_datatype 7 is not a floating-point type");
  OnnxBuilder same_axes(18);
  same_axes.input("x", kFloat, {3, 3}).input("lens", kInt64, {3}).output("y", kFloat, {3, 3});
  onnx::NodeProto& reverse = same_axes.node("ReverseSequence", {"x", "lens"}, {"y"}, "culprit");
  OnnxBuilder::attr_i(reverse, "batch_axis", 0);
  OnnxBuilder::attr_i(reverse, "time_axis", 0);
  testing::expect_refused(same_axes, "culprit", "batch_axis and time_axis must be 0 and 1, got 0 and 0");
  OnnxBuilder uneven(21);
  uneven.input("x", kFloat, {1, 6, 2}).input("s", kFloat, {6}).input("b", kFloat, {6}).output("y", kFloat, {1, 6, 2});
  OnnxBuilder::attr_i(uneven.node("GroupNormalization", {"x", "s", "b"}, {"y"}, "culprit"), "num_groups", 4);
  testing::expect_refused(uneven, "culprit", "num_groups 4 does not divide the 6 channels");
  OnnxBuilder float_shift(18);
  float_shift.input("x", kFloat, {3}).input("y", kFloat, {3}).output("z", kFloat, {3});
  OnnxBuilder::attr_s(float_shift.node("BitShift", {"x", "y"}, {"z"}, "culprit"), "direction", "LEFT");
  testing::expect_refused(float_shift, "culprit", "BitShift of float32 (8- to 64-bit integers are supported)");
}

// GridSample refuses a mode, a padding mode or a grid it cannot mean, naming the node and what
// is wrong (its semantics are onnx's conformance cases', reference and compiled).
TEST(Import, GridSampleRefusesWhatItCannotMean) {
  const auto model = [](std::vector<int64_t> grid, const std::string& attr, const std::string& value) {
    OnnxBuilder b(20);
    b.input("x", kFloat, {1, 2, 4, 4}).input("g", kFloat, grid).output("y", kFloat, {1, 2, 3, 3});
    onnx::NodeProto& n = b.node("GridSample", {"x", "g"}, {"y"}, "culprit");
    if (!attr.empty()) OnnxBuilder::attr_s(n, attr, value);
    return b;
  };
  OnnxBuilder mode = model({1, 3, 3, 2}, "mode", "area");
  testing::expect_refused(mode, "culprit", "mode 'area' is not one of linear, nearest, cubic");
  OnnxBuilder padding = model({1, 3, 3, 2}, "padding_mode", "wrap");
  testing::expect_refused(padding, "culprit", "padding_mode 'wrap' is not one of zeros, border, reflection");
  OnnxBuilder grid = model({1, 3, 3, 3}, "", "");
  testing::expect_refused(grid, "culprit", "grid of shape 1x3x3x3 does not fit X of shape 1x2x4x4");
}

// TopK against a stable sort of each row (ties by ascending index), largest and smallest, on rows
// with repeated values and infinities, where a row's remaining elements may all equal the fill
// of taken ones: on the reference and compiled (the plan on the host executor). Every form
// (importer/lower_topk.h): pairwise ranks (k = 7 of 9: at most four launches), two stages (rows
// longer than kPairwiseTopK, the last chunk padded), rounds (k = 1; and, on the reference alone,
// 1,400 of 4,097: three chunks' candidates would be 4,200, over kPairwiseTopK).
TEST(Import, TopKSelectsInOrderWithTiesByIndexAndInfinities) {
  const unsigned seed = testing::test_seed();
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> pick(0, 5);
  const float inf = std::numeric_limits<float>::infinity();
  const float choices[] = {-inf, -1.0f, 0.0f, 0.5f, 2.0f, inf};
  struct Case {
    int64_t rows, n, k;
    std::string form;
  };
  const int64_t longer = importer::kPairwiseTopK + 1;
  for (const auto& [rows, n, k, form_name] : std::vector<Case>{
           {3, 9, 7, "pairwise"}, {3, 9, 1, "rounds"}, {3, longer, 5, "two stages"}, {1, longer, 1400, "rounds"}}) {
    const bool pairwise = form_name == "pairwise", compiled = k < 100;
    std::vector<float> x(static_cast<size_t>(rows * n));
    for (float& v : x) v = choices[pick(rng)];
    x[static_cast<size_t>((rows - 1) * n + 3)] = x[static_cast<size_t>((rows - 1) * n + 5)] = -inf;  // smallest values tie at -inf
    for (bool largest : {true, false}) {
      const std::string form = form_name + ", " + std::to_string(rows) + " x " + std::to_string(n) + ", k " + std::to_string(k) +
                               ", largest " + std::to_string(largest) + ", seed " + std::to_string(seed);
      OnnxBuilder b(11);
      b.input("x", kFloat, {rows, n}).output("v", kFloat, {rows, k}).output("i", kInt64, {rows, k});
      b.initializer("k", Tensor::from_ints(DType::kI64, {1}, std::vector<int64_t>{k}));
      OnnxBuilder::attr_i(b.node("TopK", {"x", "k"}, {"v", "i"}), "largest", largest ? 1 : 0);
      std::vector<float> want_v;
      std::vector<int64_t> want_i;
      for (int64_t r = 0; r < rows; ++r) {
        std::vector<int64_t> order(static_cast<size_t>(n));
        std::iota(order.begin(), order.end(), int64_t{0});
        std::stable_sort(order.begin(), order.end(), [&](int64_t p, int64_t q) {
          return largest ? x[static_cast<size_t>(r * n + p)] > x[static_cast<size_t>(r * n + q)]
                         : x[static_cast<size_t>(r * n + p)] < x[static_cast<size_t>(r * n + q)];
        });
        for (int64_t j = 0; j < k; ++j) {
          want_i.push_back(order[static_cast<size_t>(j)]);
          want_v.push_back(x[static_cast<size_t>(r * n + order[static_cast<size_t>(j)])]);
        }
      }
      const Tensor input = Tensor::from_floats(DType::kF32, {rows, n}, x);
      const std::vector<Tensor> ref = reference::run_graph(importer::import_onnx_bytes(b.bytes(), ".").graph, std::vector<Tensor>{input});
      EXPECT_EQ(ref[0].to_floats(), want_v) << "reference, " << form;
      EXPECT_EQ(ref[1].to_ints(), want_i) << "reference, " << form;
      if (!compiled) continue;  // a launch a round
      testing::TestDir dir("topk");
      b.write(dir / "model.onnx");
      const compiler::PipelineResult r = compiler::compile_model(dir / "model.onnx", planner::find_device("h100"), {});
      auto host = backend::make_host_backend();
      runtime::PlanRunner runner(r.bundle, *host);
      if (form_name != "rounds") {
        EXPECT_LE(runner.launches(), pairwise ? 4u : 8u) << form;  // the rounds take 3 a selection
      }
      const std::vector<Tensor> got = runner.run(std::vector<Tensor>{input});
      EXPECT_EQ(got[0].to_floats(), want_v) << "compiled, " << form;
      EXPECT_EQ(got[1].to_ints(), want_i) << "compiled, " << form;
    }
  }
  // Two stages along a leading axis of int32 (padded with the type's worst value, which ties with
  // the elements that hold it at higher indices): [4,097, 2] along axis 0, compiled.
  {
    const int64_t n = importer::kPairwiseTopK + 1, cols = 2, k = 6;
    std::uniform_int_distribution<int> small(-3, 3);
    std::vector<int64_t> xi(static_cast<size_t>(n * cols));
    for (int64_t& v : xi) v = small(rng);
    xi[7 * cols] = std::numeric_limits<int32_t>::min();
    xi[9 * cols + 1] = std::numeric_limits<int32_t>::max();
    for (bool largest : {true, false}) {
      OnnxBuilder b(11);
      b.input("x", testing::kInt32, {n, cols}).output("v", testing::kInt32, {k, cols}).output("i", kInt64, {k, cols});
      b.initializer("k", Tensor::from_ints(DType::kI64, {1}, std::vector<int64_t>{k}));
      onnx::NodeProto& node = b.node("TopK", {"x", "k"}, {"v", "i"});
      OnnxBuilder::attr_i(node, "largest", largest ? 1 : 0);
      OnnxBuilder::attr_i(node, "axis", 0);
      std::vector<int64_t> want_v(static_cast<size_t>(k * cols)), want_i(want_v.size());
      for (int64_t c = 0; c < cols; ++c) {
        std::vector<int64_t> order(static_cast<size_t>(n));
        std::iota(order.begin(), order.end(), int64_t{0});
        std::stable_sort(order.begin(), order.end(), [&](int64_t p, int64_t q) {
          const int64_t a = xi[static_cast<size_t>(p * cols + c)], d = xi[static_cast<size_t>(q * cols + c)];
          return largest ? a > d : a < d;
        });
        for (int64_t j = 0; j < k; ++j) {
          want_i[static_cast<size_t>(j * cols + c)] = order[static_cast<size_t>(j)];
          want_v[static_cast<size_t>(j * cols + c)] = xi[static_cast<size_t>(order[static_cast<size_t>(j)] * cols + c)];
        }
      }
      const Tensor input = Tensor::from_ints(DType::kI32, {n, cols}, xi);
      const std::string form = "two stages, int32 along axis 0, largest " + std::to_string(largest) + ", seed " + std::to_string(seed);
      const std::vector<Tensor> ref = reference::run_graph(importer::import_onnx_bytes(b.bytes(), ".").graph, std::vector<Tensor>{input});
      EXPECT_EQ(ref[0].to_ints(), want_v) << "reference, " << form;
      EXPECT_EQ(ref[1].to_ints(), want_i) << "reference, " << form;
      testing::TestDir dir("topk_int");
      b.write(dir / "model.onnx");
      const compiler::PipelineResult r = compiler::compile_model(dir / "model.onnx", planner::find_device("h100"), {});
      auto host = backend::make_host_backend();
      runtime::PlanRunner runner(r.bundle, *host);
      EXPECT_LE(runner.launches(), 8u) << form;
      const std::vector<Tensor> got = runner.run(std::vector<Tensor>{input});
      EXPECT_EQ(got[0].to_ints(), want_v) << "compiled, " << form;
      EXPECT_EQ(got[1].to_ints(), want_i) << "compiled, " << form;
    }
  }
  OnnxBuilder too_many(11);
  too_many.input("x", kFloat, {2, 4}).output("v", kFloat, {2, 5}).output("i", kInt64, {2, 5});
  too_many.initializer("k", Tensor::from_ints(DType::kI64, {1}, std::vector<int64_t>{5}));
  too_many.node("TopK", {"x", "k"}, {"v", "i"}, "culprit");
  testing::expect_refused(too_many, "culprit", "k 5 is outside [0, 4]");
}

// DFT and STFT refuse what they cannot mean, naming the node and what is wrong (their semantics
// are onnx's conformance cases', reference and compiled).
TEST(Import, DftAndStftRefuseWhatTheyCannotMean) {
  OnnxBuilder last(17);
  last.input("x", kFloat, {1, 8, 2}).output("y", kFloat, {1, 8, 2});
  OnnxBuilder::attr_i(last.node("DFT", {"x"}, {"y"}, "culprit"), "axis", 2);
  testing::expect_refused(last, "culprit", "axis 2 is the last one, the real and imaginary parts");
  OnnxBuilder parts(17);
  parts.input("x", kFloat, {1, 8, 3}).output("y", kFloat, {1, 8, 2});
  parts.node("DFT", {"x"}, {"y"}, "culprit");
  testing::expect_refused(parts, "culprit", "the signal's last axis holds the real and imaginary parts (1 or 2 entries), got shape 1x8x3");
  OnnxBuilder runtime_length(17);
  runtime_length.input("x", kFloat, {1, 8, 1}).input("n", kInt64, {}).output("y", kFloat, {1, 8, 2});
  runtime_length.node("DFT", {"x", "n"}, {"y"}, "culprit");
  testing::expect_refused(runtime_length, "culprit", "the dft_length) is not a constant");
  OnnxBuilder frames(17);
  frames.input("x", kFloat, {1, 8, 1}).output("y", kFloat, {1, 1, 9, 2});
  frames.initializer("step", Tensor::from_ints(DType::kI64, {}, std::vector<int64_t>{4}));
  frames.initializer("length", Tensor::from_ints(DType::kI64, {}, std::vector<int64_t>{16}));
  frames.node("STFT", {"x", "step", "", "length"}, {"y"}, "culprit");
  testing::expect_refused(frames, "culprit", "frames of 16 samples do not fit a signal of 8");
}

// If, Loop and Scan are inlined: an If on a condition known at import (a constant, or an input
// whose value is given) imports the branch it picks (an If decided at run time plans both and is
// pinned here; tests/unit/test_runtime_if.cpp runs it unpinned), whose nodes read a value of the enclosing
// graph produced by a node listed after the If; a Scan (reverse, states and a scan output) and a
// Loop (trip count, carried value, scan output) unroll; what is only known from data is refused
// naming the node and the input.
TEST(Import, IfLoopAndScanAreInlined) {
  using testing::kBool;
  OnnxBuilder then_branch, else_branch;
  then_branch.output("t", kFloat, {3});
  then_branch.node("Mul", {"late", "late"}, {"t"});  // `late` comes from the enclosing graph
  else_branch.output("e", kFloat, {3});
  else_branch.node("Neg", {"late"}, {"e"});
  OnnxBuilder b(13);
  b.input("c", kBool, {}).input("x", kFloat, {3}).output("y", kFloat, {3});
  onnx::NodeProto& branch = b.node("If", {"c"}, {"y"}, "choose");
  OnnxBuilder::attr_graph(branch, "then_branch", then_branch);
  OnnxBuilder::attr_graph(branch, "else_branch", else_branch);
  b.node("Add", {"x", "x"}, {"late"});  // after the If in the file
  const Tensor x = Tensor::from_floats(DType::kF32, {3}, std::vector<float>{1, -2, 3});
  for (bool cond : {true, false}) {
    importer::ImportOptions opt;
    opt.input_values["c"] = Tensor::from_ints(DType::kBool, {}, std::vector<int64_t>{cond ? 1 : 0});
    const Graph g = importer::import_onnx_bytes(b.bytes(), ".", opt).graph;
    const std::vector<float> got =
        reference::run_graph(g, std::vector<Tensor>{opt.input_values["c"], x})[0].to_floats();
    EXPECT_EQ(got, cond ? std::vector<float>({4, 16, 36}) : std::vector<float>({-2, 4, -6})) << "cond " << cond;
  }
  // `fusetune compile --input-value` pins the condition: the plan holds the branch it picks and
  // nothing is decided at run time. Unpinned, both branches are planned and the runtime picks
  // (tests/unit/test_runtime_if.cpp).
  testing::TestDir dir("if");
  b.write(dir / "model.onnx");
  std::filesystem::create_directories(dir / "data");
  const Tensor yes = Tensor::from_ints(DType::kBool, {}, std::vector<int64_t>{1});
  importer::write_tensor_file(dir / "c.pb", "c", yes);
  importer::write_tensor_file(dir / "data" / "input_0.pb", "c", yes);
  importer::write_tensor_file(dir / "data" / "input_1.pb", "x", x);
  importer::write_tensor_file(dir / "data" / "output_0.pb", "y", Tensor::from_floats(DType::kF32, {3}, std::vector<float>{4, 16, 36}));
  const std::string model = (dir / "model.onnx").string();
  for (const bool pin : {false, true}) {
    const std::string plan = (dir / (pin ? "pinned" : "unpinned")).string();
    const testing::Outcome compiled = testing::run_cli("compile '" + model + "' --device h100 --out '" + plan + "'" +
                                                       (pin ? " --input-value 'c=" + (dir / "c.pb").string() + "'" : ""));
    ASSERT_EQ(compiled.exit_code, 0) << compiled.output;
    const std::string manifest = read_file(std::filesystem::path(plan) / "manifest.json", "manifest");
    EXPECT_EQ(manifest.find("\"when\"") == std::string::npos, pin) << manifest;
    const testing::Outcome ran = testing::run_cli("run '" + plan + "' --inputs '" + (dir / "data").string() + "'");
    EXPECT_EQ(ran.exit_code, 0) << ran.output;
    EXPECT_NE(ran.output.find("outputs: 1 match, 0 differ"), std::string::npos) << ran.output;
  }
  // Scan, reverse: running sums of the rows from the last, and each step's sum.
  OnnxBuilder scan_body;
  scan_body.input("acc", kFloat, {2}).input("row", kFloat, {2}).output("acc_out", kFloat, {2}).output("each", kFloat, {2});
  scan_body.node("Add", {"acc", "row"}, {"acc_out"});
  scan_body.node("Identity", {"acc_out"}, {"each"});
  OnnxBuilder scan(11);
  scan.input("init", kFloat, {2}).input("rows", kFloat, {3, 2}).output("total", kFloat, {2}).output("sums", kFloat, {3, 2});
  onnx::NodeProto& sn = scan.node("Scan", {"init", "rows"}, {"total", "sums"}, "scan");
  OnnxBuilder::attr_graph(sn, "body", scan_body);
  OnnxBuilder::attr_i(sn, "num_scan_inputs", 1);
  OnnxBuilder::attr_ints(sn, "scan_input_directions", {1});
  const std::vector<Tensor> sr = reference::run_graph(
      importer::import_onnx_bytes(scan.bytes(), ".").graph,
      std::vector<Tensor>{Tensor::from_floats(DType::kF32, {2}, std::vector<float>{10, 20}),
                          Tensor::from_floats(DType::kF32, {3, 2}, std::vector<float>{1, 2, 3, 4, 5, 6})});
  EXPECT_EQ(sr[0].to_floats(), std::vector<float>({19, 32}));
  EXPECT_EQ(sr[1].to_floats(), std::vector<float>({15, 26, 18, 30, 19, 32}));
  // Loop: a condition computed from data cannot be unrolled.
  OnnxBuilder loop_body;
  loop_body.input("i", kInt64, {}).input("go", kBool, {}).input("v", kFloat, {3});
  loop_body.output("go_out", kBool, {}).output("v_out", kFloat, {3});
  loop_body.node("Add", {"v", "v"}, {"v_out"});
  loop_body.node("ReduceSum", {"v_out"}, {"s"});
  loop_body.initializer("limit", Tensor::from_floats(DType::kF32, {}, std::vector<float>{100}));
  loop_body.node("Less", {"s", "limit"}, {"go_out"});
  OnnxBuilder loop(13);
  loop.input("v0", kFloat, {3}).output("v", kFloat, {3});
  loop.initializer("go", Tensor::from_ints(DType::kBool, {}, std::vector<int64_t>{1}));
  OnnxBuilder::attr_graph(loop.node("Loop", {"", "go", "v0"}, {"v"}, "doubling"), "body", loop_body);
  testing::expect_refused(loop, "doubling", "the body's condition output is computed from data at iteration 0");
}

// LSTM, GRU and RNN against their equations computed here in double, on what onnx's conformance
// cases leave out: an LSTM in layout 1 with initial states, peepholes, input_forget, clip, sequence
// lengths that differ (past its length an entry keeps its state and writes zeros) and
// activations with alphas and betas; a reverse GRU with linear_before_reset; a bidirectional RNN
// with Affine activations. Differing lengths in reverse are refused.
TEST(Import, RecurrentLayersFollowTheirEquations) {
  const unsigned seed = testing::test_seed();
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.6f);
  constexpr int64_t T = 4, B = 3, I = 2, H = 3;
  const auto random = [&](int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    for (float& e : v) e = normal(rng);
    return v;
  };
  const auto hard_sigmoid = [](double v) { return std::max(0.0, std::min(1.0, 0.3 * v + 0.6)); };
  const auto scaled_tanh = [](double v) { return 1.2 * std::tanh(0.8 * v); };
  const auto leaky = [](double v) { return v < 0 ? 0.1 * v : v; };
  const auto affine = [](double v) { return 0.5 * v + 0.25; };
  // a x b^T rows: sum over k of a[k] * m[row][k] for a matrix m of `cols` columns at `offset` rows.
  const auto dot = [](const std::vector<float>& m, int64_t row, int64_t cols, const double* a) {
    double s = 0;
    for (int64_t k = 0; k < cols; ++k) s += a[k] * m[static_cast<size_t>(row * cols + k)];
    return s;
  };
  const auto run = [&](OnnxBuilder& b, const std::vector<Tensor>& inputs) {
    return reference::run_graph(importer::import_onnx_bytes(b.bytes(), ".").graph, inputs);
  };
  const auto expect_near = [&](const std::vector<float>& got, const std::vector<double>& want, const char* what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    // float32 steps against double: 1e-5 relative to the value (unbounded activations reach hundreds)
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_NEAR(got[i], want[i], 1e-5 * std::max(1.0, std::abs(want[i]))) << what << " element " << i << ", seed " << seed;
    }
  };
  {  // LSTM, layout 1
    const std::vector<float> x = random(B * T * I), w = random(4 * H * I), r = random(4 * H * H), bias = random(8 * H),
                             h0 = random(B * H), c0 = random(B * H), p = random(3 * H);
    const std::vector<int64_t> lens = {4, 2, 0};
    OnnxBuilder m(14);
    m.input("X", kFloat, {B, T, I}).input("h0", kFloat, {B, 1, H}).input("c0", kFloat, {B, 1, H});
    m.output("Y", kFloat, {B, T, 1, H}).output("Yh", kFloat, {B, 1, H}).output("Yc", kFloat, {B, 1, H});
    m.initializer("W", Tensor::from_floats(DType::kF32, {1, 4 * H, I}, w)).initializer("R", Tensor::from_floats(DType::kF32, {1, 4 * H, H}, r));
    m.initializer("B", Tensor::from_floats(DType::kF32, {1, 8 * H}, bias)).initializer("P", Tensor::from_floats(DType::kF32, {1, 3 * H}, p));
    m.initializer("L", Tensor::from_ints(DType::kI32, {B}, lens));
    onnx::NodeProto& n = m.node("LSTM", {"X", "W", "R", "B", "L", "h0", "c0", "P"}, {"Y", "Yh", "Yc"});
    OnnxBuilder::attr_i(n, "hidden_size", H);
    OnnxBuilder::attr_i(n, "layout", 1);
    OnnxBuilder::attr_i(n, "input_forget", 1);
    OnnxBuilder::attr_f(n, "clip", 1.5f);
    OnnxBuilder::attr_strings(n, "activations", {"HardSigmoid", "Tanh", "ScaledTanh"});
    OnnxBuilder::attr_floats(n, "activation_alpha", {0.3f, 1.2f});
    OnnxBuilder::attr_floats(n, "activation_beta", {0.6f, 0.8f});
    std::vector<double> y(static_cast<size_t>(B * T * H), 0.0), yh(static_cast<size_t>(B * H)), yc(static_cast<size_t>(B * H));
    for (int64_t bi = 0; bi < B; ++bi) {
      std::vector<double> h(h0.begin() + bi * H, h0.begin() + (bi + 1) * H), c(c0.begin() + bi * H, c0.begin() + (bi + 1) * H);
      for (int64_t t = 0; t < lens[static_cast<size_t>(bi)]; ++t) {
        std::vector<double> xt(x.begin() + (bi * T + t) * I, x.begin() + (bi * T + t + 1) * I);
        std::vector<double> g(static_cast<size_t>(4 * H));
        for (int64_t j = 0; j < 4 * H; ++j) g[j] = dot(w, j, I, xt.data()) + dot(r, j, H, h.data()) + bias[j] + bias[4 * H + j];
        const auto clip = [](double v) { return std::max(-1.5, std::min(1.5, v)); };
        std::vector<double> nc(H), nh(H);
        for (int64_t j = 0; j < H; ++j) {
          const double i = hard_sigmoid(clip(g[j] + p[j] * c[j]));
          const double f = 1.0 - i;
          nc[j] = f * c[j] + i * std::tanh(clip(g[3 * H + j]));
          nh[j] = hard_sigmoid(clip(g[H + j] + p[H + j] * nc[j])) * scaled_tanh(nc[j]);
        }
        h = nh;
        c = nc;
        for (int64_t j = 0; j < H; ++j) y[static_cast<size_t>((bi * T + t) * H + j)] = h[j];
      }
      for (int64_t j = 0; j < H; ++j) {
        yh[static_cast<size_t>(bi * H + j)] = h[j];
        yc[static_cast<size_t>(bi * H + j)] = c[j];
      }
    }
    const std::vector<Tensor> out = run(m, {Tensor::from_floats(DType::kF32, {B, T, I}, x), Tensor::from_floats(DType::kF32, {B, 1, H}, h0),
                                            Tensor::from_floats(DType::kF32, {B, 1, H}, c0)});
    expect_near(out[0].to_floats(), y, "LSTM Y");
    expect_near(out[1].to_floats(), yh, "LSTM Y_h");
    expect_near(out[2].to_floats(), yc, "LSTM Y_c");
  }
  {  // GRU, reverse, linear_before_reset, LeakyRelu gates
    const std::vector<float> x = random(T * B * I), w = random(3 * H * I), r = random(3 * H * H), bias = random(6 * H);
    OnnxBuilder m(14);
    m.input("X", kFloat, {T, B, I}).output("Y", kFloat, {T, 1, B, H});
    m.initializer("W", Tensor::from_floats(DType::kF32, {1, 3 * H, I}, w)).initializer("R", Tensor::from_floats(DType::kF32, {1, 3 * H, H}, r));
    m.initializer("B", Tensor::from_floats(DType::kF32, {1, 6 * H}, bias));
    onnx::NodeProto& n = m.node("GRU", {"X", "W", "R", "B"}, {"Y"});
    OnnxBuilder::attr_i(n, "hidden_size", H);
    OnnxBuilder::attr_s(n, "direction", "reverse");
    OnnxBuilder::attr_i(n, "linear_before_reset", 1);
    OnnxBuilder::attr_strings(n, "activations", {"LeakyRelu", "Tanh"});
    OnnxBuilder::attr_floats(n, "activation_alpha", {0.1f});
    std::vector<double> y(static_cast<size_t>(T * B * H));
    for (int64_t bi = 0; bi < B; ++bi) {
      std::vector<double> h(H, 0.0);
      for (int64_t t = T - 1; t >= 0; --t) {
        std::vector<double> xt(x.begin() + (t * B + bi) * I, x.begin() + (t * B + bi + 1) * I), nh(H);
        for (int64_t j = 0; j < H; ++j) {
          const double z = leaky(dot(w, j, I, xt.data()) + dot(r, j, H, h.data()) + bias[j] + bias[3 * H + j]);
          const double rr = leaky(dot(w, H + j, I, xt.data()) + dot(r, H + j, H, h.data()) + bias[H + j] + bias[4 * H + j]);
          const double hc = std::tanh(dot(w, 2 * H + j, I, xt.data()) + bias[2 * H + j] + rr * (dot(r, 2 * H + j, H, h.data()) + bias[5 * H + j]));
          nh[j] = (1 - z) * hc + z * h[j];
        }
        h = nh;
        for (int64_t j = 0; j < H; ++j) y[static_cast<size_t>((t * B + bi) * H + j)] = h[j];
      }
    }
    expect_near(run(m, {Tensor::from_floats(DType::kF32, {T, B, I}, x)})[0].to_floats(), y, "GRU Y");
  }
  {  // RNN, bidirectional, Affine
    const std::vector<float> x = random(T * B * I), w = random(2 * H * I), r = random(2 * H * H);
    OnnxBuilder m(14);
    m.input("X", kFloat, {T, B, I}).output("Y", kFloat, {T, 2, B, H});
    m.initializer("W", Tensor::from_floats(DType::kF32, {2, H, I}, w)).initializer("R", Tensor::from_floats(DType::kF32, {2, H, H}, r));
    onnx::NodeProto& n = m.node("RNN", {"X", "W", "R"}, {"Y"});
    OnnxBuilder::attr_i(n, "hidden_size", H);
    OnnxBuilder::attr_s(n, "direction", "bidirectional");
    OnnxBuilder::attr_strings(n, "activations", {"Affine", "Affine"});
    OnnxBuilder::attr_floats(n, "activation_alpha", {0.5f, 0.5f});
    OnnxBuilder::attr_floats(n, "activation_beta", {0.25f, 0.25f});
    std::vector<double> y(static_cast<size_t>(T * 2 * B * H));
    for (int64_t d = 0; d < 2; ++d) {
      const std::vector<float> wd(w.begin() + d * H * I, w.begin() + (d + 1) * H * I), rd(r.begin() + d * H * H, r.begin() + (d + 1) * H * H);
      for (int64_t bi = 0; bi < B; ++bi) {
        std::vector<double> h(H, 0.0);
        for (int64_t s = 0; s < T; ++s) {
          const int64_t t = d == 0 ? s : T - 1 - s;
          std::vector<double> xt(x.begin() + (t * B + bi) * I, x.begin() + (t * B + bi + 1) * I), nh(H);
          for (int64_t j = 0; j < H; ++j) nh[j] = affine(dot(wd, j, I, xt.data()) + dot(rd, j, H, h.data()));
          h = nh;
          for (int64_t j = 0; j < H; ++j) y[static_cast<size_t>(((t * 2 + d) * B + bi) * H + j)] = h[j];
        }
      }
    }
    expect_near(run(m, {Tensor::from_floats(DType::kF32, {T, B, I}, x)})[0].to_floats(), y, "RNN Y");
  }
  OnnxBuilder uneven(14);
  uneven.input("X", kFloat, {T, B, I}).output("Y", kFloat, {T, 1, B, H});
  uneven.initializer("W", Tensor::from_floats(DType::kF32, {1, H, I}, random(H * I)));
  uneven.initializer("R", Tensor::from_floats(DType::kF32, {1, H, H}, random(H * H)));
  uneven.initializer("L", Tensor::from_ints(DType::kI32, {B}, std::vector<int64_t>{4, 1, 2}));
  onnx::NodeProto& bad = uneven.node("RNN", {"X", "W", "R", "", "L"}, {"Y"}, "culprit");
  OnnxBuilder::attr_i(bad, "hidden_size", H);
  OnnxBuilder::attr_s(bad, "direction", "reverse");
  testing::expect_refused(uneven, "culprit", "sequence lengths that differ are supported forward only, not reverse");
}

TEST(Import, AffineAfterConvWithOtherUsesIsKept) {
  Graph g;
  const int x = testing::add_input(g, "x", DType::kF32, {1, 2, 4, 4});
  const int w = testing::random_constant(g, "w", DType::kF32, {3, 2, 1, 1}, 3);
  const int c = testing::add_op(g, "Conv", {x, w}, testing::attrs({{"group", int64_t{1}}}));
  const int s = testing::random_constant(g, "s", DType::kF32, {3, 1, 1}, 4);
  const int y = testing::add_op(g, "Mul", {c, s});
  g.outputs() = {y, c};  // the conv output is also a model output: folding would change it
  EXPECT_EQ(importer::fold_conv_affine(g), 0);
  EXPECT_EQ(g.nodes().size(), 2u);
}

TEST(Import, ViewOpsBecomeReshapeAndIdentitiesVanish) {
  OnnxBuilder b;
  b.input("x", kFloat, {2, 1, 3, 4}).output("y", kFloat, {2, 12});
  b.initializer("axes", Tensor::from_ints(DType::kI64, {1}, std::vector<int64_t>{1}));
  b.node("Squeeze", {"x", "axes"}, {"s"});
  b.node("Identity", {"s"}, {"i"});
  b.node("Dropout", {"i"}, {"d"});
  b.node("Unsqueeze", {"d", "axes"}, {"u"});
  b.node("Flatten", {"u"}, {"y"});
  const auto m = importer::import_onnx_bytes(b.bytes(), ".");
  EXPECT_EQ(histogram(m.graph), (std::map<std::string, int>{{"Reshape", 1}}));
}

// A large external weight stays in its file, mapped: equal to the file's bytes, shared by copies,
// unchanged in the file when a copy is written to, and the same after its pages are given back.
// A small one, or one at an offset not aligned for every element type, is read.
TEST(Import, LargeExternalDataIsMappedFromItsFileAndNeverWrittenThrough) {
  const fs::path dir = fs::temp_directory_path() / ("fusetune_map_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  constexpr int64_t n = 1024;  // 4 MB of float
  Tensor w(DType::kF32, {n, n});
  const Tensor small = iota_tensor({4, 4});
  {
    std::vector<float> v(static_cast<size_t>(n * n));
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 1000) * 0.001f;
    w.set_floats(v);
    std::ofstream out(dir / "w.bin", std::ios::binary);
    out.write(reinterpret_cast<const char*>(w.data()), static_cast<std::streamsize>(w.nbytes()));
    out.write("PAD!", 4);  // the small one follows at an offset that is not a multiple of 64
    out.write(reinterpret_cast<const char*>(small.data()), static_cast<std::streamsize>(small.nbytes()));
    out.write(std::string(61, '\0').data(), 61);  // then a large one at an unaligned offset
    out.write(reinterpret_cast<const char*>(w.data()), static_cast<std::streamsize>(w.nbytes()));
  }
  const std::string before = read_file(dir / "w.bin", "weights");
  const int64_t unaligned = n * n * 4 + 4 + 64 + 61;
  ASSERT_NE(unaligned % 64, 0);
  OnnxBuilder b;
  b.input("x", kFloat, {4, n}).input("x2", kFloat, {4, 4}).output("y", kFloat, {4, n}).output("z", kFloat, {4, 4});
  b.input("x3", kFloat, {4, n}).output("y2", kFloat, {4, n});  // not x: two products of x would become one
  b.external_initializer("w", {n, n}, {{"location", "w.bin"}, {"length", std::to_string(n * n * 4)}});
  b.external_initializer("s", {4, 4}, {{"location", "w.bin"}, {"offset", std::to_string(n * n * 4 + 4)}, {"length", "64"}});
  b.external_initializer("u", {n, n}, {{"location", "w.bin"}, {"offset", std::to_string(unaligned)}});
  b.node("MatMul", {"x", "w"}, {"y"});
  b.node("Add", {"x2", "s"}, {"z"});
  b.node("MatMul", {"x3", "u"}, {"y2"});
  b.write(dir / "model.onnx");
  const auto m = importer::import_onnx(dir / "model.onnx");
  std::map<std::string, const Tensor*> constants;
  for (const Value& v : m.graph.values()) {
    if (v.is_constant()) constants[v.name] = v.data.get();
  }
  ASSERT_TRUE(constants.count("w") && constants.count("s") && constants.count("u"));
  const Tensor& mapped = *constants["w"];
  EXPECT_TRUE(mapped.is_mapped());
  EXPECT_FALSE(constants["s"]->is_mapped());  // 64 bytes: read
  EXPECT_FALSE(constants["u"]->is_mapped());  // at an offset no float4 vector load may take
  EXPECT_EQ(mapped, w);
  EXPECT_EQ(*constants["s"], small);
  EXPECT_EQ(*constants["u"], w);
  Tensor copy = mapped;
  EXPECT_TRUE(copy.is_mapped());
  std::byte* own = copy.data();  // writable: its own bytes now, not the mapping's
  EXPECT_NE(own, mapped.data());
  EXPECT_FALSE(copy.is_mapped());
  reinterpret_cast<float*>(own)[0] = 42.0f;
  EXPECT_NE(copy, mapped);
  mapped.release_pages();
  EXPECT_EQ(mapped, w);  // read from the file again
  EXPECT_TRUE(read_file(dir / "w.bin", "weights") == before);  // nothing written through
  fs::remove_all(dir);
}

TEST(Import, ExternalDataIsReadRelativeToTheModel) {
  const fs::path dir = fs::temp_directory_path() / ("fusetune_ext_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const Tensor w = iota_tensor({4, 4});
  {
    std::ofstream out(dir / "weights.bin", std::ios::binary);
    out.write("PAD!", 4);
    out.write(reinterpret_cast<const char*>(w.data()), static_cast<std::streamsize>(w.nbytes()));
  }
  OnnxBuilder b;
  b.input("x", kFloat, {2, 4}).output("y", kFloat, {2, 4});
  b.external_initializer("w", {4, 4}, {{"location", "weights.bin"}, {"offset", "4"}, {"length", "64"}});
  b.node("MatMul", {"x", "w"}, {"y"});
  b.write(dir / "model.onnx");
  const auto m = importer::import_onnx(dir / "model.onnx");
  bool found = false;
  for (const Value& v : m.graph.values()) {
    if (v.is_constant() && v.name == "w") {
      EXPECT_EQ(*v.data, w);
      found = true;
    }
  }
  EXPECT_TRUE(found);
  fs::remove_all(dir);
}

TEST(Import, OldSoftmaxCoercesToTwoDimensions) {
  OnnxBuilder b(11);
  b.input("x", kFloat, {2, 3, 4}).output("y", kFloat, {2, 3, 4});
  OnnxBuilder::attr_i(b.node("Softmax", {"x"}, {"y"}), "axis", 1);
  const auto m = importer::import_onnx_bytes(b.bytes(), ".");
  const Tensor x = iota_tensor({2, 3, 4});
  const Tensor y = reference::run_graph(m.graph, std::vector<Tensor>{x})[0];
  const auto v = y.to_floats();
  for (int n = 0; n < 2; ++n) {  // opset 11: each batch row of 12 sums to one
    float s = 0;
    for (int i = 0; i < 12; ++i) s += v[n * 12 + i];
    EXPECT_NEAR(s, 1.0f, 1e-5f);
  }
}

// SpaceToDepth's `mode` (opset 28): output channel (by * bs + bx) * C + c for DCR, c * bs * bs +
// by * bs + bx for CRD; DepthToSpace in the same mode inverts it.
TEST(Import, SpaceToDepthFollowsItsModeAndDepthToSpaceInvertsIt) {
  const int64_t c = 2, h = 4, w = 6, bs = 2;
  std::vector<float> distinct(static_cast<size_t>(c * h * w));
  for (size_t i = 0; i < distinct.size(); ++i) distinct[i] = static_cast<float>(i);
  const Tensor x = Tensor::from_floats(DType::kF32, {1, c, h, w}, distinct);
  for (const std::string mode : {"DCR", "CRD"}) {
    SCOPED_TRACE(mode);
    OnnxBuilder b(28);
    b.input("x", kFloat, {1, c, h, w}).output("s", kFloat, {1, c * bs * bs, h / bs, w / bs}).output("y", kFloat, {1, c, h, w});
    auto& s2d = b.node("SpaceToDepth", {"x"}, {"s"});
    OnnxBuilder::attr_i(s2d, "blocksize", bs);
    OnnxBuilder::attr_s(s2d, "mode", mode);
    auto& d2s = b.node("DepthToSpace", {"s"}, {"y"});
    OnnxBuilder::attr_i(d2s, "blocksize", bs);
    OnnxBuilder::attr_s(d2s, "mode", mode);
    const auto m = importer::import_onnx_bytes(b.bytes(), ".");
    const std::vector<Tensor> out = reference::run_graph(m.graph, std::vector<Tensor>{x});
    const auto xs = x.to_floats(), ss = out[0].to_floats();
    for (int64_t ci = 0; ci < c; ++ci) {
      for (int64_t yy = 0; yy < h; ++yy) {
        for (int64_t xx = 0; xx < w; ++xx) {
          const int64_t by = yy % bs, bx = xx % bs;
          const int64_t oc = mode == "DCR" ? (by * bs + bx) * c + ci : ci * bs * bs + by * bs + bx;
          const int64_t at = (oc * (h / bs) + yy / bs) * (w / bs) + xx / bs;
          EXPECT_EQ(ss[static_cast<size_t>(at)], xs[static_cast<size_t>((ci * h + yy) * w + xx)]) << ci << " " << yy << " " << xx;
        }
      }
    }
    EXPECT_EQ(out[1].to_floats(), xs);
  }
}

// Trilu: the upper triangle from diagonal k (j - i >= k) or the lower (j - i <= k), zero elsewhere;
// with a constant input it folds away (a causal mask).
TEST(Import, TriluKeepsItsTriangle) {
  const Tensor x = iota_tensor({2, 3, 4});
  for (const int64_t upper : {1, 0}) {
    OnnxBuilder b(14);
    b.input("x", kFloat, {2, 3, 4}).output("y", kFloat, {2, 3, 4});
    b.initializer("k", Tensor::from_ints(DType::kI64, {}, std::vector<int64_t>{upper != 0 ? 1 : -1}));
    OnnxBuilder::attr_i(b.node("Trilu", {"x", "k"}, {"y"}), "upper", upper);
    const auto m = importer::import_onnx_bytes(b.bytes(), ".");
    const auto y = reference::run_graph(m.graph, std::vector<Tensor>{x})[0].to_floats();
    const auto xs = x.to_floats();
    for (size_t e = 0; e < xs.size(); ++e) {
      const int64_t i = static_cast<int64_t>(e / 4) % 3, j = static_cast<int64_t>(e % 4);
      const bool kept = upper != 0 ? j - i >= 1 : j - i <= -1;
      EXPECT_EQ(y[e], kept ? xs[e] : 0.0f) << "upper " << upper << " element " << e;
    }
  }
  OnnxBuilder c(14);
  c.output("y", kFloat, {3, 3});
  c.initializer("ones", Tensor::from_floats(DType::kF32, {3, 3}, std::vector<float>(9, 1.0f)));
  c.node("Trilu", {"ones"}, {"y"});
  EXPECT_EQ(importer::import_onnx_bytes(c.bytes(), ".").graph.nodes().size(), 0u);
  // Larger than a folded constant may be (kFoldLimit elements: a 4,096-token prefill's causal mask
  // is 4,096 x 4,097): the triangle is computed from the indices, not refused.
  const int64_t n = 4097;
  ASSERT_GT(n * n, importer::kFoldLimit);
  const Tensor ones = Tensor::from_floats(DType::kF32, {n, n}, std::vector<float>(static_cast<size_t>(n * n), 1.0f));
  for (const int64_t upper : {1, 0}) {
    const int64_t k = upper != 0 ? 0 : -2;
    OnnxBuilder big(14);
    big.input("x", kFloat, {n, n}).output("y", kFloat, {n, n});
    big.initializer("k", Tensor::from_ints(DType::kI64, {}, std::vector<int64_t>{k}));
    OnnxBuilder::attr_i(big.node("Trilu", {"x", "k"}, {"y"}), "upper", upper);
    const auto long_mask = importer::import_onnx_bytes(big.bytes(), ".");
    EXPECT_GT(long_mask.graph.nodes().size(), 0u);
    const auto ys = reference::run_graph(long_mask.graph, std::vector<Tensor>{ones})[0].to_floats();
    for (int64_t i : {int64_t{0}, int64_t{1}, int64_t{2048}, n - 2, n - 1}) {
      for (int64_t j : {int64_t{0}, i - 3, i - 2, i - 1, i, i + 1, n - 1}) {
        if (j < 0 || j >= n) continue;
        const bool kept = upper != 0 ? j - i >= k : j - i <= k;
        EXPECT_EQ(ys[static_cast<size_t>(i * n + j)], kept ? 1.0f : 0.0f) << "upper " << upper << " row " << i << " column " << j;
      }
    }
  }
}

// A cone of constants whose values exceed kFoldLimit elements (importer/fold_constant_cones.h): a
// torch export's causal mask at 4,096 tokens, the Trilu of a folded full matrix times a folded
// triangle, folds into the one constant it computes (the model's constants shrink: two 4,096 x
// 4,097 matrices become one); the same triangle of an Expand of a scalar (a few bytes of
// constants) stays computed.
TEST(Import, AConstantConeTooLargeNodeByNodeFoldsWhereTheConstantsDoNotGrow) {
  const int64_t n = 4096, keys = n + 1;
  ASSERT_GT(n * keys, importer::kFoldLimit);
  const float lowest = std::numeric_limits<float>::lowest();
  std::vector<float> above(static_cast<size_t>(n * keys));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < keys; ++j) above[static_cast<size_t>(i * keys + j)] = j > i ? 1.0f : 0.0f;
  }
  const auto masked = [&](const Tensor& mask) {
    ASSERT_EQ(mask.shape(), (Shape{1, 1, n, keys}));
    const auto m = mask.to_floats();
    for (int64_t i : {int64_t{0}, int64_t{1}, int64_t{2048}, n - 1}) {
      for (int64_t j : {int64_t{0}, i - 1, i, i + 1, i + 2, keys - 1}) {
        if (j < 0 || j >= keys) continue;
        EXPECT_EQ(m[static_cast<size_t>(i * keys + j)], j > i ? lowest : 0.0f) << "row " << i << " key " << j;
      }
    }
  };
  for (const bool from_shape : {false, true}) {
    SCOPED_TRACE(from_shape ? "Expand of a scalar" : "folded full matrix");
    OnnxBuilder b(14);
    b.output("mask", kFloat, {1, 1, n, keys});
    b.initializer("k", Tensor::from_ints(DType::kI64, {}, std::vector<int64_t>{1}));
    b.initializer("axes", Tensor::from_ints(DType::kI64, {2}, std::vector<int64_t>{0, 1}));
    if (from_shape) {
      b.initializer("shape", Tensor::from_ints(DType::kI64, {2}, std::vector<int64_t>{n, keys}));
      b.initializer("lowest", Tensor::from_floats(DType::kF32, {}, std::vector<float>{lowest}));
      b.node("Expand", {"lowest", "shape"}, {"full"});
      b.node("Trilu", {"full", "k"}, {"tri"});
      b.node("Unsqueeze", {"tri", "axes"}, {"mask"});
    } else {
      b.initializer("full", Tensor::from_floats(DType::kF32, {n, keys}, std::vector<float>(above.size(), lowest)));
      b.initializer("above", Tensor::from_floats(DType::kF32, {n, keys}, above));
      b.node("Trilu", {"full", "k"}, {"tri"});
      b.node("Mul", {"tri", "above"}, {"product"});
      b.node("Unsqueeze", {"product", "axes"}, {"mask"});
    }
    const auto m = importer::import_onnx_bytes(b.bytes(), ".");
    int64_t constant_elements = 0;
    for (const Value& v : m.graph.values()) constant_elements += v.is_constant() ? numel(v.shape) : 0;
    if (from_shape) {
      EXPECT_LT(constant_elements, 4 * keys);  // the scalar and the Trilu's index vectors
      EXPECT_GT(m.graph.nodes().size(), 2u);
      masked(reference::run_graph(m.graph, std::vector<Tensor>{})[0]);
      continue;
    }
    EXPECT_EQ(m.graph.nodes().size(), 0u);
    EXPECT_EQ(constant_elements, n * keys);
    ASSERT_TRUE(m.graph.value(m.graph.outputs()[0]).is_constant());
    masked(*m.graph.value(m.graph.outputs()[0]).data);
  }
}

// A causal mask computed from Range vectors (an export with dynamic axes at 4,097 tokens: too
// large to fold, and its constants are a few index vectors, so the cone stays computed) read by
// two attention layers: each reads its own copy of the chain (importer/clone_constant_chains.h),
// which fusion takes into the layer's attention group, where planner/toeplitz.h finds it causal
// and the flash kernel computes it from the indices: two launches, neither writing nor reading
// the 67 MB mask, each running about half the key tiles. With one reader there is nothing to copy.
TEST(Import, AMaskFromIndexVectorsIsComputedByEachAttentionThatReadsIt) {
  const int64_t n = 4097, width = 16;
  ASSERT_GT(n * n, importer::kFoldLimit);
  for (const int layers : {2, 1}) {
    SCOPED_TRACE(std::to_string(layers) + " layers");
    OnnxBuilder b(17);
    b.initializer("zero", Tensor::scalar_int(DType::kI64, 0))
        .initializer("count", Tensor::scalar_int(DType::kI64, n))
        .initializer("one", Tensor::scalar_int(DType::kI64, 1))
        .initializer("axis1", Tensor::from_ints(DType::kI64, {1}, std::vector<int64_t>{1}))
        .initializer("axes01", Tensor::from_ints(DType::kI64, {2}, std::vector<int64_t>{0, 1}))
        .initializer("lowest", Tensor::scalar_float(DType::kF32, std::numeric_limits<float>::lowest()))
        .initializer("nothing", Tensor::scalar_float(DType::kF32, 0.0f))
        .initializer("scale", Tensor::scalar_float(DType::kF32, 0.25f));
    b.node("Range", {"zero", "count", "one"}, {"positions"});
    b.node("Unsqueeze", {"positions", "axis1"}, {"column"});
    b.node("Greater", {"positions", "column"}, {"ahead"});
    b.node("Where", {"ahead", "lowest", "nothing"}, {"square"});
    b.node("Unsqueeze", {"square", "axes01"}, {"mask"});
    for (int l = 0; l < layers; ++l) {
      const std::string p = "l" + std::to_string(l) + "_";
      for (const char* x : {"q", "k", "v"}) b.input(p + x, kFloat, {1, 1, n, width});
      b.output(p + "o", kFloat, {1, 1, n, width});
      OnnxBuilder::attr_ints(b.node("Transpose", {p + "k"}, {p + "kt"}), "perm", {0, 1, 3, 2});
      b.node("MatMul", {p + "q", p + "kt"}, {p + "s"});
      b.node("Mul", {p + "s", "scale"}, {p + "scaled"});
      b.node("Add", {p + "scaled", "mask"}, {p + "masked"});
      OnnxBuilder::attr_i(b.node("Softmax", {p + "masked"}, {p + "p"}), "axis", -1);
      b.node("MatMul", {p + "p", p + "v"}, {p + "o"});
    }
    const Graph g = importer::import_onnx_bytes(b.bytes(), ".").graph;
    std::map<std::string, int> ops;
    for (const Node& node : g.nodes()) ++ops[node.op];
    EXPECT_EQ(ops["Greater"], layers);  // a copy for each reader
    const planner::ModelPlan plan = planner::plan_model(g, planner::find_device("h100"));
    ASSERT_EQ(plan.groups.size(), static_cast<size_t>(layers));
    for (const planner::GroupPlan& gp : plan.groups) {
      const planner::Candidate& chosen = gp.candidates[gp.chosen];
      EXPECT_TRUE(chosen.config.flash) << chosen.config.str();
      const std::optional<planner::AttentionCore> core = planner::match_attention(g, gp.group);
      ASSERT_TRUE(core.has_value()) << gp.group.pattern;
      const std::optional<planner::CausalMask> mask = planner::causal_mask_of(g, gp.group, *core);
      ASSERT_TRUE(mask.has_value()) << gp.group.pattern;
      EXPECT_TRUE(mask->from_indices);
      EXPECT_LT(chosen.cost.dram_bytes, n * n) << "the mask is read";  // Q, K, V and O: 1 MB
      const double products = 4.0 * static_cast<double>(n * n * width);  // both products over every key
      EXPECT_LT(static_cast<double>(chosen.cost.flops), 0.75 * products) << chosen.config.str();
    }
  }
}

// Tensors of normal random values (standard deviation 0.3) from the test's seed, drawn in turn.
struct NormalTensors {
  std::mt19937 rng{testing::test_seed()};
  std::normal_distribution<float> normal{0.0f, 0.3f};
  Tensor operator()(DType t, Shape s) {
    std::vector<float> v(static_cast<size_t>(numel(s)));
    for (float& x : v) x = normal(rng);
    return Tensor::from_floats(t, std::move(s), v);
  }
};

// A gated linear unit's projections (importer/pair_gated_products.h): LLaMA's SiLU gate and a
// sigmoid-approximated GELU, float32 and float16, become one MatMul by the weights interleaved
// column by column, and the graph computes the same outputs bit for bit (each element the same
// dot product); the gate read elsewhere too reads its half of the product. Two projections of
// different inputs stay apart.
TEST(Import, AGatedUnitsTwoProjectionsBecomeOneProductOfInterleavedWeights) {
  NormalTensors draw;
  for (const DType t : {DType::kF32, DType::kF16}) {
    for (const bool silu : {true, false}) {
      for (const bool shared_input : {true, false}) {
        SCOPED_TRACE(std::string(dtype_name(t)) + (silu ? ", SiLU" : ", GELU by a sigmoid") + (shared_input ? "" : ", two inputs"));
        const int code = t == DType::kF32 ? kFloat : testing::kFloat16;
        OnnxBuilder b(17);
        b.input("x", code, {1, 5, 12}).input("x2", code, {1, 5, 12}).output("y", code, {1, 5, 7}).output("gate", code, {1, 5, 7});
        b.initializer("wg", draw(t, {12, 7})).initializer("wu", draw(t, {12, 7}));
        b.initializer("k", Tensor::scalar_float(t, 1.702f));
        b.node("MatMul", {"x", "wg"}, {"gate"});
        b.node("MatMul", {shared_input ? "x" : "x2", "wu"}, {"up"});
        if (silu) {
          b.node("Sigmoid", {"gate"}, {"s"});
        } else {
          b.node("Mul", {"gate", "k"}, {"scaled"});
          b.node("Sigmoid", {"scaled"}, {"s"});
        }
        b.node("Mul", {"gate", "s"}, {"act"});
        b.node("Mul", {"act", "up"}, {"y"});
        const auto matmuls = [](const Graph& g) {
          std::vector<Shape> weights;
          for (const Node& n : g.nodes()) {
            if (n.op == "MatMul") weights.push_back(g.value(n.inputs[1]).shape);
          }
          return weights;
        };
        importer::ImportOptions raw;
        raw.fold_affines = false;
        const Graph apart = importer::import_onnx_bytes(b.bytes(), ".", raw).graph;
        const Graph paired = importer::import_onnx_bytes(b.bytes(), ".").graph;
        EXPECT_EQ(matmuls(apart).size(), 2u);
        const std::vector<Shape> one_product = {{12, 14}};
        EXPECT_EQ(matmuls(paired), shared_input ? one_product : matmuls(apart));
        const std::vector<Tensor> in = {draw(t, {1, 5, 12}), draw(t, {1, 5, 12})};
        const std::vector<Tensor> want = reference::run_graph(apart, in), got = reference::run_graph(paired, in);
        ASSERT_EQ(got.size(), want.size());
        for (size_t o = 0; o < want.size(); ++o) EXPECT_EQ(got[o], want[o]) << "output " << o;
      }
    }
  }
  // A unit whose input is another's up projection: both pair, the second reading the first's half.
  OnnxBuilder b(17);
  b.input("x", kFloat, {1, 5, 12}).output("y1", kFloat, {1, 5, 12}).output("y2", kFloat, {1, 5, 6});
  for (const char* w : {"wg1", "wu1"}) b.initializer(w, draw(DType::kF32, {12, 12}));
  for (const char* w : {"wg2", "wu2"}) b.initializer(w, draw(DType::kF32, {12, 6}));
  b.node("MatMul", {"x", "wg1"}, {"g1"});
  b.node("MatMul", {"x", "wu1"}, {"u1"});
  b.node("Sigmoid", {"g1"}, {"s1"});
  b.node("Mul", {"s1", "u1"}, {"y1"});
  b.node("MatMul", {"u1", "wg2"}, {"g2"});
  b.node("MatMul", {"u1", "wu2"}, {"u2"});
  b.node("Relu", {"g2"}, {"r2"});
  b.node("Mul", {"r2", "u2"}, {"y2"});
  importer::ImportOptions raw;
  raw.fold_affines = false;
  const Graph apart = importer::import_onnx_bytes(b.bytes(), ".", raw).graph;
  const Graph paired = importer::import_onnx_bytes(b.bytes(), ".").graph;
  size_t products = 0;
  for (const Node& n : paired.nodes()) products += n.op == "MatMul" ? 1 : 0;
  EXPECT_EQ(products, 2u);
  const std::vector<Tensor> in = {draw(DType::kF32, {1, 5, 12})};
  EXPECT_EQ(reference::run_graph(paired, in), reference::run_graph(apart, in)) << "chained units";
}

// Sibling projections (importer/pack_sibling_products.h): three MatMuls of one input by constant
// matrices of different widths, float32 and float16, become one MatMul by the matrices side by
// side and three Slices, and the graph computes the same outputs bit for bit (each element the
// same dot product), the one that is a graph output included; a product of another input, and
// one whose right operand is not a constant, stay as they were. Where each sibling's one reader
// adds a bias, the biases become one Add of them side by side before the slices (the same sums).
TEST(Import, SiblingProjectionsOfOneInputBecomeOneProductOfTheirColumns) {
  NormalTensors draw;
  for (const DType t : {DType::kF32, DType::kF16}) {
    for (const bool biased : {false, true}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + (biased ? ", biased" : ""));
      const int code = t == DType::kF32 ? kFloat : testing::kFloat16;
      OnnxBuilder b(17);
      b.input("x", code, {1, 5, 12}).input("x2", code, {1, 5, 12}).input("m", code, {12, 3});
      b.output("q", code, {1, 5, 7}).output("y", code, {1, 5, 7}).output("z", code, {1, 5, 4}).output("o", code, {1, 5, 3});
      b.output("d", code, {1, 5, 3});
      b.initializer("wq", draw(t, {12, 7})).initializer("wk", draw(t, {12, 7})).initializer("wv", draw(t, {12, 4}));
      b.initializer("wo", draw(t, {12, 3}));
      b.initializer("bq", draw(t, {7})).initializer("bk", draw(t, {1, 1, 7})).initializer("bv", draw(t, {4}));
      b.node("MatMul", {"x", "wq"}, {biased ? "qp" : "q"});
      if (biased) b.node("Add", {"qp", "bq"}, {"q"});
      b.node("MatMul", {"x", "wk"}, {biased ? "kp" : "k"});
      if (biased) b.node("Add", {"bk", "kp"}, {"k"});
      b.node("Relu", {"k"}, {"r"});
      b.node("Add", {"r", "q"}, {"y"});
      b.node("MatMul", {"x", "wv"}, {biased ? "vp" : "v"});
      if (biased) b.node("Add", {"vp", "bv"}, {"v"});
      b.node("Sigmoid", {"v"}, {"z"});
      b.node("MatMul", {"x2", "wo"}, {"o"});
      b.node("MatMul", {"x", "m"}, {"d"});
      const auto shapes = [](const Graph& g, const std::string& op) {
        std::vector<Shape> constants;
        for (const Node& n : g.nodes()) {
          if (n.op != op) continue;
          for (int in : n.inputs) {
            if (g.value(in).is_constant()) constants.push_back(g.value(in).shape);
          }
          if (op == "MatMul" && !g.value(n.inputs[1]).is_constant()) constants.push_back(g.value(n.inputs[1]).shape);
        }
        return constants;
      };
      importer::ImportOptions raw;
      raw.fold_affines = false;
      const Graph apart = importer::import_onnx_bytes(b.bytes(), ".", raw).graph;
      const Graph packed = importer::import_onnx_bytes(b.bytes(), ".").graph;
      EXPECT_EQ(shapes(apart, "MatMul").size(), 5u);
      EXPECT_EQ(shapes(packed, "MatMul"), (std::vector<Shape>{{12, 18}, {12, 3}, {12, 3}}));
      EXPECT_EQ(shapes(packed, "Add"), biased ? std::vector<Shape>{{18}} : std::vector<Shape>{}) << "the biases side by side";
      size_t slices = 0;
      for (const Node& n : packed.nodes()) slices += n.op == "Slice" ? 1 : 0;
      EXPECT_EQ(slices, 3u);
      const std::vector<Tensor> in = {draw(t, {1, 5, 12}), draw(t, {1, 5, 12}), draw(t, {12, 3})};
      const std::vector<Tensor> want = reference::run_graph(apart, in), got = reference::run_graph(packed, in);
      ASSERT_EQ(got.size(), want.size());
      for (size_t o = 0; o < want.size(); ++o) EXPECT_EQ(got[o], want[o]) << "output " << o;
    }
  }
}

// Power-of-two scales of products (importer/fold_product_scales.h), float32 and float16: an
// attention-like query, MatMul + bias, Reshape to heads, Transpose, then Div by 4, loses its Div
// (the weights and bias scaled instead) and the graph computes what it did, bit for bit but for
// results below float16's normal range (one subnormal step apart at most); a product with a
// weight that scales below the normal range (float16) folds too, its results within a float16
// step; a scale by 0.3, a scaled product read elsewhere too, and a scale that would overflow a
// weight keep their scales.
TEST(Import, PowerOfTwoScalesOfProductsFoldIntoTheirWeights) {
  NormalTensors draw;
  // Weights away from zero: a draw scaled by 1/4 stays a normal number of either type.
  const auto away = [&](DType t, Shape s) {
    std::vector<float> v = draw(DType::kF32, s).to_floats();
    for (float& x : v) x = std::copysign(0.05f + std::fabs(x), x);
    return Tensor::from_floats(t, std::move(s), v);
  };
  for (const DType t : {DType::kF32, DType::kF16}) {
    SCOPED_TRACE(dtype_name(t));
    const int code = t == DType::kF32 ? kFloat : testing::kFloat16;
    OnnxBuilder b(17);
    b.input("x", code, {1, 5, 16}).output("q", code, {1, 2, 5, 8}).output("k", code, {1, 5, 8}).output("v", code, {1, 5, 8});
    b.output("vp", code, {1, 5, 8}).output("u", code, {1, 5, 8}).output("o", code, {1, 5, 8});
    b.initializer("wq", away(t, {16, 16})).initializer("bq", away(t, {16})).initializer("wk", away(t, {16, 8}));
    b.initializer("wv", away(t, {16, 8}));
    b.initializer("four", Tensor::scalar_float(t, 4.0f)).initializer("c03", Tensor::scalar_float(t, 0.3f));
    b.initializer("half", Tensor::scalar_float(t, 0.5f)).initializer("heads", Tensor::from_ints(DType::kI64, {4}, std::vector<int64_t>{1, 5, 2, 8}));
    std::vector<float> tiny = away(DType::kF32, {16, 8}).to_floats(), huge = tiny;
    tiny[3] = 0x1.004p-13f;  // float16: normal, but a quarter of it is not
    huge[5] = t == DType::kF16 ? 40000.0f : 2e38f;  // twice it overflows
    b.initializer("wu", Tensor::from_floats(t, {16, 8}, tiny)).initializer("wo", Tensor::from_floats(t, {16, 8}, huge));
    b.initializer("two", Tensor::scalar_float(t, 2.0f));
    b.node("MatMul", {"x", "wq"}, {"qp"});
    b.node("Add", {"qp", "bq"}, {"qb"});
    b.node("Reshape", {"qb", "heads"}, {"qh"});
    OnnxBuilder::attr_ints(b.node("Transpose", {"qh"}, {"qt"}), "perm", {0, 2, 1, 3});
    b.node("Div", {"qt", "four"}, {"qs"});
    b.node("Relu", {"qs"}, {"q"});
    b.node("MatMul", {"x", "wk"}, {"kp"});
    b.node("Mul", {"kp", "c03"}, {"ks"});
    b.node("Relu", {"ks"}, {"k"});
    b.node("MatMul", {"x", "wv"}, {"vp"});  // a graph output besides the scaled value
    b.node("Mul", {"half", "vp"}, {"vs"});
    b.node("Relu", {"vs"}, {"v"});
    b.node("MatMul", {"x", "wu"}, {"up"});
    b.node("Div", {"up", "four"}, {"us"});
    b.node("Relu", {"us"}, {"u"});
    b.node("MatMul", {"x", "wo"}, {"op"});
    b.node("Mul", {"op", "two"}, {"os"});
    b.node("Sigmoid", {"os"}, {"o"});
    importer::ImportOptions raw;
    raw.fold_affines = false;
    const Graph apart = importer::import_onnx_bytes(b.bytes(), ".", raw).graph;
    const Graph folded = importer::import_onnx_bytes(b.bytes(), ".").graph;
    std::map<std::string, int> scales;
    for (const Node& n : folded.nodes()) scales[n.op] += n.op == "Mul" || n.op == "Div" ? 1 : 0;
    EXPECT_EQ(scales["Mul"], 3) << "0.3, the product read elsewhere and the overflowing weight keep theirs";
    EXPECT_EQ(scales["Div"], 0) << "the query's and the tiny weight's go";
    const std::vector<Tensor> in = {draw(t, {1, 5, 16})};
    const std::vector<Tensor> want = reference::run_graph(apart, in), got = reference::run_graph(folded, in);
    ASSERT_EQ(got.size(), want.size());
    for (size_t o = 0; o < want.size(); ++o) {
      const std::vector<double> w = want[o].to_doubles(), g = got[o].to_doubles();
      ASSERT_EQ(w.size(), g.size());
      for (size_t i = 0; i < w.size(); ++i) {
        if (t == DType::kF32 || (o != 4 && std::fabs(w[i]) >= 0x1p-14)) {
          EXPECT_EQ(g[i], w[i]) << "output " << o << " element " << i;
        } else {
          // float16: a subnormal result, or the tiny weight's product: a step of the result's.
          EXPECT_LE(std::fabs(g[i] - w[i]), std::max(0x1p-24, std::fabs(w[i]) * 0x1p-10)) << "output " << o << " element " << i;
        }
      }
    }
  }
}

TEST(Import, Float16ModelsComputeThroughFloat) {
  OnnxBuilder b;
  b.input("x", 10, {4}).output("y", 10, {4});
  b.node("Sqrt", {"x"}, {"y"});
  const auto m = importer::import_onnx_bytes(b.bytes(), ".");
  const Tensor x = Tensor::from_floats(DType::kF16, {4}, std::vector<float>{1, 4, 9, 2});
  const Tensor y = reference::run_graph(m.graph, std::vector<Tensor>{x})[0];
  EXPECT_EQ(y.dtype(), DType::kF16);
  EXPECT_EQ(y.to_floats(), (std::vector<float>{1, 2, 3, half_to_float(float_to_half(1.41421356f))}));
}

TEST(Import, ShapeSubgraphOnAnInputFolds) {
  // y = Reshape(x, Concat(Shape(x)[0:1], [-1])): the shape is computed in the graph.
  OnnxBuilder b;
  b.input("x", kFloat, {3, 2, 2}).output("y", kFloat, {3, 4});
  b.initializer("minus1", Tensor::from_ints(DType::kI64, {1}, std::vector<int64_t>{-1}));
  b.initializer("zero", Tensor::from_ints(DType::kI64, {1}, std::vector<int64_t>{0}));
  b.initializer("one", Tensor::from_ints(DType::kI64, {1}, std::vector<int64_t>{1}));
  b.node("Shape", {"x"}, {"s"});
  b.node("Slice", {"s", "zero", "one"}, {"batch"});
  OnnxBuilder::attr_i(b.node("Concat", {"batch", "minus1"}, {"target"}), "axis", 0);
  b.node("Reshape", {"x", "target"}, {"y"});
  const auto m = importer::import_onnx_bytes(b.bytes(), ".");
  EXPECT_EQ(histogram(m.graph), (std::map<std::string, int>{{"Reshape", 1}}));
  EXPECT_GE(m.folded, 2u);
}

// CausalConvWithState and LinearAttention refuse what they cannot mean, naming the node and what
// is wrong (their semantics are onnx's conformance cases', reference and compiled).
TEST(Import, StateSpaceOpsRefuseWhatTheyCannotMean) {
  OnnxBuilder conv(27);
  conv.input("x", kFloat, {2, 4, 8}).input("w", kFloat, {4, 2, 3}).output("y", kFloat, {2, 4, 8});
  conv.node("CausalConvWithState", {"x", "w"}, {"y"}, "culprit");
  testing::expect_refused(conv, "culprit", "weight must be [channels, 1, k] for input 2x4x8, got 4x2x3");
  OnnxBuilder act(27);
  act.input("x", kFloat, {2, 4, 8}).input("w", kFloat, {4, 1, 3}).output("y", kFloat, {2, 4, 8});
  OnnxBuilder::attr_s(act.node("CausalConvWithState", {"x", "w"}, {"y"}, "culprit"), "activation", "gelu");
  testing::expect_refused(act, "culprit", "activation 'gelu' is not one of none, silu, swish");
  const auto attention = [](const std::string& rule, bool decay) {
    OnnxBuilder b(27);
    b.input("q", kFloat, {1, 3, 8}).input("k", kFloat, {1, 3, 8}).input("v", kFloat, {1, 3, 8}).output("y", kFloat, {1, 3, 8});
    if (decay) b.input("g", kFloat, {1, 3, 2});
    onnx::NodeProto& n = b.node("LinearAttention", {"q", "k", "v", "", decay ? "g" : ""}, {"y"}, "culprit");
    OnnxBuilder::attr_i(n, "q_num_heads", 2);
    OnnxBuilder::attr_i(n, "kv_num_heads", 2);
    OnnxBuilder::attr_s(n, "update_rule", rule);
    return b;
  };
  testing::expect_refused(attention("gated", false), "culprit", "update_rule 'gated' needs the decay input");
  testing::expect_refused(attention("linear", true), "culprit", "update_rule 'linear' forbids the decay input");
  testing::expect_refused(attention("fast", false), "culprit", "update_rule 'fast' is not one of linear, gated, delta, gated_delta");
  OnnxBuilder heads(27);
  heads.input("q", kFloat, {1, 3, 8}).input("k", kFloat, {1, 3, 8}).input("v", kFloat, {1, 3, 8}).output("y", kFloat, {1, 3, 8});
  onnx::NodeProto& n = heads.node("LinearAttention", {"q", "k", "v"}, {"y"}, "culprit");
  OnnxBuilder::attr_i(n, "q_num_heads", 3);
  OnnxBuilder::attr_i(n, "kv_num_heads", 3);
  OnnxBuilder::attr_s(n, "update_rule", "linear");
  testing::expect_refused(heads, "culprit", "query 1x3x8: its last axis does not split into 3 heads");
}

// BitCast keeps the bits, compiled as on the reference: int32 patterns (negative zero, infinity,
// a subnormal, a NaN with a payload, seeded random ones) to float32 and back, and float16 to
// uint16; float64 is refused by the code generator, naming the node (its kernels compute float64
// in float).
TEST(Import, BitCastKeepsTheBits) {
  const unsigned seed = testing::test_seed();
  std::mt19937 rng(seed);
  std::vector<int64_t> bits = {0, static_cast<int32_t>(0x80000000u), 0x7f800000, 1, 0x7fc00001, -1};
  while (bits.size() < 64) bits.push_back(static_cast<int32_t>(rng()));
  OnnxBuilder b(26);
  b.input("x", testing::kInt32, {64}).output("f", kFloat, {64}).output("back", testing::kInt32, {64});
  OnnxBuilder::attr_i(b.node("BitCast", {"x"}, {"f"}), "to", 1);
  OnnxBuilder::attr_i(b.node("BitCast", {"f"}, {"back"}), "to", 6);
  const Tensor x = Tensor::from_ints(DType::kI32, {64}, bits);
  testing::TestDir dir("bitcast");
  b.write(dir / "model.onnx");
  const compiler::PipelineResult r = compiler::compile_model(dir / "model.onnx", planner::find_device("h100"), {});
  auto host = backend::make_host_backend();
  runtime::PlanRunner runner(r.bundle, *host);
  const std::vector<Tensor> ref = reference::run_graph(importer::import_onnx_bytes(b.bytes(), ".").graph, std::vector<Tensor>{x});
  const std::vector<Tensor> got = runner.run(std::vector<Tensor>{x});
  for (const auto* outs : {&ref, &got}) {
    EXPECT_EQ(std::memcmp((*outs)[0].data(), x.data(), x.nbytes()), 0) << (outs == &ref ? "reference" : "compiled") << ", seed " << seed;
    EXPECT_EQ((*outs)[1].to_ints(), bits) << (outs == &ref ? "reference" : "compiled") << ", seed " << seed;
  }
  OnnxBuilder half(26);
  half.input("h", testing::kFloat16, {4}).output("u", testing::kUInt16, {4});
  OnnxBuilder::attr_i(half.node("BitCast", {"h"}, {"u"}), "to", 4);
  const Tensor h = Tensor::from_floats(DType::kF16, {4}, std::vector<float>{-0.0f, 65504.0f, 5.96e-8f, -2.5f});
  testing::TestDir half_dir("bitcast_half");
  half.write(half_dir / "model.onnx");
  runtime::PlanRunner half_runner(compiler::compile_model(half_dir / "model.onnx", planner::find_device("h100"), {}).bundle, *host);
  const Tensor u = half_runner.run(std::vector<Tensor>{h})[0];
  EXPECT_EQ(std::memcmp(u.data(), h.data(), h.nbytes()), 0);
  OnnxBuilder wide(26);
  wide.input("d", testing::kDouble, {4}).output("i", kInt64, {4});
  OnnxBuilder::attr_i(wide.node("BitCast", {"d"}, {"i"}, "culprit"), "to", 7);
  testing::TestDir wide_dir("bitcast_wide");
  wide.write(wide_dir / "model.onnx");
  try {
    compiler::compile_model(wide_dir / "model.onnx", planner::find_device("h100"), {});
    ADD_FAILURE() << "a float64 BitCast compiled";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("node 'culprit' (BitCast)"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("generated kernels compute float64 in float"), std::string::npos) << e.what();
  }
  OnnxBuilder to_bool(26);
  to_bool.input("x", testing::kUInt8, {4}).output("y", testing::kBool, {4});
  OnnxBuilder::attr_i(to_bool.node("BitCast", {"x"}, {"y"}, "culprit"), "to", 9);
  testing::expect_refused(to_bool, "culprit", "BitCast of uint8 to bool: a byte other than 0 and 1 is no bool");
}

// TfIdfVectorizer against onnx's reference walk, written here as the reference does it (per skip
// distance and start, extend the n-gram while the pool has it as a prefix; unigrams only at the
// first distance), on seeded random tokens in all three modes with weights (onnx's cases check
// TF alone), reference and compiled; a pool of strings is refused naming the node.
TEST(Import, TfIdfVectorizerCountsAsTheReferenceWalks) {
  const unsigned seed = testing::test_seed();
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int64_t> token(1, 4);
  const int64_t N = 3, C = 9, min_n = 1, max_n = 3, skips = 2;
  std::vector<int64_t> x(N * C);
  for (int64_t& t : x) t = token(rng);
  // Pool: unigrams {2, 3}, bigrams {(2, 3), (1, 1), (4, 2)}, trigrams {(2, 3, 2)}; columns shuffled, two shared.
  const std::vector<int64_t> pool = {2, 3, 2, 3, 1, 1, 4, 2, 2, 3, 2}, counts = {0, 2, 8}, indexes = {4, 0, 1, 3, 0, 2};
  const std::vector<std::vector<int64_t>> grams = {{2}, {3}, {2, 3}, {1, 1}, {4, 2}, {2, 3, 2}};
  const std::vector<float> weights = {0.5f, 2.0f, 1.5f, 3.0f, 0.25f};
  std::vector<float> freq(N * 5, 0.0f);
  for (int64_t r = 0; r < N; ++r) {
    int64_t start_n = min_n;
    for (int64_t d = 1; d <= skips + 1; ++d) {
      for (int64_t s = 0; s + d * (start_n - 1) < C; ++s) {
        std::vector<int64_t> prefix;
        for (int64_t at = s; at < C && static_cast<int64_t>(prefix.size()) < max_n; at += d) {
          prefix.push_back(x[r * C + at]);
          bool any = false;
          for (size_t g = 0; g < grams.size(); ++g) {
            any = any || (grams[g].size() >= prefix.size() && std::equal(prefix.begin(), prefix.end(), grams[g].begin()));
            if (grams[g] == prefix && static_cast<int64_t>(prefix.size()) >= start_n) freq[r * 5 + indexes[g]] += 1.0f;
          }
          if (!any) break;
        }
      }
      if (start_n == 1) ++start_n;
    }
  }
  for (const std::string mode : {"TF", "IDF", "TFIDF"}) {
    std::vector<float> want(freq.size());
    for (size_t i = 0; i < freq.size(); ++i) {
      const float w = weights[i % 5];
      want[i] = mode == "TF" ? freq[i] : mode == "IDF" ? (freq[i] > 0 ? w : 0.0f) : w * freq[i];
    }
    OnnxBuilder b(9);
    b.input("x", kInt64, {N, C}).output("y", kFloat, {N, 5});
    onnx::NodeProto& n = b.node("TfIdfVectorizer", {"x"}, {"y"});
    OnnxBuilder::attr_s(n, "mode", mode);
    OnnxBuilder::attr_i(n, "min_gram_length", min_n);
    OnnxBuilder::attr_i(n, "max_gram_length", max_n);
    OnnxBuilder::attr_i(n, "max_skip_count", skips);
    OnnxBuilder::attr_ints(n, "pool_int64s", pool);
    OnnxBuilder::attr_ints(n, "ngram_counts", counts);
    OnnxBuilder::attr_ints(n, "ngram_indexes", indexes);
    OnnxBuilder::attr_floats(n, "weights", weights);
    const Tensor input = Tensor::from_ints(DType::kI64, {N, C}, x);
    EXPECT_EQ(reference::run_graph(importer::import_onnx_bytes(b.bytes(), ".").graph, std::vector<Tensor>{input})[0].to_floats(), want)
        << "reference, " << mode << ", seed " << seed;
    testing::TestDir dir("tfidf");
    b.write(dir / "model.onnx");
    auto host = backend::make_host_backend();
    runtime::PlanRunner runner(compiler::compile_model(dir / "model.onnx", planner::find_device("h100"), {}).bundle, *host);
    EXPECT_EQ(runner.run(std::vector<Tensor>{input})[0].to_floats(), want) << "compiled, " << mode << ", seed " << seed;
  }
  OnnxBuilder strings(9);
  strings.input("x", kInt64, {4}).output("y", kFloat, {1});
  onnx::NodeProto& n = strings.node("TfIdfVectorizer", {"x"}, {"y"}, "culprit");
  OnnxBuilder::attr_s(n, "mode", "TF");
  OnnxBuilder::attr_strings(n, "pool_strings", {"a"});
  testing::expect_refused(strings, "culprit", "a pool of strings: kernels hold no strings");
}

// Sequences inside a graph (tensors in and out): SplitToSequence by a size (the last part
// smaller), SequenceInsert at a negative position, SequenceErase, SequenceAt, SequenceLength,
// SequenceMap, ConcatFromSequence stacking on a new axis, a Loop appending to a sequence it
// carries (a TensorArray's pattern) and an Optional's element, on the reference and compiled;
// a sequence graph output and a position from data refused naming them.
TEST(Import, SequencesInsideAGraphAreHeldAtImport) {
  using testing::kBool;
  std::vector<float> xv(5 * 2);
  for (size_t k = 0; k < xv.size(); ++k) xv[k] = static_cast<float>(k);
  const Tensor x = Tensor::from_floats(DType::kF32, {5, 2}, xv);
  OnnxBuilder map_body;
  map_body.input("e", kFloat, {-1, 2}).output("e2", kFloat, {-1, 2});
  map_body.node("Add", {"e", "e"}, {"e2"});
  OnnxBuilder loop_body;
  loop_body.input("i", kInt64, {}).input("go", kBool, {}).input("acc", 0, {});
  loop_body.output("go_out", kBool, {}).output("acc_out", 0, {});
  loop_body.node("Identity", {"go"}, {"go_out"});
  OnnxBuilder::attr_i(loop_body.node("Cast", {"i"}, {"f"}), "to", 1);
  loop_body.node("SequenceInsert", {"acc", "f"}, {"acc_out"});
  OnnxBuilder b(17);
  b.input("x", kFloat, {5, 2}).output("first", kFloat, {2, 2}).output("count", kInt64, {}).output("stacked", kFloat, {2, 2, 2})
      .output("doubled", kFloat, {4, 2}).output("iterations", kFloat, {3}).output("held", kFloat, {5, 2});
  b.initializer("two", Tensor::scalar_int(DType::kI64, 2));
  b.initializer("minus_one", Tensor::scalar_int(DType::kI64, -1));
  b.initializer("zero", Tensor::scalar_int(DType::kI64, 0));
  b.initializer("three", Tensor::scalar_int(DType::kI64, 3));
  b.initializer("yes", Tensor::from_ints(DType::kBool, {}, std::vector<int64_t>{1}));
  b.node("SplitToSequence", {"x", "two"}, {"parts"});             // [0:2], [2:4], [4:5]
  b.node("SequenceErase", {"parts"}, {"two_parts"});               // [0:2], [2:4]
  b.node("SequenceAt", {"two_parts", "zero"}, {"first"});
  b.node("SequenceInsert", {"two_parts", "first", "minus_one"}, {"three_parts"});  // [0:2], [0:2], [2:4]
  b.node("SequenceLength", {"three_parts"}, {"count"});
  b.node("SequenceErase", {"three_parts", "zero"}, {"back"});      // [0:2], [2:4]
  onnx::NodeProto& stack = b.node("ConcatFromSequence", {"back"}, {"stacked"});
  OnnxBuilder::attr_i(stack, "new_axis", 1);
  OnnxBuilder::attr_i(stack, "axis", 0);
  OnnxBuilder::attr_graph(b.node("SequenceMap", {"back"}, {"mapped"}), "body", map_body);
  OnnxBuilder::attr_i(b.node("ConcatFromSequence", {"mapped"}, {"doubled"}), "axis", 0);
  b.node("SequenceEmpty", {}, {"empty"});
  OnnxBuilder::attr_graph(b.node("Loop", {"three", "yes", "empty"}, {"filled"}), "body", loop_body);
  onnx::NodeProto& gathered = b.node("ConcatFromSequence", {"filled"}, {"iterations"});
  OnnxBuilder::attr_i(gathered, "new_axis", 1);
  OnnxBuilder::attr_i(gathered, "axis", 0);
  b.node("Optional", {"x"}, {"maybe"});
  b.node("OptionalGetElement", {"maybe"}, {"held"});
  const std::vector<float> first = {0, 1, 2, 3}, stacked = {0, 1, 2, 3, 4, 5, 6, 7};  // rows 0:2 and 2:4 stacked
  const std::vector<float> doubled = {0, 2, 4, 6, 8, 10, 12, 14};
  for (const char* where : {"reference", "compiled"}) {
    std::vector<Tensor> out;
    if (std::string(where) == "reference") {
      out = reference::run_graph(importer::import_onnx_bytes(b.bytes(), ".").graph, std::vector<Tensor>{x});
    } else {
      testing::TestDir dir("sequences");
      b.write(dir / "model.onnx");
      auto host = backend::make_host_backend();
      out = runtime::PlanRunner(compiler::compile_model(dir / "model.onnx", planner::find_device("h100"), {}).bundle, *host)
                .run(std::vector<Tensor>{x});
    }
    ASSERT_EQ(out.size(), 6u) << where;
    EXPECT_EQ(out[0].to_floats(), first) << where;
    EXPECT_EQ(out[1].to_ints(), std::vector<int64_t>{3}) << where;
    EXPECT_EQ(out[2].to_floats(), stacked) << where;
    EXPECT_EQ(out[3].to_floats(), doubled) << where;
    EXPECT_EQ(out[4].to_floats(), std::vector<float>({0, 1, 2})) << where;
    EXPECT_EQ(out[5].to_floats(), xv) << where;
  }
  OnnxBuilder seq_out(17);
  seq_out.input("x", kFloat, {4, 2}).output("parts", kFloat, {1, 2});  // declared a tensor, computed a sequence
  seq_out.node("SplitToSequence", {"x"}, {"parts"});
  testing::expect_refused(seq_out, "graph output 'parts'", "is declared a tensor, but the model computes a sequence");
  OnnxBuilder from_data(17);
  from_data.input("x", kFloat, {4, 2}).input("at", kInt64, {}).output("y", kFloat, {1, 2});
  from_data.node("SplitToSequence", {"x"}, {"parts"});
  from_data.node("SequenceAt", {"parts", "at"}, {"y"}, "culprit");
  testing::expect_refused(from_data, "culprit", "input 1 ('at', the position) is not known at import");
}


// A graph value of type `seq(float[2])` or `optional(float[2])` (`wrap`: "sequence" or "optional").
void wrapped_value(onnx::ValueInfoProto* vi, const std::string& name, const std::string& wrap) {
  vi->set_name(name);
  onnx::TypeProto* inner = wrap == "sequence" ? vi->mutable_type()->mutable_sequence_type()->mutable_elem_type()
                                              : vi->mutable_type()->mutable_optional_type()->mutable_elem_type();
  inner->mutable_tensor_type()->set_elem_type(1);
  inner->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(2);
}

onnx::TensorProto float_proto(const std::vector<float>& v, const std::string& name = "") {
  onnx::TensorProto t;
  t.set_name(name);
  t.set_data_type(1);
  t.add_dims(static_cast<int64_t>(v.size()));
  t.set_raw_data(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
  return t;
}

void write_proto(const fs::path& path, const google::protobuf::MessageLite& m) {
  std::ofstream(path, std::ios::binary) << m.SerializeAsString();
}

// Sequence- and optional-typed graph inputs and outputs are tensors in a plan (importer/onnx_io.h):
// a sequence xs of 2 elements is the inputs xs[0] and xs[1], an optional holding a tensor is that
// tensor under its own name, an empty one is nothing; outputs likewise. Read from ONNX test-data
// files (SequenceProto, OptionalProto), run on the reference, compiled and through `fusetune run`;
// the length taken from --shape entries; refusals naming the input or output.
TEST(Import, SequenceAndOptionalGraphInputsAndOutputsAreTheirTensors) {
  OnnxBuilder b(17);
  auto* graph = b.proto().mutable_graph();
  wrapped_value(graph->add_input(), "xs", "sequence");
  wrapped_value(graph->add_input(), "maybe", "optional");
  wrapped_value(graph->add_input(), "none", "optional");
  b.initializer("zero", Tensor::scalar_int(DType::kI64, 0));
  b.node("SequenceAt", {"xs", "zero"}, {"first"});
  b.node("OptionalGetElement", {"maybe"}, {"held"});
  b.node("Add", {"first", "held"}, {"sum"});
  b.node("SequenceInsert", {"xs", "sum"}, {"ys"});
  b.node("OptionalHasElement", {"none"}, {"has"});
  b.node("Optional", {"sum"}, {"back"});
  wrapped_value(graph->add_output(), "ys", "sequence");
  wrapped_value(graph->add_output(), "back", "optional");
  wrapped_value(graph->add_output(), "none_out", "optional");
  b.node("Identity", {"none"}, {"none_out"});
  b.output("has", 9, {});
  testing::TestDir dir("sequence_io");
  b.write(dir / "model.onnx");
  fs::create_directories(dir / "data");
  onnx::SequenceProto xs;
  xs.set_name("xs");
  xs.set_elem_type(1);
  *xs.add_tensor_values() = float_proto({1, 2});
  *xs.add_tensor_values() = float_proto({3, 4});
  write_proto(dir / "data" / "input_0.pb", xs);
  onnx::OptionalProto maybe;
  maybe.set_name("maybe");
  maybe.set_elem_type(1);
  *maybe.mutable_tensor_value() = float_proto({10, 20});
  write_proto(dir / "data" / "input_1.pb", maybe);
  onnx::OptionalProto none;
  none.set_name("none");
  write_proto(dir / "data" / "input_2.pb", none);

  const importer::GraphValues values = importer::graph_values(dir / "model.onnx");
  const importer::TestData data = importer::load_test_data(dir / "data", &values);
  ASSERT_EQ(data.inputs.size(), 3u);  // xs[0], xs[1], maybe
  EXPECT_EQ(data.inputs[1].name, "xs[1]");
  EXPECT_EQ(data.sequence_lengths.at("xs"), 2);
  EXPECT_EQ(data.empty_optionals, std::set<std::string>{"none"});
  importer::ImportOptions opt;
  const std::vector<Tensor> inputs = importer::bind_inputs(values.input_names(), data, &opt);
  const importer::ImportedModel m = importer::import_onnx(dir / "model.onnx", opt);
  std::vector<std::string> in_names, out_names;
  for (int v : m.graph.inputs()) in_names.push_back(m.graph.value(v).name);
  for (int v : m.graph.outputs()) out_names.push_back(m.graph.value(v).name);
  EXPECT_EQ(in_names, (std::vector<std::string>{"xs[0]", "xs[1]", "maybe"}));
  EXPECT_EQ(out_names, (std::vector<std::string>{"ys[0]", "ys[1]", "ys[2]", "back", "has"}));  // none_out is empty
  const auto check_outputs = [](const std::vector<Tensor>& out, const std::string& where) {
    ASSERT_EQ(out.size(), 5u) << where;
    EXPECT_EQ(out[0].to_floats(), std::vector<float>({1, 2})) << where;
    EXPECT_EQ(out[1].to_floats(), std::vector<float>({3, 4})) << where;
    EXPECT_EQ(out[2].to_floats(), std::vector<float>({11, 22})) << where;
    EXPECT_EQ(out[3].to_floats(), std::vector<float>({11, 22})) << where;
    EXPECT_EQ(out[4].to_ints(), std::vector<int64_t>{0}) << where;
  };
  check_outputs(reference::run_graph(m.graph, inputs), "reference");
  auto host = backend::make_host_backend();
  compiler::PipelineOptions compile;
  compile.import = opt;
  runtime::PlanRunner runner(compiler::compile_model(dir / "model.onnx", planner::find_device("h100"), compile).bundle, *host);
  std::vector<std::string> plan_inputs;
  for (const auto& spec : runner.inputs()) plan_inputs.push_back(spec.name);
  EXPECT_EQ(plan_inputs, in_names);
  check_outputs(runner.run(importer::bind_inputs(plan_inputs, data, nullptr)), "compiled");

  EXPECT_EQ(m.graph.onnx_outputs().size(), 4u);  // ys (3 tensors), back (1), none_out (0), has (1)
  EXPECT_EQ(m.graph.onnx_outputs()[2].tensors, 0);

  // `fusetune run` reads the same files and compares with expected outputs written the same way,
  // for the model and for its compiled plan (whose manifest says which tensors are which values).
  onnx::SequenceProto ys;
  ys.set_name("ys");
  ys.set_elem_type(1);
  for (const std::vector<float>& v : {std::vector<float>{1, 2}, {3, 4}, {11, 22}}) *ys.add_tensor_values() = float_proto(v);
  write_proto(dir / "data" / "output_0.pb", ys);
  onnx::OptionalProto back;
  back.set_elem_type(1);
  *back.mutable_tensor_value() = float_proto({11, 22});
  write_proto(dir / "data" / "output_1.pb", back);
  write_proto(dir / "data" / "output_2.pb", onnx::OptionalProto());
  importer::write_tensor_file(dir / "data" / "output_3.pb", "has", Tensor::scalar_int(DType::kBool, 0));
  const testing::Outcome ran = testing::run_cli("run '" + (dir / "model.onnx").string() + "' --inputs '" + (dir / "data").string() + "'");
  EXPECT_EQ(ran.exit_code, 0) << ran.output;
  EXPECT_NE(ran.output.find("output 2 'ys[2]'"), std::string::npos) << ran.output;
  EXPECT_NE(ran.output.find("outputs: 5 match, 0 differ"), std::string::npos) << ran.output;
  const std::string plan = (dir / "plan").string(), data_dir = (dir / "data").string();
  // Compiled with the length and the emptiness the data says (--input-value reads a sequence's
  // and an optional's files), the plan runs on the same files.
  const std::string compile_cmd = "compile '" + (dir / "model.onnx").string() + "' --device h100 --out '" + plan +
                              "' --input-value 'xs=" + data_dir + "/input_0.pb' --input-value 'none=" + data_dir + "/input_2.pb'";
  const testing::Outcome compiled = testing::run_cli(compile_cmd);
  ASSERT_EQ(compiled.exit_code, 0) << compiled.output;
  const testing::Outcome ran_plan = testing::run_cli("run '" + plan + "' --inputs '" + data_dir + "'");
  EXPECT_EQ(ran_plan.exit_code, 0) << ran_plan.output;
  EXPECT_NE(ran_plan.output.find("outputs: 5 match, 0 differ"), std::string::npos) << ran_plan.output;
  // Compiled from --shape entries alone, the plan holds `none` (no data said it is empty) and so
  // takes one more tensor than the data gives.
  const testing::Outcome by_shape = testing::run_cli("compile '" + (dir / "model.onnx").string() +
                                                     "' --device h100 --shape 'xs[0]=2' --shape 'xs[1]=2' --out '" + plan + "'");
  ASSERT_EQ(by_shape.exit_code, 0) << by_shape.output;
  const testing::Outcome short_of_one = testing::run_cli("run '" + plan + "' --inputs '" + data_dir + "'");
  EXPECT_NE(short_of_one.exit_code, 0) << short_of_one.output;
  EXPECT_NE(short_of_one.output.find("the plan takes 4 inputs, 3 were given"), std::string::npos) << short_of_one.output;

  // The length from --shape entries xs[0], xs[1], xs[2] (optionals held, where no data says
  // otherwise); without them or data, refused naming xs.
  importer::ImportOptions shapes;
  for (const char* e : {"xs[0]", "xs[1]", "xs[2]"}) shapes.input_shapes[e] = {2};
  in_names.clear();
  const Graph by_shapes = importer::import_onnx(dir / "model.onnx", shapes).graph;
  for (int v : by_shapes.inputs()) in_names.push_back(by_shapes.value(v).name);
  EXPECT_EQ(in_names, (std::vector<std::string>{"xs[0]", "xs[1]", "xs[2]", "maybe", "none"}));
  testing::expect_refused(b, "input 'xs'", "is a sequence of unknown length");
  // A declared sequence computed as a tensor, and a sequence of maps, refused naming them.
  OnnxBuilder mismatch(17);
  mismatch.input("x", kFloat, {2});
  wrapped_value(mismatch.proto().mutable_graph()->add_output(), "y", "sequence");
  mismatch.node("Relu", {"x"}, {"y"});
  testing::expect_refused(mismatch, "graph output 'y'", "is declared a sequence, but the model computes a tensor");
  OnnxBuilder maps(17);
  maps.input("x", kFloat, {2}).output("y", kFloat, {2});
  auto* of_maps = maps.proto().mutable_graph()->add_input();
  of_maps->set_name("table");
  of_maps->mutable_type()->mutable_sequence_type()->mutable_elem_type()->mutable_map_type();
  maps.node("Relu", {"x"}, {"y"});
  testing::expect_refused(maps, "input 'table'", "is a sequence of maps: fusetune takes and gives tensors, sequences of tensors");
}

}  // namespace
}  // namespace fusetune
