// The held form of a normalization's rows (codegen/stages/row_stats.h), described once for codegen
// and the cost model, and the handoff of held rows from one normalization to the next in registers.
//
// Takes a canonical graph, a fusion group, a normalization member (Softmax, LogSoftmax,
// LayerNormalization), the block's threads and the most rows of statistics a block's tile gives the
// member (planner::normalization_rows).
//
// held_rows: the warps a row takes (the most, a power of two dividing the block's warps, that the
// rows leave room for: with fewer rows than warps no warp idles), the run (16 bytes of the group's
// inputs along the row: 8 elements where one input is a 16-bit float, else 4), the runs a lane
// holds, and whether the row is held in registers and read once: the normalized axes end with the
// innermost one, whose extent is a multiple of the run, the runs keep at least half the row's lanes
// busy and a lane holds at most kHeldElements.
//
// row_consumer: the normalization member that reads this one's value element for element, through
// element-wise members only (each reads its predecessor at its own shape, no broadcast), where
// nothing else of the group reads the value or the values between and none of those between leaves
// the group; -1 where there is none. rows_handed: whether, for rows as given, the two rows are held
// alike (the same warps a row, run, runs and normalized axes) and each block's rows fit one batch
// of its warps. rows_coincide: whether, for one tile, the consumer's region is the producer's and
// the normalized axes are whole. Where both hold (codegen checks every tile; the model its
// representative one), the consumer's rows are the producer's lane for lane: the producer's
// outputs pass to the consumer in the producer's registers, without the shared buffer of a staged
// value.
#pragma once

#include <cstdint>

#include "core/graph.h"
#include "planner/fusion.h"
#include "planner/index_expr.h"

namespace fusetune::planner {

// The most elements of its row a lane holds in registers (runs x run): beyond, the row is read
// once per pass instead.
inline constexpr int64_t kHeldElements = 32;

struct HeldRows {
  bool held = false;
  int64_t warps_per_row = 1;
  int64_t run = 4;    // consecutive elements along the innermost axis a lane takes at a time
  int64_t runs = 0;   // runs a lane holds
  int64_t count = 0;  // elements of a row
};

HeldRows held_rows(const Graph& g, const FusionGroup& group, const Node& n, int threads, int64_t max_rows);

int row_consumer(const Graph& g, const FusionGroup& group, int node);

bool rows_handed(const Graph& g, const FusionGroup& group, const Node& producer, int64_t producer_rows,
                 const Node& consumer, int64_t consumer_rows, int threads);

bool rows_coincide(const Graph& g, const Node& producer, const std::vector<Interval>& producer_region,
                   const std::vector<Interval>& consumer_region);

// The normalized axes of a normalization member: the axis for Softmax and LogSoftmax, every axis
// from it on for LayerNormalization.
std::vector<size_t> normalized_axes(const Graph& g, const Node& n);

}  // namespace fusetune::planner
