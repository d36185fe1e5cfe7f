// Signatures: equal for repeated layers and shared blocks, different for any change of shape,
// dtype, attribute or edge, blind to names and node order, and pinned by a golden digest.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "core/signature.h"
#include "importer/importer.h"
#include "unit/graph_helpers.h"

namespace fusetune {
namespace {

using testing::add_input;
using testing::add_op;
using testing::attrs;
using testing::random_constant;

struct LayerSpec {
  int64_t seq = 8;
  int64_t hidden = 16;
  int64_t heads = 2;
  int64_t ffn = 32;
  DType dtype = DType::kF32;
  float eps = 1e-5f;
  bool swap_residual = false;  // an edge change: the residual adds the attention input, not its output
};

// A BERT-style encoder layer in canonical ops; returns its output and appends its node ids.
int encoder_layer(Graph& g, int x, const LayerSpec& s, uint32_t seed, const std::string& prefix,
                  std::vector<int>& nodes) {
  const size_t first = g.nodes().size();
  const int64_t dh = s.hidden / s.heads;
  auto w = [&](const std::string& n, Shape shape) { return random_constant(g, prefix + n, s.dtype, shape, seed++); };
  auto proj = [&](int in, int64_t out_dim, const std::string& n) {
    return add_op(g, "Add", {add_op(g, "MatMul", {in, w(n + ".w", {g.value(in).shape.back(), out_dim})}),
                             w(n + ".b", {out_dim})});
  };
  auto heads = [&](int t) {
    const int r = add_op(g, "Reshape", {t}, attrs({{"shape", std::vector<int64_t>{1, s.seq, s.heads, dh}}}));
    return add_op(g, "Transpose", {r}, attrs({{"perm", std::vector<int64_t>{0, 2, 1, 3}}}));
  };
  const int q = heads(proj(x, s.hidden, "q"));
  const int k = add_op(g, "Transpose", {heads(proj(x, s.hidden, "k"))}, attrs({{"perm", std::vector<int64_t>{0, 1, 3, 2}}}));
  const int v = heads(proj(x, s.hidden, "v"));
  const int scale = g.add_constant(prefix + "scale", Tensor::scalar_float(s.dtype, 0.25f));
  const int scores = add_op(g, "Mul", {add_op(g, "MatMul", {q, k}), scale});
  const int probs = add_op(g, "Softmax", {scores}, attrs({{"axis", int64_t{3}}}));
  const int ctx = add_op(g, "MatMul", {probs, v});
  const int merged = add_op(g, "Reshape", {add_op(g, "Transpose", {ctx}, attrs({{"perm", std::vector<int64_t>{0, 2, 1, 3}}}))},
                            attrs({{"shape", std::vector<int64_t>{1, s.seq, s.hidden}}}));
  const int attn = proj(merged, s.hidden, "o");
  const int res1 = s.swap_residual ? add_op(g, "Add", {attn, merged}) : add_op(g, "Add", {attn, x});
  auto ln = [&](int t, const std::string& n) {
    return add_op(g, "LayerNormalization", {t, w(n + ".g", {s.hidden}), w(n + ".b", {s.hidden})},
                  attrs({{"axis", int64_t{2}}, {"epsilon", s.eps}}));
  };
  const int h1 = ln(res1, "ln1");
  const int up = proj(h1, s.ffn, "up");
  const int gelu = add_op(g, "Mul", {add_op(g, "Erf", {up}), up});
  const int out = ln(add_op(g, "Add", {proj(gelu, s.hidden, "down"), h1}), "ln2");
  for (size_t n = first; n < g.nodes().size(); ++n) nodes.push_back(static_cast<int>(n));
  return out;
}

std::string layer_digest(const LayerSpec& s) {
  Graph g;
  const int x = add_input(g, "x", s.dtype, {1, s.seq, s.hidden});
  std::vector<int> nodes;
  g.outputs().push_back(encoder_layer(g, x, s, 1, "l.", nodes));
  return subgraph_signature(g, nodes).digest;
}

TEST(Signature, TwelveEncoderLayersShareOneSignature) {
  Graph g;
  int x = add_input(g, "tokens", DType::kF32, {1, 8, 16});
  std::vector<std::vector<int>> layers(12);
  for (uint32_t l = 0; l < 12; ++l) x = encoder_layer(g, x, {}, 100 * l, "layer" + std::to_string(l) + ".", layers[l]);
  g.outputs().push_back(x);
  std::set<std::string> digests;
  for (const auto& nodes : layers) digests.insert(subgraph_signature(g, nodes).digest);
  EXPECT_EQ(digests.size(), 1u);
  EXPECT_EQ(digests.begin()->rfind("v1:", 0), 0u);
  EXPECT_EQ(digests.begin()->size(), 3u + 64u);
}

TEST(Signature, SameBlockInTwoDifferentModels) {
  Graph a;  // token embedding lookup, then the block
  const int ids = add_input(a, "ids", DType::kI64, {1, 8});
  const int table = random_constant(a, "emb", DType::kF32, {50, 16}, 7);
  std::vector<int> block_a;
  a.outputs().push_back(encoder_layer(a, add_op(a, "Gather", {table, ids}, attrs({{"axis", int64_t{0}}})), {}, 3, "enc.", block_a));
  Graph b;  // a patch projection of an image, then the same block (other weights, other names)
  const int img = add_input(b, "pixels", DType::kF32, {1, 8, 12});
  const int proj = add_op(b, "MatMul", {img, random_constant(b, "patch", DType::kF32, {12, 16}, 9)});
  std::vector<int> block_b;
  b.outputs().push_back(encoder_layer(b, add_op(b, "Relu", {proj}), {}, 55, "vit.block.", block_b));
  EXPECT_EQ(subgraph_signature(a, block_a).digest, subgraph_signature(b, block_b).digest);
  EXPECT_NE(graph_signature(a).digest, graph_signature(b).digest);
}

TEST(Signature, ChangesWithShapeDtypeAttributeAndEdge) {
  const std::string base = layer_digest({});
  LayerSpec shape;
  shape.ffn = 48;
  LayerSpec dtype;
  dtype.dtype = DType::kF16;
  LayerSpec attr;
  attr.eps = 1e-6f;
  LayerSpec edge;
  edge.swap_residual = true;
  LayerSpec seq;
  seq.seq = 9;
  const std::set<std::string> all = {base, layer_digest(shape), layer_digest(dtype), layer_digest(attr),
                                     layer_digest(edge), layer_digest(seq)};
  EXPECT_EQ(all.size(), 6u);
}

TEST(Signature, SmallConstantsEnterByValueLargeOnesByType) {
  auto digest = [](float scale, uint32_t weight_seed) {
    Graph g;
    const int x = add_input(g, "x", DType::kF32, {4, 32});
    const int w = random_constant(g, "w", DType::kF32, {32, 32}, weight_seed);
    const int s = g.add_constant("s", Tensor::scalar_float(DType::kF32, scale));
    g.outputs().push_back(add_op(g, "Mul", {add_op(g, "MatMul", {x, w}), s}));
    return graph_signature(g).digest;
  };
  EXPECT_EQ(digest(0.5f, 1), digest(0.5f, 2));  // weights are parameters: values do not matter
  EXPECT_NE(digest(0.5f, 1), digest(0.25f, 1));  // an inline scalar changes the kernel
}

TEST(Signature, IgnoresNamesAndNodeOrder) {
  // Two independent branches joined by Add, emitted in either order with different names.
  auto build = [](bool left_first, const std::string& tag) {
    Graph g;
    const int x = add_input(g, tag + "x", DType::kF32, {2, 8});
    const int y = add_input(g, tag + "y", DType::kF32, {2, 8});
    int l = kNoValue, r = kNoValue;
    if (left_first) {
      l = add_op(g, "Exp", {x}, {}, tag + "left");
      r = add_op(g, "Tanh", {y}, {}, tag + "right");
    } else {
      r = add_op(g, "Tanh", {y}, {}, tag + "B");
      l = add_op(g, "Exp", {x}, {}, tag + "A");
    }
    g.outputs().push_back(add_op(g, "Add", {l, r}, {}, tag + "sum"));
    return graph_signature(g);
  };
  const Signature a = build(true, "");
  const Signature b = build(false, "renamed_");
  EXPECT_EQ(a.digest, b.digest);
  EXPECT_EQ(a.canonical_form, b.canonical_form);
  EXPECT_EQ(a.canonical_form.find("renamed"), std::string::npos);
}

TEST(Signature, GoldenDigestPinsTheCanonicalForm) {
  // If this fails, the canonical form changed: bump kSignatureVersion (stored tuning results are
  // keyed by the old form) and update the golden text and digest together.
  Graph g;
  const int x = add_input(g, "x", DType::kF32, {4, 8});
  const int w = random_constant(g, "w", DType::kF32, {8, 16}, 1);
  const int b = g.add_constant("b", Tensor::from_floats(DType::kF32, {16}, std::vector<float>(16, 0.5f)));
  const int half = g.add_constant("half", Tensor::scalar_float(DType::kF32, 0.5f));
  const int y = add_op(g, "Mul", {add_op(g, "Add", {add_op(g, "MatMul", {x, w}), b}), half});
  g.outputs().push_back(add_op(g, "Softmax", {add_op(g, "Relu", {y})}, attrs({{"axis", int64_t{1}}})));
  const Signature s = graph_signature(g);
  const std::string golden_form =
      "fusetune-signature v1\n"
      "in0 = input float32[4,8]\n"
      "in1 = param float32[8,16]\n"
      "in2 = param float32[16]\n"
      "in3 = const float32[] {0x1p-1}\n"
      "n0 = MatMul(in0, in1) -> float32[4,16]\n"
      "n1 = Add(n0, in2) -> float32[4,16]\n"
      "n2 = Mul(n1, in3) -> float32[4,16]\n"
      "n3 = Relu(n2) -> float32[4,16]\n"
      "n4 = Softmax[axis=1](n3) -> float32[4,16]\n"
      "out n4\n";
  EXPECT_EQ(s.canonical_form, golden_form);
  EXPECT_EQ(s.digest, "v1:48e95a1428b411c37b53857293b6d733bed7b649eb74eb35f9d08f4151b55934");
}

TEST(Signature, LayersOfTheExportedBertMatch) {
  const auto m = importer::import_onnx(std::filesystem::path(FUSETUNE_SOURCE_DIR) / "tests/data/models/bert/model.onnx",
                                       {{{"input_ids", {1, 16}}, {"attention_mask", {1, 16}}}, {}});
  std::vector<int> l0, l1;
  for (size_t n = 0; n < m.graph.nodes().size(); ++n) {
    const std::string& name = m.graph.nodes()[n].name;
    if (name.rfind("/layers.0/", 0) == 0) l0.push_back(static_cast<int>(n));
    if (name.rfind("/layers.1/", 0) == 0) l1.push_back(static_cast<int>(n));
  }
  ASSERT_GT(l0.size(), 20u);
  EXPECT_EQ(l0.size(), l1.size());
  EXPECT_EQ(subgraph_signature(m.graph, l0).digest, subgraph_signature(m.graph, l1).digest);
}

}  // namespace
}  // namespace fusetune
