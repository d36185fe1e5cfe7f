// The Kernel IR verifier: the structural rules of codegen/kernel_ir.h, checked on a kernel before
// it is emitted, so that a lowering bug surfaces as one clear error instead of a wrong result, a
// hang or a CUDA compile failure.
//
// Takes a generated kernel (not a library call: its body is empty). Checks:
//   - barriers, warp reductions, mma, ldmatrix, wgmma, exits, parts and uniform loops appear only at
//     block-uniform points: the top level of the body, of a part's body or of a uniform loop's
//     body; never inside a thread loop, a serial `for`, an `if`, or the block-uniform lets (the
//     kernel's or a part's);
//   - a warp reduction combines a declared thread-local of one float (kF32, count 1);
//   - mma operands are declared thread-locals of the right dtype whose elements [at, at + size)
//     lie inside their count (accumulator 4 kF32, A 4 kU32, B 2 kU32), with A and B float16 or
//     bfloat16; an ldmatrix loads 1, 2 or 4 matrices into as many kU32 registers of a declared
//     thread-local, from a shared allocation of a 16-bit dtype;
//   - threads is positive, and a multiple of kWarpSize when the kernel has warp-synchronous
//     statements (warp reductions, mma, ldmatrix);
//   - shared allocations are 16-byte aligned, lie within shared_bytes and do not overlap, except
//     allocations of different parts of a packed kernel (a block runs one part; parts' shared
//     memory overlays): two allocations may share bytes only when each is named only inside parts
//     and no part names both;
//   - every buffer a store writes is an output parameter, a scratch buffer or a shared allocation;
//     an atomic's is a uint32 scratch buffer or output; scratch buffers are float32 or uint32, the
//     first uint32 with a number of counters that divides the grid;
//   - parameters, shared allocations and thread-locals have distinct names;
//   - warpgroup roles (`roles`), one statement at most, stand at the top level of the body and
//     split the block's threads (whole warpgroups) at a warpgroup boundary; each side is a
//     warpgroup-uniform block: warp- and warpgroup-collective statements and uniform loops stand
//     there as at the top level, but no barrier, part, exit, thread loop or roles; a setmaxnreg (24
//     to 256 registers, a multiple of 8) only as the first statement of a side, on both sides or
//     neither, their budgets within the block's 65,536 registers;
//   - a tensor copy's destination is 128-byte aligned (1,024 under the 128-byte swizzle) for every
//     value of its index's variables: its allocation's offset, and the index a multiple
//     (IndexExpr::twos) of the elements those bytes hold.
// Guarantees: returns when every rule holds; otherwise throws Error naming the kernel, the rule and
// the statement (as to_text prints it) or declaration at fault.
#pragma once

#include "codegen/kernel_ir.h"

namespace fusetune::codegen {

void verify_ir(const Kernel& k);

}  // namespace fusetune::codegen
