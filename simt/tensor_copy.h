// What a TMA tile load (cp.async.bulk.tensor) puts in shared memory, as the PTX ISA defines it:
// the box of a tensor map at given coordinates, box-row-major (innermost dimension first), each
// element outside the tensor zero, and the bytes of each swizzle span permuted by the shared
// address they land at.
//
// Takes a host tensor map (simt/device_api.h: the mapped buffer's bytes, dimensions, byte strides,
// box and swizzle) and the box's coordinates; guarantees the bytes and the in-bounds runs of the
// source the copy reads (for the executor's checks and counters), never a read outside the
// buffer (a run that would leave it is reported instead of read). The executor
// (simt/executor.cpp) lands the bytes where a wait observes the copy's mbarrier phase.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "simt/device_api.h"

namespace fusetune::simt {

// The bytes a box holds (every element of it, inside the tensor or not: the transaction count a
// copy completes).
int64_t box_bytes(const ft_simt_tensor_map& map);

// The shared-memory byte offset (from the start of the block's shared memory) that byte `offset`
// of a copy's linear layout occupies under `swizzle` (bytes of a span: 128 XORs bits 4..6 of the
// address with bits 7..9, 64 bits 4..5 with 7..8, 32 bit 4 with bit 7; 0 leaves it).
uint64_t swizzled(uint64_t offset, int swizzle);

// A contiguous run of the source a copy reads: `bytes` from byte `offset` of the mapped buffer.
struct SourceRun {
  int64_t offset = 0;
  int64_t bytes = 0;
};

// The box of `map` at `coords` in its linear layout (box_bytes of them): each innermost run of
// elements inside the tensor copied from `source` (`source_bytes` long), the rest zero. Calls
// `run` for each run read, and `outside` (instead of reading) for a run the buffer does not hold.
std::vector<unsigned char> gather_box(const ft_simt_tensor_map& map, const int* coords, const unsigned char* source,
                                      int64_t source_bytes, const std::function<void(const SourceRun&)>& run,
                                      const std::function<void(const SourceRun&)>& outside);

}  // namespace fusetune::simt
