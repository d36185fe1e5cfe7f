// fusetune report (its options: tools/command_table.cpp): a job as one self-contained HTML page
// (dashboards/report.h) from the search database alone: no coordinator needs to run.
#include <cstdio>
#include <filesystem>

#include "coordinator/status_json.h"
#include "core/error.h"
#include "core/files.h"
#include "dashboards/report.h"
#include "storage/job_queue.h"
#include "storage/search_db.h"
#include "tools/cli_args.h"
#include "tools/command_table.h"
#include "tools/commands.h"

namespace fusetune::cli {

int cmd_report(const std::vector<std::string>& argv) {
  const CommandSpec& spec = command_spec("report");
  const Args args = parse_args(spec, argv);
  check_usage(args.positional().size() == 1, spec);
  int64_t id = 0;
  try {
    id = std::stoll(args.positional()[0]);
  } catch (const std::exception&) {
  }
  check(id > 0, "'", args.positional()[0], "' is not a job id");
  const std::filesystem::path db_path = args.has("db") ? std::filesystem::path(args.get("db")) : default_db_path();
  check(std::filesystem::exists(db_path), db_path.string(), ": no search database there (give --db PATH)");
  storage::SearchDb db(db_path);
  storage::JobQueue queue(db);
  const auto record = queue.job(id);
  check(record.has_value(), db_path.string(), ": no job ", id);
  const wire::JobStatus status = coordinator::job_status_of(*record, queue.job_progress(id));
  const std::string page = dashboards::report_html(coordinator::status_json({status}, 0), coordinator::job_detail_json(status, queue.job_measurements_by_status(id)));
  write_file_atomically(args.get("out"), page);
  std::printf("report of job %lld (%s, %s) written to %s\n", static_cast<long long>(id), status.model_name().c_str(),
              status.state().c_str(), args.get("out").c_str());
  return 0;
}

}  // namespace fusetune::cli
