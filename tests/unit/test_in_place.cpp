// In-place updates (planner/in_place.h, codegen/in_place_scatter.h): a ScatterND whose data
// nothing reads afterwards writes its update slices into its data's buffer.
// - A Loop carrying a buffer that each step updates a row of, reading the row before: every step
//   but the first (whose data is a constant) updates in place, moving a tenth of the bytes or
//   less; the compiled plan binds each such launch's output to its data's buffer, the graph
//   output's, and matches the definition computed here, on the host, as the reference does.
// - Eligibility, each condition on its own: a later reader of the data, a data that is a graph
//   input or output, a group of more than one node, indices from data, repeated or out-of-range
//   tuples, updates that are the data itself all keep the copy; readers that run before (the updates' own producers) do not. A plan
//   with a later reader runs correctly (the copy keeps the data for it).
// - The signatures of the two forms differ, so groups of one structure share candidates and
//   measurements only when they agree on the form.
// - Every reduction's in-place kernel matches the reference under the host executor's checks (float
//   slices without a reduction moved in 16-byte vectors), indexes in 32 bits without a 64-bit
//   division in its PTX, and the harness is not vacuous: the
//   same kernel given a poisoned buffer of its own instead of its data's fails.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "backend/backend.h"
#include "backend/nvrtc.h"
#include "backend/verify.h"
#include "codegen/emit.h"
#include "codegen/lower_group.h"
#include "compiler/compile_bundle.h"
#include "compiler/pipeline.h"
#include "core/sha256.h"
#include "planner/in_place.h"
#include "planner/select.h"
#include "reference/interpreter.h"
#include "runtime/plan_runner.h"
#include "unit/graph_helpers.h"
#include "unit/onnx_builder.h"
#include "unit/test_dir.h"
#include "unit/test_seed.h"

namespace fusetune {
namespace {

using testing::OnnxBuilder;

constexpr int64_t kSteps = 10, kWidth = 192;

// h = zeros [kSteps, kWidth]; for i in 0..kSteps-1: h[i] = tanh(x[i] + 0.5 * h[max(i - 1, 0)]),
// as a Loop carrying h (Gather of the row before, ScatterND of the new row); h is the output.
OnnxBuilder recurrence_model() {
  OnnxBuilder body;
  body.input("i", testing::kInt64, {}).input("go", testing::kBool, {}).input("h_in", testing::kFloat, {kSteps, kWidth});
  body.output("go_out", testing::kBool, {}).output("h_out", testing::kFloat, {kSteps, kWidth});
  body.initializer("axis0", Tensor::from_ints(DType::kI64, {1}, std::vector<int64_t>{0}));
  body.initializer("one", Tensor::scalar_int(DType::kI64, 1));
  body.initializer("zero", Tensor::scalar_int(DType::kI64, 0));
  body.initializer("half", Tensor::scalar_float(DType::kF32, 0.5f));
  body.node("Sub", {"i", "one"}, {"i_1"});
  body.node("Max", {"i_1", "zero"}, {"before"});
  OnnxBuilder::attr_i(body.node("Gather", {"h_in", "before"}, {"prev"}), "axis", 0);
  OnnxBuilder::attr_i(body.node("Gather", {"x", "i"}, {"xi"}), "axis", 0);
  body.node("Mul", {"prev", "half"}, {"scaled"});
  body.node("Add", {"xi", "scaled"}, {"pre"});
  body.node("Tanh", {"pre"}, {"row"});
  body.node("Unsqueeze", {"row", "axis0"}, {"rows"});
  body.node("Unsqueeze", {"i", "axis0"}, {"i1"});
  body.node("Unsqueeze", {"i1", "axis0"}, {"at"});
  body.node("ScatterND", {"h_in", "at", "rows"}, {"h_out"});
  body.node("Identity", {"go"}, {"go_out"});
  OnnxBuilder b(17);
  b.input("x", testing::kFloat, {kSteps, kWidth}).output("h", testing::kFloat, {kSteps, kWidth});
  b.initializer("steps", Tensor::scalar_int(DType::kI64, kSteps));
  b.initializer("yes", Tensor::from_ints(DType::kBool, {}, std::vector<int64_t>{1}));
  b.initializer("h0", Tensor(DType::kF32, {kSteps, kWidth}));
  OnnxBuilder::attr_graph(b.node("Loop", {"steps", "yes", "h0"}, {"h"}, "steps"), "body", body);
  return b;
}

std::vector<double> recurrence_expected(const std::vector<float>& x) {
  std::vector<double> h(x.size(), 0.0);
  for (int64_t i = 0; i < kSteps; ++i) {
    const int64_t before = std::max<int64_t>(i - 1, 0);
    for (int64_t j = 0; j < kWidth; ++j) {
      h[static_cast<size_t>(i * kWidth + j)] = std::tanh(double{x[static_cast<size_t>(i * kWidth + j)]} + 0.5 * h[static_cast<size_t>(before * kWidth + j)]);
    }
  }
  return h;
}

void expect_close(const std::vector<float>& got, const std::vector<double>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-5) << what << ", element " << i;
}

TEST(InPlace, ALoopCarriedBufferIsUpdatedInPlaceWhereNothingReadsItAfter) {
  const unsigned seed = testing::test_seed();
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(kSteps * kWidth));
  for (float& v : x) v = normal(rng);
  const std::vector<double> want = recurrence_expected(x);
  const std::vector<Tensor> inputs = {Tensor::from_floats(DType::kF32, {kSteps, kWidth}, x)};
  const std::string what = "seed " + std::to_string(seed);

  testing::TestDir dir("in_place");
  recurrence_model().write(dir / "model.onnx");
  const planner::Device h100 = planner::find_device("h100");
  const compiler::PipelineResult r = compiler::compile_model(dir / "model.onnx", h100, {});
  const Graph& g = r.model.graph;
  expect_close(reference::run_graph(g, inputs)[0].to_floats(), want, "reference, " + what);

  // The plan: every step's ScatterND alone in its group, all but the first (its data the constant
  // zeros) updating in place, for a tenth of the bytes of the group's best copy or less.
  int scatters = 0, in_place = 0;
  for (const planner::GroupPlan& gp : r.plan.groups) {
    if (gp.group.nodes.size() != 1 || g.nodes()[static_cast<size_t>(gp.group.nodes[0])].op != "ScatterND") continue;
    ++scatters;
    const planner::Candidate& chosen = gp.candidates[gp.chosen];
    EXPECT_EQ(gp.in_place, chosen.config.in_place) << gp.group.pattern;
    if (!chosen.config.in_place) continue;
    ++in_place;
    int64_t copy_bytes = INT64_MAX;
    for (const planner::Candidate& c : gp.candidates) {
      if (c.cost.valid && !c.config.in_place) copy_bytes = std::min(copy_bytes, c.cost.dram_bytes);
    }
    ASSERT_NE(copy_bytes, INT64_MAX) << "the copy form stays a candidate";
    EXPECT_LE(chosen.cost.dram_bytes * 10, copy_bytes) << chosen.config.str();
  }
  EXPECT_EQ(scatters, kSteps) << compiler::graph_text(g);
  EXPECT_EQ(in_place, kSteps - 1);

  // The bundle: each in-place launch's output is its data's buffer, the graph output h's.
  const nlohmann::json manifest = nlohmann::json::parse(r.bundle.manifest);
  const nlohmann::json& buffers = manifest.at("buffers");
  int bound = 0;
  for (const auto& l : manifest.at("launches")) {
    if (l.at("groups").at(0).at("config").get<std::string>().find("in-place") == std::string::npos) continue;
    ++bound;
    const auto& args = l.at("args");
    EXPECT_EQ(args.front(), args.back()) << l.dump();
    const auto& out = buffers.at(args.back().get<size_t>());
    EXPECT_EQ(out.at("kind"), "output") << out.dump();
    EXPECT_EQ(out.at("name"), "h") << out.dump();
  }
  EXPECT_EQ(bound, kSteps - 1);
  EXPECT_EQ(r.verified.kernels, manifest.at("launches").size()) << "compile verified every kernel on the host";
  EXPECT_NE(r.bundle.cuda_source.find("ft_store_float4(out0, ft_o, ft_u)"), std::string::npos) << "rows of 192 floats move in float4s";

  auto host = backend::make_host_backend();
  runtime::PlanRunner runner(r.bundle, *host);
  expect_close(runner.run(inputs)[0].to_floats(), want, "compiled, " + what);
}

// d = Relu(x) [8, 64]; s = ScatterND(d, indices, u) where the variant says; the group of s alone.
struct Variant {
  std::string name;
  bool eligible = false;
  std::vector<int64_t> indices = {2, 5};  // two tuples of depth 1
  bool indices_from_input = false;
  bool data_is_input = false;
  bool data_is_output = false;
  bool later_reader = false;     // Neg(d), a graph output computed from the data after the update
  bool earlier_reader = false;   // u = u_in + Gather(d, rows 0, 1): read before the update
};

struct Built {
  Graph g;
  planner::FusionGroup group;
};

Built build(const Variant& v) {
  Built b;
  Graph& g = b.g;
  const int x = testing::add_input(g, "x", DType::kF32, {8, 64});
  const int d = v.data_is_input ? x : testing::add_op(g, "Relu", {x});
  const int ids = v.indices_from_input ? testing::add_input(g, "ids", DType::kI64, {2, 1})
                                       : g.add_constant("ids", Tensor::from_ints(DType::kI64, {2, 1}, v.indices));
  int u = testing::add_input(g, "u", DType::kF32, {2, 64});
  if (v.earlier_reader) {
    const int rows = g.add_constant("rows", Tensor::from_ints(DType::kI64, {2}, std::vector<int64_t>{0, 1}));
    u = testing::add_op(g, "Add", {u, testing::add_op(g, "Gather", {d, rows}, testing::attrs({{"axis", int64_t{0}}}))});
  }
  const int s = testing::add_op(g, "ScatterND", {d, ids, u});
  b.group.nodes = {static_cast<int>(g.nodes().size()) - 1};
  g.outputs().push_back(s);
  if (v.later_reader) g.outputs().push_back(testing::add_op(g, "Neg", {d}));
  if (v.data_is_output) g.outputs().push_back(d);
  planner::describe_group(g, b.group);
  return b;
}

TEST(InPlace, AnUpdateIsCopiedWhereItsDataIsStillNeeded) {
  const auto variant = [](std::string name, bool eligible, auto&& set) {
    Variant v;
    v.name = std::move(name);
    v.eligible = eligible;
    set(v);
    return v;
  };
  const auto as_is = [](Variant&) {};
  const std::vector<Variant> variants = {
      variant("computed data, constant distinct tuples", true, as_is),
      variant("negative tuples inside the extent", true, [](Variant& v) { v.indices = {-1, 3}; }),
      variant("a reader of the data that runs before (the updates' producer)", true, [](Variant& v) { v.earlier_reader = true; }),
      variant("a reader of the data that runs after", false, [](Variant& v) { v.later_reader = true; }),
      variant("the data a graph input", false, [](Variant& v) { v.data_is_input = true; }),
      variant("the data a graph output", false, [](Variant& v) { v.data_is_output = true; }),
      variant("indices from an input", false, [](Variant& v) { v.indices_from_input = true; }),
      variant("a repeated tuple", false, [](Variant& v) { v.indices = {5, 5}; }),
      variant("a repeated tuple, one written negative", false, [](Variant& v) { v.indices = {7, -1}; }),
      variant("a tuple past the extent", false, [](Variant& v) { v.indices = {2, 8}; }),
  };
  const unsigned seed = testing::test_seed();
  std::mt19937 rng(seed);
  auto host = backend::make_host_backend();
  const planner::Device h100 = planner::find_device("h100");
  for (const Variant& v : variants) {
    const Built b = build(v);
    EXPECT_EQ(planner::InPlaceUpdates(b.g).eligible(b.group), v.eligible) << v.name;
    const planner::ModelPlan plan = planner::plan_model(b.g, h100);
    bool offered = false;  // among every group weighed (a fused Relu + ScatterND weighs the ScatterND alone too)
    for (const planner::GroupPlan& gp : plan.compared) {
      for (const planner::Candidate& c : gp.candidates) offered = offered || c.config.in_place;
    }
    EXPECT_EQ(offered, v.eligible) << v.name;
    if (v.indices_from_input || v.indices[1] == 8) continue;  // random or invalid indices: nothing to run
    // The compiled plan computes what the reference does, the copy keeping the data for its reader.
    std::vector<Tensor> inputs;
    for (int in : b.g.inputs()) inputs.push_back(backend::random_tensor(b.g.value(in).dtype, b.g.value(in).shape, 0, 0, rng));
    const std::vector<Tensor> want = reference::run_graph(b.g, inputs);
    runtime::PlanRunner runner(compiler::compile_bundle(b.g, plan, h100, "variant"), *host);
    const std::vector<Tensor> got = runner.run(inputs);
    ASSERT_EQ(got.size(), want.size());
    for (size_t k = 0; k < got.size(); ++k) {
      EXPECT_TRUE(got[k] == want[k]) << v.name << ", output " << k << ", seed " << seed;
    }
  }
  // A permutation of the data's rows by itself (its updates are its data): the kernel would read
  // rows other threads overwrite.
  {
    Graph g;
    const int d = testing::add_op(g, "Relu", {testing::add_input(g, "x", DType::kF32, {8, 64})});
    const int perm = g.add_constant("perm", Tensor::from_ints(DType::kI64, {8, 1}, std::vector<int64_t>{7, 6, 5, 4, 3, 2, 1, 0}));
    g.outputs().push_back(testing::add_op(g, "ScatterND", {d, perm, d}));
    planner::FusionGroup one;
    one.nodes = {1};
    planner::describe_group(g, one);
    EXPECT_FALSE(planner::InPlaceUpdates(g).eligible(one)) << "updates that are the data itself";
  }
  // A group of the ScatterND and its producer is not one ScatterND.
  Built b = build(variants[0]);
  planner::FusionGroup two;
  two.nodes = {0, b.group.nodes[0]};
  planner::describe_group(b.g, two);
  EXPECT_FALSE(planner::InPlaceUpdates(b.g).eligible(two));
}

TEST(InPlace, TheTwoFormsHaveTheirOwnSignatures) {
  Variant eligible;
  eligible.eligible = true;
  const Built b = build(eligible);
  const Signature copy = planner::group_signature(b.g, b.group, false);
  const Signature in_place = planner::group_signature(b.g, b.group, true);
  EXPECT_EQ(copy.digest, subgraph_signature(b.g, b.group.nodes).digest);
  EXPECT_NE(in_place.digest, copy.digest);
  EXPECT_EQ(in_place.digest, "v" + std::to_string(kSignatureVersion) + ":" + sha256_hex(in_place.canonical_form))
      << "the digest is of the form the database keeps beside it";
  // The plan's group of the eligible ScatterND carries the in-place signature; a structurally equal
  // group that is not eligible (the data read after) carries the copy's.
  const planner::Device h100 = planner::find_device("h100");
  for (const bool later : {false, true}) {
    Variant v;
    v.eligible = !later;
    v.later_reader = later;
    const Built c = build(v);
    const planner::ModelPlan plan = planner::plan_model(c.g, h100);
    bool found = false;
    for (const planner::GroupPlan& gp : plan.compared) {
      if (gp.group.nodes.size() != 1 || c.g.nodes()[static_cast<size_t>(gp.group.nodes[0])].op != "ScatterND") continue;
      found = true;
      EXPECT_EQ(gp.in_place, !later);
      EXPECT_EQ(gp.signature, later ? copy.digest : in_place.digest);
    }
    EXPECT_TRUE(found);
  }
}

TEST(InPlace, EveryReductionCombinesWithWhatTheBufferHolds) {
  const unsigned seed = testing::test_seed();
  std::mt19937 rng(seed);
  auto host = backend::make_host_backend();
  const planner::Device h100 = planner::find_device("h100");
  for (const std::string reduction : {"none", "add", "mul", "max", "min"}) {
    for (const DType dt : {DType::kF32, DType::kF16, DType::kI64}) {
      // d = Relu(x) [6, 4, 8]; tuples of depth 2 (slices of 8), one negative.
      Graph g;
      const int x = testing::add_input(g, "x", dt, {6, 4, 8});
      const int d = testing::add_op(g, "Relu", {x});
      const int ids = g.add_constant("ids", Tensor::from_ints(DType::kI64, {3, 2}, std::vector<int64_t>{1, 2, 4, 0, -1, 3}));
      const int u = testing::add_input(g, "u", dt, {3, 8});
      Attributes a;
      if (reduction != "none") a.set("reduction", reduction);
      g.outputs().push_back(testing::add_op(g, "ScatterND", {d, ids, u}, a));
      planner::FusionGroup group;
      group.nodes = {1};
      planner::describe_group(g, group);
      ASSERT_TRUE(planner::InPlaceUpdates(g).eligible(group));
      const std::vector<planner::Candidate> cands = planner::in_place_candidates(g, group, h100, {});
      ASSERT_FALSE(cands.empty());
      const std::string what = reduction + ", " + std::string(dtype_name(dt)) + ", seed " + std::to_string(seed);
      for (const planner::Candidate& c : {cands.front(), cands.back()}) {
        ASSERT_TRUE(c.cost.valid && c.config.in_place) << c.config.str();
        const codegen::LoweredKernel lk = codegen::lower_group(g, group, c.config, "k");
        ASSERT_EQ(lk.in_place, std::vector<int>{0}) << "the output is the data's buffer";
        EXPECT_EQ(lk.kernel.index_bits, 32) << what;
        backend::ModuleSource src;
        src.cuda_source = codegen::emit_cuda({lk.kernel});
        // Without a reduction, float slices of whole 16-byte vectors move a vector at a time.
        const bool wide = reduction == "none" && dt != DType::kI64;
        const std::string vector_store = std::string("ft_store_") + (dt == DType::kF32 ? "float4" : "ft_u16x8") + "(out0";
        EXPECT_EQ(src.cuda_source.find(vector_store) != std::string::npos, wide) << what << "\n" << src.cuda_source;
        src.kernels.push_back({"k", lk.kernel.grid, lk.kernel.threads, lk.kernel.shared_bytes, ""});
        const auto module = host->load_source(src);
        const backend::Reference ref = backend::reference_values(g, group, lk.inputs, rng);
        const backend::VerifyResult ok = backend::verify_kernel(g, "k", lk.inputs, lk.outputs, *host, *module, ref, {64}, lk.in_place);
        EXPECT_TRUE(ok.ok) << what << ", " << c.config.str() << ": " << ok.detail;
        EXPECT_EQ(ok.compared, 6 * 4 * 8) << "the whole buffer is compared";
        // The same kernel given a poisoned buffer of its own leaves all but the slices poisoned.
        const backend::VerifyResult own = backend::verify_kernel(g, "k", lk.inputs, lk.outputs, *host, *module, ref, {64});
        EXPECT_FALSE(own.ok) << what << ": an in-place kernel passed without its data";
        if (backend::nvrtc_available() && dt == DType::kF32) {
          const std::string ptx = backend::compile_cuda_cached(src.cuda_source, "sm_90").ptx;
          EXPECT_EQ(ptx.find("div.s64"), std::string::npos) << what;
          EXPECT_EQ(ptx.find("rem.s64"), std::string::npos) << what;
        }
      }
    }
  }
}

}  // namespace
}  // namespace fusetune
