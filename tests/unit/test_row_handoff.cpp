// A normalization's row handed to the next one in registers (planner/held_rows.h,
// codegen/stages/row_stats.h): memory_bound's LayerNorm -> x 0.125 -> Softmax kept the normalized
// rows in a shared buffer (131 KB for its 32 rows a block: one block an SM, measured at 38% of an
// H200's copy bandwidth). Where both rows are held alike in one batch of the block's warps the
// softmax reads the layer norm's outputs from the registers that held its inputs: no shared
// buffer, and the cost model charges none. Differential: every form against the reference under
// the host executor's checks (and compiled by NVRTC); the cases that must keep the buffer keep it.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "codegen/lower_group.h"
#include "planner/device.h"
#include "planner/held_rows.h"
#include "planner/tiling.h"
#include "unit/codegen_check.h"
#include "unit/graph_helpers.h"

namespace fusetune {
namespace {

using planner::TileConfig;

// x + r -> LayerNormalization over `ln_axis` -> x 0.125 -> Softmax over the last axis, the group of
// them all; the layer norm's value exported too where `export_norm`, the product exported where
// `export_scaled`, and the softmax added to the normalized rows (a second reader) where
// `second_reader`.
struct HandoffCase {
  Graph g;
  planner::FusionGroup group;
  int norm = -1;  // the layer norm's node
};

HandoffCase handoff_case(DType dt, const Shape& x, int64_t ln_axis, bool export_norm = false, bool export_scaled = false,
                         bool second_reader = false) {
  HandoffCase c;
  Graph& g = c.g;
  Shape scale_shape(x.begin() + ln_axis, x.end());
  const int sum = testing::add_op(g, "Add", {testing::add_input(g, "x", dt, x), testing::add_input(g, "r", dt, x)});
  const int norm = testing::add_op(g, "LayerNormalization",
                                   {sum, testing::random_constant(g, "gamma", dt, scale_shape, 3u),
                                    testing::random_constant(g, "beta", dt, scale_shape, 4u)},
                                   testing::attrs({{"axis", ln_axis}, {"epsilon", 1e-5f}}));
  c.norm = static_cast<int>(g.nodes().size()) - 1;
  const int scaled = testing::add_op(g, "Mul", {norm, testing::random_constant(g, "eighth", dt, {1}, 5u)});
  int out = testing::add_op(g, "Softmax", {scaled}, testing::attrs({{"axis", int64_t{-1}}}));
  if (second_reader) out = testing::add_op(g, "Add", {out, norm});
  g.outputs() = {out};
  c.group = testing::whole_graph_group(g);
  if (export_norm) c.group.outputs.insert(c.group.outputs.begin(), norm);
  if (export_scaled) c.group.outputs.insert(c.group.outputs.begin(), scaled);
  return c;
}

bool has_shared(const codegen::Kernel& k, const std::string& name) {
  return std::any_of(k.shared.begin(), k.shared.end(), [&](const codegen::SharedAlloc& a) { return a.name == name; });
}

// Lowers the case at `cfg`, checks it against the reference, and returns whether the layer norm's
// value kept a shared buffer; the cost model must agree on whether it charges one.
bool keeps_buffer(const HandoffCase& c, const TileConfig& cfg, const std::string& label) {
  const codegen::LoweredKernel lk = codegen::lower_group(c.g, c.group, cfg, "k");
  const std::string buffer = "b" + std::to_string(c.g.nodes()[static_cast<size_t>(c.norm)].outputs[0]);
  const bool kept = has_shared(lk.kernel, buffer);
  testing::check_groups(c.g, {c.group}, [&](const planner::FusionGroup&) { return cfg; }, label + " " + cfg.str());
  const planner::Cost modeled = planner::evaluate_tile(c.g, c.group, planner::find_device("h200"), cfg);
  EXPECT_TRUE(modeled.valid) << label << " " << cfg.str() << ": " << modeled.reject;
  int64_t row_bytes = 1;
  for (size_t d = 0; d < cfg.tile.size(); ++d) row_bytes *= cfg.tile[d];
  row_bytes *= 4;
  // The buffer is a tile of floats; what else the block keeps (statistics, partials) is smaller.
  EXPECT_EQ(modeled.smem_bytes >= row_bytes, kept)
      << label << " " << cfg.str() << ": modeled " << modeled.smem_bytes << " bytes of shared memory, kernel "
      << lk.kernel.shared_bytes << (kept ? " with" : " without") << " the row buffer\n" << to_text(lk.kernel);
  return kept;
}

TEST(RowHandoff, TheSoftmaxReadsTheLayerNormsRowFromItsRegisters) {
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16}) {
    const std::string label(dtype_name(dt));
    for (const bool export_norm : {false, true}) {
      const HandoffCase c = handoff_case(dt, {2, 6, 1024}, 2, export_norm);
      // One row on 4 warps; 4 rows a warp each (the last tile of each image 2 rows); 2 rows on 4
      // warps, 2 a row; 4 rows over both images.
      for (const TileConfig& cfg : {TileConfig{{1, 1, 1024}, 0, 128, 1}, TileConfig{{1, 4, 1024}, 0, 128, 1},
                                    TileConfig{{1, 2, 1024}, 0, 128, 1}, TileConfig{{2, 2, 1024}, 0, 128, 1}}) {
        EXPECT_FALSE(keeps_buffer(c, cfg, label + (export_norm ? ", norm exported" : ""))) << label << " " << cfg.str();
      }
    }
  }
  // The structural pairing, apart from the tiles.
  const HandoffCase c = handoff_case(DType::kF32, {2, 6, 1024}, 2);
  EXPECT_EQ(planner::row_consumer(c.g, c.group, c.norm), static_cast<int>(c.g.nodes().size()) - 1);
}

TEST(RowHandoff, TheBufferStaysWhereTheRowsCannotPass) {
  // Six rows on four warps: two batches, and registers hold only the last one's rows.
  EXPECT_TRUE(keeps_buffer(handoff_case(DType::kF32, {2, 6, 1024}, 2), TileConfig{{1, 6, 1024}, 0, 128, 1}, "two batches"));
  // The normalized rows also read by the final Add, which a register cannot give.
  const HandoffCase read_twice = handoff_case(DType::kF32, {2, 6, 1024}, 2, false, false, true);
  EXPECT_EQ(planner::row_consumer(read_twice.g, read_twice.group, read_twice.norm), -1);
  EXPECT_TRUE(keeps_buffer(read_twice, TileConfig{{1, 2, 1024}, 0, 128, 1}, "second reader"));
  // The product between them exported: its element stage reads the normalized rows afterwards.
  const HandoffCase exported = handoff_case(DType::kF32, {2, 6, 1024}, 2, false, true);
  EXPECT_EQ(planner::row_consumer(exported.g, exported.group, exported.norm), -1);
  EXPECT_TRUE(keeps_buffer(exported, TileConfig{{1, 2, 1024}, 0, 128, 1}, "product exported"));
  // Layer norm over the last two axes, softmax over the last: rows of other lengths.
  const HandoffCase two_axes = handoff_case(DType::kF32, {2, 4, 256}, 1);
  EXPECT_TRUE(keeps_buffer(two_axes, TileConfig{{1, 4, 256}, 0, 128, 1}, "layer norm over two axes"));
}

}  // namespace
}  // namespace fusetune
