#include "core/kernel_text.h"

#include <algorithm>
#include <map>
#include <optional>
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

// "64x72" as {64, 72}; "" as {}; nullopt for a list with an empty entry ("64x") or one too long.
std::optional<std::vector<int64_t>> extents(const std::string& text) {
  std::vector<int64_t> out;
  for (size_t at = 0; at < text.size();) {
    const size_t x = std::min(text.find('x', at), text.size());
    if (x == at || x - at > 15) return std::nullopt;
    out.push_back(std::stoll(text.substr(at, x - at)));
    at = x + 1;
    if (at == text.size()) return std::nullopt;  // a trailing 'x'
  }
  return out;
}

// The tensor map of parameter `param` of kernel `kernel`, checked as cuTensorMapEncodeTiled checks
// it (the source among the parameters before it).
TensorMapSpec tensor_map(const std::string& kernel, const std::string& param, const std::smatch& m,
                         const std::vector<KernelParam>& before) {
  TensorMapSpec t;
  for (size_t i = 0; i < before.size(); ++i) {
    if (before[i].name == m[1] && before[i].scratch_elements == 0 && before[i].tensor_map.source < 0) t.source = static_cast<int>(i);
  }
  const auto bad = [&](const std::string& why) { return "kernel text: kernel '" + kernel + "' tensor map '" + param + "': " + why; };
  check(t.source >= 0, bad("maps '" + std::string(m[1]) + "', which is no FT_GLOBAL parameter before it"));
  const auto dims = extents(m[2]), strides = extents(m[3]), box = extents(m[4]);
  check(dims && strides && box, bad("an extent list with an empty entry"));
  t.dims = *dims;
  t.strides = *strides;
  t.box = *box;
  t.swizzle = std::stoi(m[5]);
  const int64_t eb = before[static_cast<size_t>(t.source)].element_bytes;
  check(!t.dims.empty() && t.dims.size() <= 5 && t.box.size() == t.dims.size() && t.strides.size() + 1 == t.dims.size(),
        bad("needs 1 to 5 dimensions, a box entry each and a stride for each but the innermost"));
  for (size_t d = 0; d < t.dims.size(); ++d) {
    check(t.dims[d] > 0 && t.dims[d] <= (int64_t{1} << 32), bad("dimension " + std::to_string(d) + " of " + std::to_string(t.dims[d])));
    check(t.box[d] > 0 && t.box[d] <= 256, bad("box dimension " + std::to_string(d) + " of " + std::to_string(t.box[d]) + " (1 to 256)"));
  }
  for (const int64_t s : t.strides) check(s > 0 && s % 16 == 0 && s < (int64_t{1} << 40), bad("a stride of " + std::to_string(s) + " bytes (a multiple of 16)"));
  check(t.box[0] * eb % 16 == 0, bad("an innermost box of " + std::to_string(t.box[0] * eb) + " bytes (a multiple of 16)"));
  check(t.swizzle == 0 || t.swizzle == 32 || t.swizzle == 64 || t.swizzle == 128, bad("a swizzle of " + std::to_string(t.swizzle) + " bytes"));
  // Swizzled, a box row is one span: each row's 16-byte units stay in its own bytes (a narrower row
  // would send units past the box).
  check(t.swizzle == 0 || t.box[0] * eb == t.swizzle,
        bad("an innermost box of " + std::to_string(t.box[0] * eb) + " bytes under a " + std::to_string(t.swizzle) +
            "-byte swizzle (one span a row)"));
  return t;
}

}  // namespace

std::vector<KernelSignature> kernel_signatures(const std::string& cuda_source) {
  static const std::string kHead = "extern \"C\" __global__ void ";
  static const std::regex param_re(R"(^\s*FT_GLOBAL\(((const )?([a-z ]+))\) (\w+)\s*$)");
  static const std::regex scratch_re(R"(^\s*FT_SCRATCH\(([a-z ]+), ([0-9]+)(, ([0-9]+), ([0-9]+))?\) (\w+)\s*$)");
  static const std::regex map_re(R"(^\s*FT_TENSOR_MAP\((\w+), ([0-9x]+), ([0-9x]*), ([0-9x]+), ([0-9]+)\) (\w+)\s*$)");
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
                              m[3].matched ? std::stoll(m[5]) : 0, {}});
        } else if (!param.empty() && !k.params.empty() && k.params.back().tensor_map.source >= 0 && !std::regex_match(param, m, map_re)) {
          fail("kernel text: kernel '", k.name, "' has parameter '", param, "' after a tensor map (tensor maps come last)");
        } else if (!param.empty() && std::regex_match(param, m, map_re)) {
          KernelParam t{m[6], "ft_tensor_map", 128, false, 0, 0, 0, {}};
          t.tensor_map = tensor_map(k.name, m[6], m, k.params);
          k.params.push_back(std::move(t));
        } else if (!param.empty()) {
          check(std::regex_match(param, m, param_re), "kernel text: kernel '", k.name, "' has a parameter '", param,
                "' that is not FT_GLOBAL(type) name, FT_SCRATCH(type, elements[, first block, blocks a group]) name or "
                "FT_TENSOR_MAP(source, dims, strides, box, swizzle) name");
          k.params.push_back({m[4], m[1], ctype_bytes(m[3]), !m[2].matched, 0, 0, 0, {}});
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
