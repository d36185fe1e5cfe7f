// fusetune plan (its options: tools/command_table.cpp): fusion groups, kernel launches, each group's best modeled
// candidate, and modeled DRAM traffic against the unfused and minimum figures of `inspect`.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/model_stats.h"
#include "importer/importer.h"
#include "planner/device.h"
#include "planner/library_call.h"
#include "planner/select.h"
#include "tools/cli_args.h"
#include "tools/command_table.h"
#include "tools/commands.h"

namespace fusetune::cli {

int cmd_plan(const std::vector<std::string>& argv) {
  const CommandSpec& spec = command_spec("plan");
  const Args args = parse_args(spec, argv);
  check_usage(args.positional().size() == 1 && (args.has("device") || args.has("device-file")), spec);
  const std::string path = args.positional()[0];
  const planner::Device device =
      args.has("device-file") ? planner::load_device(args.get("device-file")) : planner::find_device(args.get("device"));
  importer::ImportOptions iopt;
  iopt.input_shapes = shape_overrides(args);
  const importer::ImportedModel m = importer::import_onnx(path, iopt);
  planner::PlanOptions popt;
  // --top-k is what is listed; the plan is compile's whatever K: each group keeps at least the
  // default number of candidates (fewer would let the library's displace the generated ones),
  // and more only lengthen the list below the same best one.
  const double shown = args.number("top-k", popt.tiling.top_k);
  check(shown >= 1 && shown <= 1e6 && shown == static_cast<int>(shown), "--top-k must be a whole number from 1 to 1000000, got ",
        args.get("top-k"));
  popt.tiling.top_k = std::max(popt.tiling.top_k, static_cast<int>(shown));
  popt.compare_with_parts = !args.has("keep-fused");
  popt.tiling.tf32 = planner::tf32_precision(args.get("precision", "model"));
  popt.tiling.libraries = planner::library_set(args.get("libraries", "all"));
  if (args.has("no-fusion")) {
    popt.fusion.epilogue = popt.fusion.prologue = popt.fusion.stitch = popt.fusion.pack = false;
  }
  const auto t0 = std::chrono::steady_clock::now();
  const planner::ModelPlan plan = planner::plan_model(m.graph, device, popt);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const ModelStats stats = compute_stats(m.graph);
  if (args.has("json")) {
    nlohmann::json groups = nlohmann::json::array();
    for (const auto& gp : plan.groups) {
      const auto& best = gp.candidates[gp.chosen];
      nlohmann::json cands = nlohmann::json::array();
      for (const auto& c : gp.candidates) {
        if (static_cast<double>(cands.size()) >= shown) break;
        cands.push_back({{"config", c.config.str()},
                         {"valid", c.cost.valid},
                         {"reject", c.cost.reject},
                         {"modeled_us", c.cost.modeled_us},
                         {"dram_bytes", c.cost.dram_bytes},
                         {"l2_bytes", c.cost.l2_bytes},
                         {"smem_bytes", c.cost.smem_bytes},
                         {"registers", c.cost.registers},
                         {"blocks", c.cost.tiles},
                         {"bytes_in_flight", c.cost.bytes_in_flight}});
      }
      nlohmann::json nodes = nlohmann::json::array();
      for (int n : gp.group.nodes) nodes.push_back(m.graph.nodes()[static_cast<size_t>(n)].name);
      groups.push_back({{"launch", gp.group.launch},
                        {"pattern", gp.group.pattern},
                        {"signature", gp.signature},
                        {"nodes", nodes},
                        {"best", best.config.str()},
                        {"modeled_us", gp.cost_us},
                        {"dram_bytes", best.cost.dram_bytes},
                        {"candidates", cands}});
    }
    std::cout << nlohmann::json{{"model", path},
                                {"device", device.name},
                                {"groups", groups},
                                {"group_count", plan.groups.size()},
                                {"launches", plan.launches},
                                {"unique_group_signatures", plan.unique_signatures},
                                {"split_groups", plan.split_groups},
                                {"modeled_us", plan.modeled_us},
                                {"dram_bytes_planned", plan.dram_bytes},
                                {"dram_bytes_unfused", stats.unfused_dram_bytes},
                                {"dram_bytes_minimum", stats.min_dram_bytes},
                                {"planning_seconds", seconds}}
                     .dump(2)
              << "\n";
    return 0;
  }
  std::printf("model: %s  device: %s (%s)\n", path.c_str(), device.name.c_str(), device.description.c_str());
  std::printf("%4s %6s  %-44s %5s  %-34s %12s %10s\n", "#", "launch", "pattern", "ops", "best candidate", "DRAM bytes",
              "model us");
  for (size_t k = 0; k < plan.groups.size(); ++k) {
    const auto& gp = plan.groups[k];
    const auto& best = gp.candidates[gp.chosen];
    std::string pattern = gp.group.pattern.size() > 44 ? gp.group.pattern.substr(0, 41) + "..." : gp.group.pattern;
    std::printf("%4zu %6d  %-44s %5zu  %-34s %12lld %10.2f%s\n", k, gp.group.launch, pattern.c_str(), gp.group.nodes.size(),
                best.cost.valid ? best.config.str().c_str() : ("REJECTED: " + best.cost.reject).c_str(),
                static_cast<long long>(best.cost.dram_bytes), gp.cost_us, gp.measured ? " (measured)" : "");
  }
  std::printf("groups: %zu  kernel launches: %d  unique group signatures: %zu  fused groups split back: %d\n",
              plan.groups.size(), plan.launches, plan.unique_signatures, plan.split_groups);
  std::printf("modeled DRAM traffic: %s  unfused: %s (%.2f of it)  minimum: %s\n",
              human_bytes(static_cast<double>(plan.dram_bytes)).c_str(),
              human_bytes(static_cast<double>(stats.unfused_dram_bytes)).c_str(),
              static_cast<double>(plan.dram_bytes) / static_cast<double>(std::max<int64_t>(1, stats.unfused_dram_bytes)),
              human_bytes(static_cast<double>(stats.min_dram_bytes)).c_str());
  std::printf("modeled time: %.1f us  planning took %.2f s\n", plan.modeled_us, seconds);
  return 0;
}

}  // namespace fusetune::cli
