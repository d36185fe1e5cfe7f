// Status as JSON: the shape `fusetune status --json` prints and the HTTP API's /api/jobs returns
// (docs/dashboards.md), from the coordinator's status reply: {"jobs": [...], "workers": N}, each
// job with the fields of wire::JobStatus and its summary as an object (null while it runs).
#pragma once

#include <nlohmann/json.hpp>
#include <vector>

#include "fusetune_proto/service.pb.h"

namespace fusetune::coordinator {

nlohmann::json status_json(const std::vector<wire::JobStatus>& jobs, int workers);

}  // namespace fusetune::coordinator
