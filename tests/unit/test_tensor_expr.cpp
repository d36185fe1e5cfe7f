// Tensor expressions: the index maps of every canonical op, checked by evaluating them directly
// (out[o] = combine_r f(in[map(o, r)])) and comparing with the reference kernels on every node of
// the small exported models; classification and tile propagation on known cases.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>

#include "importer/importer.h"
#include "planner/tensor_expr.h"
#include "reference/compare.h"
#include "reference/kernels.h"
#include "unit/graph_helpers.h"

namespace fusetune::planner {
namespace {

namespace fs = std::filesystem;
using fusetune::testing::add_input;
using fusetune::testing::add_op;
using fusetune::testing::attrs;

// Evaluates access `a` at variables `vars`; data leaves (Gather) resolve through `gather_index`.
// Returns the flat offset into the input, or -1 if a guarded access falls outside it.
int64_t offset_of(const Access& a, const Shape& in, const std::vector<int64_t>& vars, int64_t gather_index) {
  int64_t off = 0;
  for (size_t d = 0; d < a.index.size(); ++d) {
    const int64_t i = a.index[d].has_data() ? gather_index : a.index[d].eval(vars);
    if (i < 0 || i >= in[d]) {
      EXPECT_TRUE(a.guarded) << "unguarded access out of range";
      return -1;
    }
    off = off * in[d] + i;
  }
  return off;
}

// Computes the node's output from its tensor expression for the ops whose scalar function is a
// copy, a sum of products, a sum, or a max; returns false for ops it does not evaluate.
bool evaluate(const Graph& g, const Node& n, const TensorExpr& e, const std::vector<Tensor>& inputs, Tensor& out) {
  static const std::set<std::string> kCopy = {"Reshape", "Transpose", "Slice", "Concat", "Expand", "Tile", "Gather"};
  static const std::set<std::string> kSum = {"MatMul", "Conv", "ReduceSum", "ReduceMean", "AveragePool"};
  static const std::set<std::string> kMax = {"ReduceMax", "MaxPool"};
  const bool pad_const = n.op == "Pad" && n.attrs.s("mode", "constant") == "constant";
  if (!kCopy.count(n.op) && !kSum.count(n.op) && !kMax.count(n.op) && !pad_const) return false;
  std::vector<std::vector<double>> in;
  for (const Tensor& t : inputs) in.push_back(t.to_doubles());
  const int nout = static_cast<int>(e.out_shape.size());
  std::vector<double> result(static_cast<size_t>(numel(e.out_shape)));
  std::vector<int64_t> vars(static_cast<size_t>(e.num_vars()), 0);
  std::vector<int64_t> gather_idx;
  if (n.op == "Gather") gather_idx = inputs[1].to_ints();
  const int64_t taps = numel(Shape(e.reduce_extents.begin(), e.reduce_extents.end()));
  for (size_t o = 0; o < result.size(); ++o) {
    int64_t rem = static_cast<int64_t>(o);
    for (int d = nout - 1; d >= 0; --d) {
      vars[static_cast<size_t>(d)] = rem % e.out_shape[static_cast<size_t>(d)];
      rem /= e.out_shape[static_cast<size_t>(d)];
    }
    double acc = kMax.count(n.op) ? -INFINITY : 0.0;
    int64_t count = 0;
    for (int64_t t = 0; t < taps; ++t) {
      int64_t r = t;
      for (int k = static_cast<int>(e.reduce_extents.size()) - 1; k >= 0; --k) {
        vars[static_cast<size_t>(nout + k)] = r % e.reduce_extents[static_cast<size_t>(k)];
        r /= e.reduce_extents[static_cast<size_t>(k)];
      }
      if (kCopy.count(n.op) || pad_const) {
        double v = pad_const ? n.attrs.f("value") : 0.0;
        for (const Access& a : e.accesses) {
          if (n.op == "Gather" && a.input == 1) continue;
          int64_t gi = 0;
          if (n.op == "Gather") {  // the index tensor is read at the index variables
            int64_t flat = 0;
            const Access& ia = e.accesses[1];
            for (size_t d = 0; d < ia.index.size(); ++d) flat = flat * inputs[1].shape()[d] + ia.index[d].eval(vars);
            gi = gather_idx[static_cast<size_t>(flat)];
            if (gi < 0) gi += g.value(n.inputs[0]).shape[static_cast<size_t>(n.attrs.i("axis"))];
          }
          const int64_t off = offset_of(a, inputs[static_cast<size_t>(a.input)].shape(), vars, gi);
          if (off >= 0) v = in[static_cast<size_t>(a.input)][static_cast<size_t>(off)];
        }
        acc = v;
        continue;
      }
      double prod = 1.0;
      bool inside = true;
      for (const Access& a : e.accesses) {
        if (n.op == "Conv" && a.input == 2) continue;  // bias is added once, below
        const int64_t off = offset_of(a, inputs[static_cast<size_t>(a.input)].shape(), vars, 0);
        if (off < 0) {
          inside = false;
          break;
        }
        prod *= in[static_cast<size_t>(a.input)][static_cast<size_t>(off)];
      }
      if (!inside) continue;
      ++count;
      acc = kMax.count(n.op) ? std::max(acc, prod) : acc + prod;
    }
    if (n.op == "ReduceMean") acc /= static_cast<double>(taps);
    if (n.op == "AveragePool") acc /= static_cast<double>(n.attrs.i("count_include_pad") ? taps : count);
    if (n.op == "Conv" && e.accesses.size() > 2) acc += in[2][static_cast<size_t>(vars[1])];
    result[o] = acc;
  }
  out = Tensor(g.value(n.outputs[0]).dtype, e.out_shape);
  out.set_doubles(result);
  return true;
}

Tensor random_input(const Graph& g, const Node& n, size_t k, std::mt19937& rng) {
  const Value& v = g.value(n.inputs[k]);
  if (v.is_constant()) return *v.data;
  Tensor t(v.dtype, v.shape);
  if (n.op == "Gather" && k == 1) {  // valid indices, some negative
    const int64_t extent = g.value(n.inputs[0]).shape[static_cast<size_t>(n.attrs.i("axis"))];
    std::uniform_int_distribution<int64_t> pick(-extent, extent - 1);
    std::vector<int64_t> idx(static_cast<size_t>(t.numel()));
    for (auto& i : idx) i = pick(rng);
    t.set_ints(idx);
    return t;
  }
  std::normal_distribution<double> dist(0.0, 1.0);
  std::vector<double> vals(static_cast<size_t>(t.numel()));
  for (auto& x : vals) x = dist(rng);
  t.set_doubles(vals);
  return t;
}

void check_graph(const Graph& g, const std::string& label, std::mt19937& rng, std::map<std::string, int>& checked) {
  for (const Node& n : g.nodes()) {
    const TensorExpr e = describe(g, n);
    std::vector<Tensor> inputs;
    std::vector<const Tensor*> ptrs;
    for (size_t k = 0; k < n.inputs.size(); ++k) inputs.push_back(random_input(g, n, k, rng));
    for (const Tensor& t : inputs) ptrs.push_back(&t);
    Tensor mine;
    if (!evaluate(g, n, e, inputs, mine)) continue;
    const Tensor want = reference::run_node(n, ptrs)[0];
    const auto c = reference::compare(mine, want, {1e-9, 1e-9, 1e-9});
    EXPECT_TRUE(c.ok) << label << " node '" << n.name << "' (" << n.op << "): " << c.describe();
    ++checked[n.op];
  }
}

// Odd shapes and attributes the exported models do not exercise.
Graph unusual_ops() {
  Graph g;
  const int x = add_input(g, "x", DType::kF32, {2, 6, 7, 5});
  const int ids = add_input(g, "ids", DType::kI64, {3, 2});
  add_op(g, "Pad", {x}, attrs({{"pads", std::vector<int64_t>{0, 1, -2, 3, 1, 0, 2, -1}}, {"mode", std::string("constant")},
                               {"value", 1.5f}}));
  add_op(g, "Tile", {x}, attrs({{"repeats", std::vector<int64_t>{1, 2, 1, 3}}}));
  const int one = add_input(g, "one", DType::kF32, {6, 1, 1});
  add_op(g, "Expand", {one}, attrs({{"shape", std::vector<int64_t>{2, 6, 7, 5}}}));
  add_op(g, "Slice", {x}, attrs({{"starts", std::vector<int64_t>{1, 5, 0, 4}}, {"ends", std::vector<int64_t>{2, -1, 7, 0}},
                                 {"steps", std::vector<int64_t>{1, -2, 3, -1}}}));
  add_op(g, "Concat", {x, add_op(g, "Neg", {x}), x}, attrs({{"axis", int64_t{2}}}));
  add_op(g, "Gather", {x, ids}, attrs({{"axis", int64_t{1}}}));
  add_op(g, "ReduceMax", {x}, attrs({{"axes", std::vector<int64_t>{1, 3}}, {"keepdims", int64_t{0}}}));
  add_op(g, "MaxPool", {x}, attrs({{"kernel_shape", std::vector<int64_t>{3, 2}}, {"strides", std::vector<int64_t>{2, 2}},
                                   {"pads", std::vector<int64_t>{1, 0, 1, 1}}, {"ceil_mode", int64_t{1}}}));
  add_op(g, "AveragePool", {x}, attrs({{"kernel_shape", std::vector<int64_t>{2, 3}}, {"pads", std::vector<int64_t>{1, 1, 0, 1}},
                                       {"count_include_pad", int64_t{1}}}));
  const int w = add_input(g, "w", DType::kF32, {4, 3, 2, 3});
  const int bias = add_input(g, "bias", DType::kF32, {4});
  add_op(g, "Conv", {x, w, bias}, attrs({{"group", int64_t{2}}, {"strides", std::vector<int64_t>{2, 1}},
                                         {"dilations", std::vector<int64_t>{2, 1}}, {"pads", std::vector<int64_t>{0, 1, 1, 2}}}));
  const int a = add_input(g, "a", DType::kF32, {5});
  const int m = add_input(g, "m", DType::kF32, {3, 5, 4});
  add_op(g, "MatMul", {a, m});
  add_op(g, "MatMul", {m, add_input(g, "v", DType::kF32, {4})});
  add_op(g, "Transpose", {x}, attrs({{"perm", std::vector<int64_t>{3, 1, 0, 2}}}));
  add_op(g, "Reshape", {x}, attrs({{"shape", std::vector<int64_t>{3, 4, 35}}}));
  return g;
}

TEST(TensorExpr, MapsReproduceTheReferenceKernels) {
  std::mt19937 rng(42);
  std::map<std::string, int> checked;
  for (const char* name : {"bert", "cnn_small", "convnext_t", "efficientnet_b0", "mobilenet_v2", "nerf_mlp",
                           "resnet_small", "swin_t", "vit"}) {
    check_graph(fusetune::testing::load_test_model(name), name, rng, checked);
  }
  check_graph(unusual_ops(), "unusual", rng, checked);
  for (const char* op : {"Reshape", "Transpose", "Slice", "Concat", "Gather", "Expand", "Tile", "Pad", "MatMul", "Conv",
                         "ReduceMean", "ReduceMax", "MaxPool", "AveragePool"}) {
    EXPECT_GT(checked[op], 0) << op << " was never checked";
  }
}

TEST(TensorExpr, ClassesComeFromTheMaps) {
  Graph g;
  const int x = add_input(g, "x", DType::kF32, {2, 3, 4});
  const int b = add_input(g, "b", DType::kF32, {4});
  const int w = add_input(g, "w", DType::kF32, {4, 5});
  auto cls = [&](int v) {
    const Node& n = g.nodes()[static_cast<size_t>(g.producers()[static_cast<size_t>(v)])];
    return classify(g, n, describe(g, n));
  };
  EXPECT_EQ(cls(add_op(g, "Exp", {x})), ExprClass::kElementwise);
  EXPECT_EQ(cls(add_op(g, "Add", {x, x})), ExprClass::kElementwise);
  EXPECT_EQ(cls(add_op(g, "Add", {x, b})), ExprClass::kBroadcast);
  EXPECT_EQ(cls(add_op(g, "ReduceSum", {x}, attrs({{"axes", std::vector<int64_t>{2}}, {"keepdims", int64_t{0}}}))),
            ExprClass::kReduction);
  EXPECT_EQ(cls(add_op(g, "Softmax", {x}, attrs({{"axis", int64_t{2}}}))), ExprClass::kReduction);
  EXPECT_EQ(cls(add_op(g, "MatMul", {x, w})), ExprClass::kContraction);
  EXPECT_EQ(cls(add_op(g, "Transpose", {x}, attrs({{"perm", std::vector<int64_t>{2, 0, 1}}}))), ExprClass::kDataMovement);
  EXPECT_EQ(cls(add_op(g, "Reshape", {x}, attrs({{"shape", std::vector<int64_t>{6, 4}}}))), ExprClass::kDataMovement);
}

TEST(TensorExpr, ConvTilesReadAHaloAndReshapeMapsAreDivMod) {
  Graph g;
  const int x = add_input(g, "x", DType::kF32, {1, 8, 32, 32});
  const int w = add_input(g, "w", DType::kF32, {16, 8, 3, 3});
  const int c = add_op(g, "Conv", {x, w},
                       attrs({{"pads", std::vector<int64_t>{1, 1, 1, 1}}, {"strides", std::vector<int64_t>{1, 1}},
                              {"dilations", std::vector<int64_t>{1, 1}}, {"group", int64_t{1}}}));
  const Node& conv = g.nodes().back();
  const TensorExpr e = describe(g, conv);
  // An 8x8 output tile in the interior reads a 10x10 input patch of every channel.
  const auto regions = input_regions(g, conv, e, {{0, 0}, {0, 3}, {8, 15}, {8, 15}});
  EXPECT_EQ(regions[0], (std::vector<Interval>{{0, 0}, {0, 7}, {7, 16}, {7, 16}}));
  EXPECT_EQ(regions[1], (std::vector<Interval>{{0, 3}, {0, 7}, {0, 2}, {0, 2}}));
  // At the border the halo is clipped to the image.
  const auto border = input_regions(g, conv, e, {{0, 0}, {0, 15}, {0, 7}, {0, 7}});
  EXPECT_EQ(border[0][2], (Interval{0, 8}));
  // Reshape [1,32,1024] -> [1,32,32,32]: the split dim is a sum within its group; no div/mod.
  const int r = add_op(g, "Reshape", {c}, attrs({{"shape", std::vector<int64_t>{1, 16, 1024}}}));
  const int back = add_op(g, "Reshape", {r}, attrs({{"shape", std::vector<int64_t>{1, 16, 32, 32}}}));
  (void)back;
  const TensorExpr split = describe(g, g.nodes().back());
  EXPECT_TRUE(split.accesses[0].index[2].is_affine());
  EXPECT_EQ(split.accesses[0].index[2].str([](int v) { return "o" + std::to_string(v); }), "((o2 * 32) + o3)");
  // ... and the merge back reads with floor division and modulo.
  const TensorExpr merge = describe(g, g.nodes()[1]);
  EXPECT_EQ(merge.accesses[0].index[2].str([](int v) { return "o" + std::to_string(v); }), "(o2 / 32)");
  EXPECT_EQ(merge.accesses[0].index[3].str([](int v) { return "o" + std::to_string(v); }), "(o2 % 32)");
}

TEST(TensorExpr, GatherReadsConservatively) {
  Graph g;
  const int table = add_input(g, "table", DType::kF32, {1000, 64});
  const int ids = add_input(g, "ids", DType::kI64, {1, 16});
  add_op(g, "Gather", {table, ids}, attrs({{"axis", int64_t{0}}}));
  const Node& n = g.nodes().back();
  const auto regions = input_regions(g, n, describe(g, n), {{0, 0}, {0, 3}, {0, 31}});
  EXPECT_EQ(regions[0], (std::vector<Interval>{{0, 999}, {0, 31}}));  // any row may be read
  EXPECT_EQ(regions[1], (std::vector<Interval>{{0, 0}, {0, 3}}));
}

}  // namespace
}  // namespace fusetune::planner
