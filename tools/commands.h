// The fusetune subcommands. Each takes its arguments (after the subcommand name), prints to
// stdout/stderr and returns the process exit code: 0 success, 1 a verification failure (outputs
// differ), 2 bad input or usage (one line naming the culprit on stderr).
#pragma once

#include <string>
#include <vector>

namespace fusetune::cli {

int cmd_compile(const std::vector<std::string>& argv);
int cmd_db(const std::vector<std::string>& argv);
int cmd_inspect(const std::vector<std::string>& argv);
int cmd_plan(const std::vector<std::string>& argv);
int cmd_run(const std::vector<std::string>& argv);

}  // namespace fusetune::cli
