// Deeper cp.async rings (TileConfig::ring_stages; planner/tiling.h's MmaStaging): a staged
// contraction whose operands stream through a ring (mma.sync, wgmma, the SIMT MatMul at vector
// width 4, the implicit-GEMM Conv) may hold more stages than its form's default, its steps ahead
// growing with them. Every form at every depth matches the reference under the host executor's
// checks (a wait for the wrong group or a missing barrier is a race they report), NVRTC compiles
// it, and the planner offers depths only where a ring copies asynchronously and charges their
// shared memory.
#include <gtest/gtest.h>

#include <array>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/verify.h"
#include "codegen/emit.h"
#include "codegen/lower_group.h"
#include "planner/device.h"
#include "planner/tiling.h"
#include "tests/unit/test_seed.h"
#include "unit/codegen_check.h"
#include "unit/graph_helpers.h"

namespace fusetune {
namespace {

using codegen::LoweredKernel;
using codegen::lower_group;
using planner::FusionGroup;
using planner::TileConfig;

TileConfig ring_deepened(TileConfig cfg, int stages) {
  cfg.ring_stages = stages;
  return cfg;
}

// MatMul chains with K long enough for more reduction steps than the deepest ring has stages, an
// odd K, and edge tiles.
fusetune::testing::GroupedGraph ring_long_chains(DType dtype) {
  fusetune::testing::GroupedGraph c;
  int id = 0;
  for (const auto& [m, k, n] : std::vector<std::array<int64_t, 3>>{{40, 200, 36}, {17, 333, 24}, {64, 256, 64}}) {
    c.groups.push_back(fusetune::testing::add_matmul_chain(c.g, dtype, {m, k}, {k, n}, id % 2 == 0 ? "Relu" : "Tanh", false, id));
    ++id;
  }
  return c;
}

int ring_barriers(codegen::Kernel k) { return fusetune::testing::drop_barrier(k.body, -1); }

TEST(RingStages, EveryFormAtEveryDepthMatchesTheReference) {
  TileConfig simt{{16, 16}, 16, 64, 4}, mma{{32, 32}, 16, 128, 1, true}, wgmma{{64, 32}, 16, 128, 1, true};
  wgmma.wgmma = true;
  struct Form {
    DType dtype;
    TileConfig base;
    std::vector<int> depths;
  };
  const std::vector<Form> forms = {{DType::kF32, simt, {4, 6}}, {DType::kF16, mma, {4, 5, 8}}, {DType::kBF16, wgmma, {5, 6}}};
  for (const Form& f : forms) {
    const auto c = ring_long_chains(f.dtype);
    for (int stages : f.depths) {
      for (int splits : {1, 3}) {
        TileConfig cfg = ring_deepened(f.base, stages);
        cfg.split_k = splits;
        fusetune::testing::check_groups(c.g, c.groups, [&](const FusionGroup&) { return cfg; },
                                        std::string(dtype_name(f.dtype)) + " chains/" + cfg.str(),
                                        {false, cfg.wgmma ? std::vector<std::string>{"sm_90"} : std::vector<std::string>{"sm_80"}});
      }
      // The text waits for all but the newest stages - 2 (wgmma stages - 3) groups of copies; the
      // ring's slots grow with the stages; one barrier a step whatever the depth.
      const int ahead = stages - (f.base.wgmma ? 2 : 1);
      const codegen::Kernel deep = lower_group(c.g, c.groups[0], ring_deepened(f.base, stages), "k").kernel;
      const codegen::Kernel shallow = lower_group(c.g, c.groups[0], f.base, "k").kernel;
      const std::string ir = codegen::to_text(deep);
      EXPECT_NE(ir.find("cp.async.wait_group " + std::to_string(ahead - 1)), std::string::npos) << f.base.str() << "\n" << ir;
      EXPECT_GT(deep.shared_bytes, shallow.shared_bytes) << f.base.str() << " stages " << stages;
      EXPECT_EQ(ring_barriers(deep), ring_barriers(shallow)) << f.base.str();
    }
  }
}

TEST(RingStages, ConvolutionRingsDeepenToo) {
  Graph g;
  fusetune::testing::conv_bias_relu(g, {1, 32, 9, 9}, {16, 32, 3, 3},
                                    fusetune::testing::attrs({{"pads", std::vector<int64_t>{1, 1, 1, 1}}}));
  const FusionGroup group = fusetune::testing::whole_graph_group(g);
  for (int stages : {4, 6}) {
    const TileConfig cfg = ring_deepened(TileConfig{{1, 8, 3, 9}, 16, 64, 4}, stages);
    fusetune::testing::check_groups(g, {group}, [&](const FusionGroup&) { return cfg; }, "Conv/" + cfg.str(),
                                    {false, {"sm_80"}});
    const std::string ir = codegen::to_text(lower_group(g, group, cfg, "k").kernel);
    EXPECT_NE(ir.find("cp.async.wait_group " + std::to_string(stages - 2)), std::string::npos) << ir;
  }
}

// The host executor models cp.async groups: in a deep ring, a wait for one group too few (the
// step's own copies still in flight) and each barrier deleted are reported by its checks.
TEST(RingStages, AWaitTooShortOrABarrierMissingFailsTheChecks) {
  const auto c = ring_long_chains(DType::kF16);
  const FusionGroup& group = c.groups[2];  // 64 x 256 x 64: 16 steps of 16
  const TileConfig cfg = ring_deepened(TileConfig{{32, 32}, 16, 128, 1, true}, 5);
  const LoweredKernel good = lower_group(c.g, group, cfg, "k");
  auto backend = backend::make_host_backend();
  std::mt19937 rng(fusetune::testing::test_seed());
  {
    auto m = backend->load({good.kernel});
    ASSERT_TRUE(backend::verify_kernel(c.g, group, good, *backend, *m, rng).ok);
  }
  // One group fewer waited for: the text's wait_group 3 becomes 4.
  LoweredKernel early = good;
  ASSERT_EQ(fusetune::testing::loosen_async_waits(early.kernel.body, 3), 1) << codegen::to_text(good.kernel);
  {
    auto m = backend->load({early.kernel});
    const backend::VerifyResult r = backend::verify_kernel(c.g, group, early, *backend, *m, rng);
    EXPECT_TRUE(!r.ok && r.check_failed) << "a wait one group short passed: " << r.detail;
  }
  LoweredKernel probe = good;
  const int n = fusetune::testing::drop_barrier(probe.kernel.body, -1);
  ASSERT_GE(n, 1);
  for (int i = 0; i < n; ++i) {
    LoweredKernel bad = good;
    fusetune::testing::drop_barrier(bad.kernel.body, i);
    auto m = backend->load({bad.kernel});
    const backend::VerifyResult r = backend::verify_kernel(c.g, group, bad, *backend, *m, rng);
    EXPECT_TRUE(!r.ok) << "barrier " << i << " of " << n << " deleted: " << r.detail;
  }
}

// The planner offers one and two stages more than each ring's default (mma.sync and SIMT 4 and 5,
// wgmma 5 and 6) where the model expects them to pay, each charged its slots' shared memory: for a
// product whose weights stream from DRAM (128 x 4096 by 4096 x 8192 in float16: 64 MB, over half
// the H100's L2), where Little's law charges the steps in flight, each keeps more bytes in flight
// than its default; where operands stay in L2 (the 64 x 256 x 64 chain), only for a candidate
// bound by its steps' latencies (a step waits 1/ahead of one), which a deeper ring shortens. A
// depth where no ring copies asynchronously, or out of range, is rejected.
TEST(RingStages, ThePlannerOffersDepthsWhereTheyPayAndOnlyWhereARingCopies) {
  const planner::Device& h100 = planner::find_device("h100");
  Graph big;
  const int a = fusetune::testing::add_input(big, "a", DType::kF16, {128, 4096});
  big.outputs() = {fusetune::testing::add_op(big, "MatMul", {a, fusetune::testing::add_input(big, "w", DType::kF16, {4096, 8192})})};
  const FusionGroup streamed = fusetune::testing::whole_graph_group(big);
  planner::TilingOptions all;
  all.top_k = 100000;
  std::set<int> depths_mma, depths_wgmma;
  for (const planner::Candidate& cand : planner::tile_candidates(big, streamed, h100, all)) {
    if (cand.config.ring_stages == 0) continue;
    (cand.config.wgmma ? depths_wgmma : depths_mma).insert(cand.config.ring_stages);
    TileConfig base = cand.config;
    base.ring_stages = 0;
    const planner::Cost shallow = planner::evaluate_tile(big, streamed, h100, base);
    ASSERT_TRUE(shallow.valid) << base.str();
    EXPECT_GT(cand.cost.smem_bytes, shallow.smem_bytes) << cand.config.str();
    EXPECT_GT(cand.cost.bytes_in_flight, shallow.bytes_in_flight) << cand.config.str();
    EXPECT_LT(cand.cost.modeled_us, shallow.modeled_us) << cand.config.str();
    EXPECT_NE(cand.config.str().find(" stages=" + std::to_string(cand.config.ring_stages)), std::string::npos);
  }
  EXPECT_EQ(depths_mma, (std::set<int>{4, 5}));
  EXPECT_EQ(depths_wgmma, (std::set<int>{5, 6}));
  const auto c = ring_long_chains(DType::kF16);
  const FusionGroup& group = c.groups[2];
  for (const planner::Candidate& cand : planner::tile_candidates(c.g, group, h100, all)) {
    if (cand.config.ring_stages == 0) continue;
    TileConfig base = cand.config;
    base.ring_stages = 0;
    const planner::Cost shallow = planner::evaluate_tile(c.g, group, h100, base);
    ASSERT_TRUE(shallow.valid) << base.str();
    EXPECT_TRUE(shallow.latency_bound) << cand.config.str() << ": operands in L2, a deeper ring offered off the latency bound";
    EXPECT_LT(cand.cost.modeled_us, shallow.modeled_us) << cand.config.str();
  }
  // Yet a depth is a valid candidate there (the tune may ask), charged its shared memory.
  const TileConfig mma{{32, 32}, 16, 128, 1, true};
  const planner::Cost deep = planner::evaluate_tile(c.g, group, h100, ring_deepened(mma, 5));
  ASSERT_TRUE(deep.valid) << deep.reject;
  EXPECT_GT(deep.smem_bytes, planner::evaluate_tile(c.g, group, h100, mma).smem_bytes);
  // No ring: a SIMT product staged without vectors; out of range: 2, 9, and a wgmma ring of 3.
  const planner::Cost plain = planner::evaluate_tile(c.g, group, h100, ring_deepened(TileConfig{{32, 32}, 16, 128, 1}, 4));
  EXPECT_FALSE(plain.valid);
  EXPECT_NE(plain.reject.find("no staged contraction of the candidate copies its operands through a cp.async ring"), std::string::npos)
      << plain.reject;
  for (int stages : {2, 9}) {
    const planner::Cost c2 = planner::evaluate_tile(c.g, group, h100, ring_deepened(mma, stages));
    EXPECT_FALSE(c2.valid) << stages;
    EXPECT_NE(c2.reject.find("a ring holds 3 to 8 stages"), std::string::npos) << c2.reject;
  }
  TileConfig wg = ring_deepened(TileConfig{{64, 64}, 16, 128, 1, true}, 3);
  wg.wgmma = true;
  EXPECT_FALSE(planner::evaluate_tile(c.g, group, h100, wg).valid);
}

}  // namespace
}  // namespace fusetune
