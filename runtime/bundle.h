// Plan bundles: what `fusetune compile` writes and `fusetune run DIR` executes (docs/plan-format.md).
//
// compile_bundle takes a graph, a chosen plan (planner/select.h) and the target device; it lowers
// each group with its chosen candidate to a kernel, emits the CUDA and host sources, compiles
// cubins for the device's architecture with NVRTC where available (recording registers, shared
// memory and spills per kernel, and marking a kernel that spills; through the on-disk cubin cache of
// backend/nvrtc.h, so a bundle compiled before costs nothing), lays out constants in one blob
// and intermediates in one arena (codegen/memory_plan), and describes it all in a versioned JSON
// manifest. A modeled plan's kernels may change after planning: a candidate that spills gives way
// to a lower-ranked one that does not, a packed launch takes its widest part's thread count (and
// fewer where that spills). BundleOptions::as_measured forbids both, for plans whose choices were
// measured: every group ships the configuration its measurement timed, and a packed launch whose
// parts were measured at different thread counts becomes one launch per part. Bundle::group_configs
// says what each group was lowered with. write_bundle/read_bundle move a bundle to and from a
// directory.
#pragma once

#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "codegen/kernel_ir.h"
#include "core/graph.h"
#include "planner/device.h"
#include "planner/select.h"

namespace fusetune::runtime {

inline constexpr int kBundleFormatVersion = 2;

struct Bundle {
  std::string manifest;   // JSON text
  std::string cuda_source;  // what NVRTC compiles for the GPU and the host executor runs
  std::map<std::string, std::vector<char>> cubins;  // by architecture
  std::vector<char> constants;
  std::vector<std::string> group_configs;  // per plan group: the TileConfig::str() its kernel was lowered with
  std::vector<codegen::Kernel> kernels;    // the Kernel IR of each launch, in order (not stored: read_bundle leaves it empty)
};

struct BundleOptions {
  bool as_measured = false;  // ship each group's chosen configuration unchanged (see above)
  // Candidates a check rejected (planner::PlanOptions::rejected): never taken in a spilling one's place.
  std::set<std::pair<std::string, std::string>> rejected;
};

Bundle compile_bundle(const Graph& g, const planner::ModelPlan& plan, const planner::Device& device,
                      const std::string& model_name, const BundleOptions& options = {});
// The files of a bundle as a directory holds them (name, contents), the manifest last: a bundle
// with a manifest is complete. write_bundle writes them; the coordinator sends them to clients.
std::vector<std::pair<std::string, std::string_view>> bundle_files(const Bundle& b);
void write_bundle(const Bundle& b, const std::filesystem::path& dir);
Bundle read_bundle(const std::filesystem::path& dir);

}  // namespace fusetune::runtime
