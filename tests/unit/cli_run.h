// Test helper: runs the real `fusetune` binary (FUSETUNE_BINARY) with arguments through the shell
// and returns its exit code and its output (stdout and stderr together).
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace fusetune::testing {

struct Outcome {
  int exit_code = -1;
  std::string output;
};

inline Outcome run_cli(const std::string& args) {
  const std::string cmd = std::string(FUSETUNE_BINARY) + " " + args + " 2>&1";
  Outcome o;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return o;
  std::array<char, 4096> buf{};
  while (fgets(buf.data(), static_cast<int>(buf.size()), p) != nullptr) o.output += buf.data();
  const int status = pclose(p);
  o.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return o;
}

}  // namespace fusetune::testing
