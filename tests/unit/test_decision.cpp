// The decision rule (search/decision.h) and the statistics it reads (backend::summarize_times):
// the median's confidence interval from order statistics, one noisy worker outvoted, which two
// candidates are sent back to be interleaved, and how their interleaved run orders them.
#include <gtest/gtest.h>

#include <numeric>

#include "backend/backend.h"
#include "core/error.h"
#include "search/decision.h"

namespace fusetune::search {
namespace {

storage::Measurement ok(const std::string& worker, double median, double low, double high, const std::string& rival = "") {
  storage::Measurement m;
  m.config = "tile=1";
  m.worker = worker;
  m.median_us = m.min_us = m.max_us = median;
  m.ci_low_us = low;
  m.ci_high_us = high;
  m.interleaved_with = rival;
  return m;
}

TEST(Statistics, TheMediansIntervalIsTheOrderStatisticsOfItsRanks) {
  std::vector<double> hundred(100);
  std::iota(hundred.begin(), hundred.end(), 1.0);
  std::reverse(hundred.begin(), hundred.end());  // order does not matter
  const backend::Timing t = backend::summarize_times(hundred);
  EXPECT_DOUBLE_EQ(t.median_us, 50.5);
  // ranks floor((100 - 19.6) / 2) = 40 and ceil(1 + (100 + 19.6) / 2) = 61
  EXPECT_DOUBLE_EQ(t.ci_low_us, 40.0);
  EXPECT_DOUBLE_EQ(t.ci_high_us, 61.0);
  const backend::Timing five = backend::summarize_times({5, 1, 4, 2, 3});
  EXPECT_DOUBLE_EQ(five.ci_low_us, 1.0);  // too few runs for anything narrower than [min, max]
  EXPECT_DOUBLE_EQ(five.ci_high_us, 5.0);
  const backend::Timing one = backend::summarize_times({7});
  EXPECT_DOUBLE_EQ(one.ci_low_us, 7.0);
  EXPECT_DOUBLE_EQ(one.ci_high_us, 7.0);
  EXPECT_THROW(backend::summarize_times({}), Error);
}

TEST(Decision, EachWorkerCountsOnceAndTheMedianOverWorkersDecides) {
  // one worker that reports a candidate 10x fast does not make it the fastest
  Estimate e = estimate({ok("w1", 10, 9, 11), ok("w2", 10.5, 10, 11), ok("w3", 1, 0.9, 1.1)});
  EXPECT_DOUBLE_EQ(e.time_us, 10.0);
  EXPECT_DOUBLE_EQ(e.ci_low_us, 9.0);
  EXPECT_DOUBLE_EQ(e.ci_high_us, 11.0);
  EXPECT_EQ(e.workers, 3);
  // a worker's repeated measurements count once (their median); two workers: the middle
  e = estimate({ok("w1", 4, 3, 5), ok("w1", 6, 5, 7), ok("w1", 100, 90, 110), ok("w2", 8, 7, 9)});
  EXPECT_DOUBLE_EQ(e.time_us, 7.0);
  EXPECT_EQ(e.workers, 2);
  // without an interval, a measurement is a point
  e = estimate({ok("w1", 3, 0, 0)});
  EXPECT_DOUBLE_EQ(e.ci_low_us, 3.0);
  EXPECT_DOUBLE_EQ(e.ci_high_us, 3.0);
  EXPECT_THROW(estimate({}), Error);
  storage::Measurement failed = ok("w1", 3, 2, 4);
  failed.status = storage::Status::kTimeout;
  EXPECT_THROW(estimate({failed}), Error);
}

storage::Measurement at(const std::string& config, double median, double low, double high, const std::string& rival = "") {
  storage::Measurement m = ok("w1", median, low, high, rival);
  m.config = config;
  return m;
}

TEST(Decision, TwoLeadersWithinNoiseAreSentToBeInterleavedOnce) {
  std::map<std::string, std::vector<storage::Measurement>> g = {
      {"c", {at("c", 10.5, 9.5, 11.5)}}, {"a", {at("a", 10, 9, 11)}}, {"z", {at("z", 30, 29, 31)}}};
  GroupDecision d = decide_group(g);
  ASSERT_TRUE(d.to_interleave.has_value());
  EXPECT_EQ(d.to_interleave->first, "a");  // the faster alone first
  EXPECT_EQ(d.to_interleave->second, "c");
  EXPECT_FALSE(d.paired);
  EXPECT_DOUBLE_EQ(d.time_us["a"], 10.0);
  // Interleaved, c was faster: the pair's level (10.25) split 9 : 12.
  g["a"].push_back(at("a", 12, 11.8, 12.2, "c"));
  g["c"].push_back(at("c", 9, 8.8, 9.2, "a"));
  g["z"].push_back(at("z", 1, 1, 1, "y"));  // interleaved with another rival: not this pair's evidence
  d = decide_group(g);
  EXPECT_FALSE(d.to_interleave.has_value());  // measured once: never again
  EXPECT_TRUE(d.paired);
  EXPECT_DOUBLE_EQ(d.time_us["c"], 10.25 * 2 * 9 / 21);
  EXPECT_DOUBLE_EQ(d.time_us["a"], 10.25 * 2 * 12 / 21);
  EXPECT_DOUBLE_EQ(d.time_us["z"], 30.0);  // the others keep their times alone
  // Interleaved with a third candidate only: not evidence about this pair; asked again.
  g["a"].back().interleaved_with = "z";
  EXPECT_TRUE(decide_group(g).to_interleave.has_value());
  g["a"].back().interleaved_with = "c";
  EXPECT_DOUBLE_EQ(d.alone["a"].time_us, 10.0);  // the estimates alone are unchanged
  // Only one of the two interleaved (the other's pair run failed): asked again.
  g["c"].pop_back();
  EXPECT_TRUE(decide_group(g).to_interleave.has_value());
}

TEST(Decision, LeadersApartOrAloneNeedNoComparison) {
  std::map<std::string, std::vector<storage::Measurement>> g = {{"a", {at("a", 10, 9, 11)}}, {"c", {at("c", 12, 11.5, 12.5)}}};
  GroupDecision d = decide_group(g);
  EXPECT_FALSE(d.to_interleave.has_value());
  EXPECT_FALSE(d.paired);
  EXPECT_FALSE(decide_group({{"a", {at("a", 1, 1, 1)}}}).to_interleave.has_value());
  // equal times: the config text orders them
  d = decide_group({{"y", {at("y", 2, 1, 3)}}, {"x", {at("x", 2, 1, 3)}}});
  ASSERT_TRUE(d.to_interleave.has_value());
  EXPECT_EQ(d.to_interleave->first, "x");
  // several workers: one noisy one does not make a candidate the leader
  d = decide_group({{"a", {at("a", 10, 9.9, 10.1)}},
                    {"b", {ok("w1", 11, 10.9, 11.1), ok("w2", 11.2, 11.1, 11.3), ok("w3", 1, 0.9, 1.1)}}});
  EXPECT_FALSE(d.to_interleave.has_value());
  EXPECT_DOUBLE_EQ(d.time_us["b"], 11.0);
}

}  // namespace
}  // namespace fusetune::search
