// The plan verifier (planner/verify_plan.h): every plan of the test models passes (plan_model runs
// it on each), and each rule, broken by hand in a real plan, is reported by name with the group
// and the node or value at fault; the fusions of the models pass verify_fusion.
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <string>

#include "core/error.h"
#include "planner/device.h"
#include "planner/select.h"
#include "planner/verify_plan.h"
#include "unit/graph_helpers.h"

namespace fusetune::planner {
namespace {

// The BERT test model's plan (groups that read each other, packed launches).
struct BertPlan {
  Graph g = fusetune::testing::load_test_model("bert");
  ModelPlan plan = plan_model(g, find_device("h100"));
};

// The message verify_plan gives for `plan` after `mutate`, or "" when it passes.
std::string broken(const Graph& g, ModelPlan plan, const std::function<void(ModelPlan&)>& mutate) {
  mutate(plan);
  try {
    verify_plan(g, plan);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// The first group that reads a value another group computes: (reader, writer, value).
struct Edge {
  size_t reader = 0, writer = 0;
  int value = -1;
};
Edge first_edge(const ModelPlan& plan) {
  for (size_t r = 0; r < plan.groups.size(); ++r) {
    for (int v : plan.groups[r].group.inputs) {
      for (size_t w = 0; w < r; ++w) {
        const auto& outs = plan.groups[w].group.outputs;
        if (std::find(outs.begin(), outs.end(), v) != outs.end()) return {r, w, v};
      }
    }
  }
  ADD_FAILURE() << "no group reads another's output";
  return {};
}

TEST(VerifyPlan, EveryTestModelsPlanKeepsEveryRule) {
  for (const char* model : {"bert", "cnn_small", "distilbert_fp16", "gpt2_fp16", "resnet_small", "swin_t", "llama_decode"}) {
    const Graph g = fusetune::testing::load_test_model(model);
    const ModelPlan plan = plan_model(g, find_device("h100"));  // verifies
    EXPECT_EQ(broken(g, plan, [](ModelPlan&) {}), "") << model;
    EXPECT_GT(plan.groups.size(), 1u) << model;
  }
}

TEST(VerifyPlan, EachBrokenRuleIsNamed) {
  const BertPlan b;
  const Graph& g = b.g;
  const Edge e = first_edge(b.plan);
  // partition: a node dropped, a node in two groups
  EXPECT_NE(broken(g, b.plan, [](ModelPlan& p) { p.groups[0].group.nodes.pop_back(); }).find("plan: partition: node "),
            std::string::npos);
  const std::string twice = broken(g, b.plan, [](ModelPlan& p) {
    p.groups[1].group.nodes.insert(p.groups[1].group.nodes.begin(), p.groups[0].group.nodes.front());
  });
  EXPECT_NE(twice.find("plan: partition: node "), std::string::npos) << twice;
  EXPECT_NE(twice.find(" and in group 1"), std::string::npos) << twice;
  // boundary: an output another group reads left out; an input nothing reads
  const std::string unexported = broken(g, b.plan, [&](ModelPlan& p) {
    auto& outs = p.groups[e.writer].group.outputs;
    outs.erase(std::find(outs.begin(), outs.end(), e.value));
  });
  EXPECT_NE(unexported.find("plan: boundary: value " + std::to_string(e.value)), std::string::npos) << unexported;
  EXPECT_NE(unexported.find("is read outside it but is not among its outputs"), std::string::npos) << unexported;
  const std::string stray = broken(g, b.plan, [&](ModelPlan& p) { p.groups[e.writer].group.inputs.push_back(e.value); });
  EXPECT_NE(stray.find("as an input that none of its nodes reads from outside"), std::string::npos) << stray;
  // order: the reader moved before its writer; the reader in its writer's launch
  const std::string early = broken(g, b.plan, [&](ModelPlan& p) { std::swap(p.groups[e.reader], p.groups[e.writer]); });
  EXPECT_NE(early.find("plan: order: "), std::string::npos) << early;
  const std::string packed = broken(g, b.plan, [&](ModelPlan& p) {
    p.groups[e.reader].group.launch = p.groups[e.writer].group.launch;
    std::map<int, int> ids;  // launch ids kept 0 .. n-1, so that only the packing breaks a rule
    for (const GroupPlan& gp : p.groups) ids.emplace(gp.group.launch, 0);
    int next = 0;
    for (auto& [id, to] : ids) to = next++;
    for (GroupPlan& gp : p.groups) gp.group.launch = ids.at(gp.group.launch);
    p.launches = next;
  });
  EXPECT_NE(packed.find("which does not run before it"), std::string::npos) << packed;
  EXPECT_NE(broken(g, b.plan, [](ModelPlan& p) {
              for (GroupPlan& gp : p.groups) ++gp.group.launch;
            }).find("plan: order: launch ids are not 0 .. "),
            std::string::npos);
  // choice: out of range; not valid
  EXPECT_NE(broken(g, b.plan, [](ModelPlan& p) { p.groups[0].chosen = p.groups[0].candidates.size(); }).find("plan: choice: group 0"),
            std::string::npos);
  const std::string invalid = broken(g, b.plan, [](ModelPlan& p) {
    p.groups[0].candidates[p.groups[0].chosen].cost.valid = false;
    p.groups[0].candidates[p.groups[0].chosen].cost.reject = "test";
  });
  EXPECT_NE(invalid.find("which is not valid: test"), std::string::npos) << invalid;
}

// The fusions planning starts from (ModelPlanner::partition: the fusion and its parts) keep the
// partition, boundary and order rules on every test model, and a fusion broken by hand is named.
TEST(VerifyPlan, FusionsKeepTheRulesAndABrokenOneIsNamed) {
  for (const char* model : {"bert", "cnn_small", "gpt2_fp16", "swin_t"}) {
    const Graph g = fusetune::testing::load_test_model(model);
    const Device d = find_device("h100");
    ModelPlanner planner(g, d);
    const std::vector<FusionPlan> levels = planner.partition();
    ASSERT_EQ(levels.size(), 2u) << model;
    for (const FusionPlan& level : levels) EXPECT_NO_THROW(verify_fusion(g, level)) << model;
    EXPECT_LE(levels[0].groups.size(), levels[1].groups.size()) << model << ": the parts are no fewer than the fused groups";
  }
  const Graph g = fusetune::testing::load_test_model("bert");
  const Device d = find_device("h100");
  FusionPlan f = ModelPlanner(g, d).partition()[0];
  f.groups[0].nodes.pop_back();
  try {
    verify_fusion(g, f);
    ADD_FAILURE() << "a node in no group passed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("plan: partition: node "), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fusetune::planner
