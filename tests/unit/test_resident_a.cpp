// A tensor-core product's resident A (planner::resident_a, codegen/stages/mma_matmul.h): a
// normalization along the last axis feeding a MatMul's A on mma.sync keeps its rows in shared
// memory in A's own 16-bit type at an ldmatrix pitch, and the product reads its fragments there:
// no A slice staged a step. Checked: where the planner takes the form and where it refuses it;
// the kernel's shared memory (the rows in 16 bits, written 16 bytes a store; no A ring) and the
// cost model's charge for it;
// differentially against the reference under the host executor's checks, float16 and bfloat16,
// rows that end inside the warps' tiles, K of one and of several steps, split-K, a deeper ring,
// the normalization's value exported, Softmax rows; each barrier deleted is a finding; B's first
// slices copied while the rows are normalized (tensor cores and the SIMT ring), a wait one group
// short a finding.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>

#include "backend/backend.h"
#include "backend/verify.h"
#include "codegen/lower_group.h"
#include "planner/device.h"
#include "planner/tiling.h"
#include "unit/codegen_check.h"
#include "unit/graph_helpers.h"

namespace fusetune::codegen {
namespace {

using fusetune::testing::add_input;
using fusetune::testing::add_op;
using fusetune::testing::attrs;
using fusetune::testing::check_groups;
using fusetune::testing::random_constant;
using planner::FusionGroup;
using planner::TileConfig;

// x (m x k) -> LayerNormalization along the last axis (or Softmax) -> MatMul by k x n -> + bias ->
// Relu, all one group; `exported`: the normalization's value leaves the group too; `second_reader`:
// a residual Add reads the normalized rows besides the product (k == n).
struct NormCase {
  Graph g;
  FusionGroup fg;
  int norm = -1, matmul = -1;  // node indices
};
NormCase norm_case(DType dtype, int64_t m, int64_t k, int64_t n, const std::string& norm = "LayerNormalization",
                   bool exported = false, bool second_reader = false, int64_t axis = -1) {
  NormCase c;
  Graph& g = c.g;
  const int x = add_input(g, "x", dtype, {m, k});
  const int y = norm == "LayerNormalization"
                    ? add_op(g, norm, {x, random_constant(g, "gamma", dtype, {k}, 3u), random_constant(g, "beta", dtype, {k}, 4u)},
                             attrs({{"axis", axis}, {"epsilon", 1e-5f}}))
                    : add_op(g, norm, {x}, attrs({{"axis", axis}}));
  c.norm = static_cast<int>(g.nodes().size()) - 1;
  const int p = add_op(g, "MatMul", {y, random_constant(g, "w", dtype, {k, n}, 5u)});
  c.matmul = static_cast<int>(g.nodes().size()) - 1;
  int out = add_op(g, "Relu", {add_op(g, "Add", {p, random_constant(g, "bias", dtype, {n}, 6u)})});
  if (second_reader) out = add_op(g, "Add", {out, y});
  for (size_t i = 0; i < g.nodes().size(); ++i) c.fg.nodes.push_back(static_cast<int>(i));
  planner::describe_group(g, c.fg);
  c.fg.outputs = {out};
  if (exported) c.fg.outputs.push_back(y);
  std::sort(c.fg.outputs.begin(), c.fg.outputs.end());
  return c;
}

TileConfig mma_tile(int64_t rows, int64_t cols, int64_t step, int threads) {
  TileConfig cfg{{rows, cols}, step, threads, 1, true};
  return cfg;
}

bool resident(const NormCase& c, const TileConfig& cfg) {
  return planner::resident_a(c.g, c.fg, c.g.nodes()[static_cast<size_t>(c.matmul)], cfg);
}

TEST(ResidentA, TakesANormalizationAlongTheLastAxisThatOnlyTheProductReads) {
  const TileConfig cfg = mma_tile(32, 64, 32, 128);
  EXPECT_TRUE(resident(norm_case(DType::kF16, 40, 64, 72), cfg));
  EXPECT_TRUE(resident(norm_case(DType::kBF16, 40, 64, 72), cfg));
  EXPECT_TRUE(resident(norm_case(DType::kF16, 40, 64, 72, "Softmax"), cfg));
  EXPECT_TRUE(resident(norm_case(DType::kF16, 40, 64, 72, "LayerNormalization", true), cfg)) << "exported: still read by the product alone";
  TileConfig wgmma = cfg;
  wgmma.wgmma = true;
  EXPECT_FALSE(resident(norm_case(DType::kF16, 40, 64, 72), wgmma)) << "wgmma reads core matrices";
  TileConfig simt = cfg;
  simt.mma = false;
  EXPECT_FALSE(resident(norm_case(DType::kF16, 40, 64, 72), simt));
  EXPECT_FALSE(resident(norm_case(DType::kF32, 40, 64, 72), cfg)) << "float32 (TF32) fragments are read an element at a time";
  EXPECT_FALSE(resident(norm_case(DType::kF16, 40, 48, 72), cfg)) << "K of 48 is no whole number of steps of 32";
  EXPECT_TRUE(resident(norm_case(DType::kF16, 40, 48, 72), mma_tile(32, 64, 16, 128)));
  EXPECT_FALSE(resident(norm_case(DType::kF16, 40, 64, 64, "LayerNormalization", false, true), cfg)) << "a second reader";
  EXPECT_FALSE(resident(norm_case(DType::kF16, 40, 64, 72, "LayerNormalization", false, false, 0), cfg))
      << "normalized over both axes: not rows of the last";
}

// The kernel keeps the normalized rows in 16 bits at the ldmatrix pitch (K + 8 where K / 8 is
// even), for the warps' rows, and stages no A; the cost model charges the same buffer.
TEST(ResidentA, HoldsTheRowsInSixteenBitsAndStagesNoA) {
  const NormCase c = norm_case(DType::kF16, 40, 64, 72);
  const TileConfig cfg = mma_tile(32, 64, 32, 128);
  const LoweredKernel lk = lower_group(c.g, c.fg, cfg, "resident");
  const int y = c.g.nodes()[static_cast<size_t>(c.norm)].outputs[0];
  const auto named = [&](const std::string& name) {
    return std::find_if(lk.kernel.shared.begin(), lk.kernel.shared.end(), [&](const SharedAlloc& s) { return s.name == name; });
  };
  const auto rows = named("b" + std::to_string(y));
  ASSERT_NE(rows, lk.kernel.shared.end()) << to_text(lk.kernel);
  EXPECT_EQ(rows->dtype, DType::kF16);
  const int64_t warps_rows = planner::mma_warps(32, 64, 4).rows();
  EXPECT_EQ(rows->elements, warps_rows * 72) << "the warps' rows of 64 + 8";
  EXPECT_EQ(planner::resident_pitch(c.g, c.g.nodes()[static_cast<size_t>(c.matmul)]), 72);
  const int p = c.g.nodes()[static_cast<size_t>(c.matmul)].outputs[0];
  EXPECT_EQ(named("sa" + std::to_string(p)), lk.kernel.shared.end()) << "an A ring\n" << to_text(lk.kernel);
  // Rows held in registers (256 elements: a run of 8 a lane) are written 16 bytes a store where a
  // run lies whole and aligned (LoweringContext::store_shared_run), as an exported value is.
  const NormCase wide = norm_case(DType::kF16, 40, 256, 72);
  const std::string ir = to_text(lower_group(wide.g, wide.fg, cfg, "resident").kernel);
  const std::string rows_name = "b" + std::to_string(wide.g.nodes()[static_cast<size_t>(wide.norm)].outputs[0]);
  EXPECT_NE(ir.find(rows_name + "[ft_at"), std::string::npos) << ir;
  EXPECT_NE(ir.find(" .. +8] = ft_u16x8"), std::string::npos) << "no 16-byte store of the rows\n" << ir;
  EXPECT_NE(named("sb" + std::to_string(p)), lk.kernel.shared.end());
  // The model: the same tile with A staged (a second reader keeps it so) charges the float rows
  // and the ring; resident, the 16-bit rows alone.
  const planner::Device d = planner::find_device("h100");
  const planner::Cost held = planner::evaluate_tile(c.g, c.fg, d, cfg);
  ASSERT_TRUE(held.valid) << held.reject;
  int64_t ring = 0;
  for (const SharedAlloc& s : lk.kernel.shared) ring += s.name == "sb" + std::to_string(p) ? s.elements * 2 : 0;
  EXPECT_LE(held.smem_bytes, warps_rows * 72 * 2 + ring + 1024) << "charged beyond the 16-bit rows and B's ring";
  EXPECT_GE(held.smem_bytes, warps_rows * 72 * 2 + ring);
}

// Against the reference under the host executor's checks (and compiled by NVRTC).
TEST(ResidentA, MatchesTheReferenceUnderEveryCheck) {
  for (const DType dt : {DType::kF16, DType::kBF16}) {
    const std::string type(dtype_name(dt));
    struct Shape3 {
      int64_t m, k, n;
      TileConfig cfg;
      std::string why;
    };
    TileConfig split = mma_tile(32, 32, 32, 128);
    split.split_k = 2;
    TileConfig deeper = mma_tile(16, 64, 16, 64);
    deeper.ring_stages = 4;
    const std::vector<Shape3> shapes = {
        {40, 64, 72, mma_tile(32, 64, 32, 128), "rows ending inside the last tile, two steps"},
        {16, 32, 24, mma_tile(16, 32, 32, 64), "one step, columns ending inside the tile"},
        {37, 96, 40, split, "split-K over 3 steps"},
        {24, 48, 64, deeper, "steps of 16 through a ring of 4"},
        {40, 256, 72, mma_tile(32, 64, 32, 128), "rows held in registers, stored 16 bytes a store"},
    };
    for (const Shape3& s : shapes) {
      for (const bool exported : {false, true}) {
        const NormCase c = norm_case(dt, s.m, s.k, s.n, "LayerNormalization", exported);
        ASSERT_TRUE(resident(c, s.cfg)) << s.why;
        check_groups(c.g, {c.fg}, [&](const FusionGroup&) { return s.cfg; },
                     type + ", " + s.why + (exported ? ", the rows exported" : ""));
      }
    }
    const NormCase softmax = norm_case(dt, 40, 64, 72, "Softmax");
    check_groups(softmax.g, {softmax.fg}, [&](const FusionGroup&) { return mma_tile(32, 64, 32, 128); }, type + ", Softmax rows");
  }
}

// Each barrier of the kernel deleted in turn: a race (or a read of rows not yet written) the
// checks report.
TEST(ResidentA, EachDeletedBarrierIsAFinding) {
  const NormCase c = norm_case(DType::kF16, 40, 64, 72);
  fusetune::testing::expect_each_deleted_barrier_reported(c.g, c.fg, lower_group(c.g, c.fg, mma_tile(32, 64, 32, 128), "resident"), 2);
}

// B's first slices are copied ahead of the normalization (AnchorStage::ahead_of_stages), so the
// weights' loads fly while the rows are normalized: resident, with A staged from the
// normalization's buffer (a second reader keeps it there; A's slices then come in groups of their
// own after B's), and in the SIMT form's ring (float32). Each matches the reference under every
// check, and its steps' wait loosened by one group (a step's copies still in flight) is reported;
// the model hides one latency of the ring's fill behind the normalization's rounds.
TEST(ResidentA, BsFirstSlicesAreCopiedWhileTheRowsAreNormalized) {
  auto backend = backend::make_host_backend();
  std::mt19937 rng(fusetune::testing::test_seed());
  const TileConfig cfg = mma_tile(32, 64, 16, 128);  // K 64: 4 steps of 16
  struct Case {
    DType dtype;
    TileConfig cfg;
    bool second_reader;
    std::string label;
  };
  const std::vector<Case> cases = {{DType::kF16, cfg, false, "A resident"},
                                   {DType::kF16, cfg, true, "A staged"},
                                   {DType::kF32, TileConfig{{32, 64}, 16, 128, 4}, false, "the SIMT ring"}};
  for (const Case& k : cases) {
    const NormCase c = norm_case(k.dtype, 40, 64, 64, "LayerNormalization", false, k.second_reader);
    const Node& mm = c.g.nodes()[static_cast<size_t>(c.matmul)];
    const planner::MmaStaging staging = k.cfg.mma ? planner::mma_staging(c.g, mm, {}, k.cfg) : planner::simt_staging(c.g, mm, {}, k.cfg);
    ASSERT_TRUE(staging.async_b) << k.label;
    ASSERT_EQ(resident(c, k.cfg), k.label == "A resident") << k.label;
    const LoweredKernel lk = lower_group(c.g, c.fg, k.cfg, "ahead");
    const std::string ir = to_text(lk.kernel);
    const std::string p = std::to_string(mm.outputs[0]);
    const size_t b_copy = ir.find("cp.async.16 sb" + p), norm = ir.find("stage LayerNormalization");
    ASSERT_NE(b_copy, std::string::npos) << k.label << "\n" << ir;
    EXPECT_LT(b_copy, norm) << k.label << ": B's slices wait for the normalization\n" << ir;
    if (k.second_reader) {
      EXPECT_GT(ir.find("cp.async.16 sa" + p), norm) << "A's slices are the normalization's rows\n" << ir;
    }
    check_groups(c.g, {c.fg}, [&](const FusionGroup&) { return k.cfg; }, k.label);
    LoweredKernel early = lk;
    ASSERT_EQ(fusetune::testing::loosen_async_waits(early.kernel.body, staging.ahead - 1), 1) << ir;
    auto m = backend->load({early.kernel});
    const backend::VerifyResult r = backend::verify_kernel(c.g, c.fg, early, *backend, *m, rng);
    EXPECT_TRUE(!r.ok && r.check_failed) << k.label << ": a wait one group short passed: " << r.detail;
    // The model: the ring's fill (its first steps) waits one latency, hidden behind the
    // normalization's rows (32 rows a tile over 4 warps: rounds of loads to spare).
    const planner::Cost cost = planner::evaluate_tile(c.g, c.fg, planner::find_device("h100"), k.cfg);
    ASSERT_TRUE(cost.valid) << cost.reject;
    EXPECT_DOUBLE_EQ(cost.fills_ahead, 1.0) << k.label;
  }
  // A product that is its group's first stage issues its prologue where it stands: nothing hidden.
  Graph g;
  const int x = fusetune::testing::add_input(g, "x", DType::kF16, {40, 64});
  add_op(g, "Relu", {add_op(g, "MatMul", {x, random_constant(g, "w", DType::kF16, {64, 64}, 5u)})});
  FusionGroup plain;
  plain.nodes = {0, 1};
  planner::describe_group(g, plain);
  plain.outputs = {g.nodes().back().outputs[0]};
  const planner::Cost first = planner::evaluate_tile(g, plain, planner::find_device("h100"), cfg);
  ASSERT_TRUE(first.valid) << first.reject;
  EXPECT_EQ(first.fills_ahead, 0.0);
  EXPECT_EQ(to_text(lower_group(g, plain, cfg, "first").kernel).find("copies issued ahead"), std::string::npos);
}

}  // namespace
}  // namespace fusetune::codegen
