// The Conv staged as an implicit GEMM (C_in / group > 1, the candidate has a reduction step).
//
// Takes the lowering context and such a Conv of the group, with the largest extent of its region
// along each axis and the most channel groups a tile's channels span (over the sampled tiles).
// Rows are the region's output channels (M), columns its pixels (P: batch and spatial axes
// flattened), and the reduction K = C_in / group x window (row-major as the weights are laid out)
// runs in steps. conv_gemm_stage returns null when the block's threads cannot cover the largest
// region with micro-tiles of at most 8 x 8 (planner::micro_tile; the Conv then stays on the
// generic reduction stage); else it allocates the weight slice (M x step) and the patch slices
// (groups x step x P), laid out with constant extents (the largest any tile needs, so indices
// divide by constants: a 64-bit division by a run-time value is a called routine on the GPU), and
// declares each thread's TM x TN accumulators as a thread-local: interleaved, a thread owning rows
// r, r + R, ... and columns c, c + C, ... (R and C its lanes' counts), so that a warp's shared
// reads of one fragment register fall on consecutive rows (weight rows planner::conv_pitch_a
// floats apart, an odd count without the ring: distinct banks) and consecutive patch columns, and
// its stores of one cell on consecutive pixels. Its emit runs a block-uniform
// loop over the steps: load the weight slice and the im2col patches of every group the rows touch
// (computed on the fly through the Conv's index maps: strides, dilations, padding as zero fill;
// zero past K and for columns outside the region; 32-bit index arithmetic), a barrier, each
// thread's micro-tile update (a row reads the patches of its own group), a barrier (with split-K,
// stages/split_k.h, the block's split of the steps, and the last of the tile's blocks sums the
// splits' accumulators); then each cell plus the bias goes where the Conv's value goes (its shared
// buffer for a fused epilogue, global memory when exported). The slices stage through
// LoweringContext::staging_loop (a thread's elements in batches, their loads in flight together),
// or, where planner::conv_staging says (vector width 4, float32 input and weights the group does
// not compute, K a multiple of 4), through a ring of 3 slots filled by cp.async 2 steps ahead of
// the one multiplied, one barrier a step: the weights in 16-byte chunks (copy_slice), the patches
// a 4-byte copy an element, zero-filled where the form without a ring stores zero.
// Guarantees: the reference Conv up to float32 rounding for every tile, partial ones included;
// staging loops stay inside their allocations.
#pragma once

#include <memory>
#include <vector>

#include "codegen/stages/context.h"

namespace fusetune::codegen::stages {

std::unique_ptr<AnchorStage> conv_gemm_stage(LoweringContext& cx, Kernel& k, const Node& n,
                                             const std::vector<int64_t>& max_extent, int64_t max_groups);

}  // namespace fusetune::codegen::stages
