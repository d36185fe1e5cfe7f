#include "coordinator/decisions.h"

#include <cmath>
#include <vector>

#include "codegen/kernel_ir.h"

namespace fusetune::coordinator {

const Decisions::Decided& Decisions::of(const std::string& signature, const storage::DeviceKey& device) {
  const auto key = std::make_pair(signature, device.str());
  if (auto it = decided_.find(key); it != decided_.end()) return it->second;
  std::map<std::string, std::vector<storage::Measurement>> ok;
  Decided d;
  for (storage::Measurement& r : db_.top_k(signature, device, codegen::kCodegenVersion, 100000)) {
    d.digests.emplace(r.config, r.source_digest);
    if (!r.interleaved_with.empty()) {
      d.interleaved.insert({r.config, r.interleaved_with});
      d.interleaved.insert({r.interleaved_with, r.config});
    }
    ok[r.config].push_back(std::move(r));
  }
  d.decision = search::decide_group(ok);
  d.seen = db_.configs_measured(signature, device, codegen::kCodegenVersion);
  d.settled = db_.configs_settled(signature, device, codegen::kCodegenVersion);
  return decided_[key] = std::move(d);
}

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

void Decisions::forget(const std::string& signature) {
  for (auto it = decided_.begin(); it != decided_.end();) {
    it = it->first.first == signature ? decided_.erase(it) : std::next(it);
  }
}

}  // namespace fusetune::coordinator
