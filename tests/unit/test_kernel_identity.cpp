// Kernel identity (codegen/kernel_identity.h): kernels lowered from groups of the same ops on the
// same shapes, whose names lowering derives from different value ids, have one canonical text;
// a different op, shape, operand order or tile does not. And the compiler's use of it
// (compiler/compile_bundle.h, verify_bundle.h): a model's repeated layers run one kernel each,
// defined once in the bundle's text and verified once.
#include "codegen/kernel_identity.h"

#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "codegen/emit.h"
#include "codegen/lower_group.h"
#include "compiler/pipeline.h"
#include "planner/device.h"
#include "planner/fusion.h"
#include "runtime/bundle.h"
#include "unit/cli_run.h"
#include "unit/graph_helpers.h"
#include "unit/test_dir.h"

namespace fusetune::codegen {
namespace {

using fusetune::testing::add_input;
using fusetune::testing::add_op;
using fusetune::testing::attrs;

// A LayerNorm-like row group over x, y: (x - mean(x)) * y, Relu; its nodes as one group.
planner::FusionGroup row_group(Graph& g, const std::string& op, const Shape& shape, bool swap = false) {
  const int first = static_cast<int>(g.nodes().size());
  const int x = add_input(g, "x" + std::to_string(first), DType::kF16, shape);
  const int y = add_input(g, "y" + std::to_string(first), DType::kF16, shape);
  const int mean = add_op(g, "ReduceMean", {x}, attrs({{"axes", std::vector<int64_t>{-1}}, {"keepdims", int64_t{1}}}));
  const int centred = add_op(g, "Sub", {x, mean});
  const int scaled = swap ? add_op(g, op, {y, centred}) : add_op(g, op, {centred, y});
  const int out = add_op(g, "Relu", {scaled});
  g.outputs().push_back(out);
  planner::FusionGroup fg;
  for (int n = first; n < static_cast<int>(g.nodes().size()); ++n) fg.nodes.push_back(n);
  planner::describe_group(g, fg);
  return fg;
}

TEST(KernelIdentity, TheSameGroupsOnOtherValuesHaveOneTextAndOthersDoNot) {
  Graph g;
  const planner::TileConfig tile{{4, 256}, 0, 128, 1};
  const auto lower = [&](const planner::FusionGroup& fg, const planner::TileConfig& cfg, const std::string& name) {
    return lower_group(g, fg, cfg, name).kernel;
  };
  const Kernel a = lower(row_group(g, "Mul", {16, 256}), tile, "a");
  const Kernel b = lower(row_group(g, "Mul", {16, 256}), tile, "b");
  // Lowering names things by value id: the raw texts differ beyond the kernels' names.
  Kernel a_as_b = a;
  a_as_b.name = b.name;
  ASSERT_NE(emit_kernel(a_as_b), emit_kernel(b)) << "the second group's value ids should show in its text";
  EXPECT_EQ(canonical_text(a), canonical_text(b));
  EXPECT_EQ(canonical_text(a).find("//"), std::string::npos) << "comments (value names) are dropped";
  EXPECT_NE(canonical_text(a), canonical_text(lower(row_group(g, "Add", {16, 256}), tile, "c"))) << "another op";
  EXPECT_NE(canonical_text(a), canonical_text(lower(row_group(g, "Mul", {16, 128}), tile, "d"))) << "another shape";
  EXPECT_NE(canonical_text(a), canonical_text(lower(row_group(g, "Sub", {16, 256}, true), tile, "e")))
      << "operands in the other order";
  EXPECT_NE(canonical_text(a), canonical_text(lower(row_group(g, "Mul", {16, 256}), {{2, 256}, 0, 64, 1}, "f"))) << "another tile";
  // The output stored from another declared local is another text, though every local is renamed.
  Kernel crossed = b;
  std::string last_let;
  bool changed = false;
  const std::function<void(Block&)> cross = [&](Block& block) {
    for (Stmt& s : block) {
      if (s.kind == Stmt::Kind::kLet && s.ctype == "float" && last_let.empty()) last_let = s.name;
      if (s.kind == Stmt::Kind::kStore && s.name == "out0" && !last_let.empty() && s.b != last_let) {
        s.b = last_let;
        changed = true;
      }
      cross(s.body);
      cross(s.orelse);
    }
  };
  cross(crossed.body);
  ASSERT_TRUE(changed) << to_text(b);
  EXPECT_NE(canonical_text(crossed), canonical_text(a));
}

// DistilBERT's test export (two layers): the second layer's launches run the first layer's kernels.
TEST(KernelIdentity, ALayersLaunchesRunTheKernelsOfTheLayerBeforeAndAreVerifiedOnce) {
  compiler::PipelineOptions options;
  const compiler::PipelineResult r =
      compiler::compile_model(std::string(FUSETUNE_SOURCE_DIR) + "/tests/data/models/distilbert/model.onnx", planner::find_device("h100"), options);
  const nlohmann::json manifest = nlohmann::json::parse(r.bundle.manifest);
  std::map<std::string, int> runs;
  std::set<std::string> distinct;  // what verification keys launches by: kernel or call, and signatures
  for (const nlohmann::json& l : manifest.at("launches")) {
    std::string key = l.contains("library") ? l.at("library").dump() : l.at("kernel").get<std::string>();
    for (const nlohmann::json& gr : l.at("groups")) key += " " + gr.at("signature").get<std::string>();
    distinct.insert(key);
    if (!l.contains("library")) ++runs[l.at("kernel").get<std::string>()];
  }
  int shared = 0;
  for (const auto& [name, count] : runs) {
    // Defined once in the text, whatever the launches that run it.
    const std::string head = ") " + name + "(";
    const size_t at = r.bundle.cuda_source.find(head);
    ASSERT_NE(at, std::string::npos) << name;
    EXPECT_EQ(r.bundle.cuda_source.find(head, at + 1), std::string::npos) << name << " defined twice";
    shared += count > 1 ? 1 : 0;
  }
  // Both layers' attention, and output projection with its LayerNorm into the FFN (each layer's
  // one Q, K and V product takes the LayerNorm before it, the embeddings' or the first FFN's, and
  // the last FFN the final one: theirs differ).
  EXPECT_GE(shared, 2) << "kernels run by more than one launch";
  EXPECT_LT(runs.size(), r.launches.size());
  EXPECT_EQ(r.verified.launches, r.launches.size());
  EXPECT_EQ(r.verified.kernels, distinct.size());
  EXPECT_LT(r.verified.kernels, r.launches.size());
  // `profile` counts a kernel's launches together (the host keys its counters by kernel): one row a
  // kernel, its launches said, its modeled figures the sum of theirs.
  const testing::TestDir dir("kernel_identity");
  runtime::write_bundle(r.bundle, (dir / "plan").string());
  const testing::Outcome p = testing::run_cli("profile " + (dir / "plan").string() + " --json");
  ASSERT_EQ(p.exit_code, 0) << p.output;
  const nlohmann::json j = nlohmann::json::parse(p.output.substr(p.output.find('{')));
  EXPECT_EQ(j.at("kernels").size(), runs.size());
  for (const nlohmann::json& row : j.at("kernels")) {
    const std::string name = row.at("kernel").get<std::string>();
    EXPECT_EQ(row.at("launches").get<int>(), runs.at(name)) << name;
    int64_t modeled = 0;
    for (const nlohmann::json& l : manifest.at("launches")) {
      if (l.at("kernel") != name) continue;
      for (const nlohmann::json& gr : l.at("groups")) modeled += gr.at("modeled_dram_bytes").get<int64_t>();
    }
    EXPECT_EQ(row.at("modeled").at("dram_bytes").get<int64_t>(), modeled) << name;
  }
}

}  // namespace
}  // namespace fusetune::codegen
