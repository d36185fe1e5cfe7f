#include "simt/counters.h"

#include <algorithm>
#include <set>

namespace fusetune::simt {

WarpTrace::Site& WarpTrace::site(const void* key, bool global, bool store) {
  Site& s = sites_[key];
  s.global = global;
  s.store = store;
  return s;
}

void WarpTrace::record(Site& s, int lane, uint64_t address, int size) {
  const uint32_t k = s.executed[lane]++;
  if (k >= s.requests.size()) s.requests.resize(k + 1);
  s.requests[k].accesses.push_back({static_cast<uint32_t>(lane), static_cast<uint32_t>(size), address});
}

void WarpTrace::global(const void* key, int lane, uintptr_t address, int size, bool store) {
  record(site(key, true, store), lane, address, size);
}

void WarpTrace::shared(const void* key, int lane, uintptr_t offset, int size, bool store) {
  record(site(key, false, store), lane, offset, size);
}

uint64_t shared_wavefronts(const std::vector<std::pair<int, uint64_t>>& lanes, int size) {
  const int per_phase = 128 / std::max(4, size);
  uint64_t total = 0;
  for (int phase = 0; phase * per_phase < 32; ++phase) {
    std::set<uint64_t> words[32];
    bool active = false;
    for (const auto& [lane, offset] : lanes) {
      if (lane / per_phase != phase) continue;
      active = true;
      for (uint64_t w = offset / 4; w <= (offset + static_cast<uint64_t>(size) - 1) / 4; ++w) words[w % 32].insert(w);
    }
    if (!active) continue;
    size_t most = 0;
    for (const auto& b : words) most = std::max(most, b.size());
    total += most;
  }
  return total;
}

void WarpTrace::flush(Counters& c) {
  for (auto& [key, s] : sites_) {
    for (const Request& r : s.requests) {
      if (r.accesses.empty()) continue;
      if (s.global) {
        std::vector<uint64_t> sectors;
        for (const Access& a : r.accesses) {
          for (uint64_t x = a.address / 32; x <= (a.address + a.size - 1) / 32; ++x) sectors.push_back(x);
        }
        std::sort(sectors.begin(), sectors.end());
        const auto n = static_cast<uint64_t>(std::unique(sectors.begin(), sectors.end()) - sectors.begin());
        (s.store ? c.global_store_requests : c.global_load_requests) += 1;
        (s.store ? c.global_store_sectors : c.global_load_sectors) += n;
        Counters::Site& site = c.sites[key];
        site.global = true;
        site.store = s.store;
        site.size = static_cast<int>(r.accesses.front().size);
        site.requests += 1;
        site.units += n;
      } else {
        std::vector<std::pair<int, uint64_t>> lanes;
        for (const Access& a : r.accesses) lanes.emplace_back(static_cast<int>(a.lane), a.address);
        const uint64_t w = shared_wavefronts(lanes, static_cast<int>(r.accesses.front().size));
        (s.store ? c.shared_store_requests : c.shared_load_requests) += 1;
        (s.store ? c.shared_store_wavefronts : c.shared_load_wavefronts) += w;
        Counters::Site& site = c.sites[key];
        site.store = s.store;
        site.size = static_cast<int>(r.accesses.front().size);
        site.requests += 1;
        site.units += w;
      }
    }
  }
  sites_.clear();
}

void UniqueSectors::add_range(uintptr_t lo, uintptr_t hi) {
  if (hi > lo) pending_.emplace_back(lo / 32, (hi + 31) / 32);
}

void UniqueSectors::seal() {
  std::sort(pending_.begin(), pending_.end());
  for (size_t i = 0; i < pending_.size();) {
    uintptr_t first = pending_[i].first, end = pending_[i].second;
    size_t j = i + 1;
    for (; j < pending_.size() && pending_[j].first <= end; ++j) end = std::max(end, pending_[j].second);
    Range r;
    r.first_sector = first;
    r.sectors = end - first;
    const size_t words = (r.sectors + 63) / 64;
    r.load = std::make_unique<std::atomic<uint64_t>[]>(words);
    r.store = std::make_unique<std::atomic<uint64_t>[]>(words);
    for (size_t w = 0; w < words; ++w) {
      r.load[w].store(0, std::memory_order_relaxed);
      r.store[w].store(0, std::memory_order_relaxed);
    }
    ranges_.push_back(std::move(r));
    i = j;
  }
  pending_.clear();
}

void UniqueSectors::mark(uintptr_t address, int size, bool store) {
  const uintptr_t first = address / 32, last = (address + static_cast<uintptr_t>(size) - 1) / 32;
  for (Range& r : ranges_) {
    if (first < r.first_sector || first >= r.first_sector + r.sectors) continue;
    for (uintptr_t s = first; s <= last && s < r.first_sector + r.sectors; ++s) {
      const uintptr_t i = s - r.first_sector;
      (store ? r.store : r.load)[i / 64].fetch_or(uint64_t{1} << (i % 64), std::memory_order_relaxed);
    }
    return;
  }
}

namespace {

uint64_t count_bits(const std::unique_ptr<std::atomic<uint64_t>[]>& bits, uintptr_t sectors) {
  uint64_t n = 0;
  for (uintptr_t w = 0; w < (sectors + 63) / 64; ++w) n += static_cast<uint64_t>(__builtin_popcountll(bits[w].load()));
  return n;
}

}  // namespace

uint64_t UniqueSectors::loaded() const {
  uint64_t n = 0;
  for (const Range& r : ranges_) n += count_bits(r.load, r.sectors);
  return n;
}

uint64_t UniqueSectors::stored() const {
  uint64_t n = 0;
  for (const Range& r : ranges_) n += count_bits(r.store, r.sectors);
  return n;
}

}  // namespace fusetune::simt
