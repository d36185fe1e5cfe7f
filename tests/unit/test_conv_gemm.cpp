// The implicit-GEMM Conv (codegen/stages/conv_gemm.h) as the GPU runs it, counted on the host
// executor: its micro-tiles read shared memory without bank conflicts (interleaved rows over weight
// rows an odd number of floats apart, planner::conv_pitch_a), its patch slices are staged a pixel a
// lane (coalesced loads), and the cost model charges the arithmetic a block runs where a tile of a
// flattened image straddles rows (planner::evaluate_tile's widest tile). On an H200 ResNet-50's
// 3 x 3 convolutions ran 20x to 24x their modeled time for both reasons
// (bench/results/2026-12-04-h200-180c1d2); every kernel here also matches the reference under the
// executor's checks.
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

// A 3 x 3 convolution (padding 1) of a [1, c, hw, hw] image to c channels, a bias and a Relu,
// optionally flattened to [1, c, hw x hw] (a pointwise convolution's operand after it).
Graph conv_gemm_graph(int64_t c, int64_t hw, bool flattened) {
  Graph g;
  testing::conv_bias_relu(g, {1, c, hw, hw}, {c, c, 3, 3},
                          testing::attrs({{"pads", std::vector<int64_t>{1, 1, 1, 1}},
                                          {"kernel_shape", std::vector<int64_t>{3, 3}}}));
  if (flattened) {
    Attributes flat;
    flat.set("shape", std::vector<int64_t>{1, c, hw * hw});
    g.outputs() = {testing::add_op(g, "Reshape", {g.outputs()[0]}, flat)};
  }
  return g;
}

// The group lowered with cfg, verified on the host executor (its checks on): what it counted.
simt::Counters conv_gemm_counted(const Graph& g, const planner::FusionGroup& group, const TileConfig& cfg) {
  const codegen::LoweredKernel lk = codegen::lower_group(g, group, cfg, "conv");
  auto backend = backend::make_host_backend();
  auto module = backend->load({lk.kernel});
  const unsigned seed = testing::test_seed();
  std::mt19937 rng(seed);
  EXPECT_TRUE(backend::verify_kernel(g, group, lk, *backend, *module, rng).ok) << cfg.str() << " seed " << seed;
  return module->counters().at("conv");
}

TEST(ConvGemm, MicroTilesReadWithoutBankConflictsAndPatchesCoalesce) {
  const Graph g = conv_gemm_graph(32, 14, false);
  const planner::FusionGroup group = testing::whole_graph_group(g);
  // Threads staging (no ring), with split-K, and the cp.async ring (vector width 4).
  for (TileConfig cfg : {TileConfig{{1, 32, 2, 14}, 32, 128, 1}, TileConfig{{1, 16, 14, 14}, 16, 128, 1},
                         TileConfig{{1, 32, 2, 14}, 32, 128, 4}}) {
    if (cfg.tile[1] == 16) cfg.split_k = 2;
    const simt::Counters c = conv_gemm_counted(g, group, cfg);
    ASSERT_GT(c.shared_load_requests, 0u) << cfg.str();
    const double wavefronts = static_cast<double>(c.shared_load_wavefronts) / static_cast<double>(c.shared_load_requests);
    // The ring's weight rows are 16-byte aligned (pitch step + 4): up to 8 row lanes a warp in
    // distinct banks; 16 of them two-way.
    EXPECT_LE(wavefronts, cfg.vector == 4 ? 2.0 : 1.05) << cfg.str() << ": shared-memory wavefronts a request";
    if (cfg.vector == 1) {
      // A warp's patch loads: 32 consecutive pixels of 14-wide rows (at most three rows, 4-byte
      // elements: 5 or 6 sectors); element by element they spread over K rows as well (8 to 13).
      const double sectors = static_cast<double>(c.global_load_sectors) / static_cast<double>(c.global_load_requests);
      EXPECT_LT(sectors, 6.5) << cfg.str() << ": 32-byte sectors a global load request";
    }
  }
}

TEST(ConvGemm, TheModelChargesTheArithmeticOfTheWidestTile) {
  // 12-wide rows, flattened: a tile of 8 pixels straddles two rows every third tile, and codegen
  // runs every tile's micro-tiles over the widest region (2 rows x 12 pixels); a tile of 12 is one
  // row. Counted on the host against evaluate_tile's arithmetic for the same candidate.
  const Graph g = conv_gemm_graph(16, 12, true);
  const planner::FusionGroup group = testing::whole_graph_group(g);
  const int64_t exact = 2 * 16 * 144 * 16 * 9;  // the convolution's multiply-adds, twice
  for (const int64_t pixels : {8, 12}) {
    const TileConfig cfg{{1, 16, pixels}, 16, 64, 1};
    const simt::Counters c = conv_gemm_counted(g, group, cfg);
    const planner::Cost modeled = planner::evaluate_tile(g, group, planner::find_device("h200"), cfg);
    ASSERT_TRUE(modeled.valid) << cfg.str() << ": " << modeled.reject;
    const double counted = static_cast<double>(c.flops), charged = static_cast<double>(modeled.flops);
    EXPECT_NEAR(counted / charged, 1.0, 0.05) << cfg.str() << ": counted " << c.flops << ", modeled " << modeled.flops;
    if (pixels == 8) {
      EXPECT_GT(counted, 2.5 * exact) << "the straddling tiles' rows: the waste the model charges";
    } else {
      EXPECT_LT(counted, 1.05 * exact) << "a row a tile computes what the convolution needs";
    }
  }
}

}  // namespace
}  // namespace fusetune
