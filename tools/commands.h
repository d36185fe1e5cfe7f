// The fusetune subcommands. Each takes its arguments (after the subcommand name), prints to
// stdout/stderr and returns the process exit code: 0 success, 1 a verification failure (outputs
// differ), 2 bad input or usage (one line naming the culprit on stderr).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace fusetune::cli {

int cmd_cancel(const std::vector<std::string>& argv);
int cmd_compile(const std::vector<std::string>& argv);
int cmd_coordinator(const std::vector<std::string>& argv);
int cmd_db(const std::vector<std::string>& argv);
int cmd_export(const std::vector<std::string>& argv);
int cmd_inspect(const std::vector<std::string>& argv);
int cmd_keys(const std::vector<std::string>& argv);
int cmd_plan(const std::vector<std::string>& argv);
int cmd_profile(const std::vector<std::string>& argv);
int cmd_report(const std::vector<std::string>& argv);
int cmd_run(const std::vector<std::string>& argv);
int cmd_status(const std::vector<std::string>& argv);
int cmd_submit(const std::vector<std::string>& argv);
int cmd_tune(const std::vector<std::string>& argv);
int cmd_worker(const std::vector<std::string>& argv);
int cmd_worker_child(const std::vector<std::string>& argv);

// The search database's default path: cache_dir("search.db") (core/files.h): under
// $FUSETUNE_CACHE_DIR, else $XDG_CACHE_HOME/fusetune, else ~/.cache/fusetune.
std::filesystem::path default_db_path();

}  // namespace fusetune::cli
