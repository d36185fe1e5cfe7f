#include "backend/ptx_census.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <string_view>

namespace fusetune::backend {

namespace {

// The dot-separated parts of an opcode ("ld.global.nc.v4.u32" -> ld, global, nc, v4, u32).
std::vector<std::string_view> parts_of(std::string_view op) {
  std::vector<std::string_view> out;
  for (size_t at = 0; at <= op.size();) {
    const size_t dot = op.find('.', at);
    const size_t end = dot == std::string_view::npos ? op.size() : dot;
    out.push_back(op.substr(at, end - at));
    at = end + 1;
  }
  return out;
}

// Bits of a type part (u16, b32, f64, ...; 0 when the part is not a type).
int type_bits(std::string_view part) {
  if (part.size() < 2 || std::string_view("bsuf").find(part[0]) == std::string_view::npos) return 0;
  for (char c : part.substr(1)) {
    if (std::isdigit(static_cast<unsigned char>(c)) == 0) return 0;
  }
  return std::atoi(std::string(part.substr(1)).c_str());
}

// The width in bits of a global access: vector count x element size.
int access_bits(const std::vector<std::string_view>& parts) {
  int vector = 1, bits = 0;
  for (std::string_view p : parts) {
    if (p.size() >= 2 && p[0] == 'v' && std::isdigit(static_cast<unsigned char>(p[1])) != 0) {
      vector = std::atoi(std::string(p.substr(1)).c_str());
    } else if (const int b = type_bits(p); b > 0) {
      bits = b;
    }
  }
  return vector * bits;
}

bool has_part(const std::vector<std::string_view>& parts, std::string_view p) {
  for (std::string_view q : parts) {
    if (q == p) return true;
  }
  return false;
}

// Immediates of the software float16 conversion (see the header), in decimal or hexadecimal.
bool software_conversion_immediate(std::string_view operand) {
  static const char* const kImmediates[] = {"1199566847", "1199566848", "947912703", "947912704",
                                            "0x477ff000", "0x477fefff", "0x38800000", "0x387fffff"};
  std::string lower;
  for (char c : operand) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const char* imm : kImmediates) {
    const std::string_view i(imm);
    for (size_t at = lower.find(i); at != std::string::npos; at = lower.find(i, at + 1)) {
      const bool left = at == 0 || std::isalnum(static_cast<unsigned char>(lower[at - 1])) == 0;
      const size_t end = at + i.size();
      const bool right = end == lower.size() || std::isalnum(static_cast<unsigned char>(lower[end])) == 0;
      if (left && right) return true;
    }
  }
  return false;
}

// One statement: an optional guard (@%p1, @!%p1), the opcode, its operands. `run`: the global
// loads since the kernel's last shared store or barrier.
void count_statement(std::string_view s, PtxCounts& c, int64_t& run) {
  while (!s.empty() && (std::isspace(static_cast<unsigned char>(s.front())) != 0 || s.front() == '{' || s.front() == '}')) {
    s.remove_prefix(1);
  }
  if (!s.empty() && s.front() == '@') {
    const size_t sp = s.find_first_of(" \t");
    if (sp == std::string_view::npos) return;
    s.remove_prefix(sp);
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front())) != 0) s.remove_prefix(1);
  }
  if (s.empty() || s.front() == '.' || s.front() == '$') return;  // a directive or a label
  const size_t sp = s.find_first_of(" \t");
  const std::string_view op = s.substr(0, sp);
  const std::string_view operands = sp == std::string_view::npos ? std::string_view() : s.substr(sp);
  if (software_conversion_immediate(operands)) ++c.software_conversion;
  const std::vector<std::string_view> parts = parts_of(op);
  const std::string_view head = parts[0];
  if (head == "cvt") {
    // cvt[.rnd].dst.src: the last two parts are the types.
    if (parts.size() >= 3) {
      const std::string_view dst = parts[parts.size() - 2], src = parts.back();
      const bool src16 = src == "f16" || src == "bf16";
      const bool dst16 = dst == "f16" || dst == "bf16" || dst == "f16x2" || dst == "bf16x2";
      if (dst == "f32" && src16) ++c.cvt_f16_to_f32;
      if (dst16 && src == "f32") ++c.cvt_f32_to_f16;
    }
  } else if ((head == "ld" || head == "st") && parts.size() > 1 && parts[1] == "global") {
    const int bits = access_bits(parts);
    const bool scalar = op.find(".v") == std::string_view::npos;
    if (head == "ld") {
      ++c.global_loads;
      c.longest_load_run = std::max(c.longest_load_run, ++run);
      if (bits == 16 && scalar) ++c.global_loads_16bit;
      if (bits == 128) ++c.global_loads_128bit;
      if (has_part(parts, "nc")) ++c.global_loads_readonly;
    } else {
      ++c.global_stores;
      if (bits == 16 && scalar) ++c.global_stores_16bit;
      if (bits == 128) ++c.global_stores_128bit;
    }
  } else if ((head == "st" && parts.size() > 1 && parts[1] == "shared") || head == "bar" || head == "barrier") {
    run = 0;
  } else if ((head == "ld" || head == "st") && parts.size() > 1 && parts[1] == "local") {
    ++c.local_accesses;
  } else if (head == "cp" && parts.size() > 2 && parts[1] == "async") {
    if (parts[2] == "bulk") {
      ++c.cp_async_bulk;
    } else if (parts[2] == "wait_group" || parts[2] == "wait_all") {
      ++c.cp_async_waits;
    } else if ((parts[2] == "ca" || parts[2] == "cg") && has_part(parts, "global")) {
      ++c.cp_async;
    }
  } else if (head == "mma" && parts.size() > 1 && parts[1] == "sync") {
    ++c.mma_sync;
  } else if (head == "wgmma" && parts.size() > 1 && parts[1] == "mma_async") {
    ++c.wgmma;
  } else if (head == "ldmatrix") {
    ++c.ldmatrix;
  } else if ((head == "div" || head == "rem") && parts.size() > 1) {
    const std::string_view t = parts.back();
    if (t == "s64" || t == "u64") ++c.div_rem_64;
    if (t == "s32" || t == "u32") ++c.div_rem_32;
  }
}

}  // namespace

PtxCounts& PtxCounts::operator+=(const PtxCounts& o) {
  cvt_f16_to_f32 += o.cvt_f16_to_f32;
  cvt_f32_to_f16 += o.cvt_f32_to_f16;
  software_conversion += o.software_conversion;
  global_loads += o.global_loads;
  global_loads_16bit += o.global_loads_16bit;
  global_loads_128bit += o.global_loads_128bit;
  global_loads_readonly += o.global_loads_readonly;
  global_stores += o.global_stores;
  global_stores_16bit += o.global_stores_16bit;
  global_stores_128bit += o.global_stores_128bit;
  cp_async += o.cp_async;
  cp_async_waits += o.cp_async_waits;
  cp_async_bulk += o.cp_async_bulk;
  mma_sync += o.mma_sync;
  wgmma += o.wgmma;
  ldmatrix += o.ldmatrix;
  div_rem_64 += o.div_rem_64;
  div_rem_32 += o.div_rem_32;
  local_accesses += o.local_accesses;
  longest_load_run = std::max(longest_load_run, o.longest_load_run);
  return *this;
}

nlohmann::json PtxCounts::to_json() const {
  return {{"cvt_f16_to_f32", cvt_f16_to_f32},
          {"cvt_f32_to_f16", cvt_f32_to_f16},
          {"software_conversion", software_conversion},
          {"global_loads", global_loads},
          {"global_loads_16bit", global_loads_16bit},
          {"global_loads_128bit", global_loads_128bit},
          {"global_loads_readonly", global_loads_readonly},
          {"global_stores", global_stores},
          {"global_stores_16bit", global_stores_16bit},
          {"global_stores_128bit", global_stores_128bit},
          {"cp_async", cp_async},
          {"cp_async_waits", cp_async_waits},
          {"cp_async_bulk", cp_async_bulk},
          {"mma_sync", mma_sync},
          {"wgmma", wgmma},
          {"ldmatrix", ldmatrix},
          {"div_rem_64", div_rem_64},
          {"div_rem_32", div_rem_32},
          {"local_accesses", local_accesses},
          {"longest_load_run", longest_load_run}};
}

std::vector<KernelPtx> ptx_census(const std::string& ptx) {
  std::vector<KernelPtx> out;
  bool in_kernel = false;  // a .func body between kernels is nobody's
  int64_t run = 0;
  const std::string_view text(ptx);
  for (size_t line_at = 0; line_at < text.size();) {
    size_t end = text.find('\n', line_at);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(line_at, end - line_at);
    line_at = end + 1;
    if (const size_t comment = line.find("//"); comment != std::string_view::npos) line = line.substr(0, comment);
    if (const size_t entry = line.find(".entry "); entry != std::string_view::npos) {
      std::string_view name = line.substr(entry + 7);
      name = name.substr(0, name.find_first_of("( \t"));
      out.push_back({std::string(name), {}});
      in_kernel = true;
      run = 0;
      continue;
    }
    if (line.find(".func ") != std::string_view::npos) in_kernel = false;
    if (!in_kernel) continue;  // module directives, functions
    for (size_t at = 0; at < line.size();) {
      const size_t semi = line.find(';', at);
      const size_t stop = semi == std::string_view::npos ? line.size() : semi;
      count_statement(line.substr(at, stop - at), out.back().counts, run);
      at = stop + 1;
    }
  }
  return out;
}

}  // namespace fusetune::backend
