// Resize, inlined (reference/resize.cpp's semantics): nearest or N-linear interpolation with every
// coordinate_transformation_mode the reference supports (half_pixel, half_pixel_symmetric, pytorch_half_pixel,
// tf_half_pixel_for_nn, align_corners, asymmetric, tf_crop_and_resize with its extrapolation
// value) and every nearest_mode.
//
// Takes the lowering context with the current block open, a Resize node of the group and the
// output index idx. Emits, per resized axis, the source coordinate computed in double like the
// reference (so nearest-neighbour rounding agrees) and returns the C expression of the output
// element: a nearest read, or the blend of the 2^k neighbours along the k resized axes (indices
// clamped to the input). Axes that keep their size with scale 1 read straight through. Throws
// Error for a mode it does not know.
#pragma once

#include <string>
#include <vector>

#include "codegen/stages/context.h"

namespace fusetune::codegen::stages {

std::string resize_expr(LoweringContext& cx, const Node& n, const std::vector<std::string>& idx);

}  // namespace fusetune::codegen::stages
