#include "coordinator/status_json.h"

namespace fusetune::coordinator {

nlohmann::json status_json(const std::vector<wire::JobStatus>& jobs, int workers, const std::string& warning) {
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
  nlohmann::json out = {{"jobs", list}, {"workers", workers}};
  if (!warning.empty()) out["warning"] = warning;
  return out;
}

nlohmann::json job_detail_json(const wire::JobStatus& job, const std::map<std::string, int64_t>& by_status,
                               const nlohmann::json& convergence, const nlohmann::json& group_convergence) {
  nlohmann::json j = status_json({job}, 0)["jobs"][0];
  j["candidates_by_status"] = by_status;
  const nlohmann::json& summary = j["summary"];
  auto from_summary = [&](const char* key, nlohmann::json empty) {
    return summary.is_object() && summary.contains(key) ? summary[key] : empty;
  };
  j["convergence"] = convergence.is_null() ? from_summary("convergence", nlohmann::json::array()) : convergence;
  j["group_convergence"] =
      group_convergence.is_null() ? from_summary("group_convergence", nlohmann::json::object()) : group_convergence;
  j["group_details"] = from_summary("group_details", nlohmann::json::array());
  return j;
}

wire::JobStatus job_status_of(const storage::JobRecord& r, const storage::JobProgress& p) {
  wire::JobStatus s;
  s.set_job_id(r.id);
  s.set_model_name(r.model_name);
  s.set_device(r.device.name);
  if (r.identity) s.set_identity(r.identity->str());
  s.set_state(storage::job_state_name(r.state));
  s.set_tasks(p.tasks);
  s.set_tasks_done(p.done);
  s.set_tasks_failed(p.failed);
  s.set_candidates_measured(p.measurements);
  s.set_error(r.error);
  s.set_summary(r.summary);
  if (!r.summary.empty()) {
    const auto j = nlohmann::json::parse(r.summary, nullptr, false);
    if (j.is_object() && j.contains("cache_hits")) s.set_cache_hits(j["cache_hits"].get<int>());
  }
  return s;
}

}  // namespace fusetune::coordinator
