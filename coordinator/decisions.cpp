#include "coordinator/decisions.h"

#include <cmath>

#include "codegen/kernel_ir.h"

namespace fusetune::coordinator {

Decisions::Decisions(storage::SearchDb& db) : records_(db, codegen::kCodegenVersion) {}

Measured Decisions::measured(const JobPlanner& planner, const storage::DeviceKey& device) {
  Measured m;
  for (const planner::GroupPlan& gp : planner.modeled().compared) {
    // What has any measurement is known, so the space's untried configurations (up to
    // kSearchSpace per group) cost no query each.
    const Decided& d = of(gp.signature, device);
    for (const planner::Candidate& c : gp.candidates) {
      const std::string cfg = c.config.str();
      if (auto it = d.decision.time_us.find(cfg); it != d.decision.time_us.end()) {
        m.times[{gp.signature, cfg}] = it->second;
        m.digests[{gp.signature, cfg}] = d.digests.at(cfg);
      } else if (d.settled.count(cfg)) {
        m.times[{gp.signature, cfg}] = INFINITY;
      }
    }
  }
  return m;
}

}  // namespace fusetune::coordinator
