// Split-K (codegen/stages/split_k.h): a tile's reduction steps split over several blocks, the
// last of which sums their partial products. MatMul chains in every staged form (register-blocked
// float32, mma.sync float16, wgmma bfloat16) with 2 to 5 splits, splits that do not divide the
// steps and a tile's splits running more steps than K has, run on the host backend against the
// reference, each kernel launched twice on the same module (the tile counters must be zero again
// after a launch); every link of the chain by which blocks hand over their partial products
// (fence, barrier, atomic; barrier, fence; the counter's reset) deleted in turn is caught; the
// CUDA text compiles with the atomics and the L1-bypassing loads in its PTX; the planner offers
// split-K where a MatMul's tiles leave SMs idle and models it faster there, and nowhere else.
// Convolutions staged as implicit GEMMs split likewise (pointwise, strided and padded, grouped).
#include <gtest/gtest.h>

#include <array>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/nvrtc.h"
#include "backend/verify.h"
#include "codegen/emit.h"
#include "codegen/lower_group.h"
#include "codegen/verify_ir.h"
#include "core/error.h"
#include "planner/device.h"
#include "planner/fusion.h"
#include "planner/select.h"
#include "planner/tiling.h"
#include "unit/codegen_check.h"
#include "unit/graph_helpers.h"
#include "unit/test_seed.h"

namespace fusetune::codegen {
namespace {

using planner::FusionGroup;
using planner::TileConfig;

fusetune::testing::GroupedGraph skinny_chains(DType dtype) {
  fusetune::testing::GroupedGraph c;
  int id = 0;
  for (const auto& [m, k, n] : std::vector<std::array<int64_t, 3>>{{24, 300, 40}, {64, 512, 64}, {7, 1000, 17}}) {
    c.groups.push_back(fusetune::testing::add_matmul_chain(c.g, dtype, {m, k}, {k, n}, id % 2 == 0 ? "Relu" : "Tanh", false, id));
    ++id;
  }
  return c;
}

TileConfig split(TileConfig cfg, int splits) {
  cfg.split_k = splits;
  return cfg;
}

TEST(SplitK, ChainsMatchTheReferenceInEveryStagedForm) {
  TileConfig scalar{{32, 32}, 16, 64, 1}, mma{{32, 32}, 16, 128, 1, true}, wgmma{{64, 64}, 32, 128, 1, true};
  wgmma.wgmma = true;
  const std::vector<std::pair<DType, TileConfig>> forms = {{DType::kF32, scalar}, {DType::kF16, mma}, {DType::kBF16, wgmma}};
  for (const auto& [dtype, base] : forms) {
    const auto c = skinny_chains(dtype);
    for (int splits : {2, 3, 5}) {
      const TileConfig cfg = split(base, splits);
      fusetune::testing::check_groups(c.g, c.groups, [&](const FusionGroup&) { return cfg; },
                                      std::string(dtype_name(dtype)) + " chains/" + cfg.str(),
                                      {false, cfg.wgmma ? std::vector<std::string>{"sm_90"} : std::vector<std::string>{"sm_80"}});
      // The grid is the tiles' splits; the kernel declares its counters and partial products.
      const LoweredKernel lk = lower_group(c.g, c.groups[1], cfg, "k");
      ASSERT_EQ(lk.kernel.scratch.size(), 2u);
      EXPECT_EQ(lk.kernel.grid, lk.kernel.scratch[0].elements * splits);
      EXPECT_EQ(lk.kernel.grid, 4 * splits / (cfg.wgmma ? 4 : 1));  // 64 x 64 in 32 x 32 tiles, or one 64 x 64
    }
  }
}

// Convolutions staged as implicit GEMMs, split: a pointwise one (EfficientNet's 672 -> 192 at
// 7 x 7, narrowed), a strided 3 x 3 one with padding whose tiles end past the image, and a grouped
// one (two groups of 6 input channels), each with its bias and a Relu, 2 and 3 splits of steps
// that do not divide K.
TEST(SplitK, ConvolutionsMatchTheReference) {
  using fusetune::testing::attrs;
  struct Case {
    const char* what;
    Shape x, w;
    Attributes a;
    TileConfig cfg;
  };
  const std::vector<Case> cases = {
      {"pointwise", {1, 72, 7, 7}, {24, 72, 1, 1}, {}, {{1, 8, 1, 7}, 16, 64, 1}},
      {"strided 3x3, padded",
       {1, 12, 9, 9},
       {16, 12, 3, 3},
       attrs({{"strides", std::vector<int64_t>{2, 2}}, {"pads", std::vector<int64_t>{1, 1, 1, 1}}}),
       {{1, 8, 2, 4}, 16, 64, 1}},
      {"grouped", {1, 12, 6, 6}, {16, 6, 3, 3}, attrs({{"group", int64_t{2}}, {"pads", std::vector<int64_t>{1, 1, 1, 1}}}),
       {{1, 8, 3, 6}, 8, 64, 1}}};
  for (const Case& c : cases) {
    Graph g;
    fusetune::testing::conv_bias_relu(g, c.x, c.w, c.a);
    const FusionGroup group = fusetune::testing::whole_graph_group(g);
    for (int splits : {2, 3}) {
      const TileConfig cfg = split(c.cfg, splits);
      const planner::Cost cost = planner::evaluate_tile(g, group, planner::find_device("h100"), cfg);
      ASSERT_TRUE(cost.valid) << c.what << " " << cfg.str() << ": " << cost.reject;
      fusetune::testing::check_groups(g, {group}, [&](const FusionGroup&) { return cfg; },
                                      std::string("Conv ") + c.what + "/" + cfg.str(), {false, {"sm_80"}});
      const LoweredKernel lk = lower_group(g, group, cfg, "k");
      ASSERT_EQ(lk.kernel.scratch.size(), 2u) << c.what;
      EXPECT_EQ(lk.kernel.grid, lk.kernel.scratch[0].elements * splits) << c.what;
      EXPECT_EQ(lk.kernel.grid, cost.tiles) << c.what;
    }
  }
}

// A sampled launch (verification of a large grid on the host) runs whole tiles: all the blocks of
// each tile it samples, so every sampled tile is written, and the counters are zero afterwards.
TEST(SplitK, ASampledLaunchRunsEveryBlockOfTheTilesItSamples) {
  fusetune::testing::GroupedGraph c;
  c.groups.push_back(fusetune::testing::add_matmul_chain(c.g, DType::kF16, {200, 96}, {96, 72}, "Relu", false, 0));
  const LoweredKernel lk = lower_group(c.g, c.groups[0], split(TileConfig{{16, 16}, 16, 32, 1, true}, 3), "k");
  ASSERT_EQ(lk.kernel.grid, 13 * 5 * 3);
  auto backend = backend::make_host_backend();
  auto module = backend->load({lk.kernel});
  std::mt19937 rng(fusetune::testing::test_seed());
  for (uint64_t draw = 1; draw <= 3; ++draw) {
    backend::VerifyOptions sampled;
    sampled.sample_blocks = 8;
    sampled.seed = draw;
    const backend::VerifyResult r = backend::verify_kernel(c.g, c.groups[0], lk, *backend, *module, rng, sampled);
    EXPECT_TRUE(r.ok) << r.detail;
    EXPECT_FALSE(r.coverage.whole());
    EXPECT_EQ(r.coverage.blocks % 3, 0) << r.coverage.blocks << " blocks: not whole tiles";
    EXPECT_GE(r.compared, 16 * 16) << "a sampled tile was not written";
  }
  const backend::VerifyResult whole = backend::verify_kernel(c.g, c.groups[0], lk, *backend, *module, rng);
  EXPECT_TRUE(whole.ok) << "after sampled launches: " << whole.detail;
}

// Split-K kernels packed into one launch (a decode step's K and V projections): each part has its
// own counters and partial products, named by its prefix, its counters counting its own range of
// blocks; here a part split 4 ways, an unsplit one and one split 3 ways, on every block twice (the
// counters zero again after a launch), then sampled: every sampled block's part runs whole tiles.
TEST(SplitK, PackedPartsEachCountTheirOwnTiles) {
  const auto c = skinny_chains(DType::kF16);
  const TileConfig mma{{32, 32}, 16, 128, 1, true};
  const std::vector<int> splits = {4, 1, 3};
  std::vector<LoweredKernel> parts;
  FusionGroup all;
  int64_t base = 0;
  std::vector<int64_t> bases;
  for (size_t k = 0; k < c.groups.size(); ++k) {
    bases.push_back(base);
    parts.push_back(lower_group(c.g, c.groups[k], split(mma, splits[k]), "packed", {"p" + std::to_string(k) + "_", base}));
    base += parts.back().kernel.grid;
    all.nodes.insert(all.nodes.end(), c.groups[k].nodes.begin(), c.groups[k].nodes.end());
  }
  planner::describe_group(c.g, all);
  const LoweredKernel packed = pack_kernels(parts, "packed");
  ASSERT_EQ(packed.kernel.scratch.size(), 4u);
  for (size_t k : {size_t{0}, size_t{2}}) {
    const Param& counters = packed.kernel.scratch[k == 0 ? 0 : 2];
    EXPECT_EQ(counters.name, "p" + std::to_string(k) + "_ft_flags");
    EXPECT_EQ(counters.first_block, bases[k]);
    EXPECT_EQ(counters.group_blocks, splits[k]);
    EXPECT_EQ(counters.elements * splits[k], parts[k].kernel.grid);
  }
  auto backend = backend::make_host_backend();
  auto module = backend->load({packed.kernel});
  std::mt19937 rng(fusetune::testing::test_seed());
  for (int launch = 0; launch < 2; ++launch) {
    const backend::VerifyResult r = backend::verify_kernel(c.g, all, packed, *backend, *module, rng);
    EXPECT_TRUE(r.ok) << "launch " << launch << ": " << r.detail;
  }
  for (uint64_t draw = 1; draw <= 4; ++draw) {
    backend::VerifyOptions sampled;
    sampled.sample_blocks = 10;  // the first and last tiles (7 blocks), then tiles drawn until 10 or more
    sampled.seed = draw;
    const backend::VerifyResult r = backend::verify_kernel(c.g, all, packed, *backend, *module, rng, sampled);
    EXPECT_TRUE(r.ok) << "draw " << draw << ": " << r.detail;  // a tile run in part would hang its counter or lose a slice
    EXPECT_FALSE(r.coverage.whole());
    EXPECT_GE(r.coverage.blocks, 10);
  }
  const backend::VerifyResult whole = backend::verify_kernel(c.g, all, packed, *backend, *module, rng);
  EXPECT_TRUE(whole.ok) << "after sampled launches: " << whole.detail;
  // Counters over a range past the grid, or two buffers counting the same blocks, are refused.
  Kernel beyond = packed.kernel;
  beyond.scratch[2].first_block = beyond.grid - 1;
  EXPECT_THROW(verify_ir(beyond), Error);
  for (int64_t first : {0, 1}) {
    Kernel twice = packed.kernel;
    twice.scratch[2].first_block = first;
    EXPECT_THROW(verify_ir(twice), Error) << "counters from block " << first;
  }
  if (backend::nvrtc_available()) {
    EXPECT_FALSE(backend::compile_cuda(emit_cuda({packed.kernel}), "sm_80").cubin.empty());
  }
}

// The top-level statements of the split-K hand-over, in order: [0] the writers' fence, [1] the
// barrier before the atomic, [2] the branch with the atomic, [3] the barrier after it, [4] the
// readers' fence, [5] the branch with the counter's reset.
std::vector<size_t> hand_over(const Kernel& k) {
  const auto atomic_branch = [](const Stmt& s) {
    return s.kind == Stmt::Kind::kIf && !s.body.empty() && s.body[0].kind == Stmt::Kind::kAtomic;
  };
  const std::vector<std::function<bool(const Stmt&)>> expected = {
      [](const Stmt& s) { return s.kind == Stmt::Kind::kFence; }, [](const Stmt& s) { return s.kind == Stmt::Kind::kBarrier; },
      atomic_branch, [](const Stmt& s) { return s.kind == Stmt::Kind::kBarrier; },
      [](const Stmt& s) { return s.kind == Stmt::Kind::kFence; }, atomic_branch};
  std::vector<size_t> at;
  size_t i = 0;
  while (i < k.body.size() && !(k.body[i].kind == Stmt::Kind::kComment && k.body[i].a.rfind("split-K", 0) == 0)) ++i;
  for (; i < k.body.size() && at.size() < expected.size(); ++i) {
    if (expected[at.size()](k.body[i])) at.push_back(i);
  }
  return at;
}

TEST(SplitK, EveryLinkOfTheHandOverDeletedIsCaught) {
  const auto c = skinny_chains(DType::kF16);
  const FusionGroup& fg = c.groups[0];  // 24 x 300 by 300 x 40
  const TileConfig cfg = split(TileConfig{{32, 32}, 16, 128, 1, true}, 4);
  const LoweredKernel original = lower_group(c.g, fg, cfg, "k");
  const std::vector<size_t> links = hand_over(original.kernel);
  ASSERT_EQ(links.size(), 6u) << to_text(original.kernel);
  const char* names[] = {"the writers' fence", "the barrier before the atomic", "the arrival's atomic",
                         "the barrier after the atomic", "the readers' fence", "the counter's reset"};
  auto backend = backend::make_host_backend();
  const unsigned seed = fusetune::testing::test_seed();
  for (size_t d = 0; d < links.size(); ++d) {
    LoweredKernel lk = original;
    if (d == 2) {
      lk.kernel.body[links[d]].body.erase(lk.kernel.body[links[d]].body.begin());  // the atomic; its flag store stays
      lk.kernel.body[links[d]].body[0].b = "1.0f";  // every block believes it is the last
    } else {
      lk.kernel.body.erase(lk.kernel.body.begin() + static_cast<long>(links[d]));
    }
    auto module = backend->load({lk.kernel});
    std::mt19937 rng(seed);
    bool caught = false;
    std::string detail;
    for (int launch = 0; launch < 2 && !caught; ++launch) {  // the reset's absence shows in the second launch
      const backend::VerifyResult r = backend::verify_kernel(c.g, fg, lk, *backend, *module, rng);
      caught = !r.ok;
      detail = r.detail;
    }
    EXPECT_TRUE(caught) << "deleting " << names[d] << " went unnoticed (seed " << seed << ")";
    std::printf("deleted %s: %s\n", names[d], detail.substr(0, 200).c_str());
  }
}

// The hand-over in PTX: the arrival and reset atomics, the fences, the last block's loads past L1,
// and each thread's partial products stored four floats in one 16-byte store.
TEST(SplitK, TheCudaTextIssuesAtomicsFencesAndL1BypassingLoads) {
  if (!backend::nvrtc_available()) GTEST_SKIP() << "NVRTC not available in this build";
  const auto c = skinny_chains(DType::kF16);
  const LoweredKernel lk = lower_group(c.g, c.groups[1], split(TileConfig{{32, 32}, 16, 128, 1, true}, 4), "k");
  const std::string ptx = backend::compile_ptx(emit_cuda({lk.kernel}), "sm_90");
  EXPECT_NE(ptx.find("atom.global.add.u32"), std::string::npos);
  EXPECT_NE(ptx.find("atom.global.exch.b32"), std::string::npos);
  EXPECT_NE(ptx.find("membar.gl"), std::string::npos) << "__threadfence() is membar.gl in PTX";
  EXPECT_NE(ptx.find("st.global.v4.f32"), std::string::npos) << "a thread's partial products four in a 16-byte store";
  EXPECT_NE(ptx.find("ld.global.cg.v4.f32"), std::string::npos) << "and read back four in a 16-byte load past L1";
  for (const char* through_l1 : {"ld.global.f32", "ld.global.v4.f32", "ld.global.nc.v4.f32"}) {
    EXPECT_EQ(ptx.find(through_l1), std::string::npos) << "a partial product read by " << through_l1;
  }
}

// A MatMul + bias + Relu of float16, m x k times k x n, as one group.
fusetune::testing::GroupedGraph projection(int64_t m, int64_t k, int64_t n) {
  fusetune::testing::GroupedGraph c;
  c.groups.push_back(fusetune::testing::add_matmul_chain(c.g, DType::kF16, {m, k}, {k, n}, "Relu", false, 0));
  return c;
}

TEST(SplitKPlanner, SkinnyProjectionsGetSplitCandidatesThatModelFasterAndLargeOnesNone) {
  const planner::Device h100 = planner::find_device("h100");
  planner::TilingOptions all{100000, 2.0};
  all.library_algorithms = 0;
  // BERT-base's FFN down-projection at sequence 128: 128 x 768 outputs, K = 3072.
  const auto skinny = projection(128, 3072, 768);
  const auto cands = planner::tile_candidates(skinny.g, skinny.groups[0], h100, all);
  ASSERT_FALSE(cands.empty());
  EXPECT_GT(cands.front().config.split_k, 1) << "best: " << cands.front().config.str();
  double best_unsplit = 0;
  for (const auto& cand : cands) {
    if (cand.config.split_k == 1 && best_unsplit == 0) best_unsplit = cand.cost.modeled_us;
    if (cand.config.split_k == 1) continue;
    EXPECT_NE(cand.config.str().find(" splitk=" + std::to_string(cand.config.split_k)), std::string::npos);
    EXPECT_LE(cand.cost.tiles, 2 * h100.sms) << cand.config.str();
  }
  ASSERT_GT(best_unsplit, 0);
  EXPECT_LT(cands.front().cost.modeled_us, best_unsplit);
  std::printf("128 x 768 x 3072 float16 on the H100, modeled: best %s %.2f us, best unsplit %.2f us\n",
              cands.front().config.str().c_str(), cands.front().cost.modeled_us, best_unsplit);
  // The best split candidate lowers to the grid the model charged, and compiles without spills.
  const LoweredKernel lk = lower_group(skinny.g, skinny.groups[0], cands.front().config, "k");
  EXPECT_EQ(lk.kernel.grid, cands.front().cost.tiles);
  fusetune::testing::check_groups(skinny.g, skinny.groups, [&](const FusionGroup&) { return cands.front().config; },
                                  "best split-K " + cands.front().config.str(),
                                  {true, cands.front().config.wgmma ? std::vector<std::string>{"sm_90"} : std::vector<std::string>{"sm_90"}});
  // A 1x1 convolution of few tiles and a deep reduction (EfficientNet-B0's 672 -> 192 at 7 x 7):
  // its best candidate splits, and the blocks' chains of staging rounds shorten.
  Graph conv;
  fusetune::testing::add_op(conv, "Conv", {fusetune::testing::add_input(conv, "x", DType::kF32, {1, 672, 7, 7}),
                                           fusetune::testing::random_constant(conv, "w", DType::kF32, {192, 672, 1, 1}, 5u)});
  conv.outputs().push_back(conv.nodes().back().outputs[0]);
  const auto conv_cands = planner::tile_candidates(conv, fusetune::testing::whole_graph_group(conv), h100, all);
  ASSERT_FALSE(conv_cands.empty());
  EXPECT_GT(conv_cands.front().config.split_k, 1) << "best: " << conv_cands.front().config.str();
  for (const auto& cand : conv_cands) {
    if (cand.config.split_k > 1) continue;
    EXPECT_LT(conv_cands.front().cost.modeled_us, cand.cost.modeled_us) << cand.config.str();
    std::printf("672 -> 192 1x1 convolution at 7 x 7 on the H100, modeled: best %s %.2f us, best unsplit %s %.2f us\n",
                conv_cands.front().config.str().c_str(), conv_cands.front().cost.modeled_us, cand.config.str().c_str(),
                cand.cost.modeled_us);
    break;
  }
  // A projection that fills the device has none.
  const auto large = projection(2048, 1024, 4096);
  for (const auto& cand : planner::tile_candidates(large.g, large.groups[0], h100, all)) {
    EXPECT_EQ(cand.config.split_k, 1) << cand.config.str();
  }
  // A group with another anchor (a Softmax after the product) cannot split.
  TileConfig cfg{{32, 32}, 16, 128, 1, true};
  cfg.split_k = 2;
  Graph g;
  int x = fusetune::testing::add_op(g, "MatMul", {fusetune::testing::add_input(g, "a", DType::kF16, {32, 256}),
                                                  fusetune::testing::random_constant(g, "w", DType::kF16, {256, 32}, 3u)});
  fusetune::testing::add_op(g, "Softmax", {x});
  const planner::Cost rejected = planner::evaluate_tile(g, fusetune::testing::whole_graph_group(g), h100, cfg);
  EXPECT_FALSE(rejected.valid);
  EXPECT_NE(rejected.reject.find("split-K needs one staged MatMul"), std::string::npos) << rejected.reject;
}

// A decode step's K and V projections (TinyLlama's: one row of 2,048 times 2,048 x 256, float16)
// read the same row: the plan splits both over K and packs them into one launch, which the host
// runs equal to the reference. Packing itself: a split-K group shares a launch only with groups of
// its thread count (its warps' layout is its candidate's); a library call with none.
TEST(SplitKPlanner, SiblingSplitProjectionsShareALaunchOfTheirThreadCount) {
  const Graph g = fusetune::testing::sibling_projections(1, 2048, 256);
  const planner::ModelPlan plan = planner::plan_model(g, planner::find_device("h200"));
  ASSERT_EQ(plan.groups.size(), 2u);
  for (const planner::GroupPlan& gp : plan.groups) {
    EXPECT_GT(gp.candidates[gp.chosen].config.split_k, 1) << gp.candidates[gp.chosen].config.str();
  }
  EXPECT_EQ(plan.launches, 1);
  std::vector<LoweredKernel> parts;
  FusionGroup all;
  int64_t base = 0;
  for (size_t k = 0; k < plan.groups.size(); ++k) {
    const FusionGroup& fg = plan.groups[k].group;
    parts.push_back(lower_group(g, fg, plan.groups[k].candidates[plan.groups[k].chosen].config, "kv", {"p" + std::to_string(k) + "_", base}));
    base += parts.back().kernel.grid;
    all.nodes.insert(all.nodes.end(), fg.nodes.begin(), fg.nodes.end());
  }
  planner::describe_group(g, all);
  const LoweredKernel packed = pack_kernels(parts, "kv");
  auto backend = backend::make_host_backend();
  auto module = backend->load({packed.kernel});
  std::mt19937 rng(fusetune::testing::test_seed());
  const backend::VerifyResult r = backend::verify_kernel(g, all, packed, *backend, *module, rng);
  EXPECT_TRUE(r.ok) << r.detail;

  planner::FusionPlan fused = planner::fuse(g);
  ASSERT_EQ(fused.groups.size(), 2u);
  const auto launches = [&](planner::PackTerms a, planner::PackTerms b) {
    planner::pack_launches(g, fused, {}, {a, b});
    return fused.launches();
  };
  EXPECT_EQ(launches({false, true, 128}, {false, true, 128}), 1);
  EXPECT_EQ(launches({false, true, 128}, {false, false, 128}), 1);
  EXPECT_EQ(launches({false, true, 128}, {false, false, 256}), 2);
  EXPECT_EQ(launches({false, false, 256}, {false, true, 128}), 2);
  EXPECT_EQ(launches({false, false, 256}, {false, false, 128}), 1);
  EXPECT_EQ(launches({true, false, 128}, {false, false, 128}), 2);
}

}  // namespace
}  // namespace fusetune::codegen
