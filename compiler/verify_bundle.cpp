#include "compiler/verify_bundle.h"

#include <algorithm>
#include <random>
#include <set>
#include <string>

#include "backend/backend.h"
#include "backend/verify.h"
#include "core/error.h"

namespace fusetune::compiler {

BundleVerifyReport verify_bundle(const Graph& g, const planner::ModelPlan& plan, const runtime::Bundle& bundle,
                                 const std::vector<CompiledLaunch>& launches, const BundleVerifyOptions& options) {
  check(options.sample_blocks >= 0, "verify: ", options.sample_blocks, " blocks: a number of blocks, 0 for all");
  BundleVerifyReport report;
  // The bundle's own CUDA text, as it ships, built for the host once.
  backend::ModuleSource source;
  source.cuda_source = bundle.cuda_source;
  for (const CompiledLaunch& l : launches) {
    const codegen::Kernel& k = l.lowered.kernel;
    source.kernels.push_back({k.name, k.grid, k.threads, k.shared_bytes, k.library});
  }
  const std::unique_ptr<backend::Backend> host = backend::make_host_backend();
  const std::unique_ptr<backend::Module> module = host->load_source(source);
  std::mt19937 rng(static_cast<std::mt19937::result_type>(options.seed));
  // A launch that runs the kernel of an earlier one (compile_bundle: the same text), or the same
  // library call, for groups of the same signatures (a model's repeated layers: the same ops on the
  // same shapes, other weights) computes what that one computed, and is not run again.
  std::vector<size_t> verified;
  std::set<std::string> seen;
  for (size_t i = 0; i < launches.size(); ++i) {
    const codegen::Kernel& kernel = launches[i].lowered.kernel;
    std::string key = kernel.library.empty() ? kernel.name : kernel.library;
    for (size_t k : launches[i].groups) key += " " + plan.groups[k].signature;
    if (seen.insert(key).second) verified.push_back(i);
  }
  report.launches = launches.size();
  for (size_t n = 0; n < verified.size(); ++n) {
    const size_t i = verified[n];
    const CompiledLaunch& l = launches[i];
    // The launch's groups as one (packed parts are independent; their nodes in graph order).
    planner::FusionGroup all;
    std::string pattern, config;
    for (size_t k : l.groups) {
      const planner::GroupPlan& gp = plan.groups[k];
      all.nodes.insert(all.nodes.end(), gp.group.nodes.begin(), gp.group.nodes.end());
      pattern += (pattern.empty() ? "" : " | ") + gp.group.pattern;
      config += (config.empty() ? "" : " | ") + bundle.group_configs.at(k);
    }
    std::sort(all.nodes.begin(), all.nodes.end());
    backend::VerifyOptions vo;
    vo.sample_blocks = options.sample_blocks;
    vo.seed = options.seed + i;
    vo.tf32 = std::any_of(l.groups.begin(), l.groups.end(),
                          [&](size_t k) { return backend::tf32_kernel(g, plan.groups[k].group, bundle.group_configs.at(k)); });
    const backend::Reference reference = backend::reference_values(g, all, l.lowered.inputs, rng);
    const backend::VerifyResult r = backend::verify_kernel(g, l.lowered.kernel.name, l.lowered.inputs, l.lowered.outputs,
                                                           *host, *module, reference, vo, l.lowered.in_place);
    check(r.ok, "kernel ", l.lowered.kernel.name, " (", pattern, "; ", config, ") failed verification on the host",
          r.check_failed ? " (a check's finding)" : "", ": ", r.detail);
    ++report.kernels;
    report.sampled += r.coverage.whole() ? 0 : 1;
    if (options.progress) options.progress(n + 1, verified.size());
  }
  return report;
}

}  // namespace fusetune::compiler
