#include "coordinator/job.h"

namespace fusetune::coordinator {

std::string search_state(const Job& job) {
  nlohmann::json groups = nlohmann::json::object();
  for (const auto& [signature, group] : job.groups) {
    nlohmann::json asked = nlohmann::json::array();
    for (const wire::Candidate& c : group.asked.candidates()) asked.push_back(c.config());
    groups[signature] = {{"asked", std::move(asked)}, {"compared", group.compared}, {"extended", group.extended}};
  }
  const nlohmann::json state = {{"rounds", job.rounds},
                                {"elapsed_s", std::chrono::duration<double>(Job::Clock::now() - job.started).count()},
                                {"search_over", job.search_over},
                                {"convergence", job.convergence},
                                {"group_convergence", job.group_convergence},
                                {"groups", std::move(groups)}};
  return state.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void restore_search(Job& job, const storage::JobRecord& rec, const nlohmann::json& saved) {
  const nlohmann::json progress = nlohmann::json::parse(rec.summary.empty() ? "{}" : rec.summary, nullptr, false);
  if (progress.is_object()) job.cache_hits = progress.value("cache_hits", size_t{0});
  if (!saved.is_object()) return;
  job.rounds = saved.value("rounds", 0);
  job.search_over = saved.value("search_over", false);
  job.convergence = saved.value("convergence", nlohmann::json::array());
  job.group_convergence = saved.value("group_convergence", nlohmann::json::object());
  job.started = Job::Clock::now() - std::chrono::duration_cast<Job::Clock::duration>(
                                        std::chrono::duration<double>(saved.value("elapsed_s", 0.0)));
}

}  // namespace fusetune::coordinator
