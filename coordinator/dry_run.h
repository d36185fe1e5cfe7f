// A dry run: tuning for a GPU this machine does not have (or with --no-timing), everything but the
// timing.
//
// Takes a JobPlanner for a GPU device class (its tasks: each weighed group with its candidates,
// lowered for the GPU's architecture) and options. Every candidate is compiled with NVRTC for that
// architecture (CompilePool: ptxas's registers, shared memory and spills; the on-disk cubin cache
// answers what was compiled before), and the same CUDA text is built for the host and verified
// there against the reference in the worker's measuring child (worker/sandbox.h, Policy
// verify_only: bounds, races and barriers checked, outputs compared; nothing timed; a candidate
// whose verification runs past the job's timeout is kept as unverified, not rejected; a kernel
// with a larger grid than DryRunOptions::sample_blocks is verified on that many of its blocks,
// backend/verify.h, so that full-size models are checked in minutes, not hours). The plan is
// then chosen by the cost model among the candidates that passed (planner::PlanOptions::rejected
// holds the others) and compiled into a bundle as `fusetune compile` does.
// Guarantees: nothing is timed and nothing is written to the search database, so nothing it
// produces can be taken for a measurement; the report labels the plan's time as modeled. A
// candidate that cannot be checked (NVRTC unavailable in this build) is reported, not rejected.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "compiler/compile_bundle.h"
#include "coordinator/job_planner.h"
#include "runtime/bundle.h"

namespace fusetune::coordinator {

struct DryRunOptions {
  std::string fusetune_binary;  // runs the measuring child (`fusetune worker-child`)
  int compile_jobs = 2;
  // Verify a kernel on at most this many blocks of its grid (the first, the last, others drawn
  // from the task's seed); 0: every block.
  int64_t sample_blocks = 16;
  std::function<void(size_t done, size_t total)> progress;  // tasks checked so far
};

struct CandidateCheck {
  std::string signature, config;
  // "ok"; "unverified" (its host verification ran past the job's timeout: kept, as nothing says it
  // is wrong); or why it was rejected, in storage::status_name's words.
  std::string status;
  int registers = 0;
  int spill_bytes = 0;
  bool nvrtc_cached = false;
  int64_t verified_blocks = 0, grid_blocks = 0;  // set when verified on a sample of its grid's blocks
  std::string detail;
};

struct DryRunReport {
  std::string arch;
  size_t tasks = 0;
  std::vector<CandidateCheck> checks;
  size_t nvrtc_compiled = 0, nvrtc_cached = 0, compile_errors = 0, spilling = 0, verified = 0, unverified = 0,
         rejected = 0, sampled = 0;  // sampled: verified (passed or not) on a sample of their blocks
  double wall_s = 0, cpu_s = 0;  // CPU: this process and its children (compilers, measuring child)
  // Wall seconds of each phase: the candidates lowered into tasks, NVRTC for the device, the host
  // builds, the host verification, the cost model's choice, and the bundle (its module compiled
  // with NVRTC as one).
  double lower_s = 0, nvrtc_s = 0, host_build_s = 0, verify_s = 0, plan_s = 0, bundle_s = 0;
  planner::ModelPlan plan;       // chosen by the cost model among the candidates that passed
  runtime::Bundle bundle;
};

DryRunReport dry_run(const JobPlanner& job, const DryRunOptions& options);

}  // namespace fusetune::coordinator
