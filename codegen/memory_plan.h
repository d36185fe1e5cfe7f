// Memory plan: offsets in one arena for the intermediate tensors of a plan.
//
// Takes, per intermediate, its size and its lifetime [first, last] in launch indices (written by
// launch `first`, last read by launch `last`). Guarantees: two intermediates whose lifetimes
// overlap never overlap in the arena; offsets are 256-byte aligned; placement is greedy first-fit
// in decreasing size (deterministic), which reuses the memory of dead tensors.
#pragma once

#include <cstdint>
#include <vector>

namespace fusetune::codegen {

struct Lifetime {
  int64_t bytes = 0;
  int first = 0;
  int last = 0;
};

struct ArenaPlan {
  std::vector<int64_t> offsets;  // per input lifetime
  int64_t arena_bytes = 0;
};

ArenaPlan plan_arena(const std::vector<Lifetime>& tensors);

}  // namespace fusetune::codegen
