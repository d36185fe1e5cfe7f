// Split-K: a staged MatMul or Conv (implicit GEMM, stages/conv_gemm.h), a cooperative
// reduction (stages/reduce.h) or flash attention (stages/attention.h), whose tiles are too few
// to fill the device runs each tile on several blocks (TileConfig::split_k), each summing a slice
// of the reduction steps, and the last of them to finish sums the slices' partial products and
// runs the epilogue.
//
// Takes the lowering context of a group whose candidate asks for split-K (its tile_setup made the
// tile's splits consecutive blocks, with uniform lets ft_tile and ft_split) and a staged MatMul
// stage (stages/matmul.h's register-blocked and GEMV forms, stages/mma_matmul.h's tensor-core forms), a
// Conv stage (register-blocked) or the flash attention stage (its key tiles the steps) with
// `steps` reduction steps in all. split_first_step declares the block's first step as the uniform
// let ft_k0 (split s runs steps [s * per, s * per + per), per = split_steps(steps); the last
// split's steps beyond K stage zeros). After the block's last step, with its accumulators in
// thread-local `acc` (`count` floats a thread), emit_split_sum emits: each thread's accumulators to
// the block's slot of the partial-products scratch buffer (count x threads values: the float32
// ones four a thread in one 16-byte store, quad q of thread t at 4 (q x threads + t), a warp's
// 512 contiguous bytes; the last count % 4, and 32-bit integers, one by one, value i of thread t
// at i x threads + t beyond the quads, a warp's 128 bytes), a __threadfence() by every thread, a barrier,
// thread 0's atomicAdd on the tile's counter (first scratch buffer), the answer broadcast through
// shared memory after a barrier, and an exit of every block but the last. The last block's threads
// fence, then set each accumulator to the sum of the tile's slots in split order (the same sum
// whichever block arrives last: the result does not depend on the blocks' timing), read past
// L1 (ft_ldcg, and vector_load_l2 for a quad in one 16-byte load: L1 is not coherent across SMs),
// and thread 0 resets the counter to zero (atomicExch)
// for the next launch. What follows (the epilogue, from registers or through shared memory) is the
// single-block code. Guarantees: the product equals the unsplit kernel's up to the order of float
// sums (per split in K order, then the splits in order); the scratch buffers are zero again after
// every launch that ran all of a tile's blocks; the publication chain (fence, barrier, atomic;
// atomic, barrier, fence) is what the host executor checks (simt/device_api.h), so deleting any
// link is a finding.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "codegen/stages/context.h"

namespace fusetune::codegen::stages {

// The reduction steps each block runs: all `steps` without split-K, else ceil(steps / splits).
int64_t split_steps(const LoweringContext& cx, int64_t steps);

// The block's first reduction step, as an expression: "0" without split-K, else the uniform let
// ft_k0 it declares.
std::string split_first_step(LoweringContext& cx, Kernel& k, int64_t steps);

// The end of the block's steps from `k0` (split_first_step's): all `steps` without split-K, else
// its split's, cut at `steps`.
std::string split_end_step(const LoweringContext& cx, const std::string& k0, int64_t steps);

// After the block's steps: the tile's partial products summed into `acc` (`count` floats a thread,
// or 32-bit unsigned integers where `dtype` is kU32: the dp4a form's int32 accumulators, summed
// modulo 2^32 as they wrap, exactly) by the last of its blocks, the others ended (see the header
// comment). Nothing without split-K. `op` "max" combines the slots by their maximum
// (NaN-propagating, as a warp reduction) instead.
void emit_split_sum(LoweringContext& cx, Kernel& k, const std::string& acc, int64_t count, const std::string& op = "sum",
                    DType dtype = DType::kF32);

// emit_split_sum's two halves, for a stage whose slots combine otherwise (flash attention's
// split keys, stages/attention.h: partial outputs rescaled by their rows' maxima). publish_split
// stores each thread's `values` (expressions, in order) to the block's slot of the scratch buffer
// and ends every block but the tile's last (the publication chain above); the last block's
// threads continue, fenced, and read split s's value i of their own thread at
// `element(s, i)` of `buffer` (by ft_ldcg, or vector_load_l2 of a float32 quad: values 4q to
// 4q + 3 below 4 x (count / 4) lie together from element(s, 4q) on; s an index expression). release_split resets the tile's counter (thread 0),
// after the last block's reads.
struct SplitSlots {
  std::string buffer;
  std::function<std::string(const std::string& split, int64_t i)> element;
};
SplitSlots publish_split(LoweringContext& cx, Kernel& k, const std::vector<std::string>& values, DType dtype = DType::kF32);
void release_split(Kernel& k);

}  // namespace fusetune::codegen::stages
