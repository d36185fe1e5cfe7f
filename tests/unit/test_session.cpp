// The search as a socket-free session (search/session.h) over its extension points, driven as the
// coordinator and search_eval drive it: against a device whose cost is not the analytic model's,
// a job's rounds stay within its budget and never ask anything twice, the learned model is updated
// from round to round rather than retrained, the leaders within noise are compared once after the
// rounds, the budget counts what other jobs measured but not library calls, the clock stops the
// rounds; and the two tuning records (SQLite, memory) give the same records for the same
// measurements.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "coordinator/job_planner.h"
#include "graph_helpers.h"
#include "planner/device.h"
#include "planner/select.h"
#include "search/learned_model.h"
#include "search/mutation.h"
#include "search/session.h"
#include "unit/test_dir.h"

namespace fusetune::search {
namespace {

const storage::DeviceKey kDevice{"h100", "sm_90", "NVIDIA H100 80GB HBM3", 90, "12.8", "nvrtc 13.0"};

// The BERT test model's groups as a job plans them: every candidate the planner lists (invalid
// ones and library calls among them), by signature.
std::map<std::string, std::vector<planner::Candidate>> bert_groups() {
  const Graph g = testing::load_test_model("bert");
  const planner::ModelPlan plan = planner::plan_model(g, planner::find_device("h100"), coordinator::search_plan_options({}));
  std::map<std::string, std::vector<planner::Candidate>> out;
  for (const planner::GroupPlan& gp : plan.compared) out[gp.signature] = gp.candidates;
  return out;
}

// A device whose cost is not the analytic model's: time grows with the threads and falls with the
// tile's elements, scaled per group.
double hidden_us(const planner::TileConfig& c, double scale) {
  double elements = 1;
  for (int64_t e : c.tile) elements *= static_cast<double>(e);
  return scale * (1 + c.threads / 32.0) * (1 + 4096 / elements);
}

storage::Measurement measurement(const std::string& signature, const std::string& config, double us,
                                 storage::Status status = storage::Status::kOk, const std::string& worker = "w1") {
  storage::Measurement m;
  m.signature = signature;
  m.device = kDevice;
  m.codegen_version = 1;
  m.config = config;
  m.source_digest = "digest of " + config;
  m.status = status;
  m.median_us = m.min_us = m.max_us = us;
  m.ci_low_us = us * 0.999;
  m.ci_high_us = us * 1.001;
  m.repeats = 10;
  m.worker = worker;
  return m;
}

size_t searchable(const std::vector<planner::Candidate>& space) {
  size_t n = 0;
  for (const planner::Candidate& c : space) n += c.cost.valid && c.config.library.empty();
  return n;
}

// A driver as the coordinator is one: measure what each step asks (on the hidden device), record
// it, step again, until the session is done. Returns the steps' kinds in order.
struct Driven {
  std::vector<TuningSession::Step::Kind> kinds;
  std::vector<std::string> ranked_by;  // per kMeasure step
  std::map<std::string, Asked> asked;
};

Driven drive(TuningSession& session, TuningRecords& records, const std::map<std::string, double>& scale) {
  Driven d;
  for (int guard = 0; guard < 100; ++guard) {
    const TuningSession::Step step = session.next(session.read(records, kDevice, d.asked), 0, false);
    d.kinds.push_back(step.kind);
    if (step.kind == TuningSession::Step::Kind::kDone) return d;
    if (step.kind == TuningSession::Step::Kind::kMeasure) {
      d.ranked_by.push_back(step.ranked_by);
      for (const auto& [signature, configs] : step.measure) {
        for (const planner::TileConfig& c : configs) {
          EXPECT_TRUE(d.asked[signature].configs.insert(c.str()).second) << "asked twice: " << signature << " " << c.str();
          records.record(measurement(signature, c.str(), hidden_us(c, scale.at(signature))));
        }
      }
    } else {
      for (const auto& [signature, pair] : step.interleave) {
        EXPECT_FALSE(d.asked[signature].compared) << signature << " compared twice";
        d.asked[signature].compared = true;
        storage::Measurement a = measurement(signature, pair.first, records.of(signature, kDevice).decision.time_us.at(pair.first));
        storage::Measurement b = measurement(signature, pair.second, records.of(signature, kDevice).decision.time_us.at(pair.second));
        a.interleaved_with = pair.second;
        b.interleaved_with = pair.first;
        records.record(a);
        records.record(b);
      }
    }
  }
  ADD_FAILURE() << "the session never ended";
  return d;
}

TEST(TuningSession, AJobRunsItsRoundsWithinTheBudgetNeverAsksTwiceAndUpdatesItsLearnedModel) {
  const auto groups = bert_groups();
  ASSERT_GE(groups.size(), 4u);
  std::map<std::string, double> scale;
  for (const auto& [signature, space] : groups) scale[signature] = 1.0 + static_cast<double>(scale.size());
  auto space = std::make_shared<ListedSpace>(groups);
  TuningSession session(space, MeasurePolicy{}, std::make_unique<LearnedModel>(), std::make_unique<MutationStrategy>());
  MemoryRecords records(1);

  // The opening, with nothing measured: each group's best modeled configurations.
  const TuningSession::Step first = session.next(session.read(records, kDevice, {}), 0, false);
  ASSERT_EQ(first.kind, TuningSession::Step::Kind::kMeasure);
  EXPECT_EQ(first.ranked_by, "cost model (0 measurements: too few to learn from)");
  for (const auto& [signature, configs] : first.measure) {
    const std::vector<planner::TileConfig> best = next_trials(groups.at(signature), {}, {}, 8);
    ASSERT_EQ(configs.size(), best.size()) << signature;
    for (size_t i = 0; i < configs.size(); ++i) EXPECT_EQ(configs[i].str(), best[i].str());
  }

  TuningSession again(space, MeasurePolicy{}, std::make_unique<LearnedModel>(), std::make_unique<MutationStrategy>());
  const Driven d = drive(again, records, scale);
  // Three rounds (kRoundsByDefault), the leaders compared where they are within noise, the end.
  ASSERT_GE(d.kinds.size(), 4u);
  for (size_t k = 0; k < 3; ++k) EXPECT_EQ(d.kinds[k], TuningSession::Step::Kind::kMeasure) << k;
  EXPECT_EQ(d.kinds.back(), TuningSession::Step::Kind::kDone);
  ASSERT_EQ(d.ranked_by.size(), 3u);
  // Round 1 has no data; rounds 2 and 3 are ranked by one learned model, updated (40 trees, then 10 more).
  EXPECT_EQ(d.ranked_by[0].rfind("cost model", 0), 0u) << d.ranked_by[0];
  EXPECT_NE(d.ranked_by[1].find(", " + std::to_string(LearnedModel::kFirstRounds) + " trees)"), std::string::npos)
      << d.ranked_by[1];
  EXPECT_NE(d.ranked_by[2].find(", " + std::to_string(LearnedModel::kFirstRounds + LearnedModel::kRoundsPerUpdate) + " trees)"),
            std::string::npos)
      << d.ranked_by[2];
  for (const auto& [signature, candidates] : groups) {
    const size_t budget = std::min<size_t>(kRoundsByDefault * 8, searchable(candidates));
    const Asked& a = d.asked.at(signature);
    EXPECT_EQ(a.configs.size(), budget) << signature;
    std::set<std::string> valid;
    for (const planner::Candidate& c : candidates) {
      if (c.cost.valid && c.config.library.empty()) valid.insert(c.config.str());
    }
    for (const std::string& config : a.configs) EXPECT_TRUE(valid.count(config)) << signature << ": " << config;
  }
}

TEST(TuningSession, LeadersWithinNoiseAreComparedOnceAfterTheRoundsAndOnlyWhereThisJobAskedBoth) {
  const auto groups = bert_groups();
  const std::string signature = groups.begin()->first;
  auto space = std::make_shared<ListedSpace>(std::map<std::string, std::vector<planner::Candidate>>{*groups.begin()});
  TuningSession session(space, MeasurePolicy{}, std::make_unique<AnalyticModel>(), std::make_unique<MutationStrategy>());
  MemoryRecords records(1);
  storage::Measurement a = measurement(signature, "A", 10), b = measurement(signature, "B", 10.001);
  b.ci_low_us = 9.99;  // overlaps A's interval
  records.record(a);
  records.record(b);
  records.record(measurement(signature, "C", 30));
  std::map<std::string, Asked> asked{{signature, {{"A", "B", "C"}, false}}};
  // While rounds go on, a round comes first.
  EXPECT_EQ(session.next(session.read(records, kDevice, asked), 0, false).kind, TuningSession::Step::Kind::kMeasure);
  TuningSession::Step step = session.next(session.read(records, kDevice, asked), 0, true);
  ASSERT_EQ(step.kind, TuningSession::Step::Kind::kInterleave);
  EXPECT_EQ(step.interleave.at(signature), std::make_pair(std::string("A"), std::string("B")));
  // Sent once: never again; nor where this job did not ask both.
  asked[signature].compared = true;
  EXPECT_EQ(session.next(session.read(records, kDevice, asked), 0, true).kind, TuningSession::Step::Kind::kDone);
  EXPECT_EQ(session.next(session.read(records, kDevice, {{signature, {{"A", "C"}, false}}}), 0, true).kind,
            TuningSession::Step::Kind::kDone);
  // Measured interleaved (by another job): not compared again.
  asked[signature].compared = false;
  storage::Measurement ai = a, bi = b;
  ai.interleaved_with = "B";
  bi.interleaved_with = "A";
  records.record(ai);
  records.record(bi);
  EXPECT_EQ(session.next(session.read(records, kDevice, asked), 0, true).kind, TuningSession::Step::Kind::kDone);
}

TEST(TuningSession, TheBudgetCountsEveryJobsTrialsButNotLibraryCallsAndTheClockStopsTheRounds) {
  const auto groups = bert_groups();
  // A group with library calls among its candidates and room for a round.
  auto it = groups.begin();
  std::vector<std::string> library;
  for (; it != groups.end(); ++it) {
    library.clear();
    for (const planner::Candidate& c : it->second) {
      if (!c.config.library.empty()) library.push_back(c.config.str());
    }
    if (!library.empty() && searchable(it->second) >= 16) break;
  }
  ASSERT_NE(it, groups.end()) << "no BERT group with library candidates";
  const std::string signature = it->first;
  auto space = std::make_shared<ListedSpace>(std::map<std::string, std::vector<planner::Candidate>>{*it});
  MeasurePolicy policy;
  policy.trials = 10;  // one group: a budget of 10
  policy.time_s = 60;
  ASSERT_EQ(policy.group_budget(1), 10);
  TuningSession session(space, policy, std::make_unique<AnalyticModel>(), std::make_unique<MutationStrategy>());
  MemoryRecords records(1);
  // Another job measured 6 generated configurations and every library call.
  const std::vector<planner::TileConfig> earlier = next_trials(it->second, {}, {}, 6);
  for (const planner::TileConfig& c : earlier) records.record(measurement(signature, c.str(), hidden_us(c, 1)));
  for (const std::string& l : library) records.record(measurement(signature, l, 0.5));
  TuningSession::Step step = session.next(session.read(records, kDevice, {}), 59, false);
  ASSERT_EQ(step.kind, TuningSession::Step::Kind::kMeasure);
  EXPECT_EQ(step.measure.at(signature).size(), 4u);
  EXPECT_EQ(step.ranked_by, "cost model");
  // Past the job's time: no round.
  EXPECT_EQ(session.next(session.read(records, kDevice, {}), 60, false).kind, TuningSession::Step::Kind::kDone);
  // A group whose trials all failed has no parent to mutate: no round for it.
  MemoryRecords failed(1);
  for (const planner::TileConfig& c : earlier) failed.record(measurement(signature, c.str(), 0, storage::Status::kCompileError));
  EXPECT_EQ(session.next(session.read(failed, kDevice, {}), 0, false).kind, TuningSession::Step::Kind::kDone);
}

// The same measurements in SQLite and in memory: the same records, for each identity.
TEST(TuningRecords, TheDatabaseAndMemoryGiveTheSameRecords) {
  testing::TestDir dir("records");
  storage::SearchDb db(dir / "search.db");
  DbRecords in_db(db, 1);
  MemoryRecords in_memory(1);
  const storage::DeviceKey other{"h100", "sm_90", "NVIDIA H100 80GB HBM3", 90, "13.0", "nvrtc 13.0"};
  std::vector<storage::Measurement> all = {
      measurement("g", "fast", 5, storage::Status::kOk, "w1"),
      measurement("g", "fast", 5.2, storage::Status::kOk, "w2"),
      measurement("g", "close", 5.001, storage::Status::kOk, "w1"),
      measurement("g", "slow", 9),
      measurement("g", "wrong", 1, storage::Status::kWrongResult),
      measurement("g", "flaky", 0, storage::Status::kTimeout),
      measurement("g", "flaky", 0, storage::Status::kTimeout),
      measurement("g", "dead", 0, storage::Status::kRuntimeFault),
      measurement("g", "dead", 0, storage::Status::kTimeout),
      measurement("g", "dead", 0, storage::Status::kRuntimeFault),
      measurement("h", "only", 3),
  };
  all[2].ci_high_us = 5.2;  // reaches into fast's interval (its workers' medians 5 and 5.2: 5.1)
  storage::Measurement elsewhere = measurement("g", "slow", 1);
  elsewhere.device = other;
  all.push_back(elsewhere);
  storage::Measurement older = measurement("g", "older code", 0.5);  // another codegen version: read by neither
  older.codegen_version = 2;
  all.push_back(older);
  storage::Measurement unnamed = measurement("g", "slow", 0.25);  // an identity like kDevice with an empty field
  unnamed.device.driver = "";
  all.push_back(unnamed);
  for (const storage::Measurement& m : all) {
    in_db.record(m);
    in_memory.record(m);
  }
  storage::DeviceKey driverless = kDevice;
  driverless.driver = "";
  for (const storage::DeviceKey& device : {kDevice, other, driverless}) {
    for (const std::string signature : {"g", "h", "never measured"}) {
      const GroupRecords& x = in_db.of(signature, device);
      const GroupRecords& y = in_memory.of(signature, device);
      EXPECT_EQ(x.decision.time_us, y.decision.time_us) << signature;
      EXPECT_EQ(x.decision.to_interleave, y.decision.to_interleave) << signature;
      EXPECT_EQ(x.seen, y.seen) << signature;
      EXPECT_EQ(x.settled, y.settled) << signature;
      EXPECT_EQ(x.interleaved, y.interleaved) << signature;
      EXPECT_EQ(x.digests, y.digests) << signature;
    }
  }
  const GroupRecords& g = in_memory.of("g", kDevice);
  EXPECT_EQ(g.seen, (std::set<std::string>{"close", "dead", "fast", "flaky", "slow", "wrong"}));
  EXPECT_EQ(g.settled, (std::set<std::string>{"close", "dead", "fast", "slow", "wrong"}));  // flaky: 2 transient failures
  EXPECT_EQ(g.decision.to_interleave, std::make_pair(std::string("close"), std::string("fast")));
  EXPECT_EQ(in_memory.of("g", other).decision.time_us, (std::map<std::string, double>{{"slow", 1}}));
  EXPECT_EQ(in_memory.of("g", driverless).decision.time_us, (std::map<std::string, double>{{"slow", 0.25}}));
}

}  // namespace
}  // namespace fusetune::search
