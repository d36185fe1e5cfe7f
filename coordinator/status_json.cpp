#include "coordinator/status_json.h"

namespace fusetune::coordinator {

nlohmann::json status_json(const std::vector<wire::JobStatus>& jobs, int workers) {
  nlohmann::json list = nlohmann::json::array();
  for (const wire::JobStatus& j : jobs) {
    const nlohmann::json summary = nlohmann::json::parse(j.summary(), nullptr, false);
    list.push_back({{"job_id", j.job_id()},
                    {"model_name", j.model_name()},
                    {"device", j.device()},
                    {"identity", j.identity()},
                    {"state", j.state()},
                    {"tasks", j.tasks()},
                    {"tasks_done", j.tasks_done()},
                    {"tasks_failed", j.tasks_failed()},
                    {"candidates_measured", j.candidates_measured()},
                    {"cache_hits", j.cache_hits()},
                    {"error", j.error()},
                    {"summary", summary.is_object() ? summary : nlohmann::json()}});
  }
  return {{"jobs", list}, {"workers", workers}};
}

}  // namespace fusetune::coordinator
