// The tuning job's decisions (coordinator/job_planner.h): what a task measures and what an
// exported bundle ships. A library call is measured even beyond the `candidates` cut; an export
// ships exactly the kernels whose measurements chose them (configuration and source digest), so a
// packed launch whose parts were measured at different thread counts is split rather than
// re-threaded, a measured kernel that spills ships as measured (flagged) rather than swapped for an
// unmeasured one, and an export refuses, naming the group, when a group was never measured, when all
// its measurements failed, or when the kernel generated now is not the one measured.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>

#include "backend/nvrtc.h"
#include "coordinator/job_planner.h"
#include "core/error.h"

namespace fusetune::coordinator {
namespace {

std::filesystem::path model_file(const std::string& name) {
  return std::string(FUSETUNE_SOURCE_DIR) + "/tests/data/models/" + name + "/model.onnx";
}

// Measurements as a worker would report them for every candidate of every task: `prefer` says
// which candidate of a task is fastest; the others are slower in task order.
struct Fabricated {
  planner::Measurements times;
  MeasuredDigests digests;
};

Fabricated measure_all(const std::vector<TaskSpec>& tasks, const std::function<int(const wire::Task&)>& prefer) {
  Fabricated f;
  for (const TaskSpec& t : tasks) {
    const int best = prefer(t.task);
    for (int k = 0; k < t.task.candidates_size(); ++k) {
      const wire::Candidate& c = t.task.candidates(k);
      f.times[{t.signature, c.config()}] = k == best ? 1.0 : 10.0 + k;
      f.digests[{t.signature, c.config()}] = c.source_digest();
    }
  }
  return f;
}

std::string refusal(const JobPlanner& jp, const planner::ModelPlan& plan, const MeasuredDigests& digests) {
  try {
    jp.bundle(plan, digests);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(JobPlanner, TheLibraryCallIsMeasuredBeyondTheCandidateCut) {
  JobOptions o;
  o.candidates = 1;
  o.shapes = {{"input_ids", {1, 16}}, {"attention_mask", {1, 16}}};
  const JobPlanner jp(model_file("bert"), "bert", "h100", o);
  int with_library = 0;
  for (const planner::GroupPlan& gp : jp.modeled().compared) {
    bool has_library = false;
    for (const planner::Candidate& c : gp.candidates) has_library |= c.cost.valid && !c.config.library.empty();
    if (!has_library) continue;
    ++with_library;
    for (const TaskSpec& t : jp.tasks()) {
      if (t.signature != gp.signature) continue;
      int generated = 0, library = 0;
      for (const wire::Candidate& c : t.task.candidates()) (c.library().empty() ? generated : library) += 1;
      EXPECT_EQ(library, planner::TilingOptions{}.library_algorithms) << gp.group.pattern << ": one per ranked algorithm";
      EXPECT_LE(generated, 1) << gp.group.pattern;
    }
  }
  EXPECT_GT(with_library, 0) << "BERT's MatMuls match cuBLASLt calls";
  // Where a library's second algorithm measures fastest (and generated kernels cost 100 µs a node
  // they compute), the plan takes it; the summary counts the plan's groups on a library call and
  // names each chosen group's config.
  Fabricated m;
  for (const TaskSpec& t : jp.tasks()) {
    const double nodes = static_cast<double>(jp.group(t.signature).group.nodes.size());
    for (const wire::Candidate& c : t.task.candidates()) {
      const bool second = c.config().find("library=cublasLt algo=1") == 0;
      m.times[{t.signature, c.config()}] = second ? 1.0 : c.library().empty() ? 100.0 * nodes : 50.0;
      m.digests[{t.signature, c.config()}] = c.source_digest();
    }
  }
  const planner::ModelPlan plan = jp.final_plan(m.times);
  int on_library = 0;
  for (const planner::GroupPlan& gp : plan.groups) {
    const planner::TileConfig& chosen = gp.candidates[gp.chosen].config;
    if (chosen.library.empty()) continue;
    ++on_library;
    EXPECT_EQ(chosen.algorithm, 1) << gp.group.pattern;
  }
  ASSERT_GT(on_library, 0);
  const JobSummary s = jp.summary(plan, &m.times);
  EXPECT_EQ(s.library_groups, (std::map<std::string, int>{{"cublasLt", on_library}}));
  const nlohmann::json summary = nlohmann::json::parse(s.to_json());
  EXPECT_EQ(summary["library_groups"]["cublasLt"], on_library);
  int configs = 0;
  for (const nlohmann::json& d : summary["group_details"]) {
    EXPECT_EQ(d.contains("config"), d["chosen"].get<bool>()) << d.dump();
    configs += d.contains("config") && d["config"].get<std::string>().find("library=cublasLt algo=1") == 0;
  }
  EXPECT_GT(configs, 0);
  // The bundle says which libraries its launches call.
  const nlohmann::json manifest = nlohmann::json::parse(jp.bundle(plan, m.digests).manifest);
  EXPECT_EQ(manifest["libraries"]["cublasLt"]["calls"], on_library) << manifest["libraries"].dump();
}

// The spill figures of a bundle's manifest: groups whose spilling configuration was replaced, and
// launches whose kernel spills on sm_90.
void spill_figures(const runtime::Bundle& bundle, int* replaced, int* spilling) {
  const nlohmann::json manifest = nlohmann::json::parse(bundle.manifest);  // outlives the loop
  for (const auto& launch : manifest["launches"]) {
    for (const auto& group : launch["groups"]) *replaced += group.contains("replaced_spilling_config");
    if (launch.contains("resources")) *spilling += launch["resources"]["sm_90"]["spills"].get<bool>();
  }
}

TEST(JobPlanner, AnExportShipsTheMeasuredKernelsAndSplitsARethreadedPackedLaunch) {
  // BERT's Q, K and V projections share a launch (sibling MatMuls of one input).
  JobOptions o;
  o.shapes = {{"input_ids", {1, 16}}, {"attention_mask", {1, 16}}};
  const JobPlanner jp(model_file("bert"), "bert", "h100", o);
  const std::vector<TaskSpec> tasks = jp.tasks();
  // Each task's first candidate fastest; then, in a launch the plan packs, one part's fastest
  // candidate is one with another thread count than its partner's.
  Fabricated m = measure_all(tasks, [](const wire::Task&) { return 0; });
  const planner::ModelPlan first = jp.final_plan(m.times);
  bool retimed = false;
  for (size_t a = 0; a + 1 < first.groups.size() && !retimed; ++a) {
    const planner::GroupPlan& ga = first.groups[a];
    const planner::GroupPlan& gb = first.groups[a + 1];
    if (ga.group.launch != gb.group.launch || ga.signature == gb.signature) continue;
    for (const TaskSpec& t : tasks) {
      if (t.signature != ga.signature) continue;
      for (const wire::Candidate& c : t.task.candidates()) {
        if (c.library().empty() && c.threads() != gb.candidates[gb.chosen].config.threads && !retimed) {
          m.times[{t.signature, c.config()}] = 0.5;
          retimed = true;
        }
      }
    }
  }
  ASSERT_TRUE(retimed) << "BERT's plan packs no two groups of different signatures";
  const planner::ModelPlan plan = jp.final_plan(m.times);
  std::map<int, std::set<int>> threads_in_launch;
  for (const planner::GroupPlan& gp : plan.groups) {
    ASSERT_TRUE(gp.measured) << gp.group.pattern;
    threads_in_launch[gp.group.launch].insert(gp.candidates[gp.chosen].config.threads);
  }
  int rethreaded = 0;
  for (const auto& [launch, threads] : threads_in_launch) rethreaded += threads.size() > 1;
  ASSERT_GT(rethreaded, 0) << "no packed launch whose parts were measured at different thread counts";

  // Lowered as a modeled plan is, a packed launch takes its widest part's thread count: kernels
  // that were never measured.
  const runtime::Bundle modeled = compiler::compile_bundle(jp.graph(), plan, jp.plan_device(), "bert");
  int changed = 0;
  for (size_t k = 0; k < plan.groups.size(); ++k) {
    changed += modeled.group_configs[k] != plan.groups[k].candidates[plan.groups[k].chosen].config.str();
  }
  EXPECT_GT(changed, 0);

  // Exported, every group ships its measured configuration; the re-threaded launches are split.
  const runtime::Bundle b = jp.bundle(plan, m.digests);
  for (size_t k = 0; k < plan.groups.size(); ++k) {
    EXPECT_EQ(b.group_configs[k], plan.groups[k].candidates[plan.groups[k].chosen].config.str()) << k;
  }
  const nlohmann::json manifest = nlohmann::json::parse(b.manifest);
  EXPECT_EQ(manifest["launches"].size(), static_cast<size_t>(plan.launches + rethreaded));
  for (const auto& launch : manifest["launches"]) {
    for (const auto& group : launch["groups"]) {
      EXPECT_NE(group["config"].get<std::string>().find("threads=" + std::to_string(launch["threads"].get<int>())),
                std::string::npos)
          << group["config"] << " in a launch of " << launch["threads"] << " threads";
    }
  }
}

// A modeled plan replaces a candidate whose kernel spills with one that does not; an export ships
// the measured one, spilling, flagged in the manifest, never swapped for an unmeasured one.
TEST(JobPlanner, AnExportShipsAMeasuredSpillingKernelWhereAModeledPlanReplacesIt) {
  if (!backend::nvrtc_available()) {
    GTEST_SKIP() << "NVRTC not available: ptxas spill figures (and substitution) not checked";
  }
  const JobPlanner jp(model_file("convnext_t"), "convnext_t", "h100", JobOptions{});
  const std::vector<TaskSpec> tasks = jp.tasks();
  // Each task's first candidate fastest, but in one task (ConvNeXt's Conv+LayerNorm+MatMul, whose
  // first candidates ptxas compiles with a few bytes of spill for occupancy on sm_90) the first
  // candidate whose kernel spills.
  bool spiller = false;
  const Fabricated m = measure_all(tasks, [&](const wire::Task& task) {
    for (int k = 0; !spiller && k < task.candidates_size(); ++k) {
      const wire::Candidate& c = task.candidates(k);
      if (!c.library().empty()) continue;
      const backend::CompiledCuda cc = backend::compile_cuda(c.cuda_source(), "sm_90");
      if (cc.resources.count(c.kernel()) && cc.resources.at(c.kernel()).spills()) {
        spiller = true;
        return k;
      }
    }
    return 0;
  });
  ASSERT_TRUE(spiller) << "no candidate of convnext_t's tasks spills on sm_90";
  const planner::ModelPlan plan = jp.final_plan(m.times);
  int replaced = 0, spilling = 0;
  spill_figures(compiler::compile_bundle(jp.graph(), plan, jp.plan_device(), "convnext_t"), &replaced, &spilling);
  EXPECT_GT(replaced, 0);
  const int spilling_modeled = spilling;
  replaced = spilling = 0;
  const runtime::Bundle b = jp.bundle(plan, m.digests);
  spill_figures(b, &replaced, &spilling);
  EXPECT_EQ(replaced, 0);
  EXPECT_GT(spilling, spilling_modeled);
  for (size_t k = 0; k < plan.groups.size(); ++k) {
    EXPECT_EQ(b.group_configs[k], plan.groups[k].candidates[plan.groups[k].chosen].config.str()) << k;
  }
}

TEST(JobPlanner, AnExportRefusesKernelsThatWereNotMeasuredOrFailed) {
  const JobPlanner jp(model_file("gpt2"), "gpt2", "h100", JobOptions{});
  const std::vector<TaskSpec> tasks = jp.tasks();
  const Fabricated m = measure_all(tasks, [](const wire::Task&) { return 0; });
  const planner::ModelPlan plan = jp.final_plan(m.times);
  EXPECT_NO_THROW(jp.bundle(plan, m.digests));
  const planner::GroupPlan& first = plan.groups.front();
  const std::string chosen = first.candidates[first.chosen].config.str();

  // A kernel generated now that differs from the one measured (here: the record says another digest).
  MeasuredDigests stale = m.digests;
  stale[{first.signature, chosen}] = std::string(64, '0');
  const std::string why = refusal(jp, plan, stale);
  EXPECT_NE(why.find("export refused: group 0 (" + first.group.pattern + ")"), std::string::npos) << why;
  EXPECT_NE(why.find("is not the one measured (000000000000)"), std::string::npos) << why;

  // No successful measurement of the chosen configuration on record.
  MeasuredDigests missing = m.digests;
  missing.erase({first.signature, chosen});
  EXPECT_NE(refusal(jp, plan, missing).find("no successful measurement of " + chosen), std::string::npos);

  // A group never measured.
  planner::Measurements partial = m.times;
  for (auto it = partial.begin(); it != partial.end();) it = it->first.first == first.signature ? partial.erase(it) : std::next(it);
  const planner::ModelPlan unmeasured = jp.final_plan(partial);
  const std::string never = refusal(jp, unmeasured, m.digests);
  EXPECT_NE(never.find("was never measured"), std::string::npos) << never;

  // A fused group whose every measurement failed falls back to its parts, which ship.
  planner::Measurements failed = m.times;
  for (auto& [key, us] : failed) {
    if (key.first == first.signature) us = INFINITY;
  }
  const planner::ModelPlan fallback = jp.final_plan(failed);
  ASSERT_EQ(fallback.failed_groups.size(), 1u);
  EXPECT_EQ(fallback.failed_groups[0], first.group.pattern);
  EXPECT_GT(fallback.groups.size(), plan.groups.size());
  EXPECT_NO_THROW(jp.bundle(fallback, m.digests));

  // When its parts fail too, down to single nodes, nothing measured can run them: refused.
  const std::set<int> nodes(first.group.nodes.begin(), first.group.nodes.end());
  for (const planner::GroupPlan& gp : jp.modeled().compared) {
    bool inside = true;
    for (int n : gp.group.nodes) inside = inside && nodes.count(n) > 0;
    if (!inside) continue;
    for (auto& [key, us] : failed) {
      if (key.first == gp.signature) us = INFINITY;
    }
  }
  const std::string all_failed = refusal(jp, jp.final_plan(failed), m.digests);
  EXPECT_NE(all_failed.find("export refused: every measured candidate of group"), std::string::npos) << all_failed;
}

// Each job option is taken at both ends of its documented range and refused just outside it,
// with the option named.
TEST(JobOptions, EachOptionIsTakenWithinItsRangeAndRefusedOutsideNamingIt) {
  const std::vector<std::tuple<std::string, double, double>> ranges = {
      {"candidates", 1, 64},          {"warmup", 0, 100},     {"min_repeats", 1, 1'000'000}, {"max_repeats", 1, 1'000'000},
      {"min_time_ms", 0, 600'000},     {"timeout_ms", 100, 120'000}, {"trials", 0, 1'000'000},
      {"time_s", 0, 7 * 24 * 3600}};
  for (const auto& [key, lo, hi] : ranges) {
    // min_repeats may not pass max_repeats: each end is tried with the other at a value that fits.
    auto options = [&, key = key](double v) {
      nlohmann::json j = {{key, v}};
      if (key == "min_repeats") j["max_repeats"] = 1'000'000;
      if (key == "max_repeats") j["min_repeats"] = 1;
      return j.dump();
    };
    EXPECT_NO_THROW(coordinator::JobOptions::from_json(options(lo))) << key << " " << lo;
    EXPECT_NO_THROW(coordinator::JobOptions::from_json(options(hi))) << key << " " << hi;
    for (const double out : {lo - 1, hi + 1, hi * 1e6 + 1e9}) {
      try {
        coordinator::JobOptions::from_json(options(out));
        ADD_FAILURE() << key << " " << out << " was taken";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("'" + key + "'"), std::string::npos) << e.what();
      }
    }
  }
  EXPECT_THROW(coordinator::JobOptions::from_json(R"({"min_repeats": 9, "max_repeats": 8})"), Error);
  EXPECT_THROW(coordinator::JobOptions::from_json(R"({"shapes": {"x": [65536, 65536, 65536]}})"), Error);
  EXPECT_THROW(coordinator::JobOptions::from_json(R"({"shapes": {"x": [-1, 4]}})"), Error);
  EXPECT_NO_THROW(coordinator::JobOptions::from_json(R"({"shapes": {"x": [1, 3, 224, 224]}})"));
  // The precision policy: one of two names, kept through JSON, steering the search's candidates.
  const JobOptions tf32 = coordinator::JobOptions::from_json(R"({"precision": "tf32"})");
  EXPECT_EQ(tf32.precision, "tf32");
  EXPECT_EQ(coordinator::JobOptions::from_json(tf32.to_json()).precision, "tf32");
  EXPECT_TRUE(search_plan_options(tf32).tiling.tf32);
  EXPECT_FALSE(search_plan_options(JobOptions{}).tiling.tf32);
  try {
    coordinator::JobOptions::from_json(R"({"precision": "fp8"})");
    ADD_FAILURE() << "precision fp8 was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("job option 'precision'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("'fp8' is not a policy"), std::string::npos) << e.what();
  }
  // The libraries a job's plan may call: kept through JSON, steering the search's candidates.
  const JobOptions cublas_only = coordinator::JobOptions::from_json(R"({"libraries": "cublasLt"})");
  EXPECT_EQ(coordinator::JobOptions::from_json(cublas_only.to_json()).libraries, "cublasLt");
  EXPECT_EQ(search_plan_options(cublas_only).tiling.libraries, std::set<std::string>{"cublasLt"});
  EXPECT_EQ(search_plan_options(JobOptions{}).tiling.libraries, (std::set<std::string>{"cublasLt", "cudnn"}));
  EXPECT_TRUE(search_plan_options(coordinator::JobOptions::from_json(R"({"libraries": "none"})")).tiling.libraries.empty());
  try {
    coordinator::JobOptions::from_json(R"({"libraries": "cudnn,tensorrt"})");
    ADD_FAILURE() << "libraries cudnn,tensorrt was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("job option 'libraries'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("'tensorrt' is not a library"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fusetune::coordinator
