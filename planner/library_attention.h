// The attention groups cuDNN's scaled dot-product attention (its flash kernels) computes whole: the
// library form of planner/attention.h's core.
//
// Takes a graph and a fusion group. match_attention_call answers when the group is exactly
//   O = softmax(scale · Q·Kᵀ [+ bias] [causal]) · V
// in float16 or bfloat16: the attention core (planner/attention.h) whose chain holds only Casts to
// float types, scalings of the scores by scalar constants (Mul, or Div by one) before any bias or
// mask (the library scales the product only), at most one Add of a bias and at most one Where
// that keeps the scores where a constant condition allows (evaluated here) and puts -10,000 or
// less elsewhere, the condition being a causal mask (query i sees keys j <= i + keys - queries,
// with no more queries than keys so that every row sees one; all true is no mask); Q and K may
// carry scalings of their own before the product. Every other node of the group views Q, K, V or the bias in a buffer outside the
// group (Reshape, Transpose, Slice, Expand of a value the group reads) or O in the group's one
// output (Reshape, Transpose: planner/strided_view.h). Q, K, V and the bias share batch and heads
// (no grouped-query repeat, nor any operand broadcast along an axis: the generated flash form
// computes those), and the library's layout
// rules hold: the width axes contiguous, every other stride and offset a multiple of 16 bytes,
// widths multiples of 8 up to 256. Guarantees: the match's call (LibraryOp::kAttention, library
// kCudnn) holds the geometry, the product of the scalings, the mask and each operand's layout;
// its inputs are the buffers Q, K, V [and the bias] lie in (one value may hold all three) and its
// output the group's output; computing the call on those buffers gives the group's output.
#pragma once

#include <optional>

#include "core/graph.h"
#include "planner/fusion.h"
#include "planner/library_call.h"
#include "planner/library_match.h"

namespace fusetune::planner {

std::optional<LibraryMatch> match_attention_call(const Graph& g, const FusionGroup& group);

}  // namespace fusetune::planner
