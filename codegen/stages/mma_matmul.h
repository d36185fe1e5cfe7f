// The tensor-core forms of the staged MatMul (sm_80+; wgmma on sm_90a): Kernel IR matrix fragments, ldmatrix and
// mma.m16n8k16 (codegen/kernel_ir.h gives their per-lane layout); for float32 operands (the TF32
// precision policy's), fragments read element by element, rounded by cvt.rna.tf32.f32, and
// mma.m16n8k8.tf32.
//
// Takes the lowering context and a MatMul that stages (stages/matmul.h's stages_matmul) whose
// operands are both float16, both bfloat16 or both float32, with a candidate that asks for tensor
// cores (uses_tensor_cores; the planner offers float32 ones only under `--precision tf32`).
// mma_matmul_stage lays out the block's warps as a warps_m x warps_n grid over the largest
// region's m16n8 fragments (the split with the fewest fragments per warp, then the
// fewest fragment loads; each warp owns fm x fn of them), rounds the reduction step up to a
// multiple of 16 (TF32: 8), allocates the operand slices (A: warps_m*fm*16 rows x step, B: step x
// warps_n*fn*8 columns; rows padded to an odd number of 16-byte units so the eight rows of an
// ldmatrix phase fall in distinct banks) and declares the fragments as thread-locals (C: fm*fn*4
// floats, A: fm*4 and B: fn*2 32-bit registers). Its emit runs a block-uniform loop over the
// reduction steps: stage both slices (zero outside the region and beyond K, so tails of M, N and K
// need no special case), a barrier, then per 16 of the step each warp loads A with ldmatrix.x4 and
// B with ldmatrix.x4.trans (.x2.trans for an odd last fragment) and issues its mma (TF32: per 8
// of the step each lane reads and rounds its 4 A and 2 B elements of each fragment); a barrier.
// After the last step, where planner::register_epilogue takes the product's uses (an element-wise
// chain at its own index ending in the root), the epilogue runs from registers: where every
// value written is 16-bit, the quad exchanges the accumulators of two adjacent 8-column units by
// warp shuffles so that each lane holds 8 consecutive columns of one row, computes the chain's
// exported values on them (its operands along the columns read as 16-byte vectors) and stores
// each as one 16-byte run; otherwise each lane computes them on its two adjacent columns per
// fragment row and stores each pair as one (stages/matmul.h's epilogue_run). A gated pair
// (planner::paired_epilogue) computes the chain's column c from its lane's product columns 2c and
// 2c + 1; where every value written is 16-bit and a warp holds four or more units, the quad
// transposes the values of four adjacent units so that each lane stores 8 consecutive chain
// columns of one row as one 16-byte run, else one value a pair. The
// product has no shared buffer and the driver writes none of those values
// again (LoweringContext::written). Otherwise each lane writes its accumulator elements inside
// the region to the product's shared accumulators for the epilogue, as on the scalar path.
// With TileConfig::wgmma (sm_90a; 16-bit operands) the block's warpgroups take the place of
// warps: planner::wgmma_groups' grid, each warpgroup owning fm x fn tiles of 64 rows by wn columns;
// the slices are core matrices (8 rows of 8 elements, 128 contiguous bytes; A K-major ordered
// row-block major, B N-major ordered k-block major), filled 16 bytes a thread in the order they
// lie in shared memory; per step, after the copies' wait, each thread's fence.proxy.async and the
// barrier: wgmma.fence, per 16 of the step one wgmma of each tile (matrix descriptors without
// swizzling: A's LBO 128 bytes, SBO step * 16; B's LBO cols * 16, SBO 128), one commit, the
// copies of the step `ahead` on while they run (into the slot of step ks - 2: the ring has one
// slot more than mma.sync's), and wgmma.wait_group 1: one step's wgmmas stay in flight across the
// next step's barrier, the last complete (wait_group 0) before the epilogue. The
// accumulators (wn / 2 floats a tile a thread) hold mma's C layout on each warp's 16 rows, and
// the epilogue is the same. With TileConfig::tma as well (planner::tma_operands: operands read as
// laid out; steps of 64, warpgroup tiles of whole 64-column boxes) the slots are filled by tensor
// copies instead: each slot a 1024-byte aligned pair of 128-byte swizzled tiles (A K-major, rows
// of 64; B N-major, boxes of 64 columns by 64 of K) with two mbarriers: "full", which its copies
// complete, and "empty", an arrival a warp; thread 0 initialises the mbarriers before the first
// barrier, then for each step expects its bytes and issues its boxes at the region's origin
// (zeros beyond the tensors: no edge handling), the prologue `ahead` steps and each step the step
// `ahead` on after its wgmmas are issued; every thread waits on its step's full slot (parity: the
// step's round of the ring) before its wgmmas, whose descriptors say the swizzle (A: SBO 1 KB, 32
// bytes a 16 of K; B: LBO 8 KB between boxes, SBO 1 KB, 2 KB a 16 of K). No block barrier in the
// loop: once wait_group 1 completes step ks - 1's wgmmas, each warp releases its slot on the
// slot's empty mbarrier (its lanes meet, lane 0 arrives), and thread 0 waits on the empty
// mbarrier before it copies into the slot again (CUTLASS's pipelined, not warp-specialized,
// Hopper mainloop).
// Where planner::resident_a holds (mma.sync, 16-bit, A a normalization of the group along its last
// axis read by this product alone), A has no slices and no ring: lower_group keeps the
// normalization's rows in A's type at planner::resident_pitch (LoweringContext::resident_pitch),
// for the warps' rows, and the stage zeroes those past the region before its first step (its
// barrier orders them before any read); each warp's A tiles come from those rows by ldmatrix at the
// step's global K (a split's steps past K multiply nothing), only B is staged a step.
// Where another stage of the group runs before the product (the driver passes
// AnchorStage::ahead_of_stages) and B is copied by cp.async (not by TMA, not warp-specialized),
// the prologue's B slices are issued before the group's first stage, one group a step, so the
// weights' first steps load while the stages before run; A's prologue slices (unless resident)
// follow here in groups of their own. A step's wait for all but the newest ahead - 1 groups still
// finds its A and B landed, groups completing in commit order.
// Guarantees: warp-synchronous
// statements only at block-uniform points, reached by every lane; every ldmatrix row address lies
// inside its slice and is 16-byte aligned; the product summed in float (each 16-bit or TF32
// product exact).
#pragma once

#include <memory>
#include <vector>

#include "codegen/stages/context.h"

namespace fusetune::codegen::stages {

bool uses_tensor_cores(const LoweringContext& cx, const Node& n);

std::unique_ptr<AnchorStage> mma_matmul_stage(LoweringContext& cx, Kernel& k, const Node& n,
                                              const std::vector<int64_t>& max_extent, int64_t max_elems);

}  // namespace fusetune::codegen::stages
