// Lowering of ONNX's DeformConv (opsets 19 and 22) to canonical ops: 2-D deformable convolution
// (DCN, and DCNv2 with its modulation mask).
//
// X [N, C, H, W], W [OC, C / group, kH, kW], offset [N, offset_group x kH x kW x 2, OH, OW],
// optional B [OC] and mask [N, offset_group x kH x kW, OH, OW]. Each kernel tap of each output
// position samples X at its convolution position (strides, pads, dilations) moved by its offset
// (the offset group of the tap's input channel), bilinearly as GridSample does with
// align_corners and zero padding (each of the four neighbours outside the map counts 0), times
// the mask; the samples are the columns of a grouped MatMul with W, plus B. The sample points are
// element-wise ops over the offsets (data), the neighbours four Gathers from X flattened.
//
// Takes the NodeLowering of a DeformConv node. Guarantees: onnx's reference semantics
// (onnx/reference/ops/op_deform_conv.py; coordinates and sums in float32, summed in another
// order); an input that is not 2-D (4-D tensors), shapes that disagree (channels and groups,
// offsets and the kernel, the output extent and the convolution's), are refused naming them.
#pragma once

#include "importer/lower.h"

namespace fusetune::importer {

void deform_conv(NodeLowering& L);

}  // namespace fusetune::importer
