// The generic reduction stage: each output of the anchor's region reduces its whole reduction
// space by itself. Covers the reductions (ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd,
// ArgMax, ArgMin), pooling (MaxPool, AveragePool with or without count_include_pad), and
// contractions the candidate does not stage (a MatMul or Conv without a reduction step, a MatMul
// whose tile spans several matrices, a Conv whose region no register tile covers).
//
// Takes the lowering context and an anchor node of the group. The stage is a thread loop over the
// anchor's region (stages/context.h's region_loop); each iteration runs serial loops over the
// reduction variables, reads the operands through their index maps (guarded accesses only inside
// the input: padding contributes nothing, or counts for AveragePool's count_include_pad), adds a
// Conv's bias, and stores the result where the value goes. Guarantees: the reference kernel's
// result up to float32 rounding; ArgMax/ArgMin keep the first (or, with select_last_index, the
// last) extreme; an empty pooling window averages to 0.
#pragma once

#include <memory>

#include "codegen/stages/context.h"

namespace fusetune::codegen::stages {

std::unique_ptr<AnchorStage> reduce_stage(LoweringContext& cx, const Node& n);

}  // namespace fusetune::codegen::stages
