// The width of a kernel's index arithmetic: 32 bits when it is proven to fit.
//
// Generated code declares its index variables (tile coordinates, region bounds, loop variables,
// flattened offsets) with the type ft_i and writes its index literals as plain int literals
// (planner::index_literal); each kernel defines ft_i as int or long long (Kernel::index_bits,
// codegen/emit.h). On the GPU, 64-bit index arithmetic costs two registers per value, and a 64-bit
// division or remainder by a value the compiler cannot see is a called routine of ~70 instructions;
// 32-bit arithmetic is what CUTLASS and Triton index with.
//
// Takes a lowered kernel (after codegen/uniform_constants.h, so that folded extents bound tightly)
// and its blocks. Bounds every integer expression of the kernel by interval arithmetic
// (IndexExpr::range): the block index over the kernel's blocks, the thread index over the block,
// each let by its expression (a block-uniform one by the exact bounds codegen/uniform_constants.h
// found, where it found them), each loop variable by its bounds (and its last increment), loaded
// values and integers computed from floats by their type's whole range; and types each node as C
// does with ft_i as int. The kernel gets index_bits 32 when no node computed in 32 bits may leave
// int's range and every value converted to ft_i fits it; else 64, where the same check must pass
// for the nodes that stay int (literals and the thread index only): a failure there is a lowering
// bug, thrown as an Error naming the kernel and the statement.
// Guarantees: with the index_bits set, the CUDA text computes every index it computed in 64 bits.
#pragma once

#include <cstdint>
#include <map>
#include <utility>
#include <string>
#include <vector>

#include "codegen/kernel_ir.h"

namespace fusetune::codegen {

struct IndexWidth {
  int bits = 64;
  std::string reason;  // for 64: the first expression that may overflow in 32 bits
};

// Decides and sets `k.index_bits` for a kernel running `blocks` (all of its blocks).
// `uniform_bounds`: exact bounds of block-uniform lets (FoldResult::bounds), used where given.
IndexWidth choose_index_width(Kernel& k, const std::vector<int64_t>& blocks,
                              const std::map<std::string, std::pair<int64_t, int64_t>>& uniform_bounds = {});

}  // namespace fusetune::codegen
