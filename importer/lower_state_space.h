// Lowerings of the ONNX ops of recurrent-state decoders (opset 27: Mamba-style and linear-attention
// layers) to canonical ops.
//
// - CausalConvWithState: the input [B, C, L] after past_state [B, C, k - 1] (zeros when absent)
//   along the time axis (Concat), a depthwise Conv (group C, no padding) of weight [C, 1, k] plus
//   the bias, then SiLU (x * Sigmoid(x), in float32) for activation "silu" or "swish";
//   present_state is the last k - 1 positions of that concatenation (a Slice).
// - LinearAttention: query, key and value [B, T, H * D] split into heads ([B, H, T, D]: Reshape,
//   Transpose), in float32; then per time step t (a Slice of each), with the state S
//   [B, H_kv, d_k, d_v] (past_state, or zeros): S *= Exp(decay_t) (update rules "gated" and
//   "gated_delta"; decay per head or per key dimension), v_t = beta_t (v_t - k_t S) (rules
//   "delta" and "gated_delta": a MatMul), S += k_t^T v_t (Mul of a column by a row), and the
//   step's output scale q_t S, the query heads of one group reading their key/value head's state
//   (q_t viewed [B, H_kv, group, d_k], a MatMul); the outputs Concat over time back to
//   [B, T, H_q * d_v] in the query's type, present_state S in past_state's type (the query's when
//   absent). About a dozen canonical nodes a step, at most kMaxSteps (lower_recurrent.h) steps.
//
// Takes a NodeLowering of such a node. Guarantees: onnx's reference semantics within float
// rounding (accumulation in float32, as the reference); inputs of the wrong rank or heads that
// do not divide are refused naming the input and its shape, an update rule that needs decay or
// beta without it (or forbids it with it) naming the rule.
#pragma once

#include "importer/lower.h"

namespace fusetune::importer {

void causal_conv_with_state(NodeLowering& L);
void linear_attention(NodeLowering& L);

}  // namespace fusetune::importer
