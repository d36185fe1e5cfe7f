#include "coordinator/prepared.h"

#include <nlohmann/json.hpp>
#include <set>

namespace fusetune::coordinator {

std::shared_ptr<Prepared> prepare(const std::filesystem::path& onnx, const std::string& name, const std::string& device,
                                  const JobOptions& options, bool lower) {
  auto p = std::make_shared<Prepared>();
  auto planner = std::make_shared<const JobPlanner>(onnx, name, device, options);
  if (lower) p->tasks = planner->tasks();
  p->lowered = lower;
  p->planner = std::move(planner);
  return p;
}

// Every round's offspring come from the group's search space (search::next_trials), so a
// configuration the state names is found there by its text.
std::map<std::string, std::vector<wire::Candidate>> lower_asked_later(const Prepared& p, const std::string& search_state) {
  std::map<std::string, std::vector<wire::Candidate>> out;
  const nlohmann::json state = nlohmann::json::parse(search_state, nullptr, false);
  if (!state.is_object() || !state.contains("groups") || !state["groups"].is_object()) return out;
  const nlohmann::json& groups = state["groups"];
  for (const TaskSpec& spec : p.tasks) {
    const auto g = groups.find(spec.signature);
    if (g == groups.end() || !g->is_object() || !g->contains("asked") || !(*g)["asked"].is_array()) continue;
    std::set<std::string> first;
    for (const wire::Candidate& c : spec.task.candidates()) first.insert(c.config());
    std::map<std::string, planner::TileConfig> space;
    for (const planner::Candidate& c : p.planner->group(spec.signature).candidates) space.emplace(c.config.str(), c.config);
    std::vector<planner::TileConfig> configs;
    for (const nlohmann::json& config : (*g)["asked"]) {
      if (!config.is_string() || first.count(config.get<std::string>())) continue;
      if (const auto it = space.find(config.get<std::string>()); it != space.end()) configs.push_back(it->second);
    }
    if (!configs.empty()) out[spec.signature] = p.planner->lower(spec.task, configs);
  }
  return out;
}

storage::DeviceKey job_device_key(const std::string& device) {
  return device == "host" ? storage::DeviceKey{"host", "host"} : storage::DeviceKey{device, planner::find_device(device).arch};
}

}  // namespace fusetune::coordinator
