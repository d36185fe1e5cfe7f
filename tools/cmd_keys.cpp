// fusetune keys generate NAME (its options: tools/command_table.cpp): a CURVE key pair for a coordinator, worker or client
// (proto/curve.h): DIR/NAME.key (both halves, mode 0600) and DIR/NAME.pub (the public half, to
// hand to the other side: a coordinator's --allow-workers or --allow-clients directory, a worker's
// --coordinator-key).
#include <cstdio>

#include "core/error.h"
#include "proto/curve.h"
#include "tools/cli_args.h"
#include "tools/command_table.h"
#include "tools/commands.h"

namespace fusetune::cli {

int cmd_keys(const std::vector<std::string>& argv) {
  const CommandSpec& spec = command_spec("keys");
  const Args args = parse_args(spec, argv);
  check_usage(args.positional().size() == 2 && args.positional()[0] == "generate", spec);
  const std::string name = args.positional()[1];
  check(name.find('/') == std::string::npos && !name.empty(), "key name '", name, "' must be a plain file name");
  const std::filesystem::path dir = args.get("out", ".");
  wire::write_key_pair(wire::generate_key_pair(), dir, name);
  std::printf("wrote %s (keep it private) and %s (give it to the other side)\n", (dir / (name + ".key")).c_str(),
              (dir / (name + ".pub")).c_str());
  return 0;
}

}  // namespace fusetune::cli
