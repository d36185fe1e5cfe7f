// fusetune: the command-line entry point. `--help` and `help COMMAND` print what
// tools/command_table.h says of the commands. Dispatches to a subcommand and turns any Error into
// one line on stderr and exit code 2; a kernel that failed the host executor's checks (race,
// barrier, bounds, uninitialised shared memory) into one line naming the kernel and the hazard
// and exit code 3.
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "core/error.h"
#include "simt/report.h"
#include "tools/command_table.h"
#include "tools/commands.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || (args[0] == "help" && args.size() == 1)) {
    std::fputs(fusetune::cli::overview().c_str(), args.empty() ? stderr : stdout);
    return args.empty() ? 2 : 0;
  }
  const std::string cmd = args[0];
  args.erase(args.begin());
  try {
    if (cmd == "help") {  // help COMMAND: its synopsis, summary and options
      const fusetune::cli::CommandSpec& spec = fusetune::cli::command_spec(args[0]);
      fusetune::check(args.size() == 1 && !spec.internal, "usage: fusetune help COMMAND");
      std::fputs(fusetune::cli::command_help(spec).c_str(), stdout);
      return 0;
    }
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
    std::fprintf(stderr, "fusetune: error: unknown command '%s'\n%s", cmd.c_str(), fusetune::cli::overview().c_str());
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
