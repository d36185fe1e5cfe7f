// The HTTP API (docs/dashboards.md): /metrics, /api/jobs, /api/jobs/ID, /api/jobs/ID/tasks and
// /api/workers, answered from a read-only view of the service.
//
// Takes a ServiceView (what the coordinator shows of its state: it gives one over its jobs,
// workers and database) and a request. Guarantees: the view is only read; a path it does not know,
// or a job id that is not a whole positive number naming a job, gets 404 with {"error": "..."}
// naming it; text that is not UTF-8 (a path, an old database's names) becomes U+FFFD in the answer
// instead of failing it.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>

#include "dashboards/http_server.h"
#include "dashboards/metrics.h"

namespace fusetune::dashboards {

class ServiceView {
 public:
  virtual ~ServiceView() = default;
  // {"jobs": [...], "workers": N} and "warning" while the service takes no new work.
  virtual nlohmann::json jobs() const = 0;
  // A job with its convergence and candidates by status; nullopt for no such job.
  virtual std::optional<nlohmann::json> job(int64_t id) const = 0;
  // {"job_id", "tasks": [{"task_id", "signature", "state", "attempts", "worker", "error", "candidates"}]}.
  virtual std::optional<nlohmann::json> tasks(int64_t id) const = 0;
  // {"workers": [...], with their recent leases, and the result counters}.
  virtual nlohmann::json workers() const = 0;
  // The service's metrics, added to `x`.
  virtual void metrics(Exposition& x) const = 0;
};

HttpReply answer(const ServiceView& view, const HttpRequest& request);

}  // namespace fusetune::dashboards
