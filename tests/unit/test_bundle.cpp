// Plan bundles and the arena plan: live intermediates never share memory, manifests describe
// every launch and buffer, spilling kernels are not shipped where NVRTC shows an alternative,
// and a written bundle reads back identically.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>

#include "backend/nvrtc.h"
#include "codegen/memory_plan.h"
#include "planner/select.h"
#include "runtime/bundle.h"
#include "unit/graph_helpers.h"

namespace fusetune::runtime {
namespace {

TEST(ArenaPlan, LiveTensorsNeverOverlapAndDeadOnesShare) {
  std::mt19937 rng(7);
  std::vector<codegen::Lifetime> t;
  for (int i = 0; i < 200; ++i) {
    const int first = static_cast<int>(rng() % 50);
    t.push_back({static_cast<int64_t>(1 + rng() % 100000), first, first + static_cast<int>(rng() % 10)});
  }
  const codegen::ArenaPlan p = codegen::plan_arena(t);
  int64_t total = 0;
  for (size_t a = 0; a < t.size(); ++a) {
    total += t[a].bytes;
    EXPECT_EQ(p.offsets[a] % 256, 0);
    EXPECT_LE(p.offsets[a] + t[a].bytes, p.arena_bytes);
    for (size_t b = a + 1; b < t.size(); ++b) {
      const bool live_together = t[a].first <= t[b].last && t[b].first <= t[a].last;
      const bool overlap = p.offsets[a] < p.offsets[b] + t[b].bytes && p.offsets[b] < p.offsets[a] + t[a].bytes;
      EXPECT_FALSE(live_together && overlap) << a << " and " << b;
    }
  }
  EXPECT_LT(p.arena_bytes, total / 2);  // reuse: far less than every tensor side by side
}

TEST(Bundle, ManifestDescribesEveryLaunchAndBuffer) {
  const Graph g = fusetune::testing::load_test_model("bert");
  const planner::Device d = planner::find_device("h100");
  const planner::ModelPlan plan = planner::plan_model(g, d);
  const Bundle b = compile_bundle(g, plan, d, "bert");
  const nlohmann::json m = nlohmann::json::parse(b.manifest);
  EXPECT_EQ(m["format"], "fusetune-plan");
  EXPECT_EQ(m["version"], kBundleFormatVersion);
  EXPECT_EQ(static_cast<int>(m["launches"].size()), plan.launches);
  size_t groups = 0;
  for (const auto& l : m["launches"]) {
    groups += l["groups"].size();
    for (const auto& a : l["args"]) EXPECT_LT(a.get<size_t>(), m["buffers"].size());
    if (backend::nvrtc_available()) {
      ASSERT_TRUE(l.contains("resources")) << l["kernel"];
      EXPECT_FALSE(l["resources"]["sm_90"]["spills"].get<bool>()) << l["kernel"] << " spills";
    }
  }
  EXPECT_EQ(groups, plan.groups.size());
  for (size_t i = 0; i < m["buffers"].size(); ++i) EXPECT_EQ(m["buffers"][i]["id"], i);
  EXPECT_EQ(m["inputs"].size(), g.inputs().size());
  EXPECT_EQ(m["outputs"].size(), g.outputs().size());
  EXPECT_EQ(backend::nvrtc_available(), b.cubins.count("sm_90") == 1);
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("fusetune_bundle_" + std::to_string(::getpid()));
  write_bundle(b, dir);
  const Bundle back = read_bundle(dir);
  EXPECT_EQ(back.manifest, b.manifest);
  EXPECT_EQ(back.constants, b.constants);
  EXPECT_EQ(back.cubins, b.cubins);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace fusetune::runtime
