// Lowering of ONNX's RoiAlign (opsets 10, 16 and 22) to canonical ops.
//
// X [N, C, H, W] is pooled over each region of interest (rois [R, 4]: x1, y1, x2, y2 in input
// coordinates times spatial_scale, less half a pixel in half_pixel mode; batch_indices [R]) into
// Y [R, C, output_height, output_width]. Each output bin is sampled on a grid of g_h x g_w points
// (sampling_ratio, or ceil(roi extent / bins) when it is 0), each point bilinearly interpolated
// from its four neighbours as Mask R-CNN's implementation does (a point more than one pixel
// outside contributes 0; coordinates below 0 are taken as 0; at the last row or column the upper
// neighbour is the lower one); avg mode takes the points' mean, max mode the largest of the
// weighted neighbours over the points (as onnxruntime and onnx's reference do). The ROIs are data:
// the points' coordinates, weights and flat indices are element-wise ops over them, the neighbours
// four Gathers from X flattened, the bins a ReduceSum or ReduceMax.
//
// Takes the NodeLowering of a RoiAlign node. Guarantees: onnx's reference semantics
// (onnx/reference/ops/op_roi_align.py; coordinates in float32); sampling_ratio 0 needs constant
// ROIs whose bins all take the same grid (the grid size is the graph's shape), else it is refused
// naming sampling_ratio; an unknown mode or coordinate_transformation_mode is refused naming it.
#pragma once

#include "importer/lower.h"

namespace fusetune::importer {

void roi_align(NodeLowering& L);

}  // namespace fusetune::importer
