// Lowering of ONNX's ConvTranspose (every attribute: strides, pads, output_padding, output_shape,
// dilations, group, auto_pad; 1-D to N-D) to canonical Convs, gathering (no scatter, no atomics).
//
// Output position o along an axis takes tap k of input position h where h x stride + k x
// dilation - pad_begin = o. Two forms:
//  - sub-pixel (a weight known at import, strided axes not dilated, and no residue class whose
//    range needs all of x cropped away): the outputs whose o +
//    pad_begin leaves residue rho modulo the stride read only the taps rho, rho + stride, ...
//    (Shi et al.'s sub-pixel convolution). One stride-1 Conv of x (padded or cropped to line up)
//    computes every residue class as channels of its own, their taps in one window (zero where a
//    class has fewer), over one range of positions common to the classes; a Reshape, Transpose
//    and Reshape put the classes in place (a pixel shuffle) and a Slice cuts the range to the
//    output; the bias is added after. Arithmetic: stride^axes times less than the spread form's
//    where the kernel is a multiple of the stride (2x2 or 4x4 at stride 2), a little more
//    otherwise (3x3 at stride 2: 16 taps for 4 outputs where the transpose needs 9, the spread
//    form 36).
//  - spread (otherwise): x spread out by the strides (each element followed by stride - 1 zeros:
//    Reshape, Pad, Reshape), padded by (kernel - 1) x dilation less the pads (cropped where those
//    are larger; output_padding at the end; one Pad), then one stride-1 Conv with the same
//    dilations.
// In both the weight has its input and output channels swapped per group and each spatial axis
// reversed (the spread form: Reshape, Transpose, Reshape, Slice, folded when W is a weight).
// output_shape and auto_pad choose the pads as the operator defines (SAME_UPPER puts the smaller
// half first; SAME_LOWER and an output_shape without auto_pad the larger).
//
// Takes the NodeLowering of a ConvTranspose. Guarantees: the operator's outputs (bias added once
// per output); inconsistent shapes and attributes refused naming them.
#pragma once

#include "importer/lower.h"

namespace fusetune::importer {

void conv_transpose(NodeLowering& L);

}  // namespace fusetune::importer
