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

namespace {

// The job's search space: its weighed groups, each the job planner's candidates.
class JobSpace final : public search::SearchSpace {
 public:
  JobSpace(std::shared_ptr<const JobPlanner> planner, std::vector<std::string> groups)
      : planner_(std::move(planner)), groups_(std::move(groups)) {}
  std::vector<std::string> groups() const override { return groups_; }
  const std::vector<planner::Candidate>& candidates(const std::string& signature) const override {
    return planner_->group(signature).candidates;
  }

 private:
  std::shared_ptr<const JobPlanner> planner_;
  std::vector<std::string> groups_;
};

std::shared_ptr<search::TuningSession> make_session(const Job& job) {
  std::vector<std::string> signatures;
  for (const auto& [signature, group] : job.groups) signatures.push_back(signature);
  const JobOptions& o = job.planner->options();
  return std::make_shared<search::TuningSession>(std::make_shared<JobSpace>(job.planner, std::move(signatures)),
                                                 search::MeasurePolicy{o.candidates, o.trials, o.time_s},
                                                 std::make_unique<search::LearnedModel>(),
                                                 std::make_unique<search::MutationStrategy>());
}

}  // namespace

// A search round being lowered: per group the task it extends (its graph) and the configurations
// the session chose, then the kernels the pool lowered of them.
struct JobSearch::Round {
  struct Group {
    wire::Task asked;
    std::vector<planner::TileConfig> configs;
    std::vector<wire::Candidate> offspring;
  };
  std::map<std::string, Group> groups;
  std::string ranked_by;
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
  auto record = [this, id, epoch = job.epoch, trials, seconds](double tuned) {
    Job* now = live(id, epoch);
    if (!now) return;  // cancelled or resumed anew meanwhile
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

bool JobSearch::next(int64_t id, Job& job) {
  if (job.search_done) return false;
  if (!job.session) job.session = make_session(job);
  std::map<std::string, search::Asked> asked;
  for (const auto& [signature, group] : job.groups) {
    search::Asked& a = asked[signature];
    for (const wire::Candidate& c : group.asked.candidates()) a.configs.insert(c.config());
    a.compared = group.compared;
  }
  auto snapshot = std::make_shared<const search::TuningSession::Snapshot>(job.session->read(decisions_.records(), job.device, asked));
  const double elapsed = std::chrono::duration<double>(Job::Clock::now() - job.started).count();
  job.busy = true;
  offload_.post(
      [this, id, epoch = job.epoch, session = job.session, snapshot, elapsed, over = job.search_over]() -> Offload::Completion {
        auto step = std::make_shared<search::TuningSession::Step>(session->next(*snapshot, elapsed, over));
        return [this, id, epoch, step] {
          Job* now = live(id, epoch);
          if (!now) return;  // cancelled or resumed anew meanwhile
          now->busy = false;
          switch (step->kind) {
            case search::TuningSession::Step::Kind::kMeasure:
              return lower_round(id, *now, std::move(step->measure), step->ranked_by);
            case search::TuningSession::Step::Kind::kInterleave:
              if (compare_leaders(id, *now, step->interleave)) return;
              break;
            case search::TuningSession::Step::Kind::kDone:
              now->search_done = true;
              break;
          }
          hooks_.settle(id);
        };
      },
      [this, id, epoch = job.epoch](const std::string& error) {
        log_(LogIds{id, 0, ""}, "job " + std::to_string(id) + ": a search round failed, the search ends: " + error);
        Job* now = live(id, epoch);
        if (!now) return;
        now->busy = false;
        now->search_over = true;
        save(id, *now);
        hooks_.settle(id);
      });
  return true;
}

// The round's configurations lowered to kernels on the pool (each group's task graph copied for
// it), then queued: a round that queues nothing ends the rounds.
void JobSearch::lower_round(int64_t id, Job& job, std::map<std::string, std::vector<planner::TileConfig>> configs,
                            const std::string& ranked_by) {
  auto round = std::make_shared<Round>();
  round->ranked_by = ranked_by;
  for (auto& [signature, chosen] : configs) {
    Round::Group& g = round->groups[signature];
    *g.asked.mutable_graph() = job.groups.at(signature).asked.graph();
    g.configs = std::move(chosen);
  }
  auto landed = [this, id, epoch = job.epoch, round](bool lowered) {
    Job* now = live(id, epoch);
    if (!now) return;  // cancelled or resumed anew meanwhile
    now->busy = false;
    if (!lowered || !queue_round(*now, id, *round)) {
      now->search_over = true;
      save(id, *now);
      hooks_.settle(id);
    }
  };
  job.busy = true;
  offload_.post(
      [round, planner = job.planner, landed]() -> Offload::Completion {
        std::vector<Round::Group*> groups;
        for (auto& [signature, g] : round->groups) groups.push_back(&g);
        parallel_for(groups.size(), [&](size_t i) { groups[i]->offspring = planner->lower(groups[i]->asked, groups[i]->configs); });
        return [landed] { landed(true); };
      },
      [this, id, landed](const std::string& error) {
        log_(LogIds{id, 0, ""}, "job " + std::to_string(id) + ": a search round failed, the search ends: " + error);
        landed(false);
      });
}

// A search round lowered: each group's offspring not measured or asked yet queued on its task.
// A task in flight for another job (the round landed while a job sharing it measured its own)
// gets them once it is done: they are asked, so maybe_finish extends the task with them. Returns
// whether it queued any.
bool JobSearch::queue_round(Job& job, int64_t id, Round& round) {
  int queued = 0, trials = 0;
  for (auto& [signature, r] : round.groups) {
    Job::Group& group = job.groups.at(signature);
    // While the round was lowered, results went on arriving (another job's round on a shared
    // task may have measured the same configurations): what is measured or asked now is left out.
    std::set<std::string> known = decisions_.of(signature, job.device).seen;  // read afresh after each result
    for (const wire::Candidate& c : group.asked.candidates()) known.insert(c.config());
    wire::Task todo = group.asked;
    todo.clear_candidates();
    for (const wire::Candidate& c : r.offspring) {
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
  if (queued == 0) return false;
  ++job.rounds;
  save(id, job);
  log_(LogIds{id, 0, ""},
       LogEvent{"search_round",
                {{"round", static_cast<int64_t>(job.rounds + 1)}, {"trials", static_cast<int64_t>(trials)},
                 {"groups", static_cast<int64_t>(queued)}, {"ranked_by", round.ranked_by}}},
       "job " + std::to_string(id) + ": search round " + std::to_string(job.rounds + 1) + ": " + std::to_string(trials) +
      " mutations of the best measured configurations in " + std::to_string(queued) + " groups, ranked by the " +
      round.ranked_by);
  return true;
}

// The session's pairs within noise, each group's task queued again with just those two and
// Policy::interleave; every group named is marked compared (once per group, whether or not its
// task could be queued). Returns whether any was queued (the job then waits).
bool JobSearch::compare_leaders(int64_t id, Job& job, const std::map<std::string, std::pair<std::string, std::string>>& pairs) {
  bool queued = false;
  for (const auto& [signature, pair] : pairs) {
    Job::Group& group = job.groups.at(signature);
    group.compared = true;
    // Read again: while the step was taken another job sharing the task may have compared them.
    const Decisions::Decided& now = decisions_.of(signature, job.device);
    if (!now.interleaved.empty() || now.decision.to_interleave != pair) continue;
    wire::Task todo = group.asked;
    todo.clear_candidates();
    for (const std::string& config : {pair.first, pair.second}) {
      for (const wire::Candidate& c : group.asked.candidates()) {
        if (c.config() == config) {
          *todo.add_candidates() = c;
          break;
        }
      }
    }
    todo.mutable_policy()->set_interleave(true);
    const int64_t task = requeue_group(id, job, group, todo);
    if (task == 0) continue;
    queued = true;
    const search::GroupDecision& decision = decisions_.of(signature, job.device).decision;  // the task is queued: read anew
    const search::Estimate& a = decision.alone.at(pair.first);
    const search::Estimate& b = decision.alone.at(pair.second);
    char line[400];
    std::snprintf(line, sizeof line,
                  "job %lld: task %lld: %s (%.2f us, 95%% CI %.2f-%.2f) and %s (%.2f us, %.2f-%.2f) are within noise: "
                  "measured again, interleaved",
                  static_cast<long long>(id), static_cast<long long>(task), pair.first.c_str(), a.time_us,
                  a.ci_low_us, a.ci_high_us, pair.second.c_str(), b.time_us, b.ci_low_us, b.ci_high_us);
    log_(LogIds{id, task, ""}, LogEvent{"leaders_interleaved", {{"first", pair.first}, {"second", pair.second}}}, line);
  }
  save(id, job);
  return queued;
}

Job* JobSearch::live(int64_t id, uint64_t epoch) const {
  Job* job = hooks_.find(id);
  return job != nullptr && job->epoch == epoch ? job : nullptr;
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

}  // namespace fusetune::coordinator
