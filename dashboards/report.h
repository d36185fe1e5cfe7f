// Report: a finished job as one self-contained HTML file (`fusetune report JOB --out FILE`): the
// dashboard's page with its style, Chart.js, its script and the job's data inline, nothing fetched,
// so that it opens anywhere (attached to a paper or a bug report) and draws the same charts.
//
// Takes the API's answers for the job, as /api/jobs ({"jobs": [the job], ...}) and /api/jobs/ID
// give them (coordinator/status_json.h). Guarantees: no reference to another file or address in
// the page; the data cannot end the script it is embedded in nor keep it open (its JSON has every
// '<' written \u003c, so a model named `<!--<script>` or `</script>` is data), and text in it
// that is not UTF-8 becomes U+FFFD.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace fusetune::dashboards {

std::string report_html(const nlohmann::json& jobs, const nlohmann::json& job);

}  // namespace fusetune::dashboards
