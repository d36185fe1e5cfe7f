#include "simt/tensor_copy.h"

#include <algorithm>
#include <cstring>

namespace fusetune::simt {

int64_t box_bytes(const ft_simt_tensor_map& map) {
  int64_t n = map.strides[0];
  for (int d = 0; d < map.rank; ++d) n *= map.box[d];
  return n;
}

uint64_t swizzled(uint64_t offset, int swizzle) {
  const int bits = swizzle == 128 ? 3 : swizzle == 64 ? 2 : swizzle == 32 ? 1 : 0;
  const uint64_t mask = (uint64_t{1} << bits) - 1;
  return offset ^ (((offset >> 7) & mask) << 4);
}

std::vector<unsigned char> gather_box(const ft_simt_tensor_map& map, const int* coords, const unsigned char* source,
                                      int64_t source_bytes, const std::function<void(const SourceRun&)>& run,
                                      const std::function<void(const SourceRun&)>& outside) {
  const int64_t eb = map.strides[0];
  std::vector<unsigned char> out(static_cast<size_t>(box_bytes(map)), 0);
  int64_t rows = 1;  // the box's innermost runs: one per index of its outer dimensions
  for (int d = 1; d < map.rank; ++d) rows *= map.box[d];
  const int64_t row_bytes = map.box[0] * eb;
  for (int64_t r = 0; r < rows; ++r) {
    int64_t at = 0, rest = r;
    bool inside = true;
    for (int d = 1; d < map.rank; ++d) {
      const int64_t c = coords[d] + rest % map.box[d];
      rest /= map.box[d];
      inside = inside && c >= 0 && c < map.dims[d];
      at += c * map.strides[d];
    }
    if (!inside) continue;
    // The run's elements inside dimension 0: [lo, hi) of the box's.
    const int64_t lo = std::max<int64_t>(0, -static_cast<int64_t>(coords[0]));
    const int64_t hi = std::min<int64_t>(map.box[0], map.dims[0] - coords[0]);
    if (hi <= lo) continue;
    const SourceRun s{at + (coords[0] + lo) * eb, (hi - lo) * eb};
    if (s.offset < 0 || s.offset + s.bytes > source_bytes) {
      outside(s);
      continue;
    }
    run(s);
    std::memcpy(out.data() + r * row_bytes + lo * eb, source + s.offset, static_cast<size_t>(s.bytes));
  }
  return out;
}

}  // namespace fusetune::simt
