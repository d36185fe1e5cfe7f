// fusetune compile (its options: tools/command_table.cpp): the compiler's pipeline
// (compiler/pipeline.h: import, fold, fuse, plan, generate, verify) on the model with modeled
// costs (an untuned plan: the top candidate per group): its kernels generated and every one
// verified on the host (the executor's four checks and the reference, on at most N blocks of a
// larger grid, default 16, 0 for all), then the plan bundle written (docs/plan-format.md); a
// kernel that fails leaves nothing written and the error names it. --precision tf32 lets float32
// MatMuls run on TF32 tensor cores (docs/planner.md, "Precision policy"); --libraries names the
// vendor libraries the plan may call (cublasLt, cudnn: a deployment host without cuDNN compiles
// with --libraries cublasLt). --dump-after PASS|all prints what those passes made (the Kernel IR
// of every launch after generate); --verify-each checks every pass's result before the next.
// --input-value NAME=FILE.pb pins a graph input to a tensor (ImportOptions::input_values): an If
// on it folds to one branch (importer/control_flow.h; unpinned, both are planned and the runtime
// picks), arguments computed from it specialize; the input stays an input of the plan, to be given
// that value. A sequence or optional input's file (a SequenceProto, an OptionalProto) also gives
// its length or its emptiness, and pins the tensors it holds (importer/onnx_io.h). --bound NAME=N keeps at most N entries of an output of data-dependent size
// (ImportOptions::output_bounds).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "compiler/pipeline.h"
#include "core/error.h"
#include "importer/onnx_io.h"
#include "importer/test_data.h"
#include "planner/device.h"
#include "planner/library_call.h"
#include "planner/select.h"
#include "runtime/bundle.h"
#include "tools/cli_args.h"
#include "tools/command_table.h"
#include "tools/commands.h"
#include "tools/progress.h"

namespace fusetune::cli {

namespace {

// NAME and VALUE of a repeated flag's "NAME=VALUE", both present; else an Error naming the flag
// and the `form` it expects.
std::pair<std::string, std::string> name_value(const char* flag, const std::string& text, const char* form) {
  const size_t eq = text.find('=');
  check(eq != std::string::npos && eq > 0 && eq + 1 < text.size(), "--", flag, " '", text, "': expected ", form);
  return {text.substr(0, eq), text.substr(eq + 1)};
}

}  // namespace

int cmd_compile(const std::vector<std::string>& argv) {
  const CommandSpec& spec = command_spec("compile");
  const Args args = parse_args(spec, argv);
  check_usage(args.positional().size() == 1, spec);
  check(args.has("device") || args.has("device-file"),
        "--device NAME or --device-file PATH is required: the GPU the plan is for (h100, h200, a100, ...)");
  compiler::PipelineOptions options;
  options.verify.sample_blocks = static_cast<int64_t>(args.number("verify-blocks", static_cast<double>(options.verify.sample_blocks)));
  check(options.verify.sample_blocks >= 0, "--verify-blocks ", options.verify.sample_blocks, ": a number of blocks, 0 for all");
  options.plan.tiling.tf32 = planner::tf32_precision(args.get("precision", "model"));
  options.plan.tiling.libraries = planner::library_set(args.get("libraries", "all"));
  if (args.has("dump-after")) options.dump_after = compiler::passes_named(args.get("dump-after"));
  options.verify_each = args.has("verify-each");
  options.dump = [](compiler::Pass pass, const std::string& text) {
    std::printf("== after %s ==\n%s", compiler::pass_name(pass).c_str(), text.c_str());
    std::fflush(stdout);
  };
  const std::filesystem::path model = args.positional()[0];
  const planner::Device device =
      args.has("device-file") ? planner::load_device(args.get("device-file")) : planner::find_device(args.get("device"));
  options.import.input_shapes = shape_overrides(args);
  const importer::GraphValues values = args.has("input-value") ? importer::graph_values(model) : importer::GraphValues{};
  std::set<std::string> pinned;
  for (const std::string& pin : args.all("input-value")) {
    const auto [name, file] = name_value("input-value", pin, "NAME=FILE.pb");
    check(pinned.insert(name).second, "--input-value names '", name, "' twice");
    const auto vi = std::find_if(values.inputs.begin(), values.inputs.end(), [&](const auto& v) { return v.name() == name; });
    check(vi != values.inputs.end(), "--input-value names '", name, "', which is not an input of the model");
    // A sequence's or an optional's file gives its length or emptiness, and pins its tensors.
    const importer::ValueFile v = importer::read_value_file(file, vi->type(), name);
    if (v.sequence) options.import.sequence_lengths[name] = static_cast<int64_t>(v.tensors.size());
    if (v.empty_optional) options.import.empty_optionals.insert(name);
    for (size_t i = 0; i < v.tensors.size(); ++i) {
      const std::string tensor = v.sequence ? importer::element_name(name, static_cast<int64_t>(i)) : name;
      options.import.input_values[tensor] = v.tensors[i].tensor;
      options.import.input_shapes[tensor] = v.tensors[i].tensor.shape();
    }
  }
  for (const std::string& bound : args.all("bound")) {
    const auto [name, count] = name_value("bound", bound, "NAME=N");
    check(count.size() <= 12 && std::all_of(count.begin(), count.end(), [](char c) { return c >= '0' && c <= '9'; }) && std::stoll(count) >= 1,
          "--bound '", bound, "': N must be a whole number of entries, at least 1");
    check(!options.import.output_bounds.count(name), "--bound names '", name, "' twice");
    options.import.output_bounds[name] = std::stoll(count);
  }
  const auto t0 = std::chrono::steady_clock::now();
  compiler::PipelineResult r;
  {
    ProgressLine progress("verifying kernels on the host");
    options.verify.progress = [&](size_t done, size_t total) { progress.update(done, total, "passed"); };
    r = compiler::compile_model(model, device, options);
  }
  runtime::write_bundle(r.bundle, args.get("out"));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%s: %zu fusion groups in %d launches of %zu distinct kernels for %s (%s), cubin %s, verified on the host "
              "(%zu of %zu on a sample of %lld blocks), bundle written to %s in %.2fs\n",
              model.string().c_str(), r.plan.groups.size(), r.plan.launches, r.verified.kernels, device.name.c_str(),
              device.arch.c_str(), r.bundle.cubins.count(device.arch) ? "compiled" : "not compiled (no NVRTC)", r.verified.sampled,
              r.verified.kernels, static_cast<long long>(options.verify.sample_blocks), args.get("out").c_str(), s);
  return 0;
}

}  // namespace fusetune::cli
