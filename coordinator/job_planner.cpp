#include "coordinator/job_planner.h"

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>

#include "codegen/emit.h"
#include "codegen/lower_group.h"
#include "core/error.h"
#include "core/sha256.h"
#include "core/signature.h"
#include "importer/importer.h"
#include "proto/wire.h"

namespace fusetune::coordinator {

namespace fs = std::filesystem;
using nlohmann::json;

std::string JobOptions::to_json() const {
  json shapes_json = json::object();
  for (const auto& [name, shape] : shapes) shapes_json[name] = shape;
  return json{{"shapes", shapes_json},     {"candidates", candidates},   {"seed", seed},
              {"plan_device", plan_device}, {"warmup", warmup},           {"min_repeats", min_repeats},
              {"max_repeats", max_repeats}, {"min_time_ms", min_time_ms}, {"timeout_ms", timeout_ms}}
      .dump();
}

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
      } else {
        fail("unknown job option '", key, "'");
      }
    } catch (const json::exception& e) {
      fail("job option '", key, "': ", e.what());
    }
  }
  check(o.candidates >= 1 && o.candidates <= 64, "job option 'candidates' must be 1..64, not ", o.candidates);
  check(o.max_repeats >= o.min_repeats && o.min_repeats >= 1, "job options 'min_repeats'/'max_repeats' are inconsistent");
  check(o.timeout_ms >= 100, "job option 'timeout_ms' must be at least 100");
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
              {"failed_groups", failed_groups}}
      .dump();
}

std::string model_digest(const std::vector<wire::ModelFile>& files) {
  std::string all;
  for (const wire::ModelFile& f : files) all += sha256_hex(f.path()) + sha256_hex(f.data());
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

JobPlanner::JobPlanner(const std::vector<wire::ModelFile>& files, const std::string& model_name,
                       const std::string& device, const JobOptions& options)
    : s_(std::make_unique<State>()) {
  s_->model_name = model_name;
  s_->device = device;
  s_->options = options;
  s_->plan_device = planner::find_device(device == "host" ? options.plan_device : device);
  check(!files.empty(), model_name, ": the job has no model file");
  // The importer reads external data next to the model: lay the files out in a private directory.
  char tmpl[] = "/tmp/fusetune-job-XXXXXX";
  check(::mkdtemp(tmpl) != nullptr, "cannot create a directory for the model files");
  const fs::path dir = tmpl;
  struct Cleanup {
    fs::path dir;
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  } cleanup{dir};
  for (const wire::ModelFile& f : files) {
    const fs::path rel = fs::path(f.path()).lexically_normal();
    check(!rel.empty() && rel.is_relative() && *rel.begin() != "..", model_name, ": model file path '", f.path(),
          "' must stay inside the model's directory");
    fs::create_directories((dir / rel).parent_path());
    std::ofstream(dir / rel, std::ios::binary).write(f.data().data(), static_cast<std::streamsize>(f.data().size()));
  }
  importer::ImportOptions io;
  io.input_shapes = options.shapes;
  try {
    s_->graph = importer::import_onnx(dir / fs::path(files[0].path()).lexically_normal(), io).graph;
  } catch (const Error& e) {  // name the model as the client knows it, not the private copy
    std::string msg = e.what();
    const std::string tmp_prefix = dir.string() + "/";
    for (size_t at; (at = msg.find(tmp_prefix)) != std::string::npos;) msg.replace(at, tmp_prefix.size(), "");
    fail(model_name, ": ", msg);
  }
  s_->modeled = planner::plan_model(s_->graph, s_->plan_device);
}

JobPlanner::~JobPlanner() = default;

const Graph& JobPlanner::graph() const { return s_->graph; }
const planner::Device& JobPlanner::plan_device() const { return s_->plan_device; }
const planner::ModelPlan& JobPlanner::modeled() const { return s_->modeled; }

std::vector<TaskSpec> JobPlanner::tasks() const {
  std::vector<TaskSpec> out;
  const JobOptions& o = s_->options;
  for (const planner::GroupPlan& gp : s_->modeled.compared) {
    TaskSpec spec;
    spec.signature = gp.signature;
    spec.canonical_form = subgraph_signature(s_->graph, gp.group.nodes).canonical_form;
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
    // The candidates are lowered on the standalone sub-graph, exactly as the worker will see it.
    const Graph sub = wire::from_subgraph(t.graph());
    planner::FusionGroup all;
    all.nodes.resize(sub.nodes().size());
    std::iota(all.nodes.begin(), all.nodes.end(), 0);
    planner::describe_group(sub, all);
    for (const planner::Candidate& c : gp.candidates) {
      if (t.candidates_size() >= o.candidates) break;
      if (!c.cost.valid) continue;
      const std::string name = "c" + std::to_string(t.candidates_size());
      codegen::LoweredKernel lk;
      try {
        lk = codegen::lower_group(sub, all, c.config, name);
      } catch (const Error&) {
        continue;  // a candidate the code generator cannot express is not measured
      }
      wire::Candidate& w = *t.add_candidates();
      w.set_config(c.config.str());
      w.set_kernel(name);
      w.set_cuda_source(codegen::emit_cuda({lk.kernel}));
      w.set_grid(lk.kernel.grid);
      w.set_threads(lk.kernel.threads);
      w.set_shared_bytes(lk.kernel.shared_bytes);
      w.set_library(lk.kernel.library);
      w.set_source_digest(sha256_hex(w.cuda_source() + w.library()));
      for (size_t k = 0; k < lk.kernel.params.size(); ++k) {
        const codegen::Param& param = lk.kernel.params[k];
        wire::ParamSpec& ps = *w.add_params();
        ps.set_name(param.name);
        ps.set_dtype(dtype_to_onnx(param.dtype));
        ps.set_elements(param.elements);
        ps.set_output(param.output);
        ps.set_value(k < lk.inputs.size() ? lk.inputs[k] : lk.outputs[k - lk.inputs.size()]);
      }
    }
    out.push_back(std::move(spec));
  }
  return out;
}

planner::ModelPlan JobPlanner::final_plan(const planner::Measurements& measured) const {
  return planner::plan_model(s_->graph, s_->plan_device, {}, &measured);
}

runtime::Bundle JobPlanner::bundle(const planner::ModelPlan& plan) const {
  return runtime::compile_bundle(s_->graph, plan, s_->plan_device, s_->model_name);
}

JobSummary JobPlanner::summary(const planner::ModelPlan& plan) const {
  JobSummary s;
  s.groups = plan.groups.size();
  s.launches = plan.launches;
  s.split_groups = plan.split_groups;
  s.failed_groups = plan.failed_groups;
  for (const planner::GroupPlan& gp : plan.groups) s.tuned_us += gp.measured ? gp.cost_us : NAN;
  std::map<std::string, const planner::GroupPlan*> by_signature;
  for (const planner::GroupPlan& gp : plan.compared) by_signature[gp.signature] = &gp;
  for (size_t n = 0; n < s_->graph.nodes().size(); ++n) {
    auto it = by_signature.find(node_signature(s_->graph, static_cast<int>(n)).digest);
    s.unfused_us += it != by_signature.end() && it->second->measured ? it->second->cost_us : NAN;
  }
  return s;
}

}  // namespace fusetune::coordinator
