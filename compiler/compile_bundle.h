// Making a plan bundle (runtime/bundle.h) from a chosen plan: the compiler's last step, which the
// deployment runtime does not contain (the runtime only reads and runs bundles).
//
// compile_bundle takes a graph, a chosen plan (planner/select.h) and the target device; it lowers
// each group with its chosen candidate to a kernel, emits the CUDA and host sources, compiles
// cubins for the device's architecture with NVRTC where available (recording registers, shared
// memory and spills per kernel, and marking a kernel that spills; through the on-disk cubin cache of
// backend/nvrtc.h, so a bundle compiled before costs nothing), lays out constants in one blob
// and intermediates in one arena (codegen/memory_plan), and describes it all in a versioned JSON
// manifest. A launch that updates a value in place (LoweredKernel::in_place) gets that value's
// buffer for its output: a chain of such updates is one buffer, a graph output's if the chain ends
// in one, live in the arena until its last member's last read. A modeled plan's kernels may change after planning: a candidate that spills gives way
// to a lower-ranked one that does not, a packed launch takes its widest part's thread count (and
// fewer where that spills, unless a part is split-K: the planner packs those with parts of their
// own count alone). BundleOptions::as_measured forbids both, for plans whose choices were
// measured: every group ships the configuration its measurement timed, and a packed launch whose
// parts were measured at different thread counts becomes one launch per part. Bundle::group_configs
// says what each group was lowered with; `launches_out`, where given, receives each launch in order
// (its Kernel IR, the values bound to its parameters, its groups: what compiler/verify_bundle.h
// checks and `compile --dump-after generate` prints).
#pragma once

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "codegen/lower_group.h"
#include "core/graph.h"
#include "planner/device.h"
#include "planner/select.h"
#include "runtime/bundle.h"

namespace fusetune::compiler {

// One launch of a compiled bundle: its kernel and the graph values bound to its parameters
// (inputs, then outputs), and the plan's groups it computes (several when packed).
struct CompiledLaunch {
  codegen::LoweredKernel lowered;
  std::vector<size_t> groups;
};

struct BundleOptions {
  bool as_measured = false;  // ship each group's chosen configuration unchanged (see above)
  // Candidates a check rejected (planner::PlanOptions::rejected): never taken in a spilling one's place.
  std::set<std::pair<std::string, std::string>> rejected;
};

runtime::Bundle compile_bundle(const Graph& g, const planner::ModelPlan& plan, const planner::Device& device,
                      const std::string& model_name, const BundleOptions& options = {},
                      std::vector<CompiledLaunch>* launches_out = nullptr);

}  // namespace fusetune::compiler
