#include "coordinator/job_search.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <set>

#include "codegen/kernel_ir.h"
#include "core/parallel.h"
#include "search/learned_model.h"
#include "search/strategy.h"

namespace fusetune::coordinator {

// A group's part of the next search round: what the loop read from the database (the task it
// extends, what was measured and tried, how many trials fit the budget), and the kernels the pool
// lowered for it.
struct JobSearch::RoundAsk {
  std::string signature;
  wire::Task asked;
  std::map<std::string, double> measured;  // successful medians, by configuration
  std::set<std::string> tried;
  size_t trials = 0;
  std::vector<wire::Candidate> offspring;
};

JobSearch::JobSearch(storage::JobQueue& queue, Offload& offload, Decisions& decisions, const EventLog& log, Hooks hooks)
    : queue_(queue), offload_(offload), decisions_(decisions), log_(log), hooks_(std::move(hooks)) {}

void JobSearch::save(int64_t id, const Job& job) { queue_.set_search_state(id, search_state(job)); }

nlohmann::json convergence_point(const Decisions::Decided& d, const Job::Group& group, double seconds) {
  int64_t tried = 0;
  for (const wire::Candidate& c : group.asked.candidates()) tried += d.settled.count(c.config());
  double best = INFINITY;
  for (const auto& [config, us] : d.decision.time_us) best = std::min(best, us);
  return {tried, std::isfinite(best) ? nlohmann::json(best) : nlohmann::json(), seconds};
}

void JobSearch::record_convergence(int64_t id, Job& job) {
  const double seconds = std::chrono::duration<double>(Job::Clock::now() - job.started).count();
  int64_t trials = 0;
  for (const auto& [signature, group] : job.groups) {
    nlohmann::json point = convergence_point(decisions_.of(signature, job.device), group, seconds);
    trials += point[0].get<int64_t>();
    job.group_convergence[signature].push_back(std::move(point));
  }
  auto record = [this, id, trials, seconds](double tuned) {
    Job* now = hooks_.find(id);
    if (!now) return;  // cancelled meanwhile
    now->busy = false;
    now->convergence.push_back({{"round", now->rounds + 1},
                                {"trials", trials},
                                {"seconds", seconds},
                                {"tuned_us", std::isfinite(tuned) ? nlohmann::json(tuned) : nlohmann::json()}});
    save(id, *now);
    hooks_.settle(id);
  };
  job.busy = true;
  auto m = std::make_shared<Measured>(decisions_.measured(*job.planner, job.device));
  offload_.post(
      [m, record, planner = job.planner]() -> Offload::Completion {
        const double tuned = planner->summary(planner->final_plan(m->times)).tuned_us;
        return [record, tuned] { record(tuned); };
      },
      [record](const std::string&) { record(NAN); });  // nothing measured works yet: no plan to report
}

bool JobSearch::search_round(int64_t id, Job& job) {
  if (job.search_over) return false;
  const JobOptions& o = job.planner->options();
  if (o.time_s > 0 && std::chrono::duration<double>(Job::Clock::now() - job.started).count() >= o.time_s) return false;
  const int budget = group_budget(job);
  // The learned model's data: what this identity measured of the job's groups so far (the cost
  // model ranks while that is too little: LearnedModel::kMinGroups, kMinSamples).
  std::vector<search::MeasuredGroup> data;
  std::vector<RoundAsk> asks;
  for (auto& [signature, group] : job.groups) {
    const Decisions::Decided& d = decisions_.of(signature, job.device);
    data.push_back(search::measured_group(job.planner->group(signature).candidates, d.decision.time_us));
    // Tried: what this job asked, and whatever the database holds for the group on this identity
    // (another job's rounds count against the budget too).
    RoundAsk a{signature, group.asked, d.decision.time_us, d.seen, 0, {}};
    for (const wire::Candidate& c : group.asked.candidates()) a.tried.insert(c.config());
    int generated = 0;  // library calls are measured besides the budget
    for (const std::string& config : a.tried) generated += config.find("library=") == std::string::npos;
    if (generated >= budget) continue;
    if (a.measured.empty()) continue;  // nothing works yet: no parent to mutate
    a.trials = static_cast<size_t>(std::min(o.candidates, budget - generated));
    asks.push_back(std::move(a));
  }
  if (asks.empty()) return false;
  job.busy = true;
  auto round = std::make_shared<std::vector<RoundAsk>>(std::move(asks));
  auto landed = [this, id, round](const std::string& ranked_by) {
    Job* now = hooks_.find(id);
    if (!now) return;  // cancelled meanwhile
    now->busy = false;
    if (ranked_by.empty() || !queue_round(*now, id, *round, ranked_by)) {
      now->search_over = true;
      save(id, *now);
      hooks_.settle(id);
    }
  };
  offload_.post(
      [round, data = std::move(data), planner = job.planner, landed]() -> Offload::Completion {
        search::LearnedModel model;
        model.train(data);
        parallel_for(round->size(), [&](size_t i) {
          RoundAsk& a = (*round)[i];
          const std::vector<planner::Candidate>& space = planner->group(a.signature).candidates;
          a.offspring = planner->lower(a.asked, search::next_round(space, a.measured, a.tried, a.trials, &model));
        });
        const std::string ranked_by =
            model.trained() ? "learned model (" + std::to_string(model.samples()) + " measurements)"
                            : "cost model (" + std::to_string(model.samples()) + " measurements: too few to learn from)";
        return [landed, ranked_by] { landed(ranked_by); };
      },
      [this, id, landed](const std::string& error) {
        log_(LogIds{id, 0, ""}, "job " + std::to_string(id) + ": a search round failed, the search ends: " + error);
        landed("");
      });
  return true;
}

// A search round lowered: each group's offspring not measured or asked yet queued on its task.
// A task in flight for another job (the round landed while a job sharing it measured its own)
// gets them once it is done: they are asked, so maybe_finish extends the task with them. A round
// that queues nothing (offspring the code generator cannot express, or all measured meanwhile)
// ends the search; returns whether it queued any.
bool JobSearch::queue_round(Job& job, int64_t id, std::vector<RoundAsk>& asks, const std::string& ranked_by) {
  int queued = 0, trials = 0;
  for (RoundAsk& a : asks) {
    Job::Group& group = job.groups.at(a.signature);
    // While the round was lowered, results went on arriving (another job's round on a shared
    // task may have measured the same configurations): what is measured or asked now is left out.
    std::set<std::string> known = decisions_.of(a.signature, job.device).seen;  // read afresh after each result
    for (const wire::Candidate& c : group.asked.candidates()) known.insert(c.config());
    wire::Task todo = group.asked;
    todo.clear_candidates();
    for (const wire::Candidate& c : a.offspring) {
      if (known.count(c.config())) continue;
      *todo.add_candidates() = c;
      *group.asked.add_candidates() = c;
    }
    if (todo.candidates_size() == 0) continue;
    group.extended = 0;
    requeue_group(id, job, group, todo);  // 0: in flight for another job, extended after
    ++queued;
    trials += todo.candidates_size();
  }
  if (queued == 0) {
    job.search_over = true;
    return false;
  }
  ++job.rounds;
  save(id, job);
  log_(LogIds{id, 0, ""}, "job " + std::to_string(id) + ": search round " + std::to_string(job.rounds + 1) + ": " + std::to_string(trials) +
      " mutations of the best measured configurations in " + std::to_string(queued) + " groups, ranked by the " +
      ranked_by);
  return true;
}

bool JobSearch::compare_leaders(int64_t id, Job& job) {
  bool queued = false;
  for (auto& [signature, group] : job.groups) {
    if (group.compared) continue;
    const Decisions::Decided& decided_now = decisions_.of(signature, job.device);
    const search::GroupDecision decision = decided_now.decision;
    const auto& pair = decision.to_interleave;
    if (!pair) continue;
    if (!decided_now.interleaved.empty()) {  // compared already, by a job sharing the task: once per group
      group.compared = true;
      continue;
    }
    wire::Task todo = group.asked;
    todo.clear_candidates();
    for (const std::string& config : {pair->first, pair->second}) {
      for (const wire::Candidate& c : group.asked.candidates()) {
        if (c.config() == config) *todo.add_candidates() = c;
      }
    }
    if (todo.candidates_size() != 2) continue;  // measured for another job's candidates: not ours to compare
    todo.mutable_policy()->set_interleave(true);
    group.compared = true;
    const int64_t task = requeue_group(id, job, group, todo);
    if (task == 0) continue;
    queued = true;
    const search::Estimate& a = decision.alone.at(pair->first);
    const search::Estimate& b = decision.alone.at(pair->second);
    char line[400];
    std::snprintf(line, sizeof line,
                  "job %lld: task %lld: %s (%.2f us, 95%% CI %.2f-%.2f) and %s (%.2f us, %.2f-%.2f) are within noise: "
                  "measured again, interleaved",
                  static_cast<long long>(id), static_cast<long long>(task), pair->first.c_str(), a.time_us,
                  a.ci_low_us, a.ci_high_us, pair->second.c_str(), b.time_us, b.ci_low_us, b.ci_high_us);
    log_(LogIds{id, task, ""}, line);
  }
  if (queued) save(id, job);
  return queued;
}

// Queues a group's task with `todo` as its payload: extends the task when it is done, creates it
// (linked to the job) for a group the database had answered. Returns the task's id when it is
// queued, 0 when it is someone else's and in flight (it is then left alone).
int64_t JobSearch::requeue_group(int64_t id, Job& job, Job::Group& group, const wire::Task& todo) {
  const std::string payload = todo.SerializeAsString();
  if (group.task == 0) {
    group.task = queue_.ensure_task(todo.signature(), job.device, codegen::kCodegenVersion, payload);
    queue_.link_job_task(id, group.task);
    job.tasks.push_back(group.task);
  }
  const bool queued = queue_.extend_task(group.task, payload) || queue_.task(group.task)->state == storage::TaskState::kQueued;
  return queued ? group.task : 0;
}

// The trials of the job's budget for one group: JobOptions::trials spread over the groups, or
// kRoundsByDefault rounds of `candidates`; never fewer than one round.
int JobSearch::group_budget(const Job& job) const {
  const JobOptions& o = job.planner->options();
  if (o.trials == 0) return kRoundsByDefault * o.candidates;
  return std::max(o.candidates, o.trials / std::max<int>(1, static_cast<int>(job.groups.size())));
}

}  // namespace fusetune::coordinator
