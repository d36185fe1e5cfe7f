// parallel_for: runs independent pieces of work (lowering a model's candidates, a bundle's
// launches) on the machine's cores.
//
// Takes a count n and a function of an index; calls it once for every index in [0, n), on up to
// `threads` OS threads (0: one per core), each thread claiming the next unclaimed index.
// Guarantees: returns when every call has returned; when calls throw, every index is still
// claimed, and the exception of the lowest failing index is rethrown, so an error reads the same
// however the work was divided. The function must be safe to call from several threads at once.
// Work under a cancel token (core/cancel.h) stays under it on every thread, and an index not
// started when the token is raised throws Cancelled instead of running.
#pragma once

#include <cstddef>
#include <functional>

namespace fusetune {

void parallel_for(size_t n, const std::function<void(size_t)>& fn, int threads = 0);

// True on a thread that is running a call of parallel_for's (its pool's or the caller's own):
// work that would divide itself again can stay on that thread instead of multiplying threads.
bool inside_parallel_for();

}  // namespace fusetune
