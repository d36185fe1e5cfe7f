// The ScatterND stage: data with the updates written at the index tuples, with the reduction
// attribute's combiner (none, add, mul, max, min).
//
// Takes the lowering context and a ScatterND node whose indices and updates are group inputs
// (throws Error otherwise). The stage is a thread loop over the node's region: each output element
// starts from data at the same index and folds in, in tuple order, every update whose index tuple
// (negative indices wrapped) addresses it. Guarantees: the reference's result, repeated tuples
// applied in tuple order; each output element is written by the one thread that owns it.
#pragma once

#include <memory>
#include <string>

#include "codegen/stages/context.h"

namespace fusetune::codegen::stages {

std::unique_ptr<AnchorStage> scatter_stage(LoweringContext& cx, const Node& n);

// The value an element takes under ScatterND's `reduction` ("add", "mul", "max" or "min"): what it
// holds, `acc`, combined with `update` (compute-type expressions; float or integer dtype).
std::string scatter_combine(const std::string& reduction, bool is_float, const std::string& acc, const std::string& update);

}  // namespace fusetune::codegen::stages
