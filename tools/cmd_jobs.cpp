// The job commands a script drives a coordinator with: fusetune submit, status, cancel and export
// (their options: tools/command_table.cpp). Each takes --key NAME.key --coordinator-key COORD.pub
// for a coordinator that uses CURVE, and --timeout-s S, how long a request waits for the
// coordinator's reply (submit 120, status and cancel 10, export 600).
// submit prints the job id alone on stdout (with --wait, then waits and prints the job's table).
// Exit codes: 0 success; 1 the job failed or was cancelled (--wait); 2 bad input, an error from
// the coordinator, or no coordinator reachable (the message names the endpoint).
#include <chrono>
#include <cstdio>
#include <random>
#include <thread>

#include "coordinator/client.h"
#include "coordinator/job_planner.h"
#include "coordinator/model_files.h"
#include "coordinator/status_json.h"
#include "core/error.h"
#include "tools/cli_args.h"
#include "tools/command_table.h"
#include "tools/commands.h"
#include "tools/progress.h"
#include "tools/service_common.h"

namespace fusetune::cli {

namespace {

// --timeout-s: how long a request waits for the coordinator's reply (`fallback_s` by default).
int timeout_ms(const Args& args, double fallback_s) {
  const double s = args.number("timeout-s", fallback_s);
  check(s > 0 && s <= 86400, "--timeout-s ", s, ": seconds, more than 0 and at most a day");
  return static_cast<int>(s * 1000);
}

int64_t job_arg(const std::string& text) {
  try {
    size_t used = 0;
    const long long id = std::stoll(text, &used);
    if (used == text.size() && id > 0) return id;
  } catch (const std::exception&) {
  }
  fail("'", text, "' is not a job id");
}

// A name for one upload: random, so that two submissions from one client never share one.
std::string upload_name() {
  std::random_device rd;
  char name[17];
  std::snprintf(name, sizeof name, "%08x%08x", rd(), rd());
  return name;
}

wire::StatusReply query(coordinator::Client& client, int64_t job) {
  wire::Envelope e;
  e.mutable_status()->set_job_id(job);
  const wire::Envelope r = client.request(std::move(e));
  check(r.has_status_reply(), "coordinator answered a status request with a ", r.body_case(), " message");
  return r.status_reply();
}

}  // namespace

int cmd_submit(const std::vector<std::string>& argv) {
  const CommandSpec& spec = command_spec("submit");
  const Args args = parse_args(spec, argv);
  check_usage(args.positional().size() == 1, spec);
  const std::filesystem::path model = args.positional()[0];
  const coordinator::JobOptions options = job_options(args);
  zmq::context_t context;
  coordinator::Client client(context, args.get("coordinator"), timeout_ms(args, 120), client_security(args));
  wire::Envelope e;
  wire::Submit& s = *e.mutable_submit();
  s.set_model_name(model.filename().string());
  s.set_upload(upload_name());
  {
    ProgressLine progress("upload");
    for (wire::ModelFile& f : client.upload(s.upload(), coordinator::model_files(model), [&](uint64_t done, uint64_t total) {
           progress.update(done >> 20, total >> 20, "MB");
         })) {
      *s.add_files() = std::move(f);
    }
  }
  s.set_device(args.get("device", "host"));
  s.set_options(options.to_json());
  const wire::Envelope r = client.request(std::move(e));
  check(r.has_job(), "coordinator answered a submit with a ", r.body_case(), " message");
  const int64_t job = r.job().job_id();
  std::printf("%lld\n", static_cast<long long>(job));
  std::fflush(stdout);
  if (!args.has("wait")) return 0;
  const std::atomic<bool>& stop = stop_on_signals();
  while (!stop.load()) {
    const wire::JobStatus st = query(client, job).jobs().at(0);
    if (st.state() != "queued" && st.state() != "running") {
      print_jobs({st});
      if (st.state() == "done") print_summary(st);
      return st.state() == "done" ? 0 : 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return 1;
}

int cmd_status(const std::vector<std::string>& argv) {
  const CommandSpec& spec = command_spec("status");
  const Args args = parse_args(spec, argv);
  check_usage(args.positional().size() <= 1, spec);
  zmq::context_t context;
  coordinator::Client client(context, args.get("coordinator"), timeout_ms(args, 10), client_security(args));
  const int64_t job = args.positional().empty() ? 0 : job_arg(args.positional()[0]);
  const wire::StatusReply reply = query(client, job);
  const std::vector<wire::JobStatus> jobs(reply.jobs().begin(), reply.jobs().end());
  if (args.has("json")) {  // the shape of the HTTP API's /api/jobs (docs/dashboards.md)
    std::printf("%s\n", coordinator::status_json(jobs, reply.workers(), reply.warning()).dump(2).c_str());
    return 0;
  }
  if (!reply.warning().empty()) std::printf("warning: %s\n", reply.warning().c_str());
  print_jobs(jobs);
  if (job != 0 && jobs.at(0).state() == "done") print_summary(jobs.at(0));
  return 0;
}

int cmd_cancel(const std::vector<std::string>& argv) {
  const CommandSpec& spec = command_spec("cancel");
  const Args args = parse_args(spec, argv);
  check_usage(args.positional().size() == 1, spec);
  zmq::context_t context;
  coordinator::Client client(context, args.get("coordinator"), timeout_ms(args, 10), client_security(args));
  wire::Envelope e;
  e.mutable_cancel()->set_job_id(job_arg(args.positional()[0]));
  client.request(std::move(e));
  std::printf("job %s cancelled\n", args.positional()[0].c_str());
  return 0;
}

int cmd_export(const std::vector<std::string>& argv) {
  const CommandSpec& spec = command_spec("export");
  const Args args = parse_args(spec, argv);
  check_usage(args.positional().size() == 1, spec);
  zmq::context_t context;
  coordinator::Client client(context, args.get("coordinator"), timeout_ms(args, 600), client_security(args));
  wire::Envelope e;
  e.mutable_export_request()->set_job_id(job_arg(args.positional()[0]));
  const wire::Envelope r = client.request(std::move(e));
  check(r.has_export_reply(), "coordinator answered an export with a ", r.body_case(), " message");
  write_files({r.export_reply().files().begin(), r.export_reply().files().end()}, args.get("out"));
  std::printf("plan of job %s written to %s (%d files)\n", args.positional()[0].c_str(), args.get("out").c_str(),
              r.export_reply().files_size());
  return 0;
}

}  // namespace fusetune::cli
