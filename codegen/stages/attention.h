// The flash-attention stage: a group's attention core (planner/attention.h) computed a tile of
// keys at a time, the scores never whole in shared memory, so any sequence length fits.
//
// Takes the lowering context, the core, and the largest region of its output over the sampled
// tiles: one matrix per block (every batch axis of extent at most 1; R rows by DV columns), or
// grouped-query heads folded into the rows (planner::head_fold: H heads of one batch axis that
// read the same K and V, every query row of each; R = H x queries, row r being head origin +
// r / queries, query row r % queries), which stage each key tile once for all their rows.
// In the SIMT form attention_stage allocates, in shared memory, Q's rows (staged once), one tile
// of K's and V's rows, the tile's probabilities and the rows' rescaling factors and sums; and
// thread-locals for the output's register micro-tile and the running row maximum and sum. Its emit stages Q, then
// runs a block-uniform loop over tiles of `reduce_step` keys: K's and V's rows of the tile staged
// (zero beyond the keys; where Q, K or V is a view of a group input with its width contiguous,
// planner::wide_operand, in 16-byte read-only loads, a thread's batch of them in flight before
// any is stored), a barrier; each thread computes a TM x TN micro-tile of scores (rows
// interleaved by R / TM, keys by the tile / TN: planner::micro_tile), evaluates the chain between
// the scores and the softmax on each (masks, scale, casts; keys beyond the last are -inf) and
// stores it; a barrier; a warp per row takes the tile's maximum (warp reduction), rescales by the
// new running maximum (a row that has seen only -inf subtracts 0), stores the exponentials, sums
// them (warp reduction) and folds the sum into the running one, lane 0 publishing the factor that
// rescales the row's earlier output; a barrier; each thread rescales its UM x UN micro-tile of
// the output and adds the tile's probabilities times V; a barrier. After the last tile each
// output is divided by its row's sum and stored where the output goes: where the group's root is
// the output or a view of it (planner::flash_output_view) and every sampled tile's root region is
// the view of its output region, straight to the root, and the output has no shared buffer; else
// to its shared buffer (and its output parameter, if exported).
// On tensor cores (the candidate's `mma`; Q, K, P and V all float16 or all bfloat16, sm_80+):
// warp w owns rows [16w, 16w + 16) of the tile (the block has a warp per 16 rows); Q and the key
// tile's K and V are 16-bit slices in shared memory with rows padded to an odd number of 16-byte
// units (the eight rows an ldmatrix phase reads fall in distinct banks), head widths rounded up
// to 16 and zero-filled. Q, K and V move by 16-byte cp.async where each is a strided
// view of a 16-bit input with its width axis contiguous (K through the Transpose that makes Kᵀ,
// grouped-query K and V through their repeat's grouped axis: planner/strided_view.h,
// planner::async_operand), element by element otherwise; where K or V
// moves by cp.async the key tiles take two slots, and tile t + 1's copies are issued before tile
// t is multiplied, into the slot tile t - 1 used (the barrier ending each tile orders its reads
// before the next issue), each tile waiting for all but the newest group (one group a tile, empty
// after the last). Each warp loads its Q A-fragments once (ldmatrix.x4); per key
// tile, S = Q K^T accumulates in m16n8 float fragments (K's rows are B's columns: ldmatrix.x4
// without .trans gives two n8 blocks of keys), and the scores stay in those registers
// (FlashAttention-2's layout): each lane takes its fragment elements through the chain, its two
// rows' maxima over its keys, exchanged within its quad (the four lanes holding a row) by two
// butterflies; the running maxima, the factors rescaling each lane's output fragments and its
// partial row sums, the exponentials in place; then O += P V with P's A fragments packed from
// the probabilities' registers (two n8 blocks of C are one k16 slice of A; one cvt a pair) and V
// by ldmatrix.x4.trans. Two barriers a tile, no shared memory for scores or probabilities; after
// the last tile the quads sum their lanes' partial row sums, and each lane divides its fragments
// by its two rows' sums (no shared memory, no barrier). Where flash_output_view gives the root's
// view of the output, the quads exchange the quotients of each pair of 8-column units
// (transpose_quad) so that a lane stores 8 consecutive columns of a row, one 16-byte access where
// they lie inside and are aligned (a warp's request: 16 rows of 32 contiguous bytes).
// With wgmma (the candidate's `wgmma`, sm_90a; planner::wgmma_attention: Q, K and V all by
// cp.async, widths and the key tile at most 256): a warpgroup per 64 rows; Q and the key tiles lie
// in shared memory as core matrices (8 rows of 8 elements, 128 contiguous bytes, copied 16 bytes a
// chunk to where their row and column put them), read by the tensor cores through matrix
// descriptors: S = Q K^T a wgmma per 16 of the head (Q K-major; K as a K-major B, or Kᵀ in memory
// as an N-major one); the softmax on S's registers as above (wgmma's accumulators have mma's C
// layout on each warp's 16 rows); P's A fragments of the whole tile packed into registers of
// their own, and O += P V a wgmma per 16 keys with A from those registers and V an N-major B.
// FlashAttention-3's schedule within a warpgroup: tile t issues S_t, commits it, then issues the
// previous tile's P V (P still in its registers) as a group of its own; S's wait leaves that group
// in flight, so the chain, the maxima, the exponentials and the sums of tile t run while the
// tensor cores compute tile t - 1's P V; then P V's wait, the output rescaled and P_t packed over
// P_{t-1}. The last tile's P V follows the loop. K and V move in groups of their own, two slots
// each: K_{t+1}'s copies issued as tile t begins, V_{t+1}'s as it ends (into the slot tile t - 1's
// P V read, waited for); each tile waits for K_t's and V_{t-1}'s, with V_t's and K_{t+1}'s in flight.
// Each tile's copies are made visible to the wgmma's proxy (fence.proxy.async) before its first
// barrier, which also orders Q's.
// With the key tiles split over blocks (the candidate's split_k: flash-decoding, for a decode
// step's few rows), each block runs its split's tiles (split_k.h's slices), publishes its
// outputs before the division and its rows' running maxima and sums (split_k.h publish_split),
// and the tile's last block weighs split s by exp(m_s - max m) into its accumulators and row
// sums, in split order, before the division. Guarantees: the reference's softmax(chain(Q K)) V up to float32 rounding
// (the max-subtracted exponentials of the online softmax), NaN where the reference has NaN (a
// row with every key at -inf); the warp reductions sit at block-uniform points, every lane
// reaching them; no thread reads shared memory another writes between the same two barriers.
#pragma once

#include <memory>
#include <vector>

#include "codegen/stages/context.h"
#include "planner/attention.h"

namespace fusetune::codegen::stages {

std::unique_ptr<AnchorStage> attention_stage(LoweringContext& cx, Kernel& k, const planner::AttentionCore& core,
                                             const std::vector<int64_t>& max_extent);

}  // namespace fusetune::codegen::stages
