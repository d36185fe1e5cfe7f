// Plan bundles and the arena plan: live intermediates never share memory, manifests describe
// every launch and buffer, spilling kernels are not shipped where NVRTC shows an alternative,
// and a written bundle reads back identically.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>

#include "backend/cuda.h"
#include "backend/nvrtc.h"
#include "codegen/emit.h"
#include "codegen/memory_plan.h"
#include "compiler/compile_bundle.h"
#include "compiler/verify_bundle.h"
#include "core/error.h"
#include "planner/select.h"
#include "runtime/bundle.h"
#include "runtime/plan_runner.h"
#include "unit/graph_helpers.h"
#include "unit/test_seed.h"

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
  const Bundle b = compiler::compile_bundle(g, plan, d, "bert");
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
  // The same compilation's PTX ships beside the cubin, for the H100's architecture-specific target.
  EXPECT_EQ(backend::nvrtc_available(), b.ptx.count("sm_90a") == 1);
  if (b.ptx.count("sm_90a")) {
    EXPECT_NE(b.ptx.at("sm_90a").find(".target sm_90a"), std::string::npos);
  }
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("fusetune_bundle_" + std::to_string(::getpid()));
  write_bundle(b, dir);
  const Bundle back = read_bundle(dir);
  EXPECT_EQ(back.manifest, b.manifest);
  EXPECT_EQ(back.constants, b.constants);
  EXPECT_EQ(back.cubins, b.cubins);
  EXPECT_EQ(back.ptx, b.ptx);
  // Version 2 (no launch guarded by a run-time condition) still reads; a newer one is refused.
  for (const int version : {kOldestBundleFormatVersion, kBundleFormatVersion + 1}) {
    nlohmann::json older = m;
    older["version"] = version;
    std::ofstream(dir / "manifest.json") << older.dump();
    if (version <= kBundleFormatVersion) {
      EXPECT_EQ(nlohmann::json::parse(read_bundle(dir).manifest)["version"], version);
    } else {
      try {
        read_bundle(dir);
        ADD_FAILURE() << "version " << version << " was read";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("plan format version " + std::to_string(version) + " is not supported"), std::string::npos) << e.what();
      }
    }
  }
  std::filesystem::remove_all(dir);
}

// Which PTX of a bundle a GPU's driver may compile: a plain target runs on its architecture and
// every later one (the newest that fits wins), an architecture-specific one ("sm_90a": wgmma) on
// exactly its own; nothing fits an older GPU. A plan for the A100 ships sm_80 PTX, which an H100
// (or a GPU newer than this toolkit knows) can load without NVRTC.
TEST(Bundle, ThePtxADriverCanCompileIsChosen) {
  const std::map<std::string, std::string> both = {{"sm_80", "ptx"}, {"sm_90a", "ptx"}};
  EXPECT_EQ(backend::usable_ptx(both, "sm_90"), "sm_90a");
  EXPECT_EQ(backend::usable_ptx(both, "sm_100"), "sm_80");
  EXPECT_EQ(backend::usable_ptx(both, "sm_86"), "sm_80");
  EXPECT_EQ(backend::usable_ptx(both, "sm_75"), "");
  EXPECT_EQ(backend::usable_ptx({{"sm_90a", "ptx"}}, "sm_100"), "");
  EXPECT_EQ(backend::usable_ptx({{"sm_80", "ptx"}, {"sm_89", "ptx"}}, "sm_90"), "sm_89");
  EXPECT_EQ(backend::usable_ptx({{"sm_80", ""}}, "sm_90"), "");  // an empty text is no PTX
  EXPECT_EQ(backend::usable_ptx({{"compute_80", "ptx"}}, "sm_90"), "");
  EXPECT_EQ(backend::usable_ptx(both, "host"), "");
  if (!backend::nvrtc_available()) {
    GTEST_SKIP() << "no NVRTC here (" << backend::nvrtc_unavailable_reason() << "): the A100 plan's PTX was not made";
  }
  const Graph g = fusetune::testing::load_test_model("cnn_small");
  const planner::Device d = planner::find_device("a100");
  const Bundle b = compiler::compile_bundle(g, planner::plan_model(g, d), d, "cnn_small");
  ASSERT_EQ(b.ptx.count("sm_80"), 1u);
  EXPECT_NE(b.ptx.at("sm_80").find(".target sm_80"), std::string::npos);
  EXPECT_EQ(backend::usable_ptx(b.ptx, "sm_90"), "sm_80");
}

// Every kernel of a bundle is verified before it is written (`fusetune compile`), from the text
// the bundle ships: the bundle of a plan passes; with one kernel's barriers deleted from that text,
// verification fails naming that kernel and the finding of the executor's checks.
TEST(Bundle, VerificationPassesEveryKernelAndNamesOneThatFails) {
  const Graph g = fusetune::testing::load_test_model("bert");
  const planner::Device d = planner::find_device("h100");
  const planner::ModelPlan plan = planner::plan_model(g, d);
  std::vector<compiler::CompiledLaunch> launches;
  const Bundle b = compiler::compile_bundle(g, plan, d, "bert", {}, &launches);
  ASSERT_EQ(static_cast<int>(launches.size()), plan.launches);
  compiler::BundleVerifyOptions options;
  options.seed = fusetune::testing::test_seed();
  // One launch of each kernel or library call and group signatures runs (the layers share them).
  std::set<std::string> distinct;
  for (const compiler::CompiledLaunch& l : launches) {
    std::string key = l.lowered.kernel.library.empty() ? l.lowered.kernel.name : l.lowered.kernel.library;
    for (size_t k : l.groups) key += " " + plan.groups[k].signature;
    distinct.insert(key);
  }
  size_t progressed = 0;
  options.progress = [&](size_t done, size_t total) {
    EXPECT_EQ(total, distinct.size());
    progressed = done;
  };
  const compiler::BundleVerifyReport report = compiler::verify_bundle(g, plan, b, launches, options);
  EXPECT_EQ(report.launches, launches.size());
  EXPECT_EQ(report.kernels, distinct.size());
  EXPECT_EQ(progressed, distinct.size());
  // The first launch that has barriers (a LayerNorm's or the attention's stages), with all of them deleted.
  const std::function<int(codegen::Block&)> drop = [&](codegen::Block& block) {
    int n = 0;
    codegen::Block kept;
    for (codegen::Stmt& st : block) {
      if (st.kind == codegen::Stmt::Kind::kBarrier) {
        ++n;
        continue;
      }
      n += drop(st.body) + drop(st.orelse);
      kept.push_back(std::move(st));
    }
    block = std::move(kept);
    return n;
  };
  std::vector<compiler::CompiledLaunch> broken = launches;
  std::string name;
  for (compiler::CompiledLaunch& l : broken) {
    if (drop(l.lowered.kernel.body) > 0) {
      name = l.lowered.kernel.name;
      break;
    }
  }
  ASSERT_FALSE(name.empty()) << "no launch of the plan has a barrier";
  // The bundle as it would ship with that kernel: verification reads the bundle's text, where a
  // kernel several launches run is defined once (the first launch that runs it is the one broken).
  Bundle shipped = b;
  std::vector<codegen::Kernel> kernels;
  std::set<std::string> defined;
  for (const compiler::CompiledLaunch& l : broken) {
    if (defined.insert(l.lowered.kernel.name).second) kernels.push_back(l.lowered.kernel);
  }
  shipped.cuda_source = codegen::emit_cuda(kernels);
  try {
    compiler::verify_bundle(g, plan, shipped, broken, options);
    ADD_FAILURE() << "kernel " << name << " without its barriers passed verification";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("kernel " + name + " ("), std::string::npos) << what;
    EXPECT_NE(what.find("failed verification on the host"), std::string::npos) << what;
  }
}

// A cubin is refused before the driver sees it when NVRTC's CUDA version is newer than the
// driver's; the message says both versions and what to do. Unknown versions refuse nothing.
TEST(Bundle, ACubinNewerThanTheDriverIsRefusedWithWhatToDo) {
  EXPECT_EQ(cubin_driver_problem("13.0", "13.0"), "");
  EXPECT_EQ(cubin_driver_problem("12.8", "13.1"), "");
  EXPECT_EQ(cubin_driver_problem("12.9", "12.10"), "");  // versions as numbers: 12.10 is newer than 12.9
  const std::string p = cubin_driver_problem("13.0", "12.8");
  EXPECT_NE(p.find("NVRTC 13.0"), std::string::npos) << p;
  EXPECT_NE(p.find("supports CUDA 12.8"), std::string::npos) << p;
  EXPECT_NE(p.find("update the NVIDIA driver"), std::string::npos) << p;
  EXPECT_NE(cubin_driver_problem("12.9", "12.8"), "");
  EXPECT_EQ(cubin_driver_problem("unavailable", "12.8"), "");
  EXPECT_EQ(cubin_driver_problem("13.0", ""), "");
}

// A packed launch with a split-K part keeps its parts' thread count, so where it spills the
// compiler cannot give it fewer threads: its parts become launches of their own, each then
// judged alone (a spilling candidate gives way to one that does not). Here two sibling
// projections of one row are forced onto a split-K candidate of 128 x 256 accumulators on 64
// threads (512 floats a thread) and packed.
TEST(Bundle, APackedSplitLaunchThatSpillsShipsItsPartsApartWithoutSpills) {
  if (!backend::nvrtc_available()) GTEST_SKIP() << "NVRTC not available: no register counts";
  const Graph g = fusetune::testing::sibling_projections(128, 512, 256);
  const planner::Device d = planner::find_device("h100");
  planner::ModelPlan plan = planner::plan_model(g, d);
  ASSERT_EQ(plan.groups.size(), 2u);
  planner::TileConfig spilling{{128, 256}, 16, 64, 1, true};
  spilling.split_k = 2;
  for (planner::GroupPlan& gp : plan.groups) {
    planner::Candidate c{spilling, planner::evaluate_tile(g, gp.group, d, spilling)};
    c.cost.valid = true;  // the model refuses it for its registers: ptxas's verdict is the one under test
    gp.candidates.push_back(c);
    gp.chosen = gp.candidates.size() - 1;
    gp.group.launch = 0;
  }
  plan.launches = 1;
  std::vector<compiler::CompiledLaunch> launches;
  const Bundle b = compiler::compile_bundle(g, plan, d, "packed_split", {}, &launches);
  EXPECT_EQ(launches.size(), 2u) << "the packed launch was not taken apart";
  const nlohmann::json m = nlohmann::json::parse(b.manifest);
  for (const auto& l : m["launches"]) {
    EXPECT_FALSE(l["resources"]["sm_90"]["spills"].get<bool>()) << l["kernel"] << " spills";
  }
}

}  // namespace
}  // namespace fusetune::runtime
