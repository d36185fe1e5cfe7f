// Lowering of ONNX's GridSample (opsets 16 and 20: 2-D, and N-d from 20) to canonical ops.
//
// X [N, C, S_1..S_D] is sampled at grid [N, O_1..O_D, D] (normalized coordinates in [-1, 1], the
// last spatial axis first), giving Y [N, C, O_1..O_D]. Per spatial axis the coordinate is
// denormalized (align_corners: (g + 1) / 2 x (S - 1), else ((g + 1) x S - 1) / 2), rounded half to
// even in nearest mode, and brought back inside the border (align_corners: [0, S - 1], else
// [-0.5, S - 0.5]) by clamping (padding_mode border) or reflecting (reflection) when outside. The
// taps (nearest: 1, linear: floor and floor + 1, cubic: floor - 1 to floor + 2 with Keys'
// coefficients, A = -0.75) take their index inside the input by the padding mode: zeros masks
// taps outside, border clamps the index, reflection reflects it; every combination of taps over
// the axes is one Gather from X flattened (the tap's flat offset plus each (n, c) plane's base)
// weighted by the product of its axes' coefficients, and Y is their sum.
//
// Takes the NodeLowering of a GridSample node. Guarantees: onnx's reference semantics
// (onnx/reference/ops/op_grid_sample.py; coordinates in float32, taps summed in another order);
// an unknown mode or padding_mode, or a grid whose last extent is not the input's spatial rank,
// is refused naming it.
#pragma once

#include "importer/lower.h"

namespace fusetune::importer {

void grid_sample(NodeLowering& L);

}  // namespace fusetune::importer
