// The normalization stage (Softmax, LogSoftmax, LayerNormalization): row statistics, one warp per
// row (or several, when the tile has fewer rows than the block has warps), then an element pass.
//
// Takes the lowering context and a normalization node of the group. planner::normalization_rows
// measures, for one tile's numeric region of the node's value, the rows its statistics occupy
// (the region with the normalized axes dropped: the axis for Softmax, every axis from it on for
// layer norm); the driver sizes the stage with the most over the sampled tiles. row_stats_stage then allocates two
// shared arrays of that many floats (the row statistics). Its emit declares two one-float
// thread-locals and runs a block-uniform loop handing the block's warps successive batches of
// rows: each thread folds a strided share of its row into a thread-local, a warp reduction
// (Kernel IR warp.reduce) leaves the warp's total in every lane; with G warps per row (the largest
// power of two dividing the block's warps with G x rows <= warps, so that no warp idles) each
// warp's lane 0 stores its partial in shared memory and after a barrier every thread of the row
// combines the G partials in warp order; the second statistic (sum of
// exponentials relative to the max; the squared deviations from the mean) reads the first from
// the thread, and the row's first thread stores both; after a barrier a thread loop over the region computes each
// element (and layer norm's scale and bias). Guarantees: the reference's result up to float32
// rounding (max-subtracted exponentials; variance from the mean, not from sums of squares); the
// warp-synchronous statements sit at block-uniform points and every lane of every warp reaches
// them, whatever the number of rows; every thread of a row holds the same statistics.
#pragma once

#include <memory>
#include <vector>

#include "codegen/stages/context.h"

namespace fusetune::codegen::stages {


std::unique_ptr<AnchorStage> row_stats_stage(LoweringContext& cx, Kernel& k, const Node& n, int64_t max_rows);

}  // namespace fusetune::codegen::stages
