// An If whose condition is known only at run time (importer/control_flow.h, core/graph.h's
// guards): both branches imported under guards and planned, each branch's launches marked with
// the condition they need (bundle manifest `when`), and the runtime running only the branch the
// condition picks. Checked against the branches' definitions computed here, on seeded random data,
// for every combination of an input condition and a nested condition computed on the device, on
// the reference interpreter and compiled on the host executor, whose counters show that the
// launches of the branch not picked never ran, and each branch runs as one stretch of launches.
// Branches of different types are refused naming the node; the plan verifier refuses a group
// whose nodes have other guards and a launch packing groups of other guards; the graph refuses a
// read of a branch's value from outside it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "backend/backend.h"
#include "compiler/pipeline.h"
#include "importer/importer.h"
#include "planner/fusion.h"
#include "planner/verify_plan.h"
#include "reference/interpreter.h"
#include "runtime/plan_runner.h"
#include "unit/import_check.h"
#include "unit/onnx_builder.h"
#include "unit/test_dir.h"
#include "unit/test_seed.h"

namespace fusetune {
namespace {

using testing::kBool;
using testing::kFloat;
using testing::OnnxBuilder;

constexpr int64_t kRows = 4, kCols = 32;

// y = If(c, then: (ReduceSum(x) > 0 ? Relu : Neg)(x W), else: Sigmoid(x)) + x; the inner If's
// condition is computed inside the then_branch, from data.
OnnxBuilder branchy_model(const Tensor& w) {
  OnnxBuilder inner_then, inner_else, then_branch, else_branch;
  inner_then.output("it", kFloat, {kRows, kCols});
  inner_then.node("Relu", {"mm"}, {"it"});
  inner_else.output("ie", kFloat, {kRows, kCols});
  inner_else.node("Neg", {"mm"}, {"ie"});
  then_branch.output("t", kFloat, {kRows, kCols});
  then_branch.node("MatMul", {"x", "W"}, {"mm"});
  then_branch.node("ReduceSum", {"x"}, {"total"});
  then_branch.initializer("zero", Tensor::from_floats(DType::kF32, {}, std::vector<float>{0}));
  then_branch.node("Greater", {"total", "zero"}, {"positive"});
  onnx::NodeProto& inner = then_branch.node("If", {"positive"}, {"t"}, "inner");
  OnnxBuilder::attr_graph(inner, "then_branch", inner_then);
  OnnxBuilder::attr_graph(inner, "else_branch", inner_else);
  else_branch.output("e", kFloat, {kRows, kCols});
  else_branch.node("Sigmoid", {"x"}, {"e"});
  OnnxBuilder b(17);
  b.input("x", kFloat, {kRows, kCols}).input("c", kBool, {}).output("y", kFloat, {kRows, kCols});
  b.initializer("W", w);
  onnx::NodeProto& outer = b.node("If", {"c"}, {"picked"}, "outer");
  OnnxBuilder::attr_graph(outer, "then_branch", then_branch);
  OnnxBuilder::attr_graph(outer, "else_branch", else_branch);
  b.node("Add", {"picked", "x"}, {"y"});
  return b;
}

// The model's definition, in double.
std::vector<double> branchy_expected(const std::vector<float>& x, const std::vector<float>& w, bool c) {
  std::vector<double> y(x.size());
  double total = 0;
  for (float v : x) total += v;
  for (int64_t i = 0; i < kRows; ++i) {
    for (int64_t j = 0; j < kCols; ++j) {
      const size_t at = static_cast<size_t>(i * kCols + j);
      double picked = 0;
      if (c) {
        double mm = 0;
        for (int64_t k = 0; k < kCols; ++k) mm += double{x[static_cast<size_t>(i * kCols + k)]} * w[static_cast<size_t>(k * kCols + j)];
        picked = total > 0 ? std::max(mm, 0.0) : -mm;
      } else {
        picked = 1.0 / (1.0 + std::exp(-double{x[at]}));
      }
      y[at] = picked + x[at];
    }
  }
  return y;
}

void expect_close(const std::vector<float>& got, const std::vector<double>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], 1e-4 * std::max(1.0, std::abs(want[i]))) << what << ", element " << i;
  }
}

TEST(RuntimeIf, TheRuntimeRunsTheBranchItsConditionPicks) {
  const unsigned seed = testing::test_seed();
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(kRows * kCols)), w(static_cast<size_t>(kCols * kCols));
  for (float& v : x) v = normal(rng);
  for (float& v : w) v = normal(rng) * 0.2f;
  const OnnxBuilder b = branchy_model(Tensor::from_floats(DType::kF32, {kCols, kCols}, w));
  const Graph g = importer::import_onnx_bytes(b.bytes(), ".").graph;
  // Both branches are in the graph, guarded; the merges are not.
  std::set<std::string> guarded_ops, merges_guards;
  for (const Node& n : g.nodes()) {
    if (n.op == "IfMerge") merges_guards.insert(std::to_string(n.guards.size()));
    if (!n.guards.empty()) guarded_ops.insert(n.op);
  }
  EXPECT_TRUE(guarded_ops.count("MatMul") && guarded_ops.count("Sigmoid") && guarded_ops.count("Relu") && guarded_ops.count("Neg"))
      << compiler::graph_text(g);
  EXPECT_EQ(merges_guards, (std::set<std::string>{"0", "1"})) << "the outer merge unguarded, the inner one under c";

  testing::TestDir dir("runtime_if");
  b.write(dir / "model.onnx");
  const compiler::PipelineResult r = compiler::compile_model(dir / "model.onnx", planner::find_device("h100"), {});
  const nlohmann::json manifest = nlohmann::json::parse(r.bundle.manifest);
  // Each launch's guards, by kernel: (condition buffer's name, value) in order.
  std::map<std::string, std::vector<std::pair<std::string, bool>>> when;
  for (const auto& l : manifest.at("launches")) {
    auto& w_of = when[l.at("kernel").get<std::string>()];
    for (const auto& c : l.value("when", nlohmann::json::array())) {
      w_of.emplace_back(manifest.at("buffers").at(c.at("buffer").get<size_t>()).at("name").get<std::string>(), c.at("equals").get<bool>());
    }
  }
  size_t guarded_launches = 0;
  for (const auto& [k, w_of] : when) guarded_launches += w_of.empty() ? 0 : 1;
  ASSERT_GE(guarded_launches, 3u) << manifest.dump(1);
  // A branch runs as one stretch of launches (the runtime synchronizes where the guards change):
  // the outer then_branch's launches, its inner branches inside it, then the else_branch's.
  std::vector<std::vector<std::pair<std::string, bool>>> stretches;
  for (const auto& l : manifest.at("launches")) {
    const auto& w_of = when.at(l.at("kernel").get<std::string>());
    if (stretches.empty() || stretches.back() != w_of) stretches.push_back(w_of);
  }
  using W = std::vector<std::pair<std::string, bool>>;
  ASSERT_EQ(stretches.size(), 6u) << manifest.dump(1);
  EXPECT_EQ(stretches[0], (W{{"c", true}}));
  EXPECT_EQ(stretches[1].size(), 2u);
  EXPECT_EQ(stretches[2].size(), 2u);
  EXPECT_EQ(stretches[3], (W{{"c", true}}));
  EXPECT_EQ(stretches[4], (W{{"c", false}}));
  EXPECT_EQ(stretches[5], W{});

  auto host = backend::make_host_backend();
  for (const bool c : {true, false}) {
    for (const float sign : {1.0f, -1.0f}) {
      std::vector<float> xs = x;
      for (float& v : xs) v *= sign;
      const std::vector<double> want = branchy_expected(xs, w, c);
      const std::vector<Tensor> inputs = {Tensor::from_floats(DType::kF32, {kRows, kCols}, xs),
                                          Tensor::from_ints(DType::kBool, {}, std::vector<int64_t>{c ? 1 : 0})};
      const std::string what = std::string("c ") + (c ? "true" : "false") + ", sign " + (sign > 0 ? "+" : "-") + ", seed " + std::to_string(seed);
      expect_close(reference::run_graph(g, inputs)[0].to_floats(), want, "reference, " + what);
      runtime::PlanRunner runner(r.bundle, *host);
      expect_close(runner.run(inputs)[0].to_floats(), want, "compiled, " + what);
      // The launches that ran are exactly those whose conditions held.
      double total = 0;
      for (float v : xs) total += v;
      const std::map<std::string, bool> value = {{"c", c}};
      const std::map<std::string, simt::Counters> counted = runner.counters();
      for (const auto& [kernel, w_of] : when) {
        bool holds = true;
        for (const auto& [name, equals] : w_of) {
          const bool v = name == "c" ? c : total > 0;  // the other condition is the inner If's
          holds = holds && v == equals;
          if (!holds) break;
        }
        const auto it = counted.find(kernel);
        EXPECT_EQ(it != counted.end() && it->second.launches > 0, holds) << kernel << ", " << what;
      }
    }
  }
}

TEST(RuntimeIf, BranchesOfDifferentTypesAreRefusedNamingTheNode) {
  OnnxBuilder then_branch, else_branch;
  then_branch.output("t", kFloat, {2, 3});
  then_branch.node("Relu", {"x"}, {"t"});
  else_branch.output("e", kFloat, {3, 2});
  else_branch.node("Transpose", {"x"}, {"e"});
  OnnxBuilder b(17);
  b.input("x", kFloat, {2, 3}).input("c", kBool, {}).output("y", kFloat, {});
  onnx::NodeProto& n = b.node("If", {"c"}, {"y"}, "shapeshifter");
  OnnxBuilder::attr_graph(n, "then_branch", then_branch);
  OnnxBuilder::attr_graph(n, "else_branch", else_branch);
  testing::expect_refused(b, "shapeshifter", "is float32 2x3 from the then_branch and float32 3x2 from the else_branch");
  // A condition of more than one value is refused too.
  OnnxBuilder wide(17);
  wide.input("x", kFloat, {2, 3}).input("c", kBool, {2}).output("y", kFloat, {2, 3});
  onnx::NodeProto& m = wide.node("If", {"c"}, {"y"}, "wide");
  OnnxBuilder same;
  same.output("s", kFloat, {2, 3});
  same.node("Neg", {"x"}, {"s"});
  OnnxBuilder::attr_graph(m, "then_branch", same);
  OnnxBuilder::attr_graph(m, "else_branch", same);
  testing::expect_refused(wide, "wide", "the condition) must be one bool");
}

// The plan verifier's guards rule: a group whose nodes run under other guards than its own is a
// planning bug.
TEST(RuntimeIf, TheVerifierRefusesAGroupOfMixedGuards) {
  std::vector<float> w(static_cast<size_t>(kCols * kCols), 0.5f);
  const Graph g = importer::import_onnx_bytes(branchy_model(Tensor::from_floats(DType::kF32, {kCols, kCols}, w)).bytes(), ".").graph;
  planner::FusionPlan fusion = planner::fuse(g);
  planner::verify_fusion(g, fusion);
  auto guarded = std::find_if(fusion.groups.begin(), fusion.groups.end(), [](const planner::FusionGroup& fg) { return !fg.guards.empty(); });
  ASSERT_NE(guarded, fusion.groups.end());
  planner::FusionPlan packed = fusion;
  guarded->guards.clear();
  try {
    planner::verify_fusion(g, fusion);
    ADD_FAILURE() << "a group of guarded nodes listed without guards passed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("plan: guards:"), std::string::npos) << e.what();
  }
  // Two groups of other guards packed into one launch.
  auto then_group = std::find_if(packed.groups.begin(), packed.groups.end(),
                                 [](const planner::FusionGroup& fg) { return fg.guards.size() == 1 && fg.guards[0].when; });
  auto else_group = std::find_if(packed.groups.begin(), packed.groups.end(),
                                 [](const planner::FusionGroup& fg) { return fg.guards.size() == 1 && !fg.guards[0].when; });
  ASSERT_TRUE(then_group != packed.groups.end() && else_group != packed.groups.end());
  const int merged = std::min(then_group->launch, else_group->launch);
  const int gone = std::max(then_group->launch, else_group->launch);
  for (planner::FusionGroup& fg : packed.groups) {
    if (fg.launch == gone) fg.launch = merged;
    if (fg.launch > gone) --fg.launch;
  }
  try {
    planner::verify_fusion(g, packed);
    ADD_FAILURE() << "a launch packing both branches passed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("which run under other guards"), std::string::npos) << e.what();
  }
}

// Graph::validate: nothing outside a branch reads what the branch computes, except the IfMerge
// that takes it for the condition's value of that branch.
TEST(RuntimeIf, TheGraphRefusesAReadOfABranchFromOutsideIt) {
  std::vector<float> w(static_cast<size_t>(kCols * kCols), 0.5f);
  Graph g = importer::import_onnx_bytes(branchy_model(Tensor::from_floats(DType::kF32, {kCols, kCols}, w)).bytes(), ".").graph;
  g.validate();
  // The outer merge reading the else result as the then result.
  Graph swapped = g;
  for (Node& n : swapped.nodes()) {
    if (n.op == "IfMerge" && n.guards.empty()) std::swap(n.inputs[1], n.inputs[2]);
  }
  try {
    swapped.validate();
    ADD_FAILURE() << "a merge taking each branch's result for the other passed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("of a branch it is not guarded by"), std::string::npos) << e.what();
  }
  // A then_branch node losing its guard while it reads the branch's MatMul.
  Graph leaked = g;
  for (Node& n : leaked.nodes()) {
    if (n.op == "Relu") n.guards.clear();
  }
  try {
    leaked.validate();
    ADD_FAILURE() << "an unguarded node reading a guarded value passed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("node '"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("of a branch it is not guarded by"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fusetune
