// Verification of a compiled bundle: every kernel run on the host under the SIMT executor's four
// checks and compared with the reference, before the bundle is written (`fusetune compile`).
//
// Takes the graph, the plan, the bundle compile_bundle made of it (the configuration each group
// was lowered with) and the launches it lowered (each kernel with the graph values bound to its
// parameters and the plan's groups it computes). Builds the bundle's CUDA text (as it ships)
// once for the host, then per launch (one of the launches that run the same kernel or library call
// for groups of the same signatures: a model's repeated layers) draws random inputs for its groups
// (constants as they are), computes their reference node by node, and runs the kernel
// (backend/verify.h): bounds, races, barriers and uninitialised shared memory checked, every
// output element compared within the dtype's tolerance (TF32's for a kernel on TF32 tensor
// cores). A grid larger than `sample_blocks` runs that many of its blocks (the first, the last,
// others drawn from the seed), as `tune` verifies candidates, so full-size models are checked in
// minutes. Library calls run as their host
// equivalents. Guarantees: returns only when every kernel passed; otherwise throws Error naming
// the kernel, its groups' pattern and configuration, and the first mismatch or finding.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "compiler/compile_bundle.h"
#include "core/graph.h"
#include "planner/select.h"
#include "runtime/bundle.h"

namespace fusetune::compiler {

struct BundleVerifyOptions {
  int64_t sample_blocks = 16;  // blocks of a larger grid run; 0: all
  uint64_t seed = 1;           // the inputs drawn and the blocks sampled
  std::function<void(size_t done, size_t total)> progress;
};

struct BundleVerifyReport {
  size_t launches = 0;  // the bundle's
  size_t kernels = 0;   // verified: one launch per kernel and signatures
  size_t sampled = 0;   // of them, on a sample of their grid's blocks
};

BundleVerifyReport verify_bundle(const Graph& g, const planner::ModelPlan& plan, const runtime::Bundle& bundle,
                                 const std::vector<CompiledLaunch>& launches, const BundleVerifyOptions& options);

}  // namespace fusetune::compiler
