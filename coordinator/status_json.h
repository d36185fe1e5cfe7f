// Status as JSON: the shape `fusetune status --json` prints and the HTTP API's /api/jobs returns
// (docs/dashboards.md), from the coordinator's status reply: {"jobs": [...], "workers": N}, each
// job with the fields of wire::JobStatus and its summary as an object (null while it runs); a
// job's detail (/api/jobs/ID, `fusetune report`) adds its convergence: given while it runs, from
// its summary once it is done, and its candidates by status (failures by class). job_status_of makes a job's status from its database rows alone.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "fusetune_proto/service.pb.h"
#include "storage/job_queue.h"

namespace fusetune::coordinator {

// `warning` (StatusReply.warning), when not empty, is given as "warning".
nlohmann::json status_json(const std::vector<wire::JobStatus>& jobs, int workers, const std::string& warning = "");
nlohmann::json job_detail_json(const wire::JobStatus& job, const std::map<std::string, int64_t>& by_status,
                               const nlohmann::json& convergence = nullptr, const nlohmann::json& group_convergence = nullptr);
wire::JobStatus job_status_of(const storage::JobRecord& record, const storage::JobProgress& progress);

}  // namespace fusetune::coordinator
