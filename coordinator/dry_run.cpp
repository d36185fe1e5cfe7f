#include "coordinator/dry_run.h"

#include <sys/resource.h>

#include <chrono>
#include <set>

#include "backend/nvrtc.h"
#include "core/error.h"
#include "worker/compile_pool.h"
#include "worker/sandbox.h"

namespace fusetune::coordinator {

namespace {

double cpu_seconds() {
  double s = 0;
  for (int who : {RUSAGE_SELF, RUSAGE_CHILDREN}) {
    rusage u{};
    getrusage(who, &u);
    s += static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
  }
  return s;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Checks every candidate of every task (NVRTC, host build, verification in the measuring child),
// filling the report's counts and checks and the rejected set. The measuring child ends when this
// returns, so that its CPU time is counted (RUSAGE_CHILDREN) by the caller.
void check_tasks(const std::vector<TaskSpec>& tasks, const DryRunOptions& options, DryRunReport& r,
                 std::set<std::pair<std::string, std::string>>& rejected) {
  worker::CompilePool nvrtc(r.arch, options.compile_jobs), host("host", options.compile_jobs);
  worker::Sandbox sandbox(options.fusetune_binary, "host");
  for (size_t t = 0; t < tasks.size(); ++t) {
    const wire::Task& task = tasks[t].task;
    std::vector<wire::Candidate> candidates(task.candidates().begin(), task.candidates().end());
    auto t0 = std::chrono::steady_clock::now();
    const std::vector<worker::CompileOutput> gpu = nvrtc.compile(candidates);
    r.nvrtc_s += seconds_since(t0);
    t0 = std::chrono::steady_clock::now();
    const std::vector<worker::CompileOutput> cpu = host.compile(candidates);
    r.host_build_s += seconds_since(t0);
    wire::ChildRequest req;
    *req.mutable_graph() = task.graph();
    *req.mutable_policy() = task.policy();
    req.mutable_policy()->set_verify_only(true);
    req.mutable_policy()->set_sample_blocks(static_cast<int32_t>(options.sample_blocks));
    std::vector<size_t> sent;
    std::vector<CandidateCheck> checks(candidates.size());
    for (size_t k = 0; k < candidates.size(); ++k) {
      CandidateCheck& c = checks[k];
      c.signature = task.signature();
      c.config = candidates[k].config();
      c.registers = gpu[k].registers;
      c.spill_bytes = gpu[k].spill_bytes;
      c.nvrtc_cached = gpu[k].cached;
      const bool library = !candidates[k].library().empty();
      if (!library && backend::nvrtc_available()) {
        ++r.nvrtc_compiled;
        r.nvrtc_cached += gpu[k].cached;
        r.spilling += gpu[k].ok && gpu[k].spill_bytes > 0;
      }
      if (!gpu[k].ok || !cpu[k].ok) {
        c.status = "compile_error";
        c.detail = (gpu[k].ok ? cpu[k].error : gpu[k].error).substr(0, 2000);
        ++r.compile_errors;
        continue;
      }
      *req.add_candidates()->mutable_candidate() = candidates[k];
      sent.push_back(k);
    }
    const int timeout = task.policy().timeout_ms() > 0 ? task.policy().timeout_ms() : 10000;
    t0 = std::chrono::steady_clock::now();
    const std::vector<wire::CandidateResult> verified = sandbox.run(req, timeout);
    r.verify_s += seconds_since(t0);
    for (size_t j = 0; j < sent.size(); ++j) {
      CandidateCheck& c = checks[sent[j]];
      c.status = j < verified.size() ? verified[j].status() : "runtime_fault";
      c.detail = j < verified.size() ? verified[j].detail() : "no result from the measuring child";
      if (j < verified.size() && verified[j].grid_blocks() > 0) {
        c.verified_blocks = verified[j].verified_blocks();
        c.grid_blocks = verified[j].grid_blocks();
        ++r.sampled;
      }
      r.verified += c.status == "ok";
    }
    for (CandidateCheck& c : checks) {
      if (c.status == "timeout") {  // too slow to verify on the host within the job's timeout: not a failure
        c.status = "unverified";
        ++r.unverified;
      }
      if (c.status != "ok" && c.status != "unverified") {
        rejected.insert({c.signature, c.config});
        ++r.rejected;
      }
      r.checks.push_back(std::move(c));
    }
    if (options.progress) options.progress(t + 1, tasks.size());
  }
}

}  // namespace

DryRunReport dry_run(const JobPlanner& job, const DryRunOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  const double cpu0 = cpu_seconds();
  DryRunReport r;
  r.arch = job.plan_device().arch;
  const std::vector<TaskSpec> tasks = job.tasks();
  r.lower_s = seconds_since(t0);
  r.tasks = tasks.size();
  planner::PlanOptions plan_options;
  plan_options.tiling.tf32 = planner::tf32_precision(job.options().precision);
  compiler::BundleOptions bundle_options;
  check_tasks(tasks, options, r, plan_options.rejected);
  bundle_options.rejected = plan_options.rejected;
  auto phase = std::chrono::steady_clock::now();
  r.plan = planner::plan_model(job.graph(), job.plan_device(), plan_options);
  r.plan_s = seconds_since(phase);
  phase = std::chrono::steady_clock::now();
  r.bundle = compiler::compile_bundle(job.graph(), r.plan, job.plan_device(), job.model_name(), bundle_options);
  r.bundle_s = seconds_since(phase);
  r.wall_s = seconds_since(t0);
  r.cpu_s = cpu_seconds() - cpu0;
  return r;
}

}  // namespace fusetune::coordinator
