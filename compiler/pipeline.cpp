#include "compiler/pipeline.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "codegen/kernel_ir.h"
#include "codegen/verify_ir.h"
#include "core/error.h"
#include "planner/verify_plan.h"

namespace fusetune::compiler {

namespace {

std::string value_text(const Graph& g, int v) {
  if (v == kNoValue) return "-";
  const Value& value = g.value(v);
  return "%" + std::to_string(v) + " '" + value.name + "'";
}

std::string typed(const Graph& g, int v) {
  const Value& value = g.value(v);
  return value_text(g, v) + " " + std::string(dtype_name(value.dtype)) + " " + shape_str(value.shape);
}

// Runs `check`, naming the pass in what it throws.
template <typename F>
void checked(Pass pass, F&& check) {
  try {
    check();
  } catch (const Error& e) {
    fail("--verify-each: after ", pass_name(pass), ": ", e.what());
  }
}

// "  when c, not d": the guards of a node or group (core/graph.h), "" for none.
std::string guards_text(const Graph& g, const std::vector<Guard>& guards) {
  std::string out;
  for (const Guard& gd : guards) out += (out.empty() ? "  when " : ", ") + std::string(gd.when ? "" : "not ") + value_text(g, gd.cond);
  return out;
}

}  // namespace

const std::vector<std::pair<Pass, std::string>>& passes() {
  static const std::vector<std::pair<Pass, std::string>> all = {
      {Pass::kImport, "import"}, {Pass::kFold, "fold"},         {Pass::kFuse, "fuse"},
      {Pass::kPlan, "plan"},     {Pass::kGenerate, "generate"}, {Pass::kVerify, "verify"}};
  return all;
}

std::string pass_name(Pass pass) {
  for (const auto& [p, name] : passes()) {
    if (p == pass) return name;
  }
  return "?";
}

std::set<Pass> passes_named(const std::string& list) {
  std::set<Pass> out;
  std::string known;
  for (const auto& [p, name] : passes()) known += (known.empty() ? "" : ", ") + name;
  check(!list.empty(), "--dump-after: name a pass (", known, ") or all");
  for (size_t start = 0; start <= list.size();) {
    const size_t comma = std::min(list.find(',', start), list.size());
    const std::string item = list.substr(start, comma - start);
    start = comma + 1;
    if (item == "all") {
      for (const auto& [p, name] : passes()) out.insert(p);
      continue;
    }
    bool found = false;
    for (const auto& [p, name] : passes()) {
      if (name == item) {
        out.insert(p);
        found = true;
      }
    }
    check(found, "--dump-after '", item, "': no such pass (the passes: ", known, ", or all)");
  }
  return out;
}

std::string graph_text(const Graph& g) {
  std::ostringstream out;
  out << "graph: " << g.nodes().size() << " nodes, " << g.values().size() << " values\n";
  for (int v : g.inputs()) out << "  input  " << typed(g, v) << "\n";
  for (size_t n = 0; n < g.nodes().size(); ++n) {
    const Node& node = g.nodes()[n];
    out << "  n" << n << " " << node.op << " '" << node.name << "' (";
    for (size_t i = 0; i < node.inputs.size(); ++i) out << (i ? ", " : "") << value_text(g, node.inputs[i]);
    out << ") -> ";
    for (size_t i = 0; i < node.outputs.size(); ++i) {
      out << (i ? ", " : "") << (node.outputs[i] == kNoValue ? "-" : typed(g, node.outputs[i]));
    }
    if (!node.attrs.all().empty()) out << "  [" << node.attrs.all().size() << " attributes]";
    out << guards_text(g, node.guards) << "\n";
  }
  for (int v : g.outputs()) out << "  output " << typed(g, v) << "\n";
  return out.str();
}

std::string fusion_text(const Graph& g, const std::vector<planner::FusionPlan>& levels) {
  std::ostringstream out;
  for (size_t l = 0; l < levels.size(); ++l) {
    out << (l == 0 ? "fusion" : "parts (no stitching, no packing)") << ": " << levels[l].groups.size() << " groups in "
        << levels[l].launches() << " launches\n";
    for (size_t k = 0; k < levels[l].groups.size(); ++k) {
      const planner::FusionGroup& fg = levels[l].groups[k];
      out << "  group " << k << " launch " << fg.launch << " " << fg.pattern << ": nodes";
      for (int n : fg.nodes) out << " n" << n;
      out << "; reads";
      for (int v : fg.inputs) out << " " << value_text(g, v);
      out << "; writes";
      for (int v : fg.outputs) out << " " << value_text(g, v);
      out << guards_text(g, fg.guards) << "\n";
    }
  }
  return out.str();
}

std::string plan_text(const planner::ModelPlan& plan) {
  std::ostringstream out;
  char line[512];
  for (size_t k = 0; k < plan.groups.size(); ++k) {
    const planner::GroupPlan& gp = plan.groups[k];
    const planner::Candidate& c = gp.candidates[gp.chosen];
    std::snprintf(line, sizeof line, "  group %zu launch %d %s: %s, %zu candidates, modeled %.2f us, DRAM %lld bytes%s\n", k,
                  gp.group.launch, gp.group.pattern.c_str(), c.config.str().c_str(), gp.candidates.size(), gp.modeled_us,
                  static_cast<long long>(c.cost.dram_bytes), gp.measured ? " (measured)" : "");
    out << line;
  }
  std::snprintf(line, sizeof line, "plan: %zu groups in %d launches, modeled %.1f us, DRAM %lld bytes, %d fused groups split back\n",
                plan.groups.size(), plan.launches, plan.modeled_us, static_cast<long long>(plan.dram_bytes), plan.split_groups);
  out << line;
  return out.str();
}

PipelineResult compile_model(const std::filesystem::path& model, const planner::Device& device,
                             const PipelineOptions& options) {
  check(options.dump_after.empty() || options.dump, "compile_model: dumps asked for without a place to put them");
  const auto after = [&](Pass pass, const std::function<std::string()>& text) {
    if (options.dump_after.count(pass)) options.dump(pass, text());
  };
  PipelineResult r;
  importer::ImportOptions import = options.import;
  import.fold_affines = false;
  r.model = importer::import_onnx(model, import);
  Graph& g = r.model.graph;
  if (options.verify_each) checked(Pass::kImport, [&] { g.validate(); });
  after(Pass::kImport, [&] { return graph_text(g); });

  importer::fold_layout_and_affines(g);
  if (options.verify_each) checked(Pass::kFold, [&] { g.validate(); });
  after(Pass::kFold, [&] { return graph_text(g); });

  planner::ModelPlanner planner(g, device, options.plan);
  const std::vector<planner::FusionPlan> levels = planner.partition();
  if (options.verify_each) {
    checked(Pass::kFuse, [&] {
      for (const planner::FusionPlan& level : levels) planner::verify_fusion(g, level);
    });
  }
  after(Pass::kFuse, [&] { return fusion_text(g, levels); });

  r.plan = planner.plan(levels);  // verify_plan runs inside, always
  after(Pass::kPlan, [&] { return plan_text(r.plan); });

  r.bundle = compile_bundle(g, r.plan, device, model.filename().string(), {}, &r.launches);
  if (options.verify_each) {
    checked(Pass::kGenerate, [&] {
      for (const CompiledLaunch& l : r.launches) codegen::verify_ir(l.lowered.kernel);
      const std::filesystem::path dir =
          std::filesystem::temp_directory_path() / ("fusetune_verify_each_" + std::to_string(::getpid()));
      runtime::write_bundle(r.bundle, dir);
      runtime::Bundle back;
      try {
        back = runtime::read_bundle(dir);
      } catch (...) {
        std::filesystem::remove_all(dir);
        throw;
      }
      std::filesystem::remove_all(dir);
      check(back.manifest == r.bundle.manifest && back.cuda_source == r.bundle.cuda_source &&
                back.constants == r.bundle.constants && back.cubins == r.bundle.cubins && back.ptx == r.bundle.ptx,
            "the bundle read back from its files differs from the one written");
    });
  }
  after(Pass::kGenerate, [&] {
    std::string text;
    for (const CompiledLaunch& l : r.launches) text += codegen::to_text(l.lowered.kernel) + "\n";
    for (const auto& [name, data] : runtime::bundle_files(r.bundle)) text += "file " + name + ": " + std::to_string(data.size()) + " bytes\n";
    return text;
  });

  r.verified = verify_bundle(g, r.plan, r.bundle, r.launches, options.verify);
  after(Pass::kVerify, [&] {
    return std::to_string(r.verified.kernels) + " kernels verified on the host for " + std::to_string(r.verified.launches) +
           " launches, " + std::to_string(r.verified.sampled) + " of them on a sample of their blocks\n";
  });
  return r;
}

}  // namespace fusetune::compiler
