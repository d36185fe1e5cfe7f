// Folding of block-uniform constants: the lets of a kernel's block-uniform prologue
// (Kernel::uniform: tile coordinates, region bounds and extents, each a function of the block
// index) that take one value in every block become that value's literal.
//
// Why: a region's extent (`r3_n1 = ft_max(0, r3_hi1 - r3_lo1 + 1)`) is the same in every block
// when the tile divides the tensor, but the compiler cannot see it, so every index that divides by
// it (`(ft_e / r3_n1) % r3_n0`) costs a run-time division, a called routine of some 20 (32-bit) to
// 70 (64-bit) instructions on the GPU. With the literal, the compiler strength-reduces the
// division to a multiply and shift and folds what depends on it.
//
// Takes a lowered (unpacked) kernel and its blocks (all of them). How: the lets that read the
// block index directly (the tile coordinates) are evaluated for every block (codegen/index_expr.h);
// every other let depends on the block only through some of them, so it is evaluated over every
// combination of their values (the coordinates of a grid are independent: checked, by counting the
// distinct combinations the blocks give). A let evaluated to one known value everywhere is folded.
// Gives up without folding a let when its combinations exceed the budget, when its coordinates are
// not independent or when a value is not known (the let stays as it is). Then the lets no
// statement reads any more are removed (nothing of the body is removed). Guarantees: every block
// computes the values it computed; the kernel's statements are otherwise unchanged; the bounds
// reported for a let hold in every block.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "codegen/kernel_ir.h"

namespace fusetune::codegen {

struct FoldResult {
  int lets = 0;    // block-uniform lets
  int folded = 0;  // of which now literals
  int dropped = 0;  // lets no statement read any more, removed
  // The least and greatest value of each let whose values are all known (folded ones included):
  // exact, where interval arithmetic over the let's expression is not (codegen/index_width.h).
  std::map<std::string, std::pair<int64_t, int64_t>> bounds;
};

// Folds the lets of `k.uniform` that have one value in all of `blocks`; at most `budget` let
// evaluations in all.
FoldResult fold_uniform_constants(Kernel& k, const std::vector<int64_t>& blocks, int64_t budget = 4000000);

}  // namespace fusetune::codegen
