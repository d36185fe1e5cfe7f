// search_eval: how well the search strategies find a group's best configuration, judged against
// the whole space measured once (issue 10's evaluation), on the host or on a GPU.
//
//   search_eval [--models cnn_small,resnet_small,...] [--groups N] [--min-space N] [--max-space N]
//               [--seed S] [--fusetune PATH] [--device host|ORDINAL]
//
// For each test model (tests/data/models/NAME/model.onnx), its weighed groups are planned as a
// job for --device plans them (coordinator/job_planner.h): with `host` (the default), h100
// kernels measured on the host's SIMT executor; with a CUDA ordinal, kernels for that GPU's
// planner description (h100 on an H100) measured on it; a group
// whose search space (the planner's valid configurations the code generator can express, library
// calls left out) has between --min-space and --max-space configurations is measured whole, every
// configuration compiled, verified and timed in the worker's measuring child (worker/sandbox.h):
// the ground truth. Then each strategy is replayed against that table, trial by trial:
//  - model: the cost model's order (what `--trials` of one round measures);
//  - model + mutations: the shipped search, search::TuningSession (the session the coordinator's
//    job search steps: the cost model's best 8, then rounds of 8 mutations of the 3 best measured
//    so far, search/strategy.h), as a job of that one group whose budget is the whole space;
//  - learned model + mutations: the same session with the learned model (search/learned_model.h)
//    trained first on the other groups' tables (a database that tuned them before), so that it
//    ranks the first round too, and updated by the session with this group's trials each round;
//    (and, for comparison, the same model retrained from nothing each round instead);
//  - random: a seeded shuffle (the seed is printed).
// It prints, per strategy, the trials needed to come within 5% of the exhaustive best (median and
// worst over groups) and the regret (best found / best measured - 1) after 8, 16 and 32 trials,
// and the learned model's ranking quality on held-out groups (Kendall tau against the measured
// times, and whether its first pick is within 5% of the best) beside the cost model's.
// All times are measured on --device; nothing here is modeled except the strategies' orders.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "backend/cuda.h"
#include "coordinator/job_planner.h"
#include "core/error.h"
#include "search/learned_model.h"
#include "search/session.h"
#include "worker/compile_pool.h"
#include "worker/daemon.h"
#include "worker/sandbox.h"

namespace fs = std::filesystem;
using namespace fusetune;

namespace {

struct Group {
  std::string model, pattern;
  std::vector<planner::Candidate> space;  // expressible, non-library, in modeled order
  std::map<std::string, double> time_us;  // measured; infinity for a failed configuration
  double best_us = INFINITY;
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

// The best time among the first n trials of `order`.
double best_after(const Group& g, const std::vector<std::string>& order, size_t n) {
  double best = INFINITY;
  for (size_t i = 0; i < order.size() && i < n; ++i) best = std::min(best, g.time_us.at(order[i]));
  return best;
}

// Trials until the best found is within 5% of the group's best (the space's size + 1 if never).
size_t trials_to_5pct(const Group& g, const std::vector<std::string>& order) {
  double best = INFINITY;
  for (size_t i = 0; i < order.size(); ++i) {
    best = std::min(best, g.time_us.at(order[i]));
    if (best <= 1.05 * g.best_us) return i + 1;
  }
  return order.size() + 1;
}

std::vector<std::string> order_model(const Group& g) {
  std::vector<std::string> out;
  for (const planner::Candidate& c : g.space) out.push_back(c.config.str());
  return out;
}

// The finite times of `x` for the configurations of `only` (all when null).
std::map<std::string, double> measured_of(const Group& x, const std::set<std::string>* only) {
  std::map<std::string, double> out;
  for (const auto& [config, us] : x.time_us) {
    if (std::isfinite(us) && (only == nullptr || only->count(config))) out.emplace(config, us);
  }
  return out;
}

// The other groups' whole tables (a database that tuned them before; with `other_models`, only
// those of other models, so that no twin of `g` from its own model is among them): what a learned
// model knows before `g`'s job starts.
std::vector<search::MeasuredGroup> others(const std::vector<Group>& all, const Group& g, bool other_models) {
  std::vector<search::MeasuredGroup> out;
  for (const Group& x : all) {
    if (&x != &g && !(other_models && x.model == g.model)) out.push_back(search::measured_group(x.space, measured_of(x, nullptr)));
  }
  return out;
}

// A learned model that first learned from the other groups' tables, and then goes on learning from
// the job's own group as the session updates it (search::LearnedModel::update each round, as it
// ships), or, `afresh`, retrained from nothing on all of it each round (for comparison).
class PretrainedModel final : public search::CostModel {
 public:
  PretrainedModel(std::vector<search::MeasuredGroup> before, bool afresh) : before_(std::move(before)), afresh_(afresh) {
    model_.train(before_);
  }
  void update(const std::vector<search::MeasuredGroup>& groups) override {
    std::vector<search::MeasuredGroup> all = before_;
    all.insert(all.end(), groups.begin(), groups.end());
    if (afresh_) model_.train(all);
    else model_.update(all);
  }
  bool ranks() const override { return model_.ranks(); }
  std::vector<double> score(const std::vector<planner::Candidate>& c) const override { return model_.score(c); }
  std::string describe() const override { return model_.describe(); }

 private:
  std::vector<search::MeasuredGroup> before_;
  bool afresh_;
  search::LearnedModel model_;
};

// The shipped search (search::TuningSession, as the coordinator's job search steps it) as a job of
// one group with the whole space as its budget and rounds of 8, measured from the group's table
// (an interleaved comparison of its leaders measures nothing new here and ends it). The model:
// the cost model, or a learned model pretrained on the other groups (`all`).
std::vector<std::string> order_session(const Group& g, const std::vector<Group>* all = nullptr, bool other_models = false,
                                       bool afresh = false) {
  const std::string signature = g.model + ": " + g.pattern;
  auto space = std::make_shared<search::ListedSpace>(std::map<std::string, std::vector<planner::Candidate>>{{signature, g.space}});
  std::unique_ptr<search::CostModel> model;
  if (all != nullptr) model = std::make_unique<PretrainedModel>(others(*all, g, other_models), afresh);
  else model = std::make_unique<search::AnalyticModel>();
  search::MeasurePolicy policy;
  policy.trials = static_cast<int>(g.space.size());
  search::TuningSession session(space, policy, std::move(model), std::make_unique<search::MutationStrategy>());
  search::MemoryRecords records;
  const storage::DeviceKey device{"replay", "table"};
  std::map<std::string, search::Asked> asked;
  std::vector<std::string> out;
  for (;;) {
    const search::TuningSession::Step step = session.next(session.read(records, device, asked), 0, false);
    if (step.kind != search::TuningSession::Step::Kind::kMeasure) break;
    for (const planner::TileConfig& c : step.measure.at(signature)) {
      storage::Measurement m;
      m.signature = signature;
      m.device = device;
      m.config = c.str();
      const auto us = g.time_us.find(m.config);
      check(us != g.time_us.end(), "the session asked ", m.config, ", which is not in ", signature, "'s space");
      m.median_us = m.min_us = m.max_us = m.ci_low_us = m.ci_high_us = us->second;
      m.status = std::isfinite(m.median_us) ? storage::Status::kOk : storage::Status::kWrongResult;
      records.record(m);
      check(asked[signature].configs.insert(m.config).second, "the session asked ", m.config, " of ", signature, " twice");
      out.push_back(m.config);
    }
  }
  return out;
}

std::vector<std::string> order_random(const Group& g, std::mt19937& rng) {
  std::vector<std::string> out = order_model(g);
  std::shuffle(out.begin(), out.end(), rng);
  return out;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? NAN : (v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2);
}

}  // namespace

int main(int argc, char** argv) {
  std::string models = "cnn_small,resnet_small,nerf_mlp,mobilenet_v2,bert,gpt2";
  size_t want_groups = 20, min_space = 12, max_space = 40;
  unsigned seed = 20261124;
  fs::path fusetune = fs::path(argv[0]).parent_path() / "fusetune";
  std::string device = "host";
  for (int k = 1; k + 1 < argc; k += 2) {
    const std::string a = argv[k];
    if (a == "--models") models = argv[k + 1];
    else if (a == "--groups") want_groups = std::stoul(argv[k + 1]);
    else if (a == "--min-space") min_space = std::stoul(argv[k + 1]);
    else if (a == "--max-space") max_space = std::stoul(argv[k + 1]);
    else if (a == "--seed") seed = static_cast<unsigned>(std::stoul(argv[k + 1]));
    else if (a == "--fusetune") fusetune = argv[k + 1];
    else if (a == "--device") device = argv[k + 1];
    else {
      std::fprintf(stderr, "search_eval: unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  try {
    // The job's device (the planner's description) and the compile pool's architecture.
    std::string job_device = "host", arch = "host", where = "the host";
    if (device != "host") {
      std::string why;
      const std::unique_ptr<backend::Backend> gpu = backend::make_cuda_backend(std::stoi(device), &why);
      check(gpu != nullptr, "--device ", device, ": ", why);
      const auto p = gpu->properties();
      job_device = worker::planner_device_name(p);
      arch = p.arch;
      where = p.description + " (" + job_device + ")";
    }
    worker::CompilePool pool(arch, static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
    worker::Sandbox sandbox(fusetune.string(), device);
    std::vector<Group> groups;
    const auto t0 = std::chrono::steady_clock::now();
    size_t measured = 0;
    for (const std::string& name : split(models)) {
      if (groups.size() >= want_groups) break;
      const fs::path file = fs::path(FUSETUNE_SOURCE_DIR) / "tests/data/models" / name / "model.onnx";
      coordinator::JobOptions o;
      o.min_repeats = 3;
      o.max_repeats = 50;
      o.min_time_ms = 2;
      if (name == "bert") o.shapes = {{"input_ids", {1, 16}}, {"attention_mask", {1, 16}}};  // as the tests run it
      const coordinator::JobPlanner jp(file, name, job_device, o);
      for (const coordinator::TaskSpec& spec : jp.tasks()) {
        if (groups.size() >= want_groups) break;
        std::vector<planner::TileConfig> configs;
        for (const planner::Candidate& c : jp.group(spec.signature).candidates) {
          if (c.cost.valid && c.config.library.empty()) configs.push_back(c.config);
        }
        if (configs.size() < min_space || configs.size() > max_space) continue;
        const std::vector<wire::Candidate> all = jp.lower(spec.task, configs);
        if (all.size() < min_space) continue;
        Group g;
        g.model = name;
        g.pattern = spec.pattern;
        std::set<std::string> expressible;
        for (const wire::Candidate& c : all) expressible.insert(c.config());
        for (const planner::Candidate& c : jp.group(spec.signature).candidates) {
          if (expressible.count(c.config.str())) g.space.push_back(c);
        }
        const std::vector<worker::CompileOutput> compiled = pool.compile(all);
        wire::ChildRequest req;
        *req.mutable_graph() = spec.task.graph();
        *req.mutable_policy() = spec.task.policy();
        std::vector<std::string> sent;
        for (size_t k = 0; k < all.size(); ++k) {
          if (!compiled[k].ok) {
            g.time_us[all[k].config()] = INFINITY;
            continue;
          }
          *req.add_candidates()->mutable_candidate() = all[k];
          sent.push_back(all[k].config());
        }
        const std::vector<wire::CandidateResult> results = sandbox.run(req, 20000);
        for (size_t k = 0; k < sent.size(); ++k) {
          const bool ok = k < results.size() && results[k].status() == "ok";
          g.time_us[sent[k]] = ok ? results[k].median_us() : INFINITY;
          if (ok) g.best_us = std::min(g.best_us, results[k].median_us());
        }
        measured += all.size();
        if (!std::isfinite(g.best_us)) continue;
        std::fprintf(stderr, "search_eval: %zu/%zu groups (%s: %s, %zu configurations), %zu measured, %.0f s\n",
                     groups.size() + 1, want_groups, name.c_str(), g.pattern.c_str(), g.space.size(), measured,
                     std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        groups.push_back(std::move(g));
      }
    }
    check(!groups.empty(), "no group with a search space of ", min_space, " to ", max_space, " configurations");
    std::mt19937 rng(seed);
    std::printf("search_eval: %zu groups of %s, %zu configurations measured on %s in %.0f s; random seed %u\n\n",
                groups.size(), models.c_str(), measured, where.c_str(),
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), seed);
    std::printf("| group | model | configurations | best (us, measured) | model's first (us) |\n|---|---|---|---|---|\n");
    for (const Group& g : groups) {
      std::printf("| %s | %s | %zu | %.2f | %.2f |\n", g.pattern.substr(0, 40).c_str(), g.model.c_str(), g.space.size(),
                  g.best_us, g.time_us.at(g.space[0].config.str()));
    }
    std::printf("\n| strategy | trials to within 5%% (median, worst) | within 5%% after 8 / 16 / 32 | mean regret after 8 / 16 / 32 |\n"
                "|---|---|---|---|\n");
    const std::vector<std::string> names = {"model (today's first round, extended)", "model + mutations",
                                            "learned model + mutations (trained on the other groups)",
                                            "learned model + mutations (trained on the other models' groups)",
                                            "learned model + mutations (trained on the other groups), retrained afresh each round",
                                            "random"};
    for (size_t s = 0; s < names.size(); ++s) {
      std::vector<double> to5;
      double regret[3] = {0, 0, 0};
      int within[3] = {0, 0, 0};
      for (const Group& g : groups) {
        const std::vector<std::string> order = s == 0   ? order_model(g)
                                               : s == 1 ? order_session(g)
                                               : s == 2 ? order_session(g, &groups)
                                               : s == 3 ? order_session(g, &groups, true)
                                               : s == 4 ? order_session(g, &groups, false, true)
                                                        : order_random(g, rng);
        to5.push_back(static_cast<double>(trials_to_5pct(g, order)));
        const size_t at[3] = {8, 16, 32};
        for (int k = 0; k < 3; ++k) {
          const double best = best_after(g, order, at[k]);
          const double r = std::isfinite(best) ? best / g.best_us - 1 : 10.0;  // nothing working yet: counted as 1000%
          regret[k] += r;
          within[k] += r <= 0.05;
        }
      }
      const double n = static_cast<double>(groups.size());
      std::printf("| %s | %.0f, %.0f | %d / %d / %d of %zu | %.1f%% / %.1f%% / %.1f%% |\n", names[s].c_str(), median(to5),
                  *std::max_element(to5.begin(), to5.end()), within[0], within[1], within[2], groups.size(),
                  100 * regret[0] / n, 100 * regret[1] / n, 100 * regret[2] / n);
    }
    // Ranking quality on held-out groups: trained on every other group's table, each group's whole
    // space ranked by the learned model and by the cost model against its measured times.
    for (const bool other_models : {false, true}) {
      std::vector<double> tau_learned, tau_model;
      int top1_learned = 0, top1_model = 0;
      for (const Group& g : groups) {
        search::LearnedModel model;
        model.train(others(groups, g, other_models));
        if (!model.ranks()) continue;
        std::vector<double> actual, learned = model.score(g.space), modeled;
        for (const planner::Candidate& c : g.space) {
          const double us = g.time_us.at(c.config.str());
          actual.push_back(std::isfinite(us) ? us : 1e30);
          modeled.push_back(c.cost.modeled_us);
        }
        tau_learned.push_back(search::kendall_tau(learned, actual));
        tau_model.push_back(search::kendall_tau(modeled, actual));
        auto top1 = [&](const std::vector<double>& rank) {
          const size_t pick = static_cast<size_t>(std::min_element(rank.begin(), rank.end()) - rank.begin());
          return actual[pick] <= 1.05 * g.best_us;
        };
        top1_learned += top1(learned);
        top1_model += top1(modeled);
      }
      if (tau_learned.empty()) {  // fewer groups than LearnedModel::kMinGroups beside the one held out
        std::printf("\nno held-out ranking%s: too few other groups to train on (%zu groups)\n",
                    other_models ? " by other models' groups" : "", groups.size());
        continue;
      }
      if (!other_models) {
        std::printf("\n| ranking of a held-out group's whole space | Kendall tau (median over groups) | top-1 within 5%% of the best |\n"
                    "|---|---|---|\n");
        std::printf("| cost model (H100) | %.2f | %d of %zu |\n", median(tau_model), top1_model, tau_model.size());
      }
      std::printf("| learned model, trained on the other %s | %.2f | %d of %zu |\n", other_models ? "models' groups" : "groups",
                  median(tau_learned), top1_learned, tau_learned.size());
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "search_eval: %s\n", e.what());
    return 2;
  }
  return 0;
}
