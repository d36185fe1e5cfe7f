// Prometheus's text format (dashboards/metrics.h): families with HELP and TYPE, counters named
// with _total, label values escaped, histogram buckets cumulative up to +Inf with _sum and _count.
#include <gtest/gtest.h>

#include "dashboards/metrics.h"

namespace fusetune::dashboards {
namespace {

TEST(Metrics, HistogramBucketsAreCumulativeAndEndInInf) {
  Histogram h({0.001, 0.01, 0.1});
  for (double v : {0.0005, 0.001, 0.005, 0.05, 0.5, 2.0}) h.observe(v);
  Exposition x;
  x.histogram("lat_seconds", "Latency.", h);
  const std::string& t = x.text();
  EXPECT_NE(t.find("# TYPE lat_seconds histogram\n"), std::string::npos) << t;
  EXPECT_NE(t.find("lat_seconds_bucket{le=\"0.001\"} 2\n"), std::string::npos) << t;  // le is inclusive
  EXPECT_NE(t.find("lat_seconds_bucket{le=\"0.01\"} 3\n"), std::string::npos) << t;
  EXPECT_NE(t.find("lat_seconds_bucket{le=\"0.1\"} 4\n"), std::string::npos) << t;
  EXPECT_NE(t.find("lat_seconds_bucket{le=\"+Inf\"} 6\n"), std::string::npos) << t;
  EXPECT_NE(t.find("lat_seconds_count 6\n"), std::string::npos) << t;
  const size_t sum = t.find("lat_seconds_sum ");
  ASSERT_NE(sum, std::string::npos) << t;
  EXPECT_NEAR(std::stod(t.substr(sum + 16)), 2.5565, 1e-12) << t;
}

TEST(Metrics, CountersAndGaugesWithEscapedLabels) {
  Exposition x;
  x.counter("results", "Results.", {{{{"status", "ok"}}, 3}, {{{"status", "a\"b\\c\nd"}}, 1}});
  x.gauge("workers", "Workers.", {{{}, 2}});
  const std::string& t = x.text();
  EXPECT_NE(t.find("# HELP results_total Results.\n# TYPE results_total counter\n"), std::string::npos) << t;
  EXPECT_NE(t.find("results_total{status=\"ok\"} 3\n"), std::string::npos) << t;
  EXPECT_NE(t.find("results_total{status=\"a\\\"b\\\\c\\nd\"} 1\n"), std::string::npos) << t;
  EXPECT_NE(t.find("# TYPE workers gauge\nworkers 2\n"), std::string::npos) << t;
}

}  // namespace
}  // namespace fusetune::dashboards
