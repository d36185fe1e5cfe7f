// The compiler's pipeline (compiler/pipeline.h): with every dump and every check on, the passes
// run in their order and each dump shows what its pass made; the pipeline is the same road as
// planning and generating by hand (the same plan and the same bundle, byte for byte); pass names
// are parsed and an unknown one is refused listing the passes.
#include "compiler/pipeline.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "planner/device.h"

namespace fusetune::compiler {
namespace {

const std::string kModels = std::string(FUSETUNE_SOURCE_DIR) + "/tests/data/models/";

TEST(Pipeline, EveryPassDumpsWhatItMadeInOrderWithEveryCheckOn) {
  const planner::Device d = planner::find_device("h100");
  PipelineOptions options;
  options.dump_after = passes_named("all");
  options.verify_each = true;
  std::vector<std::pair<Pass, std::string>> dumps;
  options.dump = [&](Pass p, const std::string& text) { dumps.emplace_back(p, text); };
  const PipelineResult r = compile_model(kModels + "cnn_small/model.onnx", d, options);
  ASSERT_EQ(dumps.size(), passes().size());
  for (size_t i = 0; i < dumps.size(); ++i) EXPECT_EQ(dumps[i].first, passes()[i].first) << i;
  const Graph& g = r.model.graph;
  // import and fold: the graph, a line per node; the fold took nodes away (the CNN's
  // BatchNormalization into its Conv) or left them all.
  EXPECT_EQ(dumps[1].second, graph_text(g));
  EXPECT_NE(dumps[1].second.find("graph: " + std::to_string(g.nodes().size()) + " nodes"), std::string::npos);
  EXPECT_NE(dumps[0].second.find(" Conv '"), std::string::npos);
  EXPECT_GE(dumps[0].second.size(), dumps[1].second.size());
  // fuse: both fusions; plan: a line per group and the totals.
  EXPECT_NE(dumps[2].second.find("fusion: "), std::string::npos);
  EXPECT_NE(dumps[2].second.find("parts (no stitching, no packing): "), std::string::npos);
  EXPECT_EQ(dumps[3].second, plan_text(r.plan));
  EXPECT_NE(dumps[3].second.find("plan: " + std::to_string(r.plan.groups.size()) + " groups in " +
                                 std::to_string(r.plan.launches) + " launches"),
            std::string::npos);
  // generate: every launch's Kernel IR and the bundle's files; verify: the count.
  for (const CompiledLaunch& l : r.launches) {
    EXPECT_NE(dumps[4].second.find("kernel " + l.lowered.kernel.name + " grid="), std::string::npos) << l.lowered.kernel.name;
  }
  EXPECT_NE(dumps[4].second.find("file manifest.json: " + std::to_string(r.bundle.manifest.size()) + " bytes"), std::string::npos);
  EXPECT_EQ(dumps[5].second.find(std::to_string(r.verified.kernels) + " kernels verified on the host for " +
                                 std::to_string(r.launches.size()) + " launches"),
            0u)
      << dumps[5].second;
}

// The road by hand: import (affines folded), plan_model, compile_bundle. The pipeline gives the
// same plan and the same bundle.
TEST(Pipeline, IsTheSameRoadAsPlanningAndGeneratingByHand) {
  const planner::Device d = planner::find_device("h100");
  for (const char* model : {"cnn_small", "bert"}) {
    PipelineOptions options;
    if (std::string(model) == "bert") options.import.input_shapes = {{"input_ids", {1, 16}}, {"attention_mask", {1, 16}}};
    const PipelineResult r = compile_model(kModels + model + "/model.onnx", d, options);
    const importer::ImportedModel m = importer::import_onnx(kModels + model + "/model.onnx", options.import);
    const planner::ModelPlan plan = planner::plan_model(m.graph, d);
    EXPECT_EQ(plan_text(plan), plan_text(r.plan)) << model;
    const runtime::Bundle b = compile_bundle(m.graph, plan, d, "model.onnx");
    EXPECT_EQ(b.manifest, r.bundle.manifest) << model;
    EXPECT_EQ(b.cuda_source, r.bundle.cuda_source) << model;
    EXPECT_EQ(b.constants, r.bundle.constants) << model;
  }
}

TEST(Pipeline, PassNamesAreParsedAndAnUnknownOneIsRefusedListingThePasses) {
  EXPECT_EQ(passes_named("fuse,plan"), (std::set<Pass>{Pass::kFuse, Pass::kPlan}));
  EXPECT_EQ(passes_named("all").size(), passes().size());
  EXPECT_EQ(pass_name(Pass::kGenerate), "generate");
  for (const char* bad : {"lower", "plan,", ""}) {
    try {
      passes_named(bad);
      ADD_FAILURE() << "'" << bad << "' was taken";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("import, fold, fuse, plan, generate, verify"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace fusetune::compiler
