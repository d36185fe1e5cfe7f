#include "tools/cli_args.h"

#include <cstdio>

#include "core/error.h"

namespace fusetune::cli {

Args::Args(const std::vector<std::string>& argv, const std::set<std::string>& valued,
           const std::set<std::string>& switches) {
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a.rfind("--", 0) != 0 || a == "--") {
      positional_.push_back(a);
      continue;
    }
    const size_t eq = a.find('=');
    const std::string name = a.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    if (switches.count(name)) {
      check(eq == std::string::npos, "option --", name, " takes no value");
      switches_.insert(name);
    } else if (valued.count(name)) {
      if (eq != std::string::npos) {
        values_[name].push_back(a.substr(eq + 1));
      } else {
        check(i + 1 < argv.size(), "option --", name, " needs a value");
        values_[name].push_back(argv[++i]);
      }
    } else {
      fail("unknown option --", name);
    }
  }
}

std::string Args::get(const std::string& opt, const std::string& fallback) const {
  auto it = values_.find(opt);
  return it == values_.end() ? fallback : it->second.back();
}

std::vector<std::string> Args::all(const std::string& opt) const {
  auto it = values_.find(opt);
  return it == values_.end() ? std::vector<std::string>{} : it->second;
}

double Args::number(const std::string& opt, double fallback) const {
  if (!has(opt)) return fallback;
  const std::string v = get(opt);
  try {
    size_t used = 0;
    const double d = std::stod(v, &used);
    check(used == v.size(), "");
    return d;
  } catch (const std::exception&) {
    fail("option --", opt, ": '", v, "' is not a number");
  }
}

std::pair<std::string, Shape> parse_shape_arg(const std::string& arg) {
  const size_t eq = arg.rfind('=');
  check(eq != std::string::npos && eq > 0, "--shape '", arg, "': expected NAME=DxDx... (e.g. input=1x3x224x224)");
  const std::string name = arg.substr(0, eq);
  const std::string dims = arg.substr(eq + 1);
  Shape s;
  if (dims == "scalar") return {name, s};
  size_t at = 0;
  while (at <= dims.size()) {
    const size_t x = dims.find('x', at);
    const std::string d = dims.substr(at, x == std::string::npos ? std::string::npos : x - at);
    check(!d.empty() && d.find_first_not_of("0123456789") == std::string::npos && d.size() <= 15, "--shape '", arg,
          "': dimension '", d, "' is not a non-negative integer");
    s.push_back(std::stoll(d));
    if (x == std::string::npos) break;
    at = x + 1;
  }
  return {name, s};
}

std::map<std::string, Shape> shape_overrides(const Args& args) {
  std::map<std::string, Shape> out;
  for (const std::string& a : args.all("shape")) out.insert(parse_shape_arg(a));
  return out;
}

std::string human_bytes(double bytes) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB"};
  int u = 0;
  while (bytes >= 1000 && u < 4) {
    bytes /= 1000;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", bytes, units[u]);
  return buf;
}

std::string human_count(double n, const std::string& unit) {
  const char* prefixes[] = {"", "K", "M", "G", "T"};
  int p = 0;
  while (n >= 1000 && p < 4) {
    n /= 1000;
    ++p;
  }
  char buf[48];
  std::snprintf(buf, sizeof buf, p == 0 ? "%.0f %s%s" : "%.2f %s%s", n, prefixes[p], unit.c_str());
  return buf;
}

}  // namespace fusetune::cli
