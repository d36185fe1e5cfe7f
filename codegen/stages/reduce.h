// The generic reduction stage: the outputs of the anchor's region, each reducing its whole
// reduction space. Covers the reductions (ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd,
// ArgMax, ArgMin), pooling (MaxPool, AveragePool with or without count_include_pad), and
// contractions the candidate does not stage (a MatMul or Conv without a reduction step, a MatMul
// whose tile spans several matrices, a Conv whose region no register tile covers).
//
// Takes the lowering context, the kernel, an anchor node of the group and the most outputs a
// region of it has. Three forms, as planner::column_reduction and planner::reduction_lanes decide
// for that many outputs (the cost model charges the same):
//   - serial: a thread loop over the anchor's region (stages/context.h's region_loop); each
//     iteration runs serial loops over the reduction variables;
//   - cooperative (float sums, means, maxima and minima, ArgMax and ArgMin of floats, and
//     unstaged float contractions, over a warp's elements or more, where one thread an output
//     would idle the block or read a row apart): a group of lanes (a warp, or several with fewer outputs than warps) an output, in
//     block-uniform batches; a lane folds every lanes-th element of the flattened reduction space
//     (consecutive lanes read consecutive elements of the innermost reduction axis) into a
//     thread-local, a warp reduction and, with several warps, their partials in shared memory (in
//     warp order) give the total, and the output's first lane stores it. A shared float a warp
//     with several warps an output. ArgMax and ArgMin carry an index beside the float (a u32
//     thread-local, and a u32 a warp in shared memory), lanes and warps combined by ft_arg_beats
//     (codegen/emit_common.h), the order of the reference's scan, so the pick is the scan's;
//   - columns (float sums, means, maxima and minima down the rows: the output's innermost axis is
//     the input's): batches of 32 consecutive outputs, lane l of every warp on output l, warp w
//     folding every W-th element of the reduction space (W warps), so that a warp's request reads
//     consecutive elements of a row; the partials meet in shared memory (a float a thread) and the
//     first warp folds them in warp order and stores.
// Both read the operands through their index maps (guarded accesses only inside the input:
// padding contributes nothing, or counts for AveragePool's count_include_pad), add a Conv's bias,
// and store the result where the value goes. Guarantees: the reference kernel's result up to
// float32 rounding (the cooperative form sums in another order), an integer contraction's exactly
// (serial, 64-bit accumulators); ArgMax/ArgMin keep the first (or,
// with select_last_index, the last) extreme; an empty pooling window averages to 0; the warp-
// synchronous statements sit at block-uniform points that every lane of every warp reaches.
#pragma once

#include <memory>

#include "codegen/stages/context.h"

namespace fusetune::codegen::stages {

std::unique_ptr<AnchorStage> reduce_stage(LoweringContext& cx, Kernel& k, const Node& n, int64_t max_outputs);

}  // namespace fusetune::codegen::stages
