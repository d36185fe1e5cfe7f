// fusetune coordinator (its options: tools/command_table.cpp): the tuning service (coordinator/server.h), until SIGINT or SIGTERM; with
// --http, its metrics, JSON API and live dashboard (dashboards/), within the --http-* limits. The
// token may come from $FUSETUNE_HTTP_TOKEN instead of the file. Port 0 (in --listen or --http)
// takes a port the system chooses; --endpoint-file writes, once both listen, the endpoints bound
// ({"listen": "tcp://...", "http": PORT or null}, replaced atomically): how a script or a test
// learns them without guessing a free port.
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "coordinator/server.h"
#include "core/error.h"
#include "core/files.h"
#include "core/log.h"
#include "tools/cli_args.h"
#include "tools/command_table.h"
#include "tools/commands.h"
#include "tools/service_common.h"

namespace fusetune::cli {

int cmd_coordinator(const std::vector<std::string>& argv) {
  const CommandSpec& spec = command_spec("coordinator");
  const Args args = parse_args(spec, argv);
  check_usage(args.positional().empty(), spec);
  set_log_format(parse_log_format(args.get("log-format", "text")));
  coordinator::ServerOptions opt;
  opt.listen = args.get("listen");
  opt.db = args.has("db") ? std::filesystem::path(args.get("db")) : default_db_path();
  std::filesystem::create_directories(std::filesystem::absolute(opt.db).parent_path());
  opt.heartbeat_ms = static_cast<int>(args.number("heartbeat-ms", 1000));
  opt.worker_timeout_ms = static_cast<int>(args.number("worker-timeout-ms", 5000));
  opt.max_attempts = static_cast<int>(args.number("max-attempts", 3));
  const double max_mb = args.number("max-message-mb", 64);
  check(max_mb >= 5 && max_mb <= 4096, "--max-message-mb: from 5 (an upload piece is 4 MB) to 4096, got ", args.get("max-message-mb"));
  opt.max_message_bytes = static_cast<int64_t>(max_mb * (1 << 20));
  auto quota = [&](const char* flag, int64_t fallback) {
    const double gb = args.number(flag, static_cast<double>(fallback) / (1LL << 30));
    check(gb > 0 && gb <= (1 << 20), "--", flag, ": from more than 0 to 1048576 (GiB), got ", args.get(flag));
    return static_cast<int64_t>(gb * (1LL << 30));
  };
  opt.max_upload_bytes = quota("max-upload-gb", opt.max_upload_bytes);
  opt.max_client_upload_bytes = quota("max-client-upload-gb", opt.max_client_upload_bytes);
  opt.max_store_bytes = quota("max-store-gb", opt.max_store_bytes);
  opt.security = server_security(args);
  opt.http = http_options(args, "http", "http-token-file");
  const bool loopback = opt.listen.find("127.0.0.1") != std::string::npos || opt.listen.find("localhost") != std::string::npos ||
                        opt.listen.rfind("ipc://", 0) == 0 || opt.listen.rfind("inproc://", 0) == 0;
  if (!opt.security.enabled() && !loopback) {
    write_log(LogLevel::kWarn, "coordinator", {},
              "listening beyond loopback without CURVE keys: anyone who can reach " + opt.listen +
                  " can submit jobs and feed results (see `fusetune keys generate`)");
  }
  const std::atomic<bool>& stop = stop_on_signals();
  zmq::context_t context;
  coordinator::Server server(context, opt);
  if (args.has("endpoint-file")) {
    const nlohmann::json bound = {{"listen", server.endpoint()},
                                  {"http", server.http_port() > 0 ? nlohmann::json(server.http_port()) : nlohmann::json(nullptr)}};
    write_file_atomically(args.get("endpoint-file"), bound.dump() + "\n");
  }
  server.run(stop);
  write_log(LogLevel::kInfo, "coordinator", {}, "stopped");
  return 0;
}

}  // namespace fusetune::cli
