// The staged MatMul of two 8-bit integer operands (int8 or uint8 each) into int32
// (planner::dp4a_matmul; what MatMulInteger, QLinearMatMul and a QDQ model's dequantized pairs
// lower to): the dp4a form, four byte products and their sum one dp4a instruction (sm_61+), and
// its tensor-core form, mma.sync m16n8k32 (sm_80+; the candidate's TileConfig::mma).
//
// Takes the lowering context and such a MatMul that stages (stages/matmul.h's stages_matmul) on a
// candidate the planner admitted for it (a step of a multiple of 4, of 32 on tensor cores; no
// wgmma, GEMV form or vector width; micro-tiles that cover the region, or a warp grid of
// the block's warps). Per reduction step the block stages both slices into shared memory as 32-bit
// words of four consecutive K entries, zero beyond K and outside the region: A's rows x step / 4
// words at planner::dp4a_pitch_a (a word of padding a row, so the rows a warp's micro-tiles read
// sit in different banks; imma_pitch_a on tensor cores); B's step / 4 x columns words, each the
// four K entries of one column (rows of imma_pitch_b words on tensor cores). On tensor cores the
// slices span the warps' fragments (planner::mma_warps, rows to 16s and columns to 8s). A row-major A input whose K is a multiple of 4 is read a word a
// load where its address is 4-byte aligned (checked at run time: a view may start at any byte),
// else a byte a load (a computed A, such as a quantization fused into the group, is computed a
// byte at a time). A B input whose columns are contiguous is read as four word loads along four
// K rows of four consecutive columns, transposed in registers into the four columns' words,
// where the four columns lie in the region and are aligned; else a byte a load. After a barrier
// each thread's TM x TN micro-tile (planner::micro_tile) runs one dp4a per word per accumulator:
// ft_dp4a_SU(a, b, c), S and U the operands' signedness (s or u), on 32-bit accumulators that
// wrap as int32 arithmetic does; on tensor cores, per 32 of the step each lane reads its fragments'
// words (codegen/kernel_ir.h's m16n8k32 layout: plain 32-bit shared reads, conflict-free at those
// pitches) and each warp issues its fm x fn mma. With split-K (stages/split_k.h) a block runs its
// split's steps and the last of the tile's blocks sums the splits' accumulators as uint32 (modulo
// 2^32: the same wrapped int32 sum in any order). After the steps, where planner::
// register_epilogue takes the product's uses, each lane runs the epilogue on its fragments' pairs
// of adjacent columns (stages/matmul.h's epilogue_run, runs of two); else it writes its
// accumulators inside the region to the product's shared buffer. The SIMT form's epilogue: from the registers where planner::
// register_epilogue takes the product's uses and each micro-tile row is a whole number of
// 16-byte runs of every value it writes (stages/matmul.h's epilogue_run, the product read as
// int32), else the accumulators go to the product's shared buffer (64-bit integers) and, when
// exported, to its output parameter.
// Guarantees: the exact int32 product (sum of the byte products, wrapping modulo 2^32 as the
// reference's int32 result does) for every tile, partial ones included; every staging loop is
// clamped to its allocation; no slot is read before the barrier after its staging.
#pragma once

#include <memory>
#include <vector>

#include "codegen/stages/context.h"

namespace fusetune::codegen::stages {

// True if MatMul n of the group takes the dp4a form on this candidate.
bool uses_dp4a(const LoweringContext& cx, const Node& n);

std::unique_ptr<AnchorStage> dp4a_matmul_stage(LoweringContext& cx, Kernel& k, const Node& n,
                                               const std::vector<int64_t>& max_extent, int64_t max_elems);

}  // namespace fusetune::codegen::stages
