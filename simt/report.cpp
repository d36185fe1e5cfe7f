#include "simt/report.h"

#include <dlfcn.h>

#include <cstdio>
#include <map>
#include <sstream>
#include <tuple>

namespace fusetune::simt {

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

// addr2line, one call per module.
std::map<const void*, std::string> site_lines(const std::vector<const void*>& sites) {
  std::map<std::string, std::vector<std::pair<const void*, uintptr_t>>> by_module;
  for (const void* s : sites) {
    Dl_info info{};
    if (s == nullptr || dladdr(s, &info) == 0 || info.dli_fname == nullptr) continue;
    // A return address: the call is the instruction before it.
    by_module[info.dli_fname].emplace_back(s, reinterpret_cast<uintptr_t>(s) - reinterpret_cast<uintptr_t>(info.dli_fbase) - 1);
  }
  std::map<const void*, std::string> lines;
  for (const auto& [module, offsets] : by_module) {
    // -a: each address, then its inline chain (-i), innermost first: the site is the first
    // frame in kernels.cu (the prelude's helpers are inlined into it).
    std::ostringstream cmd;
    cmd << "addr2line -a -i -e '" << module << "'";
    for (const auto& o : offsets) cmd << " 0x" << std::hex << o.second;
    cmd << " 2>/dev/null";
    FILE* p = popen(cmd.str().c_str(), "r");
    if (p == nullptr) continue;
    char buf[4096];
    int at = -1;
    while (std::fgets(buf, sizeof buf, p) != nullptr) {
      std::string line(buf);
      while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
      if (line.rfind("0x", 0) == 0) {
        ++at;
        continue;
      }
      if (at < 0 || at >= static_cast<int>(offsets.size())) continue;
      if (const size_t cut = line.find(" ("); cut != std::string::npos) line.resize(cut);  // "(discriminator N)"
      if (const size_t slash = line.rfind('/'); slash != std::string::npos) line = line.substr(slash + 1);
      const void* site = offsets[static_cast<size_t>(at)].first;
      if (line.rfind("kernels.cu:", 0) == 0 && lines.count(site) == 0) lines[site] = line;
    }
    pclose(p);
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
