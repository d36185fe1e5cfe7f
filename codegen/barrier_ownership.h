// Barrier elision by ownership: removes the barriers of a lowered kernel across which no element
// changes hands between threads.
//
// Takes a kernel as lowering leaves it, after codegen/barriers.h, and its blocks. Runs every
// thread of every block through the kernel's index arithmetic (codegen/index_expr.h; no float
// math) and records, per barrier interval, which threads load and store each element of each
// shared allocation and each output parameter. Candidates are the barriers of the kernel's body
// and of the bodies of its top-level uniform loops (a staged contraction's reduction-step loop).
// A candidate is removed when, at every place a thread reaches it in every block (each iteration
// of its loop), no element touched in the interval before it (grown by the candidates removed
// before it) is touched by another thread in the interval after it with a store on either side:
// deleting it merges intervals in which every element they share belongs to one thread, so no
// hazard can arise and every thread reads what it read before. These are the barriers the
// mutation test (tools/barrier_mutations.cpp) found ordering nothing at run time: a stage whose
// thread mapping coincides with the next stage's for this tile shape (an element loop after an
// element loop over the same region and thread count, a register-blocked store whose element
// lands on the thread that reads it, a region no larger than the block), the trailing barrier of
// a reduction-step loop that runs once.
// An asynchronous copy (cp.async) stores its elements where it is issued and again where the
// issuing thread's wait_group lands it: the copy may write at any moment in between. Blocks that
// cooperate (split-K): a fence stores, and an atomic loads, one element standing for the block's
// published global stores (so the barriers between other threads' fences and the atomic stay),
// an atomic also stores its counter, and an exit is followed on the path that goes on (the other
// blocks run a prefix of it).
// Keeps every barrier when it cannot know: a wgmma (its operands are read through matrix
// descriptors by the warpgroup), an index into a tracked buffer or a loop bound that
// is not known (a value loaded from memory), a branch holding a barrier on an unknown condition,
// threads reaching different numbers of barriers, more than `budget` loop iterations and element
// accesses in all (a large grid or block: the analysis stops, before a block when one more block
// at the first one's cost would exceed the budget, and keeps every barrier; the default bounds
// the analysis to some 0.3 s per kernel on this project's 2-core machine). Blocks are analysed in
// order, and the analysis ends at the first block after which every candidate stays: a kernel
// with no candidate costs nothing, and one whose first block hands over across every candidate
// is not looked at further. Barriers nested
// deeper (in a branch, a part, a loop inside a loop) are kept. A uniform loop none of whose
// barriers is still a candidate is run for its first iteration's head and last iteration only.
// Every block is covered because a tile's regions depend on where it lies (clipped at the
// tensor's edges, split by a Concat or a Pad boundary inside it), but a block is run only when it
// is not a translate of one run before it (one of the last few): decided from the kernel's text
// (IndexExpr::shift), a translate takes every branch and loop trip that block takes and touches,
// per buffer, its elements moved by one offset, so it hands over exactly what that block does.
// Interior tiles are translates of each other; a grid of 128 tiles typically runs 1 to 4.
// Guarantees: the kernel computes what it computed and no hazard appears in any block.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "codegen/kernel_ir.h"

namespace fusetune::codegen {

struct OwnershipResult {
  int removed = 0;          // barriers removed
  bool analysed = false;    // false: the analysis gave up (reason says why) and removed nothing
  int64_t translates = 0;   // blocks not run: translates of a block analysed
  std::string reason;
};

// Removes the barriers of `k` that order nothing in any of `blocks` (all of the kernel's); at
// most `budget` loop iterations and element accesses are enumerated.
OwnershipResult remove_unordering_barriers(Kernel& k, const std::vector<int64_t>& blocks, int64_t budget = 2000000);

}  // namespace fusetune::codegen
