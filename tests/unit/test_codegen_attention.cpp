// Flash attention (planner/attention.h, codegen/stages/attention.h): the attention core of a group
// computed a tile of keys at a time. Differentially against the reference under the host
// executor's checks: float32/float16/bfloat16, odd sequence and head widths, a key tile that does
// not divide the keys, additive and causal masks, keys shared by heads (grouped-query), a decode
// step (one query row), heads merged by a Transpose and Reshape after the core, more rows than
// warps; a sequence long enough that the whole-row form cannot hold the scores; each barrier of
// the stage deleted in turn (a race the checks report); and what the matcher declines.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <functional>
#include <limits>
#include <random>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "backend/nvrtc.h"
#include "codegen/emit.h"
#include "codegen/lower_group.h"
#include "planner/attention.h"
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
using fusetune::testing::attrs;
using fusetune::testing::drop_barrier;
using fusetune::testing::check_groups;
using fusetune::testing::whole_graph_group;
using planner::FusionGroup;
using planner::TileConfig;

const fusetune::testing::CheckOptions sm90{false, {"sm_90"}};

struct Attention {
  int64_t batch = 1, heads = 2, kv_heads = 2, queries = 16, keys = 16, head = 16, value_width = 16;
  bool mask = false;         // an additive mask over the keys, per batch
  bool causal = false;       // query i sees keys up to i + keys - queries
  bool merge_heads = false;  // the output as (batch, queries, heads x value width)
  bool k_transposed = false; // K given as Kᵀ (batch, kv_heads, head, keys), keys contiguous: a projection that wrote it so
  bool sliced = false;       // K and V sliced one element into rows one wider: views whose rows start at every alignment
  bool v_repeated = false;   // V's columns each given once and repeated twice: a view grouped along its width
  // The causal mask as an additive constant (TinyLlama's export): 0 where a query sees the key,
  // float16's lowest elsewhere; with `masked_row`, that row sees no key.
  bool causal_bias = false;
  bool causal_negated = false;  // the causal Where's condition true on the keys a query does not see (fill first)
  int64_t masked_row = -1;
  float slope = 0.0f;  // the bias where a query sees the key: -slope x (i - j), a distance penalty (ALiBi's)
  // The causal condition or bias computed in the group from two index vectors (j - i compared
  // with keys - queries), as an export with dynamic axes gives a mask too large to fold
  // (planner/toeplitz.h), where the other form is a constant; no masked_row.
  bool from_index_vectors = false;
  // LLaMA's rotary embedding on Q and K in the group: x cos + rotate_half(x) sin, with
  // rotate_half(x) = Concat(-x[..., head/2:], x[..., :head/2]) and cos, sin inputs per position.
  bool rotary = false;
};

// softmax(Q K^T * scale [+ mask] [causal]) V over inputs q, k, v (and mask), named with `prefix`,
// added to g; returns the group of its nodes, exporting the last one's output.
FusionGroup add_attention(Graph& g, DType dt, const Attention& a, const std::string& prefix = "") {
  const int first = static_cast<int>(g.nodes().size());
  const auto rotary = [&](int x, int64_t heads, int64_t rows, const std::string& name) {
    if (!a.rotary) return x;
    const int64_t half = a.head / 2;
    const auto slice = [&](int64_t from, int64_t to) {
      return add_op(g, "Slice", {x}, attrs({{"starts", std::vector<int64_t>{0, 0, 0, from}},
                                            {"ends", std::vector<int64_t>{a.batch, heads, rows, to}},
                                            {"steps", std::vector<int64_t>{1, 1, 1, 1}}}));
    };
    const int rotated = add_op(g, "Concat", {add_op(g, "Neg", {slice(half, a.head)}), slice(0, half)}, attrs({{"axis", int64_t{-1}}}));
    const int cos = add_input(g, prefix + name + "_cos", dt, {rows, a.head}), sin = add_input(g, prefix + name + "_sin", dt, {rows, a.head});
    return add_op(g, "Add", {add_op(g, "Mul", {x, cos}), add_op(g, "Mul", {rotated, sin})});
  };
  const int q = rotary(add_input(g, prefix + "q", dt, {a.batch, a.heads, a.queries, a.head}), a.heads, a.queries, "q");
  const auto operand = [&](const std::string& name, Shape shape) {
    if (!a.sliced) return add_input(g, prefix + name, dt, shape);
    shape.back() += 1;
    const std::vector<int64_t> starts = {0, 0, 0, 1}, ends(shape.begin(), shape.end()), steps = {1, 1, 1, 1};
    return add_op(g, "Slice", {add_input(g, prefix + name, dt, shape)}, attrs({{"starts", starts}, {"ends", ends}, {"steps", steps}}));
  };
  const int k = rotary(operand("k", a.k_transposed ? Shape{a.batch, a.kv_heads, a.head, a.keys} : Shape{a.batch, a.kv_heads, a.keys, a.head}),
                       a.kv_heads, a.keys, "k");
  int v = operand("v", {a.batch, a.kv_heads, a.keys, a.v_repeated ? a.value_width / 2 : a.value_width});
  if (a.v_repeated) {
    v = add_op(g, "Reshape", {v}, attrs({{"shape", std::vector<int64_t>{a.batch, a.kv_heads, a.keys, a.value_width / 2, 1}}}));
    v = add_op(g, "Expand", {v}, attrs({{"shape", std::vector<int64_t>{a.batch, a.kv_heads, a.keys, a.value_width / 2, 2}}}));
    v = add_op(g, "Reshape", {v}, attrs({{"shape", std::vector<int64_t>{a.batch, a.kv_heads, a.keys, a.value_width}}}));
  }
  // Keys and values shared by heads / kv_heads heads each, repeated as exporters do (Reshape,
  // Expand, Reshape), or broadcast by the MatMul when one head holds them.
  const auto repeat = [&](int x, int64_t rows, int64_t width) {
    if (a.kv_heads == a.heads || a.kv_heads == 1) return x;
    const int64_t group = a.heads / a.kv_heads;
    x = add_op(g, "Reshape", {x}, attrs({{"shape", std::vector<int64_t>{a.batch, a.kv_heads, 1, rows, width}}}));
    x = add_op(g, "Expand", {x}, attrs({{"shape", std::vector<int64_t>{a.batch, a.kv_heads, group, rows, width}}}));
    return add_op(g, "Reshape", {x}, attrs({{"shape", std::vector<int64_t>{a.batch, a.heads, rows, width}}}));
  };
  const int kt = a.k_transposed ? repeat(k, a.head, a.keys)
                                : add_op(g, "Transpose", {repeat(k, a.keys, a.head)}, attrs({{"perm", std::vector<int64_t>{0, 1, 3, 2}}}));
  int x = add_op(g, "Mul", {add_op(g, "MatMul", {q, kt}), g.add_constant(prefix + "scale", Tensor::scalar_float(dt, 0.25f))});
  if (a.mask) x = add_op(g, "Add", {x, add_input(g, prefix + "mask", dt, {a.batch, 1, 1, a.keys})});
  // j - i from an iota of the keys and one of the queries, and the last key a row sees, j - i <= this.
  const auto index_difference = [&] {
    std::vector<int64_t> keys(static_cast<size_t>(a.keys)), queries(static_cast<size_t>(a.queries));
    for (int64_t j = 0; j < a.keys; ++j) keys[static_cast<size_t>(j)] = j;
    for (int64_t i = 0; i < a.queries; ++i) queries[static_cast<size_t>(i)] = i;
    return add_op(g, "Sub", {g.add_constant(prefix + "key_index", Tensor::from_ints(DType::kI64, {1, a.keys}, keys)),
                             g.add_constant(prefix + "query_index", Tensor::from_ints(DType::kI64, {a.queries, 1}, queries))});
  };
  const auto last_seen = [&] { return g.add_constant(prefix + "last_seen", Tensor::scalar_int(DType::kI64, a.keys - a.queries)); };
  if (a.causal) {
    std::vector<int64_t> allowed;
    for (int64_t i = 0; i < a.queries; ++i) {
      for (int64_t j = 0; j < a.keys; ++j) allowed.push_back((j <= i + a.keys - a.queries) != a.causal_negated ? 1 : 0);
    }
    const int cond = a.from_index_vectors ? add_op(g, a.causal_negated ? "Greater" : "LessOrEqual", {index_difference(), last_seen()})
                                          : g.add_constant(prefix + "causal", Tensor::from_ints(DType::kBool, {a.queries, a.keys}, allowed));
    const int minus_inf = g.add_constant(prefix + "minus_inf", Tensor::scalar_float(dt, -std::numeric_limits<float>::infinity()));
    x = a.causal_negated ? add_op(g, "Where", {cond, minus_inf, x}) : add_op(g, "Where", {cond, x, minus_inf});
  }
  if (a.causal_bias && a.from_index_vectors) {
    const int d = index_difference(), last = last_seen();
    const int distance = add_op(g, "Cast", {add_op(g, "Sub", {last, d})}, attrs({{"to", int64_t{dtype_to_onnx(dt)}}}));
    const int seen = add_op(g, "Mul", {distance, g.add_constant(prefix + "slope", Tensor::scalar_float(dt, -a.slope))});
    const int bias = add_op(g, "Where", {add_op(g, "LessOrEqual", {d, last}), seen,
                                         g.add_constant(prefix + "unseen", Tensor::scalar_float(dt, -65504.0f))});
    x = add_op(g, "Add", {x, add_op(g, "Reshape", {bias}, attrs({{"shape", std::vector<int64_t>{1, 1, a.queries, a.keys}}}))});
  } else if (a.causal_bias) {
    std::vector<float> bias;
    for (int64_t i = 0; i < a.queries; ++i) {
      for (int64_t j = 0; j < a.keys; ++j) {
        const bool seen = j <= i + a.keys - a.queries && i != a.masked_row;
        bias.push_back(seen ? -a.slope * static_cast<float>(i + a.keys - a.queries - j) : -65504.0f);
      }
    }
    x = add_op(g, "Add", {x, g.add_constant(prefix + "causal_bias", Tensor::from_floats(dt, {1, 1, a.queries, a.keys}, bias))});
  }
  int o = add_op(g, "MatMul", {add_op(g, "Softmax", {x}, attrs({{"axis", int64_t{-1}}})), repeat(v, a.keys, a.value_width)});
  if (a.merge_heads) {
    o = add_op(g, "Transpose", {o}, attrs({{"perm", std::vector<int64_t>{0, 2, 1, 3}}}));
    add_op(g, "Reshape", {o}, attrs({{"shape", std::vector<int64_t>{a.batch, a.queries, a.heads * a.value_width}}}));
  }
  FusionGroup fg;
  for (int n = first; n < static_cast<int>(g.nodes().size()); ++n) fg.nodes.push_back(n);
  planner::describe_group(g, fg);
  fg.outputs = {g.nodes().back().outputs[0]};
  return fg;
}

// A causal prefill with a mask: 200 queries and keys, heads 64 wide.
Attention causal_prefill() {
  Attention a;
  a.queries = a.keys = 200;
  a.head = a.value_width = 64;
  a.mask = true;
  a.causal = true;
  return a;
}

// The flash kernel's loop over the key tiles (the uniform loop over ft_kt), or null.
const Stmt* key_tile_loop(const Block& b) {
  for (const Stmt& s : b) {
    if (s.kind == Stmt::Kind::kUniformFor && s.name == "ft_kt") return &s;
    if (const Stmt* inner = key_tile_loop(s.body)) return inner;
  }
  return nullptr;
}

// The planner's best flash candidate for the group (H100), on tensor cores or not.
TileConfig best_flash(const Graph& g, const FusionGroup& fg, bool tensor = false, bool wgmma = false) {
  planner::TilingOptions opt;
  opt.top_k = 1 << 20;
  for (const planner::Candidate& c : planner::tile_candidates(g, fg, planner::find_device("h100"), opt)) {
    if (c.config.flash && c.config.mma == tensor && c.config.wgmma == wgmma) return c.config;
  }
  ADD_FAILURE() << "no flash candidate " << (tensor ? "on tensor cores " : "") << (wgmma ? "by wgmma " : "") << "for " << fg.pattern;
  return {};
}

std::string text(const Attention& a) {
  return "batch " + std::to_string(a.batch) + ", heads " + std::to_string(a.heads) + "/" + std::to_string(a.kv_heads) +
         ", queries " + std::to_string(a.queries) + ", keys " + std::to_string(a.keys) + ", head " + std::to_string(a.head) +
         "/" + std::to_string(a.value_width) + (a.mask ? ", mask" : "") + (a.causal ? ", causal" : "") +
         (a.merge_heads ? ", heads merged" : "") + (a.k_transposed ? ", K transposed" : "") + (a.sliced ? ", K and V sliced" : "") +
         (a.v_repeated ? ", V's columns repeated" : "") + (a.causal_bias ? ", causal bias" : "") +
         (a.causal_negated ? " (negated)" : "") + (a.slope != 0.0f ? ", sloped" : "") +
         (a.from_index_vectors ? ", from index vectors" : "") + (a.rotary ? ", rotary" : "");
}

// How many times regular expression `re` matches in `text`.
size_t matches(const std::string& text, const char* re) {
  const std::regex r(re);
  return static_cast<size_t>(std::distance(std::sregex_iterator(text.begin(), text.end(), r), std::sregex_iterator()));
}

// Runs `good` under the host executor's checks (it must pass), then with each of its barriers
// deleted in turn (each must be a finding); returns how many barriers it has.
int expect_every_barrier_needed(const Graph& g, const FusionGroup& fg, const LoweredKernel& good, const std::string& label) {
  LoweredKernel probe = good;
  const int barriers = drop_barrier(probe.kernel.body, -1);
  auto backend = backend::make_host_backend();
  std::mt19937 rng(fusetune::testing::test_seed());
  {
    auto module = backend->load({good.kernel});
    const backend::VerifyResult r = backend::verify_kernel(g, fg, good, *backend, *module, rng);
    EXPECT_TRUE(r.ok) << label << ": " << r.detail;
    if (!r.ok) return barriers;
  }
  for (int i = 0; i < barriers; ++i) {
    LoweredKernel bad = good;
    drop_barrier(bad.kernel.body, i);
    auto module = backend->load({bad.kernel});
    const backend::VerifyResult r = backend::verify_kernel(g, fg, bad, *backend, *module, rng);
    EXPECT_TRUE(!r.ok && r.check_failed) << label << ": barrier " << i << " of " << barriers << " deleted: " << r.detail
                                         << "\n" << to_text(bad.kernel);
  }
  return barriers;
}

TEST(CodegenAttention, FlashMatchesTheReferenceInEveryType) {
  const std::vector<Attention> shapes = {
      {},
      {1, 2, 2, 37, 45, 24, 20, true, false, false},  // odd extents; a mask
      {2, 4, 2, 33, 33, 16, 16, false, true, true},   // keys shared by two heads each; causal; heads merged
      {1, 4, 1, 1, 70, 32, 32, true, true, true},     // a decode step: one query, the keys of a cache
      {1, 1, 1, 150, 150, 8, 8, false, true, false},  // more rows than a block's warps take at once
      {1, 4, 2, 37, 70, 24, 16, true, false, false, true},  // Kᵀ in memory, keys shared, rows of 70 keys (not 16-byte aligned)
      {1, 1, 1, 16, 160, 32, 16, false, true, true, true},  // Kᵀ in memory, aligned rows, several key tiles
  };
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16}) {
    Graph g;
    std::vector<FusionGroup> groups;
    std::string label(dtype_name(dt));
    for (const Attention& a : shapes) {
      groups.push_back(add_attention(g, dt, a, "a" + std::to_string(groups.size()) + "_"));
      ASSERT_TRUE(planner::match_attention(g, groups.back()).has_value()) << text(a);
      label += "; " + text(a);
    }
    // Each group with the planner's best flash candidate and, in the 16-bit types, the best on
    // tensor cores; the odd and the grouped-query shapes also with key tiles that do not divide
    // the keys (float32: with the fewest and most threads; float16: on tensor cores, 16 and 64
    // keys). One module, compiled for the H100 (sm_90: the SIMT and mma.sync text is the same
    // for sm_80).
    std::vector<FusionGroup> cases;
    std::vector<TileConfig> configs;
    for (size_t i = 0; i < groups.size(); ++i) {
      const FusionGroup& fg = groups[i];
      const bool varied = i == 1 || i == 2;  // the odd and the grouped-query shapes
      const TileConfig best = best_flash(g, fg);
      std::vector<TileConfig> forms = {best};
      if (varied && dt == DType::kF32) {
        for (const auto& [keys, threads] : std::vector<std::array<int, 2>>{{16, 64}, {32, 256}}) {
          TileConfig other = best;
          other.reduce_step = keys;
          other.threads = threads;
          forms.push_back(other);
        }
      }
      if (dt != DType::kF32) {
        const TileConfig tensor = best_flash(g, fg, true);
        forms.push_back(tensor);
        for (int64_t keys : {16, 64}) {
          TileConfig other = tensor;
          other.reduce_step = keys;
          if (varied && dt == DType::kF16) forms.push_back(other);
        }
      }
      for (const TileConfig& cfg : forms) {
        cases.push_back(fg);
        configs.push_back(cfg);
      }
    }
    size_t next = 0;
    check_groups(g, cases, [&](const FusionGroup&) { return configs[next++]; }, label, sm90);
  }
}

// The whole-row form keeps a tile's rows of scores in shared memory: at 16,384 keys not even one
// row fits beside its operands, while flash attention's tiles do not grow with the keys. 256
// queries over 1,024 causal keys run under the executor.
TEST(CodegenAttention, LongSequencesTakeTheFlashForm) {
  Attention a;
  a.heads = a.kv_heads = 1;
  a.queries = 128;
  a.keys = 16384;
  Graph g;
  const FusionGroup fg = add_attention(g, DType::kF16, a);
  planner::TilingOptions opt;
  opt.top_k = 1 << 20;
  const planner::Device& h100 = planner::find_device("h100");
  const auto candidates = planner::tile_candidates(g, fg, h100, opt);
  ASSERT_FALSE(candidates.empty());
  for (const planner::Candidate& c : candidates) {
    EXPECT_TRUE(c.config.flash || !c.config.library.empty() || !c.cost.valid) << c.config.str() << " holds the scores whole";
  }
  // The best generated candidate (cuDNN's attention, a library candidate, may model faster).
  const auto generated = std::find_if(candidates.begin(), candidates.end(), [](const planner::Candidate& c) { return c.config.library.empty(); });
  ASSERT_NE(generated, candidates.end());
  const planner::Candidate& best = *generated;
  ASSERT_TRUE(best.config.flash && best.cost.valid) << best.config.str() << ": " << best.cost.reject;
  // The fusion pass stitches it beyond max_row keys as a whole: one group holds both MatMuls.
  const auto group_of = [](const planner::FusionPlan& plan, const Graph& graph, const char* op, int nth) {
    int seen = 0;
    for (size_t i = 0; i < plan.groups.size(); ++i) {
      for (int n : plan.groups[i].nodes) {
        if (graph.nodes()[static_cast<size_t>(n)].op == op && seen++ == nth) return static_cast<int>(i);
      }
    }
    return -1;
  };
  const planner::FusionPlan fused = planner::fuse(g);
  EXPECT_EQ(group_of(fused, g, "MatMul", 0), group_of(fused, g, "MatMul", 1)) << "attention over 16,384 keys not stitched";
  // The same tiles over 1,024 keys take the same shared memory (unsplit: a split's last block
  // holds its weights, as many as the splits, whose count the keys bound).
  Attention shorter = a;
  shorter.keys = 1024;
  Graph g2;
  const FusionGroup fg2 = add_attention(g2, DType::kF16, shorter);
  TileConfig whole = best.config;
  whole.split_k = 1;
  EXPECT_EQ(planner::evaluate_tile(g2, fg2, h100, whole).smem_bytes, planner::evaluate_tile(g, fg, h100, whole).smem_bytes)
      << whole.str();
  a.queries = 256;
  a.keys = 1024;
  a.causal = true;
  Graph run;
  const FusionGroup small = add_attention(run, DType::kF16, a);
  check_groups(run, {small, small}, [&, n = 0](const FusionGroup& f) mutable { return best_flash(run, f, n++ == 1); },
               "256 queries over 1,024 keys, causal (SIMT, tensor cores)");
}

// Under a causal mask (a Where on a constant condition, or an additive constant bias as
// TinyLlama's export has it) a block runs the key tiles up to its last row's last visible key
// (planner::causal_mask_of): those past it add nothing; and where the mask is exactly the causal
// pattern (the condition, or a bias of 0 where a row sees the key) it is computed from the row and
// key, not read. Differentially, on the host executor's four checks: SIMT and tensor cores, square
// and with more keys than queries (rows see past the diagonal), a condition true on the keys a row
// does not see (the fill first), the bias form, a bias with a
// distance penalty where rows see (read, tiles still skipped), and split over blocks (splits past
// the rows' keys run no tile). The host counts about half the arithmetic of the same kernel
// unmasked, and the model charges the same share. A mask that hides a whole row, a fill that
// leaves weight, or more queries than keys (rows that see nothing) run every tile.
TEST(CodegenAttention, CausalRowsRunOnlyTheKeyTilesTheySee) {
  const auto mask_of = [](const Attention& a) {
    Graph g;
    const FusionGroup fg = add_attention(g, DType::kF16, a);
    return planner::causal_mask_of(g, fg, *planner::match_attention(g, fg));
  };
  const auto skips = [&](const Attention& a) { return mask_of(a).has_value(); };
  Attention square;
  square.heads = square.kv_heads = 2;
  square.queries = square.keys = 100;
  square.causal = true;
  Attention longer = square;  // 40 rows seeing the keys up to their own plus 60
  longer.queries = 40;
  Attention bias = square;
  bias.causal = false;
  bias.causal_bias = true;
  Attention sloped = bias;
  sloped.slope = 0.25f;
  Attention negated = longer;
  negated.causal_negated = true;
  // The same masks computed in the group from index vectors (planner/toeplitz.h).
  const auto computed = [](Attention a) {
    a.from_index_vectors = true;
    return a;
  };
  for (const Attention& a : {square, longer, bias, sloped, negated, computed(square), computed(longer), computed(bias), computed(sloped),
                             computed(negated)}) {
    const auto mask = mask_of(a);
    ASSERT_TRUE(mask.has_value()) << text(a);
    EXPECT_EQ(mask->from_indices, a.slope == 0.0f) << text(a);
  }
  for (const Attention& a : {computed(square), computed(bias)}) {
    Graph g;  // computed one key past the diagonal: no causal pattern
    const FusionGroup fg = add_attention(g, DType::kF32, a);
    for (Value& v : g.values()) {
      if (v.name == "last_seen") v.data = std::make_shared<const Tensor>(Tensor::scalar_int(DType::kI64, a.keys - a.queries + 1));
    }
    EXPECT_FALSE(planner::causal_mask_of(g, fg, *planner::match_attention(g, fg)).has_value()) << text(a);
  }
  Attention plain = square;
  plain.causal = false;
  EXPECT_FALSE(skips(plain));
  Attention hidden = bias;  // row 7 sees no key: its softmax spreads over every key
  hidden.masked_row = 7;
  EXPECT_FALSE(skips(hidden));
  Attention more = square;  // the first rows see nothing
  more.keys = 60;
  EXPECT_FALSE(skips(more));
  {
    Graph g;  // a Where whose fill leaves a masked key weight
    FusionGroup fg = add_attention(g, DType::kF32, square);
    for (int id : fg.nodes) {
      Node& n = g.nodes()[static_cast<size_t>(id)];
      if (n.op == "Where") n.inputs[2] = g.add_constant("minus_one", Tensor::scalar_float(DType::kF32, -1.0f));
    }
    planner::describe_group(g, fg);
    EXPECT_FALSE(planner::causal_mask_of(g, fg, *planner::match_attention(g, fg)).has_value());
  }
  for (DType dt : {DType::kF32, DType::kF16}) {
    Graph g;
    std::vector<FusionGroup> cases;
    std::vector<TileConfig> configs;
    for (const auto& [a, name] : {std::pair{square, "s_"}, std::pair{longer, "l_"}, std::pair{bias, "b_"}, std::pair{sloped, "d_"},
                                  std::pair{negated, "n_"}, std::pair{computed(longer), "cl_"}, std::pair{computed(bias), "cb_"},
                                  std::pair{computed(sloped), "cd_"}, std::pair{computed(negated), "cn_"}}) {
      const FusionGroup fg = add_attention(g, dt, a, name);
      // The mask computed from the indices is no parameter of the kernel (nor, computed in the
      // group, are the index vectors read); the sloped bias is read.
      const LoweredKernel lk = lower_group(g, fg, best_flash(g, fg), "masked");
      const auto mask = planner::causal_mask_of(g, fg, *planner::match_attention(g, fg));
      ASSERT_TRUE(mask.has_value()) << text(a);
      int read = mask->operand;
      for (int v : lk.inputs) read = g.value(v).name == std::string(name) + "key_index" ? v : read;
      const auto bound = std::find(lk.inputs.begin(), lk.inputs.end(), read);
      ASSERT_NE(bound, lk.inputs.end()) << text(a);
      const std::string param = lk.kernel.params[static_cast<size_t>(bound - lk.inputs.begin())].name;
      const std::string cuda = emit_cuda({lk.kernel});
      EXPECT_EQ(cuda.find(param + "[") != std::string::npos, a.slope != 0.0f) << text(a) << ": " << param;
      for (bool tensor : {false, true}) {
        if (tensor && dt == DType::kF32) continue;
        TileConfig cfg = best_flash(g, fg, tensor);
        cfg.reduce_step = 16;  // 7 key tiles of 100
        cfg.split_k = 1;
        cases.push_back(fg);
        configs.push_back(cfg);
        cfg.split_k = 3;
        cases.push_back(fg);
        configs.push_back(cfg);
      }
    }
    size_t next = 0;
    check_groups(g, cases, [&](const FusionGroup&) { return configs[next++]; },
                 std::string(dtype_name(dt)) + ": causal rows, square, longer, as a bias, split", sm90);
  }
  // Counted on the host and modeled: the arithmetic of the causal kernel against the same one
  // unmasked (the planner's tile of rows, 16 keys a tile: 2 x 100 rows over 100 keys).
  for (bool tensor : {false, true}) {
    Graph g;
    const FusionGroup causal = add_attention(g, DType::kF16, square, "c_");
    const FusionGroup full = add_attention(g, DType::kF16, plain, "f_");
    TileConfig cfg = best_flash(g, causal, tensor);
    cfg.tile = {1, 1, 16, 16};  // 16 rows a block: 7 row tiles, the i-th seeing i + 1 key tiles of 7
    cfg.threads = tensor ? 32 : 64;
    cfg.reduce_step = 16;
    cfg.split_k = 1;
    const auto counted = [&](const FusionGroup& fg) {
      const LoweredKernel lk = lower_group(g, fg, cfg, "counted");
      auto backend = backend::make_host_backend();
      auto module = backend->load({lk.kernel});
      std::mt19937 rng(fusetune::testing::test_seed());
      EXPECT_TRUE(backend::verify_kernel(g, fg, lk, *backend, *module, rng).ok) << cfg.str();
      return static_cast<double>(module->counters().at("counted").flops);
    };
    const planner::Device& h100 = planner::find_device("h100");
    const double counted_share = counted(causal) / counted(full);
    const double modeled_share = static_cast<double>(planner::evaluate_tile(g, causal, h100, cfg).flops) /
                                 static_cast<double>(planner::evaluate_tile(g, full, h100, cfg).flops);
    std::printf("%s %s: counted %.2f, modeled %.2f of the unmasked kernel's arithmetic\n", tensor ? "tensor cores" : "SIMT",
                cfg.str().c_str(), counted_share, modeled_share);
    EXPECT_LT(counted_share, 0.75) << cfg.str();
    EXPECT_NEAR(modeled_share, counted_share, 0.1) << cfg.str();
    if (!tensor) continue;
    // tile_candidates finds the mask once for the group (TilingOptions::flash_facts): each of its
    // flash candidates costs what evaluate_tile finds alone, the causal group's and the unmasked's.
    planner::TilingOptions every;
    every.top_k = 1000;
    for (const FusionGroup* fg : {&causal, &full}) {
      int flash = 0;
      for (const planner::Candidate& c : planner::tile_candidates(g, *fg, h100, every)) {
        if (!c.config.flash) continue;
        ++flash;
        const planner::Cost alone = planner::evaluate_tile(g, *fg, h100, c.config, every);
        EXPECT_EQ(c.cost.modeled_us, alone.modeled_us) << c.config.str();
        EXPECT_EQ(c.cost.dram_bytes, alone.dram_bytes) << c.config.str();
      }
      EXPECT_GT(flash, 0);
    }
  }
}

// A LLaMA-shaped prefill (TinyLlama's heads: 32 over 4 key-value heads, 64 wide; 512 tokens,
// causal, float16): its rows of 512 keys fit on chip, but the scores and the softmax merged alone
// (the whole-row form, 512 scores a row in shared memory) model slower than apart, so the pairwise
// stitch refused them, and the plan ran three launches with the scores written to DRAM and read
// back. The fusion pass tries the three at once first, as beyond max_row, where flash tiles them.
TEST(CodegenAttention, APrefillWhoseRowsFitIsStitchedWholeWhereThePairIsNot) {
  Attention a;
  a.heads = 32;
  a.kv_heads = 4;
  a.queries = a.keys = 512;
  a.head = a.value_width = 64;
  a.causal = true;
  Graph g;
  const FusionGroup fg = add_attention(g, DType::kF16, a);
  g.outputs().push_back(fg.outputs[0]);
  const planner::ModelPlan plan = planner::plan_model(g, planner::find_device("h200"));
  std::vector<int> holding_matmuls;
  for (size_t i = 0; i < plan.groups.size(); ++i) {
    for (int n : plan.groups[i].group.nodes) {
      if (g.nodes()[static_cast<size_t>(n)].op == "MatMul") holding_matmuls.push_back(static_cast<int>(i));
    }
  }
  ASSERT_EQ(holding_matmuls.size(), 2u);
  EXPECT_EQ(holding_matmuls[0], holding_matmuls[1]) << "the scores and P x V in " << plan.groups.size() << " groups";
  EXPECT_EQ(plan.launches, 1);
  const planner::GroupPlan& gp = plan.groups[static_cast<size_t>(holding_matmuls[0])];
  const planner::TileConfig& chosen = gp.candidates.at(gp.chosen).config;
  EXPECT_TRUE(chosen.flash || !chosen.library.empty()) << chosen.str() << " holds whole rows of scores";
}

// Flash-decoding: a decode step's attention (one query row a head) has as many tiles as heads,
// too few to fill the device, so its key tiles split over blocks (TileConfig::split_k), each
// block's unnormalized output and row statistics combined by the tile's last block. TinyLlama's
// step (32 heads over 4, a cache of 1,023 keys and the new one, 64 wide, float16) on the H200:
// the best flash candidate splits and models faster than the best unsplit one, and the plan
// runs the attention as one launch. Differentially, in every type: a grouped-query decode step
// over 300 keys with a mask, split as planned, into 3 splits and into 16 of one key tile each
// (19 tiles: the last six splits run none), SIMT and on tensor cores; 20 causal rows over 200
// keys (rows in batches of warps) split 3 ways; Kᵀ in memory over 72 keys in 4 splits (on
// tensor cores its tiles move by cp.async, and a split that runs none waits for its first
// tile's copies). Every barrier of a split kernel deleted in
// turn is a finding.
TEST(CodegenAttention, ADecodeStepSplitsItsKeysOverBlocks) {
  {
    const Attention a{1, 32, 4, 1, 1024, 64, 64, true};  // TinyLlama's step: 32 heads over 4, a mask
    Graph g;
    const FusionGroup fg = add_attention(g, DType::kF16, a);
    planner::TilingOptions opt;
    opt.top_k = 1 << 20;
    opt.library_algorithms = 0;
    const planner::Device& h200 = planner::find_device("h200");
    const planner::Candidate* split = nullptr;
    const planner::Candidate* whole = nullptr;
    const auto candidates = planner::tile_candidates(g, fg, h200, opt);
    for (const planner::Candidate& c : candidates) {
      if (!c.config.flash) continue;
      if (c.config.split_k > 1 && split == nullptr) split = &c;
      if (c.config.split_k == 1 && whole == nullptr) whole = &c;
    }
    ASSERT_TRUE(split != nullptr && whole != nullptr);
    EXPECT_LT(split->cost.modeled_us, whole->cost.modeled_us) << split->config.str() << " against " << whole->config.str();
    EXPECT_TRUE(candidates.front().config.flash) << candidates.front().config.str();
    EXPECT_GT(candidates.front().config.split_k, 1) << candidates.front().config.str();
    std::printf("TinyLlama's decode attention on the H200, modeled: split %s %.2f us, unsplit %s %.2f us\n",
                split->config.str().c_str(), split->cost.modeled_us, whole->config.str().c_str(), whole->cost.modeled_us);
    g.outputs().push_back(fg.outputs[0]);
    EXPECT_EQ(planner::plan_model(g, h200).launches, 1);
  }
  const Attention step{1, 8, 2, 1, 300, 32, 32, true};  // a grouped-query decode step, a mask
  Attention transposed = step;  // Kᵀ in memory, its rows 16-byte aligned: every key tile by cp.async
  transposed.heads = transposed.kv_heads = 2;  // not repeated: K and V are views the stage copies
  transposed.keys = 72;
  transposed.k_transposed = true;
  Attention rows;  // rows in batches of the block's warps
  rows.heads = rows.kv_heads = 2;
  rows.queries = 20;
  rows.keys = 200;
  rows.causal = true;
  const auto split = [](TileConfig cfg, int splits, int64_t keys = 0) {
    cfg.split_k = splits;
    if (keys > 0) cfg.reduce_step = keys;
    return cfg;
  };
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16}) {
    Graph g;
    const FusionGroup decode = add_attention(g, dt, step, "d_");
    const FusionGroup many = add_attention(g, dt, rows, "r_");
    const FusionGroup kt = add_attention(g, dt, transposed, "t_");
    std::vector<FusionGroup> cases;
    std::vector<TileConfig> configs;
    const auto add = [&](const FusionGroup& fg, const TileConfig& cfg) {
      ASSERT_TRUE(planner::evaluate_tile(g, fg, planner::find_device("h100"), cfg).valid) << cfg.str();
      cases.push_back(fg);
      configs.push_back(cfg);
    };
    for (bool tensor : {false, true}) {
      if (tensor && dt == DType::kF32) continue;
      const TileConfig best = best_flash(g, decode, tensor);
      if (best.split_k > 1) add(decode, best);
      add(decode, split(best, 3));
      add(decode, split(best, 16, 16));
      TileConfig more = best_flash(g, many, tensor);
      more.threads = 64;  // two warps: the rows' statistics in batches of two
      more.tile[2] = 32;                // every row in one tile
      add(many, split(more, 3, 16));
      add(kt, split(best_flash(g, kt, tensor), 4, 16));  // 5 key tiles, two a split: the last runs none
    }
    size_t next = 0;
    check_groups(g, cases, [&](const FusionGroup&) { return configs[next++]; },
                 std::string(dtype_name(dt)) + ": a decode step's keys and 20 causal rows split", sm90);
  }
  for (bool tensor : {false, true}) {
    Graph g;
    const FusionGroup fg = add_attention(g, tensor ? DType::kF16 : DType::kF32, rows);
    TileConfig cfg = split(best_flash(g, fg, tensor), 3, 32);
    cfg.threads = 64;
    cfg.tile[2] = 32;
    const LoweredKernel good = lower_group(g, fg, cfg, "attention");
    EXPECT_GE(planner::evaluate_tile(g, fg, planner::find_device("h100"), cfg).smem_bytes, good.kernel.shared_bytes) << cfg.str();
    EXPECT_GE(expect_every_barrier_needed(g, fg, good, (tensor ? "tensor cores, " : "SIMT, ") + cfg.str()), 6);
  }
  // The last block reads each split's partial outputs as they were stored: four of a thread's in
  // one 16-byte load past L1, none through it.
  if (!backend::nvrtc_available()) {
    std::printf("NOTE: the combine's PTX not read: NVRTC not available in this build\n");
    return;
  }
  for (bool tensor : {false, true}) {
    Graph g;
    const FusionGroup fg = add_attention(g, DType::kF16, rows);
    TileConfig cfg = split(best_flash(g, fg, tensor), 3, 32);
    cfg.threads = 64;
    cfg.tile[2] = 32;  // 16 outputs a thread in the SIMT form
    const std::string ptx = backend::compile_ptx(emit_cuda({lower_group(g, fg, cfg, "attention").kernel}), "sm_90");
    EXPECT_NE(ptx.find("ld.global.cg.v4.f32"), std::string::npos) << cfg.str();
    for (const char* through_l1 : {"ld.global.f32", "ld.global.v4.f32", "ld.global.nc.v4.f32"}) {
      EXPECT_EQ(ptx.find(through_l1), std::string::npos) << cfg.str() << ": a partial output read by " << through_l1;
    }
  }
}

// Grouped-query heads folded into a block's rows (planner::head_fold): a block takes the query
// rows of 2 to 8 heads that read the same K and V, and stages each key tile once for all of
// them. The planner offers such tiles only where the heads share K and V (a repeat's group, or
// one K and V for all heads) and models TinyLlama's decode step on them with less L2 traffic
// and faster than the one-head tiles; a tile of more heads than a group, of heads that do not
// share, or whose second block straddles two groups is rejected, and so is a tile of rows that
// holds parts of two heads' rows. Differentially, in every type, SIMT and mma.sync (and wgmma in
// float16), under the host executor's checks: a decode step (8 heads over 2, a mask), split over
// blocks; three query rows under a causal mask (rows head-major: head origin + row / 3); heads
// merged after the core (the root's tile of several heads' columns); Kᵀ in memory, repeated;
// folds of 3 heads (Qwen2's groups are 7). Each barrier deleted from a folded kernel is a finding.
TEST(CodegenAttention, GroupedQueryHeadsShareABlock) {
  const planner::Device& h200 = planner::find_device("h200");
  planner::TilingOptions opt;
  opt.top_k = 1 << 20;
  opt.library_algorithms = 0;
  // The heads a flash candidate's block folds (1: one matrix).
  const auto folded = [](const Graph& g, const FusionGroup& fg, const TileConfig& cfg) {
    const auto core = planner::match_attention(g, fg);
    const int out = g.nodes()[static_cast<size_t>(core->output)].outputs[0];
    const Shape& os = g.value(out).shape;
    return g.value(fg.outputs[0]).shape == os ? cfg.tile[os.size() - 3] : cfg.tile.back() / os.back();
  };
  {
    const Attention a{1, 32, 4, 1, 1024, 64, 64, true};  // TinyLlama's step: 32 heads over 4, a mask
    Graph g;
    const FusionGroup fg = add_attention(g, DType::kF16, a);
    const planner::Candidate* fold = nullptr;
    const planner::Candidate* one = nullptr;
    std::set<int64_t> heads;
    const std::vector<planner::Candidate> candidates = planner::tile_candidates(g, fg, h200, opt);
    for (const planner::Candidate& c : candidates) {
      if (!c.config.flash) continue;
      heads.insert(folded(g, fg, c.config));
      if (folded(g, fg, c.config) > 1 && fold == nullptr) fold = &c;
      if (folded(g, fg, c.config) == 1 && one == nullptr) one = &c;
    }
    ASSERT_TRUE(fold != nullptr && one != nullptr);
    EXPECT_EQ(heads, (std::set<int64_t>{1, 2, 4, 8})) << "a group holds 8 heads";
    EXPECT_LT(fold->cost.modeled_us, one->cost.modeled_us) << fold->config.str() << " against " << one->config.str();
    EXPECT_LT(fold->cost.l2_bytes, one->cost.l2_bytes) << fold->config.str() << " against " << one->config.str();
    std::printf("TinyLlama's decode attention on the H200, modeled: %s %.2f us (L2 %.2f MB), one head a block %s %.2f us (L2 %.2f MB)\n",
                fold->config.str().c_str(), fold->cost.modeled_us, static_cast<double>(fold->cost.l2_bytes) / 1e6,
                one->config.str().c_str(), one->cost.modeled_us, static_cast<double>(one->cost.l2_bytes) / 1e6);
    // Qwen2-0.5B's step: 14 heads over 2, groups of 7 (no power of two) folded whole.
    const Attention qwen{1, 14, 2, 1, 1024, 64, 64, true};
    Graph q;
    const FusionGroup qg = add_attention(q, DType::kF16, qwen);
    std::set<int64_t> sevens;
    for (const planner::Candidate& c : planner::tile_candidates(q, qg, h200, opt)) {
      if (c.config.flash) sevens.insert(folded(q, qg, c.config));
    }
    EXPECT_EQ(sevens, (std::set<int64_t>{1, 7})) << "a group holds 7 heads";
    // 16 heads span two groups: no candidate, and evaluate_tile rejects the tile.
    TileConfig wide = fold->config;
    wide.tile[1] = 16;
    EXPECT_FALSE(planner::evaluate_tile(g, fg, h200, wide).valid) << wide.str();
  }
  {
    Attention own{1, 8, 8, 1, 256, 64, 64, true};  // every head its own K and V: nothing to share
    Graph g;
    const FusionGroup fg = add_attention(g, DType::kF16, own);
    for (const planner::Candidate& c : planner::tile_candidates(g, fg, h200, opt)) {
      if (c.config.flash) {
        EXPECT_EQ(folded(g, fg, c.config), 1) << c.config.str();
      }
    }
    TileConfig two = best_flash(g, fg);
    two.tile[1] = 2;
    const planner::Cost c = planner::evaluate_tile(g, fg, h200, two);
    EXPECT_FALSE(c.valid) << two.str();
    EXPECT_NE(c.reject.find("sharing K and V"), std::string::npos) << c.reject;
  }
  const Attention step{1, 8, 2, 1, 300, 32, 32, true};  // a decode step, 8 heads over 2, a mask
  Attention causal = step;                               // three query rows a head, causal
  causal.queries = 3;
  causal.keys = 40;
  causal.mask = false;
  causal.causal = true;
  Attention merged = step;  // heads merged after the core: the root's columns hold the heads
  merged.keys = 70;
  merged.merge_heads = true;
  Attention transposed = step;  // Kᵀ in memory, repeated
  transposed.keys = 72;
  transposed.k_transposed = true;
  Attention threes = step;  // 6 heads over 2: folds of 3
  threes.heads = 6;
  threes.keys = 50;
  {
    // Heads merged after the core, 32 wide: a root tile of 48 columns puts heads 1 and 2 (of
    // different groups) in its second block, so the tile is rejected, though its first block's
    // heads share.
    Graph g;
    const FusionGroup fg = add_attention(g, DType::kF16, merged);
    TileConfig straddling = best_flash(g, fg);
    ASSERT_EQ(straddling.tile.size(), 3u) << straddling.str();
    straddling.tile[2] = 48;
    const planner::Cost c = planner::evaluate_tile(g, fg, h200, straddling);
    EXPECT_FALSE(c.valid) << straddling.str();
    EXPECT_NE(c.reject.find("from a multiple of their count"), std::string::npos) << c.reject;
  }
  {
    // Heads merged with the query rows in the root ([1, 4 x 36, 16], 2 key-value heads): a tile
    // of 16 rows holds parts of two heads' rows (rows 32 to 47: head 0's last 4, head 1's first
    // 12), which is neither one matrix nor a fold. The planner offers no such flash tile, and
    // codegen refuses one, where it once took its largest extents (2 heads, 36 rows) for a fold.
    Graph g;
    FusionGroup fg = add_attention(g, DType::kF16, Attention{1, 4, 2, 36, 40, 16, 16});
    const int flat = add_op(g, "Reshape", {fg.outputs[0]}, attrs({{"shape", std::vector<int64_t>{1, 144, 16}}}));
    fg.nodes.push_back(static_cast<int>(g.nodes().size()) - 1);
    planner::describe_group(g, fg);
    fg.outputs = {flat};
    int offered = 0;
    for (const planner::Candidate& c : planner::tile_candidates(g, fg, planner::find_device("h100"), opt)) {
      if (!c.config.flash) continue;
      ++offered;
      EXPECT_EQ(c.config.tile[1] % 36, 0) << c.config.str() << " holds parts of two heads' rows";
      EXPECT_NO_THROW(lower_group(g, fg, c.config, "attention")) << c.config.str();
    }
    EXPECT_GT(offered, 0);
    TileConfig straddling = best_flash(g, fg);
    straddling.tile[1] = 16;
    EXPECT_ANY_THROW(lower_group(g, fg, straddling, "attention")) << straddling.str();
    check_groups(g, {fg, fg}, [&, n = 0](const FusionGroup& f) mutable { return best_flash(g, f, n++ == 1); },
                 "heads merged with the rows in the root (SIMT, tensor cores)");
  }
  // The best flash candidate of the group that folds `heads` heads, on tensor cores or not.
  const auto best_folded = [&](const Graph& g, const FusionGroup& fg, bool tensor, int64_t heads, bool wgmma = false) {
    for (const planner::Candidate& c : planner::tile_candidates(g, fg, planner::find_device("h100"), opt)) {
      if (c.config.flash && c.config.mma == tensor && c.config.wgmma == wgmma && folded(g, fg, c.config) == heads) return c.config;
    }
    ADD_FAILURE() << "no flash candidate folding " << heads << " heads" << (tensor ? " on tensor cores" : "")
                  << (wgmma ? " by wgmma" : "") << " for " << fg.pattern;
    return TileConfig{};
  };
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16}) {
    Graph g;
    const std::vector<FusionGroup> groups = {add_attention(g, dt, step, "d_"), add_attention(g, dt, causal, "c_"),
                                             add_attention(g, dt, merged, "m_"), add_attention(g, dt, transposed, "t_"),
                                             add_attention(g, dt, threes, "s_")};
    std::vector<FusionGroup> cases;
    std::vector<TileConfig> configs;
    for (bool tensor : {false, true}) {
      if (tensor && dt == DType::kF32) continue;
      for (size_t i = 0; i < groups.size(); ++i) {
        for (int64_t heads : i == 4 ? std::vector<int64_t>{3} : std::vector<int64_t>{2, 4}) {
          TileConfig cfg = best_folded(g, groups[i], tensor, heads);
          cases.push_back(groups[i]);
          configs.push_back(cfg);
          if (i == 0 && heads == 4) {  // split over blocks, one key tile of 16 a split or three splits
            cfg.split_k = 3;
            cases.push_back(groups[i]);
            configs.push_back(cfg);
          }
          if (tensor && dt == DType::kF16 && i < 2 && heads == 4) {  // by wgmma (a warpgroup's 64 rows, 4 or 12 used)
            cases.push_back(groups[i]);
            configs.push_back(best_folded(g, groups[i], true, heads, true));
          }
        }
      }
    }
    size_t next = 0;
    check_groups(g, cases, [&](const FusionGroup&) { return configs[next++]; },
                 std::string(dtype_name(dt)) + ": grouped-query heads folded into a block's rows", sm90);
  }
  for (bool tensor : {false, true}) {
    Graph g;
    const FusionGroup fg = add_attention(g, tensor ? DType::kF16 : DType::kF32, causal);
    const TileConfig cfg = best_folded(g, fg, tensor, 4);
    const LoweredKernel good = lower_group(g, fg, cfg, "attention");
    EXPECT_GE(planner::evaluate_tile(g, fg, planner::find_device("h100"), cfg).smem_bytes, good.kernel.shared_bytes) << cfg.str();
    EXPECT_GE(expect_every_barrier_needed(g, fg, good, (tensor ? "tensor cores, " : "SIMT, ") + cfg.str()), 2);
  }
}

// Where Q, K and V are views of group inputs with the width contiguous (planner::wide_operand;
// grouped-query heads through the repeat's grouped view), the SIMT form stages them 16 bytes a
// load, a thread's batch of loads issued before any is stored, element by element only where a
// chunk starts unaligned; on tensor cores the grouped-query K and V move by cp.async into two
// slots. Differentially, in every type: a grouped-query decode step over 300 keys (the best SIMT
// candidate and one of a single key tile a split); value rows of 20 (float32: 16-byte chunks,
// 16-bit types: element by element); K and V sliced one element into rows one wider (a row's
// chunks aligned only every eighth or fourth row); V's columns each repeated twice (grouped along
// its width: no contiguous run, so element by element, in both forms). The PTX of the SIMT step:
// 128-bit read-only global loads; of the tensor-core step: cp.async, double-buffered.
TEST(CodegenAttention, TheStagingLoadsSixteenBytesAtATime) {
  const Attention step{1, 8, 2, 1, 300, 64, 64, true};  // a grouped-query decode step, a mask
  Attention odd;                                       // value rows of 20
  odd.queries = 24;
  odd.keys = 40;
  odd.value_width = 20;
  Attention sliced = step;
  sliced.queries = 5;
  sliced.sliced = true;
  sliced.mask = false;
  Attention repeated;
  repeated.keys = 40;
  repeated.v_repeated = true;
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16}) {
    Graph g;
    const FusionGroup decode = add_attention(g, dt, step, "d_");
    const FusionGroup narrow = add_attention(g, dt, odd, "o_");
    const FusionGroup offset = add_attention(g, dt, sliced, "s_");
    const FusionGroup columns = add_attention(g, dt, repeated, "c_");
    const planner::AttentionCore core = *planner::match_attention(g, columns);
    EXPECT_FALSE(planner::wide_operand(g, columns, core, core.output, 1).has_value()) << "V's columns repeated are no run";
    EXPECT_FALSE(planner::async_operand(g, columns, core, core.output, 1).has_value()) << "V's columns repeated are no run";
    std::vector<FusionGroup> cases = {decode, decode, narrow, offset, columns};
    TileConfig one_tile = best_flash(g, decode);
    one_tile.split_k = 16;
    one_tile.reduce_step = 32;
    std::vector<TileConfig> configs = {best_flash(g, decode), one_tile, best_flash(g, narrow), best_flash(g, offset),
                                       best_flash(g, columns)};
    for (const TileConfig& cfg : configs) ASSERT_FALSE(cfg.mma) << cfg.str();
    if (dt != DType::kF32) {
      cases.push_back(columns);
      configs.push_back(best_flash(g, columns, true));
    }
    const std::string label = std::string(dtype_name(dt)) + ": the SIMT form's staging";
    size_t next = 0;
    check_groups(g, cases, [&](const FusionGroup&) { return configs[next++]; }, label, sm90);
    if (!backend::nvrtc_available()) {
      std::printf("NVRTC not available: the PTX of the staging not read\n");
      continue;
    }
    // The step's PTX: K's and V's rows 16 bytes a load (Q's too), read only.
    const std::string ptx = backend::compile_ptx(emit_cuda({lower_group(g, decode, configs[0], "step").kernel}), "sm_90");
    const size_t wide = matches(ptx, R"(\bld\.global\.nc\.v4\.[bfu]32\b)");
    EXPECT_GE(wide, 3u) << label << ": Q, K and V in 128-bit loads";
    std::printf("%s: the decode step's SIMT kernel has %zu 128-bit global loads\n", label.c_str(), wide);
  }
  // On tensor cores the grouped-query step's K and V move by cp.async, double-buffered.
  if (!backend::nvrtc_available()) return;
  Graph g;
  const FusionGroup decode = add_attention(g, DType::kF16, step);
  TileConfig cfg = best_flash(g, decode, true);
  cfg.split_k = 1;
  const std::string ptx = backend::compile_ptx(emit_cuda({lower_group(g, decode, cfg, "step").kernel}), "sm_90");
  EXPECT_GE(matches(ptx, R"(\bcp\.async\.c[ag]\.shared\.global\b)"), 3u);
  EXPECT_NE(ptx.find("cp.async.wait_group 1;"), std::string::npos) << "the key tiles are not double-buffered";
}

// Q and K computed in the group by a rotary embedding (LLaMA's) are staged a run of 8 columns a
// thread: x, cos and sin in 16-byte loads, and the rotate-half piece too, each half's read a
// 16-byte load predicated on its piece, where the run lies in one piece (codegen/stages/
// context.h along_reads: the halves of a 64-wide head are multiples of the run, proved by
// IndexExpr::shift). Heads of 24 (halves of 12) have runs that straddle the halves: the pieces
// stay element by element, x, cos and sin still 16 bytes a load. Both against the reference under
// the executor's checks, on tensor cores and SIMT, float16 and bfloat16; counted by the executor,
// most of the tensor-core form's global load sectors come by 16-byte accesses.
TEST(CodegenAttention, TheRotaryEmbeddingIsStagedSixteenBytesAtATime) {
  for (DType dt : {DType::kF16, DType::kBF16}) {
    for (int64_t head : {64, 24}) {
      Attention a;
      a.queries = 40;
      a.keys = 40;
      a.head = a.value_width = head;
      a.causal = true;
      a.rotary = true;
      Graph g;
      const FusionGroup fg = add_attention(g, dt, a);
      const std::string label = std::string(dtype_name(dt)) + " " + text(a);
      const std::vector<TileConfig> configs = {best_flash(g, fg, true), best_flash(g, fg)};
      size_t next = 0;
      check_groups(g, {fg, fg}, [&](const FusionGroup&) { return configs[next++]; }, label, sm90);
      const LoweredKernel lk = lower_group(g, fg, configs[0], "rope");
      const std::string cuda = emit_cuda({lk.kernel});
      const size_t predicated = matches(cuda, R"(\? ft_load_ft_u16x8\(in)");
      if (head == 64) {
        EXPECT_GE(predicated, 4u) << label << ": Q's and K's halves each in predicated 16-byte loads";
      } else {
        EXPECT_EQ(predicated, 0u) << label << ": runs that straddle the halves";
      }
      EXPECT_GE(matches(cuda, R"(= ft_load_ft_u16x8\(in)"), 6u) << label << ": Q's and K's x, cos and sin in 16-byte loads";
      auto backend = backend::make_host_backend();
      auto module = backend->load({lk.kernel});
      std::mt19937 rng(fusetune::testing::test_seed());
      ASSERT_TRUE(backend::verify_kernel(g, fg, lk, *backend, *module, rng).ok) << label;
      const simt::Counters counted = module->counters().at("rope");
      const double wide = static_cast<double>(counted.global_sectors_of_width(16, false)) /
                          static_cast<double>(std::max<uint64_t>(1, counted.global_load_sectors));
      std::printf("%s: %.0f%% of the global load sectors by 16-byte accesses, %llu load requests\n", label.c_str(), 100 * wide,
                  static_cast<unsigned long long>(counted.global_load_requests));
      if (head == 64) {
        EXPECT_GE(wide, 0.9) << label;  // heads of 24: each run's half in 8 two-byte loads
      }
    }
  }
}

// The tensor-core form keeps a key tile's scores and probabilities in the registers its products
// leave them in (FlashAttention-2's layout): the block's shared memory holds Q and the key tiles of
// K and V, no float32 buffer (the rows' sums stay in the lanes that hold the rows, and the output,
// the group's root, goes from the registers to memory), a key tile meets at two
// barriers (its K and V staged; its reads done before the next tile's), and the PTX converts the
// probabilities two to a cvt and exchanges the rows' maxima within quads. A causal prefill with a
// mask, float16 and bfloat16, its outputs checked against the reference as every test's are.
TEST(CodegenAttention, TheTensorCoreFormKeepsATilesScoresInRegisters) {
  const Attention a = causal_prefill();
  for (DType dt : {DType::kF16, DType::kBF16}) {
    Graph g;
    const FusionGroup fg = add_attention(g, dt, a);
    TileConfig cfg = best_flash(g, fg, true);
    cfg.split_k = 1;  // unsplit: flash-decoding's combination keeps a weight a row and split
    ASSERT_TRUE(cfg.mma && cfg.flash) << cfg.str();
    const std::string label = std::string(dtype_name(dt)) + " " + cfg.str();
    check_groups(g, {fg}, [&](const FusionGroup&) { return cfg; }, label, sm90);
    const Kernel k = lower_group(g, fg, cfg, "attn").kernel;
    for (const SharedAlloc& s : k.shared) EXPECT_NE(s.dtype, DType::kF32) << label << ": " << s.name << " holds floats";
    std::function<int(const Block&)> barriers = [&](const Block& b) {
      int n = 0;
      for (const Stmt& s : b) n += (s.kind == Stmt::Kind::kBarrier ? 1 : 0) + barriers(s.body) + barriers(s.orelse);
      return n;
    };
    const Stmt* loop = key_tile_loop(k.body);
    ASSERT_NE(loop, nullptr) << label << ": no loop over the key tiles";
    EXPECT_EQ(barriers(loop->body), 2) << label;
    if (!backend::nvrtc_available()) {
      std::printf("NVRTC not available: the PTX of the %s form not read\n", label.c_str());
      continue;
    }
    const std::string ptx = backend::compile_ptx(emit_cuda({k}), "sm_90");
    EXPECT_GE(matches(ptx, dt == DType::kF16 ? R"(\bcvt\.rn\.f16x2\.f32\b)" : R"(\bcvt\.rn\.bf16x2\.f32\b)"), 1u) << label;
    EXPECT_GE(matches(ptx, R"(\bshfl\.sync\.bfly\.b32\b)"), 4u) << label;
    EXPECT_EQ(matches(ptx, R"(\bst\.shared\.[bu]16\b)"), 0u) << label << ": 16-bit values stored to shared memory (P)";
  }
}

// The tensor-core forms' output goes from the registers to the group's root, which is the output
// or a view of it (here heads merged: a Transpose and a Reshape), where it went through a float32
// buffer of the tile's outputs (4-byte stores by the fragments' lanes, eight rows a bank: 8-way
// conflicts) and a barrier, to be read back a column a lane 32 bytes apart (8-way again) and
// written. The quads exchange their quotients (transpose_quad) so that a lane stores 8
// consecutive columns of a row, 16 bytes at a time. Counted by the host executor on BERT-base's
// attention (heads of 64, 128 queries and keys) with mma.sync and wgmma: no float32 shared buffer,
// every 16-byte global store at the least sectors and the root stored by 16-byte accesses alone,
// no shared store narrower than 16 bytes. Odd extents (37 queries, heads of 24: a unit of columns
// past the width) and a decode step whose keys split over blocks against the reference, with
// the output merged or not, and the SIMT form writing the root element by element.
TEST(CodegenAttention, TheOutputLeavesFromTheRegistersSixteenBytesALane) {
  const Attention bert = {1, 2, 2, 128, 128, 64, 64, false, false, true};
  for (bool wgmma : {false, true}) {
    Graph g;
    const FusionGroup fg = add_attention(g, DType::kF16, bert);
    TileConfig cfg = best_flash(g, fg, true, wgmma);
    cfg.split_k = 1;  // unsplit: flash-decoding's combination keeps a weight a row and split
    const std::string label = text(bert) + " " + cfg.str();
    const LoweredKernel lk = lower_group(g, fg, cfg, "att");
    for (const SharedAlloc& s : lk.kernel.shared) EXPECT_NE(s.dtype, DType::kF32) << label << ": " << s.name << " holds floats";
    auto backend = backend::make_host_backend();
    auto module = backend->load({lk.kernel});
    std::mt19937 rng(fusetune::testing::test_seed());
    ASSERT_TRUE(backend::verify_kernel(g, fg, lk, *backend, *module, rng).ok) << label;
    const simt::Counters counted = module->counters().at("att");
    int wide_stores = 0;
    for (const auto& [site, sc] : counted.sites) {
      if (!sc.store) continue;
      if (sc.global) {
        EXPECT_EQ(sc.size, 16) << label << ": " << sc.requests << " global stores of " << sc.size << " bytes";
        EXPECT_EQ(sc.units, sc.ideal()) << label << ": " << sc.requests << " 16-byte global stores in " << sc.units << " sectors";
        ++wide_stores;
      } else {
        EXPECT_EQ(sc.size, 16) << label << ": " << sc.requests << " shared stores of " << sc.size << " bytes";
      }
    }
    EXPECT_GE(wide_stores, 1) << label;
  }
  Attention odd;
  odd.queries = 37;
  odd.keys = 45;
  odd.head = odd.value_width = 24;
  Attention decode;
  decode.queries = 1;
  decode.keys = 300;
  decode.head = decode.value_width = 64;
  for (Attention a : {odd, decode}) {
    for (bool merged : {false, true}) {
      a.merge_heads = merged;
      for (DType dt : {DType::kF16, DType::kBF16}) {
        Graph g;
        const FusionGroup fg = add_attention(g, dt, a);
        const std::string label = std::string(dtype_name(dt)) + " " + text(a);
        const std::vector<TileConfig> configs = {best_flash(g, fg, true), best_flash(g, fg, true, true), best_flash(g, fg)};
        for (const TileConfig& cfg : configs) {
          const LoweredKernel lk = lower_group(g, fg, cfg, "att");
          for (const SharedAlloc& s : lk.kernel.shared) {
            EXPECT_TRUE(s.dtype != DType::kF32 || !cfg.mma || cfg.split_k > 1) << label << " " << cfg.str() << ": " << s.name;
          }
        }
        size_t next = 0;
        check_groups(g, {fg, fg, fg}, [&](const FusionGroup&) { return configs[next++]; }, label, sm90);
      }
    }
  }
}

// The wgmma form's copies into core matrices land without bank conflicts: a chunk's 16 bytes lie
// at (row % 8) x 16 within their 128, so eight consecutive lanes take one chunk of eight rows
// (stages/attention.cpp place_chunk), where lanes along a row would all hit the same four banks
// (8 wavefronts a quarter-warp). Counted by the host executor on a head of 64 over 128 keys (BERT
// base's) and on Kᵀ in memory: every 16-byte shared store site needs the least wavefronts, and
// the copies' global reads of Q, K and V the least sectors (a warp reads 64 contiguous bytes of
// each of 8 rows).
TEST(CodegenAttention, TheWgmmaFormsCopiesLandWithoutBankConflicts) {
  const std::vector<Attention> shapes = {{1, 2, 2, 128, 128, 64, 64}, {1, 4, 2, 37, 72, 24, 16, true, false, false, true}};
  for (const Attention& a : shapes) {
    Graph g;
    const FusionGroup fg = add_attention(g, DType::kF16, a);
    const std::string label = text(a);
    const TileConfig cfg = best_flash(g, fg, true, true);
    ASSERT_TRUE(cfg.wgmma) << label;
    const LoweredKernel lk = lower_group(g, fg, cfg, "wg");
    auto backend = backend::make_host_backend();
    auto module = backend->load({lk.kernel});
    std::mt19937 rng(fusetune::testing::test_seed());
    ASSERT_TRUE(backend::verify_kernel(g, fg, lk, *backend, *module, rng).ok) << label;
    const simt::Counters counted = module->counters().at("wg");
    int stores = 0;
    for (const auto& [site, sc] : counted.sites) {
      if (sc.size != 16 || !sc.store) continue;
      if (!sc.global) {
        ++stores;
        EXPECT_EQ(sc.units, sc.ideal()) << label << ": " << sc.requests << " 16-byte shared stores in " << sc.units << " wavefronts";
      }
    }
    EXPECT_GE(stores, 3) << label << ": Q's, K's and V's copies";
    if (a.head == 64) {
      for (const auto& [site, sc] : counted.sites) {
        if (sc.global && !sc.store && sc.size == 16) {
          EXPECT_EQ(sc.units, sc.ideal()) << label << ": a copy's global reads, " << sc.requests << " requests";
        }
      }
    }
  }
}

// On sm_90a the tensor-core form also issues wgmma: a warpgroup per 64 rows, Q and the key tiles
// as core matrices in shared memory (K as a K-major B, Kᵀ as an N-major one), S waited for in the
// registers the softmax takes it in, P V with P's fragments as wgmma's register A. Against the
// reference under the host executor's checks, float16 and bfloat16: odd extents and a mask,
// grouped-query keys under a causal mask with heads merged, a decode step, more rows than a
// warpgroup (two warpgroups), K and V sliced to rows at every alignment, Kᵀ in memory; key tiles
// of 16 and 64 besides the planner's, and 16 split over two blocks (the second from an odd tile).
// Every barrier and wait deleted in turn is a finding. The CUDA compiles for sm_90a with both
// wgmma forms in its PTX and no ldmatrix. Forms the operands cannot take (an operand computed in
// the group) get no wgmma candidate.
TEST(CodegenAttention, TheWgmmaFormMatchesTheReference) {
  std::vector<Attention> shapes = {
      {1, 2, 2, 37, 45, 24, 20, true, false, false},     // odd extents; a mask
      {2, 4, 2, 70, 70, 64, 64, false, true, true},      // keys shared by two heads each; causal; heads merged
      {1, 4, 1, 1, 70, 32, 32, true, true, true},        // a decode step
      {1, 1, 1, 150, 150, 16, 16, false, true, false},   // 150 rows: two warpgroups, two row tiles
      {1, 4, 2, 37, 72, 24, 16, true, false, false, true},  // Kᵀ in memory, keys shared
  };
  Attention sliced;
  sliced.queries = 24;
  sliced.keys = 40;
  sliced.sliced = true;
  shapes.push_back(sliced);
  for (DType dt : {DType::kF16, DType::kBF16}) {
    Graph g;
    std::vector<FusionGroup> cases;
    std::vector<TileConfig> configs;
    std::string label(dtype_name(dt));
    for (size_t i = 0; i < shapes.size(); ++i) {
      const FusionGroup fg = add_attention(g, dt, shapes[i], "a" + std::to_string(i) + "_");
      label += "; " + text(shapes[i]);
      const TileConfig best = best_flash(g, fg, true, true);
      ASSERT_TRUE(best.wgmma && best.mma && best.flash) << best.str();
      std::vector<TileConfig> forms = {best};
      for (int64_t keys : {16, 64}) {
        TileConfig other = best;
        other.reduce_step = keys;
        if (keys != best.reduce_step && (i == 0 || i == 1)) forms.push_back(other);
      }
      if (i == 3) {  // both row tiles' 128 rows in one block: two warpgroups
        TileConfig two = best;
        two.tile[2] = 128;
        two.threads = 256;
        forms.push_back(two);
      }
      for (TileConfig& cfg : forms) cfg.split_k = i == 2 ? cfg.split_k : 1;
      if (i == 1) {  // 5 key tiles of 16 in 2 splits: the second starts at an odd tile (3)
        TileConfig split = best;
        split.reduce_step = 16;
        split.split_k = 2;
        forms.push_back(split);
      }
      for (TileConfig& cfg : forms) {
        cases.push_back(fg);
        configs.push_back(cfg);
        label += " [" + cfg.str() + "]";
      }
    }
    size_t next = 0;
    check_groups(g, cases, [&](const FusionGroup&) { return configs[next++]; }, label, sm90);
    if (!backend::nvrtc_available()) {
      std::printf("NVRTC not available: the PTX of the wgmma form not read\n");
      continue;
    }
    const Kernel k = lower_group(g, cases[1], configs[1], "attn").kernel;
    const std::string ptx = backend::compile_ptx(emit_cuda({k}), "sm_90");
    EXPECT_GE(matches(ptx, R"(\bwgmma\.mma_async\.sync\.aligned\.m64n\d+k16\.f32\.(b?f16)\.\1\s+\{[^}]*\},\s*%rd)"), 1u)
        << label << ": no wgmma with A from shared memory";
    EXPECT_GE(matches(ptx, R"(\bwgmma\.mma_async\.sync\.aligned\.m64n\d+k16\.f32\.(b?f16)\.\1\s+\{[^}]*\},\s*\{)"), 1u)
        << label << ": no wgmma with A from registers";
    EXPECT_EQ(matches(ptx, R"(\bldmatrix\b)"), 0u) << label;
  }
  // V's columns each repeated twice are no contiguous run: V moves element by element, and the
  // group gets no wgmma candidate; nor does a key tile wider than a wgmma's N.
  Graph g;
  Attention a;
  a.keys = 600;
  const FusionGroup plain = add_attention(g, DType::kF16, a, "p_");
  a.v_repeated = true;
  const FusionGroup repeated = add_attention(g, DType::kF16, a, "r_");
  const planner::AttentionCore core = *planner::match_attention(g, plain);
  EXPECT_TRUE(planner::wgmma_attention(g, plain, core, 64));
  EXPECT_FALSE(planner::wgmma_attention(g, plain, core, 512)) << "a key tile wider than a wgmma's N";
  EXPECT_FALSE(planner::wgmma_attention(g, repeated, *planner::match_attention(g, repeated), 64));
  planner::TilingOptions opt;
  opt.top_k = 1 << 20;
  for (const planner::Candidate& c : planner::tile_candidates(g, repeated, planner::find_device("h100"), opt)) {
    EXPECT_FALSE(c.config.wgmma && c.config.flash) << c.config.str();
  }
}

// FlashAttention-3's schedule within a warpgroup: in the wgmma form's tile loop the previous
// tile's P V is issued after this tile's S = Q K^T and before S's wait, which leaves P V's group
// in flight (wait_group 1); the softmax's exponentials run between S's wait and P V's, and neither
// the output fragments nor P's registers are written until P V's wait. A causal prefill of four
// key tiles against the reference under the host executor's checks; the PTX waits with a group
// in flight.
TEST(CodegenAttention, TheWgmmaFormOverlapsATilesSoftmaxWithThePreviousTilesProduct) {
  const Attention a = causal_prefill();
  Graph g;
  const FusionGroup fg = add_attention(g, DType::kF16, a);
  TileConfig cfg = best_flash(g, fg, true, true);
  cfg.split_k = 1;
  cfg.reduce_step = 64;
  ASSERT_TRUE(cfg.wgmma && cfg.flash) << cfg.str();
  check_groups(g, {fg}, [&](const FusionGroup&) { return cfg; }, cfg.str(), sm90);
  const Kernel k = lower_group(g, fg, cfg, "attn").kernel;
  // The tile loop's statements in program order, each with whether it lies in a nested uniform loop.
  std::vector<std::pair<const Stmt*, bool>> order;
  std::function<void(const Block&, bool)> flatten = [&](const Block& b, bool nested) {
    for (const Stmt& s : b) {
      order.emplace_back(&s, nested);
      flatten(s.body, nested || s.kind == Stmt::Kind::kUniformFor);
      flatten(s.orelse, nested);
    }
  };
  const Stmt* loop = key_tile_loop(k.body);
  ASSERT_NE(loop, nullptr) << "no loop over the key tiles";
  flatten(loop->body, false);
  const auto find = [&](size_t from, const std::function<bool(const Stmt&)>& is) {
    for (size_t i = from; i < order.size(); ++i) {
      if (is(*order[i].first)) return i;
    }
    return order.size();
  };
  const size_t proxy = find(0, [](const Stmt& s) { return s.kind == Stmt::Kind::kWgmmaSync && s.a == "proxy"; });
  const size_t first_barrier = find(0, [](const Stmt& s) { return s.kind == Stmt::Kind::kBarrier; });
  const size_t s_issue = find(0, [](const Stmt& s) { return s.kind == Stmt::Kind::kWgmma && !s.a_registers; });
  const size_t pv_issue = find(0, [](const Stmt& s) { return s.kind == Stmt::Kind::kWgmma && s.a_registers; });
  const size_t s_wait = find(0, [](const Stmt& s) { return s.kind == Stmt::Kind::kWgmmaSync && s.a == "wait" && s.groups == 1; });
  const size_t exp = find(s_wait, [](const Stmt& s) { return s.a.find("expf(") != std::string::npos; });
  const size_t o_wait = find(s_wait, [](const Stmt& s) { return s.kind == Stmt::Kind::kWgmmaSync && s.a == "wait" && s.groups == 0; });
  const std::string text = to_text(k);
  ASSERT_LT(o_wait, order.size()) << text;
  // The tile's copies fenced to the async proxy, then the barrier, before the tensor cores read them.
  EXPECT_LT(proxy, first_barrier) << text;
  EXPECT_LT(first_barrier, s_issue) << text;
  EXPECT_LT(s_issue, pv_issue) << text;
  EXPECT_TRUE(order[pv_issue].second) << "the previous tile's P V is not under the loop's first-tile condition\n" << text;
  EXPECT_LT(pv_issue, s_wait) << text;
  EXPECT_EQ(order[s_wait].first->name, order[s_issue].first->name) << "wait_group 1 is not S's";
  EXPECT_LT(exp, o_wait) << "no exponential between S's wait and P V's\n" << text;
  const std::string acc = order[pv_issue].first->name, p = order[pv_issue].first->a;
  for (size_t i = pv_issue + 1; i < o_wait; ++i) {
    const Stmt& s = *order[i].first;
    const bool writes = s.kind == Stmt::Kind::kAssign && (s.name.rfind(acc + "[", 0) == 0 || s.name.rfind(p + "[", 0) == 0);
    EXPECT_FALSE(writes) << "P V's operands written while it flies: " << s.name << " = " << s.a;
  }
  if (!backend::nvrtc_available()) {
    std::printf("NVRTC not available: the PTX of the wgmma form's schedule not read\n");
    return;
  }
  const std::string ptx = backend::compile_ptx(emit_cuda({k}), "sm_90");
  EXPECT_GE(matches(ptx, R"(\bwgmma\.wait_group\.sync\.aligned\s+1;)"), 1u) << "no wait with a group in flight";
  // ptxas keeps the wgmmas asynchronous (it serializes them where other instructions define their
  // accumulators or A registers while they fly: its C7515 report) and spills nothing.
  const backend::CompiledCuda cubin = backend::compile_cuda(emit_cuda({k}), "sm_90");
  EXPECT_EQ(cubin.log.find("serialized"), std::string::npos) << cubin.log;
  for (const auto& [name, res] : cubin.resources) {
    EXPECT_FALSE(res.spills()) << name << ": " << res.spill_store_bytes << " bytes spilled";
    std::printf("%s (sm_90a): %d registers\n", name.c_str(), res.registers);
  }
}

// Every barrier and wgmma wait of the wgmma form orders something: each barrier deleted in turn
// is a finding of the host executor's checks, each wait a wrong output (two warpgroups, three key
// tiles: the loop's wait for O lands the previous tile's P V from the second tile on).
TEST(CodegenAttention, EveryDeletedBarrierOrWaitOfTheWgmmaFormIsARace) {
  Attention a;
  a.heads = a.kv_heads = 1;
  a.queries = 100;
  a.keys = 70;
  a.mask = true;
  Graph g;
  const FusionGroup fg = add_attention(g, DType::kF16, a);
  TileConfig cfg = best_flash(g, fg, true, true);
  cfg.split_k = 1;
  cfg.reduce_step = 32;
  cfg.tile[2] = 128;
  cfg.threads = 256;
  const LoweredKernel good = lower_group(g, fg, cfg, "attention");
  EXPECT_GE(planner::evaluate_tile(g, fg, planner::find_device("h100"), cfg).smem_bytes, good.kernel.shared_bytes) << cfg.str();
  // The key tile's two (the first also orders Q's copies before the wgmma reads them), and the one
  // after the loop that orders the last tile's V before its product.
  EXPECT_GE(expect_every_barrier_needed(g, fg, good, "wgmma, " + cfg.str()), 3) << to_text(good.kernel);
  auto backend = backend::make_host_backend();
  std::mt19937 rng(fusetune::testing::test_seed());
  std::function<int(Block&, int, int)> drop_wait = [&](Block& b, int target, int seen) {
    Block kept;
    for (Stmt& st : b) {
      if (st.kind == Stmt::Kind::kWgmmaSync && st.a == "wait" && seen++ == target) continue;
      seen = drop_wait(st.body, target, seen);
      kept.push_back(std::move(st));
    }
    b = std::move(kept);
    return seen;
  };
  LoweredKernel counted = good;
  const int waits = drop_wait(counted.kernel.body, -1, 0);
  ASSERT_EQ(waits, 3) << to_text(good.kernel);  // S's and the previous tile's O's in the loop, the last tile's O's after it
  for (int i = 0; i < waits; ++i) {
    LoweredKernel bad = good;
    drop_wait(bad.kernel.body, i, 0);
    auto module = backend->load({bad.kernel});
    const backend::VerifyResult r = backend::verify_kernel(g, fg, bad, *backend, *module, rng);
    // Accumulators read before their wgmma lands hold no defined value (the executor's NaN).
    EXPECT_FALSE(r.ok) << "wgmma wait " << i << " deleted, and nothing noticed";
  }
}

// The L2 model (planner/tiling.h): inputs larger than half the L2 are read from DRAM once per
// wave of tiles running at once for each distinct region the wave reads, when those fit in half
// the L2. A head's keys and values (float16, 4 x 16 heads over 4,096 keys: 32 MB each) are shared
// by the wave's query tiles of that head, so DRAM sees a fraction of what the tiles read. In
// float32 at 8,192 keys, tiles taken heads first (the default order) put 16 heads in a wave, 64
// MB of keys and values, more than half the L2: every tile's read is charged; taken query tiles
// first (the planner's order) a wave holds two or three heads.
TEST(CodegenAttention, TheTilesOfAWaveReadTheKeysTheyShareOnceFromDram) {
  const planner::Device& h100 = planner::find_device("h100");
  const auto costs = [&](DType dt, int64_t batch, int64_t keys, bool default_order) {
    Attention a;
    a.batch = batch;
    a.heads = a.kv_heads = 16;
    a.queries = a.keys = keys;
    a.head = a.value_width = 64;
    a.merge_heads = true;
    Graph g;
    const FusionGroup fg = add_attention(g, dt, a);
    TileConfig cfg = best_flash(g, fg, dt == DType::kF16);
    if (default_order) cfg.order.clear();
    const planner::Cost c = planner::evaluate_tile(g, fg, h100, cfg);
    const int64_t minimum = 4 * batch * 16 * keys * 64 * static_cast<int64_t>(dtype_size(dt));  // Q, K, V, the output
    std::printf("%s, batch %lld, %lld keys, %s: DRAM %.1f MB modeled, tiles read %.1f MB (L2), minimum %.1f MB\n",
                std::string(dtype_name(dt)).c_str(), static_cast<long long>(batch), static_cast<long long>(keys),
                cfg.str().c_str(), static_cast<double>(c.dram_bytes) / 1e6, static_cast<double>(c.l2_bytes) / 1e6,
                static_cast<double>(minimum) / 1e6);
    EXPECT_TRUE(c.valid) << cfg.str() << ": " << c.reject;
    EXPECT_GE(c.dram_bytes, minimum);
    return std::make_pair(c, minimum);
  };
  const auto [shared, minimum] = costs(DType::kF16, 4, 4096, false);
  EXPECT_LT(shared.dram_bytes * 4, shared.l2_bytes) << "the query tiles of a wave read their head's keys from DRAM each";
  const auto [heads_first, minimum32] = costs(DType::kF32, 1, 8192, true);
  EXPECT_GT(heads_first.dram_bytes, 8 * minimum32) << "a wave's 64 MB of keys and values charged as if they stayed in L2";
  const auto [queries_first, unused] = costs(DType::kF32, 1, 8192, false);
  EXPECT_LT(queries_first.dram_bytes, 2 * minimum32);
}

// Blocks take the tiles in the candidate's order (TileConfig::order): every permutation of a
// batched MatMul chain's and a merged-heads attention's root axes computes the same outputs, and
// the planner takes a long float32 attention's query tiles first.
TEST(CodegenAttention, EveryTileOrderComputesTheSameOutputs) {
  Graph g;
  Attention a;
  a.batch = 2;
  a.heads = a.kv_heads = 3;
  a.queries = a.keys = 40;
  a.merge_heads = true;
  std::vector<FusionGroup> groups = {add_attention(g, DType::kF32, a)};
  groups.push_back(fusetune::testing::add_matmul_chain(g, DType::kF16, {3, 50, 24}, {24, 40}, "Relu", false, 7));
  std::vector<FusionGroup> cases;
  std::vector<TileConfig> configs;
  for (size_t i = 0; i < groups.size(); ++i) {
    TileConfig base = i == 0 ? TileConfig{{1, 16, 16}, 16, 64} : TileConfig{{1, 16, 16}, 16, 64, 1, true};
    base.flash = i == 0;
    std::vector<int> order = {0, 1, 2};
    do {
      TileConfig cfg = base;
      cfg.order = order;
      ASSERT_TRUE(planner::evaluate_tile(g, groups[i], planner::find_device("h100"), cfg).valid) << cfg.str();
      cases.push_back(groups[i]);
      configs.push_back(cfg);
    } while (std::next_permutation(order.begin(), order.end()));
  }
  size_t next = 0;
  check_groups(g, cases, [&](const FusionGroup&) { return configs[next++]; }, "every tile order", {false, {"sm_80"}});
  Attention longer;
  longer.heads = longer.kv_heads = 16;
  longer.queries = longer.keys = 8192;
  longer.head = longer.value_width = 64;
  longer.merge_heads = true;
  Graph big;
  const FusionGroup fg = add_attention(big, DType::kF32, longer);
  const TileConfig best = best_flash(big, fg);
  EXPECT_EQ(planner::tile_order(best, 3).front(), 1u) << best.str() << ": the query tiles of a head do not run together";
}

// What the core excludes: a softmax over another axis, probabilities the group exports, a Q
// computed by another stage of the group (a LayerNorm), which the fusion pass then does not
// stitch beyond max_row keys.
TEST(CodegenAttention, TheMatcherDeclinesWhatFlashCannotTile) {
  Attention a;
  {
    Graph g;
    const int q = add_input(g, "q", DType::kF32, {1, 2, 16, 16});
    const int kt = add_op(g, "Transpose", {add_input(g, "k", DType::kF32, {1, 2, 16, 16})},
                          attrs({{"perm", std::vector<int64_t>{0, 1, 3, 2}}}));
    const int p = add_op(g, "Softmax", {add_op(g, "MatMul", {q, kt})}, attrs({{"axis", int64_t{2}}}));
    add_op(g, "MatMul", {p, add_input(g, "v", DType::kF32, {1, 2, 16, 16})});
    EXPECT_FALSE(planner::match_attention(g, whole_graph_group(g)).has_value()) << "softmax over the queries";
  }
  {
    Graph g;
    FusionGroup fg = add_attention(g, DType::kF32, a);
    for (const Node& n : g.nodes()) {
      if (n.op == "Softmax") fg.outputs.push_back(n.outputs[0]);
    }
    EXPECT_FALSE(planner::match_attention(g, fg).has_value()) << "probabilities exported";
    const TileConfig cfg{std::vector<int64_t>{1, 1, 16, 16}, 16, 128, 1, false, false, true};
    EXPECT_FALSE(planner::evaluate_tile(g, fg, planner::find_device("h100"), cfg).valid);
  }
  {
    Graph g;
    const int x = add_input(g, "x", DType::kF32, {1, 2, 16, 16});
    const int q = add_op(g, "LayerNormalization", {x, g.add_constant("gamma", Tensor::scalar_float(DType::kF32, 1.0f))},
                         attrs({{"axis", int64_t{-1}}, {"epsilon", 1e-5f}}));
    const int kt = add_op(g, "Transpose", {add_input(g, "k", DType::kF32, {1, 2, 16, 16})},
                          attrs({{"perm", std::vector<int64_t>{0, 1, 3, 2}}}));
    const int p = add_op(g, "Softmax", {add_op(g, "MatMul", {q, kt})}, attrs({{"axis", int64_t{-1}}}));
    add_op(g, "MatMul", {p, add_input(g, "v", DType::kF32, {1, 2, 16, 16})});
    EXPECT_FALSE(planner::match_attention(g, whole_graph_group(g)).has_value()) << "Q from a LayerNorm stage";
  }
  {
    // Beyond max_row keys, scores whose Q a LayerNorm of their group computes are no attention
    // core: the fusion pass leaves the softmax out of the scores' group (no whole-row form fits).
    Graph g;
    const int64_t keys = 4096;
    const int x = add_input(g, "x", DType::kF32, {1, 1, 64, 16});
    const int q = add_op(g, "LayerNormalization", {x, g.add_constant("gamma", Tensor::scalar_float(DType::kF32, 1.0f))},
                         attrs({{"axis", int64_t{-1}}, {"epsilon", 1e-5f}}));
    const int kt = add_op(g, "Transpose", {add_input(g, "k", DType::kF32, {1, 1, keys, 16})},
                          attrs({{"perm", std::vector<int64_t>{0, 1, 3, 2}}}));
    const int p = add_op(g, "Softmax", {add_op(g, "MatMul", {q, kt})}, attrs({{"axis", int64_t{-1}}}));
    add_op(g, "MatMul", {p, add_input(g, "v", DType::kF32, {1, 1, keys, 16})});
    for (const FusionGroup& fg : planner::fuse(g).groups) {
      int matmuls = 0;
      for (int n : fg.nodes) matmuls += g.nodes()[static_cast<size_t>(n)].op == "MatMul" ? 1 : 0;
      EXPECT_LT(matmuls, 2) << fg.pattern << ": stitched without an attention core";
    }
  }
}

// Every barrier of the flash stage orders something: deleted in turn (over several key tiles and
// batches of rows), each must be a finding of the host executor's checks; in both forms, and on
// tensor cores with K's rows or Kᵀ's (keys contiguous, staged as rows of keys and read by
// ldmatrix.trans). On tensor cores the key tiles stream through two slots by cp.async: each wait
// deleted, or leaving one group more in flight, is a finding too.
TEST(CodegenAttention, EveryDeletedBarrierOrWaitIsARace) {
  for (int form : {0, 1, 2}) {  // SIMT; tensor cores; tensor cores with Kᵀ in memory
  const bool tensor = form > 0;
  Attention a;
  a.heads = a.kv_heads = 1;
  a.queries = 40;
  a.keys = form == 2 ? 72 : 70;  // Kᵀ's rows 16-byte aligned: every chunk by cp.async
  a.mask = true;
  a.k_transposed = form == 2;
  Graph g;
  const FusionGroup fg = add_attention(g, tensor ? DType::kF16 : DType::kF32, a);
  if (tensor) {
    const auto core = planner::match_attention(g, fg);
    ASSERT_TRUE(core.has_value());
    EXPECT_EQ(planner::keys_contiguous(g, fg, *core), a.k_transposed);
    EXPECT_TRUE(planner::streams_key_tiles(g, fg, *core));
  }
  TileConfig cfg = best_flash(g, fg, tensor);
  cfg.split_k = 1;  // split keys: ADecodeStepSplitsItsKeysOverBlocks
  cfg.reduce_step = 32;
  cfg.threads = 64;  // two warps: a barrier that orders only one warp's lanes would be redundant
  if (tensor) cfg.tile[2] = 32;  // 32 rows: a warp per 16
  const LoweredKernel good = lower_group(g, fg, cfg, "attention");
  EXPECT_GE(planner::evaluate_tile(g, fg, planner::find_device("h100"), cfg).smem_bytes, good.kernel.shared_bytes) << cfg.str();
  // SIMT: the key tile's four barriers, and the sums' before the division. Tensor cores: Q's and the
  // key tile's two (its softmax in registers; each lane divides by its own rows' sums).
  EXPECT_GE(expect_every_barrier_needed(g, fg, good, (tensor ? "tensor cores, " : "SIMT, ") + cfg.str()), tensor ? 3 : 5)
      << to_text(good.kernel);
  if (!tensor) continue;
  auto backend = backend::make_host_backend();
  std::mt19937 rng(fusetune::testing::test_seed());
  // Q's group, then each tile's: the loop waits for all but the next tile's copies.
  const std::string ir = to_text(good.kernel);
  EXPECT_NE(ir.find("if ft_kt + 1 < 3"), std::string::npos) << ir;
  EXPECT_NE(ir.find("cp.async.wait_group 1"), std::string::npos) << ir;
  // Wait `target` (in statement order) deleted (how 0) or leaving one more group in flight (1).
  std::function<int(Block&, int, int, int)> weaken = [&](Block& b, int target, int how, int seen) {
    Block kept;
    for (Stmt& st : b) {
      if (st.kind == Stmt::Kind::kCopyAsyncWait && seen++ == target) {
        if (how == 0) continue;
        st.groups += 1;
      }
      seen = weaken(st.body, target, how, seen);
      kept.push_back(std::move(st));
    }
    b = std::move(kept);
    return seen;
  };
  LoweredKernel counted = good;
  const int waits = weaken(counted.kernel.body, -1, 0, 0);
  ASSERT_EQ(waits, 2) << ir;  // Q's, before the loop, and the tile's
  for (int i = 0; i < waits; ++i) {
    for (int how : {0, 1}) {
      LoweredKernel bad = good;
      weaken(bad.kernel.body, i, how, 0);
      auto module = backend->load({bad.kernel});
      const backend::VerifyResult r = backend::verify_kernel(g, fg, bad, *backend, *module, rng);
      EXPECT_TRUE(!r.ok && r.check_failed) << "wait " << i << (how == 0 ? " deleted: " : " one group later: ") << r.detail;
    }
  }
  }
}

// Every attention group of exported models (BERT's padding mask, GPT-2's causal Where, T5's
// position bias, Swin's windows and relative bias, LLaMA's rotary embedding and grouped-query
// heads, decode steps over a cache, exporters' float16 casts around the softmax) matches the core
// and runs as flash attention.
class ModelAttention : public ::testing::TestWithParam<std::string> {};

TEST_P(ModelAttention, EveryAttentionGroupRunsFlash) {
  const Graph g = fusetune::testing::load_test_model(GetParam());
  std::vector<FusionGroup> attention;
  int softmax_groups = 0;
  for (const FusionGroup& fg : planner::fuse(g).groups) {
    const bool softmax = std::any_of(fg.nodes.begin(), fg.nodes.end(),
                                     [&](int n) { return g.nodes()[static_cast<size_t>(n)].op == "Softmax"; });
    softmax_groups += softmax ? 1 : 0;
    if (planner::match_attention(g, fg)) attention.push_back(fg);
  }
  ASSERT_GT(softmax_groups, 0) << GetParam() << " has no softmax";
  EXPECT_EQ(static_cast<int>(attention.size()), softmax_groups) << GetParam() << ": a softmax group without an attention core";
  // The best flash candidate of each, and on tensor cores where the core is 16-bit: one module.
  std::vector<FusionGroup> cases;
  std::vector<TileConfig> configs;
  for (const FusionGroup& fg : attention) {
    cases.push_back(fg);
    configs.push_back(best_flash(g, fg));
    if (planner::tensor_attention(g, *planner::match_attention(g, fg))) {
      cases.push_back(fg);
      configs.push_back(best_flash(g, fg, true));
    }
  }
  size_t next = 0;
  check_groups(g, cases, [&](const FusionGroup&) { return configs[next++]; }, GetParam() + " flash", sm90);
}

INSTANTIATE_TEST_SUITE_P(Codegen, ModelAttention,
                         ::testing::Values("bert", "bart_encoder_dynamo_fp16", "distilbert_fp16", "gpt2", "hf_vit_dynamo",
                                           "llama_decode_fp16", "llama_fp16", "llama_gqa_dynamo_fp16", "qwen2_decode", "swin_t",
                                           "t5_encoder", "whisper_encoder_dynamo", "vit"));

}  // namespace
}  // namespace fusetune::codegen
