// barrier_mutations MODEL.onnx [--shape NAME=DxD...] [--candidates N] [--seed S] [--precision model|tf32]
//                   [--mma-only] [--verbose]
//
// The mutation test of the host executor's checks. For every measurement task the coordinator
// would make of the model (each group the selection weighs, its top N candidates lowered to CUDA
// text: coordinator/job_planner.h), it verifies each candidate kernel as a host worker does
// (backend/verify.h: checks on, redzones, the reference on seeded random inputs). That run also
// says, per barrier, whether it ordered anything: an access of one thread after another thread's
// access of the same location in the interval before the barrier (simt/hazards.h). Then it
// deletes each of the kernel's barriers in turn (the executor skips that line's __syncthreads(),
// which is what deleting the statement does) and verifies again. A deletion is caught when
// verification fails: a finding of the checks or a wrong result. A barrier that ordered
// something must be caught; one that ordered nothing (redundant for this candidate: each location
// it separates is touched by one thread only) must not be, else the analysis is wrong. Prints one
// line per barrier that breaks either rule (task, candidate, line and the code around it) and a
// summary: the mutation score is caught / barriers that ordered something. The same for each
// cp.async.wait_group, wgmma.wait_group and mbarrier wait: deleted in turn (the executor skips
// it), it must be caught when it landed any copy or wgmma result, ended a wgmma's reads, or
// observed an mbarrier phase, in the unmutated run (every copy is read after its wait, every
// result is the epilogue's, every slot written again). Exits 1 when a candidate
// fails before any mutation or a rule breaks, 2 on bad input. --mma-only keeps the tensor-core
// candidates alone (their cp.async pipelines), for a model whose other candidates other runs cover
// (exits 1 when the tasks' top N hold none);
// --precision tf32 plans as a job under the TF32 policy does (float32 MatMuls on tensor cores).
#include <cstdio>
#include <iostream>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <sstream>

#include "backend/backend.h"
#include "backend/verify.h"
#include "coordinator/job_planner.h"
#include "core/error.h"
#include "proto/wire.h"
#include "simt/module.h"
#include "tools/cli_args.h"
#include "tools/service_common.h"

namespace fusetune {
namespace {

struct Score {
  size_t tasks = 0, candidates = 0, barriers = 0, needed = 0, caught = 0, by_check = 0, redundant = 0, unreached = 0;
  size_t baseline_failures = 0, survivors = 0, inconsistent = 0;
  size_t waits = 0, waits_landing = 0, waits_caught = 0;
};

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// The 1-based lines of `text` holding `statement`, per kernel name (a kernel runs from its
// signature to the next one).
std::map<std::string, std::vector<int>> statement_lines(const std::string& text, const std::string& statement) {
  std::map<std::string, std::vector<int>> out;
  std::string kernel;
  const std::vector<std::string> lines = lines_of(text);
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string& l = lines[i];
    if (l.rfind("extern \"C\" __global__ void ", 0) == 0) {
      const size_t open = l.find('(', l.find(") ") + 2);
      kernel = l.substr(l.find(") ") + 2, open - l.find(") ") - 2);
    }
    if (!kernel.empty() && l.find(statement) != std::string::npos) out[kernel].push_back(static_cast<int>(i + 1));
  }
  return out;
}

// One module of all of a task's candidate kernels: the first candidate's text (intrinsics,
// prelude, kernel) and the kernels of the others, as they ship.
std::string task_module(const wire::Task& task) {
  std::string text;
  for (const wire::Candidate& c : task.candidates()) {
    if (!c.library().empty()) continue;
    const std::string& s = c.cuda_source();
    text += text.empty() ? s : s.substr(s.find("extern \"C\" __global__"));
  }
  return text;
}

struct Verified {
  backend::VerifyResult result;
  simt::Counters counters;  // of the candidate's kernel in this run
};

Verified verify(const Graph& g, const wire::Candidate& c, const backend::ModuleSource& src, const std::set<int>& skip,
                uint64_t seed, const std::set<int>& skip_waits = {}) {
  simt::Options o;
  o.skip_barriers = skip;
  o.skip_waits = skip_waits;
  auto be = backend::make_host_backend("", o);
  auto module = be->load_source(src);
  std::vector<int> inputs, outputs, in_place;  // in_place: an output's input buffer (ParamSpec.updates_input)
  for (const wire::ParamSpec& p : c.params()) {
    (p.output() ? outputs : inputs).push_back(p.value());
    if (p.output()) in_place.push_back(p.updates_input() - 1);
  }
  planner::FusionGroup group;
  group.nodes.resize(g.nodes().size());
  std::iota(group.nodes.begin(), group.nodes.end(), 0);
  std::mt19937 rng(static_cast<std::mt19937::result_type>(seed));
  Verified v;
  v.result = backend::verify_kernel(g, c.kernel(), inputs, outputs, *be, *module, backend::reference_values(g, group, inputs, rng),
                                    {.redzone_bytes = 256, .tf32 = backend::tf32_kernel(g, group, c.config())}, in_place);
  const auto counted = module->counters();
  if (auto it = counted.find(c.kernel()); it != counted.end()) v.counters = it->second;
  return v;
}

void show(const std::vector<std::string>& text, int line) {
  for (int l = std::max(1, line - 6); l <= std::min(static_cast<int>(text.size()), line + 6); ++l) {
    std::printf("  %5d%s %s\n", l, l == line ? ">" : " ", text[static_cast<size_t>(l - 1)].c_str());
  }
}

int run(const std::vector<std::string>& argv) {
  const cli::Args args(argv, {"shape", "candidates", "seed", "precision"}, {"verbose", "mma-only"});
  check(args.positional().size() == 1,
        "usage: barrier_mutations MODEL.onnx [--shape NAME=DxD...] [--candidates N] [--seed S] [--precision model|tf32] "
        "[--mma-only] [--verbose]");
  const bool mma_only = args.has("mma-only");
  const std::string model = args.positional()[0];
  coordinator::JobOptions options;
  options.shapes = cli::shape_overrides(args);
  options.candidates = static_cast<int>(args.number("candidates", options.candidates));
  options.precision = args.get("precision", options.precision);
  options = coordinator::JobOptions::from_json(options.to_json());  // a bad policy named here
  const auto seed = static_cast<uint64_t>(args.number("seed", 1));
  const bool verbose = args.has("verbose");
  coordinator::JobPlanner planner(model, model, "host", options);
  const std::vector<coordinator::TaskSpec> tasks = planner.tasks();
  std::printf("%s: %zu tasks, verification seed %llu\n", model.c_str(), tasks.size(), static_cast<unsigned long long>(seed));
  Score score;
  for (const coordinator::TaskSpec& t : tasks) {
    ++score.tasks;
    const Graph g = wire::from_subgraph(t.task.graph());
    backend::ModuleSource src;
    src.cuda_source = task_module(t.task);
    for (const wire::Candidate& c : t.task.candidates()) {
      if (c.library().empty()) src.kernels.push_back({c.kernel(), c.grid(), c.threads(), c.shared_bytes(), ""});
    }
    if (src.kernels.empty()) continue;
    const std::map<std::string, std::vector<int>> barriers = statement_lines(src.cuda_source, "__syncthreads();");
    std::map<std::string, std::vector<int>> waits = statement_lines(src.cuda_source, "ft_cp_async_wait(");
    for (const char* wait : {"ft_wgmma_wait(", "ft_mbarrier_wait("}) {
      for (const auto& [kernel, lines] : statement_lines(src.cuda_source, wait)) {
        waits[kernel].insert(waits[kernel].end(), lines.begin(), lines.end());
      }
    }
    const std::vector<std::string> text = lines_of(src.cuda_source);
    for (const wire::Candidate& c : t.task.candidates()) {
      if (!c.library().empty() || (mma_only && c.config().find(" mma") == std::string::npos)) continue;
      ++score.candidates;
      const Verified base = verify(g, c, src, {}, seed);
      if (!base.result.ok) {
        ++score.baseline_failures;
        std::printf("FAILS UNMUTATED: task %s candidate %s: %s\n", t.pattern.c_str(), c.config().c_str(),
                    base.result.detail.c_str());
        continue;
      }
      const auto w = waits.find(c.kernel());
      for (const int line : w == waits.end() ? std::vector<int>{} : w->second) {
        ++score.waits;
        const auto landed = base.counters.wait_landings.find(line);
        if (landed == base.counters.wait_landings.end()) continue;  // landed nothing: nothing to lose
        ++score.waits_landing;
        const Verified r = verify(g, c, src, {}, seed, {line});
        const std::string where = "task " + t.pattern + " candidate " + c.config() + " (" + c.kernel() +
                                  "): the wait at kernels.cu:" + std::to_string(line);
        if (!r.result.ok) {
          ++score.waits_caught;
          if (verbose) std::printf("caught: %s: %s\n", where.c_str(), r.result.detail.c_str());
          continue;
        }
        ++score.survivors;
        std::printf("SURVIVES: %s landed or ended %llu copies, results or reads, yet its deletion passed verification\n", where.c_str(),
                    static_cast<unsigned long long>(landed->second));
        show(text, line);
      }
      const auto it = barriers.find(c.kernel());
      for (const int line : it == barriers.end() ? std::vector<int>{} : it->second) {
        ++score.barriers;
        const bool reached = base.counters.barrier_lines.count(line) != 0;
        const bool needed = base.counters.barrier_orderings.count(line) != 0;
        const Verified r = verify(g, c, src, {line}, seed);
        const std::string where = "task " + t.pattern + " candidate " + c.config() + " (" + c.kernel() +
                                  "): the barrier at kernels.cu:" + std::to_string(line);
        if (needed) {
          ++score.needed;
          if (!r.result.ok) {
            ++score.caught;
            score.by_check += r.result.check_failed ? 1 : 0;
            if (verbose) std::printf("caught: %s: %s\n", where.c_str(), r.result.detail.c_str());
            continue;
          }
          ++score.survivors;
          std::printf("SURVIVES: %s ordered %llu accesses, yet its deletion passed verification\n", where.c_str(),
                      static_cast<unsigned long long>(base.counters.barrier_orderings.at(line)));
          show(text, line);
          continue;
        }
        ++(reached ? score.redundant : score.unreached);
        if (!r.result.ok) {
          ++score.inconsistent;
          std::printf("INCONSISTENT: %s ordered nothing, yet its deletion fails verification: %s\n", where.c_str(),
                      r.result.detail.c_str());
          show(text, line);
        } else if (verbose) {
          std::printf("redundant: %s %s\n", where.c_str(), reached ? "ordered nothing" : "was never reached");
          show(text, line);
        }
      }
    }
  }
  std::printf("mutation score: %zu of %zu needed barriers caught (%zu by a check, %zu by a wrong result); %zu barriers "
              "in all over %zu candidates of %zu tasks, %zu redundant for their candidate (ordered nothing), %zu never "
              "reached; %zu of %zu cp.async waits that landed copies caught (%zu waits in all); %zu survivors, %zu "
              "inconsistent, %zu candidates fail unmutated\n",
              score.caught, score.needed, score.by_check, score.caught - score.by_check, score.barriers, score.candidates,
              score.tasks, score.redundant, score.unreached, score.waits_caught, score.waits_landing, score.waits,
              score.survivors, score.inconsistent, score.baseline_failures);
  if (mma_only && score.candidates == 0) {  // a run that mutated nothing proves nothing
    std::printf("no tensor-core candidate among the tasks' top %d: nothing was mutated (raise --candidates)\n", options.candidates);
    return 1;
  }
  return score.survivors == 0 && score.inconsistent == 0 && score.baseline_failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace fusetune

int main(int argc, char** argv) {
  try {
    return fusetune::run(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const fusetune::Error& e) {
    std::cerr << "barrier_mutations: error: " << e.what() << "\n";
    return 2;
  }
}
