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
#include <set>
#include <vector>

#include "core/graph.h"
#include "core/tensor.h"
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
// Where the core's output goes from the flash stage's registers straight to the group's root
// (group_root): the strided view (strided_view.h output_view) of the output in the root's buffer,
// where the root is the output itself or a view of it through the group's Reshapes and
// Transposes, with the output's width axis contiguous and no axis grouped, and no value on the
// way (the output included) leaving the group but the root. Where besides a tile's root region is
// the view of its output region (checked on the tiles: the planner on its representative one,
// codegen on every sampled one), the output has no shared buffer and the stage writes the root
// itself, the tensor-core form 16 bytes a lane after its quads' exchange; nullopt: the output goes
// through its shared buffer and the root is written from there.
std::optional<StridedView> flash_output_view(const Graph& g, const FusionGroup& group, const AttentionCore& core);
// The elements of a 16-byte load of view v's base (4 or 8).
int64_t wide_lanes(const Graph& g, const StridedView& v);
// How a flash block lays out its rows. One matrix: every batch axis of the core's output region
// of extent at most 1 (axis -1). Or grouped-query heads folded into the rows (flash-decoding's
// grouped form): exactly one batch axis `axis` spans `heads` > 1 heads, the region holds every
// query row, the scores, the softmax's input and the output have the same batch axes (no
// regrouping Reshape in the chain), and K and V (the scores' second operand and the output's) are
// each independent of that axis (broadcast, or of extent 1) or a strided view of a group input
// that repeats every element for a multiple of `heads` consecutive heads (the repeat's grouped
// axis, planner/strided_view.h). The block's rows are then head-major: row r is head
// origin + r / queries, query row r % queries; every head of a block whose origin along the axis
// is a multiple of `heads` reads the same K and V elements, so the block stages each key tile
// once for all of them. flash_tiles admits a fold only where every tile's origin is such a
// multiple. nullopt: neither (not a flash block).
struct HeadFold {
  int axis = -1;
  int64_t heads = 1;
  int64_t queries = 0;  // the query rows a head holds (the scores' row extent where folded)
};
std::optional<HeadFold> head_fold(const Graph& g, const FusionGroup& group, const AttentionCore& core,
                                  const std::vector<int64_t>& extents);
// Whether Kᵀ moves with its keys contiguous (async_operand's second case): the tile is staged as
// Kᵀ's rows, a row of the head's width holding the tile's keys, and read by ldmatrix.trans as V is,
// where the other layout holds K's rows.
bool keys_contiguous(const Graph& g, const FusionGroup& group, const AttentionCore& core);
// Whether the tensor-core form streams the key tiles through two slots (K or V by cp.async).
bool streams_key_tiles(const Graph& g, const FusionGroup& group, const AttentionCore& core);
// Whether the tensor-core form can issue wgmma (sm_90a) with key tiles of `key_step` keys: a
// tensor attention whose Q, K (or Kᵀ) and V all move by cp.async (async_operand: the stage lays
// them out as core matrices, 16 bytes a copy), whose head and value width, rounded up to 16, and
// key tile, rounded up to 16, are at most 256 (the N of P V's and of Q Kᵀ's wgmma).
bool wgmma_attention(const Graph& g, const FusionGroup& group, const AttentionCore& core, int64_t key_step);
// The tensor-core form's layout, as the planner charges it and the stage allocates it: the rows a
// block of `warps` covers (a warp per 16; wgmma: a warpgroup per 64), and the elements a staged
// row of `width` 16-bit values takes (padded for ldmatrix, planner::ldmatrix_pitch; wgmma's core
// matrices unpadded).
int64_t flash_tensor_rows(int64_t warps, bool wgmma);
int64_t flash_tensor_pitch(int64_t width, bool wgmma);

// A score at or below this gets no weight: its exponential against any row maximum a visible key
// sets underflows to zero in float32.
inline constexpr float kMaskedScore = -10000.0f;
// How far below a row's greatest bias on a key it sees causal_mask_of wants its biases on the keys
// it does not: exp(-1000) is zero in float32 with room for the scores' own spread.
inline constexpr float kMaskGap = 1000.0f;

// v's value where it is a constant or the members computing it read constants only (a mask a
// model slices from a buffer it keeps, or builds from a Trilu), evaluated by the reference
// kernels; the members evaluated are added to `evaluated` where given.
std::optional<Tensor> member_constant(const Graph& g, const std::set<int>& members, int v, std::set<int>* evaluated = nullptr);

// Whether `allowed` (a boolean tensor broadcast to [..., queries, keys]; `negate`: true marks the
// masked keys) is the same causal mask, or no mask, for every leading index. Sets `causal` for
// the former. Causal: query i sees the keys j <= i + keys - queries (aligned at the bottom right).
bool causal_mask(const Tensor& allowed, int64_t queries, int64_t keys, bool negate, bool& causal);

// The causal mask of a core: the last op before the Softmax (through Casts to float types) gives
// every key a row does not see under a causal mask (j > i + keys - queries) a score at or below
// kMaskedScore, while every row sees a key it leaves above it (queries <= keys): a Where that
// keeps the scores where a constant causal condition allows and puts a fill at or below
// kMaskedScore elsewhere, or an Add of a constant that is at or below kMaskedScore at every such
// key and whose greatest value on a key each row sees lies kMaskGap or more above; before it the
// chain only scales and casts the scores (no other mask or bias). The condition or the bias is a
// constant the group's members compute (member_constant), or one computed from index vectors
// whose diagonals planner/toeplitz.h finds (a mask too large to fold: judged in O(queries +
// keys), never computed). Assumed: a row's scores differ
// by less than a few hundred (exp of the masked keys' distance underflows in float32). Then the key tiles past a block's last row's last
// visible key add nothing to its rows (their weights are exactly zero), and the flash stage
// (codegen/stages/attention.h) and the model skip them: a prefill's causal attention runs about
// half the tiles. `node` is the Where or Add, `operand` its condition or bias; `from_indices`: the
// operand is exactly the causal pattern (the condition, or a bias of 0 wherever a row sees the key),
// so the stage computes it from the row and key (the Where's selection, or 0 and -infinity: the
// same weights) and reads nothing. `visible_tiles` gives, for query rows [first, first + rows) of
// `queries` against `keys` in tiles of `step`, the key tiles up to the rows' last visible key.
struct CausalMask {
  int node = -1;
  int operand = -1;
  bool from_indices = false;
  bool seen_true = true;  // a Where's condition: true where a row sees the key (false: where it does not)
};
std::optional<CausalMask> causal_mask_of(const Graph& g, const FusionGroup& group, const AttentionCore& core);
int64_t visible_tiles(int64_t first, int64_t rows, int64_t queries, int64_t keys, int64_t step);

}  // namespace fusetune::planner
