// What the service benches (service_bench, service_load) share: the result a synthetic worker
// sends for a task the moment it arrives (every candidate "ok" with made-up timings; the two
// candidates of an interleaved pair marked as timed in turn, as a real worker marks them), and
// the two figures they print about time. Header-only; not part of any library.
#pragma once

#include <algorithm>
#include <chrono>
#include <vector>

#include "proto/wire.h"

namespace fusetune::bench {

using Clock = std::chrono::steady_clock;

inline double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// The p-quantile (0 to 1) of `v` by rank; 0 for none.
inline double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

inline wire::Envelope instant_result(const wire::Task& task) {
  wire::Envelope r;
  r.mutable_result()->set_task_id(task.task_id());
  const auto& cs = task.candidates();
  const bool pair = task.policy().interleave() && cs.size() == 2;
  for (int k = 0; k < cs.size(); ++k) {
    const wire::Candidate& c = cs[k];
    wire::CandidateResult& cr = *r.mutable_result()->add_results();
    cr.set_config(c.config());
    if (pair) cr.set_interleaved_with(cs[1 - k].config());
    cr.set_source_digest(c.source_digest());
    cr.set_status("ok");
    cr.set_median_us(1.0 + static_cast<double>(c.grid() % 7));
    cr.set_min_us(cr.median_us());
    cr.set_max_us(cr.median_us());
    cr.set_repeats(1);
  }
  return r;
}

}  // namespace fusetune::bench
