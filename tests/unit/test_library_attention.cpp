// cuDNN's attention as a library call (planner/library_attention.h, backend/cudnn_attention.h) and
// the strided views it takes its operands in (planner/strided_view.h): views against the reference
// interpreter moving index tensors through random chains of Reshape, Transpose, Slice and Expand;
// the matcher on attention groups in every layout exporters write (separate or packed Q, K and V,
// heads merged after, scalings, a padding bias, causal masks aligned either way), float16 and
// bfloat16, each call computed on the host (and on the GPU where one is present) against the
// reference; what it declines; the attention groups of exported float16 models, and a GPT-2 plan
// that takes cuDNN for its attention; and cuDNN's frontend asked whether each call lies within
// its support surface for Hopper (sm_90), which needs the library but no GPU.
#include <gtest/gtest.h>

#include <cstdio>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cudnn.h"
#include "backend/cudnn_attention.h"
#include "backend/verify.h"
#include "codegen/lower_group.h"
#include "compiler/compile_bundle.h"
#include "planner/attention.h"
#include "planner/library_attention.h"
#include "planner/select.h"
#include "planner/strided_view.h"
#include "reference/interpreter.h"
#include "runtime/bundle.h"
#include "tests/unit/test_seed.h"
#include "unit/codegen_check.h"
#include "unit/graph_helpers.h"
#include "unit/plan_check.h"

namespace fusetune {
namespace {

using testing::add_input;
using testing::add_op;
using testing::attrs;

// Element i of `shape` (row-major) as an index.
std::vector<int64_t> unravel(int64_t i, const Shape& shape) {
  std::vector<int64_t> idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = i % shape[d];
    i /= shape[d];
  }
  return idx;
}

// Every node of g, as the node set the views follow.
std::set<int> all_nodes(const Graph& g) {
  std::set<int> nodes;
  for (size_t n = 0; n < g.nodes().size(); ++n) nodes.insert(static_cast<int>(n));
  return nodes;
}

int64_t at(const planner::StridedView& v, const std::vector<int64_t>& idx) {
  int64_t off = v.offset;
  for (size_t d = 0; d < idx.size(); ++d) off += idx[d] / v.groups[d] * v.strides[d];
  return off;
}

// A random data-movement node on x: a Transpose, a Reshape that splits or merges axes, a Slice, an
// Expand of a unit axis, or an axis repeated (a unit axis after it expanded, then merged into it:
// grouped-query attention's repeat of K and V).
int random_movement(Graph& g, int x, std::mt19937& rng, bool views_out_only) {
  const Shape s = g.value(x).shape;
  const int kind = static_cast<int>(rng() % (views_out_only ? 2 : 5));
  if (kind == 4) {
    const size_t a = rng() % s.size();
    const int64_t n = 2 + static_cast<int64_t>(rng() % 3);
    std::vector<int64_t> one(s.begin(), s.end()), to(s.begin(), s.end()), merged(s.begin(), s.end());
    one.insert(one.begin() + static_cast<std::ptrdiff_t>(a) + 1, 1);
    to.insert(to.begin() + static_cast<std::ptrdiff_t>(a) + 1, n);
    merged[a] *= n;
    const int wide = add_op(g, "Expand", {add_op(g, "Reshape", {x}, attrs({{"shape", one}}))}, attrs({{"shape", to}}));
    return add_op(g, "Reshape", {wide}, attrs({{"shape", merged}}));
  }
  if (kind == 0) {
    std::vector<int64_t> perm(s.size());
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    return add_op(g, "Transpose", {x}, attrs({{"perm", perm}}));
  }
  if (kind == 1) {
    Shape to;
    for (int64_t e : s) {  // split an axis where it factors, merge it with the last one sometimes
      if (e % 2 == 0 && e > 2 && rng() % 2) {
        to.push_back(2);
        to.push_back(e / 2);
      } else if (!to.empty() && rng() % 3 == 0) {
        to.back() *= e;
      } else {
        to.push_back(e);
      }
    }
    return add_op(g, "Reshape", {x}, attrs({{"shape", std::vector<int64_t>(to.begin(), to.end())}}));
  }
  if (kind == 2) {
    std::vector<int64_t> starts, ends, steps;
    for (int64_t e : s) {
      const int64_t step = 1 + static_cast<int64_t>(rng() % 2), start = static_cast<int64_t>(rng() % static_cast<uint32_t>(e));
      starts.push_back(start);
      ends.push_back(e);
      steps.push_back(step);
    }
    return add_op(g, "Slice", {x}, attrs({{"starts", starts}, {"ends", ends}, {"steps", steps}}));
  }
  std::vector<int64_t> one(s.begin(), s.end()), to(s.begin(), s.end());  // a leading unit axis, expanded
  one.insert(one.begin(), 1);
  to.insert(to.begin(), 1 + static_cast<int64_t>(rng() % 3));
  return add_op(g, "Expand", {add_op(g, "Reshape", {x}, attrs({{"shape", one}}))}, attrs({{"shape", to}}));
}

TEST(StridedView, InputAndOutputViewsAgreeWithTheReferenceOnRandomChains) {
  const unsigned seed = testing::test_seed();
  std::mt19937 rng(seed);
  int viewed = 0, refused = 0, out_viewed = 0, out_refused = 0, grouped = 0;
  for (int trial = 0; trial < 300; ++trial) {
    Graph g;
    Shape base;
    for (int d = 0, rank = 2 + static_cast<int>(rng() % 3); d < rank; ++d) base.push_back(1 + static_cast<int64_t>(rng() % 6));
    const int x = add_input(g, "x", DType::kF32, base);
    int y = x;
    for (int k = 0, n = 1 + static_cast<int>(rng() % 4); k < n; ++k) y = random_movement(g, y, rng, false);
    g.outputs() = {y};
    const std::set<int> nodes = all_nodes(g);
    std::vector<float> iota(static_cast<size_t>(numel(base)));
    std::iota(iota.begin(), iota.end(), 0.0f);
    const Tensor in = Tensor::from_floats(DType::kF32, base, iota);
    const std::vector<float> out = reference::run_graph(g, {&in, 1})[0].to_floats();
    const Shape& ys = g.value(y).shape;
    // The input view: element i of y is the input's element at the view's offset.
    if (const auto v = planner::input_view(g, nodes, y)) {
      ++viewed;
      grouped += planner::grouped(*v) ? 1 : 0;
      ASSERT_EQ(v->base, x);
      ASSERT_EQ(v->dims, ys);
      ASSERT_EQ(v->path.size(), g.nodes().size());
      for (int64_t i = 0; i < numel(ys); ++i) {
        ASSERT_EQ(at(*v, unravel(i, ys)), static_cast<int64_t>(out[static_cast<size_t>(i)])) << "seed " << seed << " trial " << trial;
      }
    } else {
      ++refused;  // a Reshape merging axes a Transpose, Slice or Expand left apart
    }
    // The output view, through Reshapes and Transposes only: element i of x lands where its index does.
    Graph h;
    const int x2 = add_input(h, "x", DType::kF32, base);
    int y2 = x2;
    for (int k = 0, n = 1 + static_cast<int>(rng() % 4); k < n; ++k) y2 = random_movement(h, y2, rng, true);
    h.outputs() = {y2};
    const std::set<int> hn = all_nodes(h);
    const std::vector<float> moved = reference::run_graph(h, {&in, 1})[0].to_floats();
    // The view of x2 inside y2's buffer needs x2 computed inside: view the first node's input through the rest.
    const auto o = planner::output_view(h, hn, x2);
    if (!o) {  // a Reshape before a Transpose: x2's axes interleave in y2's buffer
      ++out_refused;
      continue;
    }
    ++out_viewed;
    ASSERT_EQ(o->base, y2);
    for (int64_t p = 0; p < numel(base); ++p) {
      const auto i = static_cast<int64_t>(moved[static_cast<size_t>(p)]);
      ASSERT_EQ(at(*o, unravel(i, base)), p) << "seed " << seed << " trial " << trial;
    }
  }
  EXPECT_GT(viewed, 100);
  EXPECT_GT(grouped, 20);
  EXPECT_GT(refused, 0);
  EXPECT_GT(out_viewed, 100);
  EXPECT_GT(out_refused, 0);
  // A transposed matrix merged into one axis is no view.
  planner::StridedView t = planner::contiguous_view(0, {2, 3});
  std::swap(t.dims[0], t.dims[1]);
  std::swap(t.strides[0], t.strides[1]);
  EXPECT_FALSE(planner::reshape_view(t, {6}).has_value());
  EXPECT_TRUE(planner::reshape_view(t, {3, 2, 1}).has_value());
}

struct Case {
  std::string name;
  DType dt = DType::kF16;
  int64_t batch = 1, heads = 2, queries = 16, keys = 16, head = 16;
  bool packed = false;       // Q, K, V sliced from one [batch, tokens, 3 x heads x head] projection
  bool merge_heads = false;  // O as [batch, queries, heads x head]
  bool mask = false;         // an additive bias [batch, 1, 1, keys]
  bool causal = false;       // a Where over a constant condition
  bool q_scaled = false;     // Q multiplied by a scalar before the product (else the scores divided)
  bool kv_repeat = false;    // K and V shared by pairs of heads (grouped-query)
  float fill = -std::numeric_limits<float>::infinity();
  bool anti_causal = false;  // the condition transposed: no causal mask
  bool scale_last = false;   // the scores scaled after the mask and bias, not before
};

// softmax(Q Kᵀ / 4 [+ mask] [causal]) V as one group over inputs laid out as `c` says.
testing::GroupedGraph make_attention(const Case& c) {
  testing::GroupedGraph t;
  Graph& g = t.g;
  const int64_t width = c.heads * c.head;
  const auto heads_first = [&](int x, int64_t tokens, int64_t h) {  // [b, tokens, h * d] -> [b, h, tokens, d]
    x = add_op(g, "Reshape", {x}, attrs({{"shape", std::vector<int64_t>{c.batch, tokens, h, c.head}}}));
    return add_op(g, "Transpose", {x}, attrs({{"perm", std::vector<int64_t>{0, 2, 1, 3}}}));
  };
  int q, k, v;
  const int64_t kv_heads = c.kv_repeat ? c.heads / 2 : c.heads;
  if (c.packed) {
    const int qkv = add_input(g, "qkv", c.dt, {c.batch, c.keys, 3 * width});
    const auto part = [&](int64_t p) {
      return add_op(g, "Slice", {qkv}, attrs({{"starts", std::vector<int64_t>{0, 0, p * width}},
                                              {"ends", std::vector<int64_t>{c.batch, c.keys, (p + 1) * width}},
                                              {"steps", std::vector<int64_t>{1, 1, 1}}}));
    };
    q = heads_first(part(0), c.keys, c.heads);
    k = heads_first(part(1), c.keys, c.heads);
    v = heads_first(part(2), c.keys, c.heads);
  } else {
    q = add_input(g, "q", c.dt, {c.batch, c.heads, c.queries, c.head});
    k = add_input(g, "k", c.dt, {c.batch, kv_heads, c.keys, c.head});
    v = add_input(g, "v", c.dt, {c.batch, kv_heads, c.keys, c.head});
    if (c.kv_repeat) {
      const auto repeat = [&](int x) {
        x = add_op(g, "Reshape", {x}, attrs({{"shape", std::vector<int64_t>{c.batch, kv_heads, 1, c.keys, c.head}}}));
        x = add_op(g, "Expand", {x}, attrs({{"shape", std::vector<int64_t>{c.batch, kv_heads, 2, c.keys, c.head}}}));
        return add_op(g, "Reshape", {x}, attrs({{"shape", std::vector<int64_t>{c.batch, c.heads, c.keys, c.head}}}));
      };
      k = repeat(k);
      v = repeat(v);
    }
  }
  const auto scalar = [&](const char* name, float x) { return g.add_constant(name, Tensor::scalar_float(c.dt, x)); };
  if (c.q_scaled) q = add_op(g, "Mul", {q, scalar("quarter", 0.25f)});
  const int kt = add_op(g, "Transpose", {k}, attrs({{"perm", std::vector<int64_t>{0, 1, 3, 2}}}));
  int x = add_op(g, "MatMul", {q, kt});
  if (!c.q_scaled && !c.scale_last) x = add_op(g, "Div", {x, scalar("four", 4.0f)});
  if (c.mask) x = add_op(g, "Add", {x, add_input(g, "mask", c.dt, {c.batch, 1, 1, c.keys})});
  if (c.causal) {
    std::vector<int64_t> allowed;
    for (int64_t i = 0; i < c.queries; ++i) {
      for (int64_t j = 0; j < c.keys; ++j) allowed.push_back((c.anti_causal ? j >= i : j <= i + c.keys - c.queries) ? 1 : 0);
    }
    const int cond = g.add_constant("causal", Tensor::from_ints(DType::kBool, {1, 1, c.queries, c.keys}, allowed));
    x = add_op(g, "Where", {cond, x, scalar("fill", c.fill)});
  }
  if (c.scale_last) x = add_op(g, "Div", {x, scalar("four", 4.0f)});
  x = add_op(g, "Cast", {add_op(g, "Softmax", {add_op(g, "Cast", {x}, attrs({{"to", int64_t{1}}}))}, attrs({{"axis", int64_t{-1}}}))},
             attrs({{"to", int64_t{c.dt == DType::kF16 ? 10 : c.dt == DType::kBF16 ? 16 : 1}}}));
  int o = add_op(g, "MatMul", {x, v});
  if (c.merge_heads) {
    o = add_op(g, "Transpose", {o}, attrs({{"perm", std::vector<int64_t>{0, 2, 1, 3}}}));
    o = add_op(g, "Reshape", {o}, attrs({{"shape", std::vector<int64_t>{c.batch, c.queries, width}}}));
  }
  g.outputs() = {o};
  t.groups = {testing::whole_graph_group(g)};
  return t;
}

// The call lowered and verified against the reference on the host backend, and on the GPU where
// one is present (the CUDA backend then runs cuDNN).
void verify_everywhere(const testing::GroupedGraph& t, const std::string& label) {
  planner::TileConfig cfg;
  cfg.library = planner::kCudnn;
  const codegen::LoweredKernel lk = codegen::lower_group(t.g, t.groups[0], cfg, "lib");
  const unsigned seed = testing::test_seed();
  for (auto& b : testing::test_backends(label)) {
    std::mt19937 rng(seed);
    auto module = b->load(std::vector<codegen::Kernel>{lk.kernel});
    const backend::VerifyResult r = backend::verify_kernel(t.g, t.groups[0], "lib", lk.inputs, lk.outputs, *b, *module, rng,
                                                           {.redzone_bytes = 256});
    EXPECT_TRUE(r.ok) << label << " on " << b->name() << ", seed " << seed << ": " << r.detail;
  }
}

// Whether cuDNN's frontend accepts the call for sm_90; prints why it cannot ask.
void expect_frontend_accepts(const planner::LibraryCall& call, const std::string& label) {
  std::string why;
  void* lib = backend::cudnn_library(&why);
  if (!backend::cudnn_frontend_built() || lib == nullptr) {
    std::printf("NOTE: cuDNN's support surface not asked for %s: %s\n", label.c_str(),
                backend::cudnn_frontend_built() ? why.c_str() : "this build has no cudnn-frontend");
    return;
  }
  EXPECT_EQ(backend::check_cudnn_attention(call, lib, 90), "") << label;
}

TEST(LibraryAttention, MatchesAttentionInEveryLayoutAndComputesIt) {
  std::vector<Case> cases = {
      {.name = "separate"},
      {.name = "packed, heads merged", .packed = true, .merge_heads = true},
      {.name = "bfloat16, mask, Q scaled", .dt = DType::kBF16, .batch = 2, .heads = 3, .queries = 24, .keys = 24, .head = 32,
       .mask = true, .q_scaled = true},
      {.name = "causal (top-left), packed", .heads = 4, .keys = 40, .head = 8, .packed = true, .causal = true},
      {.name = "causal over a cache (bottom-right)", .queries = 8, .keys = 40, .causal = true, .fill = -65504.0f},
      {.name = "one query, causal: no mask", .queries = 1, .keys = 24, .causal = true},
  };
  for (Case& c : cases) {
    if (c.packed) c.queries = c.keys;
    const testing::GroupedGraph t = make_attention(c);
    const auto m = planner::match_library_call(t.g, t.groups[0]);
    ASSERT_TRUE(m.has_value()) << c.name;
    const planner::LibraryCall& call = m->call;
    EXPECT_EQ(call.op, planner::LibraryOp::kAttention) << c.name;
    EXPECT_EQ(call.library, planner::kCudnn);
    EXPECT_FLOAT_EQ(call.attention.scale, 0.25f) << c.name;
    EXPECT_EQ(call.attention.causal, c.causal && c.queries > 1) << c.name;
    EXPECT_EQ(call.bias, c.mask) << c.name;
    EXPECT_EQ(call.batch, c.batch);
    EXPECT_EQ(call.attention.heads, c.heads);
    EXPECT_EQ(call.attention.keys, c.keys);
    ASSERT_EQ(m->inputs.size(), c.mask ? 4u : 3u);
    if (c.packed) {  // one buffer, the parts at their offsets: K at heads x head
      EXPECT_TRUE(m->inputs[0] == m->inputs[1] && m->inputs[1] == m->inputs[2]) << c.name;
      EXPECT_EQ(call.attention.k.offset, c.heads * c.head);
      EXPECT_EQ(call.attention.q.strides[2], 3 * c.heads * c.head);
    }
    if (c.merge_heads) {
      EXPECT_EQ(call.attention.o.strides[1], c.head);
    }
    if (c.mask) {
      EXPECT_EQ(call.attention.bias.strides, (std::array<int64_t, 4>{c.keys, 0, 0, 1}));
    }
    EXPECT_EQ(planner::LibraryCall::from_json(call.to_json()), call) << c.name;
    verify_everywhere(t, c.name);
    expect_frontend_accepts(call, c.name);
  }
}

TEST(LibraryAttention, DeclinesWhatTheLibraryDoesNotCompute) {
  const std::vector<std::pair<Case, std::string>> cases = {
      {{.name = "", .dt = DType::kF32}, "float32"},
      {{.name = "", .head = 12}, "a head width not a multiple of 8"},
      {{.name = "", .heads = 4, .kv_repeat = true}, "keys repeated for grouped-query heads"},
      {{.name = "", .causal = true, .anti_causal = true}, "a mask that is not causal"},
      {{.name = "", .causal = true, .fill = -1.0f}, "a fill that leaves masked keys weight"},
      {{.name = "", .mask = true, .scale_last = true}, "the scores scaled after the bias is added"},
      {{.name = "", .causal = true, .scale_last = true}, "the scores scaled after the mask"},
      {{.name = "", .queries = 24, .keys = 16, .causal = true}, "more queries than keys under a causal mask"},
      {{.name = "", .heads = 2, .kv_repeat = true}, "one K and V for every head (multi-query)"},
  };
  for (const auto& [c, why] : cases) {
    const testing::GroupedGraph t = make_attention(c);
    EXPECT_TRUE(planner::match_attention(t.g, t.groups[0]).has_value()) << why << ": the core itself matches";
    EXPECT_FALSE(planner::match_attention_call(t.g, t.groups[0]).has_value()) << why;
  }
  // cuDNN's frontend itself refuses a K whose head axis is strided (as Kᵀ materialized would be):
  // the support surface asked above is a live check.
  const testing::GroupedGraph t = make_attention({.name = "separate"});
  planner::LibraryCall call = planner::match_attention_call(t.g, t.groups[0])->call;
  std::swap(call.attention.k.strides[2], call.attention.k.strides[3]);
  std::string why;
  void* lib = backend::cudnn_library(&why);
  if (!backend::cudnn_frontend_built() || lib == nullptr) {
    GTEST_SKIP() << "cuDNN's support surface not asked: " << (backend::cudnn_frontend_built() ? why : "no cudnn-frontend");
  }
  EXPECT_NE(backend::check_cudnn_attention(call, lib, 90).find("stride"), std::string::npos)
      << backend::check_cudnn_attention(call, lib, 90);
}

// The attention groups of float16 exports whose Q, K and V are views of the projections' outputs
// are cuDNN calls: GPT-2's (a packed projection sliced, a causal mask), and BART's since its
// query's scaling by 1/8 is folded into the projection's weights (importer/fold_product_scales.h):
// the three projections are then one product whose slices the attention reads. The others are
// not: where fusion put K's Transpose into its projection, K arrives as Kᵀ, its head axis strided,
// which cuDNN does not read (DistilBERT, ViT, T5, Whisper: the head axis must be contiguous);
// LLaMA's prefill and, since its q, k and v projections are one product (importer/
// pack_sibling_products.h), its decode step compute Q inside the group (rotary embedding).
TEST(LibraryAttention, TheAttentionGroupsOfExportedModels) {
  for (const auto& [model, expected] : std::vector<std::pair<std::string, int>>{
           {"gpt2_fp16", 2}, {"llama_decode_fp16", 0}, {"bart_encoder_fp16", 2}, {"llama_fp16", 0}}) {
    const Graph g = testing::load_test_model(model);
    int cores = 0, calls = 0;
    for (const planner::FusionGroup& fg : planner::fuse(g).groups) {
      if (!planner::match_attention(g, fg)) continue;
      ++cores;
      if (const auto m = planner::match_attention_call(g, fg)) {
        ++calls;
        expect_frontend_accepts(m->call, model + " " + fg.pattern);
      }
    }
    EXPECT_EQ(cores, 2) << model;
    EXPECT_EQ(calls, expected) << model;
  }
  // Where cuDNN measures fastest, GPT-2's plan runs its attention there, and matches the reference.
  const Graph gpt2 = testing::load_test_model("gpt2_fp16");
  const planner::Device dev = planner::find_device("h100");
  planner::Measurements fast;
  for (const planner::GroupPlan& gp : planner::plan_model(gpt2, dev).compared) {
    for (const planner::Candidate& c : gp.candidates) {
      fast[{gp.signature, c.config.str()}] = c.config.library.empty() ? 100.0 * static_cast<double>(gp.group.nodes.size()) : 1.0;
    }
  }
  const planner::ModelPlan plan = planner::plan_model(gpt2, dev, {}, &fast);
  int attention_calls = 0;
  for (const planner::GroupPlan& gp : plan.groups) {
    if (gp.candidates[gp.chosen].config.library != planner::kCudnn) continue;
    const auto m = planner::match_library_call(gpt2, gp.group);
    attention_calls += m && m->call.op == planner::LibraryOp::kAttention;
  }
  EXPECT_EQ(attention_calls, 2) << "GPT-2's two layers";
  testing::expect_plan_matches_reference(compiler::compile_bundle(gpt2, plan, dev, "gpt2_fp16"), gpt2, testing::test_seed(), 2e-2f);
}

}  // namespace
}  // namespace fusetune
