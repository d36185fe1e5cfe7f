// The command line's table (tools/command_table.h) against what states it elsewhere: README.md's
// "Commands" block shows each command's synopsis exactly as the tool prints it, and the parser
// made from the table refuses an option outside it and a missing required one, naming them; the
// commands' default search database is where the caches are.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "core/error.h"
#include "tools/command_table.h"
#include "tools/commands.h"

namespace fusetune::cli {
namespace {

std::string readme() {
  std::ifstream f(std::string(FUSETUNE_SOURCE_DIR) + "/README.md");
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

TEST(CommandTable, TheReadmeShowsEverySynopsisAsTheToolPrintsIt) {
  const std::string text = readme();
  const size_t section = text.find("\n## Commands\n");
  ASSERT_NE(section, std::string::npos) << "README.md has no \"## Commands\" section";
  const size_t open = text.find("```sh\n", section);
  const size_t close = text.find("```\n", open + 6);
  ASSERT_NE(close, std::string::npos);
  std::multiset<std::string> shown;
  std::istringstream block(text.substr(open + 6, close - open - 6));
  for (std::string line; std::getline(block, line);) {
    if (line.rfind("build/fusetune ", 0) == 0) shown.insert(line.substr(std::string("build/").size()));
  }
  std::multiset<std::string> made;
  for (const CommandSpec& c : command_table()) {
    if (!c.internal) made.insert(synopsis(c));
  }
  for (const std::string& s : made) {
    EXPECT_EQ(shown.count(s), 1u) << "README.md's Commands block should show this line once:\nbuild/" << s;
  }
  for (const std::string& s : shown) {
    EXPECT_EQ(made.count(s), 1u) << "README.md shows a synopsis the tool does not print:\nbuild/" << s;
  }
}

TEST(CommandTable, EveryCommandHasOneNameAndEachOptionOnce) {
  std::set<std::string> names;
  for (const CommandSpec& c : command_table()) {
    EXPECT_TRUE(names.insert(c.name).second) << c.name;
    EXPECT_FALSE(c.summary.empty()) << c.name;
    std::set<std::string> options;
    for (const OptionSpec& o : c.options) {
      EXPECT_TRUE(options.insert(o.name).second) << c.name << " --" << o.name;
      EXPECT_FALSE(o.help.empty() && !c.internal) << c.name << " --" << o.name;
    }
    EXPECT_NE(command_help(c).find("usage: " + synopsis(c)), std::string::npos);
    if (!c.internal) {
      EXPECT_NE(overview().find(synopsis(c).substr(std::string("fusetune ").size())), std::string::npos) << c.name;
    }
  }
  EXPECT_THROW(command_spec("no-such-command"), Error);
}

TEST(CommandTable, TheParserRefusesWhatTheTableLacksNamingIt) {
  const CommandSpec& spec = command_spec("export");
  const Args ok = parse_args(spec, {"3", "--coordinator", "tcp://127.0.0.1:5", "--out", "plan", "--timeout-s", "2"});
  EXPECT_EQ(ok.get("out"), "plan");
  try {
    parse_args(spec, {"3", "--coordinator", "tcp://127.0.0.1:5", "--out", "plan", "--no-such-flag", "1"});
    FAIL() << "an option outside the table was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no-such-flag"), std::string::npos) << e.what();
  }
  try {
    parse_args(spec, {"3", "--coordinator", "tcp://127.0.0.1:5"});
    FAIL() << "a missing required option was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--out is required"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(synopsis(spec)), std::string::npos) << e.what();
  }
  try {
    check_usage(false, spec);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "usage: " + synopsis(spec));
  }
}

// The default search database follows FUSETUNE_CACHE_DIR as every cache does (it did not).
TEST(CommandTable, TheDefaultDatabaseLivesInTheCacheDirectory) {
  const char* before = std::getenv("FUSETUNE_CACHE_DIR");
  const std::string saved = before ? before : "";
  ::setenv("FUSETUNE_CACHE_DIR", "/nonexistent/fusetune-cache", 1);
  EXPECT_EQ(default_db_path(), std::filesystem::path("/nonexistent/fusetune-cache/search.db"));
  ::unsetenv("FUSETUNE_CACHE_DIR");
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  if (xdg != nullptr) {
    EXPECT_EQ(default_db_path(), std::filesystem::path(xdg) / "fusetune" / "search.db");
  } else if (home != nullptr) {
    EXPECT_EQ(default_db_path(), std::filesystem::path(home) / ".cache" / "fusetune" / "search.db");
  }
  if (before != nullptr) ::setenv("FUSETUNE_CACHE_DIR", saved.c_str(), 1);
}

}  // namespace
}  // namespace fusetune::cli
