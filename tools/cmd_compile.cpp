// fusetune compile MODEL.onnx --device NAME|--device-file PATH --out DIR [--shape NAME=DxD...]
// [--dump-ir]: plans the model with modeled costs (an untuned plan: the top candidate per group),
// generates its kernels and writes the plan bundle (docs/plan-format.md). --dump-ir also prints
// the Kernel IR (codegen::to_text) of every kernel of the bundle, in launch order.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "codegen/emit.h"
#include "codegen/kernel_ir.h"
#include "codegen/lower_group.h"
#include "core/error.h"
#include "importer/importer.h"
#include "planner/device.h"
#include "planner/select.h"
#include "runtime/bundle.h"
#include "tools/cli_args.h"
#include "tools/commands.h"

namespace fusetune::cli {

namespace {

// The kernels of a bundle compiled from `plan`, lowered again as compile_bundle lowers them: one
// per launch entry of the manifest, its groups (the plan's groups with that launch id, in plan
// order) with the candidates the manifest names and the launch's thread count, packed. Their CUDA
// form must be the bundle's, so what --dump-ir prints is what the bundle runs.
std::vector<codegen::Kernel> bundle_kernels(const Graph& g, const planner::ModelPlan& plan, const runtime::Bundle& bundle) {
  std::vector<std::vector<size_t>> launch_groups;
  std::map<int, size_t> launch_index;
  for (size_t k = 0; k < plan.groups.size(); ++k) {
    auto [it, fresh] = launch_index.emplace(plan.groups[k].group.launch, launch_groups.size());
    if (fresh) launch_groups.emplace_back();
    launch_groups[it->second].push_back(k);
  }
  const nlohmann::json launches = nlohmann::json::parse(bundle.manifest).at("launches");
  check(launches.size() == launch_groups.size(), "--dump-ir: the bundle has ", launches.size(), " launches, the plan ",
        launch_groups.size());
  std::vector<codegen::Kernel> kernels;
  for (size_t l = 0; l < launch_groups.size(); ++l) {
    const nlohmann::json& entry = launches[l];
    const std::string name = entry.at("kernel").get<std::string>();
    const nlohmann::json& groups = entry.at("groups");
    check(groups.size() == launch_groups[l].size(), "--dump-ir: launch ", name, " has ", groups.size(), " groups, the plan ",
          launch_groups[l].size());
    std::vector<codegen::LoweredKernel> parts;
    int64_t base = 0;
    for (size_t j = 0; j < launch_groups[l].size(); ++j) {
      const planner::GroupPlan& gp = plan.groups[launch_groups[l][j]];
      const std::string config = groups[j].at("config").get<std::string>();
      const planner::Candidate* chosen = nullptr;
      for (const planner::Candidate& c : gp.candidates) {
        if (c.config.str() == config) chosen = &c;
      }
      check(chosen != nullptr, "--dump-ir: launch ", name, " runs ", gp.group.pattern, " as '", config,
            "', not a candidate of the plan");
      planner::TileConfig cfg = chosen->config;
      cfg.threads = entry.at("threads").get<int>();
      codegen::LowerOptions lo;
      if (launch_groups[l].size() > 1) lo.param_prefix = "p" + std::to_string(j) + "_";
      lo.block_base = base;
      parts.push_back(codegen::lower_group(g, gp.group, cfg, name, lo));
      base += parts.back().kernel.grid;
    }
    kernels.push_back(codegen::pack_kernels(parts, name).kernel);
  }
  check(codegen::emit_cuda(kernels) == bundle.cuda_source, "--dump-ir: the kernels lowered again differ from the bundle's");
  return kernels;
}

}  // namespace

int cmd_compile(const std::vector<std::string>& argv) {
  const Args args(argv, {"device", "device-file", "shape", "out"}, {"dump-ir"});
  check(args.positional().size() == 1 && args.has("out") && (args.has("device") || args.has("device-file")),
        "usage: fusetune compile MODEL.onnx --device NAME|--device-file PATH --out DIR [--shape NAME=DxD...] [--dump-ir]");
  const std::filesystem::path model = args.positional()[0];
  const planner::Device device =
      args.has("device-file") ? planner::load_device(args.get("device-file")) : planner::find_device(args.get("device"));
  importer::ImportOptions opt;
  opt.input_shapes = shape_overrides(args);
  const auto t0 = std::chrono::steady_clock::now();
  const importer::ImportedModel m = importer::import_onnx(model, opt);
  const planner::ModelPlan plan = planner::plan_model(m.graph, device);
  const runtime::Bundle bundle = runtime::compile_bundle(m.graph, plan, device, model.filename().string());
  runtime::write_bundle(bundle, args.get("out"));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (args.has("dump-ir")) {
    for (const codegen::Kernel& k : bundle_kernels(m.graph, plan, bundle)) {
      std::fputs((codegen::to_text(k) + "\n").c_str(), stdout);
    }
  }
  std::printf("%s: %zu fusion groups in %d kernels for %s (%s), cubin %s, bundle written to %s in %.2fs\n",
              model.string().c_str(), plan.groups.size(), plan.launches, device.name.c_str(), device.arch.c_str(),
              bundle.cubins.count(device.arch) ? "compiled" : "not compiled (no NVRTC)", args.get("out").c_str(), s);
  return 0;
}

}  // namespace fusetune::cli
