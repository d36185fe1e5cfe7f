// Kernel identity: when two generated kernels compute the same thing.
//
// Takes a Kernel (codegen/kernel_ir.h). canonical_text gives its CUDA definition (emit.h
// emit_kernel) with its name left out, its comments dropped, and every name the kernel declares
// (parameters, scratch, shared allocations, thread-locals, lets, loop variables, a vector load's
// local, an atomic's old value) renamed to ftc_<n>, numbered in the order the declarations are met.
// Guarantees: two kernels with equal canonical texts are the same text up to a one-to-one renaming
// of their own names (the names lowering derives from value ids: r46_lo3 in one layer, r117_lo3 in
// the next), so they compute the same function of their parameters, in the same order, on the same
// launch shape given the same grid and shared memory; a name it does not rename (a helper, an
// intrinsic) is the same name in both. A missed declaration only makes texts differ that could
// have been equal, never the reverse.
#pragma once

#include <string>

#include "codegen/kernel_ir.h"

namespace fusetune::codegen {

std::string canonical_text(const Kernel& k);

}  // namespace fusetune::codegen
