// Fusion, tiling and selection: structural guarantees on real models, the patterns the planner
// must find in a BERT layer, the cost model's penalties, and measured costs overriding modeled ones.
#include <gtest/gtest.h>

#include <numeric>

#include <algorithm>
#include <filesystem>
#include <map>
#include <random>
#include <set>

#include "importer/importer.h"
#include "planner/select.h"
#include "unit/graph_helpers.h"
#include "unit/test_seed.h"

namespace fusetune::planner {
namespace {

namespace fs = std::filesystem;
using fusetune::testing::add_input;
using fusetune::testing::add_op;
using fusetune::testing::attrs;
using fusetune::testing::random_constant;

Graph load(const std::string& name) { return fusetune::testing::load_test_model(name); }

void expect_valid_partition(const Graph& g, const FusionPlan& plan) {
  std::vector<int> owner(g.nodes().size(), -1);
  for (size_t k = 0; k < plan.groups.size(); ++k) {
    for (int n : plan.groups[k].nodes) {
      EXPECT_EQ(owner[static_cast<size_t>(n)], -1) << "node " << n << " in two groups";
      owner[static_cast<size_t>(n)] = static_cast<int>(k);
    }
  }
  for (size_t n = 0; n < owner.size(); ++n) EXPECT_GE(owner[n], 0) << "node " << n << " in no group";
  const std::vector<int> prod = g.producers();
  for (size_t k = 0; k < plan.groups.size(); ++k) {
    const FusionGroup& fg = plan.groups[k];
    for (int in : fg.inputs) {  // groups come in dependency order
      const int p = prod[static_cast<size_t>(in)];
      if (p >= 0) {
        EXPECT_LT(owner[static_cast<size_t>(p)], static_cast<int>(k));
      }
    }
    const std::set<int> members(fg.nodes.begin(), fg.nodes.end());
    int sinks = 0;
    for (int n : fg.nodes) {
      bool read_inside = false;
      for (int m : fg.nodes) {
        for (int in : g.nodes()[static_cast<size_t>(m)].inputs) read_inside = read_inside || in == g.nodes()[static_cast<size_t>(n)].outputs[0];
      }
      sinks += read_inside ? 0 : 1;
    }
    EXPECT_EQ(sinks, 1) << fg.pattern;
    EXPECT_FALSE(fg.outputs.empty());
  }
}

TEST(Fusion, PartitionsAreCompleteAcyclicAndSingleSink) {
  for (const char* name : {"bert", "cnn_small", "convnext_t", "efficientnet_b0", "mobilenet_v2", "nerf_mlp",
                           "resnet_small", "swin_t", "unet_small", "vit"}) {
    SCOPED_TRACE(name);
    const Graph g = load(name);
    expect_valid_partition(g, fuse(g));
    expect_valid_partition(g, unfused(g));
    const ModelPlan plan = plan_model(g, find_device("h100"));
    FusionPlan chosen;
    for (const GroupPlan& gp : plan.groups) chosen.groups.push_back(gp.group);
    expect_valid_partition(g, chosen);
    EXPECT_LE(plan.launches, static_cast<int>(g.nodes().size()));
  }
}

TEST(Fusion, FindsTheBertLayerPatterns) {
  const Graph g = load("bert");
  const FusionPlan plan = fuse(g);
  auto group_of = [&](const std::string& node_name) -> const FusionGroup& {
    for (const FusionGroup& fg : plan.groups) {
      for (int n : fg.nodes) {
        if (g.nodes()[static_cast<size_t>(n)].name == node_name) return fg;
      }
    }
    throw std::runtime_error("no node " + node_name);
  };
  // Attention: QK^T, scale, mask, softmax and the product with V in one group.
  const FusionGroup& attn = group_of("/layers.0/attn/Softmax");
  std::multiset<std::string> ops;
  for (int n : attn.nodes) ops.insert(g.nodes()[static_cast<size_t>(n)].op);
  EXPECT_EQ(ops.count("MatMul"), 2u);
  EXPECT_EQ(ops.count("Softmax"), 1u);
  // The FFN's GELU (Div, Erf, Add, Mul, Mul) is the epilogue of its first projection.
  EXPECT_EQ(&group_of("/layers.0/act/Erf"), &group_of("/layers.0/ffn_in/MatMul"));
  // The query, key and value projections are one product (importer/pack_sibling_products.h),
  // their biases one Add in its epilogue; the attention reads its slices through the head
  // transposes (absorbed into its index maps).
  const std::string qkv = "/layers.0/attn/query/MatMul+/layers.0/attn/key/MatMul+/layers.0/attn/value/MatMul";
  EXPECT_EQ(&group_of(qkv + "/bias"), &group_of(qkv));
  EXPECT_EQ(&group_of("/layers.0/attn/key/MatMul/columns"), &attn);
  // Deterministic.
  const FusionPlan again = fuse(g);
  ASSERT_EQ(again.groups.size(), plan.groups.size());
  for (size_t k = 0; k < plan.groups.size(); ++k) EXPECT_EQ(again.groups[k].nodes, plan.groups[k].nodes);
}

// A LLaMA layer with grouped-query attention (tests/data/models/llama_gqa, 4 query heads over 2
// key/value heads): RMSNorm is the prologue of the q, k and v projections' one product, the rotary
// embedding part of the attention launch, the causal softmax is stitched between the two attention MatMuls, the
// SiLU gate is the epilogue of the gate and up projections' one product (importer/
// pair_gated_products.h: its node named after both, the up projection last), and the repeat of K
// and V for the query heads
// (Expand) is read by the attention launch rather than written by the projections.
TEST(Fusion, FindsTheLlamaLayerPatternsWithoutWritingRepeatedKeys) {
  const Graph g = load("llama_gqa");
  const FusionPlan plan = fuse(g);
  const auto group_of = [&](const std::string& suffix) -> const FusionGroup& {
    for (const FusionGroup& fg : plan.groups) {
      for (int n : fg.nodes) {
        const std::string& name = g.nodes()[static_cast<size_t>(n)].name;
        if (name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) return fg;
      }
    }
    throw std::runtime_error("no node ending in " + suffix);
  };
  const std::string layer = "/model/model/layers.0/";
  // The q, k and v projections are one product (importer/pack_sibling_products.h, its node named
  // after the three, v's last), RMSNorm its prologue; the rotary embeddings of Q and K are computed
  // by the attention launch from the product's slices.
  EXPECT_EQ(&group_of(layer + "input_layernorm/ReduceMean"), &group_of(layer + "self_attn/v_proj/MatMul"));
  EXPECT_EQ(&group_of(layer + "self_attn/q_proj/MatMul/columns"), &group_of(layer + "self_attn/Softmax"));
  EXPECT_EQ(&group_of(layer + "self_attn/Neg"), &group_of(layer + "self_attn/Softmax"));
  EXPECT_EQ(&group_of(layer + "self_attn/Neg_1"), &group_of(layer + "self_attn/Softmax"));
  EXPECT_EQ(&group_of(layer + "self_attn/Softmax"), &group_of(layer + "self_attn/MatMul_1"));
  EXPECT_EQ(&group_of(layer + "mlp/act_fn/Sigmoid"), &group_of(layer + "mlp/gate_proj/MatMul+" + layer + "mlp/up_proj/MatMul"));
  EXPECT_EQ(&group_of(layer + "mlp/Mul"), &group_of(layer + "mlp/up_proj/MatMul"));
  int repeats = 0;
  for (const Node& n : g.nodes()) {
    if (n.op != "Expand" || numel(g.value(n.outputs[0]).shape) <= numel(g.value(n.inputs[0]).shape)) continue;
    ++repeats;
    const FusionGroup& holder = group_of(n.name);
    std::multiset<std::string> ops;
    for (int m : holder.nodes) ops.insert(g.nodes()[static_cast<size_t>(m)].op);
    EXPECT_EQ(ops.count("Softmax"), 1u) << n.name << " is not read by the attention launch";
    for (const int out : holder.outputs) EXPECT_NE(out, n.outputs[0]) << n.name << " is written";
  }
  EXPECT_EQ(repeats, 4);  // K and V of both layers
}

// A Gather that repeats its data (a convolution's patches, each element read by up to a window's
// taps) is not joined to the light group that computes the data: the group would write the
// repeated copies, or, pulled into the product that reads the patches, compute each element once
// a tap. It stays with its reader, and the cost function decides whether the data's group joins
// too; here (a cost that charges a group computing the data inside the gather's group 10 times a
// launch) it stays a group of its own. A Gather that only subsamples joins its producer.
TEST(Fusion, AGatherThatRepeatsItsDataStaysWithItsReader) {
  for (const bool repeats : {true, false}) {
    Graph g;
    const int x = add_input(g, "x", DType::kF32, {1, 8, 36});
    const int data = add_op(g, "Relu", {x}, {}, "data");
    // 9 taps x 16 positions of a 6 x 6 map (3x3 windows, stride 1, no padding), or 16 positions.
    std::vector<int64_t> index;
    for (int64_t t = 0; t < (repeats ? 9 : 1); ++t) {
      for (int64_t p = 0; p < 16; ++p) index.push_back((p / 4 + t / 3) * 6 + p % 4 + t % 3);
    }
    const Shape is = repeats ? Shape{9, 16} : Shape{16};
    const int indices = g.add_constant("taps", Tensor::from_ints(DType::kI64, is, index));
    const int patches = add_op(g, "Gather", {data, indices}, attrs({{"axis", int64_t{2}}}), "patches");
    const int b = add_op(g, "Reshape", {patches}, attrs({{"shape", std::vector<int64_t>{repeats ? 72 : 8, 16}}}));
    g.outputs().push_back(add_op(g, "MatMul", {random_constant(g, "w", DType::kF32, {4, repeats ? 72 : 8}, 3), b}, {}, "product"));
    FusionOptions opt;
    opt.cost = [&](const std::vector<int>& nodes) {
      bool computes = false, gathers = false;
      for (int n : nodes) {
        computes = computes || g.nodes()[static_cast<size_t>(n)].name == "data";
        gathers = gathers || g.nodes()[static_cast<size_t>(n)].name == "patches";
      }
      return computes && gathers && repeats ? 10.0 : 1.0;
    };
    const FusionPlan plan = fuse(g, opt);
    expect_valid_partition(g, plan);
    const auto group_of = [&](const std::string& name) {
      for (size_t k = 0; k < plan.groups.size(); ++k) {
        for (int n : plan.groups[k].nodes) {
          if (g.nodes()[static_cast<size_t>(n)].name == name) return k;
        }
      }
      return plan.groups.size();
    };
    EXPECT_EQ(group_of("patches"), group_of("product")) << (repeats ? "repeating" : "subsampling");
    if (repeats) {
      EXPECT_NE(group_of("data"), group_of("patches")) << "the data is computed once a tap";
      EXPECT_EQ(plan.groups.size(), 2u);
    } else {
      EXPECT_EQ(group_of("data"), group_of("patches"));
    }
  }
}

// Back-to-back products (a GRU step's reset gate times h into the h gate's product; a narrow MLP):
// with a cost function, a product whose left operand is another product's rows through light ops
// joins that product's group when the rows are at most max_row long and the cost keeps the merge;
// without a cost function, beyond max_row, or when the merge costs more, the two stay apart.
TEST(Fusion, BackToBackProductsJoinWhenTheFirstsRowsFitAndTheCostKeepsIt) {
  Graph g;
  const int x = add_input(g, "x", DType::kF32, {8, 32});
  const int first = add_op(g, "MatMul", {x, random_constant(g, "w1", DType::kF32, {32, 64}, 5)}, {}, "first");
  const int act = add_op(g, "Relu", {first});
  g.outputs().push_back(add_op(g, "MatMul", {act, random_constant(g, "w2", DType::kF32, {64, 16}, 6)}, {}, "second"));
  const auto groups = [&](const FusionOptions& opt) {
    const FusionPlan plan = fuse(g, opt);
    expect_valid_partition(g, plan);
    return plan.groups.size();
  };
  FusionOptions kept;
  kept.cost = [](const std::vector<int>&) { return 1.0; };
  EXPECT_EQ(groups(kept), 1u);
  FusionOptions narrow = kept;
  narrow.max_row = 32;
  EXPECT_EQ(groups(narrow), 2u) << "the first product's rows (64) exceed max_row";
  FusionOptions dearer;
  dearer.cost = [&](const std::vector<int>& nodes) {
    int products = 0;
    for (int n : nodes) products += g.nodes()[static_cast<size_t>(n)].op == "MatMul";
    return products == 2 ? 3.0 : 1.0;
  };
  EXPECT_EQ(groups(dearer), 2u) << "the merge costs more than its parts";
  EXPECT_EQ(groups(FusionOptions{}), 2u) << "merged without a cost function";
}

// A light group whose result has the shape of a row reduction's rows (the reduction's result
// broadcast back over them: a NonMaxSuppression round marking off what its ArgMax picked) joins
// the reduction's group although the result is read elsewhere too (it leaves as a side output),
// where the rows fit max_row and the cost function keeps the merge; not without a cost function,
// not over longer rows, not for a result of another shape.
TEST(Fusion, ARowEpilogueJoinsItsReductionWhileTheResultIsReadElsewhere) {
  const auto build = [](bool row_shaped) {
    Graph g;
    const int x = add_input(g, "x", DType::kF32, {4, 32});
    const int pick = add_op(g, "ArgMax", {add_op(g, "Exp", {x})}, attrs({{"axis", int64_t{1}}, {"keepdims", int64_t{1}}}), "pick");
    if (row_shaped) {  // the rows with the picked element negated
      std::vector<int64_t> iota(32);
      std::iota(iota.begin(), iota.end(), 0);
      const int positions = g.add_constant("positions", Tensor::from_ints(DType::kI64, {1, 32}, iota));
      const int mask = add_op(g, "Equal", {positions, pick});
      g.outputs() = {add_op(g, "Where", {mask, add_op(g, "Neg", {x}), x}, {}, "marked"), pick};  // pick read outside too
    } else {  // a result per row
      g.outputs() = {add_op(g, "Neg", {add_op(g, "Cast", {pick}, attrs({{"to", int64_t{1}}}))}, {}, "negated"), pick};
    }
    return g;
  };
  const auto groups = [](const Graph& g, const FusionOptions& opt) {
    const FusionPlan plan = fuse(g, opt);
    expect_valid_partition(g, plan);
    return plan.groups.size();
  };
  FusionOptions kept;
  kept.cost = [](const std::vector<int>&) { return 1.0; };
  const Graph g = build(true);
  EXPECT_EQ(groups(g, kept), 1u);
  FusionOptions narrow = kept;
  narrow.max_row = 16;
  EXPECT_EQ(groups(g, narrow), 2u) << "the rows (32) exceed max_row";
  EXPECT_EQ(groups(g, FusionOptions{}), 2u) << "merged without a cost function";
  EXPECT_EQ(groups(build(false), kept), 2u) << "a per-row result is no row epilogue";
}

TEST(Fusion, NeverMergesAcrossACycle) {
  // a = MatMul(x, w); b = Exp(a); c = Add(a, Relu(MatMul(b, w2))): merging a's group with c's
  // directly would need b's MatMul group in between, both before and after.
  Graph g;
  const int x = add_input(g, "x", DType::kF32, {8, 8});
  const int a = add_op(g, "MatMul", {x, random_constant(g, "w", DType::kF32, {8, 8}, 1)});
  const int b = add_op(g, "Exp", {a});
  const int m = add_op(g, "MatMul", {b, random_constant(g, "w2", DType::kF32, {8, 8}, 2)});
  g.outputs().push_back(add_op(g, "Add", {a, add_op(g, "Relu", {m})}));
  expect_valid_partition(g, fuse(g));
}

// A light group that reads a light producer's value element for element joins it, the value
// leaving as a side output for a later group (an LSTM step: h = o * tanh(c), c read by the next
// step too); one whose path from the value is not element-wise at the value's shape (a shifting
// Pad, a Slice and Concat, a Transpose), or whose merge would close a cycle, does not.
TEST(Fusion, AStateReadElementForElementJoinsItsProducerAsASideOutput) {
  enum class Reader { kElementwise, kShift, kSliceConcat, kTranspose, kCycle };
  for (Reader reader : {Reader::kElementwise, Reader::kShift, Reader::kSliceConcat, Reader::kTranspose, Reader::kCycle}) {
    Graph g;
    const int x = add_input(g, "x", DType::kF32, {8, 16});
    const int gate = add_input(g, "gate", DType::kF32, {8, 16});
    const int c = add_op(g, "Tanh", {add_op(g, "Add", {x, gate})}, {}, "cell");
    const int w = random_constant(g, "w", DType::kF32, {16, 16}, 4);
    const int next = add_op(g, "MatMul", {c, w}, {}, "next_step");  // a later group reads c too
    const int o = add_op(g, "Sigmoid", {gate});
    int read = kNoValue;
    if (reader == Reader::kElementwise) {
      read = add_op(g, "Tanh", {c});
    } else if (reader == Reader::kShift) {  // rows shifted down by one: row 7 of c is read by no tile
      Attributes pad;
      pad.set("pads", std::vector<int64_t>{1, 0, -1, 0});
      pad.set("mode", std::string("constant"));
      pad.set("value", 0.0f);
      read = add_op(g, "Pad", {add_op(g, "Tanh", {c})}, pad);
    } else if (reader == Reader::kSliceConcat) {  // rows 0-3 of c, then rows of o
      Attributes cut;
      cut.set("starts", std::vector<int64_t>{0, 0});
      cut.set("ends", std::vector<int64_t>{4, 16});
      cut.set("steps", std::vector<int64_t>{1, 1});
      Attributes rest = cut;
      rest.set("starts", std::vector<int64_t>{4, 0});
      rest.set("ends", std::vector<int64_t>{8, 16});
      Attributes cat;
      cat.set("axis", int64_t{0});
      read = add_op(g, "Concat", {add_op(g, "Slice", {add_op(g, "Tanh", {c})}, cut), add_op(g, "Slice", {o}, rest)}, cat);
    } else if (reader == Reader::kTranspose) {
      Attributes t;
      t.set("perm", std::vector<int64_t>{1, 0});
      const int square = add_op(g, "Slice", {c}, [] {
        Attributes a;
        a.set("starts", std::vector<int64_t>{0, 0});
        a.set("ends", std::vector<int64_t>{8, 8});
        a.set("steps", std::vector<int64_t>{1, 1});
        return a;
      }());
      read = add_op(g, "Pad", {add_op(g, "Transpose", {square}, t)}, [] {
        Attributes a;
        a.set("pads", std::vector<int64_t>{0, 0, 0, 8});
        a.set("mode", std::string("constant"));
        a.set("value", 0.0f);
        return a;
      }());
    } else {  // the reader also needs the later group's result: merging would put it on both sides
      read = add_op(g, "Add", {c, next});
    }
    const int h = add_op(g, "Mul", {o, read}, {}, "state_out");
    g.outputs().push_back(h);
    g.outputs().push_back(next);
    const FusionPlan plan = fuse(g);
    expect_valid_partition(g, plan);
    const auto group_of = [&](const std::string& name) {
      for (size_t k = 0; k < plan.groups.size(); ++k) {
        for (int n : plan.groups[k].nodes) {
          if (g.nodes()[static_cast<size_t>(n)].name == name) return static_cast<int>(k);
        }
      }
      return -1;
    };
    const bool joined = group_of("cell") == group_of("state_out");
    EXPECT_EQ(joined, reader == Reader::kElementwise) << "reader " << static_cast<int>(reader);
    if (joined) {
      const auto& outs = plan.groups[static_cast<size_t>(group_of("cell"))].outputs;
      EXPECT_NE(std::find(outs.begin(), outs.end(), c), outs.end()) << "the state leaves the merged group";
    }
  }
}

TEST(Tiling, CandidatesAreValidRankedAndDeterministic) {
  const Graph g = load("resnet_small");
  const Device d = find_device("a100");
  const FusionPlan plan = fuse(g);
  for (const FusionGroup& fg : plan.groups) {
    const auto cands = tile_candidates(g, fg, d, {8, 2.0});
    ASSERT_FALSE(cands.empty());
    EXPECT_LE(cands.size(), 8u);
    for (size_t k = 0; k < cands.size(); ++k) {
      EXPECT_TRUE(cands[k].cost.valid) << cands[k].cost.reject;
      EXPECT_LE(cands[k].cost.smem_bytes, d.shared_memory_per_block_optin);
      EXPECT_LE(cands[k].config.threads, d.max_threads_per_block);
      if (k > 0) {
        EXPECT_LE(cands[k - 1].cost.modeled_us, cands[k].cost.modeled_us);
      }
    }
    const auto again = tile_candidates(g, fg, d, {8, 2.0});
    ASSERT_EQ(again.size(), cands.size());
    for (size_t k = 0; k < cands.size(); ++k) EXPECT_EQ(again[k].config, cands[k].config);
  }
}

TEST(Tiling, RejectsWhatDoesNotFitAndPenalizesUncoalescedReads) {
  Graph g;
  const int x = add_input(g, "x", DType::kF32, {512, 512});
  const int w = random_constant(g, "w", DType::kF32, {512, 512}, 3);
  g.outputs().push_back(add_op(g, "MatMul", {x, w}));
  FusionGroup fg;
  fg.nodes = {0};
  describe_group(g, fg);
  const Device d = find_device("l4");
  const Cost huge = evaluate_tile(g, fg, d, {{512, 512}, 64, 256, 1});
  EXPECT_FALSE(huge.valid);
  EXPECT_NE(huge.reject.find("registers"), std::string::npos) << huge.reject;
  const Cost smem = evaluate_tile(g, fg, d, {{256, 128}, 64, 1024, 1});
  EXPECT_FALSE(smem.valid);
  // A tile one column wide reads B in 32-byte sectors for 4 useful bytes: 8x the traffic of a
  // tile 8 columns wide, per output element.
  const Cost narrow = evaluate_tile(g, fg, d, {{64, 1}, 32, 64, 1});
  const Cost wide = evaluate_tile(g, fg, d, {{8, 8}, 32, 64, 1});
  EXPECT_GT(narrow.l2_bytes, 3 * wide.l2_bytes);
  // Too few blocks for the machine: the parallelism penalty shows in the modeled time.
  const Cost few = evaluate_tile(g, fg, d, {{128, 128}, 16, 256, 1});
  EXPECT_LT(few.efficiency, 0.5);
}

// An embedding lookup: the indices pick rows of the table at run time, so the table's region spans
// the whole axis; the traffic is the rows the tile's indices pick (counted on the host, BERT's
// embedding kernel touched 0.8 MB where the whole-axis region charged its 94 MB table).
TEST(Tiling, AGatherIsChargedTheRowsItsIndicesPick) {
  Graph g;
  const int table = add_input(g, "table", DType::kF32, {4096, 768});
  const int ids = add_input(g, "ids", DType::kI64, {1, 16});
  g.outputs().push_back(add_op(g, "Gather", {table, ids}, attrs({{"axis", int64_t{0}}})));
  FusionGroup fg;
  fg.nodes = {0};
  describe_group(g, fg);
  const Device d = find_device("h100");
  for (const std::vector<int64_t>& tile : {std::vector<int64_t>{1, 1, 768}, std::vector<int64_t>{1, 4, 256}}) {
    const Cost c = evaluate_tile(g, fg, d, {tile, 0, 256, 1});
    ASSERT_TRUE(c.valid) << c.reject;
    // Rows read, indices read (8 bytes each, the whole tensor once: it fits the L2), output written.
    EXPECT_EQ(c.dram_bytes, 16 * 768 * 4 + 16 * 8 + 16 * 768 * 4) << "tile " << tile[1] << "x" << tile[2];
  }
}

// A tile that reads disjoint slices of one input (a packed projection's Q, K and V of a head) is
// charged their sectors, not their hull's: ViT-B/16's attention, whose Q, K and V are slices of
// one [197, 2304] projection 768 columns apart, was charged 1.27 MB a block where it reads 0.1 MB,
// and lost to its three parts. Overlapping slices are charged once.
TEST(Tiling, DisjointSlicesOfOneInputAreChargedApart) {
  const auto sum_of_slices = [](int64_t a, int64_t b) {
    Graph g;
    const int x = add_input(g, "x", DType::kF32, {64, 768});
    const auto slice = [&](int64_t lo) {
      return add_op(g, "Slice", {x}, attrs({{"starts", std::vector<int64_t>{0, lo}}, {"ends", std::vector<int64_t>{64, lo + 64}},
                                            {"steps", std::vector<int64_t>{1, 1}}}));
    };
    g.outputs().push_back(add_op(g, "Add", {slice(a), slice(b)}));
    FusionGroup fg = testing::whole_graph_group(g);
    const Cost c = evaluate_tile(g, fg, find_device("h100"), {{64, 64}, 0, 256, 1});
    EXPECT_TRUE(c.valid) << c.reject;
    return c;
  };
  constexpr int64_t kSlice = 64 * 64 * 4;  // one slice's bytes: rows of 256 bytes, whole sectors
  const Cost apart = sum_of_slices(0, 512);
  EXPECT_EQ(apart.l2_bytes, 2 * kSlice + kSlice) << "two slices read, one written";
  EXPECT_EQ(apart.dram_bytes, 2 * kSlice + kSlice);
  const Cost overlapping = sum_of_slices(0, 32);
  EXPECT_EQ(overlapping.l2_bytes, 64 * 96 * 4 + kSlice) << "columns 0 to 95 read once, one slice written";
  const Cost reversed = sum_of_slices(512, 0);
  EXPECT_EQ(reversed.l2_bytes, apart.l2_bytes);
}

TEST(Tiling, VectorWidthFourWhereContractionOperandsMoveInQuads) {
  auto matmul = [](int64_t k) {
    Graph g;
    const int x = add_input(g, "x", DType::kF32, {512, k});
    g.outputs().push_back(add_op(g, "MatMul", {x, random_constant(g, "w", DType::kF32, {k, 512}, 3)}));
    FusionGroup fg;
    fg.nodes = {0};
    describe_group(g, fg);
    return std::make_pair(g, fg);
  };
  const Device d = find_device("h100");
  const auto [g, fg] = matmul(512);
  // The same bytes, a quarter of the staging loads: never slower, and faster where issue-bound.
  const Cost scalar = evaluate_tile(g, fg, d, {{64, 64}, 32, 256, 1});
  const Cost quads = evaluate_tile(g, fg, d, {{64, 64}, 32, 256, 4});
  EXPECT_EQ(scalar.l2_bytes, quads.l2_bytes);
  EXPECT_LT(quads.modeled_us, scalar.modeled_us);
  auto offers_quads = [&](const Graph& gg, const FusionGroup& group) {
    TilingOptions all;
    all.top_k = 1000;
    for (const Candidate& c : tile_candidates(gg, group, d, all)) {
      if (c.config.vector == 4) return true;
    }
    return false;
  };
  EXPECT_TRUE(offers_quads(g, fg));
  // Rows of 37 floats (A) and 512 (B): B still moves in quads.
  const auto [g37, fg37] = matmul(37);
  EXPECT_TRUE(offers_quads(g37, fg37));
  // Nothing to vectorise outside contractions.
  Graph ew;
  ew.outputs().push_back(add_op(ew, "Relu", {add_input(ew, "y", DType::kF32, {256, 256})}));
  FusionGroup relu;
  relu.nodes = {0};
  describe_group(ew, relu);
  EXPECT_FALSE(offers_quads(ew, relu));
}

// Each instruction class at its own rate: a compute-bound float16 MatMul on tensor cores at what
// mma.sync attains (not the peak only wgmma reaches), a chain of exponentials at the special
// function units' rate.
TEST(Tiling, EachInstructionClassAtTheRateItAttains) {
  Device h100 = find_device("h100");
  h100.l2_bandwidth_gbps = 1e6;  // so that the 128 x 128 tiles' operand traffic does not bound the MatMul
  h100.dram_latency_ns = 0;      // nor its steps' latencies
  Graph g;
  const int a = add_input(g, "a", DType::kF16, {2048, 2048});
  g.outputs().push_back(add_op(g, "MatMul", {a, add_input(g, "b", DType::kF16, {2048, 2048})}));
  FusionGroup fg;
  fg.nodes = {0};
  describe_group(g, fg);
  TileConfig mma{{128, 128}, 32, 256, 1};
  mma.mma = true;
  const Cost at_mma_sync = evaluate_tile(g, fg, h100, mma);
  ASSERT_TRUE(at_mma_sync.valid) << at_mma_sync.reject;
  const double flops = 2.0 * 2048 * 2048 * 2048;
  EXPECT_GE(at_mma_sync.modeled_us, flops / (h100.mma_sync_fp16_tflops * 1e6));
  // The same device if mma.sync reached the peak: faster by the ratio of the rates (compute-bound).
  Device wgmma_rate = h100;
  wgmma_rate.mma_sync_fp16_tflops = h100.fp16_tensor_tflops;
  const Cost at_peak = evaluate_tile(g, fg, wgmma_rate, mma);
  // (2 µs of launch and the busiest SM's two blocks, kBlockCostNs each, beside the arithmetic)
  const double fixed = 2 + 2 * kBlockCostNs / 1e3;
  EXPECT_NEAR((at_mma_sync.modeled_us - fixed) / (at_peak.modeled_us - fixed),
              h100.fp16_tensor_tflops / h100.mma_sync_fp16_tflops, 0.01);

  // Twelve exponentials per element of a float16 tensor: 48 M special results, 12 µs at 16 a
  // clock per SM, where its 16 MB take 5 µs of DRAM.
  Graph e;
  int x = add_input(e, "x", DType::kF16, {2048, 2048});
  for (int i = 0; i < 12; ++i) x = add_op(e, "Exp", {x});
  e.outputs().push_back(x);
  FusionGroup chain;
  for (int i = 0; i < 12; ++i) chain.nodes.push_back(i);
  describe_group(e, chain);
  const TileConfig tile{{32, 256}, 0, 256, 1};
  const Cost exps = evaluate_tile(e, chain, h100, tile);
  ASSERT_TRUE(exps.valid) << exps.reject;
  const double special_us = 12.0 * 2048 * 2048 / h100.special_ops_per_us();
  EXPECT_GE(exps.modeled_us, special_us);
  Device fast_sfu = h100;
  fast_sfu.special_ops_per_clock_per_sm = 1024;
  EXPECT_LT(evaluate_tile(e, chain, fast_sfu, tile).modeled_us, exps.modeled_us);
}

// What the H200's measurements taught the model (bench/model_vs_measured): an element-wise
// kernel's time grows with its grid by kBlockCostNs a block of the busiest SM whatever the block's
// threads, and an SM issues fully only from two warps a scheduler.
TEST(Tiling, EveryBlockCostsItsSmAndTwoWarpsASchedulerIssueFully) {
  const Device d = find_device("h200");
  Graph g;
  const int x = add_input(g, "x", DType::kF16, {12, 128, 128});
  g.outputs().push_back(add_op(g, "Add", {x, add_input(g, "y", DType::kF16, {12, 128, 128})}));
  FusionGroup add;
  add.nodes = {0};
  describe_group(g, add);
  // 24,576 blocks of 8 elements against 6,144 of 32: 187 blocks on the busiest SM against 47.
  for (int threads : {32, 256}) {
    const Cost small = evaluate_tile(g, add, d, {{1, 1, 8}, 0, threads, 1});
    const Cost large = evaluate_tile(g, add, d, {{1, 1, 32}, 0, threads, 1});
    ASSERT_TRUE(small.valid && large.valid) << small.reject << large.reject;
    EXPECT_EQ(small.tiles, 24576);
    EXPECT_EQ(large.tiles, 6144);
    EXPECT_NEAR(small.modeled_us - large.modeled_us, (187 - 47) * kBlockCostNs / 1e3, 0.5) << threads << " threads";
  }

  // A float16 MatMul of 96 tiles (one block an SM): 4 warps a block issue at half the rate of 8.
  Device fast_memory = d;
  fast_memory.l2_bandwidth_gbps = fast_memory.dram_bandwidth_gbps = 1e7;  // the issue term alone decides
  fast_memory.dram_latency_ns = 0;
  Graph m;
  const int a = add_input(m, "a", DType::kF16, {384, 2048});
  m.outputs().push_back(add_op(m, "MatMul", {a, add_input(m, "b", DType::kF16, {2048, 2048})}));
  FusionGroup mm;
  mm.nodes = {0};
  describe_group(m, mm);
  TileConfig four{{128, 64}, 64, 128, 1}, eight{{128, 64}, 64, 256, 1};
  four.mma = eight.mma = true;
  const Cost at_four = evaluate_tile(m, mm, fast_memory, four), at_eight = evaluate_tile(m, mm, fast_memory, eight);
  ASSERT_TRUE(at_four.valid && at_eight.valid) << at_four.reject << at_eight.reject;
  ASSERT_EQ(at_four.tiles, 96);
  const double fixed = 2 + kBlockCostNs / 1e3;
  EXPECT_NEAR((at_four.modeled_us - fixed) / (at_eight.modeled_us - fixed), 2.0, 0.05);
}

// An element-wise group's threads take their tile 16 bytes an iteration where the rows are whole
// vectors (an element an iteration elsewhere), and each iteration after a thread's first waits half
// a DRAM latency (measured on the H200: 331 ns an extra iteration in one wave).
TEST(Tiling, AnElementWiseThreadsIterationsEachWaitHalfALatency) {
  const Device d = find_device("h200");
  for (const int64_t row : {4096, 4100}) {
    Graph g;
    const int x = add_input(g, "x", DType::kF16, {64, row});
    g.outputs().push_back(add_op(g, "Add", {x, add_input(g, "y", DType::kF16, {64, row})}));
    FusionGroup add;
    add.nodes = {0};
    describe_group(g, add);
    // 64 tiles of a row each (one wave); 512 vectors a row, or 4,100 elements where the row is not
    // whole vectors.
    const int64_t units = row % 8 == 0 ? row / 8 : row;
    const Cost wide = evaluate_tile(g, add, d, {{1, row}, 0, 512, 1});
    const Cost narrow = evaluate_tile(g, add, d, {{1, row}, 0, 32, 1});
    ASSERT_TRUE(wide.valid && narrow.valid) << wide.reject << narrow.reject;
    ASSERT_EQ(narrow.tiles, 64);
    EXPECT_TRUE(narrow.latency_bound);
    const double iterations_wide = static_cast<double>(ceil_div(units, 512)), iterations_narrow = static_cast<double>(ceil_div(units, 32));
    const double half_latency_us = 0.5 * d.dram_latency_ns / 1e3;
    EXPECT_NEAR(narrow.modeled_us - TilingOptions{}.launch_overhead_us - kBlockCostNs / 1e3, (iterations_narrow - 1) * half_latency_us, 1e-6) << row;
    if (wide.latency_bound) {
      EXPECT_NEAR(narrow.modeled_us - wide.modeled_us, (iterations_narrow - iterations_wide) * half_latency_us, 1e-6) << row;
    } else {
      EXPECT_EQ(iterations_wide, 1) << row;
    }
  }
}

TEST(Select, MeasurementsOverrideTheModel) {
  const Graph g = load("cnn_small");
  const Device d = find_device("h100");
  const ModelPlan modeled = plan_model(g, d);
  ASSERT_FALSE(modeled.groups.empty());
  // Claim the worst-modeled candidate of the first multi-candidate group measured fastest.
  Measurements m;
  size_t target = 0;
  while (target < modeled.groups.size() && modeled.groups[target].candidates.size() < 2) ++target;
  ASSERT_LT(target, modeled.groups.size());
  const GroupPlan& gp = modeled.groups[target];
  const Candidate& last = gp.candidates.back();
  m[{gp.signature, last.config.str()}] = 0.001;
  const ModelPlan measured = plan_model(g, d, {}, &m);
  bool found = false;
  for (const GroupPlan& q : measured.groups) {
    if (q.signature != gp.signature) continue;
    EXPECT_TRUE(q.measured);
    EXPECT_EQ(q.candidates[q.chosen].config, last.config);
    EXPECT_DOUBLE_EQ(q.cost_us, 0.001);
    found = true;
  }
  EXPECT_TRUE(found);
}

// The first group of a plan with more than one node (the plan's size when there is none).
size_t first_fused(const ModelPlan& plan) {
  size_t k = 0;
  while (k < plan.groups.size() && plan.groups[k].group.nodes.size() < 2) ++k;
  return k;
}

// Every candidate of a fused group measured and failed (a compile error, a wrong result, a failed
// race check): the group is never shipped with one of them; it falls back to its parts, and the
// plan names it. The fusion itself does not change (merge decisions use modeled costs only).
TEST(Select, AGroupWhoseMeasurementsAllFailedFallsBackToItsParts) {
  const Graph g = load("bert");
  const Device d = find_device("h100");
  const ModelPlan modeled = plan_model(g, d);
  const size_t target = first_fused(modeled);
  ASSERT_LT(target, modeled.groups.size());
  const GroupPlan& gp = modeled.groups[target];
  Measurements m;
  for (const Candidate& c : gp.candidates) m[{gp.signature, c.config.str()}] = INFINITY;
  const ModelPlan measured = plan_model(g, d, {}, &m);
  EXPECT_EQ(measured.split_groups, modeled.split_groups + 1);
  ASSERT_FALSE(measured.failed_groups.empty());
  EXPECT_EQ(measured.failed_groups.front(), gp.group.pattern);
  for (const GroupPlan& q : measured.groups) {
    EXPECT_NE(q.signature, gp.signature) << "the failed group was kept";
    EXPECT_FALSE(q.failed) << q.group.pattern;
  }
  // Its nodes still run, each in a part.
  size_t nodes = 0;
  for (const GroupPlan& q : measured.groups) nodes += q.group.nodes.size();
  EXPECT_EQ(nodes, g.nodes().size());
  // Some candidates failed, one succeeded: that one is chosen.
  Measurements some;
  for (size_t k = 0; k + 1 < gp.candidates.size(); ++k) some[{gp.signature, gp.candidates[k].config.str()}] = INFINITY;
  some[{gp.signature, gp.candidates.back().config.str()}] = 5.0;
  const ModelPlan partly = plan_model(g, d, {}, &some);
  EXPECT_TRUE(partly.failed_groups.empty());
  bool kept = false;
  for (const GroupPlan& q : partly.groups) {
    if (q.signature != gp.signature) continue;
    kept = true;
    EXPECT_EQ(q.candidates[q.chosen].config, gp.candidates.back().config);
  }
  EXPECT_TRUE(kept);
}

// A dry run's rejections (PlanOptions::rejected): a rejected candidate is never the modeled choice,
// and a fused group with every candidate rejected falls back to its parts, its nodes still run.
TEST(Select, RejectedCandidatesAreNeverChosenByTheModel) {
  const Graph g = load("bert");
  const Device d = find_device("h100");
  const ModelPlan modeled = plan_model(g, d);
  const size_t target = first_fused(modeled);
  ASSERT_LT(target, modeled.groups.size());
  const GroupPlan& gp = modeled.groups[target];
  ASSERT_GE(gp.candidates.size(), 2u);
  PlanOptions first;
  first.rejected.insert({gp.signature, gp.candidates[gp.chosen].config.str()});
  const ModelPlan without_best = plan_model(g, d, first);
  bool found = false;
  for (const GroupPlan& q : without_best.groups) {
    if (q.signature != gp.signature) continue;
    found = true;
    EXPECT_NE(q.candidates[q.chosen].config, gp.candidates[gp.chosen].config);
    EXPECT_GE(q.cost_us, gp.cost_us);  // the next best modeled
  }
  EXPECT_TRUE(found) << "the group lost to its parts when only its best candidate was rejected";
  PlanOptions all;
  for (const Candidate& c : gp.candidates) all.rejected.insert({gp.signature, c.config.str()});
  const ModelPlan none = plan_model(g, d, all);
  size_t nodes = 0;
  for (const GroupPlan& q : none.groups) {
    EXPECT_NE(q.signature, gp.signature) << "a group with every candidate rejected was kept";
    EXPECT_FALSE(all.rejected.count({q.signature, q.candidates[q.chosen].config.str()})) << q.group.pattern;
    nodes += q.group.nodes.size();
  }
  EXPECT_EQ(nodes, g.nodes().size());
}

TEST(Select, EveryLaunchRunsAfterTheLaunchesItReadsFrom) {
  // Measured choices move groups in and out of packed launches (a library call runs alone, split
  // parts pack anew): whatever the measurements, running launches in id order must run every
  // group after its producers. Random measurements (seeded, printed) over BERT and LLaMA.
  const unsigned seed = fusetune::testing::test_seed();
  std::mt19937 rng(seed);
  const planner::Device d = planner::find_device("h100");
  for (const std::string model : {"bert", "llama"}) {
    const Graph g = fusetune::testing::load_test_model(model);
    const planner::ModelPlan modeled = planner::plan_model(g, d);
    for (int trial = 0; trial < 20; ++trial) {
      planner::Measurements m;
      for (const planner::GroupPlan& gp : modeled.compared) {
        for (const planner::Candidate& c : gp.candidates) {
          if (c.cost.valid) m[{gp.signature, c.config.str()}] = gp.group.nodes.size() * (0.5 + (rng() % 1000) / 1000.0);
        }
      }
      const planner::ModelPlan plan = planner::plan_model(g, d, {}, &m);
      std::map<int, int> launch_of_value;
      for (const planner::GroupPlan& gp : plan.groups) {
        for (int v : gp.group.outputs) launch_of_value[v] = gp.group.launch;
      }
      std::set<int> library_launches;
      for (const planner::GroupPlan& gp : plan.groups) {
        for (int v : gp.group.inputs) {
          auto it = launch_of_value.find(v);
          if (it != launch_of_value.end()) {
            EXPECT_LT(it->second, gp.group.launch) << model << " trial " << trial << ": " << gp.group.pattern
                                                    << " reads from a launch that runs later (seed " << seed << ")";
          }
        }
        if (!gp.candidates[gp.chosen].config.library.empty()) {
          EXPECT_TRUE(library_launches.insert(gp.group.launch).second) << "a library call shares launch " << gp.group.launch;
        }
      }
      for (const planner::GroupPlan& gp : plan.groups) {
        if (library_launches.count(gp.group.launch)) {
          EXPECT_FALSE(gp.candidates[gp.chosen].config.library.empty()) << gp.group.pattern << " shares a library call's launch";
        }
      }
    }
  }
}

TEST(Select, FusionBeatsTheUnfusedPlanOnTraffic) {
  const Graph g = load("bert");
  const Device d = find_device("h100");
  PlanOptions none;
  none.fusion.epilogue = none.fusion.prologue = none.fusion.stitch = none.fusion.pack = false;
  const ModelPlan fused = plan_model(g, d);
  const ModelPlan alone = plan_model(g, d, none);
  EXPECT_LT(fused.dram_bytes, alone.dram_bytes);
  EXPECT_LT(fused.launches, alone.launches);
  EXPECT_LT(fused.modeled_us, alone.modeled_us);
}

}  // namespace
}  // namespace fusetune::planner
