// fusetune: the command-line entry point. Dispatches to a subcommand and turns any Error into
// one line on stderr and exit code 2; a kernel that failed the host executor's checks (race,
// barrier, bounds, uninitialised shared memory) into one line naming the kernel and the hazard
// and exit code 3.
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "core/error.h"
#include "simt/report.h"
#include "tools/commands.h"

namespace {

constexpr const char* kUsage =
    "usage: fusetune COMMAND ...\n"
    "commands:\n"
    "  tune MODEL.onnx [--device auto|host|NAME] [--out PLAN_DIR] [--db PATH] [--shape NAME=DxD...] [--candidates N]\n"
    "      [--trials N] [--time S]\n"
    "      tune the model with an embedded coordinator and local worker; write the best plan\n"
    "  coordinator --listen tcp://ADDRESS:PORT [--db PATH] [--key COORD.key --allow-workers KEYS --allow-clients KEYS]\n"
    "      [--max-message-mb MB] [--max-upload-gb GB] [--max-client-upload-gb GB] [--max-store-gb GB]\n"
    "      [--http HOST:PORT [--http-token-file FILE] [--http-max-connections N] [--http-max-header-kb KB]\n"
    "       [--http-max-headers N] [--http-timeout-s S] [--http-keep-alive-s S]] [--log-format text|json]\n"
    "      [--endpoint-file PATH]\n"
    "      the tuning service: plans jobs, leases tasks to workers, keeps the search database (port 0: one the\n"
    "      system chooses; --endpoint-file: the endpoints bound, as JSON)\n"
    "  worker --coordinator tcp://HOST:PORT [--device all|N|host] [--compile-jobs N] [--key W.key --coordinator-key C.pub]\n"
    "      [--log-format text|json] [--metrics HOST:PORT [--metrics-token-file FILE] [--http-* limits as the coordinator's]]\n"
    "      a worker daemon: compiles, verifies and times candidates on this machine's GPU (or host)\n"
    "  submit MODEL.onnx --coordinator EP [--device NAME|host] [--candidates N] [--trials N] [--time S] [--wait]\n"
    "  status [JOB] --coordinator EP [--json]\n"
    "  cancel JOB --coordinator EP   export JOB --coordinator EP --out PLAN_DIR\n"
    "      drive jobs on a running coordinator (with --key/--coordinator-key when it uses CURVE)\n"
    "  report JOB --out report.html [--db PATH]\n"
    "      a job's charts and figures as one self-contained HTML page, from the search database alone\n"
    "  keys generate NAME [--out DIR]\n"
    "      a CURVE key pair: NAME.key (private) and NAME.pub\n"
    "  compile MODEL.onnx --device NAME|--device-file PATH --out DIR [--shape NAME=DxD...] [--verify-blocks N] [--dump-ir]\n"
    "      generate kernels for the model's plan, verify each on the host (on at most N blocks, default 16; 0: all)\n"
    "      and write a plan bundle (--dump-ir: print their Kernel IR)\n"
    "  db stats|gc|vacuum|export FILE|import FILE [--db PATH]\n"
    "      the search database (default ~/.cache/fusetune/search.db): counts per device identity and size;\n"
    "      gc drops finished tasks' payloads (keeps every measurement); vacuum shrinks the file; import merges\n"
    "  inspect MODEL.onnx [--shape NAME=DxD...] [--json]\n"
    "      op histograms, unsupported ops, FLOPs, parameters, unfused vs minimum DRAM traffic\n"
    "  plan MODEL.onnx --device NAME|--device-file PATH [--shape NAME=DxD...] [--top-k K] [--json] [--no-fusion]\n"
    "      fusion groups, kernel launches, best modeled tile candidate per group, modeled DRAM traffic\n"
    "  run MODEL.onnx|PLAN_DIR --inputs DIR [--out DIR] [--rtol R] [--atol A] [--shape NAME=DxD...]\n"
    "      [--backend auto|host|cuda|cuda:N]\n"
    "      run a model on the reference interpreter, or a plan bundle on the GPU or the host;\n"
    "      compare with DIR/output_N.pb if present\n"
    "  profile PLAN_DIR [--inputs DIR] [--seed S] [--sites N] [--sol] [--json]\n"
    "      run a plan bundle once on the host executor and count what each kernel does to memory against the\n"
    "      traffic model; --sol: each kernel's speed of light on the plan's device beside its modeled time\n";

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    std::fputs(kUsage, args.empty() ? stderr : stdout);
    return args.empty() ? 2 : 0;
  }
  const std::string cmd = args[0];
  args.erase(args.begin());
  try {
    if (cmd == "cancel") return fusetune::cli::cmd_cancel(args);
    if (cmd == "compile") return fusetune::cli::cmd_compile(args);
    if (cmd == "coordinator") return fusetune::cli::cmd_coordinator(args);
    if (cmd == "export") return fusetune::cli::cmd_export(args);
    if (cmd == "status") return fusetune::cli::cmd_status(args);
    if (cmd == "submit") return fusetune::cli::cmd_submit(args);
    if (cmd == "tune") return fusetune::cli::cmd_tune(args);
    if (cmd == "worker") return fusetune::cli::cmd_worker(args);
    if (cmd == "worker-child") return fusetune::cli::cmd_worker_child(args);
    if (cmd == "db") return fusetune::cli::cmd_db(args);
    if (cmd == "inspect") return fusetune::cli::cmd_inspect(args);
    if (cmd == "keys") return fusetune::cli::cmd_keys(args);
    if (cmd == "plan") return fusetune::cli::cmd_plan(args);
    if (cmd == "profile") return fusetune::cli::cmd_profile(args);
    if (cmd == "report") return fusetune::cli::cmd_report(args);
    if (cmd == "run") return fusetune::cli::cmd_run(args);
    std::fprintf(stderr, "fusetune: error: unknown command '%s'\n%s", cmd.c_str(), kUsage);
    return 2;
  } catch (const fusetune::simt::CheckFailed& e) {
    std::fprintf(stderr, "fusetune: check failed: %s\n", e.what());
    return 3;
  } catch (const fusetune::Error& e) {
    std::fprintf(stderr, "fusetune: error: %s\n", e.what());
    return 2;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "fusetune: error: out of memory\n");
    return 2;
  } catch (const std::exception& e) {  // a ZeroMQ or filesystem failure
    std::fprintf(stderr, "fusetune: error: %s\n", e.what());
    return 2;
  }
}
