// The compiler as one visible pipeline: what `fusetune compile` runs, pass by pass, in this order.
//
//   import    the ONNX file read, its opsets checked, inputs bound to static shapes, every node
//             lowered to the canonical ops (docs/canonical-ops.md) with constant expressions
//             folded as they lower, dead nodes dropped, cones of constants too large for that
//             folded where the model's constants do not grow (importer/importer.h): a graph
//   fold      per-channel affines after convolutions folded into their weights and biases,
//             Transposes that undo each other removed, pointwise convolutions made MatMuls, a
//             gated unit's two projections made one product, a large value computed from a few
//             constants copied for each reader
//             (importer::fold_layout_and_affines): the graph
//   fuse      the graph partitioned into fusion groups, merges judged by the cost model, and the
//             same fusion without stitching and packing, the parts a group may split back into
//             (planner::ModelPlanner::partition, planner/fusion.h): two fusions
//   plan      every group's tile candidates enumerated and modeled (planner/tiling.h), the
//             fastest chosen, fused groups split back where their parts model faster, groups
//             packed into launches (planner::ModelPlanner::plan): the plan, which
//             planner::verify_plan checks always
//   generate  each launch lowered to Kernel IR (codegen/lower_group.h), the CUDA text compiled by
//             NVRTC to a cubin and PTX where NVRTC is present, a spilling kernel replaced, the
//             arena and the manifest (compiler/compile_bundle.h): the bundle
//   verify    every kernel of the bundle run on the host executor under its four checks against
//             the reference, on at most `verify.sample_blocks` blocks of a larger grid
//             (compiler/verify_bundle.h)
//
// Takes a model file, a device and the options of each pass. `dump_after` names passes whose
// result is printed, as text, through `dump` once the pass is done; `verify_each` checks each
// pass's result before the next pass takes it: the graph's invariants (Graph::validate) after
// import and fold, the fusions' partition, boundary and order (planner::verify_fusion) after fuse,
// the plan's (planner::verify_plan, as always) after plan, every kernel's IR rules
// (codegen::verify_ir) and the bundle read back from its files after generate. A failed check
// throws Error naming the pass and the rule. Guarantees: the passes run in the order above, each
// once; what is returned is what `fusetune compile` writes.
#pragma once

#include <filesystem>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "compiler/compile_bundle.h"
#include "compiler/verify_bundle.h"
#include "importer/importer.h"
#include "planner/device.h"
#include "planner/select.h"
#include "runtime/bundle.h"

namespace fusetune::compiler {

enum class Pass { kImport, kFold, kFuse, kPlan, kGenerate, kVerify };

// The passes in pipeline order, with their names ("import", "fold", ...).
const std::vector<std::pair<Pass, std::string>>& passes();
std::string pass_name(Pass pass);
// The passes `--dump-after` names: one pass, several separated by commas, or "all"; an unknown
// name is an Error listing the passes.
std::set<Pass> passes_named(const std::string& list);

struct PipelineOptions {
  importer::ImportOptions import;  // its fold_affines is the fold pass's business
  planner::PlanOptions plan;
  BundleVerifyOptions verify;
  std::set<Pass> dump_after;
  bool verify_each = false;
  std::function<void(Pass, const std::string& text)> dump;  // receives each dump (required with dump_after)
};

struct PipelineResult {
  importer::ImportedModel model;
  planner::ModelPlan plan;
  runtime::Bundle bundle;
  std::vector<CompiledLaunch> launches;
  BundleVerifyReport verified;
};

PipelineResult compile_model(const std::filesystem::path& model, const planner::Device& device,
                             const PipelineOptions& options);

// The text dumps: a graph (its inputs, nodes with their operands and results, outputs), the two
// fusions, a plan (a line per group: launch, pattern, chosen candidate, modeled time and DRAM
// bytes; the totals).
std::string graph_text(const Graph& g);
std::string fusion_text(const Graph& g, const std::vector<planner::FusionPlan>& levels);
std::string plan_text(const planner::ModelPlan& plan);

}  // namespace fusetune::compiler
