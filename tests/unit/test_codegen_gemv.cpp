// The GEMV form of a staged MatMul (codegen/stages/matmul.h; planner/tiling.h): MatMuls of at most
// 8 rows whose B the group reads straight from memory in 16-byte vectors, the block's threads
// splitting each step's rows. Differentially against the reference under the host executor's
// checks (odd K, N that are not whole vectors, partial column tiles, more slices than a step has
// rows, float32/float16/bfloat16, fused prologues and epilogues, B computed in the group: the
// scalar form instead); the IR it prints; and the cost model's view of a decode step (Little's
// law makes the staged form's small tiles latency-bound, the GEMV form near the bandwidth).
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "codegen/kernel_ir.h"
#include "codegen/lower_group.h"
#include "planner/device.h"
#include "planner/fusion.h"
#include "planner/select.h"
#include "planner/tiling.h"
#include "unit/codegen_check.h"
#include "unit/graph_helpers.h"

namespace fusetune::codegen {
namespace {

using fusetune::testing::add_input;
using fusetune::testing::add_op;
using fusetune::testing::check_groups;
using fusetune::testing::one_group_per_node;
using fusetune::testing::whole_graph_group;
using planner::FusionGroup;
using planner::TileConfig;

// A GEMV candidate for a group whose root has rank r: all rows (at most 8), `width` columns.
TileConfig gemv(const Graph& g, const FusionGroup& fg, int64_t width, int64_t step, int threads) {
  const Shape& s = g.value(fg.outputs[0]).shape;
  std::vector<int64_t> tile(s.size(), 1);
  tile[s.size() - 2] = std::min<int64_t>(s[s.size() - 2], 8);
  tile.back() = width;
  TileConfig cfg{tile, step, threads, 4};
  cfg.gemv = true;
  return cfg;
}

// True if kernel k allocates shared memory named `prefix`... (red: the GEMV form's partial products;
// sb: a staged B slice).
bool allocates(const Kernel& k, const std::string& prefix) {
  for (const SharedAlloc& s : k.shared) {
    if (s.name.rfind(prefix, 0) == 0) return true;
  }
  return false;
}

TEST(CodegenGemv, OddShapesMatchTheReferenceInEveryType) {
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16}) {
    Graph g;
    for (const auto& [m, k, n] : std::vector<std::array<int64_t, 3>>{
             {1, 1, 1}, {1, 300, 40}, {3, 37, 13}, {8, 1000, 24}, {5, 129, 8}, {2, 16, 5}}) {
      add_op(g, "MatMul", {add_input(g, "a" + std::to_string(g.nodes().size()), dt, {m, k}),
                           add_input(g, "b" + std::to_string(g.nodes().size()), dt, {k, n})});
    }
    // A decode step's shapes: a batch of one, three axes.
    add_op(g, "MatMul", {add_input(g, "x", dt, {1, 1, 96}), add_input(g, "w", dt, {96, 48})});
    const auto groups = one_group_per_node(g);
    const int64_t lanes = 16 / static_cast<int64_t>(dtype_size(dt));
    // Two or three column vectors a tile (the last tile partial), steps longer and shorter than
    // the slices (64 threads over 2 vectors: 32 slices, more than a step of 8 has rows).
    for (const auto& [vecs, step, threads] : std::vector<std::array<int, 3>>{{2, 8, 64}, {3, 128, 32}, {3, 64, 96}}) {
      check_groups(g, groups, [&](const FusionGroup& fg) { return gemv(g, fg, vecs * lanes, step, threads); },
                   std::string(dtype_name(dt)) + " gemv, " + std::to_string(vecs) + " vectors, step " + std::to_string(step) +
                       ", " + std::to_string(threads) + " threads");
    }
    for (const FusionGroup& fg : groups) {
      const Kernel k = lower_group(g, fg, gemv(g, fg, 2 * lanes, 128, 64), "k").kernel;
      EXPECT_TRUE(allocates(k, "red") && !allocates(k, "sb")) << "no GEMV form for " << dtype_name(dt) << " " << to_text(k);
    }
  }
}

// Split-K in the GEMV form (codegen/stages/matmul.h): each block sums its split's steps over its
// slices, a thread's share of the tile's summed plane goes through the hand-over
// (stages/split_k.h), and the tile's last block sums the splits in order before the epilogue.
// K whose steps the splits do not divide (a short last split, or one with no step), partial
// row and column tiles, a plane larger than the block (six shares a thread at 32 threads), a bias and an
// activation from registers of the shared plane; float32, float16 and bfloat16 against the
// reference under the host executor's checks. The grid is the tiles' splits. A decode step's key
// projection (2,048 x 256, float16, H200: few column tiles, each a long K) gets split GEMV
// candidates, the best modeled faster than the best unsplit one.
TEST(CodegenGemv, SplitKMatchesTheReference) {
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16}) {
    fusetune::testing::GroupedGraph c;
    int id = 0;
    // (10 rows: a tile of 8, then a partial one of 2.)
    for (const auto& [m, k, n] : std::vector<std::array<int64_t, 3>>{{1, 1000, 40}, {8, 300, 24}, {10, 129, 13}}) {
      c.groups.push_back(fusetune::testing::add_matmul_chain(c.g, dt, {m, k}, {k, n}, id % 2 == 0 ? "Relu" : "Tanh", false, id));
      ++id;
    }
    const int64_t lanes = 16 / static_cast<int64_t>(dtype_size(dt));
    for (const auto& [vecs, step, threads, splits] : std::vector<std::array<int, 4>>{{2, 64, 64, 2}, {3, 32, 32, 3}, {1, 128, 64, 4}}) {
      const auto config = [&](const FusionGroup& fg) {
        TileConfig cfg = gemv(c.g, fg, vecs * lanes, step, threads);
        cfg.split_k = splits;
        return cfg;
      };
      check_groups(c.g, c.groups, config, std::string(dtype_name(dt)) + " split gemv, " + config(c.groups[0]).str());
      for (const FusionGroup& fg : c.groups) {
        const TileConfig cfg = config(fg);
        const LoweredKernel lk = lower_group(c.g, fg, cfg, "k");
        EXPECT_TRUE(allocates(lk.kernel, "red")) << "no GEMV form: " << cfg.str();
        ASSERT_EQ(lk.kernel.scratch.size(), 2u) << cfg.str();
        EXPECT_EQ(lk.kernel.grid, lk.kernel.scratch[0].elements * splits) << cfg.str();
      }
    }
  }
  Graph g;
  add_op(g, "MatMul", {add_input(g, "x", DType::kF16, {1, 1, 2048}), add_input(g, "w", DType::kF16, {2048, 256})});
  const FusionGroup fg = whole_graph_group(g);
  const planner::Device h200 = planner::find_device("h200");
  planner::TilingOptions all;
  all.top_k = 1 << 20;
  std::optional<planner::Candidate> split, unsplit;  // the best GEMV candidates of each kind
  for (const planner::Candidate& cand : planner::tile_candidates(g, fg, h200, all)) {
    if (!cand.config.gemv) continue;
    std::optional<planner::Candidate>& best = cand.config.split_k > 1 ? split : unsplit;
    if (!best || cand.cost.modeled_us < best->cost.modeled_us) best = cand;
  }
  ASSERT_TRUE(split && unsplit) << "no split GEMV candidate for a decode step's key projection";
  std::printf("key projection (h200): best GEMV %s %.2f us, split %s %.2f us (modeled)\n", unsplit->config.str().c_str(),
              unsplit->cost.modeled_us, split->config.str().c_str(), split->cost.modeled_us);
  EXPECT_LT(split->cost.modeled_us, unsplit->cost.modeled_us) << split->config.str();
}

// RMSNorm-like prologue (A computed in the group from a row statistic), bias and SiLU-like
// epilogue; and a B the group computes (a Transpose of an input): that MatMul keeps the scalar
// staged form (B staged in shared memory), the results match in both.
TEST(CodegenGemv, FusedProloguesAndEpiloguesAndAComputedB) {
  Graph g;
  const int x = add_input(g, "x", DType::kF32, {1, 2, 72});
  const int sq = add_op(g, "Mul", {x, x});
  const int mean = add_op(g, "ReduceMean", {sq}, fusetune::testing::attrs({{"axes", std::vector<int64_t>{-1}}}));
  const int norm = add_op(g, "Div", {x, add_op(g, "Sqrt", {mean})});
  const int y = add_op(g, "MatMul", {norm, add_input(g, "w", DType::kF32, {72, 40})});
  const int biased = add_op(g, "Add", {y, add_input(g, "bias", DType::kF32, {40})});
  add_op(g, "Mul", {biased, add_op(g, "Sigmoid", {biased})});
  const FusionGroup whole = whole_graph_group(g);
  for (int64_t width : {8, 16, 40}) {
    check_groups(g, {whole}, [&](const FusionGroup& fg) { return gemv(g, fg, width, 32, 64); },
                 "prologue and epilogue, width " + std::to_string(width));
  }
  const Kernel fused = lower_group(g, whole, gemv(g, whole, 16, 32, 64), "k").kernel;
  // 16 slices of 4 column vectors: a thread's 2 rows of a 32-row step, both guarded loads of the
  // batch before the first product.
  const std::string text = to_text(fused);
  const size_t second = text.find("let float4 ft_q1 = ");
  ASSERT_NE(second, std::string::npos) << text;
  EXPECT_NE(text.find(" ? in", second), std::string::npos) << "a guarded load: " << text;
  EXPECT_LT(text.find("let float4 ft_q0 = "), second);
  EXPECT_GT(text.find("ft_a0_0"), second) << "the batch's loads before its first product";
  EXPECT_TRUE(allocates(fused, "red") && !allocates(fused, "sb")) << to_text(fused);

  Graph t;
  const int bt = add_op(t, "Transpose", {add_input(t, "bt", DType::kF32, {24, 40})},
                        fusetune::testing::attrs({{"perm", std::vector<int64_t>{1, 0}}}));
  add_op(t, "MatMul", {add_input(t, "a", DType::kF32, {3, 40}), bt});
  const FusionGroup both = whole_graph_group(t);
  check_groups(t, {both}, [&](const FusionGroup& fg) { return gemv(t, fg, 8, 16, 64); }, "computed B");
  const Kernel scalar = lower_group(t, both, gemv(t, both, 8, 16, 64), "k").kernel;
  EXPECT_TRUE(allocates(scalar, "sb") && !allocates(scalar, "red")) << to_text(scalar);
}

// A decode step's RMSNorm over 2,048 features (LLaMA's hidden width, twice max_row) read by two
// projections: planned with the cost model, the norm joins the first projection's group (its one
// row recomputed by every block, the normalized row exported for the other), one launch less;
// without a cost function the rows exceed max_row and it stays apart. The plan's groups, with
// the planner's best candidates, match the reference under the host executor's checks.
TEST(CodegenGemv, ADecodeStepsNormJoinsItsProjectionPastMaxRow) {
  Graph g;
  const int64_t hidden = 2048;
  const int x = add_input(g, "x", DType::kF16, {1, 1, hidden});
  const int mean = add_op(g, "ReduceMean", {add_op(g, "Mul", {x, x})}, fusetune::testing::attrs({{"axes", std::vector<int64_t>{-1}}}));
  const int eps = g.add_constant("eps", Tensor::scalar_float(DType::kF16, 1e-5f));
  const int scaled = add_op(g, "Div", {x, add_op(g, "Sqrt", {add_op(g, "Add", {mean, eps})})});
  const int norm = add_op(g, "Mul", {scaled, fusetune::testing::random_constant(g, "gamma", DType::kF16, {hidden}, 11u)}, {}, "norm");
  g.outputs().push_back(add_op(g, "MatMul", {norm, fusetune::testing::random_constant(g, "wq", DType::kF16, {hidden, 256}, 12u)}));
  g.outputs().push_back(add_op(g, "MatMul", {norm, fusetune::testing::random_constant(g, "wk", DType::kF16, {hidden, 64}, 13u)}));
  const auto group_of_norm = [&](const std::vector<FusionGroup>& groups) -> const FusionGroup* {
    for (const FusionGroup& fg : groups) {
      for (int n : fg.nodes) {
        if (g.nodes()[static_cast<size_t>(n)].name == "norm") return &fg;
      }
    }
    return nullptr;
  };
  const planner::ModelPlan plan = planner::plan_model(g, planner::find_device("h200"));
  std::vector<FusionGroup> groups;
  for (const planner::GroupPlan& gp : plan.groups) groups.push_back(gp.group);
  const FusionGroup* joined = group_of_norm(groups);
  ASSERT_NE(joined, nullptr);
  EXPECT_EQ(joined->pattern.rfind("ReduceMean+MatMul", 0), 0u) << joined->pattern;
  EXPECT_EQ(plan.launches, 2);
  const FusionGroup* apart = group_of_norm(planner::fuse(g).groups);
  ASSERT_NE(apart, nullptr);
  EXPECT_EQ(apart->pattern.find("MatMul"), std::string::npos) << "joined without a cost function: " << apart->pattern;
  check_groups(g, groups, [&](const FusionGroup& fg) { return fusetune::testing::best_config(g, fg); },
               "a decode step's norm and projections");
}

// A decode step of a 4096 x 4096 float16 projection on an H100: the planner's best candidate is
// the GEMV form, modeled within 1.7x of the DRAM speed of light plus the launch; a staged tile of
// 16 columns (272 bytes a step in flight per block) is modeled latency-bound, far slower; the
// bound charges weights only where they stream from DRAM; and a GEMV candidate of a group
// without such a MatMul is rejected.
TEST(CodegenGemv, TheCostModelSeesLittlesLawInADecodeStep) {
  Graph g;
  add_op(g, "MatMul", {add_input(g, "x", DType::kF16, {1, 1, 4096}), add_input(g, "w", DType::kF16, {4096, 4096})});
  const FusionGroup fg = whole_graph_group(g);
  const planner::Device h100 = planner::find_device("h100");
  const auto candidates = planner::tile_candidates(g, fg, h100);
  ASSERT_FALSE(candidates.empty());
  EXPECT_TRUE(candidates.front().config.gemv) << candidates.front().config.str();
  const double sol_us = 4096.0 * 4096 * 2 / (h100.dram_bandwidth_gbps * 1e3);
  EXPECT_LT(candidates.front().cost.modeled_us, 1.7 * sol_us + 2.0) << candidates.front().config.str();
  EXPECT_GT(candidates.front().cost.bytes_in_flight, 4096) << candidates.front().config.str();
  const planner::Cost staged = planner::evaluate_tile(g, fg, h100, TileConfig{{1, 1, 16}, 8, 512, 4});
  ASSERT_TRUE(staged.valid) << staged.reject;
  EXPECT_LT(staged.bytes_in_flight, 512);
  EXPECT_GT(staged.modeled_us, 10 * candidates.front().cost.modeled_us);

  // Weights of 8 MB each stay in L2 alone (under half of its 50 MB); four of them do not, so each
  // streams from DRAM and the bound applies to the projection that reads one. Staged 64 of K a step
  // on one warp, 16 columns a block: 32 steps, each a latency waited (charged either way), and
  // about 440 bytes a block in flight, which Little's law charges only where the weight streams.
  std::vector<planner::Cost> small_tiles;
  for (int layers : {1, 4}) {
    Graph m;
    for (int l = 0; l < layers; ++l) {
      add_op(m, "MatMul", {add_input(m, "x" + std::to_string(l), DType::kF16, {1, 2048}),
                           fusetune::testing::random_constant(m, "w" + std::to_string(l), DType::kF16, {2048, 2048}, 7)});
    }
    const FusionGroup first = one_group_per_node(m).front();
    small_tiles.push_back(planner::evaluate_tile(m, first, h100, TileConfig{{1, 16}, 64, 32, 1}));
    ASSERT_TRUE(small_tiles.back().valid) << small_tiles.back().reject;
    if (layers == 4) {
      const double dram_us = static_cast<double>(small_tiles.back().dram_bytes) / (h100.dram_bandwidth_gbps * 1e3);
      EXPECT_GT(small_tiles.back().modeled_us, 20 * dram_us + 2.0) << "a streamed weight was not charged DRAM latency";
      // The best keeps kilobytes in flight a block: the GEMV form, or tensor cores' cp.async ring.
      const planner::Candidate best = planner::tile_candidates(m, first, h100).front();
      EXPECT_TRUE(best.config.gemv || best.config.mma) << best.config.str();
      EXPECT_GE(best.cost.bytes_in_flight, 4096) << best.config.str();
    }
  }
  EXPECT_LT(3 * small_tiles[0].modeled_us, small_tiles[1].modeled_us) << "an 8 MB weight alone was charged Little's law's DRAM latency";
  EXPECT_GE(small_tiles[0].modeled_us, 31 * h100.dram_latency_ns / 1e3) << "the steps' latencies not charged";

  Graph big;
  add_op(big, "MatMul", {add_input(big, "x", DType::kF16, {64, 512}), add_input(big, "w", DType::kF16, {512, 512})});
  TileConfig rows64{{64, 16}, 128, 64, 4};
  rows64.gemv = true;
  const planner::Cost rejected = planner::evaluate_tile(big, whole_graph_group(big), h100, rows64);
  EXPECT_FALSE(rejected.valid);
  EXPECT_NE(rejected.reject.find("GEMV form"), std::string::npos) << rejected.reject;
}

}  // namespace
}  // namespace fusetune::codegen
