// Register epilogues: which values of a fusion group a contraction's accumulators can compute and
// write straight from registers, with no shared buffer for the product.
//
// Takes a canonical graph, a group and one of its MatMul nodes. register_epilogue answers when
// every use of the product inside the group is an element-wise node that reads it at its own
// index (same shape, identity access: bias, activation, residual, cast; an axis of one element,
// a prefill's batch, may be read at 0), recursively, and the
// chain ends in the group's root (or the product is the root): then each element of the product
// determines the chain's elements at the same index, and a thread holding it can compute them.
// The chain's other operands must be ready when the contraction's stage ends: group inputs,
// outputs of anchors earlier in the group's order, or element-wise values of those. Returns the
// group's exported values among the product and the chain (sorted), which the contraction's
// stage then writes itself; nullopt where any of this fails (a later anchor reads the chain, a
// Transpose or broadcast of the product, a second branch). Guarantees: the values returned are
// the only ones of the chain that leave the group, and every one has the root's region.
// The planner (tiling.h's shared-memory estimate) and codegen (stages/mma_matmul.h, and
// stages/matmul.h where sixteen_byte_runs also holds) both decide by it, so the estimate and the
// kernel agree.
#pragma once

#include <optional>
#include <vector>

#include "core/graph.h"
#include "planner/fusion.h"

namespace fusetune::planner {

std::optional<std::vector<int>> register_epilogue(const Graph& g, const FusionGroup& group, int matmul_node);

// A gated unit's paired product (importer/pair_gated_products.h): the product p [..., M, 2N] is
// read only by Reshape(p, [..., M, N, 2]), whose two Slices of the last axis, columns 0 and 1,
// each reshaped back to [..., M, N], are the gate and the up projection. paired_epilogue answers
// when those views are the product's only uses, none leaves the group, and the values computed
// from the two halves form a register epilogue as above with the halves in the product's place.
// Every tensor-core accumulator layout gives a lane the product's columns 2c and 2c + 1 together
// (kernel_ir.h's C layout, wgmma's likewise): the lane holds both halves of the chain's column c
// and computes it, with no shared buffer for the product. `written`: the group's exported values
// among the halves and the chain (sorted), each with the root's region.
struct PairedEpilogue {
  int gate = kNoValue;
  int up = kNoValue;
  std::vector<int> written;
};
std::optional<PairedEpilogue> paired_epilogue(const Graph& g, const FusionGroup& group, int matmul_node);

// Whether runs of `run` consecutive elements of every one of `values` are whole 16-byte vectors
// (4 floats, 8 16-bit values, ...): the scalar MatMul's micro-tile rows take the register
// epilogue only then, so that it stores as widely as the element stage it replaces.
bool sixteen_byte_runs(const Graph& g, const std::vector<int>& values, int64_t run);

}  // namespace fusetune::planner
