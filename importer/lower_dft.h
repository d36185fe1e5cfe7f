// Lowering of ONNX's discrete Fourier transforms to canonical ops: DFT (opsets 17, 20) and STFT
// (17), as MatMuls by constant cosine and sine matrices (the transform's length L and the
// number of bins known at import).
//
// DFT: the signal's axis moved last (Transpose), its real and imaginary parts (the last axis,
// 1 or 2 entries) sliced apart; forward, bin k of L (the first L / 2 + 1 when onesided) is
// Re = re . cos + im . sin, Im = im . cos - re . sin over the first min(n, L) samples (a longer
// signal truncated, a shorter one zero-padded, as numpy's n= does); inverse, the same with
// e^{+i theta} and 1 / L folded into the matrices; inverse onesided (irfft), L real samples from the
// first L / 2 + 1 bins, each inner bin counted twice (Hermitian symmetry). The parts are stacked
// on a last axis of 2 (1 for irfft) and the axes moved back.
// STFT: frames of the window's length every frame_step samples gathered (a Gather at constant
// indices), multiplied by the window (ones without one), then the forward DFT of frame_length
// along the frame (onesided by default).
// MelWeightMatrix (17): a constant [dft_length / 2 + 1, num_mel_bins] (its scalar inputs must be
// known at import): triangles between num_mel_bins + 2 points equally spaced on the mel scale
// from lower_edge_hertz to upper_edge_hertz, each point's spectrogram bin floor((dft_length + 1)
// x hertz / sample_rate), as onnx's reference computes them, in output_datatype (float32 by default).
//
// Takes the NodeLowering of a DFT or STFT node. Guarantees: onnx's reference results (numpy's FFT
// in double; here float sums of L products, within onnx's tolerance for the lengths of its cases);
// O(L x bins) work a transform; dft_length, axis, frame_step and frame_length must be constant,
// the axis not the last one, and a bad one is refused naming it.
#pragma once

#include "importer/lower.h"

namespace fusetune::importer {

void dft(NodeLowering& L);
void stft(NodeLowering& L);
void mel_weight_matrix(NodeLowering& L);

}  // namespace fusetune::importer
