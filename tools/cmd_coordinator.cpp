// fusetune coordinator --listen tcp://0.0.0.0:PORT [--db PATH]: the tuning service
// (coordinator/server.h), until SIGINT or SIGTERM.
#include <cstdio>

#include "coordinator/server.h"
#include "core/error.h"
#include "tools/cli_args.h"
#include "tools/commands.h"
#include "tools/service_common.h"

namespace fusetune::cli {

int cmd_coordinator(const std::vector<std::string>& argv) {
  const Args args(argv, {"listen", "db", "heartbeat-ms", "worker-timeout-ms", "max-attempts"}, {});
  check(args.positional().empty() && args.has("listen"),
        "usage: fusetune coordinator --listen tcp://ADDRESS:PORT [--db PATH] [--worker-timeout-ms MS]");
  coordinator::ServerOptions opt;
  opt.listen = args.get("listen");
  opt.db = args.has("db") ? std::filesystem::path(args.get("db")) : default_db_path();
  std::filesystem::create_directories(std::filesystem::absolute(opt.db).parent_path());
  opt.heartbeat_ms = static_cast<int>(args.number("heartbeat-ms", 1000));
  opt.worker_timeout_ms = static_cast<int>(args.number("worker-timeout-ms", 5000));
  opt.max_attempts = static_cast<int>(args.number("max-attempts", 3));
  const std::atomic<bool>& stop = stop_on_signals();
  std::fprintf(stderr, "fusetune coordinator: no CURVE keys: workers and clients are not authenticated; use on "
                       "loopback or a trusted network only\n");
  zmq::context_t context;
  coordinator::Server server(context, opt);
  server.run(stop);
  std::fprintf(stderr, "fusetune coordinator: stopped\n");
  return 0;
}

}  // namespace fusetune::cli
