// fusetune compile (its options: tools/command_table.cpp): plans the
// model with modeled costs (an untuned plan: the top candidate per group), generates its kernels,
// verifies every one on the host (compiler/verify_bundle.h: the executor's four checks and the
// reference, on at most N blocks of a larger grid, default 16, 0 for all) and writes the plan
// bundle (docs/plan-format.md); a kernel that fails leaves nothing written and the error names it. --precision tf32 lets float32 MatMuls run on TF32 tensor cores
// (docs/planner.md, "Precision policy"); --libraries names the vendor libraries the plan may call
// (cublasLt, cudnn: a deployment host without cuDNN compiles with --libraries cublasLt). --dump-ir also prints the Kernel IR (codegen::to_text)
// of every kernel of the bundle, in launch order.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "codegen/kernel_ir.h"
#include "compiler/compile_bundle.h"
#include "compiler/verify_bundle.h"
#include "core/error.h"
#include "importer/importer.h"
#include "planner/device.h"
#include "planner/library_call.h"
#include "planner/select.h"
#include "runtime/bundle.h"
#include "tools/cli_args.h"
#include "tools/command_table.h"
#include "tools/commands.h"
#include "tools/progress.h"

namespace fusetune::cli {

int cmd_compile(const std::vector<std::string>& argv) {
  const CommandSpec& spec = command_spec("compile");
  const Args args = parse_args(spec, argv);
  check_usage(args.positional().size() == 1 && (args.has("device") || args.has("device-file")), spec);
  compiler::BundleVerifyOptions verify;
  verify.sample_blocks = static_cast<int64_t>(args.number("verify-blocks", static_cast<double>(verify.sample_blocks)));
  check(verify.sample_blocks >= 0, "--verify-blocks ", verify.sample_blocks, ": a number of blocks, 0 for all");
  planner::PlanOptions popt;
  popt.tiling.tf32 = planner::tf32_precision(args.get("precision", "model"));
  popt.tiling.libraries = planner::library_set(args.get("libraries", "all"));
  const std::filesystem::path model = args.positional()[0];
  const planner::Device device =
      args.has("device-file") ? planner::load_device(args.get("device-file")) : planner::find_device(args.get("device"));
  importer::ImportOptions opt;
  opt.input_shapes = shape_overrides(args);
  const auto t0 = std::chrono::steady_clock::now();
  const importer::ImportedModel m = importer::import_onnx(model, opt);
  const planner::ModelPlan plan = planner::plan_model(m.graph, device, popt);
  std::vector<compiler::CompiledLaunch> launches;
  const runtime::Bundle bundle = compiler::compile_bundle(m.graph, plan, device, model.filename().string(), {}, &launches);
  compiler::BundleVerifyReport verified;
  {
    ProgressLine progress("verifying kernels on the host");
    verify.progress = [&](size_t done, size_t total) { progress.update(done, total, "passed"); };
    verified = compiler::verify_bundle(m.graph, plan, bundle, launches, verify);
  }
  runtime::write_bundle(bundle, args.get("out"));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (args.has("dump-ir")) {
    for (const compiler::CompiledLaunch& l : launches) {
      std::fputs((codegen::to_text(l.lowered.kernel) + "\n").c_str(), stdout);
    }
  }
  std::printf("%s: %zu fusion groups in %d kernels for %s (%s), cubin %s, verified on the host (%zu of %zu on a "
              "sample of %lld blocks), bundle written to %s in %.2fs\n",
              model.string().c_str(), plan.groups.size(), plan.launches, device.name.c_str(), device.arch.c_str(),
              bundle.cubins.count(device.arch) ? "compiled" : "not compiled (no NVRTC)", verified.sampled, verified.kernels,
              static_cast<long long>(verify.sample_blocks), args.get("out").c_str(), s);
  return 0;
}

}  // namespace fusetune::cli
