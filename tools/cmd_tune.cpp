// fusetune tune (its options: tools/command_table.cpp): the embedded default.
// For a GPU device this machine lacks (or with --no-timing), a dry run instead
// (coordinator/dry_run.h): every candidate compiled with NVRTC and verified on the host (on at most
// --verify-blocks blocks of its grid, default 16; 0: all), the plan
// chosen by the cost model, nothing timed or stored. A coordinator (coordinator/server.h)
// and a local worker (worker/daemon.h) run in this process and talk over ZeroMQ's inproc
// transport with the same messages as over TCP; the search database defaults to the user's cache
// directory, so a second tune of the same model measures nothing. Shows a progress bar, ends
// with the job's table, and with --out writes the tuned plan bundle that `fusetune run` executes.
// Exit codes: 0 tuned, 1 the job failed or was interrupted, 2 bad input.
#include <algorithm>
#include <cstdio>
#include <thread>

#include "backend/cuda.h"
#include "coordinator/dry_run.h"
#include "coordinator/job_planner.h"
#include "coordinator/server.h"
#include "core/error.h"
#include "planner/device.h"
#include "runtime/bundle.h"
#include "tools/cli_args.h"
#include "tools/command_table.h"
#include "tools/commands.h"
#include "tools/progress.h"
#include "tools/service_common.h"
#include "worker/daemon.h"

namespace fusetune::cli {

namespace {

// The GPU `--device auto` plans for on a machine without one (a dry run: nothing is timed).
constexpr const char* kDefaultTarget = "h100";

// "auto": the first CUDA device when one is usable, else a dry run for kDefaultTarget (timing
// kernels on the host's emulator says nothing of a GPU and takes hours on a full model: only
// `--device host` does it). Returns {job device, worker device}; the worker device is empty for a
// GPU device this machine lacks (a dry run), and `why` then says why.
std::pair<std::string, std::string> resolve_device(const std::string& requested, std::string& why) {
  if (requested == "host") return {"host", "host"};
  std::unique_ptr<backend::Backend> gpu = backend::make_cuda_backend(0, &why);
  if (requested == "auto") {
    if (!gpu) {
      std::fprintf(stderr,
                   "fusetune tune: no usable GPU (%s): a dry run for %s, the default target (--device NAME names "
                   "another; --device host times the kernels on this machine's CPU emulator instead)\n",
                   why.c_str(), kDefaultTarget);
      return {kDefaultTarget, ""};
    }
    const auto p = gpu->properties();
    return {worker::planner_device_name(p), "0"};
  }
  planner::find_device(requested);  // a device the planner knows, or a clear error
  if (!gpu) return {requested, ""};
  const auto p = gpu->properties();
  const std::string found = worker::planner_device_name(p);
  if (found != requested) {
    // A GPU its attributes do not quite identify may still be the one asked for: the same
    // architecture and SMs (its memory, say, differs); the description asked for then plans.
    const planner::Device want = planner::find_device(requested);
    const std::vector<std::string> builtin_names = planner::builtin_device_names();
    const bool builtin = std::count(builtin_names.begin(), builtin_names.end(), found) > 0;
    check(!builtin && want.compute_capability == p.attributes.compute_capability && want.sms == p.attributes.sms,
          "--device ", requested, ": this machine's GPU is ", p.description, " (", found, ")");
    std::fprintf(stderr, "fusetune tune: this machine's %s is not quite %s by its attributes (%s); planning for %s\n",
                 p.description.c_str(), requested.c_str(), found.c_str(), requested.c_str());
  }
  return {requested, "0"};
}

// A dry run (coordinator/dry_run.h): everything but the timing, chosen by the cost model, nothing
// stored. Prints what was checked and writes the plan with --out.
int tune_without_timing(const Args& args, const std::filesystem::path& model, const std::string& model_name,
                        const std::string& device, const coordinator::JobOptions& options, const std::string& why) {
  std::printf("tuning %s for %s without timing (%s): every candidate is compiled with NVRTC for the device and "
              "verified on the host; the plan is chosen by the cost model; nothing is timed and nothing is stored in "
              "the search database\n",
              model_name.c_str(), device.c_str(), why.c_str());
  std::fflush(stdout);
  const coordinator::JobPlanner job(model, model_name, device, options);
  coordinator::DryRunOptions o;
  o.fusetune_binary = self_executable();
  o.compile_jobs = static_cast<int>(args.number("compile-jobs", std::max(1u, std::thread::hardware_concurrency())));
  o.sample_blocks = static_cast<int64_t>(args.number("verify-blocks", static_cast<double>(o.sample_blocks)));
  check(o.sample_blocks >= 0, "--verify-blocks ", o.sample_blocks, ": a number of blocks, 0 for all");
  coordinator::DryRunReport r;
  {
    ProgressLine progress("tasks");
    o.progress = [&](size_t done, size_t total) { progress.update(done, total, "checked"); };
    r = coordinator::dry_run(job, o);
  }
  const size_t candidates = r.checks.size();
  std::printf("\n%-34s %s (%s)\n", "checked for", device.c_str(), r.arch.c_str());
  std::printf("%-34s %zu tasks, %zu candidates\n", "groups weighed", r.tasks, candidates);
  if (r.nvrtc_compiled > 0) {
    std::printf("%-34s %zu kernels, %zu from the cubin cache (%.0f%%), %zu of them spill\n", "NVRTC (ptxas figures)",
                r.nvrtc_compiled, r.nvrtc_cached, 100.0 * static_cast<double>(r.nvrtc_cached) / static_cast<double>(r.nvrtc_compiled),
                r.spilling);
  } else {
    std::printf("%-34s %s\n", "NVRTC (ptxas figures)", "not in this build: no cubins, no ptxas figures");
  }
  std::printf("%-34s %zu passed, %zu rejected (%zu compile errors), %zu too slow to verify here (kept)\n",
              "verified on the host", r.verified, r.rejected, r.compile_errors, r.unverified);
  if (r.sampled > 0) {
    std::printf("%-34s %zu candidates checked on %lld blocks of their grid, not all (--verify-blocks 0: all)\n",
                "verified on a sample of blocks", r.sampled, static_cast<long long>(o.sample_blocks));
  }
  std::printf("%-34s %zu groups in %d launches, %.1f us (modeled, not measured)\n", "chosen by the cost model",
              r.plan.groups.size(), r.plan.launches, r.plan.modeled_us);
  std::printf("%-34s %.1f s CPU (%.0f ms per candidate), %.1f s wall\n", "cost of the dry run", r.cpu_s,
              candidates ? 1000 * r.cpu_s / static_cast<double>(candidates) : 0.0, r.wall_s);
  std::printf("%-34s lowering %.1f s, NVRTC %.1f s, host builds %.1f s, host verification %.1f s, choice %.1f s, "
              "bundle %.1f s\n",
              "wall time by phase", r.lower_s, r.nvrtc_s, r.host_build_s, r.verify_s, r.plan_s, r.bundle_s);
  std::printf("nothing was timed; nothing was stored in the search database\n");
  if (args.has("out")) {
    runtime::write_bundle(r.bundle, args.get("out"));
    std::printf("plan written to %s (modeled choices, cubins for %s); run it with: fusetune run %s --inputs DIR\n",
                args.get("out").c_str(), r.arch.c_str(), args.get("out").c_str());
  }
  return 0;
}

}  // namespace

int cmd_tune(const std::vector<std::string>& argv) {
  const CommandSpec& spec = command_spec("tune");
  const Args args = parse_args(spec, argv);
  check_usage(args.positional().size() == 1, spec);
  const std::filesystem::path model = args.positional()[0];
  // A dry run plans for a GPU; on the host there is nothing to plan for but the executor's times.
  check(!(args.has("no-timing") && args.get("device", "auto") == "host"),
        "--no-timing is a dry run for a GPU (--device NAME); --device host times the kernels on this machine's "
        "executor, which is all it does");
  std::string why;
  const auto [job_device, worker_device] = resolve_device(args.get("device", "auto"), why);
  const coordinator::JobOptions options = job_options(args);
  if (job_device != "host" && (worker_device.empty() || args.has("no-timing"))) {
    try {  // planning, compiling and checking here, on this thread: given up at SIGINT or SIGTERM
      const CancelScope scope(&signal_cancel_token());
      return tune_without_timing(args, model, model.filename().string(), job_device, options,
                                 worker_device.empty() ? "no GPU here: " + why : "--no-timing");
    } catch (const Cancelled&) {
      std::fprintf(stderr, "fusetune tune: interrupted; nothing was written\n");
      return 1;
    }
  }
  wire::Submit submit;
  submit.set_model_name(model.filename().string());
  for (wire::ModelFile& f : read_model_files(model)) *submit.add_files() = std::move(f);
  submit.set_device(job_device);
  submit.set_options(options.to_json());

  const bool verbose = args.has("verbose");
  const std::filesystem::path db = args.has("db") ? std::filesystem::path(args.get("db")) : default_db_path();
  std::filesystem::create_directories(std::filesystem::absolute(db).parent_path());
  zmq::context_t context;
  coordinator::ServerOptions sopt;
  sopt.listen = "inproc://fusetune-tune";
  sopt.db = db;
  sopt.id = "embedded";
  sopt.log = [verbose](const std::string& line) {
    if (verbose) std::fprintf(stderr, "coordinator: %s\n", line.c_str());
  };
  coordinator::Server server(context, sopt);
  std::printf("tuning %s on %s (search database %s; embedded, inproc: no keys needed)\n", model.string().c_str(),
              job_device.c_str(), db.string().c_str());
  if (job_device == "host") {
    std::fprintf(stderr, "fusetune tune: timing on the host's SIMT executor (--device host): its kernel times say "
                         "nothing of a GPU, and a full-size model takes hours; the progress line says about how long\n");
  }
  std::fflush(stdout);
  const std::atomic<bool>& interrupted = stop_on_signals();
  int64_t job = 0;
  try {  // planning the model here, on this thread: given up at SIGINT or SIGTERM
    const CancelScope scope(&signal_cancel_token());
    job = server.submit(submit);
  } catch (const Cancelled&) {
    std::fprintf(stderr, "fusetune tune: interrupted while planning %s; nothing was stored\n", model.string().c_str());
    return 1;
  }

  worker::WorkerOptions wopt;
  wopt.coordinator = sopt.listen;
  wopt.device = worker_device;
  wopt.compile_jobs = static_cast<int>(args.number("compile-jobs", std::max(1u, std::thread::hardware_concurrency())));
  wopt.executable = self_executable();
  wopt.worker_id = "local";
  wopt.quiet = !verbose;
  std::atomic<bool> stop_worker{false};
  std::atomic<int> worker_rc{0};  // written by the worker's thread, read by the poll loop
  std::thread worker_thread([&] {
    try {
      worker::WorkerDaemon daemon(context, wopt);
      worker_rc = daemon.run(stop_worker);
    } catch (const Error& e) {
      std::fprintf(stderr, "fusetune tune: worker: %s\n", e.what());
      worker_rc = 2;
    }
  });

  wire::JobStatus st;
  {
    ProgressLine progress("tasks");
    while (true) {
      server.poll_once(50);
      st = server.status(job).at(0);
      progress.update(static_cast<size_t>(st.tasks_done() + st.tasks_failed()), static_cast<size_t>(st.tasks()),
                      std::to_string(st.candidates_measured()) + " candidates measured, " +
                          std::to_string(st.cache_hits()) + " cache hits");
      if (st.state() != "queued" && st.state() != "running") break;
      if (interrupted.load() || (worker_rc != 0)) break;
    }
  }
  // Interrupted: the job is marked cancelled (its leases revoked, so the worker stops measuring
  // for it), and no later coordinator on this database resumes it; what it measured is kept and
  // answers the next tune of the model as cache hits.
  if (interrupted.load() && (st.state() == "queued" || st.state() == "running")) server.cancel(job, "interrupted (SIGINT or SIGTERM to tune)");
  stop_worker = true;
  worker_thread.join();
  server.poll_once(0);  // the worker's goodbye
  if (st.state() != "done") {
    std::fprintf(stderr, "fusetune tune: job %lld %s%s%s\n", static_cast<long long>(job),
                 interrupted.load() ? "interrupted and cancelled; the measurements so far are kept" : st.state().c_str(),
                 st.error().empty() ? "" : ": ", st.error().c_str());
    return 1;
  }
  print_summary(st);
  if (args.has("out")) {
    write_files(server.export_plan(job), args.get("out"));
    std::printf("plan written to %s; run it with: fusetune run %s --inputs DIR\n", args.get("out").c_str(),
                args.get("out").c_str());
  }
  return 0;
}

}  // namespace fusetune::cli
