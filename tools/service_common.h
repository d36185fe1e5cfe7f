// What the service commands (tune, coordinator, worker, submit, status, cancel, export) share:
// a stop flag and a cancel token raised by SIGINT/SIGTERM, the path of this executable (the
// worker's measuring child), CURVE options, a job's options from flags, reading a model's files for a job, writing a
// plan's files, and the job table printout.
#pragma once

#include <atomic>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "coordinator/client.h"
#include "coordinator/job_planner.h"
#include "core/cancel.h"
#include "dashboards/http_server.h"
#include "fusetune_proto/service.pb.h"
#include "proto/curve.h"
#include "tools/cli_args.h"

namespace fusetune::cli {

// Installs SIGINT/SIGTERM handlers (once) that raise the returned flag; ignores SIGPIPE and
// SIGXFSZ (a file-size limit then fails the write, as a full disk does).
const std::atomic<bool>& stop_on_signals();
// True once a second SIGINT or SIGTERM arrived (stop_on_signals installs the handler).
const std::atomic<bool>& stopped_twice();
// Raised with the stop flag (handlers installed): work run under it (core/cancel.h) on the
// command's own thread, as `tune` plans its model, is given up at SIGINT or SIGTERM.
const CancelToken& signal_cancel_token();
// This executable's path, from /proc/self/exe.
std::string self_executable();
// A model's files as coordinator::model_files names them (the .onnx and the external data its
// tensors name), read.
std::vector<wire::ModelFile> read_model_files(const std::filesystem::path& model);
// Writes files under `dir` (created), refusing paths that leave it.
void write_files(const std::vector<wire::ModelFile>& files, const std::filesystem::path& dir);
// --key NAME.key and --coordinator-key COORD.pub (both or neither) of a worker or client.
wire::ClientSecurity client_security(const Args& args);
// --key NAME.key with --allow-workers FILE.pub|DIR and/or --allow-clients FILE.pub|DIR (the key
// and at least one, or none) of a coordinator: the keys of each role.
wire::ServerSecurity server_security(const Args& args);
// The HTTP side's options: the address of `address_flag`, the token from the file of
// `token_flag`'s file (which others may not read) or $FUSETUNE_HTTP_TOKEN, never from the command
// line (ps shows it), and the --http-* limits (tools/command_table.h), range-checked by HttpServer.
dashboards::HttpOptions http_options(const Args& args, const std::string& address_flag, const std::string& token_flag);
// One line per job: id, state, model, device, tasks done/total, measured, cache hits.
// A job's options from tune's and submit's flags: --shape, --candidates, --plan-device, --trials,
// --time (seconds), --precision (model or tf32), --libraries.
coordinator::JobOptions job_options(const Args& args);

void print_jobs(const std::vector<wire::JobStatus>& jobs);
// The closing table of a finished job, from its summary.
void print_summary(const wire::JobStatus& job);

}  // namespace fusetune::cli
