#include "core/kernel_text.h"

#include <map>
#include <regex>

#include "core/error.h"

namespace fusetune {

namespace {

int ctype_bytes(const std::string& t) {
  static const std::map<std::string, int> sizes = {{"float", 4},          {"double", 8},         {"long long", 8},
                                                   {"unsigned long long", 8}, {"int", 4},        {"short", 2},
                                                   {"unsigned short", 2}, {"signed char", 1},    {"unsigned char", 1},
                                                   {"unsigned int", 4}};
  const auto it = sizes.find(t);
  check(it != sizes.end(), "kernel text: a kernel parameter of type '", t, "'");
  return it->second;
}

}  // namespace

std::vector<KernelSignature> kernel_signatures(const std::string& cuda_source) {
  static const std::string kHead = "extern \"C\" __global__ void ";
  static const std::regex param_re(R"(^\s*FT_GLOBAL\(((const )?([a-z ]+))\) (\w+)\s*$)");
  static const std::regex scratch_re(R"(^\s*FT_SCRATCH\(([a-z ]+), ([0-9]+)(, ([0-9]+), ([0-9]+))?\) (\w+)\s*$)");
  std::vector<KernelSignature> out;
  for (size_t at = cuda_source.find(kHead); at != std::string::npos; at = cuda_source.find(kHead, at + 1)) {
    size_t i = at + kHead.size();
    if (cuda_source.compare(i, 18, "__launch_bounds__(") == 0) i = cuda_source.find(") ", i) + 2;
    const size_t open = cuda_source.find('(', i);
    check(open != std::string::npos, "kernel text: a kernel signature without parameters");
    KernelSignature k;
    k.name = cuda_source.substr(i, open - i);
    k.offset = at;
    // The parameter list up to its closing parenthesis, split at top-level commas.
    int depth = 0;
    std::string param;
    for (size_t j = open + 1; j < cuda_source.size(); ++j) {
      const char c = cuda_source[j];
      if ((c == ',' || c == ')') && depth == 0) {
        std::smatch m;
        if (!param.empty() && std::regex_match(param, m, scratch_re)) {
          k.params.push_back({m[6], m[1], ctype_bytes(m[1]), true, std::stoll(m[2]), m[3].matched ? std::stoll(m[4]) : 0,
                              m[3].matched ? std::stoll(m[5]) : 0});
        } else if (!param.empty()) {
          check(std::regex_match(param, m, param_re), "kernel text: kernel '", k.name, "' has a parameter '", param,
                "' that is not FT_GLOBAL(type) name or FT_SCRATCH(type, elements[, first block, blocks a group]) name");
          k.params.push_back({m[4], m[1], ctype_bytes(m[3]), !m[2].matched, 0});
        }
        param.clear();
        if (c == ')') break;
        continue;
      }
      depth += c == '(' ? 1 : (c == ')' ? -1 : 0);
      param += c;
    }
    out.push_back(std::move(k));
  }
  return out;
}

bool waits_for_predecessor(const std::string& source, const std::string& name) {
  constexpr std::string_view kWait = "  FT_GRID_DEPENDENCY();\n";
  const size_t head = source.find(") " + name + "(");
  if (head == std::string::npos) return false;
  const size_t body = source.find(") {\n", head);
  return body != std::string::npos && source.compare(body + 4, kWait.size(), kWait) == 0;
}

}  // namespace fusetune
