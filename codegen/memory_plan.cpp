#include "codegen/memory_plan.h"

#include <algorithm>
#include <numeric>

namespace fusetune::codegen {

ArenaPlan plan_arena(const std::vector<Lifetime>& tensors) {
  constexpr int64_t kAlign = 256;
  ArenaPlan plan;
  plan.offsets.assign(tensors.size(), -1);
  std::vector<size_t> order(tensors.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return tensors[a].bytes > tensors[b].bytes; });
  std::vector<size_t> placed;
  for (size_t t : order) {
    const int64_t size = (std::max<int64_t>(tensors[t].bytes, 1) + kAlign - 1) / kAlign * kAlign;
    // Blocks taken by placed tensors that are alive at the same time, sorted by offset.
    std::vector<std::pair<int64_t, int64_t>> busy;
    for (size_t p : placed) {
      if (tensors[p].first <= tensors[t].last && tensors[t].first <= tensors[p].last) {
        const int64_t psize = (std::max<int64_t>(tensors[p].bytes, 1) + kAlign - 1) / kAlign * kAlign;
        busy.push_back({plan.offsets[p], plan.offsets[p] + psize});
      }
    }
    std::sort(busy.begin(), busy.end());
    int64_t offset = 0;
    for (const auto& [lo, hi] : busy) {
      if (offset + size <= lo) break;
      offset = std::max(offset, hi);
    }
    plan.offsets[t] = offset;
    plan.arena_bytes = std::max(plan.arena_bytes, offset + size);
    placed.push_back(t);
  }
  return plan;
}

}  // namespace fusetune::codegen
