// What the backends share (backend/backend.h): the summary of timed runs.
#include "backend/backend.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace fusetune::backend {

Timing summarize_times(std::vector<double> times) {
  check(!times.empty(), "no timed runs");
  Timing t;
  t.repeats = static_cast<int>(times.size());
  std::sort(times.begin(), times.end());
  t.min_us = times.front();
  t.max_us = times.back();
  const size_t n = times.size();
  t.median_us = n % 2 ? times[n / 2] : 0.5 * (times[n / 2 - 1] + times[n / 2]);
  const double half = 1.96 * std::sqrt(static_cast<double>(n));
  const auto rank = [&](double r) { return static_cast<size_t>(std::clamp(r, 1.0, static_cast<double>(n))) - 1; };
  t.ci_low_us = times[rank(std::floor((static_cast<double>(n) - half) / 2))];
  t.ci_high_us = times[rank(std::ceil(1 + (static_cast<double>(n) + half) / 2))];
  return t;
}

}  // namespace fusetune::backend
