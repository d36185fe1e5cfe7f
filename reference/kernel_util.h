// Helpers shared by the reference kernels: broadcasting offsets, per-dtype compute paths.
// Internal to reference/; kernels compute float dtypes in double and integer dtypes in int64 and
// round once when they store, so the reference is at least as accurate as any float32 kernel.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "core/graph.h"
#include "core/tensor.h"

namespace fusetune::reference {

// For every element of `out` (row-major), the row-major offset of the element of a tensor of shape
// `in` that numpy broadcasting reads.
std::vector<int64_t> broadcast_offsets(const Shape& in, const Shape& out);
// The same offsets for the elements [first, first + offsets.size()) of `out` alone.
void broadcast_offsets_from(const Shape& in, const Shape& out, int64_t first, std::span<int64_t> offsets);

// A range of a tensor's elements as the kernels compute them (double for floats, int64 for
// integers; Tensor::read_doubles and read_ints), and back: one name for both, for kernels written
// once over the two.
inline void read_range(const Tensor& t, int64_t first, std::span<double> v) { t.read_doubles(first, v); }
inline void read_range(const Tensor& t, int64_t first, std::span<int64_t> v) { t.read_ints(first, v); }
inline void write_range(Tensor& t, int64_t first, std::span<const double> v) { t.write_doubles(first, v); }
inline void write_range(Tensor& t, int64_t first, std::span<const int64_t> v) { t.write_ints(first, v); }

// Element-wise work over n elements in pieces: calls fn(first, count) for consecutive pieces of at
// most `piece` elements (or rows) covering [0, n), each exactly once, on the machine's cores when
// there are several pieces (a kernel's temporaries stay a piece long, in cache, where whole-tensor
// vectors of doubles and offsets took several times the tensor's memory; inside a parallel_for,
// on its thread alone). fn must be safe to call from several threads at once on distinct pieces.
inline constexpr int64_t kElementChunk = 16384;
void for_element_chunks(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t piece = kElementChunk);
// The same over `rows` rows of `row_length` elements: pieces of about kElementChunk elements.
inline void for_row_chunks(int64_t rows, int64_t row_length, const std::function<void(int64_t, int64_t)>& fn) {
  for_element_chunks(rows, fn, std::max<int64_t>(1, kElementChunk / std::max<int64_t>(1, row_length)));
}

// Calls f(offset_of_outer, offset_of_inner) for the split of `shape` at `axis`: outer = product of
// dims before axis, inner = product after; the reduced axis has extent shape[axis] and stride inner.
struct AxisSplit {
  int64_t outer = 1;
  int64_t extent = 1;
  int64_t inner = 1;
};
AxisSplit split_at(const Shape& shape, int64_t axis);

}  // namespace fusetune::reference

namespace fusetune::reference {

// The sliding-window geometry of Conv and pooling over the spatial dims of one image: for each
// output position p and kernel tap t, offset[p * taps + t] is the row-major offset of the input
// element the tap reads, kPadTap if it falls in the padding, kOutsideTap if it falls beyond the
// padding (a ceil-mode overhang).
inline constexpr int64_t kPadTap = -1;
inline constexpr int64_t kOutsideTap = -2;
struct WindowTable {
  int64_t positions = 0;
  int64_t taps = 0;
  std::vector<int64_t> offset;
};
WindowTable window_table(const Shape& in_spatial, const Shape& out_spatial, const std::vector<int64_t>& kernel,
                         const std::vector<int64_t>& strides, const std::vector<int64_t>& dilations,
                         const std::vector<int64_t>& pads);

}  // namespace fusetune::reference
