// The generic reduction's columns form (codegen/stages/reduce.h, planner::column_reduction): a sum,
// mean, maximum or minimum down the rows of its input (the output's innermost axis the input's)
// reads 32 consecutive outputs' elements a warp request, where the cooperative form's lanes each
// read a row of their own (a 32-byte sector a 4-byte element: memory_bound's ReduceMean moved its
// bytes at 22% of an H200's copy bandwidth). Counted on the host executor, against the reference
// under its checks; the cost model charges the cooperative form's row-apart requests.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/verify.h"
#include "codegen/lower_group.h"
#include "planner/device.h"
#include "planner/tiling.h"
#include "unit/graph_helpers.h"
#include "unit/test_seed.h"

namespace fusetune {
namespace {

using planner::TileConfig;

// `op` over `axes` of a float32 input of shape `x` (keepdims 0), as the graph's one node.
Graph column_reduction_graph(const std::string& op, const Shape& x, const std::vector<int64_t>& axes) {
  Graph g;
  g.outputs() = {testing::add_op(g, op, {testing::add_input(g, "x", DType::kF32, x)},
                                 testing::attrs({{"axes", axes}, {"keepdims", int64_t{0}}}))};
  return g;
}

TEST(ColumnReduction, TheFormTakesSumsDownTheRowsOfFloats) {
  const auto applies = [](const std::string& op, const Shape& x, const std::vector<int64_t>& axes, int64_t outputs, int threads) {
    const Graph g = column_reduction_graph(op, x, axes);
    return planner::column_reduction(g, g.nodes()[0], outputs, threads);
  };
  EXPECT_TRUE(applies("ReduceSum", {4, 100, 40}, {1}, 40, 128));
  EXPECT_TRUE(applies("ReduceMean", {100, 40}, {0}, 16, 64));
  EXPECT_TRUE(applies("ReduceMax", {2, 10, 10, 48}, {1, 2}, 48, 256));  // 100 rows an output over two axes
  EXPECT_FALSE(applies("ReduceSum", {4, 40, 100}, {2}, 40, 128));       // along the rows: cooperative
  EXPECT_FALSE(applies("ReduceSum", {4, 100, 40}, {1}, 8, 128));        // fewer than 16 outputs
  EXPECT_FALSE(applies("ReduceSum", {4, 40, 40}, {1}, 40, 128));        // 40 rows: below 64
  EXPECT_FALSE(applies("ReduceSum", {4, 100, 40}, {1}, 40, 32));        // one warp: nothing to share
  EXPECT_FALSE(applies("ReduceProd", {4, 100, 40}, {1}, 40, 128));
}

TEST(ColumnReduction, WarpsReadConsecutiveOutputsAndMatchTheReference) {
  const unsigned seed = testing::test_seed();
  for (const std::string op : {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin"}) {
    const Graph g = column_reduction_graph(op, {3, 100, 72}, {1});  // 3 x 72 outputs of 100 rows
    const planner::FusionGroup group = testing::whole_graph_group(g);
    // 72 outputs a tile (two whole batches of 32 and a partial one), 48 (edge tiles), 16.
    for (const TileConfig& cfg : {TileConfig{{1, 72}, 0, 128, 1}, TileConfig{{2, 24}, 0, 256, 1}, TileConfig{{1, 16}, 0, 64, 1}}) {
      const codegen::LoweredKernel lk = codegen::lower_group(g, group, cfg, "cols");
      auto backend = backend::make_host_backend();
      auto module = backend->load({lk.kernel});
      std::mt19937 rng(seed);
      ASSERT_TRUE(backend::verify_kernel(g, group, lk, *backend, *module, rng).ok) << op << " " << cfg.str() << " seed " << seed;
      const simt::Counters c = module->counters().at("cols");
      ASSERT_GT(c.global_load_requests, 0u);
      const double sectors = static_cast<double>(c.global_load_sectors) / static_cast<double>(c.global_load_requests);
      // 32 consecutive floats are 4 sectors (5 where they straddle one); a tile's row of 24 or 16
      // outputs fewer. A lane a row was 32.
      EXPECT_LE(sectors, 5.0) << op << " " << cfg.str() << ": 32-byte sectors a global load request";
      const planner::Cost modeled = planner::evaluate_tile(g, group, planner::find_device("h200"), cfg);
      ASSERT_TRUE(modeled.valid) << cfg.str() << ": " << modeled.reject;
    }
  }
}

// memory_bound's mean: a ReduceMean along the last axis of a Transpose the group inlines
// (p.transpose(1, 2).mean(-1)) reads down the columns of the Transpose's input: the form follows
// the read through the Transpose (the group's members given), so the warps read 16 consecutive
// outputs' elements a request (two sectors) where the lanes each read a row (32); without the
// members, the node's own access says along the rows. A tile of 8 outputs keeps the cooperative
// form, its lanes a row apart (charged so) through the Transpose, along the rows without it.
// Against the reference, under the checks.
TEST(ColumnReduction, TheFormFollowsTheReadThroughAnInlinedTranspose) {
  Graph g;
  const int t = testing::add_op(g, "Transpose", {testing::add_input(g, "p", DType::kF32, {2, 256, 64})},
                                testing::attrs({{"perm", std::vector<int64_t>{0, 2, 1}}}));
  g.outputs() = {testing::add_op(g, "ReduceMean", {t}, testing::attrs({{"axes", std::vector<int64_t>{-1}}, {"keepdims", int64_t{0}}}))};
  const planner::FusionGroup group = testing::whole_graph_group(g);
  const Node& mean = g.nodes()[1];
  EXPECT_TRUE(planner::reduction_form(g, mean, 16, 256, 1, &group.nodes).columns);
  EXPECT_FALSE(planner::reduction_form(g, mean, 16, 256, 1).columns);
  EXPECT_TRUE(planner::reduction_form(g, mean, 8, 256, 1, &group.nodes).row_apart);
  EXPECT_FALSE(planner::reduction_form(g, mean, 8, 256, 1).row_apart);
  const TileConfig cfg{{1, 16}, 0, 256, 1};
  const codegen::LoweredKernel lk = codegen::lower_group(g, group, cfg, "cols");
  auto backend = backend::make_host_backend();
  auto module = backend->load({lk.kernel});
  std::mt19937 rng(testing::test_seed());
  ASSERT_TRUE(backend::verify_kernel(g, group, lk, *backend, *module, rng).ok);
  const simt::Counters c = module->counters().at("cols");
  ASSERT_GT(c.global_load_requests, 0u);
  EXPECT_EQ(c.global_load_sectors, 2 * c.global_load_requests) << "32-byte sectors a global load request";
}

TEST(ColumnReduction, TheModelChargesACooperativeReductionItsRowApartRequests) {
  // 8 outputs a tile: the cooperative form (fewer than 16 outputs), its lanes a row apart; every
  // element's sector (32 bytes) requested from L2, at least.
  const Graph g = column_reduction_graph("ReduceSum", {4, 256, 64}, {1});
  const planner::FusionGroup group = testing::whole_graph_group(g);
  const TileConfig cfg{{1, 8}, 0, 256, 1};
  ASSERT_GT(planner::reduction_lanes(g, g.nodes()[0], 8, 256), 0);
  const planner::Cost c = planner::evaluate_tile(g, group, planner::find_device("h200"), cfg);
  ASSERT_TRUE(c.valid) << c.reject;
  EXPECT_GE(c.l2_bytes, int64_t{4} * 256 * 64 * 32);
}

}  // namespace
}  // namespace fusetune
