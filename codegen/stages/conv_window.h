// The depthwise-like Conv stage (one input channel per output channel: C_in / group == 1, the
// candidate has a reduction step): the region's input window staged once.
//
// Takes the lowering context and such a Conv of the group, with the largest extent of its region
// along each axis and the most channel groups a tile's channels span (over the sampled tiles).
// conv_window_stage allocates the input window the region reads (batch x the input channels its
// output channels read x the spatial window of the strides, dilations and kernel), laid out with
// constant extents (the largest any tile needs). Its emit declares the window's origin as
// block-uniform lets, fills the window cooperatively (zero outside the input: padding), a barrier,
// then a thread loop over the region sums each output's taps from shared memory (weights from
// global memory), plus the bias, and stores it where the Conv's value goes. Guarantees: the
// reference Conv up to float32 rounding (taps summed in window order) for every tile, partial ones
// included.
#pragma once

#include <memory>
#include <vector>

#include "codegen/stages/context.h"

namespace fusetune::codegen::stages {

std::unique_ptr<AnchorStage> conv_window_stage(LoweringContext& cx, Kernel& k, const Node& n,
                                               const std::vector<int64_t>& max_extent, int64_t max_groups);

}  // namespace fusetune::codegen::stages
