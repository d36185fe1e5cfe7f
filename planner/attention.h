// The attention core of a fusion group: the part a flash-attention kernel computes without ever
// holding a whole row of scores.
//
// Takes a canonical graph and a group. match_attention finds, inside the group,
//   P = Softmax(chain(Q x K))   over P's last axis,  then  O = cast(P) x V
// where `chain` is element-wise ops (scale, additive or boolean masks, Cast, Where) that read the
// scores at the index they write (no broadcast of them), and Reshapes that regroup only the axes
// before the rows and keys (Swin's shifted windows), `cast` at most Casts of P to float types
// (the stage keeps P in float, or in the 16-bit type the tensor-core form multiplies), and Q,
// K, V and every other operand of the chain reach the group's inputs through inlined ops only (no
// reduction, normalization or contraction of the group in between), so that any tile of keys can
// be computed on its own. None of the scores, the chain's values or P leaves the group or feeds
// anything but the next op of the core. Guarantees: when it answers, O's rows are P's rows (same
// batch axes, row and key extents), the contraction of the scores runs over Q's last axis, and
// the softmax can be computed online over tiles of keys (max and sum rescaled per tile).
#pragma once

#include <optional>
#include <vector>

#include "core/graph.h"
#include "planner/fusion.h"
#include "planner/strided_view.h"

namespace fusetune::planner {

struct AttentionCore {
  int scores = -1;            // the MatMul Q x K (node id)
  int softmax = -1;           // the Softmax over the keys
  int output = -1;            // the MatMul P x V
  std::vector<int> absorbed;  // every node the core computes besides `output`: scores, chain, softmax, casts
  int64_t keys = 0;           // the keys (the scores' last extent)
  int64_t head = 0;           // the scores' contraction extent (Q's last axis)
};

std::optional<AttentionCore> match_attention(const Graph& g, const FusionGroup& group);

// True if both products of the core can run on tensor cores: Q, K, the probabilities P x V reads
// and V all float16, or all bfloat16.
bool tensor_attention(const Graph& g, const AttentionCore& core);

// How the tensor-core form stages operand `operand` (0 or 1) of the core's product `matmul`
// (core.scores: Q, then Kᵀ; core.output: P, then V): the strided view (strided_view.h) through
// which it moves by 16-byte cp.async, where it is a view of a 16-bit value outside the group with
// its width axis contiguous (Q's and V's last axis, Kᵀ's second to last: the head) or, for Kᵀ
// alone, its keys contiguous (a projection that wrote K transposed: keys_contiguous); nullopt
// where it is computed element by element. The planner's shared-memory and bytes-in-flight
// estimate and the stage (codegen/stages/attention.h) both decide by it: where K or V streams
// asynchronously, the key tiles are double-buffered.
std::optional<StridedView> async_operand(const Graph& g, const FusionGroup& group, const AttentionCore& core, int matmul,
                                         int operand);
// How the SIMT form stages operand `operand` of the core's product `matmul` (Q, Kᵀ, V; as
// async_operand's): the strided view through which a thread loads 16 bytes at a time (4 float32
// or 8 16-bit values, wide_lanes) along the width axis (Q's and V's last, Kᵀ's second to last),
// where the operand is a view of a float32, float16 or bfloat16 value outside the group with that
// axis contiguous; nullopt where it is staged element by element. The planner's load count and
// bytes in flight and the stage both decide by it.
std::optional<StridedView> wide_operand(const Graph& g, const FusionGroup& group, const AttentionCore& core, int matmul,
                                        int operand);
// The elements of a 16-byte load of view v's base (4 or 8).
int64_t wide_lanes(const Graph& g, const StridedView& v);
// Whether Kᵀ moves with its keys contiguous (async_operand's second case): the tile is staged as
// Kᵀ's rows, a row of the head's width holding the tile's keys, and read by ldmatrix.trans as V is,
// where the other layout holds K's rows.
bool keys_contiguous(const Graph& g, const FusionGroup& group, const AttentionCore& core);
// Whether the tensor-core form streams the key tiles through two slots (K or V by cp.async).
bool streams_key_tiles(const Graph& g, const FusionGroup& group, const AttentionCore& core);

}  // namespace fusetune::planner
