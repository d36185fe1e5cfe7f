// Data-dependent extents carried to the graph's outputs: the last step of import for a model with
// NonMaxSuppression, Unique or a NonZero of run-time data (importer/lower_data_sized.h).
//
// Such an op's output has a size that depends on the data; its lowering gives it the bound the
// importer derives from the shapes (a padded buffer) and an int64 scalar count of the entries
// along one axis that hold data (GraphBuilder::extents). carry_extents follows those values
// through the canonical nodes that read them, as the node keeps each entry in place:
// element-wise ops and Where (broadcast on other axes), Cast, a Reshape or Transpose that keeps
// the axis whole, Slice, Pad, Tile and Expand that leave the axis alone (a Slice of the first e
// entries counts Min(count, e)), Gather along another axis or at padded indices, reductions and
// normalizations over other axes, Concat along another axis of values with one count, MatMul with
// the padding on a row, column or batch axis.
//
// Takes the graph as import built it (outputs set, before Graph::remove_dead) and the builder.
// Guarantees: every graph output computed from a padded value gets a Graph::extents entry whose
// count is a graph output of its own, named "<the op's output>.count" (unique among the values);
// where the count folded to a constant, the output is instead sliced to it (an exact shape, no
// entry); a live node that would mix padding into data (a reduction, contraction, Concat, Slice
// or Gather along the padded axis, two different counts in one node, any other op reading a
// padded value) is refused with an Error naming the node, its op and the value it reads. Returns
// every value of data-dependent extent by id, with its padded axis: the axis a shape the model
// declares for it does not fix.
#pragma once

#include <map>

#include "importer/builder.h"

namespace fusetune::importer {

std::map<int, int> carry_extents(GraphBuilder& b);

}  // namespace fusetune::importer
