// Barrier cleanup: removes the barriers of a lowered kernel that separate nothing.
//
// Takes a kernel as lowering leaves it (codegen/lower_group.h): every stage ends with a barrier,
// so stages that end a kernel, a part of a packed kernel, or follow another barrier leave
// barriers behind that order no access. Removes, in every block-uniform sequence (the body, a
// part's body, a uniform loop's body):
//   - a barrier with nothing but comments since the previous barrier of the same sequence
//     (`__syncthreads(); __syncthreads();` is one barrier);
//   - a barrier with nothing but comments after it up to the end of the kernel (the last
//     statements of the body, or of a part's body when nothing follows the parts): no thread of
//     the block touches memory after it.
// A uniform loop's last barrier is kept: it orders one iteration's reads before the next
// iteration's writes. Guarantees: the kernel computes what it computed, every hazard the barriers
// prevented is still prevented (the mutation test, tools/barrier_mutations.cpp, deletes each
// remaining barrier and shows verification then fails).
#pragma once

#include "codegen/kernel_ir.h"

namespace fusetune::codegen {

// Removes redundant barriers from `k`; returns how many.
int remove_redundant_barriers(Kernel& k);

}  // namespace fusetune::codegen
