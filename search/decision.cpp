#include "search/decision.h"

#include <algorithm>

#include "core/error.h"

namespace fusetune::search {

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// The measurements interleaved with `rival` ("": those taken alone).
std::vector<storage::Measurement> with(const std::vector<storage::Measurement>& ms, const std::string& rival) {
  std::vector<storage::Measurement> out;
  for (const storage::Measurement& m : ms) {
    if (m.interleaved_with == rival) out.push_back(m);
  }
  return out;
}

}  // namespace

Estimate estimate(const std::vector<storage::Measurement>& ok) {
  check(!ok.empty(), "estimate: no measurement");
  struct Samples {
    std::vector<double> time, low, high;
  };
  std::map<std::string, Samples> by_worker;
  for (const storage::Measurement& m : ok) {
    check(m.status == storage::Status::kOk, "estimate: measurement of ", m.config, " is ", storage::status_name(m.status));
    const bool has_interval = m.ci_low_us > 0 && m.ci_low_us <= m.median_us && m.ci_high_us >= m.median_us;
    Samples& s = by_worker[m.worker];
    s.time.push_back(m.median_us);
    s.low.push_back(has_interval ? m.ci_low_us : m.median_us);
    s.high.push_back(has_interval ? m.ci_high_us : m.median_us);
  }
  Samples workers;
  for (const auto& [worker, s] : by_worker) {
    workers.time.push_back(median(s.time));
    workers.low.push_back(median(s.low));
    workers.high.push_back(median(s.high));
  }
  Estimate e;
  e.time_us = median(workers.time);
  e.ci_low_us = std::min(median(workers.low), e.time_us);
  e.ci_high_us = std::max(median(workers.high), e.time_us);
  e.workers = static_cast<int>(by_worker.size());
  return e;
}

bool within_noise(const Estimate& a, const Estimate& b) {
  return a.ci_low_us <= b.ci_high_us && b.ci_low_us <= a.ci_high_us;
}

GroupDecision decide_group(const std::map<std::string, std::vector<storage::Measurement>>& ok_by_config) {
  GroupDecision d;
  for (const auto& [config, ms] : ok_by_config) {
    if (ms.empty()) continue;
    const std::vector<storage::Measurement> alone = with(ms, "");
    // A candidate only ever measured interleaved (an imported file's) is compared by those.
    d.alone[config] = estimate(alone.empty() ? ms : alone);
    d.time_us[config] = d.alone[config].time_us;
  }
  if (d.alone.size() < 2) return d;
  std::vector<std::pair<double, std::string>> order;  // the map's order breaks ties by config
  for (const auto& [config, e] : d.alone) order.emplace_back(e.time_us, config);
  std::stable_sort(order.begin(), order.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
  const std::string& a = order[0].second;
  const std::string& b = order[1].second;
  if (!within_noise(d.alone.at(a), d.alone.at(b))) return d;
  const std::vector<storage::Measurement> a_with_b = with(ok_by_config.at(a), b), b_with_a = with(ok_by_config.at(b), a);
  if (a_with_b.empty() || b_with_a.empty()) {
    d.to_interleave = std::make_pair(a, b);
    return d;
  }
  const double level = (d.alone.at(a).time_us + d.alone.at(b).time_us) / 2;
  const double ia = estimate(a_with_b).time_us, ib = estimate(b_with_a).time_us;
  d.time_us[a] = level * 2 * ia / (ia + ib);
  d.time_us[b] = level * 2 * ib / (ia + ib);
  d.paired = true;
  return d;
}

}  // namespace fusetune::search
