// Generated kernels, differentially: every fusion group of every small model, and every canonical
// op on odd shapes and odd tiles, is lowered to Kernel IR, run on the host backend with fresh
// random inputs and poisoned outputs, and compared with the reference interpreter; each module is
// also compiled with NVRTC for sm_80 and sm_90 and ptxas's resource report is checked. Targeted
// cases cover the warp reductions of row statistics (the host emulation of the butterfly against a
// direct reduction; rows shorter and longer than a warp), MatMuls staged in 16-byte vectors
// (float32, float16, bfloat16), element loops in 16-byte vectors, Convs
// staged as implicit GEMMs and depthwise windows (odd shapes, strides, pads, dilations, groups,
// epilogues; the models' top candidates compile without spills), and the IR the lowering prints.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <random>
#include <regex>
#include <set>

#include "backend/backend.h"
#include "backend/cuda.h"
#include "backend/nvrtc.h"
#include "backend/verify.h"
#include "codegen/emit.h"
#include "codegen/lower_group.h"
#include "codegen/verify_ir.h"
#include "core/error.h"
#include "core/ops.h"
#include "importer/importer.h"
#include "planner/device.h"
#include "planner/select.h"
#include "planner/tiling.h"
#include "unit/codegen_check.h"
#include "unit/graph_helpers.h"
#include "unit/onnx_builder.h"
#include "tests/unit/test_seed.h"

namespace fusetune::codegen {
namespace {

namespace fs = std::filesystem;
using planner::FusionGroup;
using planner::TileConfig;
using fusetune::testing::add_input;
using fusetune::testing::add_op;
using fusetune::testing::attrs;
using fusetune::testing::best_config;
using fusetune::testing::check_groups;
using fusetune::testing::one_group_per_node;
using fusetune::testing::whole_graph_group;


class ModelGroups : public ::testing::TestWithParam<std::string> {};

TEST_P(ModelGroups, EveryFusedGroupMatchesTheReference) {
  const Graph g = fusetune::testing::load_test_model(GetParam());
  const planner::FusionPlan plan = planner::fuse(g);
  check_groups(g, plan.groups, [&](const FusionGroup& fg) { return best_config(g, fg); }, GetParam());
}

INSTANTIATE_TEST_SUITE_P(Codegen, ModelGroups,
                         ::testing::Values("bert", "cnn_small", "convnext_t", "efficientnet_b0", "mobilenet_v2",
                                           "nerf_mlp", "resnet_small", "swin_t", "unet_small", "vit"));

// One graph with every canonical op on odd shapes; each node is its own group.
Graph every_op() {
  Graph g;
  const int x = add_input(g, "x", DType::kF32, {3, 7, 5});
  const int y = add_input(g, "y", DType::kF32, {7, 1});
  const int big = add_input(g, "big", DType::kF32, {2, 1000});
  const int one = add_input(g, "one", DType::kF32, {1});
  const int ix = add_input(g, "ix", DType::kI64, {3, 7, 5});
  const int h = add_input(g, "h", DType::kF16, {3, 7, 5});
  const int mask = add_input(g, "mask", DType::kBool, {3, 7, 5});
  for (const char* op : {"Abs", "Atan", "Ceil", "Cos", "Erf", "Exp", "Floor", "HardSwish", "Neg", "Relu", "Round",
                         "Sigmoid", "Sign", "Sin", "Softplus", "Softsign", "Tan", "Tanh", "IsNaN", "IsInf"}) {
    add_op(g, op, {x});
  }
  add_op(g, "Log", {add_op(g, "Abs", {x})});
  add_op(g, "Sqrt", {add_op(g, "Abs", {x})});
  add_op(g, "Reciprocal", {big});
  add_op(g, "Elu", {x}, attrs({{"alpha", 0.7f}}));
  add_op(g, "LeakyRelu", {x}, attrs({{"alpha", 0.1f}}));
  add_op(g, "HardSigmoid", {x}, attrs({{"alpha", 0.2f}, {"beta", 0.5f}}));
  add_op(g, "Selu", {x}, attrs({{"alpha", 1.6732632f}, {"gamma", 1.0507009f}}));
  add_op(g, "ThresholdedRelu", {x}, attrs({{"alpha", 0.3f}}));
  add_op(g, "Clip", {x}, attrs({{"min", -0.5f}, {"max", 0.25f}}));
  add_op(g, "Clip", {ix}, attrs({{"min", 0.0f}, {"max", 1.0f}}));
  add_op(g, "Cast", {x}, attrs({{"to", int64_t{7}}}));
  add_op(g, "Cast", {ix}, attrs({{"to", int64_t{1}}}));
  add_op(g, "Cast", {h}, attrs({{"to", int64_t{1}}}));
  add_op(g, "Cast", {x}, attrs({{"to", int64_t{10}}}));
  add_op(g, "Not", {mask});
  add_op(g, "Exp", {h});
  for (const char* op : {"Add", "Sub", "Mul", "Div", "Max", "Min", "PRelu", "Equal", "Greater", "Less",
                         "GreaterOrEqual", "LessOrEqual"}) {
    add_op(g, op, {x, y});
  }
  add_op(g, "Pow", {add_op(g, "Abs", {x}), one});
  add_op(g, "Mod", {x, y}, attrs({{"fmod", int64_t{1}}}));
  for (const char* op : {"Add", "Sub", "Mul", "Max", "Min", "Equal"}) add_op(g, op, {ix, ix});
  add_op(g, "Div", {ix, add_op(g, "Add", {ix, ix})});
  add_op(g, "Mod", {ix, add_op(g, "Add", {ix, ix})}, attrs({{"fmod", int64_t{0}}}));
  add_op(g, "BitwiseNot", {ix});
  for (const char* op : {"BitwiseAnd", "BitwiseOr", "BitwiseXor"}) add_op(g, op, {ix, add_op(g, "Neg", {ix})});
  for (const char* direction : {"LEFT", "RIGHT"}) {  // shifts by the inputs' values: most outside [0, 64)
    add_op(g, "BitShift", {ix, ix}, attrs({{"direction", std::string(direction)}, {"bits", int64_t{64}}, {"signed", int64_t{1}}}));
  }
  add_op(g, "BitCast", {add_op(g, "BitCast", {x}, attrs({{"to", int64_t{6}}}))}, attrs({{"to", int64_t{1}}}));  // float32 bits and back
  add_op(g, "And", {mask, mask});
  add_op(g, "Or", {mask, add_op(g, "Not", {mask})});
  add_op(g, "Xor", {mask, mask});
  add_op(g, "Where", {mask, x, y});
  for (const char* op : {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd"}) {
    add_op(g, op, {x}, attrs({{"axes", std::vector<int64_t>{0, 2}}, {"keepdims", int64_t{1}}}));
    add_op(g, op, {big}, attrs({{"axes", std::vector<int64_t>{1}}, {"keepdims", int64_t{0}}}));
  }
  add_op(g, "ReduceSum", {ix}, attrs({{"axes", std::vector<int64_t>{1}}, {"keepdims", int64_t{0}}}));
  add_op(g, "ArgMax", {x}, attrs({{"axis", int64_t{1}}, {"keepdims", int64_t{0}}, {"select_last_index", int64_t{0}}}));
  add_op(g, "ArgMin", {x}, attrs({{"axis", int64_t{2}}, {"keepdims", int64_t{1}}, {"select_last_index", int64_t{1}}}));
  add_op(g, "Softmax", {x}, attrs({{"axis", int64_t{1}}}));
  add_op(g, "Softmax", {big}, attrs({{"axis", int64_t{1}}}));
  add_op(g, "LogSoftmax", {x}, attrs({{"axis", int64_t{2}}}));
  const int gamma = add_input(g, "gamma", DType::kF32, {5});
  const int beta = add_input(g, "beta", DType::kF32, {5});
  add_op(g, "LayerNormalization", {x, gamma, beta}, attrs({{"axis", int64_t{2}}, {"epsilon", 1e-5f}}));
  add_op(g, "LayerNormalization", {x, add_input(g, "g2", DType::kF32, {7, 5})}, attrs({{"axis", int64_t{1}}, {"epsilon", 1e-3f}}));
  add_op(g, "MatMul", {x, add_input(g, "w", DType::kF32, {5, 9})});
  add_op(g, "MatMul", {add_input(g, "a", DType::kF32, {5}), add_input(g, "m", DType::kF32, {2, 5, 3})});
  add_op(g, "MatMul", {add_input(g, "b1", DType::kF32, {2, 1, 3, 4}), add_input(g, "b2", DType::kF32, {3, 4, 6})});
  const int img = add_input(g, "img", DType::kF32, {2, 4, 9, 7});
  add_op(g, "Conv", {img, add_input(g, "cw", DType::kF32, {6, 2, 3, 2}), add_input(g, "cb", DType::kF32, {6})},
         attrs({{"group", int64_t{2}}, {"strides", std::vector<int64_t>{2, 1}}, {"dilations", std::vector<int64_t>{1, 2}},
                {"pads", std::vector<int64_t>{1, 0, 2, 1}}}));
  add_op(g, "Conv", {img, add_input(g, "dw", DType::kF32, {4, 1, 3, 3})},
         attrs({{"group", int64_t{4}}, {"strides", std::vector<int64_t>{1, 1}}, {"dilations", std::vector<int64_t>{1, 1}},
                {"pads", std::vector<int64_t>{1, 1, 1, 1}}}));
  add_op(g, "MaxPool", {img}, attrs({{"kernel_shape", std::vector<int64_t>{3, 3}}, {"strides", std::vector<int64_t>{2, 2}},
                                     {"pads", std::vector<int64_t>{1, 1, 1, 1}}, {"ceil_mode", int64_t{1}}}));
  add_op(g, "AveragePool", {img}, attrs({{"kernel_shape", std::vector<int64_t>{2, 3}}, {"strides", std::vector<int64_t>{2, 2}},
                                         {"pads", std::vector<int64_t>{1, 1, 0, 1}}, {"count_include_pad", int64_t{1}}}));
  add_op(g, "AveragePool", {img}, attrs({{"kernel_shape", std::vector<int64_t>{3, 3}}, {"pads", std::vector<int64_t>{1, 1, 1, 1}}}));
  add_op(g, "Reshape", {x}, attrs({{"shape", std::vector<int64_t>{7, 15}}}));
  add_op(g, "Transpose", {x}, attrs({{"perm", std::vector<int64_t>{2, 0, 1}}}));
  add_op(g, "Concat", {x, add_op(g, "Neg", {x}), x}, attrs({{"axis", int64_t{1}}}));
  add_op(g, "Slice", {x}, attrs({{"starts", std::vector<int64_t>{2, 1, 4}}, {"ends", std::vector<int64_t>{-1, 7, 0}},
                                 {"steps", std::vector<int64_t>{-1, 2, -2}}}));
  add_op(g, "Gather", {x, add_input(g, "gi", DType::kI64, {4, 2})}, attrs({{"axis", int64_t{1}}}));
  add_op(g, "Expand", {y}, attrs({{"shape", std::vector<int64_t>{3, 7, 5}}}));
  add_op(g, "Tile", {x}, attrs({{"repeats", std::vector<int64_t>{1, 2, 3}}}));
  for (const char* mode : {"constant", "reflect", "edge"}) {
    add_op(g, "Pad", {x}, attrs({{"pads", std::vector<int64_t>{0, 2, 3, 1, 0, 4}}, {"mode", std::string(mode)}, {"value", 0.5f}}));
  }
  add_op(g, "Pad", {x}, attrs({{"pads", std::vector<int64_t>{0, -2, 1, 1, -1, 0}}, {"mode", std::string("constant")}, {"value", 0.0f}}));
  const int small = add_input(g, "small", DType::kF32, {1, 2, 3, 4});
  auto resize = [&](const char* mode, const char* coord, std::vector<int64_t> sizes, std::vector<float> scales,
                    const char* nearest = "round_prefer_floor") {
    add_op(g, "Resize", {small}, attrs({{"mode", std::string(mode)}, {"coordinate_transformation_mode", std::string(coord)},
                                        {"nearest_mode", std::string(nearest)}, {"extrapolation_value", 0.0f},
                                        {"sizes", sizes}, {"scales", scales}}));
  };
  resize("nearest", "asymmetric", {1, 2, 6, 8}, {1, 1, 2, 2}, "floor");
  resize("nearest", "half_pixel", {1, 2, 7, 5}, {1, 1, 7.0f / 3, 1.25f});
  resize("nearest", "align_corners", {1, 2, 2, 3}, {1, 1, 2.0f / 3, 0.75f}, "round_prefer_ceil");
  resize("linear", "half_pixel", {1, 2, 6, 8}, {1, 1, 2, 2});
  resize("linear", "pytorch_half_pixel", {1, 2, 5, 3}, {1, 1, 5.0f / 3, 0.75f});
  resize("linear", "align_corners", {1, 2, 7, 9}, {1, 1, 7.0f / 3, 2.25f});
  const int sidx = g.add_constant("sidx", Tensor::from_ints(DType::kI64, {2, 1}, std::vector<int64_t>{2, 0}));
  add_op(g, "ScatterND", {x, sidx, add_input(g, "upd", DType::kF32, {2, 7, 5})}, attrs({{"reduction", std::string("none")}}));
  add_op(g, "ScatterND", {x, sidx, add_input(g, "upd2", DType::kF32, {2, 7, 5})}, attrs({{"reduction", std::string("add")}}));
  add_op(g, "IfMerge", {add_input(g, "picks", DType::kBool, {}), x, add_op(g, "Neg", {x})}, {});
  add_op(g, "RandomUniform", {}, attrs({{"shape", std::vector<int64_t>{3, 7, 5}}, {"key", int64_t{0x0123456789abcdef}}, {"word", int64_t{2}}}));
  return g;
}

// The canonical op set (core/ops.h) is the list every_op() is held to: an op added to it without a
// case here fails.
TEST(CodegenOps, EveryCanonicalOpIsInTheGraphOfEveryOp) {
  const Graph g = every_op();
  std::set<std::string> present;
  for (const Node& n : g.nodes()) present.insert(n.op);
  for (const OpSchema& op : canonical_ops()) EXPECT_TRUE(present.count(std::string(op.name))) << op.name << " is not in every_op()";
}

TEST(CodegenOps, EveryOpOnOddShapesAndPartialTiles) {
  const Graph g = every_op();
  // Tiles of 3 along every axis but the last (5 there): most tiles are partial at the edges.
  check_groups(g, one_group_per_node(g), [&](const FusionGroup& fg) {
    TileConfig cfg;
    const Shape& s = g.value(fg.outputs[0]).shape;
    for (size_t d = 0; d < s.size(); ++d) cfg.tile.push_back(d + 1 == s.size() ? 5 : 3);
    cfg.threads = 64;
    return cfg;
  }, "every_op/odd tiles");
}

TEST(CodegenOps, EveryOpWithThePlannersBestTile) {
  const Graph g = every_op();
  check_groups(g, one_group_per_node(g), [&](const FusionGroup& fg) { return best_config(g, fg); }, "every_op/best tiles");
}

TEST(CodegenOps, PackedKernelsRunEachPartOnItsBlocks) {
  // Three independent groups of different grids packed into one launch, verified as one kernel.
  const Graph g = every_op();
  const auto groups = one_group_per_node(g);
  std::vector<LoweredKernel> parts;
  FusionGroup all;
  int64_t base = 0;
  for (size_t k : {size_t{0}, size_t{30}, size_t{60}}) {
    TileConfig cfg = best_config(g, groups[k]);
    cfg.threads = 128;
    parts.push_back(lower_group(g, groups[k], cfg, "packed", {"p" + std::to_string(k) + "_", base}));
    base += parts.back().kernel.grid;
    all.nodes.insert(all.nodes.end(), groups[k].nodes.begin(), groups[k].nodes.end());
  }
  const LoweredKernel packed = pack_kernels(parts, "packed");
  EXPECT_EQ(packed.kernel.grid, base);
  auto backend = backend::make_host_backend();
  auto module = backend->load({packed.kernel});
  std::mt19937 rng(testing::test_seed());
  const backend::VerifyResult r = backend::verify_kernel(g, all, packed, *backend, *module, rng);
  EXPECT_TRUE(r.ok) << r.detail << "\n" << to_text(packed.kernel);
  if (backend::nvrtc_available()) {
    EXPECT_FALSE(backend::compile_cuda(emit_cuda({packed.kernel}), "sm_90").cubin.empty());
  }
}

// Two staged convolutions packed into one launch (as ResNet-50's plan packs a bottleneck's first
// 1x1 convolution with its projection shortcut): both stage in batches through the thread-local
// ft_sx, of different sizes, which the packed kernel declares once at the larger size.
TEST(CodegenOps, PackedStagedConvolutionsShareTheirStagingArray) {
  using fusetune::testing::random_constant;
  Graph g;
  const int x = add_input(g, "x", DType::kF32, {1, 64, 8, 8});
  g.outputs().push_back(add_op(g, "Relu", {add_op(g, "Conv", {x, random_constant(g, "w1", DType::kF32, {64, 64, 1, 1}, 3u)})}));
  g.outputs().push_back(add_op(g, "Conv", {x, random_constant(g, "w2", DType::kF32, {32, 64, 3, 3}, 4u)},
                               attrs({{"pads", std::vector<int64_t>{1, 1, 1, 1}}})));
  FusionGroup first, second, all;
  first.nodes = {0, 1};
  second.nodes = {2};
  planner::describe_group(g, first);
  planner::describe_group(g, second);
  std::vector<LoweredKernel> parts;
  int64_t base = 0;
  for (const auto& [group, cfg] : {std::pair{first, TileConfig{{1, 32, 4, 8}, 64, 64, 1}}, std::pair{second, TileConfig{{1, 16, 4, 8}, 32, 64, 1}}}) {
    parts.push_back(lower_group(g, group, cfg, "packed", {"p" + std::to_string(base) + "_", base}));
    base += parts.back().kernel.grid;
    all.nodes.insert(all.nodes.end(), group.nodes.begin(), group.nodes.end());
  }
  const auto batch = [](const Kernel& k) {
    const auto t = std::find_if(k.thread_locals.begin(), k.thread_locals.end(), [](const ThreadLocal& l) { return l.name == "ft_sx"; });
    return t == k.thread_locals.end() ? int64_t{0} : t->count;
  };
  ASSERT_GT(batch(parts[0].kernel), 0);
  ASSERT_GT(batch(parts[1].kernel), 0);
  const LoweredKernel packed = pack_kernels(parts, "packed");
  EXPECT_EQ(batch(packed.kernel), std::max(batch(parts[0].kernel), batch(parts[1].kernel)));
  planner::describe_group(g, all);
  auto backend = backend::make_host_backend();
  auto module = backend->load({packed.kernel});
  std::mt19937 rng(testing::test_seed());
  const backend::VerifyResult r = backend::verify_kernel(g, all, packed, *backend, *module, rng);
  EXPECT_TRUE(r.ok) << r.detail;
  if (backend::nvrtc_available()) {
    EXPECT_FALSE(backend::compile_cuda(emit_cuda({packed.kernel}), "sm_90").cubin.empty());
  }
}

// Softmax, LogSoftmax and layer norm over rows shorter than, as long as, and longer than a warp,
// with fewer rows than warps and more rows than warps per block.
Graph row_ops() {
  Graph g;
  for (int64_t len : {1, 31, 32, 33, 1000}) {
    const std::string l = std::to_string(len);
    const int x = add_input(g, "x" + l, DType::kF32, {3, 5, len});
    add_op(g, "Softmax", {x}, attrs({{"axis", int64_t{2}}}));
    add_op(g, "LogSoftmax", {x}, attrs({{"axis", int64_t{2}}}));
    add_op(g, "Softmax", {x}, attrs({{"axis", int64_t{1}}}));
    add_op(g, "LayerNormalization", {x, add_input(g, "g" + l, DType::kF32, {len}), add_input(g, "b" + l, DType::kF32, {len})},
           attrs({{"axis", int64_t{2}}, {"epsilon", 1e-5f}}));
    add_op(g, "LayerNormalization", {x, add_input(g, "h" + l, DType::kF32, {5, len})}, attrs({{"axis", int64_t{1}}, {"epsilon", 1e-3f}}));
  }
  return g;
}

// Rows around the warp size, with one warp per row or several (fewer rows than warps).
TEST(CodegenWarp, RowStatisticsOnRowsAroundTheWarpSize) {
  const Graph g = row_ops();
  for (int threads : {32, 128}) {
    for (int64_t rows_per_tile : {1, 2, 5}) {
      check_groups(g, one_group_per_node(g), [&](const FusionGroup& fg) {
        const Shape& s = g.value(fg.outputs[0]).shape;
        return TileConfig{{2, rows_per_tile, s[2]}, 0, threads, 1};
      }, "row ops/" + std::to_string(threads) + " threads, tile rows " + std::to_string(rows_per_tile));
    }
  }
  // Two rows in a block of 16 warps: eight warps per row, their partials combined in shared memory.
  check_groups(g, one_group_per_node(g), [&](const FusionGroup& fg) {
    return TileConfig{{2, 1, g.value(fg.outputs[0]).shape[2]}, 0, 512, 1};
  }, "row ops/512 threads, 2 rows a tile");
}

// Rows of 8-element runs that keep the row's lanes busy are held in registers (row_stats.h): read
// once, in 16-byte vectors where aligned, both statistics from the registers, the outputs written
// from them. In every float type: layer norm after a residual Add (the producer inlined, computed
// once), Softmax and LogSoftmax over rows with a tail (768 of 1,024 a round of 128 lanes), layer
// norm whose output a later MatMul of the group reads (a shared buffer and an exported output),
// one row a block over four warps (partials in shared memory) and six rows a block in batches.
// A Softmax reads each sector of its input once (counted): the row is read once, not three times.
TEST(CodegenWarp, RowsHeldInRegistersAreReadOnce) {
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16}) {
    Graph g;
    std::vector<FusionGroup> groups;
    const auto group_of = [&](int first) {
      FusionGroup fg;
      for (int n = first; n < static_cast<int>(g.nodes().size()); ++n) fg.nodes.push_back(n);
      planner::describe_group(g, fg);
      fg.outputs = {g.nodes().back().outputs[0]};
      groups.push_back(fg);
    };
    int first = static_cast<int>(g.nodes().size());
    const int sum = add_op(g, "Add", {add_input(g, "a", dt, {2, 6, 1024}), add_input(g, "r", dt, {2, 6, 1024})});
    add_op(g, "LayerNormalization", {sum, add_input(g, "g", dt, {1024}), add_input(g, "b", dt, {1024})},
           attrs({{"axis", int64_t{2}}, {"epsilon", 1e-5f}}));
    group_of(first);
    first = static_cast<int>(g.nodes().size());
    add_op(g, "Softmax", {add_input(g, "s", dt, {2, 6, 768})}, attrs({{"axis", int64_t{2}}}));
    group_of(first);
    first = static_cast<int>(g.nodes().size());
    add_op(g, "LogSoftmax", {add_input(g, "l", dt, {2, 6, 768})}, attrs({{"axis", int64_t{2}}}));
    group_of(first);
    first = static_cast<int>(g.nodes().size());
    const int norm = add_op(g, "LayerNormalization", {add_input(g, "m", dt, {1, 6, 512}), add_input(g, "mg", dt, {512})},
                            attrs({{"axis", int64_t{2}}}));
    add_op(g, "MatMul", {norm, add_input(g, "w", dt, {512, 16})});
    group_of(first);
    groups.back().outputs.insert(groups.back().outputs.begin(), norm);  // the normalized rows exported too
    for (int64_t rows : {1, 6}) {
      for (size_t i = 0; i < groups.size(); ++i) {
        const Shape& s = g.value(groups[i].outputs.back()).shape;
        const TileConfig cfg = i == 3 ? TileConfig{{1, rows, 16}, 64, 128, 1} : TileConfig{{1, rows, s[2]}, 0, 128, 1};
        const std::string ir = to_text(lower_group(g, groups[i], cfg, "held").kernel);
        EXPECT_NE(ir.find("_x: float["), std::string::npos) << "row not held\n" << ir;
        EXPECT_FALSE(std::regex_search(ir, std::regex(R"(shared s\d+_a:)"))) << "statistics through shared memory\n" << ir;
      }
      check_groups(g, groups, [&, i = 0](const FusionGroup& fg) mutable {
        const TileConfig cfg = i++ == 3 ? TileConfig{{1, rows, 16}, 64, 128, 1}
                                        : TileConfig{{1, rows, g.value(fg.outputs.back()).shape[2]}, 0, 128, 1};
        return cfg;
      }, std::string(dtype_name(dt)) + ", rows held, " + std::to_string(rows) + " a block");
    }
    const LoweredKernel softmax = lower_group(g, groups[1], TileConfig{{1, 6, 768}, 0, 128, 1}, "softmax");
    auto backend = backend::make_host_backend();
    auto module = backend->load({softmax.kernel});
    std::mt19937 rng(fusetune::testing::test_seed());
    ASSERT_TRUE(backend::verify_kernel(g, groups[1], softmax, *backend, *module, rng).ok);
    const simt::Counters c = module->counters().at("softmax");
    EXPECT_EQ(c.global_load_sectors, c.unique_load_sectors) << dtype_name(dt) << ": a sector of the rows read twice";
    EXPECT_EQ(c.global_sectors_of_width(16, false), c.global_load_sectors) << dtype_name(dt) << ": loads narrower than 16 bytes";
    if (dt != DType::kF16) continue;
    // Four warps a row meet in shared memory: each barrier deleted is a race the checks report.
    const LoweredKernel good = lower_group(g, groups[0], TileConfig{{1, 1, 1024}, 0, 128, 1}, "norm");
    LoweredKernel probe = good;
    const int barriers = fusetune::testing::drop_barrier(probe.kernel.body, -1);
    ASSERT_GE(barriers, 2) << to_text(good.kernel);  // after each statistic's partials
    for (int i = 0; i < barriers; ++i) {
      LoweredKernel bad = good;
      fusetune::testing::drop_barrier(bad.kernel.body, i);
      auto m = backend->load({bad.kernel});
      const backend::VerifyResult r = backend::verify_kernel(g, groups[0], bad, *backend, *m, rng);
      EXPECT_TRUE(!r.ok && r.check_failed) << "barrier " << i << " of " << barriers << " deleted: " << r.detail;
    }
  }
}

// A held row's 16-byte loads are all issued before its first run is computed (predicated on each
// run's whole-and-aligned condition, zero elsewhere), so a lane has its whole row in flight: a
// LayerNorm after an Add over rows of 1,024 (8 runs a lane, two inputs) issues all 16 vector loads
// before its first addition (PTX). Differentially, in every float type, that and the same with one
// addend sliced one element into rows one wider (not read along the row: its elements load one
// by one inside each run, beside the other's vectors loaded ahead).
TEST(CodegenWarp, AHeldRowsLoadsAreAllInFlightBeforeItsFirstRun) {
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16}) {
    Graph g;
    const int64_t width = 1024;
    const std::vector<int64_t> starts = {0, 1}, ends = {8, width + 1}, steps = {1, 1};
    const int a = add_op(g, "Slice", {add_input(g, "a", dt, {8, width + 1})}, attrs({{"starts", starts}, {"ends", ends}, {"steps", steps}}));
    const int sum = add_op(g, "Add", {a, add_input(g, "r", dt, {8, width})});
    add_op(g, "LayerNormalization", {sum, add_input(g, "g", dt, {width})}, attrs({{"axis", int64_t{1}}, {"epsilon", 1e-5f}}));
    Graph aligned;
    const int b = add_op(aligned, "Add", {add_input(aligned, "a", dt, {8, width}), add_input(aligned, "r", dt, {8, width})});
    add_op(aligned, "LayerNormalization", {b, add_input(aligned, "g", dt, {width})}, attrs({{"axis", int64_t{1}}, {"epsilon", 1e-5f}}));
    const TileConfig cfg{{4, width}, 0, 128, 1};  // a warp a row
    const std::string label = std::string(dtype_name(dt)) + ", a held row loaded ahead";
    check_groups(g, {whole_graph_group(g)}, [&](const FusionGroup&) { return cfg; }, label + ", rows sliced");
    check_groups(aligned, {whole_graph_group(aligned)}, [&](const FusionGroup&) { return cfg; }, label);
    if (dt != DType::kF32 || !backend::nvrtc_available()) continue;
    const std::string ptx = backend::compile_ptx(emit_cuda({lower_group(aligned, whole_graph_group(aligned), cfg, "k0").kernel}), "sm_90");
    const size_t first_add = ptx.find("add.f32");
    ASSERT_NE(first_add, std::string::npos) << ptx;
    const std::string before = ptx.substr(0, first_add);
    const std::regex wide(R"(\bld\.global\.nc\.v4\.f32\b)");
    const auto loads = std::distance(std::sregex_iterator(before.begin(), before.end(), wide), std::sregex_iterator());
    EXPECT_EQ(loads, 16) << "the row's 16-byte loads in flight before the first addition";
  }
}

// The cooperative reduction tests' tiles: up to `outputs` outputs a tile, along the output's
// longest axis.
TileConfig cooperative_tile(const Graph& g, const FusionGroup& fg, int64_t outputs, int threads) {
  const Shape& s = g.value(fg.outputs[0]).shape;
  std::vector<int64_t> tile(s.size(), 1);
  const auto longest = std::max_element(s.begin(), s.end()) - s.begin();
  tile[static_cast<size_t>(longest)] = std::min(outputs, s[static_cast<size_t>(longest)]);
  return TileConfig{tile, 0, threads, 1};
}

// Every group on 1 to 3 outputs a tile and 32 to 256 threads: its IR holds `reduce` (a warp
// reduction), and the kernels match the reference under the executor's checks.
void check_cooperative(const Graph& g, const std::vector<FusionGroup>& groups, const std::string& reduce, const std::string& label) {
  for (int threads : {32, 64, 256}) {
    for (int64_t outputs : {1, 2, 3}) {
      for (const FusionGroup& fg : groups) {
        const std::string ir = to_text(lower_group(g, fg, cooperative_tile(g, fg, outputs, threads), "coop").kernel);
        EXPECT_NE(ir.find(reduce), std::string::npos) << fg.pattern << ", " << outputs << " outputs on " << threads
                                                      << " threads: not cooperative\n" << ir;
      }
      check_groups(g, groups, [&](const FusionGroup& fg) { return cooperative_tile(g, fg, outputs, threads); },
                   label + "/" + std::to_string(outputs) + " outputs on " + std::to_string(threads) + " threads");
    }
  }
}

// `group`'s kernel for one output on eight warps, each of its barriers deleted in turn: a race the
// checks report (the barrier before the warps' partials are combined).
void expect_each_deleted_barrier_reported(const Graph& g, const FusionGroup& group, const std::string& name) {
  fusetune::testing::expect_each_deleted_barrier_reported(g, group, lower_group(g, group, cooperative_tile(g, group, 1, 256), name), 1);
}

// Few outputs over long reduction spaces reduce cooperatively (stages/reduce.h): a warp an
// output, or several warps whose partials meet in shared memory, the outputs in batches. Against
// the reference under the host executor's checks: ReduceSum and ReduceMean over the innermost
// 40 x 40 (a global average pool), ReduceMax and ReduceMin over an outer axis of 1,000 (not a
// multiple of any lane count), a float16 ReduceMean over 33, an unstaged MatMul of a row by 300 x 5
// and a 1x1 Conv with bias on a pooled vector (squeeze-and-excitation's); 1 to 3 outputs a tile on
// 32 to 256 threads, and split over 2, 3 or 5 blocks a tile. Every kernel takes the form (a warp reduction in its IR, no serial loop over
// the whole space); with several warps an output, deleting a barrier is a race the checks report.
TEST(CodegenReduce, FewOutputsReduceCooperativelyInEveryForm) {
  Graph g;
  const int x = add_input(g, "x", DType::kF32, {1, 3, 40, 40});
  for (const char* op : {"ReduceSum", "ReduceMean"}) {
    add_op(g, op, {x}, attrs({{"axes", std::vector<int64_t>{2, 3}}, {"keepdims", int64_t{1}}}));
  }
  const int y = add_input(g, "y", DType::kF32, {1000, 3});
  for (const char* op : {"ReduceMax", "ReduceMin"}) {
    add_op(g, op, {y}, attrs({{"axes", std::vector<int64_t>{0}}, {"keepdims", int64_t{1}}}));
  }
  add_op(g, "ReduceMean", {add_input(g, "h", DType::kF16, {2, 4, 33})}, attrs({{"axes", std::vector<int64_t>{2}}, {"keepdims", int64_t{0}}}));
  add_op(g, "MatMul", {add_input(g, "r", DType::kF32, {1, 300}), add_input(g, "w", DType::kF32, {300, 5})});
  add_op(g, "Conv", {add_input(g, "p", DType::kF32, {1, 300, 1, 1}), add_input(g, "cw", DType::kF32, {6, 300, 1, 1}),
                     add_input(g, "cb", DType::kF32, {6})});
  const std::vector<FusionGroup> groups = one_group_per_node(g);
  check_cooperative(g, groups, "warp.reduce", "cooperative reductions");
  // Split over blocks (split-K): each block folds a slice of every output's space, and the last of
  // the tile's blocks combines the slices' totals in split order (one warp an output, or two).
  for (int threads : {64, 128}) {
    for (int splits : {2, 3, 5}) {
      const auto split = [&](const FusionGroup& fg) {
        TileConfig cfg = cooperative_tile(g, fg, 2, threads);
        cfg.split_k = splits;
        return cfg;
      };
      const std::string ir = to_text(lower_group(g, groups[0], split(groups[0]), "split").kernel);
      EXPECT_NE(ir.find("atomic"), std::string::npos) << ir;
      check_groups(g, groups, split, "cooperative reductions/" + std::to_string(splits) + " splits on " + std::to_string(threads) + " threads");
    }
  }
  // One output on eight warps: the barrier before the partials are combined (the only one: the
  // batch loop runs once), deleted, is a race.
  expect_each_deleted_barrier_reported(g, groups[1], "pool");
}

// ArgMax and ArgMin reduce cooperatively too (stages/reduce.h): the lanes', then the warps',
// (value, index) pairs combined by ft_arg_beats must give exactly what the reference's scan picks,
// on inputs made to hit every rule of its order: Floor of normals (long runs of equal values: the
// first index, or the last with select_last_index), Sqrt of normals (NaN in about half the
// elements: a NaN at index 0 wins, elsewhere none), along the innermost axis of 1,000 and 33 and
// down an outer axis of 1,000, float32 and float16; 1 to 3 outputs a tile on 32 to 256 threads.
// The cooperative pick was a thread's serial scan: 125 rounds of loads for one output of 1,000.
TEST(CodegenReduce, ArgMaxAndArgMinReduceCooperativelyAndPickAsTheScan) {
  Graph g;
  const int x = add_input(g, "x", DType::kF32, {3, 1000});
  const int y = add_input(g, "y", DType::kF32, {1000, 3});
  const int h = add_input(g, "h", DType::kF16, {4, 33});
  std::vector<FusionGroup> groups;
  for (const char* op : {"ArgMax", "ArgMin"}) {
    for (int64_t last : {0, 1}) {
      for (const auto& [in, axis] : std::vector<std::pair<int, int64_t>>{{x, 1}, {y, 0}, {h, 1}}) {
        for (const char* shape : {"Floor", "Sqrt"}) {
          const int v = add_op(g, shape, {in});
          const int out = add_op(g, op, {v}, attrs({{"axis", axis}, {"keepdims", int64_t{1}}, {"select_last_index", last}}));
          g.outputs().push_back(out);
          FusionGroup fg;
          fg.nodes = {g.producers()[static_cast<size_t>(v)], g.producers()[static_cast<size_t>(out)]};
          planner::describe_group(g, fg);
          groups.push_back(fg);
        }
      }
    }
  }
  check_cooperative(g, groups, "warp.reduce arg", "cooperative ArgMax/ArgMin");
  // The planner offers no split-K form: the pairs have no hand-over between blocks.
  TileConfig split = cooperative_tile(g, groups[0], 1, 64);
  split.split_k = 2;
  const planner::Cost c = planner::evaluate_tile(g, groups[0], planner::find_device("h100"), split);
  EXPECT_FALSE(c.valid) << "ArgMax split over two blocks";
  // One output on eight warps: the barrier before the warps' pairs are combined, deleted, is a race.
  expect_each_deleted_barrier_reported(g, groups[0], "argpool");
}

// A float16 value computed in the group (a Sqrt) is compared as the type rounds it: sqrt(4) and
// sqrt(4.00390625) differ in float but are both 2 in float16, so the reference sees a tie, which
// the first index wins (the last with select_last_index). Computed in float alone, the larger
// float won either way (a random test's seed found it: 7 where 21 was expected). Rows of 64 (the
// cooperative form) and of 16 (the serial one), the pair in either order.
TEST(CodegenReduce, AnArgMaxOfAHalfComputedInTheGroupTiesAsTheTypeRoundsIt) {
  Graph g;
  std::vector<FusionGroup> groups;
  for (const int64_t row : {64, 16}) {
    std::vector<float> v(static_cast<size_t>(2 * row), 1.0f);
    v[3] = 4.00390625f;  // row 0: the larger in float first
    v[static_cast<size_t>(row - 2)] = 4.0f;
    v[static_cast<size_t>(row + 1)] = 4.0f;  // row 1: last
    v[static_cast<size_t>(2 * row - 3)] = 4.00390625f;
    const int h = g.add_constant("h" + std::to_string(row), Tensor::from_floats(DType::kF16, {2, row}, v));
    for (const char* op : {"ArgMax", "ArgMin"}) {
      for (int64_t last : {0, 1}) {
        const auto node_of = [&](int value) { return g.producers()[static_cast<size_t>(value)]; };
        FusionGroup fg;
        int in = add_op(g, "Sqrt", {h});
        fg.nodes.push_back(node_of(in));
        if (std::string(op) == "ArgMin") {  // the pair's negations: the smallest, tied in float16
          in = add_op(g, "Neg", {in});
          fg.nodes.push_back(node_of(in));
        }
        const int picked = add_op(g, op, {in}, attrs({{"axis", int64_t{1}}, {"keepdims", int64_t{1}}, {"select_last_index", last}}));
        g.outputs().push_back(picked);
        fg.nodes.push_back(node_of(picked));
        planner::describe_group(g, fg);
        groups.push_back(fg);
      }
    }
  }
  check_groups(g, groups, [&](const FusionGroup& fg) { return cooperative_tile(g, fg, 2, 64); }, "float16 ties, rows of 64 and 16");
}

// The group of the nodes producing `values`, the last one's result a graph output.
FusionGroup group_exporting_last(Graph& g, const std::vector<int>& values) {
  FusionGroup fg;
  for (int value : values) fg.nodes.push_back(g.producers()[static_cast<size_t>(value)]);
  g.outputs().push_back(values.back());
  planner::describe_group(g, fg);
  return fg;
}

// Element-wise ops whose result jumps see a float16 value computed in the group as the reference
// stores it, rounded to float16: sqrt(4.00390625) is 2.0009766 in float and 2 in float16 (equal to
// 2, not greater; its negation's floor -2, not -3), 300 x 300 is finite in float and infinite in
// float16, and 0.0001 squared is 1e-8 in float and 0 in float16 (Sign).
TEST(CodegenElementwise, JumpsOfAHalfComputedInTheGroupFallWhereTheTypeRoundsIt) {
  Graph g;
  const std::vector<float> v = {4.0f, 4.00390625f, 1.0f, 9.0f, 300.0f, 0.0001f, -0.0001f, 16.0f};
  const int h = g.add_constant("h", Tensor::from_floats(DType::kF16, {8}, v));
  const int two = g.add_constant("two", Tensor::from_floats(DType::kF16, {}, std::vector<float>{2.0f}));
  std::vector<FusionGroup> groups;
  const auto group_of = [&](const std::vector<int>& values) { groups.push_back(group_exporting_last(g, values)); };
  for (const char* cmp : {"Equal", "Greater", "LessOrEqual"}) {
    const int y = add_op(g, "Sqrt", {h});
    group_of({y, add_op(g, cmp, {y, two})});
  }
  for (const char* rounding : {"Floor", "Ceil", "Round"}) {
    const int y = add_op(g, "Sqrt", {h});
    const int n = add_op(g, "Neg", {y});
    group_of({y, n, add_op(g, rounding, {n})});
  }
  for (const char* test : {"Sign", "IsInf"}) {
    const int sq = add_op(g, "Mul", {h, h});
    group_of({sq, add_op(g, test, {sq})});
  }
  check_groups(g, groups, [&](const FusionGroup& fg) { return best_config(g, fg); }, "float16 jumps");
}

// A chain of smooth ops before a jump computes each step as the reference stores it: sqrt(4.00390625)
// is 2 in float16, so sqrt(x) - 2 is 0 there (0.00098 in float): its Sign is 0, not 1; times 4,096
// cast to int8 it is 0, not 3; and ArgMax over {4, 4.00390625} ties, so the first index wins.
// Rounded only at the jump, float's 0.00098 survives (it is a float16 value) and each group fails.
TEST(CodegenElementwise, AChainBeforeAJumpTakesEachStepAsTheTypeStoresIt) {
  Graph g;
  const std::vector<float> v = {1.0f, 4.0f, 4.00390625f, 1.0f, 0.25f, 0.5f, 4.00390625f, 2.25f};
  const int h = g.add_constant("h", Tensor::from_floats(DType::kF16, {8}, v));
  const int two = g.add_constant("two", Tensor::from_floats(DType::kF16, {}, std::vector<float>{2.0f}));
  const int scale = g.add_constant("scale", Tensor::from_floats(DType::kF16, {}, std::vector<float>{4096.0f}));
  std::vector<FusionGroup> groups;
  const auto group_of = [&](const std::vector<int>& values) { groups.push_back(group_exporting_last(g, values)); };
  const auto less_two = [&] {
    const int y = add_op(g, "Sqrt", {h});
    return std::vector<int>{y, add_op(g, "Sub", {y, two})};
  };
  std::vector<int> sign = less_two();
  sign.push_back(add_op(g, "Sign", {sign.back()}));
  group_of(sign);
  std::vector<int> cast = less_two();
  cast.push_back(add_op(g, "Mul", {cast.back(), scale}));
  cast.push_back(add_op(g, "Cast", {cast.back()}, attrs({{"to", int64_t{3}}})));  // int8: compared exactly
  group_of(cast);
  std::vector<int> arg = less_two();
  arg.push_back(add_op(g, "ArgMax", {arg.back()}, attrs({{"axis", int64_t{0}}, {"keepdims", int64_t{1}}})));
  group_of(arg);
  check_groups(g, groups, [&](const FusionGroup& fg) { return best_config(g, fg); }, "float16 chains before jumps");
}

// GatherElements, Hardmax, Shrink, LpNormalization and OneHot as import lowers them (a Gather at
// computed flat indices; ArgMax against an iota; Wheres; a norm with a guard against 0; Equal
// against an iota), fused and compiled with the planner's best candidates, against the reference.
TEST(CodegenImported, LoweredOperatorsCompile) {
  testing::OnnxBuilder b(13);
  b.input("x", testing::kFloat, {2, 5, 12}).input("i", testing::kInt64, {2, 3, 12});
  b.output("g", testing::kFloat, {2, 3, 12}).output("h", testing::kFloat, {2, 5, 12});
  b.output("s", testing::kFloat, {2, 5, 12}).output("n", testing::kFloat, {2, 5, 12}).output("o", testing::kFloat, {2, 3, 7, 12});
  b.initializer("depth", Tensor::from_ints(DType::kI64, {1}, std::vector<int64_t>{7}));
  b.initializer("values", Tensor::from_floats(DType::kF32, {2}, std::vector<float>{-0.5f, 2.0f}));
  testing::OnnxBuilder::attr_i(b.node("GatherElements", {"x", "i"}, {"gi"}), "axis", 1);
  b.node("Relu", {"gi"}, {"g"});
  testing::OnnxBuilder::attr_i(b.node("Hardmax", {"x"}, {"h"}), "axis", 1);
  testing::OnnxBuilder::attr_f(b.node("Shrink", {"x"}, {"s"}), "bias", 0.25f);
  testing::OnnxBuilder::attr_i(b.node("LpNormalization", {"x"}, {"n"}), "axis", 1);
  testing::OnnxBuilder::attr_i(b.node("OneHot", {"i", "depth", "values"}, {"o"}), "axis", 2);
  const Graph g = importer::import_onnx_bytes(b.bytes(), ".").graph;
  const planner::FusionPlan plan = planner::fuse(g);
  check_groups(g, plan.groups, [&](const FusionGroup& fg) { return best_config(g, fg); }, "GatherElements, Hardmax, Shrink, LpNormalization, OneHot");
  // ScatterElements with a reduction (a ScatterND into the flattened data at flat one-coordinate
  // tuples, repeated ones added in order), GatherND with a batch axis (a Gather at the tuples'
  // coordinates times their strides, summed, plus the batch's offset), LpPool,
  // MeanVarianceNormalization, CumProd, ReverseSequence, CenterCropPad, GroupNormalization, LRN
  // and the bitwise ops, at opset 18.
  testing::OnnxBuilder c(18);
  c.input("d", testing::kFloat, {4, 6}).input("si", testing::kInt64, {3, 6}).input("u", testing::kFloat, {3, 6});
  c.input("t", testing::kFloat, {2, 3, 4}).input("ti", testing::kInt64, {2, 5, 1});
  c.output("sc", testing::kFloat, {4, 6}).output("gn", testing::kFloat, {2, 5, 4});
  onnx::NodeProto& scatter = c.node("ScatterElements", {"d", "si", "u"}, {"sc"});
  testing::OnnxBuilder::attr_i(scatter, "axis", 0);
  testing::OnnxBuilder::attr_s(scatter, "reduction", "add");
  testing::OnnxBuilder::attr_i(c.node("GatherND", {"t", "ti"}, {"gn"}), "batch_dims", 1);
  // LpPool (p = 3; p = 2 with dilations): AveragePool of |x|^p times each window's count of taps
  // inside the input, then the root.
  c.input("m", testing::kFloat, {1, 2, 7, 6}).output("l3", testing::kFloat, {1, 2, 4, 4}).output("l2", testing::kFloat, {1, 2, 7, 4});
  onnx::NodeProto& cube = c.node("LpPool", {"m"}, {"l3"});
  testing::OnnxBuilder::attr_i(cube, "p", 3);
  testing::OnnxBuilder::attr_ints(cube, "kernel_shape", {3, 2});
  testing::OnnxBuilder::attr_ints(cube, "strides", {2, 2});
  testing::OnnxBuilder::attr_ints(cube, "pads", {1, 1, 1, 1});
  onnx::NodeProto& square = c.node("LpPool", {"m"}, {"l2"});
  testing::OnnxBuilder::attr_ints(square, "kernel_shape", {3, 3});
  testing::OnnxBuilder::attr_ints(square, "dilations", {1, 2});
  testing::OnnxBuilder::attr_ints(square, "pads", {1, 1, 1, 1});
  c.input("v", testing::kFloat, {2, 3, 4, 5}).output("mvn", testing::kFloat, {2, 3, 4, 5});
  c.node("MeanVarianceNormalization", {"v"}, {"mvn"});
  // CumProd, reversed and exclusive, along the first of two axes (moved last and back).
  c.input("q", testing::kFloat, {6, 5}).output("cp", testing::kFloat, {6, 5});
  c.initializer("cp_axis", Tensor::from_ints(DType::kI64, {}, std::vector<int64_t>{0}));
  onnx::NodeProto& cum = c.node("CumProd", {"q", "cp_axis"}, {"cp"});
  testing::OnnxBuilder::attr_i(cum, "exclusive", 1);
  testing::OnnxBuilder::attr_i(cum, "reverse", 1);
  // ReverseSequence (a Gather at flat indices of computed time coordinates) and CenterCropPad
  // (a Slice and a Pad).
  c.input("rs", testing::kFloat, {4, 3, 2}).input("lens", testing::kInt64, {3}).output("rv", testing::kFloat, {4, 3, 2});
  c.node("ReverseSequence", {"rs", "lens"}, {"rv"});
  c.input("cc", testing::kFloat, {5, 6}).output("ccp", testing::kFloat, {3, 9});
  c.initializer("cc_shape", Tensor::from_ints(DType::kI64, {2}, std::vector<int64_t>{3, 9}));
  c.node("CenterCropPad", {"cc", "cc_shape"}, {"ccp"});
  // GroupNormalization (opset 18: a scale and bias per group) and LRN.
  c.input("gx", testing::kFloat, {2, 4, 3, 3}).input("gs", testing::kFloat, {2}).input("gb", testing::kFloat, {2});
  c.output("gnorm", testing::kFloat, {2, 4, 3, 3}).output("lrn", testing::kFloat, {2, 4, 3, 3});
  testing::OnnxBuilder::attr_i(c.node("GroupNormalization", {"gx", "gs", "gb"}, {"gnorm"}), "num_groups", 2);
  testing::OnnxBuilder::attr_i(c.node("LRN", {"gx"}, {"lrn"}), "size", 3);
  // Bitwise ops on integers of every width (ONNX codes: uint8 2, uint16 4, int16 5, int32 6,
  // uint32 12, uint64 13):
  // shifts left past the width and right of signed values, And, Not.
  c.input("u8", 2, {4, 5}).input("s8", 2, {5}).input("i32", 6, {4, 5}).input("s32", 6, {4, 5});
  c.input("u64", 13, {3, 4}).input("m64", 13, {4}).input("i16", 5, {2, 3}).input("u16", 4, {2, 3}).input("u32", 12, {3});
  c.output("shl", 2, {4, 5}).output("shr", 6, {4, 5}).output("band", 13, {3, 4}).output("bnot", 5, {2, 3});
  c.output("bor", 4, {2, 3}).output("bxor", 12, {3});
  testing::OnnxBuilder::attr_s(c.node("BitShift", {"u8", "s8"}, {"shl"}), "direction", "LEFT");
  testing::OnnxBuilder::attr_s(c.node("BitShift", {"i32", "s32"}, {"shr"}), "direction", "RIGHT");
  c.node("BitwiseAnd", {"u64", "m64"}, {"band"});
  c.node("BitwiseOr", {"u16", "u16"}, {"bor"});
  c.node("BitwiseXor", {"u32", "u32"}, {"bxor"});
  c.node("BitwiseNot", {"i16"}, {"bnot"});
  const Graph h = importer::import_onnx_bytes(c.bytes(), ".").graph;
  check_groups(h, planner::fuse(h).groups, [&](const FusionGroup& fg) { return best_config(h, fg); },
               "ScatterElements, GatherND, LpPool, MeanVarianceNormalization, CumProd, ReverseSequence, CenterCropPad, "
               "GroupNormalization, LRN, BitShift, BitwiseAnd, BitwiseNot, BitwiseOr, BitwiseXor");
}

TEST(CodegenWarp, RowStatisticsUseWarpReductionsAndNoPartials) {
  const Graph g = row_ops();
  const auto groups = one_group_per_node(g);
  const Kernel softmax = lower_group(g, groups[0], TileConfig{{1, 5, 1}, 0, 64, 1}, "softmax").kernel;
  const std::string ir = to_text(softmax);
  EXPECT_NE(ir.find("thread-local w1_a: float[1]"), std::string::npos) << ir;
  EXPECT_NE(ir.find("for.uniform ft_rb in [0, (ft_min((r1_n0 * r1_n1), 5) + 1) / 2)"), std::string::npos) << ir;
  EXPECT_NE(ir.find("warp.reduce max w1_a"), std::string::npos) << ir;
  EXPECT_NE(ir.find("warp.reduce sum w1_b"), std::string::npos) << ir;
  EXPECT_EQ(ir.find("_p:"), std::string::npos) << "no shared partials\n" << ir;
  EXPECT_NE(emit_cuda({softmax}).find("__shfl_xor_sync(0xffffffffu, w1_a[0], ft_off)"), std::string::npos);
  const Kernel norm = lower_group(g, groups[3], TileConfig{{1, 5, 1}, 0, 64, 1}, "norm").kernel;
  const std::string nir = to_text(norm);
  // Warps without a row in the batch skip the reductions and the mean (their lanes agree: the
  // guard depends on the warp index only).
  const std::string busy = "(ft_rb * 2 + ft_thread / 32) < ft_min((r6_n0 * r6_n1), 5)";
  EXPECT_NE(nir.find("warp.reduce sum w6_a if (" + busy + ")\n    if " + busy + "\n      w6_a[0] = w6_a[0] / (1.0f)"),
            std::string::npos)
      << nir;
  EXPECT_NE(ir.find("warp.reduce max w1_a if ("), std::string::npos) << ir;
  EXPECT_NE(emit_cuda({softmax}).find("if ((ft_rb * 2 + ft_thread / 32) < ft_min((r1_n0 * r1_n1), 5))\n"
                                      "    #pragma unroll\n"),
            std::string::npos);
}

// A hand-written kernel: warp w of block b reduces row 2b + w of x (strided shares per lane), and
// every lane writes the warp's sum and max, so the host's replay of the butterfly can be checked
// against a direct reduction and for agreement between lanes.
Kernel warp_reduce_kernel(int64_t rows, int64_t len) {
  Kernel k;
  k.name = "warp_rows";
  k.threads = 64;
  k.grid = (rows + 1) / 2;
  k.params = {{"x", DType::kF32, rows * len, false}, {"s", DType::kF32, rows * 32, true}, {"m", DType::kF32, rows * 32, true}};
  k.thread_locals = {{"ws", 1}, {"wm", 1}};
  const std::string row = "(ft_block * 2LL + ft_thread / 32)";
  const std::string active = row + " < " + std::to_string(rows) + "LL";
  Block share = {let("long long", "ft_row", row), let("long long", "ft_lane", "ft_thread % 32")};
  share.push_back(serial_for("ft_j", "0LL", "(" + std::to_string(len) + "LL - ft_lane + 31LL) / 32LL", {
      let("float", "ft_x", "x[ft_row * " + std::to_string(len) + "LL + ft_lane + ft_j * 32LL]"),
      assign("ws[0]", "ws[0] + ft_x"),
      assign("wm[0]", "ft_fmaxn(wm[0], ft_x)")}));
  k.body = {assign("ws[0]", "0.0f"), assign("wm[0]", "(-ft_inf())"), if_then(active, share),
            warp_reduce("ws", "sum"), warp_reduce("wm", "max"),
            if_then(active, {let("long long", "ft_at", row + " * 32LL + ft_thread % 32"),
                             store("s", "ft_at", "ws[0]"), store("m", "ft_at", "wm[0]")})};
  return k;
}

TEST(CodegenWarp, HostButterflyEqualsADirectReduction) {
  auto backend = backend::make_host_backend();
  std::mt19937 rng(7);
  const int64_t rows = 3;
  for (int64_t len : {1, 31, 32, 33, 1000}) {
    const Kernel k = warp_reduce_kernel(rows, len);
    auto module = backend->load({k});
    for (bool integers : {true, false}) {
      // Small integers sum exactly in float, in any order: the result must equal the direct sum.
      std::vector<float> x(static_cast<size_t>(rows * len));
      std::normal_distribution<float> normal(0.0f, 1.0f);
      std::uniform_int_distribution<int> small(-8, 8);
      for (float& v : x) v = integers ? static_cast<float>(small(rng)) : normal(rng);
      auto xb = backend->allocate(x.size() * 4), sb = backend->allocate(rows * 32 * 4), mb = backend->allocate(rows * 32 * 4);
      xb->upload(x.data(), x.size() * 4);
      module->launch(k.name, {xb.get(), sb.get(), mb.get()});
      std::vector<float> sums(static_cast<size_t>(rows * 32)), maxes(sums.size());
      sb->download(sums.data(), sums.size() * 4);
      mb->download(maxes.data(), maxes.size() * 4);
      for (int64_t r = 0; r < rows; ++r) {
        double direct = 0, magnitude = 0;
        float top = -INFINITY;
        for (int64_t i = 0; i < len; ++i) {
          const float v = x[static_cast<size_t>(r * len + i)];
          direct += v;
          magnitude += std::fabs(v);
          top = std::max(top, v);
        }
        const float lane0 = sums[static_cast<size_t>(r * 32)];
        for (int64_t l = 0; l < 32; ++l) {
          const size_t at = static_cast<size_t>(r * 32 + l);
          EXPECT_EQ(sums[at], lane0) << "len " << len << " row " << r << " lane " << l << ": lanes disagree";
          EXPECT_EQ(maxes[at], top) << "len " << len << " row " << r << " lane " << l;
        }
        if (integers) {
          EXPECT_EQ(lane0, static_cast<float>(direct)) << "len " << len << " row " << r;
        } else {
          EXPECT_NEAR(lane0, direct, 1e-5 * magnitude + 1e-6) << "len " << len << " row " << r;
        }
      }
    }
    if (backend::nvrtc_available()) {
      EXPECT_FALSE(backend::compile_cuda(emit_cuda({k}), "sm_80").cubin.empty()) << "len " << len;
    }
  }
}

TEST(CodegenWarp, WarpReductionsOnlyWhereBarriersMayBe) {
  Kernel k = warp_reduce_kernel(2, 5);
  k.body = {serial_for("ft_i", "0LL", "1LL", {warp_reduce("ws", "sum")})};
  EXPECT_THROW(verify_ir(k), Error);
  k.body = {warp_reduce("x", "sum")};
  EXPECT_THROW(verify_ir(k), Error);
  EXPECT_THROW(warp_reduce("ws", "prod"), Error);
}

// MatMuls whose operands stage in float4 quads, and the shapes where quads must fall back: K and N
// of 1, 3, 4k+1, 4k+3, multiples of 4, partial tiles, broadcast batches, and a Slice fused in front
// (its output is not a group input: element loads).
Graph matmul_ops() {
  Graph g;
  int id = 0;
  auto mm = [&](Shape a, Shape b) {
    const std::string n = std::to_string(id++);
    add_op(g, "MatMul", {add_input(g, "a" + n, DType::kF32, std::move(a)), add_input(g, "b" + n, DType::kF32, std::move(b))});
  };
  for (int64_t k : {1, 3, 4, 9, 11, 36, 1000}) {
    for (int64_t n : {1, 3, 7, 8, 13}) mm({7, k}, {k, n});
  }
  mm({1, 12}, {12, 1});
  mm({2, 1, 3, 8}, {3, 8, 6});
  mm({3, 13}, {2, 13, 20});
  const int wide = add_input(g, "wide", DType::kF32, {5, 19});
  add_op(g, "MatMul", {add_op(g, "Slice", {wide}, attrs({{"starts", std::vector<int64_t>{0, 3}}, {"ends", std::vector<int64_t>{5, 19}},
                                                         {"steps", std::vector<int64_t>{1, 1}}})),
                       add_input(g, "ws", DType::kF32, {16, 9})});
  return g;
}

// Every MatMul its own group (the Slice with the MatMul after it).
std::vector<FusionGroup> matmul_groups(const Graph& g) {
  std::vector<FusionGroup> out;
  for (size_t n = 0; n < g.nodes().size(); ++n) {
    if (g.nodes()[n].op != "MatMul") continue;
    FusionGroup fg;
    if (n > 0 && g.nodes()[n - 1].op == "Slice") fg.nodes.push_back(static_cast<int>(n - 1));
    fg.nodes.push_back(static_cast<int>(n));
    planner::describe_group(g, fg);
    fg.outputs = {g.nodes()[n].outputs[0]};
    out.push_back(fg);
  }
  return out;
}

TEST(CodegenVector, StagedMatMulsWithQuadsAndTheirFallbacks) {
  const Graph g = matmul_ops();
  for (int64_t step : {8, 16}) {
    for (int threads : {32, 64}) {
      check_groups(g, matmul_groups(g), [&](const FusionGroup& fg) {
        const Shape& s = g.value(fg.outputs[0]).shape;
        std::vector<int64_t> tile(s.size(), 1);
        tile[s.size() - 2] = 4;
        tile[s.size() - 1] = threads == 32 ? 4 : 6;  // 6: column tiles that start unaligned
        return TileConfig{tile, step, threads, 4};
      }, "matmul quads/step " + std::to_string(step) + ", " + std::to_string(threads) + " threads");
    }
  }
}

// (B's rows of 7 floats: not a whole number of 16-byte chunks, so no cp.async ring; a row of B
// may start unaligned, so each vector checks its address.)
TEST(CodegenVector, QuadsInTheIrOnlyForContiguousInputs) {
  const Graph g = matmul_ops();
  const auto groups = matmul_groups(g);
  const TileConfig quads{{4, 8}, 8, 32, 4};
  const Kernel k = lower_group(g, groups[27], quads, "mm").kernel;  // [7, 36] x [36, 7]
  const std::string ir = to_text(k);
  EXPECT_NE(ir.find("let float4 ft_q = in0[ft_at .. +4]"), std::string::npos) << ir;
  EXPECT_NE(ir.find("let float4 ft_q = in1[ft_at .. +4]"), std::string::npos) << ir;
  EXPECT_NE(ir.find("ft_s + 3] = ft_q.w"), std::string::npos) << ir;
  EXPECT_NE(emit_cuda({k}).find("const float4 ft_q = ft_load_float4(in0, ft_at);"), std::string::npos);
  EXPECT_NE(emit_cuda({k}).find("ft_aligned16(in1, ft_at)"), std::string::npos);
  // Vector width 1, and the Slice's output (not a group input) as A: element loads.
  EXPECT_EQ(to_text(lower_group(g, groups[28], TileConfig{{4, 8}, 8, 32, 1}, "mm").kernel).find("float4"), std::string::npos);
  const std::string sliced = to_text(lower_group(g, groups.back(), TileConfig{{4, 8}, 8, 32, 4}, "mm").kernel);
  EXPECT_EQ(sliced.find("in0[ft_at .. +4]"), std::string::npos) << sliced;
  EXPECT_NE(sliced.find("in1[ft_at .. +4]"), std::string::npos) << sliced;
}

TEST(CodegenVector, MisalignedOperandsFallBackToElementLoads) {
  // The operands live 4 bytes into their buffers: no quad is 16-byte aligned, so every load takes
  // the element path (the executor's memcheck reports a misaligned quad); the product is still exact.
  Graph g;
  add_op(g, "MatMul", {add_input(g, "a", DType::kF32, {6, 16}), add_input(g, "b", DType::kF32, {16, 8})});
  const auto groups = matmul_groups(g);
  const LoweredKernel lk = lower_group(g, groups[0], TileConfig{{4, 8}, 8, 32, 4}, "mm");
  auto backend = backend::make_host_backend();
  auto module = backend->load({lk.kernel});
  std::vector<float> a(6 * 16), b(16 * 8);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(static_cast<int>(i % 7) - 3);
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(static_cast<int>(i % 5) - 2);
  for (size_t shift : {0, 4, 8}) {
    auto ab = backend->allocate(a.size() * 4 + 16), bb = backend->allocate(b.size() * 4 + 16), cb = backend->allocate(6 * 8 * 4);
    auto av = backend->view(*ab, shift, a.size() * 4), bv = backend->view(*bb, shift, b.size() * 4);
    av->upload(a.data(), a.size() * 4);
    bv->upload(b.data(), b.size() * 4);
    module->launch(lk.kernel.name, {av.get(), bv.get(), cb.get()});
    std::vector<float> c(6 * 8);
    cb->download(c.data(), c.size() * 4);
    for (size_t i = 0; i < 6; ++i) {
      for (size_t j = 0; j < 8; ++j) {
        float want = 0;
        for (size_t k = 0; k < 16; ++k) want += a[i * 16 + k] * b[k * 8 + j];
        EXPECT_EQ(c[i * 8 + j], want) << "shift " << shift << " at " << i << "," << j;
      }
    }
  }
}

// A quad goes to the staged slice as one 16-byte store: counted on the host, every such store is
// one request of four wavefronts (the least 32 lanes of 16 bytes need), where four scalar stores
// 16 bytes apart were four requests with 4-way bank conflicts (16 wavefronts).
TEST(CodegenVector, QuadsReachTheSliceInConflictFreeVectorStores) {
  Graph g;
  // B computed by the group (a Relu of an input): no cp.async ring, A's slice staged in quads.
  add_op(g, "MatMul", {add_input(g, "a", DType::kF32, {32, 64}), add_op(g, "Relu", {add_input(g, "b", DType::kF32, {64, 32})})});
  const std::vector<FusionGroup> groups = {whole_graph_group(g)};
  const LoweredKernel lk = lower_group(g, groups[0], TileConfig{{16, 32}, 16, 128, 4}, "mm");
  EXPECT_NE(to_text(lk.kernel).find(" .. +4] = float4 ft_q"), std::string::npos) << to_text(lk.kernel);
  EXPECT_NE(emit_cuda({lk.kernel}).find("ft_store_float4("), std::string::npos);
  auto backend = backend::make_host_backend();
  auto module = backend->load({lk.kernel});
  std::mt19937 rng(3);
  ASSERT_TRUE(backend::verify_kernel(g, groups[0], lk, *backend, *module, rng).ok);
  const simt::Counters c = module->counters().at("mm");
  int vector_stores = 0;
  for (const auto& [site, sc] : c.sites) {
    if (sc.global || !sc.store || sc.size != 16) continue;
    ++vector_stores;
    EXPECT_EQ(sc.units, 4 * sc.requests) << "a 16-byte slice store with bank conflicts";
  }
  EXPECT_EQ(vector_stores, 1);  // the A slice
}

// A float32 MatMul staged in vectors whose B is a float32 input with rows of whole 16-byte chunks
// streams its slices through a 3-stage cp.async ring (planner::simt_staging): A's too where A is
// such an input, else A computed by the group (a Slice) is stored by the threads into the same
// ring; one barrier a step where the unringed form has two. Every form (both operands copied, A
// stored, the steps split over blocks, edge tiles, a K that is not a multiple of the step) matches
// the reference under the executor's checks, and NVRTC compiles the text for sm_75 (no cp.async:
// the prelude copies at once), sm_80 and sm_90.
TEST(CodegenRing, Float32MatMulsStreamTheirSlicesThroughACpAsyncRing) {
  Graph g;
  add_op(g, "MatMul", {add_input(g, "a", DType::kF32, {40, 36}), add_input(g, "b", DType::kF32, {36, 24})});
  add_op(g, "MatMul", {add_op(g, "Slice", {add_input(g, "wide", DType::kF32, {20, 40})},
                              attrs({{"starts", std::vector<int64_t>{0, 4}}, {"ends", std::vector<int64_t>{20, 40}},
                                     {"steps", std::vector<int64_t>{1, 1}}})),
                       add_input(g, "wb", DType::kF32, {36, 12})});
  const auto groups = matmul_groups(g);
  const auto barriers = [](Kernel k) { return fusetune::testing::drop_barrier(k.body, -1); };
  const TileConfig ringed{{16, 16}, 8, 64, 4};
  const Kernel both = lower_group(g, groups[0], ringed, "mm").kernel;
  const std::string ir = to_text(both);
  EXPECT_NE(ir.find("] <- in0["), std::string::npos) << ir;
  EXPECT_NE(ir.find("] <- in1["), std::string::npos) << ir;
  EXPECT_NE(ir.find("cp.async.wait_group 1"), std::string::npos) << ir;
  EXPECT_EQ(ir.find("float4 ft_q"), std::string::npos) << ir;
  EXPECT_EQ(barriers(both) + 1, barriers(lower_group(g, groups[0], TileConfig{{16, 16}, 8, 64, 1}, "mm").kernel)) << ir;
  const std::string sliced = to_text(lower_group(g, groups[1], ringed, "mm").kernel);
  EXPECT_EQ(sliced.find("] <- in0["), std::string::npos) << sliced;  // the Slice's rows: computed, stored
  EXPECT_NE(sliced.find("] <- in1["), std::string::npos) << sliced;
  const fusetune::testing::CheckOptions archs{false, {"sm_75", "sm_80", "sm_90"}};
  for (int64_t step : {8, 16, 32}) {
    for (int splits : {1, 3}) {
      TileConfig cfg{{16, 16}, step, 64, 4};
      cfg.split_k = splits;
      check_groups(g, groups, [&](const FusionGroup&) { return cfg; }, "ring/" + cfg.str(), archs);
    }
  }
}

// A float32 implicit-GEMM Conv at vector width 4 whose K (C_in / group x window) is a multiple of 4
// streams both slices through a 3-stage cp.async ring (planner::conv_staging): the weights in
// 16-byte chunks, the im2col patches a 4-byte copy an element (zero-filled at the padding, past K
// and outside the region); one barrier a step where the form without a ring has two, 3 slots of
// shared memory charged by the planner. A pointwise, a strided and padded 3 x 3 and a grouped
// convolution, each with its bias and a Relu, at steps 8 and 16, unsplit and split 3 ways (steps
// that do not divide K), match the reference under the executor's checks, and NVRTC compiles the
// text for sm_75 (no cp.async: the prelude copies at once), sm_80 and sm_90. A K of 27 (a first
// layer's 3 x 3 x 3) takes no ring.
TEST(CodegenRing, ConvolutionsStreamWeightsAndPatchesThroughACpAsyncRing) {
  struct Case {
    const char* what;
    Shape x, w;
    Attributes a;
    std::vector<int64_t> tile;
  };
  const std::vector<Case> cases = {
      {"pointwise", {1, 72, 7, 7}, {24, 72, 1, 1}, {}, {1, 8, 1, 7}},
      {"strided 3x3, padded",
       {1, 12, 9, 9},
       {16, 12, 3, 3},
       attrs({{"strides", std::vector<int64_t>{2, 2}}, {"pads", std::vector<int64_t>{1, 1, 1, 1}}}),
       {1, 8, 2, 4}},
      {"grouped", {1, 16, 6, 6}, {16, 8, 3, 3}, attrs({{"group", int64_t{2}}, {"pads", std::vector<int64_t>{1, 1, 1, 1}}}),
       {1, 8, 3, 6}},
      {"first layer", {1, 3, 8, 8}, {8, 3, 3, 3}, attrs({{"pads", std::vector<int64_t>{1, 1, 1, 1}}}), {1, 8, 4, 8}}};
  const auto barriers = [](Kernel k) { return fusetune::testing::drop_barrier(k.body, -1); };
  const fusetune::testing::CheckOptions archs{false, {"sm_75", "sm_80", "sm_90"}};
  for (const Case& c : cases) {
    Graph g;
    fusetune::testing::conv_bias_relu(g, c.x, c.w, c.a);
    const FusionGroup group = whole_graph_group(g);
    const TileConfig ringed{c.tile, 8, 64, 4}, plain{c.tile, 8, 64, 1};
    const bool ring = planner::conv_staging(g, g.nodes()[0], {}, ringed).async_b;
    const std::string ir = to_text(lower_group(g, group, ringed, "k").kernel);
    EXPECT_EQ(ring, c.w[1] * c.w[2] * c.w[3] % 4 == 0) << c.what;
    EXPECT_EQ(ir.find("cp.async.16 ") != std::string::npos, ring) << c.what << "\n" << ir;
    EXPECT_EQ(ir.find("cp.async.4 ") != std::string::npos, ring) << c.what << "\n" << ir;
    if (!ring) continue;
    EXPECT_NE(ir.find("cp.async.wait_group 1"), std::string::npos) << c.what << "\n" << ir;
    EXPECT_EQ(barriers(lower_group(g, group, ringed, "k").kernel) + 1, barriers(lower_group(g, group, plain, "k").kernel)) << c.what;
    const planner::Device& h100 = planner::find_device("h100");
    const planner::Cost with = planner::evaluate_tile(g, group, h100, ringed), without = planner::evaluate_tile(g, group, h100, plain);
    ASSERT_TRUE(with.valid && without.valid) << c.what << ": " << with.reject << without.reject;
    EXPECT_GT(with.smem_bytes, 2 * without.smem_bytes) << c.what;  // three slots of each slice
    for (int64_t step : {8, 16}) {
      for (int splits : {1, 3}) {
        TileConfig cfg{c.tile, step, 64, 4};
        cfg.split_k = splits;
        check_groups(g, {group}, [&](const FusionGroup&) { return cfg; }, std::string("Conv ring ") + c.what + "/" + cfg.str(), archs);
      }
    }
  }
}

// Staged MatMuls of float16 and bfloat16 inputs move their operands in vectors of 8 (converted to
// float in the slice): rows of whole vectors (K = 40, N = 24), rows that are not (K = 36, N = 20:
// every vector whose row starts unaligned falls back to elements), column tiles that start
// unaligned (6 wide), steps of 8 and 16; each against the reference under the executor's checks.
TEST(CodegenVector, SixteenBitOperandsStageInVectorsOfEight) {
  for (DType dt : {DType::kF16, DType::kBF16}) {
    for (const auto& [m, k, n] : std::vector<std::array<int64_t, 3>>{{7, 40, 24}, {6, 36, 20}}) {
      Graph g;
      add_op(g, "MatMul", {add_input(g, "a", dt, {m, k}), add_input(g, "b", dt, {k, n})});
      const auto groups = matmul_groups(g);
      for (int64_t step : {8, 16}) {
        for (int64_t width : {8, 6}) {
          check_groups(g, groups, [&](const FusionGroup&) { return TileConfig{{4, width}, step, 32, 4}; },
                       std::string(dtype_name(dt)) + " " + std::to_string(m) + "x" + std::to_string(k) + "x" +
                           std::to_string(n) + ", step " + std::to_string(step) + ", width " + std::to_string(width));
        }
      }
      const std::string ir = to_text(lower_group(g, groups[0], TileConfig{{4, 8}, 8, 32, 4}, "mm").kernel);
      EXPECT_NE(ir.find("let ft_u16x8 ft_q = in0[ft_at .. +8]"), std::string::npos) << ir;
      EXPECT_NE(ir.find("let ft_u16x8 ft_q = in1[ft_at .. +8]"), std::string::npos) << ir;
    }
  }
}

// Element loops in 16-byte vectors: Relu(x * y + bias) over rows of W elements, for float32,
// float16 and bfloat16, on tiles whose rows hold whole vectors, end in a partial one, or start
// unaligned (12 elements: the second tile's row starts half-way through a vector), and on rows of
// 22 (not whole 16-byte units: no vector loop at all). Every case matches the reference under the
// executor's checks; where rows are whole vectors the IR reads x, y and the bias as vectors and
// writes the output as one, and the host run makes 16-byte global loads and stores.
TEST(CodegenVector, ElementLoopsMoveSixteenBytesWhereRowsAllow) {
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (int64_t w : {24, 22}) {
      Graph g;
      const int x = add_input(g, "x", dt, {3, 5, w}), y = add_input(g, "y", dt, {3, 5, w}), bias = add_input(g, "bias", dt, {w});
      add_op(g, "Relu", {add_op(g, "Add", {add_op(g, "Mul", {x, y}), bias})});
      const FusionGroup group = whole_graph_group(g);
      const std::string label = std::string(dtype_name(dt)) + " rows of " + std::to_string(w);
      for (const auto& [tile, threads] : std::vector<std::pair<std::vector<int64_t>, int>>{
               {{1, 2, 16}, 32}, {{1, 1, 12}, 32}, {{2, 5, w}, 64}}) {
        check_groups(g, {group}, [&](const FusionGroup&) { return TileConfig{tile, 0, threads, 1}; },
                     label + ", tile " + std::to_string(tile[1]) + "x" + std::to_string(tile[2]));
      }
      const LoweredKernel lk = lower_group(g, group, TileConfig{{1, 2, 16}, 0, 32, 1}, "ew");
      const std::string ir = to_text(lk.kernel), vec = vector_ctype(dt), lanes = std::to_string(vector_lanes(dt));
      if (w == 22) {
        EXPECT_EQ(ir.find(vec), std::string::npos) << label << "\n" << ir;
        continue;
      }
      for (const char* in : {"in0", "in1", "in2"}) {
        EXPECT_NE(ir.find("let " + vec + " ft_x"), std::string::npos) << label << "\n" << ir;
        EXPECT_NE(ir.find(std::string(in) + "[ft_a"), std::string::npos) << label << ": " << in << " not read as a vector\n" << ir;
      }
      EXPECT_NE(ir.find(" .. +" + lanes + "] = " + vec + " ft_w"), std::string::npos) << label << "\n" << ir;
      auto backend = backend::make_host_backend();
      auto module = backend->load({lk.kernel});
      std::mt19937 rng(11);
      ASSERT_TRUE(backend::verify_kernel(g, group, lk, *backend, *module, rng).ok) << label;
      int wide_loads = 0, wide_stores = 0;
      const simt::Counters counted = module->counters().at("ew");
      for (const auto& [site, sc] : counted.sites) {
        if (sc.global && sc.size == 16) ++(sc.store ? wide_stores : wide_loads);
      }
      EXPECT_EQ(wide_loads, 3) << label;  // x, y and the bias
      EXPECT_EQ(wide_stores, 1) << label;
    }
  }
}

// A Concat along the innermost axis, Relu(Concat(a, b)) over rows of 24: where both pieces'
// widths are multiples of a 16-byte vector, a run of one vector lies in one piece, and each
// piece's read is one vector load predicated on its piece (the condition proved the same for
// every element of the run, codegen/index_expr.h's aligned shift); pieces of 12 and 12 in 16-bit
// types straddle a run of 8, so they stay element by element, though a's rows are aligned for
// every other row (a load of a run across the boundary would read the next row's elements where
// b's belong: the reference catches it). Every case against the reference under the executor's
// checks, tiles whole and partial.
TEST(CodegenVector, ConcatPiecesAreReadAsVectorsWhereARunLiesInOne) {
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (int64_t p : {8, 16, 12}) {
      Graph g;
      const int a = add_input(g, "a", dt, {3, 5, p}), b = add_input(g, "b", dt, {3, 5, 24 - p});
      add_op(g, "Relu", {add_op(g, "Concat", {a, b}, attrs({{"axis", int64_t{-1}}}))});
      const FusionGroup group = whole_graph_group(g);
      const std::string label = std::string(dtype_name(dt)) + " pieces of " + std::to_string(p) + " and " + std::to_string(24 - p);
      for (const auto& [tile, threads] : std::vector<std::pair<std::vector<int64_t>, int>>{{{1, 2, 16}, 32}, {{2, 5, 24}, 64}}) {
        check_groups(g, {group}, [&](const FusionGroup&) { return TileConfig{tile, 0, threads, 1}; },
                     label + ", tile " + std::to_string(tile[1]) + "x" + std::to_string(tile[2]));
      }
      const std::string cuda = emit_cuda({lower_group(g, group, TileConfig{{2, 5, 24}, 0, 64, 1}, "cat").kernel});
      const std::regex guarded(R"(\? ft_load_\w+\(in[01])");
      const auto predicated = static_cast<size_t>(std::distance(std::sregex_iterator(cuda.begin(), cuda.end(), guarded), std::sregex_iterator()));
      EXPECT_EQ(predicated, p % vector_lanes(dt) == 0 ? 2u : 0u) << label << "\n" << cuda;
    }
  }
}

// A MatMul with a bias and a Relu on tiles that divide it evenly: the kernel executes exactly the
// arithmetic the cost model charges (2 M N K for the product, M N for the bias add; the Relu's
// comparison is no operation), counted on the host and modeled by the planner independently.
// The group lowered with cfg and verified on the host executor (checks on): its counters, and the
// cost model's arithmetic for the same candidate.
std::pair<simt::Counters, int64_t> counted_and_modeled(const Graph& g, const FusionGroup& group, const TileConfig& cfg,
                                                       uint32_t seed) {
  const LoweredKernel lk = lower_group(g, group, cfg, "counted");
  auto backend = backend::make_host_backend();
  auto module = backend->load({lk.kernel});
  std::mt19937 rng(seed);
  EXPECT_TRUE(backend::verify_kernel(g, group, lk, *backend, *module, rng).ok) << cfg.str();
  return {module->counters().at("counted"), planner::evaluate_tile(g, group, planner::find_device("h100"), cfg).flops};
}

TEST(CodegenCounters, FloatingPointOperationsOfAnEvenlyTiledMatMulAreTheModeledOnes) {
  Graph g;
  const int mm = add_op(g, "MatMul", {add_input(g, "a", DType::kF32, {32, 64}), add_input(g, "b", DType::kF32, {64, 32})});
  add_op(g, "Relu", {add_op(g, "Add", {mm, add_input(g, "bias", DType::kF32, {32})})});
  const FusionGroup group = whole_graph_group(g);
  for (const TileConfig& cfg : {TileConfig{{16, 32}, 16, 128, 4}, TileConfig{{8, 8}, 8, 64, 1}, TileConfig{{32, 32}, 64, 256, 1}}) {
    const auto [c, modeled] = counted_and_modeled(g, group, cfg, 5);
    EXPECT_EQ(c.flops, 2u * 32u * 32u * 64u + 32u * 32u) << cfg.str();
    EXPECT_EQ(static_cast<int64_t>(c.flops) + 32 * 32, modeled) << cfg.str() << ": the model charges the Relu too";
    EXPECT_EQ(c.special_ops, 0u);
  }
}

// A cyclic shift of a MatMul's rows (Swin's shifted windows: two Slices and a Concat), one row per
// tile: each tile needs one row of the product. A tile's row comes from one Concat input only, so
// the other input's box is empty and must not widen the product's region (it once spanned from
// the empty box's clipped bound to the needed row: up to 8 rows computed per tile). Counted on the
// host, the kernel executes what the model charges, less the Relu.
TEST(CodegenCounters, AShiftedProductIsComputedOncePerTile) {
  Graph g;
  const int y = add_op(g, "MatMul", {add_input(g, "a", DType::kF32, {8, 16}), add_input(g, "b", DType::kF32, {16, 8})});
  const auto rows = [](int64_t from, int64_t to) {
    return attrs({{"starts", std::vector<int64_t>{from, 0}}, {"ends", std::vector<int64_t>{to, 8}},
                  {"steps", std::vector<int64_t>{1, 1}}});
  };
  const int head = add_op(g, "Slice", {y}, rows(6, 8));
  const int tail = add_op(g, "Slice", {y}, rows(0, 6));
  add_op(g, "Relu", {add_op(g, "Concat", {head, tail}, attrs({{"axis", int64_t{0}}}))});
  const FusionGroup group = whole_graph_group(g);
  // Two-row tiles: rows 0-1 come from the head (product rows 6-7), the other tiles from the tail;
  // none straddles the Concat's boundary, so each computes two rows of the product.
  for (const TileConfig& cfg : {TileConfig{{1, 8}, 16, 32, 1}, TileConfig{{1, 8}, 0, 64, 1}, TileConfig{{2, 8}, 8, 32, 1}}) {
    const auto [c, modeled] = counted_and_modeled(g, group, cfg, 9);
    EXPECT_EQ(c.flops, 2u * 8u * 8u * 16u) << cfg.str();
    EXPECT_EQ(static_cast<int64_t>(c.flops) + 8 * 8, modeled) << cfg.str() << ": the model charges the Relu too";
  }
}

// A class token's row picked by one constant index (ViT's head): the index is a literal in the
// kernel, which loads nothing for it, and the row it picks (2, written -3) is the one computed.
TEST(CodegenOps, AConstantGatherIndexIsALiteral) {
  Graph g;
  const int y = add_op(g, "MatMul", {add_input(g, "a", DType::kF32, {5, 8}), add_input(g, "b", DType::kF32, {8, 16})});
  const int idx = g.add_constant("cls", Tensor::scalar_int(DType::kI64, -3));
  add_op(g, "Gather", {y, idx}, attrs({{"axis", int64_t{0}}}));
  const FusionGroup group = whole_graph_group(g);
  const LoweredKernel lk = lower_group(g, group, TileConfig{{16}, 8, 32, 1}, "cls");
  const std::string cuda = emit_cuda({lk.kernel});
  EXPECT_NE(cuda.find("(-3 < 0 ? -3 + 5 : -3)"), std::string::npos) << cuda;
  ASSERT_NE(cuda.find("FT_GLOBAL(const long long) in2"), std::string::npos) << cuda;
  EXPECT_EQ(cuda.find("in2["), std::string::npos) << "the index parameter is not read\n" << cuda;
  auto backend = backend::make_host_backend();
  auto module = backend->load({lk.kernel});
  std::mt19937 rng(4);
  EXPECT_TRUE(backend::verify_kernel(g, group, lk, *backend, *module, rng).ok);
}

// Convolutions with their epilogues as the fusion pass builds them: 1x1, 3x3, 5x5 and 7x7
// windows; strides 1 and 2; no, symmetric and asymmetric padding; dilation 2; groups 1, 2, 3
// (channel tiles that straddle groups) and depthwise (with a channel multiplier); channel and
// spatial sizes that are not tile multiples (C_in 3, 7, 33; H = W 1, 5, 17; C_out 1, 10, 65); a
// 1-D Conv.
Graph conv_ops() {
  Graph g;
  int id = 0;
  // Conv of x [N, C_in, H, W] with weights [C_out, C_in / groups, k, k] (or 1-D when h == 0).
  auto conv = [&](Shape x, int64_t cout, int64_t kernel, int64_t stride, std::vector<int64_t> pads, int64_t dil,
                  int64_t groups, bool bias) {
    const std::string n = std::to_string(id++);
    const size_t sp = x.size() - 2;
    Shape w = {cout, x[1] / groups};
    for (size_t i = 0; i < sp; ++i) w.push_back(kernel);
    std::vector<int> in = {add_input(g, "x" + n, DType::kF32, x), add_input(g, "w" + n, DType::kF32, w)};
    if (bias) in.push_back(add_input(g, "b" + n, DType::kF32, {cout}));
    return add_op(g, "Conv", in, attrs({{"group", groups}, {"strides", std::vector<int64_t>(sp, stride)},
                                        {"dilations", std::vector<int64_t>(sp, dil)}, {"pads", pads}}));
  };
  const std::vector<int64_t> none = {0, 0, 0, 0}, one = {1, 1, 1, 1};
  add_op(g, "Relu", {conv({2, 7, 5, 5}, 10, 1, 1, none, 1, 1, true)});
  add_op(g, "Clip", {conv({1, 33, 17, 17}, 65, 3, 1, one, 1, 1, true)}, attrs({{"min", 0.0f}, {"max", 6.0f}}));
  const int silu = conv({2, 3, 17, 17}, 10, 3, 2, one, 1, 1, true);
  add_op(g, "Mul", {silu, add_op(g, "Sigmoid", {silu})});
  conv({1, 7, 5, 5}, 1, 5, 1, {2, 2, 2, 2}, 1, 1, false);
  add_op(g, "Relu", {conv({1, 3, 17, 17}, 10, 7, 2, {3, 3, 3, 3}, 1, 1, true)});
  conv({1, 7, 17, 17}, 10, 3, 1, {0, 1, 2, 0}, 2, 1, true);
  add_op(g, "Add", {conv({1, 10, 5, 5}, 6, 3, 1, one, 1, 2, true), add_input(g, "res", DType::kF32, {1, 6, 5, 5})});
  conv({1, 12, 5, 5}, 9, 3, 2, {1, 0, 0, 1}, 1, 3, true);
  add_op(g, "Clip", {conv({1, 33, 17, 17}, 33, 3, 1, one, 1, 33, true)}, attrs({{"min", 0.0f}, {"max", 6.0f}}));
  conv({2, 7, 5, 5}, 7, 5, 2, {2, 2, 2, 2}, 1, 7, false);
  conv({1, 10, 17, 17}, 10, 7, 1, {3, 3, 3, 3}, 1, 10, true);
  conv({1, 3, 5, 5}, 6, 3, 1, {1, 0, 1, 2}, 2, 3, true);
  conv({1, 33, 1, 1}, 65, 1, 1, none, 1, 1, true);
  conv({2, 7, 1, 1}, 10, 3, 1, one, 1, 1, false);
  const int res = add_input(g, "r", DType::kF32, {1, 7, 5, 5});
  add_op(g, "Relu", {add_op(g, "Add", {conv({1, 7, 5, 5}, 7, 3, 1, one, 1, 1, true), res})});
  conv({2, 5, 9}, 4, 3, 1, {1, 2}, 1, 1, true);
  // Every value no node reads is a graph output.
  std::set<int> read;
  for (const Node& n : g.nodes()) read.insert(n.inputs.begin(), n.inputs.end());
  for (const Node& n : g.nodes()) {
    if (!read.count(n.outputs[0])) g.outputs().push_back(n.outputs[0]);
  }
  return g;
}

// The fusion pass's groups of conv_ops (one per Conv with its epilogue).
std::vector<FusionGroup> conv_groups(const Graph& g) {
  std::vector<FusionGroup> out;
  for (const FusionGroup& fg : planner::fuse(g).groups) {
    for (int n : fg.nodes) {
      if (g.nodes()[static_cast<size_t>(n)].op == "Conv") out.push_back(fg);
    }
  }
  return out;
}

TEST(CodegenConv, StagedConvolutionsOnOddShapesAndTiles) {
  const Graph g = conv_ops();
  const auto groups = conv_groups(g);
  ASSERT_EQ(groups.size(), 16u);
  struct Shape4 {
    int64_t batch, channels, pixels, step;
    int threads, vector;
  };
  for (const Shape4& t : {Shape4{1, 4, 3, 8, 32, 4}, Shape4{2, 16, 4, 16, 64, 1}, Shape4{1, 32, 8, 32, 128, 4}}) {
    check_groups(g, groups, [&](const FusionGroup& fg) {
      const Shape& s = g.value(fg.outputs[0]).shape;
      std::vector<int64_t> tile = {t.batch, t.channels};
      for (size_t d = 2; d < s.size(); ++d) tile.push_back(d + 1 == s.size() ? t.pixels + 2 : t.pixels);
      return TileConfig{tile, t.step, t.threads, t.vector};
    }, "conv/channels " + std::to_string(t.channels) + ", step " + std::to_string(t.step));
  }
  check_groups(g, groups, [&](const FusionGroup& fg) { return best_config(g, fg); }, "conv/best tiles");
}

TEST(CodegenConv, IrShowsTheImplicitGemmAndTheDepthwiseWindow) {
  const Graph g = conv_ops();
  const auto groups = conv_groups(g);
  // 3x3, 33 -> 65 channels, Clip: rows of output channels x columns of pixels, K = 33 * 9 in
  // steps of 16; patches zero-filled outside the input.
  const Kernel gemm = lower_group(g, groups[1], TileConfig{{1, 16, 4, 8}, 16, 64, 1}, "conv").kernel;
  const std::string ir = to_text(gemm);
  EXPECT_NE(ir.find("thread-local tc"), std::string::npos) << ir;
  EXPECT_NE(ir.find("for.uniform ft_ks in [0, 19)"), std::string::npos) << ir;
  EXPECT_NE(ir.find("ft_k < 297"), std::string::npos) << ir;
  EXPECT_NE(ir.find("ft_rb3"), std::string::npos) << ir;
  EXPECT_NE(ir.find("ft_min(16, 297 - ft_ks * 16)"), std::string::npos) << ir;
  // Depthwise 3x3: the input window staged once, no reduction-step loop.
  const Kernel dw = lower_group(g, groups[8], TileConfig{{1, 8, 4, 8}, 8, 64, 1}, "dw").kernel;
  const std::string dir = to_text(dw);
  EXPECT_NE(dir.find("cw"), std::string::npos) << dir;
  EXPECT_EQ(dir.find("for.uniform"), std::string::npos) << dir;
  // Without a reduction step: the generic schedule, each output's full reduction.
  const std::string plain = to_text(lower_group(g, groups[1], TileConfig{{1, 16, 4, 8}, 0, 64, 1}, "conv").kernel);
  EXPECT_EQ(plain.find("for.uniform"), std::string::npos) << plain;
  EXPECT_EQ(plain.find("thread-local"), std::string::npos) << plain;
}

// The planner's top candidate of every Conv group of the small CNN models compiles for sm_80 and
// sm_90 without spills at the register cap of its block size (what a register-hungry tile would
// do); prints the registers. Below the cap ptxas may spill a few bytes of its own accord to fit
// more blocks an SM (convnext_t's Conv+LayerNorm+MatMul on 512 threads: 4 to 8 bytes at 32
// registers where it may use 128): printed, and compile_bundle replaces such a kernel where a lower-ranked one does not spill
// (JobPlanner.AnExportShipsAMeasuredSpillingKernelWhereAModeledPlanReplacesIt).
TEST(CodegenConv, TopCandidatesOfTheModelsCompileWithoutSpills) {
  if (!backend::nvrtc_available()) GTEST_SKIP() << "NVRTC not available in this build";
  for (const char* model : {"cnn_small", "convnext_t", "efficientnet_b0", "mobilenet_v2", "resnet_small"}) {
    const Graph g = fusetune::testing::load_test_model(model);
    std::vector<Kernel> kernels;
    std::vector<std::string> configs;
    for (const FusionGroup& fg : planner::fuse(g).groups) {
      const bool conv = std::any_of(fg.nodes.begin(), fg.nodes.end(),
                                    [&](int n) { return g.nodes()[static_cast<size_t>(n)].op == "Conv"; });
      if (!conv) continue;
      const TileConfig cfg = best_config(g, fg);
      kernels.push_back(lower_group(g, fg, cfg, "k" + std::to_string(kernels.size())).kernel);
      configs.push_back(fg.pattern + " " + cfg.str());
    }
    ASSERT_FALSE(kernels.empty()) << model;
    const std::string cuda = emit_cuda(kernels);
    for (const char* arch : {"sm_80", "sm_90"}) {
      const backend::CompiledCuda cc = backend::compile_cuda(cuda, arch);
      ASSERT_FALSE(cc.cubin.empty()) << model << " " << arch << "\n" << cc.log;
      for (size_t i = 0; i < kernels.size(); ++i) {
        const auto& res = cc.resources.at(kernels[i].name);
        const int cap = std::min(255, 65536 / kernels[i].threads);
        if (res.spills() && res.registers < cap) {
          std::printf("NOTE: %s %s %s: %lld bytes spilled at %d registers, under the cap of %d: ptxas's occupancy trade\n", model,
                      arch, configs[i].c_str(), static_cast<long long>(res.spill_store_bytes), res.registers, cap);
        } else {
          EXPECT_FALSE(res.spills()) << model << " " << arch << " " << configs[i] << ": " << res.spill_store_bytes
                                     << " bytes spilled at " << res.registers << " registers";
        }
        std::printf("%s %s %s: %d registers\n", model, arch, configs[i].c_str(), res.registers);
      }
    }
  }
}

// The same module compiled again in one process still reports every kernel's resources. On a
// machine with a CUDA driver, NVRTC 13 answers a repeated compilation from its own cache without
// ptxas's report unless told --no-cache (seen on an H100); without a driver this holds either way.
TEST(Nvrtc, TheSameModuleCompiledAgainReportsEveryKernelsResources) {
  if (!backend::nvrtc_available()) GTEST_SKIP() << "NVRTC not available in this build";
  const std::string cuda =
      "extern \"C\" __global__ void twice(float* p) { p[threadIdx.x] *= 2.0f; }\n"
      "extern \"C\" __global__ void reverse(float* p) {\n"
      "  __shared__ float s[64];\n"
      "  s[threadIdx.x] = p[threadIdx.x];\n"
      "  __syncthreads();\n"
      "  p[threadIdx.x] = s[63 - threadIdx.x];\n"
      "}\n";
  for (int round = 0; round < 3; ++round) {
    const backend::CompiledCuda cc = backend::compile_cuda(cuda, "sm_90");
    for (const char* kernel : {"twice", "reverse"}) {
      ASSERT_TRUE(cc.resources.count(kernel)) << "compilation " << round + 1 << ": no ptxas report for " << kernel << "\n" << cc.log;
      EXPECT_GT(cc.resources.at(kernel).registers, 0) << kernel;
    }
    EXPECT_EQ(cc.resources.at("reverse").shared_bytes, 256);
  }
}

// A ScatterND whose updates are computed (a decoder's mask written into a slice): the planner keeps
// the computation out of the scatter's group, whose stage reads indices and updates from memory,
// and every group lowers and matches the reference.
TEST(CodegenScatter, ComputedUpdatesStayOutsideTheScattersGroup) {
  Graph g;
  const int x = add_input(g, "x", DType::kF32, {4, 8});
  const int u = add_input(g, "u", DType::kF32, {2, 8});
  const int upd = add_op(g, "Mul", {u, u}, {}, "square");
  const int rows = g.add_constant("rows", Tensor::from_ints(DType::kI64, {2, 1}, std::vector<int64_t>{0, 2}));
  const int out = add_op(g, "ScatterND", {x, rows, upd}, attrs({{"reduction", std::string("none")}}), "scatter");
  g.outputs().push_back(out);
  const planner::FusionPlan plan = planner::fuse(g);
  ASSERT_EQ(plan.groups.size(), 2u);
  auto backend = backend::make_host_backend();
  std::mt19937 rng(3);
  for (size_t k = 0; k < plan.groups.size(); ++k) {
    const FusionGroup& group = plan.groups[k];
    const auto cands = planner::tile_candidates(g, group, planner::find_device("h100"), {});
    ASSERT_FALSE(cands.empty());
    const LoweredKernel lk = lower_group(g, group, cands.front().config, "s" + std::to_string(k));
    auto module = backend->load({lk.kernel});
    const backend::VerifyResult r = backend::verify_kernel(g, group, lk, *backend, *module, rng);
    EXPECT_TRUE(r.ok) << group.pattern << ": " << r.detail;
  }
}

// A stage the code generator cannot emit fails naming its node and group: here a ScatterND whose
// indices are computed inside the group.
TEST(CodegenErrors, AStageThatCannotBeEmittedNamesItsNode) {
  Graph g;
  const int x = add_input(g, "x", DType::kF32, {4, 3});
  const int idx = add_op(g, "Add", {add_input(g, "i", DType::kI64, {2, 1}),
                                    g.add_constant("one", Tensor::from_ints(DType::kI64, {}, std::vector<int64_t>{1}))});
  add_op(g, "ScatterND", {x, idx, add_input(g, "upd", DType::kF32, {2, 3})}, attrs({{"reduction", std::string("none")}}),
         "the_scatter");
  FusionGroup group = whole_graph_group(g);
  group.inputs = {g.inputs()[0], g.inputs()[1], g.inputs()[2]};
  try {
    lower_group(g, group, planner::tile_candidates(g, group, planner::find_device("h100"), {}).front().config, "k");
    ADD_FAILURE() << "lowered";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind("node 'the_scatter' (ScatterND) of group ", 0), 0u) << msg;
    EXPECT_NE(msg.find("indices and updates must be group inputs"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace fusetune::codegen

