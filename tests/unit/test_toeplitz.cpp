// planner/toeplitz.h: values computed from index vectors, judged on their diagonals without being
// computed. Differential against the reference kernels (planner::member_constant computes every
// element): chains of the ops exporters build causal masks from, with drawn extents, offsets,
// steps and slices.
#include <gtest/gtest.h>

#include <limits>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "planner/attention.h"
#include "planner/fusion.h"
#include "planner/toeplitz.h"
#include "tests/unit/graph_helpers.h"
#include "tests/unit/test_seed.h"

namespace fusetune {
namespace {

using testing::add_op;
using testing::attrs;

// An int64 iota along one of the last two axes: rows (shape [n, 1]) or columns ([1, n], or [n]
// when `flat`), element k = first + step k.
int iota(Graph& g, int64_t n, bool rows, int64_t first, int64_t step, bool flat = false) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) v[static_cast<size_t>(k)] = first + step * k;
  const Shape s = flat ? Shape{n} : rows ? Shape{n, 1} : Shape{1, n};
  return g.add_constant("iota" + std::to_string(g.values().size()), Tensor::from_ints(DType::kI64, s, v));
}

std::set<int> all_nodes(const Graph& g) {
  std::set<int> s;
  for (int n = 0; n < static_cast<int>(g.nodes().size()); ++n) s.insert(n);
  return s;
}

// Every element of v equals its diagonal's entry.
void expect_diagonals(const Graph& g, int v, const std::string& what) {
  const std::set<int> members = all_nodes(g);
  const std::optional<planner::Toeplitz> t = planner::toeplitz_of(g, members, v);
  ASSERT_TRUE(t.has_value()) << what;
  const std::optional<Tensor> full = planner::member_constant(g, members, v);
  ASSERT_TRUE(full.has_value()) << what;
  const Shape& s = full->shape();
  const int64_t rows = s.size() >= 2 ? s[s.size() - 2] : 1, cols = s.empty() ? 1 : s.back();
  ASSERT_EQ(t->rows, rows) << what;
  ASSERT_EQ(t->cols, cols) << what;
  ASSERT_EQ(t->diagonal.numel(), rows + cols - 1) << what;
  EXPECT_EQ(t->diagonal.dtype(), full->dtype()) << what;
  const std::vector<double> d = t->diagonal.to_doubles(), x = full->to_doubles();
  for (size_t e = 0; e < x.size(); ++e) {
    const int64_t i = static_cast<int64_t>(e) / cols % rows, j = static_cast<int64_t>(e) % cols;
    ASSERT_EQ(d[static_cast<size_t>(j - i + rows - 1)], x[e]) << what << ": element " << e << " (row " << i << ", column " << j << ")";
  }
}

// Drawn chains: a Trilu's lowering (j - i against k, a Where of a fill), a transformers mask
// (Range vectors compared, Cast, the product of both), an additive bias sloped by the distance,
// each then given leading axes (Reshape, Expand) and sliced on its last two axes.
TEST(Toeplitz, DiagonalsEqualEveryElementOfTheChainsMasksAreBuiltFrom) {
  std::mt19937 rng(testing::test_seed());
  const auto draw = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  const float lowest = std::numeric_limits<float>::lowest();
  for (int round = 0; round < 40; ++round) {
    Graph g;
    const int64_t q = draw(1, 9), k = q + draw(0, 5), step = draw(0, 1) == 0 ? 1 : 2, shift = draw(-3, 3);
    const std::string what = "round " + std::to_string(round) + ": " + std::to_string(q) + " x " + std::to_string(k) +
                             ", step " + std::to_string(step) + ", diagonal " + std::to_string(shift);
    // Trilu: Sub(j, i) >= shift, Where(cond, x, 0) of a fill.
    const int diff = add_op(g, "Sub", {iota(g, k, false, draw(-2, 2), step, draw(0, 1) == 1), iota(g, q, true, draw(-2, 2), step)});
    const int upper = add_op(g, "GreaterOrEqual", {diff, g.add_constant("k", Tensor::scalar_int(DType::kI64, shift))});
    const int tri = add_op(g, "Where", {upper, g.add_constant("fill", Tensor::scalar_float(DType::kF32, lowest)),
                                        g.add_constant("zero", Tensor::scalar_float(DType::kF32, 0.0f))});
    // transformers: Greater(Range over keys, Range over queries reshaped to a column), cast to float.
    const int cols = add_op(g, "Reshape", {iota(g, k, false, 0, 1, true)}, attrs({{"shape", std::vector<int64_t>{1, k}}}));
    const int ahead = add_op(g, "Greater", {cols, iota(g, q, true, k - q, 1)});
    const int mask = add_op(g, "Mul", {tri, add_op(g, "Cast", {ahead}, attrs({{"to", int64_t{dtype_to_onnx(DType::kF32)}}}))});
    // A bias sloped by the distance where seen: -(i - j) / 4 over i >= j, lowest elsewhere.
    const int dist = add_op(g, "Cast", {add_op(g, "Neg", {diff})}, attrs({{"to", int64_t{dtype_to_onnx(DType::kF32)}}}));
    const int sloped = add_op(g, "Where", {add_op(g, "LessOrEqual", {diff, g.add_constant("z", Tensor::scalar_int(DType::kI64, 0))}),
                                           add_op(g, "Mul", {dist, g.add_constant("slope", Tensor::scalar_float(DType::kF32, -0.25f))}),
                                           g.add_constant("low", Tensor::scalar_float(DType::kF32, lowest))});
    for (int v : {diff, upper, tri, mask, sloped}) {
      const int four = add_op(g, "Reshape", {v}, attrs({{"shape", std::vector<int64_t>{1, 1, q, k}}}));
      const int wide = add_op(g, "Expand", {four}, attrs({{"shape", std::vector<int64_t>{2, 1, q, k}}}));
      const int64_t r0 = draw(0, q - 1), c0 = draw(0, k - 1);
      const int cut = add_op(g, "Slice", {wide},
                             attrs({{"starts", std::vector<int64_t>{0, 0, r0, c0}}, {"ends", std::vector<int64_t>{2, 1, draw(r0 + 1, q), draw(c0 + 1, k)}},
                                    {"steps", std::vector<int64_t>{1, 1, 1, 1}}}));
      for (int x : {v, four, wide, cut}) expect_diagonals(g, x, what + ", value " + g.value(x).name);
    }
  }
}

// What is no Toeplitz value: a leaf varying along a leading axis, an index vector that is no
// arithmetic progression, the sum of two indices, a row broadcast against a matrix in an op that
// keeps no difference, a reduction, and a graph input.
TEST(Toeplitz, WhatDependsOnMoreThanTheDifferenceIsNone) {
  Graph g;
  const int64_t q = 5, k = 7;
  const int i = iota(g, q, true, 0, 1), j = iota(g, k, false, 0, 1);
  const auto none = [&](int v, const std::string& what) {
    EXPECT_FALSE(planner::toeplitz_of(g, all_nodes(g), v).has_value()) << what;
  };
  none(add_op(g, "Add", {j, i}), "i + j");
  none(add_op(g, "Sub", {j, iota(g, q, true, 0, 2)}), "j - 2 i");
  none(add_op(g, "Sub", {j, g.add_constant("squares", Tensor::from_ints(DType::kI64, {q, 1}, std::vector<int64_t>{0, 1, 4, 9, 16}))}),
       "j - i squared");
  none(add_op(g, "Sub", {j, g.add_constant("leading", Tensor::from_ints(DType::kI64, {2, q, 1}, std::vector<int64_t>(2 * q, 1)))}),
       "an index varying along a leading axis");
  const int row = add_op(g, "Cast", {j}, attrs({{"to", int64_t{dtype_to_onnx(DType::kF32)}}}));
  const int matrix = add_op(g, "Cast", {add_op(g, "Sub", {j, i})}, attrs({{"to", int64_t{dtype_to_onnx(DType::kF32)}}}));
  none(add_op(g, "Mul", {row, matrix}), "a row times a Toeplitz matrix");
  none(add_op(g, "ReduceSum", {matrix}, attrs({{"axes", std::vector<int64_t>{1}}, {"keepdims", int64_t{1}}})), "a reduction");
  none(add_op(g, "Sub", {j, testing::add_input(g, "x", DType::kI64, {q, 1})}), "a graph input");
  // A row alone, and the difference, are.
  EXPECT_TRUE(planner::toeplitz_of(g, all_nodes(g), row).has_value());
  EXPECT_TRUE(planner::toeplitz_of(g, all_nodes(g), matrix).has_value());
}

// causal_mask_of judges a bias computed from index vectors on its diagonals (O(queries + keys))
// as it judges the same bias as a constant, element by element: drawn piecewise functions of
// j - i (thresholds around the causal diagonal, pieces of 0, -10,000, -infinity, float16's
// lowest, a finite value or a slope), on drawn extents; both must agree on causal or not and on
// computing it from the indices.
TEST(Toeplitz, ACausalBiasOnItsDiagonalsIsJudgedAsTheSameConstant) {
  std::mt19937 rng(testing::test_seed());
  const auto draw = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  int causal = 0;
  for (int round = 0; round < 300; ++round) {
    const int64_t q = draw(1, 9), k = q + draw(0, 4), last = k - q;
    const auto build = [&](Graph& g, const std::optional<Tensor>& constant) {
      std::set<int> members;
      const int first = static_cast<int>(g.nodes().size());
      const int qv = testing::add_input(g, "q", DType::kF32, {1, 1, q, 8}), kv = testing::add_input(g, "k", DType::kF32, {1, 1, k, 8});
      const int vv = testing::add_input(g, "v", DType::kF32, {1, 1, k, 8});
      int bias = kNoValue;
      if (constant) {
        bias = g.add_constant("bias", *constant);
      } else {
        const int d = add_op(g, "Sub", {iota(g, k, false, 0, 1), iota(g, q, true, 0, 1)});
        const auto piece = [&](int which) {
          const float values[] = {0.0f, -10000.0f, -std::numeric_limits<float>::infinity(), -65504.0f, 3.0f};
          if (which < 5) return g.add_constant("c", Tensor::scalar_float(DType::kF32, values[which]));
          const int dist = add_op(g, "Cast", {d}, attrs({{"to", int64_t{dtype_to_onnx(DType::kF32)}}}));
          return add_op(g, "Mul", {dist, g.add_constant("s", Tensor::scalar_float(DType::kF32, which == 5 ? 0.5f : -2.0f))});
        };
        const auto at_most = [&](int64_t t) { return add_op(g, "LessOrEqual", {d, g.add_constant("t", Tensor::scalar_int(DType::kI64, t))}); };
        const int inner = add_op(g, "Where", {at_most(last + draw(-1, 1)), piece(static_cast<int>(draw(0, 6))), piece(static_cast<int>(draw(0, 6)))});
        bias = add_op(g, "Where", {at_most(last + draw(-3, -1)), piece(static_cast<int>(draw(0, 6))), inner});
        bias = add_op(g, "Reshape", {bias}, attrs({{"shape", std::vector<int64_t>{1, 1, q, k}}}));
      }
      const int kt = add_op(g, "Transpose", {kv}, attrs({{"perm", std::vector<int64_t>{0, 1, 3, 2}}}));
      const int x = add_op(g, "Add", {add_op(g, "MatMul", {qv, kt}), bias});
      const int out = add_op(g, "MatMul", {add_op(g, "Softmax", {x}, attrs({{"axis", int64_t{-1}}})), vv});
      g.outputs().push_back(out);
      planner::FusionGroup fg;
      for (int n = first; n < static_cast<int>(g.nodes().size()); ++n) fg.nodes.push_back(n);
      planner::describe_group(g, fg);
      return std::pair{fg, bias};
    };
    Graph computed;
    const auto [cg, cbias] = build(computed, std::nullopt);
    std::set<int> members(cg.nodes.begin(), cg.nodes.end());
    const std::optional<Tensor> value = planner::member_constant(computed, members, cbias);
    ASSERT_TRUE(value.has_value());
    Graph constant;
    const auto [kg, kbias] = build(constant, *value);
    const auto core_c = planner::match_attention(computed, cg), core_k = planner::match_attention(constant, kg);
    ASSERT_TRUE(core_c && core_k);
    const auto a = planner::causal_mask_of(computed, cg, *core_c), b = planner::causal_mask_of(constant, kg, *core_k);
    const std::string what = "round " + std::to_string(round) + ": " + std::to_string(q) + " x " + std::to_string(k);
    ASSERT_TRUE(planner::toeplitz_of(computed, members, cbias).has_value()) << what;
    EXPECT_EQ(a.has_value(), b.has_value()) << what;
    if (a && b) {
      EXPECT_EQ(a->from_indices, b->from_indices) << what;
    }
    causal += a.has_value() ? 1 : 0;
  }
  EXPECT_GT(causal, 10);  // the draws reach causal biases, not refusals alone
}

// Integer rules in exact arithmetic: indices scaled by a scalar before their difference stay
// affine; int32 values near the type's ends (a comparison with its lowest value, an Add that
// wraps) come out as the reference computes them, wraps included.
TEST(Toeplitz, ScaledAndExtremeIntegerIndicesAreExact) {
  Graph g;
  const int64_t q = 5, k = 7;
  const auto two = [&](DType t) { return g.add_constant("two", Tensor::scalar_int(t, 2)); };
  const int scaled = add_op(g, "Sub", {add_op(g, "Mul", {iota(g, k, false, 0, 1), two(DType::kI64)}),
                                       add_op(g, "Mul", {two(DType::kI64), iota(g, q, true, 3, 1)})});
  expect_diagonals(g, scaled, "2 j - 2 (i + 3)");
  const auto int32_iota = [&](int64_t n, bool rows) {
    std::vector<int64_t> v(static_cast<size_t>(n));
    for (int64_t e = 0; e < n; ++e) v[static_cast<size_t>(e)] = e;
    return g.add_constant("iota32", Tensor::from_ints(DType::kI32, rows ? Shape{n, 1} : Shape{1, n}, v));
  };
  const int j32 = int32_iota(k, false), i32 = int32_iota(q, true);
  const int lowest = g.add_constant("lowest", Tensor::scalar_int(DType::kI32, std::numeric_limits<int32_t>::min()));
  const int highest = g.add_constant("highest", Tensor::scalar_int(DType::kI32, std::numeric_limits<int32_t>::max()));
  expect_diagonals(g, add_op(g, "Greater", {add_op(g, "Sub", {j32, i32}), lowest}), "j - i > int32's lowest");
  expect_diagonals(g, add_op(g, "Cast", {add_op(g, "Add", {add_op(g, "Sub", {j32, i32}), highest})}, attrs({{"to", int64_t{7}}})),
                   "j - i + int32's highest, wrapped, as int64");
}

}  // namespace
}  // namespace fusetune
