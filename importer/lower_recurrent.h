// Lowering of ONNX's recurrent layers, LSTM, GRU and RNN (opsets 7 on), to canonical ops: the
// input projection of every time step at once (one MatMul of X by W transposed, the biases
// added), then one cell step per time step (the recurrent MatMul of the previous hidden state by
// R transposed, the gates' activations and the state update, element-wise). W, R and the biases
// have their columns gate-minor: a hidden unit's gates side by side (column j x gates + k is gate
// k's column j; a Reshape, Transpose and Reshape, folded for constant weights), so that a tile of
// the new state reads one run of the product's columns and fusion makes a step one launch (GRU
// without linear_before_reset too: its h gate's product, reading r x h, joins the z and r
// product as back-to-back products, planner/fusion.h). Forward, reverse (time
// steps last to first) and bidirectional (both, stacked); layout 0 ([T, B, I], states [D, B, H])
// and 1 ([B, T, I], states [B, D, H]); initial states; LSTM peepholes and input_forget; GRU
// linear_before_reset; clip; every activation the spec lists with its activation_alpha/beta,
// consumed in order by the activations that take them (as onnxruntime does); sequence_lens known
// at import: a batch entry's steps past its length leave its state and write zeros to Y (forward
// only when the lengths differ).
//
// Takes the NodeLowering of an LSTM, GRU or RNN node. Guarantees: onnx's equations (gate orders
// iofc, zrh); about 20 canonical nodes a time step and direction (the gates' Reshape, Slice and
// Reshape included); at most kMaxSteps steps; what it cannot honour (sequence_lens from data,
// differing lengths in reverse, an unknown activation) is refused naming it.
#pragma once

#include "importer/lower.h"

namespace fusetune::importer {

inline constexpr int64_t kMaxSteps = 4096;

void recurrent(NodeLowering& L);

}  // namespace fusetune::importer
