// The search's mutations (search/mutation.h) on the search space the planner gives a real group:
// every neighbor differs from its parent in one knob and is the nearest in that direction, and
// the next trials are untried, neighbors first, best modeled first, then the space's best. The
// strategy's round (search/strategy.h) mutates the three fastest measured configurations.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>

#include "coordinator/job_planner.h"
#include "planner/select.h"
#include "search/learned_model.h"
#include "search/mutation.h"
#include "search/strategy.h"
#include "graph_helpers.h"
#include "planner/device.h"

namespace fusetune::search {
namespace {

// The knobs that differ between two configurations, by name.
std::vector<std::string> differing(const planner::TileConfig& a, const planner::TileConfig& b) {
  std::vector<std::string> out;
  for (size_t i = 0; i < a.tile.size(); ++i) {
    if (a.tile[i] != b.tile[i]) out.push_back("tile" + std::to_string(i));
  }
  if (a.threads != b.threads) out.push_back("threads");
  if (a.reduce_step != b.reduce_step) out.push_back("k");
  if (a.vector != b.vector) out.push_back("vec");
  if (a.mma != b.mma) out.push_back("mma");
  if (a.gemv != b.gemv) out.push_back("gemv");
  if (a.flash != b.flash) out.push_back("flash");
  if (a.wgmma != b.wgmma) out.push_back("wgmma");
  if (a.tma != b.tma) out.push_back("tma");
  if (a.ws != b.ws) out.push_back("ws");
  if (a.split_k != b.split_k) out.push_back("splitk");
  if (a.ring_stages != b.ring_stages) out.push_back("stages");
  return out;
}

// The search space of the first MatMul group of the BERT test model (the planner's valid list).
std::vector<planner::Candidate> matmul_space() {
  const Graph g = testing::load_test_model("bert");
  const planner::ModelPlan plan = planner::plan_model(g, planner::find_device("h100"), coordinator::search_plan_options({}));
  for (const planner::GroupPlan& gp : plan.compared) {
    if (gp.group.pattern.find("MatMul") != std::string::npos && gp.candidates.size() > 50) return gp.candidates;
  }
  return {};
}

TEST(Mutation, EveryNeighborDiffersInOneKnobAndIsTheNearestThatWay) {
  const std::vector<planner::Candidate> space = matmul_space();
  ASSERT_GT(space.size(), 50u);
  size_t total = 0;
  for (size_t p = 0; p < space.size(); p += 7) {
    const planner::TileConfig& parent = space[p].config;
    if (!parent.library.empty()) {
      EXPECT_TRUE(neighbors(space, parent).empty());
      continue;
    }
    std::set<std::pair<std::string, bool>> directions;  // (knob, up)
    for (const planner::TileConfig& n : neighbors(space, parent)) {
      ++total;
      const std::vector<std::string> d = differing(parent, n);
      ASSERT_EQ(d.size(), 1u) << parent.str() << " -> " << n.str();
      EXPECT_NE(d[0], "mma");
      EXPECT_TRUE(n.library.empty());
      auto knob = [&](const planner::TileConfig& x) -> double {
        if (d[0] == "threads") return x.threads;
        if (d[0] == "k") return static_cast<double>(x.reduce_step);
        if (d[0] == "vec") return x.vector;
        if (d[0] == "splitk") return x.split_k;
        if (d[0] == "stages") return x.ring_stages;
        if (d[0] == "wgmma") return x.wgmma ? 1 : 0;
        if (d[0] == "tma") return x.tma ? 1 : 0;
        if (d[0] == "ws") return x.ws ? 1 : 0;
        if (d[0] == "gemv") return x.gemv ? 1 : 0;
        return static_cast<double>(x.tile[static_cast<size_t>(std::stoi(d[0].substr(4)))]);
      };
      EXPECT_TRUE(directions.insert({d[0], knob(n) > knob(parent)}).second) << parent.str() << ": two neighbors in " << d[0];
      // Nearest: no configuration of the space lies strictly between parent and neighbor in that knob.
      const double lo = std::min(knob(parent), knob(n)), hi = std::max(knob(parent), knob(n));
      for (const planner::Candidate& c : space) {
        if (!c.config.library.empty() || differing(parent, c.config) != d) continue;
        EXPECT_FALSE(knob(c.config) > lo && knob(c.config) < hi)
            << c.config.str() << " lies between " << parent.str() << " and " << n.str();
      }
    }
  }
  EXPECT_GT(total, 20u);
}

TEST(Mutation, NextTrialsAreUntriedNeighborsBestModeledFirstThenTheSpacesBest) {
  const std::vector<planner::Candidate> space = matmul_space();
  ASSERT_GT(space.size(), 50u);
  const planner::TileConfig parent = space[10].config;
  ASSERT_TRUE(parent.library.empty());
  const std::vector<planner::TileConfig> around = neighbors(space, parent);
  ASSERT_GE(around.size(), 2u);
  std::set<std::string> tried = {parent.str(), around[0].str()};
  const std::vector<planner::TileConfig> next = next_trials(space, {parent.str()}, tried, 100);
  std::set<std::string> neighbor_set, seen;
  for (const planner::TileConfig& n : around) neighbor_set.insert(n.str());
  size_t from_neighbors = 0;  // how many of the first trials are neighbors
  for (const planner::TileConfig& c : next) {
    EXPECT_FALSE(tried.count(c.str())) << c.str();
    EXPECT_TRUE(seen.insert(c.str()).second) << c.str();
    EXPECT_TRUE(c.library.empty());
    if (from_neighbors == seen.size() - 1 && neighbor_set.count(c.str())) ++from_neighbors;
  }
  EXPECT_EQ(from_neighbors, around.size() - 1);  // the untried neighbors come first
  EXPECT_EQ(next.size(), 100u);                  // then the best modeled untried of the space
  EXPECT_EQ(next_trials(space, {parent.str()}, tried, 1).size(), 1u);
  EXPECT_EQ(next_trials(space, {parent.str()}, tried, 1)[0].str(), next[0].str());
  // A parent outside the space (another job's config, or a library call) gives no neighbors, only
  // the space's best.
  EXPECT_EQ(next_trials(space, {"library=cublasLt"}, {}, 2)[0].str(), space[0].config.library.empty()
                                                                          ? space[0].config.str()
                                                                          : space[1].config.str());
}

// A round of the shipped strategy (MutationStrategy): the parents are the three fastest measured
// (ties by their text), its trials those of next_trials around them, ranked by the analytic model
// as by the space's own order; with nothing measured, the space's best; a learned model without
// data leaves the space's order in charge; the learned model's data holds only the measured,
// non-library candidates of the space.
TEST(Strategy, ARoundMutatesTheThreeFastestMeasuredAndItsDataIsWhatWasMeasured) {
  const std::vector<planner::Candidate> space = matmul_space();
  ASSERT_GT(space.size(), 50u);
  std::map<std::string, double> measured;
  for (size_t k : {3u, 10u, 20u, 30u, 40u}) {
    if (space[k].config.library.empty()) measured[space[k].config.str()] = 50.0 - static_cast<double>(k);
  }
  ASSERT_EQ(measured.size(), 5u);
  const std::vector<std::string> chosen = parents(measured);
  EXPECT_EQ(chosen, (std::vector<std::string>{space[40].config.str(), space[30].config.str(), space[20].config.str()}));
  measured[space[3].config.str()] = 10.0;  // a tie with space[40]: the smaller text first
  const std::string first = std::min(space[3].config.str(), space[40].config.str());
  EXPECT_EQ(parents(measured)[0], first);
  std::set<std::string> tried;
  for (const auto& [config, us] : measured) tried.insert(config);
  MutationStrategy strategy;
  strategy.notify("g", measured, tried);
  const AnalyticModel analytic;
  const std::vector<planner::TileConfig> round = strategy.generate("g", space, 8, analytic);
  const std::vector<planner::TileConfig> direct = next_trials(space, parents(measured), tried, 8);
  ASSERT_EQ(round.size(), 8u);
  for (size_t i = 0; i < round.size(); ++i) {
    EXPECT_EQ(round[i].str(), direct[i].str());
    EXPECT_FALSE(tried.count(round[i].str()));
  }
  const LearnedModel untrained;
  ASSERT_FALSE(untrained.ranks());
  const std::vector<planner::TileConfig> opening = strategy.generate("never notified", space, 2, untrained);
  ASSERT_EQ(opening.size(), 2u);
  EXPECT_EQ(opening[0].str(), next_trials(space, {}, {}, 1)[0].str());
  std::map<std::string, double> with_foreign = measured;
  with_foreign["library=cublasLt"] = 1.0;
  with_foreign["not in the space"] = 2.0;
  const MeasuredGroup data = measured_group(space, with_foreign);
  EXPECT_EQ(data.candidates.size(), measured.size());
  for (size_t i = 0; i < data.candidates.size(); ++i) {
    EXPECT_EQ(data.median_us[i], measured.at(data.candidates[i].config.str()));
  }
}

}  // namespace
}  // namespace fusetune::search
