// The normalization stage (Softmax, LogSoftmax, LayerNormalization): row statistics, one warp per
// row (or several, when the tile has fewer rows than the block has warps), then an element pass.
//
// Takes the lowering context, a normalization node of the group, the most rows of statistics a
// tile gives it over the sampled tiles (planner::normalization_rows) and its row handoff. The row's
// form is planner::held_rows's. Held (the common case: a row of at most 32 elements a lane along
// the innermost axis): each lane loads its runs of the row once into registers (16-byte vectors of
// the group's inputs where aligned, checked at run time), folds both statistics from them, and
// writes its runs' outputs from them (16-byte stores where exported alone). Otherwise two shared
// arrays of floats a row keep the statistics, each pass reads the row again, and a thread loop
// over the region computes the elements. Either way a block-uniform loop hands the block's warps
// successive batches of rows; each thread folds its share into a thread-local, a warp reduction
// (Kernel IR warp.reduce) leaves the warp's total in every lane; with G warps per row (the largest
// power of two dividing the block's warps with G x rows <= warps, so that no warp idles) each
// warp's lane 0 stores its partial in shared memory and after a barrier every thread of the row
// combines the G partials in warp order. The second statistic (sum of exponentials relative to the
// max; the squared deviations from the mean) reads the first from the thread.
//
// A row handoff (planner/held_rows.h row_consumer and rows_handed; the driver checks that the two
// regions' rows coincide in every sampled tile): the producer (`gives`) leaves each output in the
// register its input held, and the consumer (`takes`: the producer's value) reads that value
// there, the same slot of the same lane, instead of a shared buffer. Both are one batch of rows.
//
// Guarantees: the reference's result up to float32 rounding (max-subtracted exponentials; variance
// from the mean, not from sums of squares); the warp-synchronous statements sit at block-uniform
// points and every lane of every warp reaches them, whatever the number of rows; every thread of a
// row holds the same statistics.
#pragma once

#include <memory>
#include <vector>

#include "codegen/stages/context.h"

namespace fusetune::codegen::stages {


// The row a normalization hands to the next one in registers, or takes from the previous one.
struct RowHandoff {
  bool gives = false;  // its outputs stay in its registers for the consumer
  int takes = -1;      // the producer's value, read from the producer's registers
};

std::unique_ptr<AnchorStage> row_stats_stage(LoweringContext& cx, Kernel& k, const Node& n, int64_t max_rows,
                                             const RowHandoff& handoff);

}  // namespace fusetune::codegen::stages
