// Inlined expressions: every op that is not an anchor (element-wise, broadcast, data movement:
// Reshape, Transpose, Slice, Expand, Tile, Concat, Gather, Pad, Resize) is computed where its value
// is used, as an expression over its inputs' values.
//
// Takes the lowering context (stages/context.h) with the current block open and a member node
// that is not an anchor. inline_node emits what computes the node's value at index idx (its
// operands through LoweringContext::value, so they are inlined, loaded or read from a stage's
// shared buffer in turn) and returns the C expression of the value. element_stage writes value v
// (the root when it is inlined, or an inlined value that leaves the group) over its whole region.
// Guarantees: the value of the reference kernel at idx (up to float32 rounding; float values are
// computed in float, integers in long long, as codegen/scalar_ops.h); reads through a guarded
// access (Concat's parts, Pad's constant fill) touch memory only inside the input; Gather's
// indices are wrapped once and clamped to the axis.
#pragma once

#include <string>
#include <vector>

#include "codegen/stages/context.h"

namespace fusetune::codegen::stages {

std::string inline_node(LoweringContext& cx, const Node& n, const std::vector<std::string>& idx);

void element_stage(LoweringContext& cx, Kernel& k, int v);

}  // namespace fusetune::codegen::stages
