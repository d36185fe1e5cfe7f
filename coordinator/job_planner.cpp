#include "coordinator/job_planner.h"


#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "codegen/emit.h"
#include "codegen/lower_group.h"
#include "core/error.h"
#include "core/parallel.h"
#include "core/sha256.h"
#include "core/signature.h"
#include "importer/importer.h"
#include "planner/in_place.h"
#include "planner/library_call.h"
#include "proto/wire.h"

namespace fusetune::coordinator {

namespace fs = std::filesystem;
using nlohmann::json;

std::string JobOptions::to_json() const {
  json shapes_json = json::object();
  for (const auto& [name, shape] : shapes) shapes_json[name] = shape;
  return json{{"shapes", shapes_json},     {"candidates", candidates},   {"seed", seed},
              {"plan_device", plan_device}, {"warmup", warmup},           {"min_repeats", min_repeats},
              {"max_repeats", max_repeats}, {"min_time_ms", min_time_ms}, {"timeout_ms", timeout_ms},
              {"trials", trials},           {"time_s", time_s},           {"precision", precision},
              {"libraries", libraries}}
      .dump();
}

namespace {

// A job option's value once `check` accepts it; its refusal, named after the option, otherwise.
std::string validated(const std::string& key, const std::string& value, const std::function<void(const std::string&)>& check) {
  try {
    check(value);
  } catch (const Error& e) {
    fail("job option '", key, "': ", e.what());
  }
  return value;
}

}  // namespace

JobOptions JobOptions::from_json(const std::string& text) {
  JobOptions o;
  if (text.empty()) return o;
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    fail("job options are not JSON: ", e.what());
  }
  check(j.is_object(), "job options must be a JSON object");
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& key = it.key();
    try {
      if (key == "shapes") {
        for (auto s = it->begin(); s != it->end(); ++s) o.shapes[s.key()] = s->get<Shape>();
      } else if (key == "candidates") {
        o.candidates = it->get<int>();
      } else if (key == "seed") {
        o.seed = it->get<uint64_t>();
      } else if (key == "plan_device") {
        o.plan_device = it->get<std::string>();
      } else if (key == "warmup") {
        o.warmup = it->get<int>();
      } else if (key == "min_repeats") {
        o.min_repeats = it->get<int>();
      } else if (key == "max_repeats") {
        o.max_repeats = it->get<int>();
      } else if (key == "min_time_ms") {
        o.min_time_ms = it->get<double>();
      } else if (key == "timeout_ms") {
        o.timeout_ms = it->get<int>();
      } else if (key == "trials") {
        o.trials = it->get<int>();
      } else if (key == "time_s") {
        o.time_s = it->get<double>();
      } else if (key == "precision") {
        o.precision = validated(key, it->get<std::string>(), [](const std::string& p) { planner::tf32_precision(p); });
      } else if (key == "libraries") {
        o.libraries = validated(key, it->get<std::string>(), [](const std::string& l) { planner::library_set(l); });
      } else {
        fail("unknown job option '", key, "'");
      }
    } catch (const json::exception& e) {
      fail("job option '", key, "': ", e.what());
    }
  }
  // The documented ranges (docs/protocol.md, "Job options"): a job cannot ask for a lease due in
  // days, a candidate run for hours, or a shape that no GPU holds.
  auto within = [](const char* key, double v, double lo, double hi) {
    std::ostringstream why;
    why << std::setprecision(15) << "job option '" << key << "' must be from " << lo << " to " << hi << ", not " << v;
    check(v >= lo && v <= hi, why.str());
  };
  within("candidates", o.candidates, 1, 64);
  within("warmup", o.warmup, 0, 100);
  within("min_repeats", o.min_repeats, 1, 1'000'000);
  within("max_repeats", o.max_repeats, 1, 1'000'000);
  check(o.max_repeats >= o.min_repeats, "job options 'min_repeats' (", o.min_repeats, ") and 'max_repeats' (", o.max_repeats,
        ") are inconsistent");
  within("min_time_ms", o.min_time_ms, 0, 600'000);  // timeout_ms ends a candidate's runs sooner
  within("timeout_ms", o.timeout_ms, 100, 120'000);
  within("trials", o.trials, 0, 1'000'000);
  within("time_s", o.time_s, 0, 7 * 24 * 3600);
  for (const auto& [name, shape] : o.shapes) {
    double elements = 1;
    for (const int64_t d : shape) {
      check(d >= 0 && d <= (int64_t{1} << 31), "job option 'shapes': input '", name.substr(0, 64), "' has a dimension of ", d);
      elements *= static_cast<double>(d);
    }
    check(elements <= std::ldexp(1.0, 34), "job option 'shapes': input '", name.substr(0, 64), "' has ", elements,
          " elements, over 2^34");
  }
  return o;
}

std::string JobSummary::to_json() const {
  auto num = [](double v) { return std::isfinite(v) ? json(v) : json(nullptr); };
  return json{{"groups", groups},
              {"launches", launches},
              {"tasks", tasks},
              {"cache_hits", cache_hits},
              {"candidates_measured", candidates_measured},
              {"tuned_us", num(tuned_us)},
              {"unfused_us", num(unfused_us)},
              {"split_groups", split_groups},
              {"interleaved_pairs", interleaved_pairs},
              {"failed_groups", failed_groups},
              {"library_groups", library_groups},
              {"search_rounds", search_rounds},
              {"convergence", convergence},
              {"group_convergence", group_convergence},
              {"group_details", group_details}}
      .dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string model_digest(const fs::path& dir, const std::vector<std::string>& paths) {
  std::string all;
  std::string piece(size_t{8} << 20, '\0');
  for (const std::string& p : paths) {
    std::ifstream in(dir / p, std::ios::binary);
    check(in.is_open(), (dir / p).string(), ": cannot read the model file");
    Sha256 data;
    while (in) {
      in.read(piece.data(), static_cast<std::streamsize>(piece.size()));
      data.update(std::string_view(piece.data(), static_cast<size_t>(in.gcount())));
    }
    check(in.eof(), (dir / p).string(), ": reading the model file failed");
    all += sha256_hex(p) + data.hex();
  }
  return sha256_hex(all);
}

struct JobPlanner::State {
  std::string model_name;
  std::string device;
  JobOptions options;
  Graph graph;
  planner::Device plan_device;
  planner::ModelPlan modeled;
};

JobPlanner::JobPlanner(const fs::path& onnx, const std::string& model_name, const std::string& device,
                       const JobOptions& options)
    : s_(std::make_unique<State>()) {
  s_->model_name = model_name;
  s_->device = device;
  s_->options = options;
  s_->plan_device = planner::find_device(device == "host" ? options.plan_device : device);
  importer::ImportOptions io;
  io.input_shapes = options.shapes;
  try {
    s_->graph = importer::import_onnx(onnx, io).graph;
  } catch (const Error& e) {  // name the model as the client knows it, not where it is stored
    std::string msg = e.what();
    const std::string dir_prefix = onnx.parent_path().string() + "/";
    for (size_t at; (at = msg.find(dir_prefix)) != std::string::npos;) msg.replace(at, dir_prefix.size(), "");
    fail(model_name, ": ", msg);
  }
  s_->modeled = planner::plan_model(s_->graph, s_->plan_device, search_plan_options(s_->options));
}

JobPlanner::~JobPlanner() = default;

const Graph& JobPlanner::graph() const { return s_->graph; }
const planner::Device& JobPlanner::plan_device() const { return s_->plan_device; }
const planner::ModelPlan& JobPlanner::modeled() const { return s_->modeled; }
const JobOptions& JobPlanner::options() const { return s_->options; }
const std::string& JobPlanner::model_name() const { return s_->model_name; }

namespace {

// A group as the worker sees it: a standalone sub-graph of its nodes and constants, and the group
// of all its nodes.
struct Standalone {
  Graph graph;
  planner::FusionGroup all;
};

Standalone standalone(const wire::Subgraph& sub) {
  Standalone s{wire::from_subgraph(sub), {}};
  s.all = planner::whole_graph_group(s.graph);
  return s;
}

// The kernel a task measures for a candidate, and its source digest: of its CUDA code (the kernel
// named "candidate", so that the digest does not depend on the candidate's place in the task;
// comments, which name the model's nodes, left out, so that every group of one signature has
// one digest) and its library call. Throws Error for a candidate the code generator cannot express.
std::pair<codegen::LoweredKernel, std::string> measured_kernel(const Standalone& s, const planner::TileConfig& cfg) {
  codegen::LoweredKernel lk = codegen::lower_group(s.graph, s.all, cfg, "candidate");
  std::string code;
  std::istringstream text(codegen::emit_cuda({lk.kernel}));
  for (std::string line; std::getline(text, line);) code += line.substr(0, line.find("//")) + "\n";
  std::string digest = sha256_hex(code + lk.kernel.library);
  return {std::move(lk), std::move(digest)};
}

// Lowers one candidate on the standalone sub-graph and appends it to the task (named "c<index>");
// false, adding nothing, for a configuration the code generator cannot express.
bool add_candidate(const Standalone& sub, const planner::TileConfig& cfg, wire::Task& t) {
  std::pair<codegen::LoweredKernel, std::string> m;
  try {
    m = measured_kernel(sub, cfg);
  } catch (const Error&) {
    return false;
  }
  auto& [lk, digest] = m;
  lk.kernel.name = "c" + std::to_string(t.candidates_size());
  wire::Candidate& w = *t.add_candidates();
  w = wire_candidate(lk, cfg);
  w.set_source_digest(digest);
  return true;
}

}  // namespace

wire::Candidate wire_candidate(const codegen::LoweredKernel& lk, const planner::TileConfig& cfg) {
  wire::Candidate w;
  w.set_config(cfg.str());
  w.set_kernel(lk.kernel.name);
  w.set_cuda_source(codegen::emit_cuda({lk.kernel}));
  w.set_grid(lk.kernel.grid);
  w.set_threads(lk.kernel.threads);
  w.set_shared_bytes(lk.kernel.shared_bytes);
  w.set_library(lk.kernel.library);
  for (size_t k = 0; k < lk.kernel.params.size(); ++k) {
    const codegen::Param& param = lk.kernel.params[k];
    wire::ParamSpec& ps = *w.add_params();
    ps.set_name(param.name);
    ps.set_dtype(dtype_to_onnx(param.dtype));
    ps.set_elements(param.elements);
    ps.set_output(param.output);
    ps.set_value(k < lk.inputs.size() ? lk.inputs[k] : lk.outputs[k - lk.inputs.size()]);
    if (k >= lk.inputs.size() && k - lk.inputs.size() < lk.in_place.size()) ps.set_updates_input(lk.in_place[k - lk.inputs.size()] + 1);
  }
  return w;
}

planner::PlanOptions search_plan_options(const JobOptions& options) {
  planner::PlanOptions o;
  o.tiling.top_k = kSearchSpace;
  o.tiling.tf32 = planner::tf32_precision(options.precision);
  o.tiling.libraries = planner::library_set(options.libraries);
  return o;
}

std::vector<TaskSpec> JobPlanner::tasks() const {
  const JobOptions& o = s_->options;
  const std::vector<planner::GroupPlan>& groups = s_->modeled.compared;
  std::vector<TaskSpec> out(groups.size());
  parallel_for(groups.size(), [&](size_t k) {  // groups are lowered independently, on every core
    const planner::GroupPlan& gp = groups[k];
    TaskSpec& spec = out[k];
    spec.signature = gp.signature;
    spec.canonical_form = planner::group_signature(s_->graph, gp.group, gp.in_place).canonical_form;
    spec.pattern = gp.group.pattern;
    wire::Task& t = spec.task;
    t.set_signature(gp.signature);
    t.set_arch(s_->device == "host" ? "host" : s_->plan_device.arch);
    *t.mutable_graph() = wire::to_subgraph(s_->graph, gp.group);
    wire::Policy& p = *t.mutable_policy();
    p.set_seed(o.seed);
    p.set_warmup(o.warmup);
    p.set_min_repeats(o.min_repeats);
    p.set_max_repeats(o.max_repeats);
    p.set_min_time_ms(o.min_time_ms);
    p.set_timeout_ms(o.timeout_ms);
    p.set_flush_l2(true);
    // The candidates are lowered on the standalone sub-graph, exactly as the worker will see it:
    // the `candidates` best modeled ones, and a library call wherever it ranks (it is the baseline
    // a generated kernel has to beat, so it is always measured).
    const Standalone sub = standalone(t.graph());
    int generated = 0;
    for (const planner::Candidate& c : gp.candidates) {
      const bool library = !c.config.library.empty();
      if (!c.cost.valid || (!library && generated >= o.candidates)) continue;
      if (add_candidate(sub, c.config, t) && !library) ++generated;
    }
  });
  return out;
}

std::vector<wire::Candidate> JobPlanner::lower(const wire::Task& task, const std::vector<planner::TileConfig>& configs) const {
  const Standalone sub = standalone(task.graph());
  wire::Task t;
  for (const planner::TileConfig& c : configs) add_candidate(sub, c, t);
  return {t.candidates().begin(), t.candidates().end()};
}

const planner::GroupPlan& JobPlanner::group(const std::string& signature) const {
  for (const planner::GroupPlan& gp : s_->modeled.compared) {
    if (gp.signature == signature) return gp;
  }
  fail("no group of signature ", signature, " in ", s_->model_name);
}

planner::ModelPlan JobPlanner::final_plan(const planner::Measurements& measured) const {
  return planner::plan_model(s_->graph, s_->plan_device, search_plan_options(s_->options), &measured);
}

runtime::Bundle JobPlanner::bundle(const planner::ModelPlan& plan, const MeasuredDigests& measured) const {
  auto name = [&](size_t k) {
    return "group " + std::to_string(k) + " (" + plan.groups[k].group.pattern + ")";
  };
  for (size_t k = 0; k < plan.groups.size(); ++k) {
    const planner::GroupPlan& gp = plan.groups[k];
    check(gp.measured, "export refused: ", name(k), " was never measured; a bundle ships measured kernels only");
    check(!gp.failed, "export refused: every measured candidate of ", name(k),
          " failed (see `fusetune status`); no kernel of it was measured to work");
  }
  // Every kernel shipped is the one whose measurement chose it: the same source, checked before
  // anything is compiled (once per signature and configuration: a model's repeated layers share
  // it), and the same configuration, which as_measured keeps.
  std::map<std::pair<std::string, std::string>, std::string> generated;
  for (size_t k = 0; k < plan.groups.size(); ++k) {
    const planner::GroupPlan& gp = plan.groups[k];
    const std::string chosen = gp.candidates[gp.chosen].config.str();
    auto it = measured.find({gp.signature, chosen});
    check(it != measured.end(), "export refused: ", name(k), ": no successful measurement of ", chosen, " is on record");
    auto [g, fresh] = generated.try_emplace({gp.signature, chosen});
    if (fresh) {
      g->second =
          measured_kernel(standalone(wire::to_subgraph(s_->graph, gp.group)), gp.candidates[gp.chosen].config).second;
    }
    const std::string& now = g->second;
    check(now == it->second, "export refused: ", name(k), ": the kernel of ", chosen, " generated now (source ",
          now.substr(0, 12), ") is not the one measured (", it->second.substr(0, 12), "); re-measure it (resubmit the job)");
  }
  compiler::BundleOptions options;
  options.as_measured = true;
  runtime::Bundle b = compiler::compile_bundle(s_->graph, plan, s_->plan_device, s_->model_name, options);
  for (size_t k = 0; k < plan.groups.size(); ++k) {
    const std::string chosen = plan.groups[k].candidates[plan.groups[k].chosen].config.str();
    check(b.group_configs[k] == chosen, "export refused: ", name(k), " would ship configuration ", b.group_configs[k],
          " but its measurements chose ", chosen);
  }
  return b;
}

JobSummary JobPlanner::summary(const planner::ModelPlan& plan, const planner::Measurements* measured) const {
  JobSummary s;
  s.groups = plan.groups.size();
  s.launches = plan.launches;
  s.split_groups = plan.split_groups;
  s.failed_groups = plan.failed_groups;
  for (const planner::GroupPlan& gp : plan.groups) {
    s.tuned_us += gp.measured ? gp.cost_us : NAN;
    const std::string& library = gp.candidates[gp.chosen].config.library;
    if (!library.empty()) ++s.library_groups[library];
  }
  std::map<std::string, const planner::GroupPlan*> by_signature;
  for (const planner::GroupPlan& gp : plan.compared) by_signature[gp.signature] = &gp;
  // A node planned alone (a lone ScatterND's signature says whether it may update in place).
  const planner::InPlaceUpdates in_place(s_->graph);
  const auto alone = [&](int n) {
    planner::FusionGroup one;
    one.nodes = {n};
    return by_signature.find(planner::group_signature(s_->graph, one, in_place.eligible(one)).digest);
  };
  for (size_t n = 0; n < s_->graph.nodes().size(); ++n) {
    auto it = alone(static_cast<int>(n));
    s.unfused_us += it != by_signature.end() && it->second->measured ? it->second->cost_us : NAN;
  }
  if (measured == nullptr) return s;
  std::map<std::string, std::string> chosen;  // signature -> the chosen candidate's config
  for (const planner::GroupPlan& gp : plan.groups) chosen[gp.signature] = gp.candidates[gp.chosen].config.str();
  for (const planner::GroupPlan& gp : plan.compared) {
    json candidates = json::array();
    for (const planner::Candidate& c : gp.candidates) {
      const auto m = measured->find({gp.signature, c.config.str()});
      if (m != measured->end() && std::isfinite(m->second)) candidates.push_back({c.cost.modeled_us, m->second});
    }
    json d = {{"signature", gp.signature},
              {"pattern", gp.group.pattern},
              {"nodes", gp.group.nodes.size()},
              {"chosen", chosen.count(gp.signature) > 0},
              {"candidates", candidates}};
    if (chosen.count(gp.signature)) d["config"] = chosen[gp.signature];
    if (gp.group.nodes.size() > 1) {
      double parts = 0;
      for (int n : gp.group.nodes) {
        const auto it = alone(n);
        parts += it != by_signature.end() && it->second->measured ? it->second->cost_us : NAN;
      }
      d["parts_us"] = std::isfinite(parts) ? json(parts) : json(nullptr);
      d["fused_us"] = gp.measured ? json(gp.cost_us) : json(nullptr);
    }
    s.group_details.push_back(std::move(d));
  }
  return s;
}

}  // namespace fusetune::coordinator
