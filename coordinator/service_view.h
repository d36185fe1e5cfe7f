// CoordinatorView: what the coordinator shows of itself to the HTTP API (dashboards/api.h), read
// from its job queue, job manager, scheduler and transport on the event loop.
//
// Takes references to those parts and a function that says why the database cannot be written
// ("" while it can). Guarantees: nothing is changed by a view's answer; a running job's detail
// carries its convergence so far and, for each group whose task is done, its best measured
// configuration since that result (not only when a whole search round ends); a finished job's
// comes from its summary.
#pragma once

#include <functional>
#include <string>

#include "coordinator/job_manager.h"
#include "coordinator/scheduler.h"
#include "coordinator/transport.h"
#include "dashboards/api.h"

namespace fusetune::coordinator {

class CoordinatorView : public dashboards::ServiceView {
 public:
  CoordinatorView(storage::SearchDb& db, storage::JobQueue& queue, JobManager& jobs, Scheduler& scheduler,
                  Decisions& decisions, const Transport& transport, std::function<std::string()> warning)
      : db_(db), queue_(queue), jobs_(jobs), scheduler_(scheduler), decisions_(decisions), transport_(transport),
        warning_(std::move(warning)) {}

  nlohmann::json jobs() const override;
  std::optional<nlohmann::json> job(int64_t id) const override;
  std::optional<nlohmann::json> tasks(int64_t id) const override;
  nlohmann::json workers() const override;
  void metrics(dashboards::Exposition& x) const override;

 private:
  storage::SearchDb& db_;
  storage::JobQueue& queue_;
  JobManager& jobs_;
  Scheduler& scheduler_;
  Decisions& decisions_;
  const Transport& transport_;
  std::function<std::string()> warning_;
};

}  // namespace fusetune::coordinator
