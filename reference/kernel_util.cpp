#include "reference/kernel_util.h"

#include <algorithm>

#include "core/parallel.h"

namespace fusetune::reference {

std::vector<int64_t> broadcast_offsets(const Shape& in, const Shape& out) {
  std::vector<int64_t> offsets(static_cast<size_t>(numel(out)));
  broadcast_offsets_from(in, out, 0, offsets);
  return offsets;
}

void broadcast_offsets_from(const Shape& in, const Shape& out, int64_t first, std::span<int64_t> offsets) {
  const size_t r = out.size();
  std::vector<int64_t> in_strides(r, 0);  // aligned to the output's rank; 0 where broadcast
  const std::vector<int64_t> s = strides_of(in);
  for (size_t i = 0; i < in.size(); ++i) {
    const size_t d = r - in.size() + i;
    in_strides[d] = in[i] == 1 ? 0 : s[i];
  }
  std::vector<int64_t> idx(r, 0);  // the index of element `first`, and its offset
  int64_t off = 0;
  for (size_t d = r, rest = static_cast<size_t>(first); d-- > 0;) {
    const auto extent = static_cast<size_t>(out[d]);
    idx[d] = static_cast<int64_t>(rest % extent);
    rest /= extent;
    off += idx[d] * in_strides[d];
  }
  for (int64_t& o : offsets) {
    o = off;
    for (size_t d = r; d-- > 0;) {  // odometer increment
      if (++idx[d] < out[d]) {
        off += in_strides[d];
        break;
      }
      off -= in_strides[d] * (out[d] - 1);
      idx[d] = 0;
    }
  }
}

void for_element_chunks(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t piece) {
  const int64_t pieces = (n + piece - 1) / piece;
  const auto run = [&](size_t p) {
    const int64_t first = static_cast<int64_t>(p) * piece;
    fn(first, std::min(piece, n - first));
  };
  if (pieces <= 1) {
    if (n > 0) run(0);
    return;
  }
  parallel_for(static_cast<size_t>(pieces), run, inside_parallel_for() ? 1 : 0);
}

AxisSplit split_at(const Shape& shape, int64_t axis) {
  AxisSplit s;
  for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d) {
    if (d < axis) s.outer *= shape[static_cast<size_t>(d)];
    if (d == axis) s.extent = shape[static_cast<size_t>(d)];
    if (d > axis) s.inner *= shape[static_cast<size_t>(d)];
  }
  return s;
}

}  // namespace fusetune::reference

namespace fusetune::reference {

WindowTable window_table(const Shape& in_spatial, const Shape& out_spatial, const std::vector<int64_t>& kernel,
                         const std::vector<int64_t>& strides, const std::vector<int64_t>& dilations,
                         const std::vector<int64_t>& pads) {
  const size_t sp = in_spatial.size();
  WindowTable t;
  t.positions = numel(out_spatial);
  t.taps = numel(Shape(kernel.begin(), kernel.end()));
  t.offset.resize(static_cast<size_t>(t.positions * t.taps));
  const std::vector<int64_t> in_strides = strides_of(in_spatial);
  std::vector<int64_t> o(sp, 0);
  for (int64_t p = 0; p < t.positions; ++p) {
    std::vector<int64_t> k(sp, 0);
    for (int64_t tap = 0; tap < t.taps; ++tap) {
      int64_t off = 0;
      int64_t status = 0;
      for (size_t d = 0; d < sp; ++d) {
        const int64_t c = o[d] * strides[d] - pads[d] + k[d] * dilations[d];
        if (c < -pads[d] || c >= in_spatial[d] + pads[d + sp]) {
          status = kOutsideTap;
        } else if ((c < 0 || c >= in_spatial[d]) && status == 0) {
          status = kPadTap;
        }
        off += c * in_strides[d];
      }
      t.offset[static_cast<size_t>(p * t.taps + tap)] = status != 0 ? status : off;
      for (size_t d = sp; d-- > 0;) {
        if (++k[d] < kernel[d]) break;
        k[d] = 0;
      }
    }
    for (size_t d = sp; d-- > 0;) {
      if (++o[d] < out_spatial[d]) break;
      o[d] = 0;
    }
  }
  return t;
}

}  // namespace fusetune::reference
