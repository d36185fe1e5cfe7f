// Lowering of a fusion group to Kernel IR: the generic tile-stage schedule.
//
// Takes a canonical graph, a group (planner/fusion.h) and a tile configuration (planner/tiling.h).
// Each block computes one tile of the group's root output. Inside a block, the group's anchors
// (reductions, normalizations, contractions, pooling, ScatterND) run as stages in topological
// order, each computing its output over the region the tile needs (the region arithmetic of the
// tensor expressions, evaluated per block) into shared memory, with a barrier after each stage
// (those that then separate nothing are removed: codegen/barriers.h);
// every other op (element-wise, broadcast, data movement) is inlined as an expression where its
// value is used, with common subexpressions kept in locals. Softmax and layer norm run row
// statistics (one warp per row: each lane reduces a strided share into a thread-local, warp
// reductions combine the lanes, lane 0 stores the row's statistics) and then an element stage. A
// MatMul whose tile is one matrix per block (and whose candidate has a reduction step) is staged:
// each step of the reduction loads a slice of both operands into shared memory cooperatively (with
// the candidate's vector width 4, an operand read straight from a float32 input moves in float4
// quads where a quad lies inside the slice and the operand and is 16-byte aligned, element by
// element elsewhere), then every thread updates its register-blocked micro-tile of accumulators
// (thread-local storage, since they cross the step loop's barriers), falling back to accumulators
// in shared memory when the threads cannot cover the region. When both operands are float16 (or
// both bfloat16) and the candidate asks for tensor cores (TileConfig::mma), the staged MatMul
// runs on them instead: each step stages the operand slices as 16-bit values (rows padded against
// bank conflicts, zero outside the region and beyond K, so any M, N, K works), each warp loads
// m16 x k16 A and k16 x n8 B fragments with ldmatrix and accumulates its m16n8 tiles with mma in
// float (Kernel IR matrix fragments; the CUDA form then needs sm_80+), and after the last step
// the epilogue runs from the accumulator registers where the product's uses are an element-wise
// chain ending in the root (planner/epilogue.h), else the accumulators go to shared memory for
// the epilogue, as on the scalar path. A Conv whose
// candidate has a reduction step is staged too: as an implicit GEMM (rows: the tile's output
// channels; columns: its pixels; K = C_in/groups x window in steps) each step loads the weight
// slice and the im2col patches of the groups the rows touch (zero outside the input: padding)
// into shared memory and every thread updates its register-blocked micro-tile, whose cells plus
// the bias then go where the Conv's value goes; a depthwise-like Conv (C_in/groups == 1) stages
// the tile's input window once and sums each output's taps from it. Slices are laid out with
// constant extents (the largest any tile needs) so indices divide by constants. A candidate with
// TileConfig::flash runs the group's attention core (planner/attention.h) as one stage
// (stages/attention.h): the scores and the softmax get no stage and no buffer of their own; the
// P x V MatMul's value is computed a tile of keys at a time with an online softmax. A candidate with
// TileConfig::library is not lowered to code: the kernel carries the library call
// (planner/library_call.h) and its parameter bindings. The root is written to global memory by
// its own stage (or by a final element stage when it is inlined); other exported values are
// written over their regions too. Guarantees: the kernel computes the group's outputs as the reference kernels do
// (up to float32 rounding) for every tile, including partial tiles at the edges; shared memory is
// sized for the largest region any block needs; throws Error when the group cannot be lowered
// (an op without a scalar form, shared memory beyond the device limit).
// Layout: lower_group.cpp is the driver (parameters, sizing, one stage per anchor, packing);
// codegen/stages/ holds the shared lowering context (tiles, regions, buffers, the expression
// emitter) and one file pair per stage kind, each header stating what its stage takes and
// guarantees.
#pragma once

#include <string>
#include <vector>

#include "codegen/kernel_ir.h"
#include "core/graph.h"
#include "planner/fusion.h"
#include "planner/tiling.h"

namespace fusetune::codegen {

struct LoweredKernel {
  Kernel kernel;
  std::vector<int> inputs;   // graph values bound to the first parameters, in order
  std::vector<int> outputs;  // graph values bound to the remaining parameters
  // Per output: the index in `inputs` of the input whose buffer it is (the kernel updates that
  // buffer in place: codegen/in_place_scatter.h), or -1 for a buffer of its own. Empty: none.
  std::vector<int> in_place;
};

struct LowerOptions {
  std::string param_prefix;  // prepended to parameter names (parts of a packed kernel)
  int64_t block_base = 0;    // the group's tiles are blocks [block_base, block_base + grid)
};

LoweredKernel lower_group(const Graph& g, const planner::FusionGroup& group, const planner::TileConfig& cfg,
                          const std::string& name, const LowerOptions& options = {});

// Packs kernels lowered with the same thread count and consecutive block bases (LowerOptions)
// into one launch: each part runs on its own range of blocks, parameters are concatenated, and
// the parts' shared memory overlays (a block runs one part). Inputs and outputs concatenate too,
// and so do scratch buffers: a split-K part's counters and partial products, named with its
// parameter prefix, its counters counting its own range of blocks.
LoweredKernel pack_kernels(const std::vector<LoweredKernel>& parts, const std::string& name);

}  // namespace fusetune::codegen
