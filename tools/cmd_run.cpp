// fusetune run (its options: tools/command_table.cpp): runs a model on the reference interpreter, or a plan bundle
// (fusetune compile) on the GPU or the host, on test data in the ONNX layout; writes the outputs
// and compares them with DIR's output_N.pb where present (a plan compiled with --precision tf32:
// float32 outputs under reference::tf32_tolerance).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "core/files.h"
#include "importer/importer.h"
#include "importer/test_data.h"
#include "reference/compare.h"
#include "reference/interpreter.h"
#include "runtime/plan_runner.h"
#include "tools/cli_args.h"
#include "tools/command_table.h"
#include "tools/commands.h"
#include "tools/progress.h"

namespace fusetune::cli {

namespace fs = std::filesystem;

namespace {

struct Ran {
  std::vector<Tensor> outputs;
  std::vector<std::string> names;
  bool tf32 = false;  // a plan compiled under the TF32 precision policy: float32 outputs at its tolerance
};

// The model's outputs of a run: those of data-dependent size cut to their counts, which are
// left out (trim_to_counts), and their names.
void keep_model_outputs(Ran& r, const std::vector<OutputExtent>& extents) {
  std::vector<std::string> names;
  for (size_t k = 0; k < r.names.size(); ++k) {
    if (std::none_of(extents.begin(), extents.end(), [&](const OutputExtent& e) { return e.count_output == static_cast<int>(k); })) {
      names.push_back(r.names[k]);
    }
  }
  r.outputs = trim_to_counts(r.outputs, extents);
  r.names = std::move(names);
}

Ran run_model(const fs::path& model, const std::vector<std::string>& input_names, const importer::TestData& data,
              const Args& args) {
  importer::ImportOptions opt;
  const std::vector<Tensor> inputs = importer::bind_inputs(input_names, data, &opt);
  for (const auto& [name, shape] : shape_overrides(args)) opt.input_shapes[name] = shape;
  const auto t0 = std::chrono::steady_clock::now();
  const importer::ImportedModel m = importer::import_onnx(model, opt);
  const auto t1 = std::chrono::steady_clock::now();
  Ran r;
  {
    ProgressLine progress("running");
    r.outputs = reference::run_graph(m.graph, inputs, [&](size_t done, size_t total) { progress.update(done, total); });
  }
  const auto t2 = std::chrono::steady_clock::now();
  for (int o : m.graph.outputs()) r.names.push_back(m.graph.value(o).name);
  keep_model_outputs(r, m.graph.output_extents());
  std::printf("%s: imported in %.2fs (%zu canonical nodes), ran in %.2fs on the reference interpreter\n",
              model.string().c_str(), std::chrono::duration<double>(t1 - t0).count(), m.graph.nodes().size(),
              std::chrono::duration<double>(t2 - t1).count());
  return r;
}

// Each launch timed alone beside the cost model's time for its groups (the manifest's
// modeled_us, summed over a packed launch's parts), slowest first, and the sums: where a plan's
// time goes and how far the model was from it. Measured and modeled stay in their own columns.
// Beside them the bytes of the launch's arguments (the manifest's buffers, each once: counted)
// and those bytes over the measured time: the bandwidth the launch reached if it touched each
// argument once, which for a memory-bound kernel is its effective bandwidth (issue 27's 80% of a
// device-to-device copy); a kernel that reads part of an argument (a Gather's table) or one
// argument twice reaches another.
void print_launch_times(runtime::PlanRunner& runner, const nlohmann::json& manifest, bool host) {
  backend::TimingPolicy policy;  // a warm-up, then 5 to 200 runs within 10 ms, the L2 flushed before each
  const std::vector<runtime::PlanRunner::LaunchTime> times = runner.time_launches(policy);
  const nlohmann::json& launches = manifest.at("launches");
  check(launches.size() == times.size(), "per-kernel: ", times.size(), " launches timed, the manifest has ", launches.size());
  struct Row {
    size_t launch;
    std::string kernel, pattern, config;
    double measured, modeled;
    int64_t bytes;
  };
  std::map<int64_t, int64_t> buffer_bytes;
  for (const nlohmann::json& b : manifest.at("buffers")) buffer_bytes[b.at("id").get<int64_t>()] = b.value("bytes", int64_t{0});
  std::vector<Row> rows;
  double measured = 0, modeled = 0;
  for (size_t i = 0; i < times.size(); ++i) {
    Row row{i, times[i].kernel, "", "", times[i].timing.median_us, 0, 0};
    std::set<int64_t> args;
    for (const nlohmann::json& a : launches[i].value("args", nlohmann::json::array())) args.insert(a.get<int64_t>());
    for (int64_t a : args) row.bytes += buffer_bytes.count(a) ? buffer_bytes.at(a) : 0;
    for (const nlohmann::json& gr : launches[i].value("groups", nlohmann::json::array())) {
      row.pattern += (row.pattern.empty() ? "" : " | ") + gr.value("pattern", std::string("?"));
      row.config += (row.config.empty() ? "" : " | ") + gr.value("config", std::string("?"));
      row.modeled += gr.value("modeled_us", 0.0);
    }
    measured += row.measured;
    modeled += row.modeled;
    rows.push_back(std::move(row));
  }
  std::stable_sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) { return a.measured > b.measured; });
  std::printf("per kernel, slowest first: each launch alone, measured (median of %s), beside the plan's modeled time\n",
              host ? "steady-clock runs on the host executor" : "device-event runs, the L2 flushed before each");
  std::printf("| launch | kernel | groups | configuration | measured us | modeled us | measured / modeled | argument MB | argument GB/s |\n");
  std::printf("|---:|---|---|---|---:|---:|---:|---:|---:|\n");
  for (const Row& row : rows) {
    char ratio[32] = "-";
    if (row.modeled > 0) std::snprintf(ratio, sizeof ratio, "%.2f", row.measured / row.modeled);
    const double mb = static_cast<double>(row.bytes) / 1e6;
    std::printf("| %zu | %s | %s | `%s` | %.2f | %.2f | %s | %.3f | %.1f |\n", row.launch, row.kernel.c_str(), row.pattern.c_str(),
                row.config.c_str(), row.measured, row.modeled, ratio, mb, row.measured > 0 ? mb * 1e3 / row.measured : 0.0);
  }
  std::printf("sum of the %zu launches alone: %.1f us measured; %.1f us modeled\n", rows.size(), measured, modeled);
}

// A bundle's inputs and outputs as its model typed them (docs/plan-format.md: onnx_inputs and
// onnx_outputs, where the model has sequences or optionals), for reading test data; none where
// they are all tensors.
importer::GraphValues bundle_graph_values(const fs::path& dir) {
  const nlohmann::json manifest = nlohmann::json::parse(read_file(dir / "manifest.json", "plan manifest"));
  const auto typed = [](const nlohmann::json& v) {
    onnx::ValueInfoProto vi;
    vi.set_name(v.at("name").get<std::string>());
    const std::string kind = v.at("kind").get<std::string>();
    if (kind == "sequence") {
      vi.mutable_type()->mutable_sequence_type()->mutable_elem_type()->mutable_tensor_type();
    } else if (kind == "optional") {
      vi.mutable_type()->mutable_optional_type();
    } else {
      vi.mutable_type()->mutable_tensor_type();
    }
    return vi;
  };
  importer::GraphValues values;
  for (const nlohmann::json& v : manifest.value("onnx_inputs", nlohmann::json::array())) values.inputs.push_back(typed(v));
  for (const nlohmann::json& v : manifest.value("onnx_outputs", nlohmann::json::array())) values.outputs.push_back(typed(v));
  return values;
}

// --verify-blocks: the blocks of each launch the host's race checks cover (0: all).
int64_t checked_blocks(const Args& args) {
  const int64_t checked = static_cast<int64_t>(args.number("verify-blocks", static_cast<double>(backend::kPlanCheckedBlocks)));
  check(checked >= 0, "--verify-blocks ", checked, ": a number of blocks, 0 for all");
  return checked;
}

Ran run_bundle(const fs::path& dir, const importer::TestData& data, const Args& args, int64_t checked) {
  std::string why;
  const std::unique_ptr<backend::Backend> be = runtime::select_backend(
      args.get("backend", "auto"), &why, [checked] { return backend::make_plan_host_backend(checked); });
  const runtime::Bundle bundle = runtime::read_bundle(dir);
  const auto t0 = std::chrono::steady_clock::now();
  runtime::PlanRunner runner(bundle, *be);
  std::vector<std::string> names;
  for (const auto& spec : runner.inputs()) names.push_back(spec.name);
  const std::vector<Tensor> inputs = importer::bind_inputs(names, data, nullptr);
  const auto t1 = std::chrono::steady_clock::now();
  Ran r;
  r.tf32 = nlohmann::json::parse(bundle.manifest).value("precision", "model") == "tf32";
  r.outputs = runner.run(inputs);
  const auto t2 = std::chrono::steady_clock::now();
  for (const auto& spec : runner.outputs()) r.names.push_back(spec.name);
  keep_model_outputs(r, runtime::output_extents(runner.outputs()));
  std::printf("%s: %zu kernel launches%s on %s%s; loaded in %.2fs, ran in %.3fs\n", dir.string().c_str(), runner.launches(),
              runner.cuda_graph() ? " (one CUDA graph)" : "", be->name().c_str(),
              why.empty() ? "" : (" (no GPU: " + why + ")").c_str(), std::chrono::duration<double>(t1 - t0).count(),
              std::chrono::duration<double>(t2 - t1).count());
  if (args.has("repeat")) {
    const double n = args.number("repeat", 0);
    check(n >= 1 && n <= 1e6 && n == static_cast<int>(n), "--repeat: a whole number of runs from 1 to 1000000, got ",
          args.get("repeat"));
    const backend::Timing t = backend::summarize_times(runner.time_runs(static_cast<int>(n)));
    std::printf("timed %d runs: median %.3f us, min %.3f us, max %.3f us (%s)\n", t.repeats, t.median_us, t.min_us,
                t.max_us,
                runner.cuda_graph() ? "device events around each CUDA graph replay, L2 not flushed"
                : be->name() == "host" ? "steady clock around each run on the host executor"
                                       : "device events around each run's launches, L2 not flushed");
  }
  if (args.has("per-kernel")) print_launch_times(runner, nlohmann::json::parse(bundle.manifest), be->name() == "host");
  return r;
}

}  // namespace

int cmd_run(const std::vector<std::string>& argv) {
  const CommandSpec& spec = command_spec("run");
  const Args args = parse_args(spec, argv);
  check_usage(args.positional().size() == 1, spec);
  const fs::path target = args.positional()[0];
  const fs::path data_dir = args.get("inputs");
  std::error_code ec;
  const bool bundle = fs::is_directory(target, ec) && fs::exists(target / "manifest.json", ec);
  if (fs::is_directory(target, ec) && !bundle) fail(target.string(), ": a directory without manifest.json is not a plan bundle");
  check(bundle || !args.has("repeat"), "--repeat times a plan bundle; ", target.string(), " is a model (fusetune compile it first)");
  check(bundle || !args.has("per-kernel"), "--per-kernel times a plan bundle's launches; ", target.string(),
        " is a model (fusetune compile it first)");
  const int64_t checked = checked_blocks(args);
  check(bundle || !args.has("verify-blocks"), "--verify-blocks samples a plan bundle's launches; ", target.string(),
        " is a model (fusetune compile it first)");
  // A model's inputs first: one of a kind fusetune does not take is refused before its file is read.
  // The files are read as the model's inputs and outputs are typed (sequences and optionals
  // flattened to their tensors), a bundle's as its manifest says.
  const importer::GraphValues values = bundle ? bundle_graph_values(target) : importer::graph_values(target);
  const std::vector<std::string> input_names = bundle ? std::vector<std::string>{} : values.input_names();
  const importer::TestData data = importer::load_test_data(data_dir, &values);
  const Ran r = bundle ? run_bundle(target, data, args, checked) : run_model(target, input_names, data, args);
  if (args.has("out")) {
    const fs::path out_dir = args.get("out");
    fs::create_directories(out_dir, ec);
    check(!ec, out_dir.string(), ": cannot create directory (", ec.message(), ")");
    for (size_t k = 0; k < r.outputs.size(); ++k) {
      importer::write_tensor_file(out_dir / ("output_" + std::to_string(k) + ".pb"), r.names[k], r.outputs[k]);
    }
    std::printf("wrote %zu outputs to %s\n", r.outputs.size(), out_dir.string().c_str());
  }
  if (data.outputs.empty()) {
    std::printf("no expected outputs in %s: nothing compared\n", data_dir.string().c_str());
    return 0;
  }
  check(data.outputs.size() == r.outputs.size(), data_dir.string(), ": ", data.outputs.size(),
        " expected outputs, the model has ", r.outputs.size());
  int matched = 0;
  for (size_t k = 0; k < r.outputs.size(); ++k) {
    const Tensor& want = data.outputs[k].tensor;
    reference::Tolerance tol = r.tf32 && want.dtype() == DType::kF32 ? reference::tf32_tolerance()
                                                                     : reference::default_tolerance(want.dtype());
    tol.rtol = args.number("rtol", tol.rtol);
    if (args.has("atol")) {
      tol.atol = args.number("atol", tol.atol);
      tol.scale = 0;
    }
    const reference::Comparison c = reference::compare(r.outputs[k], want, tol);
    std::printf("  output %zu '%s' %s %s: %s %s (rtol %g, atol %g)\n", k, r.names[k].c_str(),
                std::string(dtype_name(r.outputs[k].dtype())).c_str(), shape_str(r.outputs[k].shape()).c_str(),
                c.ok ? "match" : "DIFFER",
                c.shape_ok ? c.describe().c_str() : ("expected shape " + shape_str(want.shape())).c_str(), tol.rtol,
                tol.atol + tol.scale * c.max_expected);
    matched += c.ok ? 1 : 0;
  }
  std::printf("outputs: %d match, %zu differ\n", matched, r.outputs.size() - static_cast<size_t>(matched));
  return matched == static_cast<int>(r.outputs.size()) ? 0 : 1;
}

}  // namespace fusetune::cli
