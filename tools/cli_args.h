// Command-line parsing shared by the fusetune subcommands: positional arguments, --flag VALUE and
// --flag=VALUE options (repeatable), boolean switches, and the --shape NAME=1x3x224x224 syntax.
// Unknown options are errors that name the option, so a typo never silently changes a run.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace fusetune::cli {

class Args {
 public:
  // `valued` lists the options that take a value, `switches` those that do not.
  Args(const std::vector<std::string>& argv, const std::set<std::string>& valued, const std::set<std::string>& switches);

  const std::vector<std::string>& positional() const { return positional_; }
  bool has(const std::string& opt) const { return values_.count(opt) != 0 || switches_.count(opt) != 0; }
  std::string get(const std::string& opt, const std::string& fallback = "") const;
  std::vector<std::string> all(const std::string& opt) const;
  double number(const std::string& opt, double fallback) const;

 private:
  std::vector<std::string> positional_;
  std::map<std::string, std::vector<std::string>> values_;
  std::set<std::string> switches_;
};

// Parses "NAME=1x3x224x224" (a scalar is "NAME=scalar"); errors name the argument.
std::pair<std::string, Shape> parse_shape_arg(const std::string& arg);
std::map<std::string, Shape> shape_overrides(const Args& args);

// "1.23 GB"-style figure for byte counts and "4.1 GFLOP"-style for operation counts.
std::string human_bytes(double bytes);
std::string human_count(double n, const std::string& unit);

}  // namespace fusetune::cli
