#include "simt/report.h"

#include <dwarf.h>
#include <elfutils/libdwfl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <sstream>
#include <tuple>

namespace fusetune::simt {

uint64_t Counters::global_sectors_of_width(int bytes, bool store) const {
  uint64_t n = 0;
  for (const auto& [site, c] : sites) {
    if (c.global && c.store == store && c.size == bytes) n += c.units;
  }
  return n;
}

Counters& Counters::operator+=(const Counters& o) {
  launches += o.launches;
  blocks += o.blocks;
  threads += o.threads;
  global_load_requests += o.global_load_requests;
  global_load_sectors += o.global_load_sectors;
  global_store_requests += o.global_store_requests;
  global_store_sectors += o.global_store_sectors;
  unique_load_sectors += o.unique_load_sectors;
  unique_store_sectors += o.unique_store_sectors;
  shared_load_requests += o.shared_load_requests;
  shared_load_wavefronts += o.shared_load_wavefronts;
  shared_store_requests += o.shared_store_requests;
  shared_store_wavefronts += o.shared_store_wavefronts;
  barriers += o.barriers;
  warp_operations += o.warp_operations;
  redundant_stores += o.redundant_stores;
  flops += o.flops;
  special_ops += o.special_ops;
  for (const auto& [line, n] : o.barrier_orderings) barrier_orderings[line] += n;
  barrier_lines.insert(o.barrier_lines.begin(), o.barrier_lines.end());
  for (const auto& [line, n] : o.wait_landings) wait_landings[line] += n;
  for (const auto& [site, c] : o.sites) {
    Site& mine = sites[site];
    mine.global = c.global;
    mine.store = c.store;
    mine.size = c.size;
    mine.requests += c.requests;
    mine.units += c.units;
  }
  return *this;
}

const char* check_name(Check c) {
  switch (c) {
    case Check::kRace: return "racecheck";
    case Check::kSync: return "synccheck";
    case Check::kMemory: return "memcheck";
    case Check::kInit: return "initcheck";
  }
  return "check";
}

namespace {

bool same_kind(const Finding& a, const Finding& b) {
  return std::tie(a.check, a.what, a.buffer, a.site, a.other_site) == std::tie(b.check, b.what, b.buffer, b.site, b.other_site);
}

}  // namespace

namespace {

// "kernels.cu:LINE" when `file` (a path) is the CUDA text's unit, "" otherwise.
std::string kernels_line(const char* file, int line) {
  if (file == nullptr || line <= 0) return "";
  const std::string path(file);
  const size_t slash = path.rfind('/');
  const std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  return name == "kernels.cu" ? name + ":" + std::to_string(line) : "";
}

}  // namespace

// The line tables and inline chains of the modules this process has loaded, read in process with
// libdw (elfutils): nothing is started, so it works inside the measuring child's seccomp filter
// (worker/confine.h). A site is the first frame in kernels.cu, innermost first: its own line, or
// the call line of an inlined prelude helper it sits in.
std::map<const void*, std::string> site_lines(const std::vector<const void*>& sites) {
  std::map<const void*, std::string> lines;
  if (sites.empty()) return lines;
  char* debuginfo_path = nullptr;
  const Dwfl_Callbacks callbacks = {dwfl_linux_proc_find_elf, dwfl_standard_find_debuginfo, nullptr, &debuginfo_path};
  const std::unique_ptr<Dwfl, void (*)(Dwfl*)> dwfl(dwfl_begin(&callbacks), dwfl_end);
  if (!dwfl || dwfl_linux_proc_report(dwfl.get(), ::getpid()) != 0 || dwfl_report_end(dwfl.get(), nullptr, nullptr) != 0) {
    return lines;
  }
  for (const void* s : sites) {
    if (s == nullptr) continue;
    // A return address: the call is the instruction before it.
    const Dwarf_Addr addr = reinterpret_cast<uintptr_t>(s) - 1;
    Dwfl_Module* module = dwfl_addrmodule(dwfl.get(), addr);
    if (module == nullptr) continue;
    int line = 0;
    std::string found;
    if (Dwfl_Line* l = dwfl_module_getsrc(module, addr)) found = kernels_line(dwfl_lineinfo(l, nullptr, &line, nullptr, nullptr, nullptr), line);
    Dwarf_Addr bias = 0;
    Dwarf_Die* cu = found.empty() ? dwfl_module_addrdie(module, addr, &bias) : nullptr;
    Dwarf_Files* files = nullptr;
    size_t nfiles = 0;
    if (cu != nullptr && dwarf_getsrcfiles(cu, &files, &nfiles) == 0) {
      // The innermost scope holding the address, then (dwarf_getscopes_die) every DIE that holds
      // that one in the concrete tree: its callers' inlined instances out to the kernel.
      Dwarf_Die* innermost = nullptr;
      Dwarf_Die* scopes = nullptr;
      int n = dwarf_getscopes(cu, addr - bias, &innermost);
      if (n > 0) n = dwarf_getscopes_die(&innermost[0], &scopes);
      std::free(innermost);
      for (int i = 0; i < n && found.empty(); ++i) {
        if (dwarf_tag(&scopes[i]) != DW_TAG_inlined_subroutine) continue;
        Dwarf_Attribute attr;
        Dwarf_Word file = 0, call_line = 0;
        if (dwarf_formudata(dwarf_attr(&scopes[i], DW_AT_call_file, &attr), &file) != 0 ||
            dwarf_formudata(dwarf_attr(&scopes[i], DW_AT_call_line, &attr), &call_line) != 0 || file >= nfiles) {
          continue;
        }
        found = kernels_line(dwarf_filesrc(files, file, nullptr, nullptr), static_cast<int>(call_line));
      }
      std::free(scopes);
    }
    if (!found.empty()) lines[s] = found;
  }
  return lines;
}

void Findings::add(Finding f) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++total_;
  for (size_t i = 0; i < kept_.size(); ++i) {
    if (same_kind(kept_[i], f)) {
      ++repeats_[i];
      return;
    }
  }
  if (kept_.size() < keep_) {
    kept_.push_back(std::move(f));
    repeats_.push_back(0);
  }
}

size_t Findings::total() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return total_;
}

Check Findings::first_check() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return kept_.empty() ? Check::kRace : kept_.front().check;
}

std::vector<std::string> Findings::render(const std::string& kernel) const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<const void*> sites;
  for (const Finding& f : kept_) {
    sites.push_back(f.site);
    sites.push_back(f.other_site);
  }
  const std::map<const void*, std::string> lines = site_lines(sites);
  const auto where = [&](const void* s) {
    const auto it = lines.find(s);
    return it == lines.end() ? std::string("an unknown line") : it->second;
  };
  std::vector<std::string> out;
  size_t shown = 0;
  for (size_t i = 0; i < kept_.size(); ++i) {
    const Finding& f = kept_[i];
    std::ostringstream line;
    line << check_name(f.check) << ": kernel " << kernel << ": " << f.what;
    if (!f.buffer.empty()) line << " on " << f.buffer;
    if (f.element >= 0) line << " element " << f.element;
    line << ": " << f.threads;
    if (f.site != nullptr) line << " at " << where(f.site);
    if (f.other_site != nullptr) line << " and " << where(f.other_site);
    if (!f.extra.empty()) line << "; " << f.extra;
    if (repeats_[i] > 0) line << " (" << repeats_[i] + 1 << " times)";
    out.push_back(line.str());
    shown += repeats_[i] + 1;
  }
  if (total_ > shown) out.push_back(std::to_string(total_ - shown) + " further findings of other kinds not shown");
  return out;
}

}  // namespace fusetune::simt
