// The in-place form of a ScatterND (planner/in_place.h): a kernel that writes the update slices
// into the buffer its data already occupies, instead of producing the whole output.
//
// Takes a graph, a group that is one ScatterND, and an in-place candidate (TileConfig::in_place:
// tile[0] update elements a block, `threads` threads). The kernel's parameters are data, indices
// and updates, then the output, which LoweredKernel::in_place binds to data's buffer: it never
// reads data's parameter; it reads the output only where the reduction combines. Block b takes
// update elements [b * tile[0], (b + 1) * tile[0]), a thread an element at a time (a warp's 32
// consecutive elements lie in one slice's contiguous run, or in runs of consecutive tuples), or,
// without a reduction, a 16-byte vector at a time where the elements are float32 or 16-bit and a
// slice is whole vectors (each vector then lies in one slice, 16-byte aligned at both ends): the
// element's tuple (indices read as int when data's extents fit it), wrapped when negative and
// clamped into data's extents (the planner admits only tuples inside them: the clamp changes no
// valid tuple, and keeps any other inside the buffer), addresses its output element, which takes
// the update (reduction none) or the update combined with what it holds. Guarantees, for the tuples
// the planner admits (inside the extents, no two alike): the buffer ends as the reference's
// ScatterND result; each output element is written by at most one thread; nothing else of the
// buffer is touched.
#pragma once

#include <string>

#include "codegen/lower_group.h"

namespace fusetune::codegen {

LoweredKernel lower_in_place_scatter(const Graph& g, const planner::FusionGroup& group, const planner::TileConfig& cfg,
                                     const std::string& name, const LowerOptions& options);

}  // namespace fusetune::codegen
