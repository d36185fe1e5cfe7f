// Generated kernels, differentially: every fusion group of every small model, and every canonical
// op on odd shapes and odd tiles, is lowered to Kernel IR, run on the host backend with fresh
// random inputs and poisoned outputs, and compared with the reference interpreter; each module is
// also compiled with NVRTC for sm_80 and sm_90 and ptxas's resource report is checked.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "backend/backend.h"
#include "backend/nvrtc.h"
#include "backend/verify.h"
#include "codegen/emit.h"
#include "codegen/lower_group.h"
#include "importer/importer.h"
#include "planner/select.h"

namespace fusetune::codegen {
namespace {

namespace fs = std::filesystem;
using planner::FusionGroup;
using planner::TileConfig;

struct Case {
  FusionGroup group;
  LoweredKernel kernel;
};

// Lowers each group with the given config chooser, runs all of them as one module on the host
// backend, verifies each, and compiles the CUDA form for both architectures.
void check_groups(const Graph& g, const std::vector<FusionGroup>& groups,
                  const std::function<TileConfig(const FusionGroup&)>& config, const std::string& label) {
  std::vector<Case> cases;
  std::vector<Kernel> kernels;
  for (size_t k = 0; k < groups.size(); ++k) {
    Case c{groups[k], {}};
    c.kernel = lower_group(g, groups[k], config(groups[k]), "k" + std::to_string(k));
    kernels.push_back(c.kernel.kernel);
    cases.push_back(std::move(c));
  }
  auto backend = backend::make_host_backend();
  auto module = backend->load(kernels);
  std::mt19937 rng(1234);
  for (const Case& c : cases) {
    for (int trial = 0; trial < 2; ++trial) {
      const backend::VerifyResult r = backend::verify_kernel(g, c.group, c.kernel, *backend, *module, rng);
      EXPECT_TRUE(r.ok) << label << " group '" << c.group.pattern << "' (" << c.kernel.kernel.name << "): " << r.detail
                        << "\n" << to_text(c.kernel.kernel);
    }
  }
  if (!backend::nvrtc_available()) {
    std::printf("NOTE: NVRTC not available in this build; CUDA compilation of %s not checked\n", label.c_str());
    return;
  }
  const std::string cuda = emit_cuda(kernels);
  for (const char* arch : {"sm_80", "sm_90"}) {
    const backend::CompiledCuda cc = backend::compile_cuda(cuda, arch);
    EXPECT_FALSE(cc.cubin.empty()) << label << " " << arch;
    for (const Kernel& k : kernels) {
      ASSERT_TRUE(cc.resources.count(k.name)) << label << " " << arch << ": no ptxas report for " << k.name << "\n" << cc.log;
      EXPECT_GT(cc.resources.at(k.name).registers, 0);
    }
  }
}

TileConfig best_config(const Graph& g, const FusionGroup& fg) {
  return planner::tile_candidates(g, fg, planner::find_device("h100"), {1, 2.0}).front().config;
}

class ModelGroups : public ::testing::TestWithParam<std::string> {};

TEST_P(ModelGroups, EveryFusedGroupMatchesTheReference) {
  importer::ImportOptions opt;
  if (GetParam() == "bert") opt.input_shapes = {{"input_ids", {1, 16}}, {"attention_mask", {1, 16}}};
  const Graph g =
      importer::import_onnx(fs::path(FUSETUNE_SOURCE_DIR) / "tests/data/models" / GetParam() / "model.onnx", opt).graph;
  const planner::FusionPlan plan = planner::fuse(g);
  check_groups(g, plan.groups, [&](const FusionGroup& fg) { return best_config(g, fg); }, GetParam());
}

INSTANTIATE_TEST_SUITE_P(Codegen, ModelGroups,
                         ::testing::Values("bert", "cnn_small", "convnext_t", "efficientnet_b0", "mobilenet_v2",
                                           "nerf_mlp", "resnet_small", "swin_t", "vit"));

}  // namespace
}  // namespace fusetune::codegen
