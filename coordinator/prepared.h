// Prepared: a job's model imported and planned (a JobPlanner) and its tasks lowered, made on the
// coordinator's pool and handed to its event loop; and the device key a job names.
//
// prepare takes a stored model's .onnx, its name, the device and the job's options; with `lower`
// it lowers the tasks too (the slow part of a submission). lower_asked_later takes a resumed job's
// search state ({"groups": {signature: {"asked": [config, ...]}}}) and lowers again, from each
// group's search space, the configurations its later rounds asked beyond the group's first task.
// Guarantees: a configuration the space no longer has, or a malformed state, is left out, never
// an error; the planner is immutable and shared by everything the job does after.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "coordinator/job_planner.h"
#include "storage/search_db.h"

namespace fusetune::coordinator {

struct Prepared {
  std::shared_ptr<const JobPlanner> planner;
  std::vector<TaskSpec> tasks;
  bool lowered = false;  // `tasks` made (a submission is answered before: they follow on the pool)
  // A job resumed in the middle of its search: what its later rounds asked of each group (by
  // signature), lowered again from the configurations its search state names.
  std::map<std::string, std::vector<wire::Candidate>> asked_later;
};

std::shared_ptr<Prepared> prepare(const std::filesystem::path& onnx, const std::string& name, const std::string& device,
                                  const JobOptions& options, bool lower = true);

std::map<std::string, std::vector<wire::Candidate>> lower_asked_later(const Prepared& p, const std::string& search_state);

// The device a job names, as the search database keys it ("host", or a GPU of planner/device.h).
storage::DeviceKey job_device_key(const std::string& device);

}  // namespace fusetune::coordinator
