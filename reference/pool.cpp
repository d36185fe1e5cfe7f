// Reference pooling: MaxPool and AveragePool over N-d windows (dilations, pads, ceil mode,
// count_include_pad as in PyTorch: padded taps count, taps past the padding never do).
#include <cmath>
#include <vector>

#include "core/error.h"
#include "reference/kernel_util.h"
#include "reference/kernels.h"

namespace fusetune::reference {

void run_pooling(const Node& node, std::span<const Tensor* const> in, Tensor& out) {
  const Tensor& x = *in[0];
  const Shape& xs = x.shape();
  const size_t sp = xs.size() - 2;
  const Shape in_sp(xs.begin() + 2, xs.end());
  const Shape out_sp(out.shape().begin() + 2, out.shape().end());
  const WindowTable win = window_table(in_sp, out_sp, node.attrs.ints("kernel_shape"),
                                       node.attrs.ints("strides", std::vector<int64_t>(sp, 1)),
                                       node.attrs.ints("dilations", std::vector<int64_t>(sp, 1)),
                                       node.attrs.ints("pads", std::vector<int64_t>(2 * sp, 0)));
  const bool is_max = node.op == "MaxPool";
  const bool include_pad = node.attrs.i("count_include_pad", 0) != 0;
  const int64_t planes = xs[0] * xs[1];
  const int64_t in_plane = numel(in_sp);
  const std::vector<double> xv = x.to_doubles();
  std::vector<double> result(static_cast<size_t>(out.numel()));
  for (int64_t pl = 0; pl < planes; ++pl) {
    const double* plane = xv.data() + pl * in_plane;
    for (int64_t p = 0; p < win.positions; ++p) {
      const int64_t* offs = win.offset.data() + p * win.taps;
      double acc = is_max ? -INFINITY : 0.0;
      int64_t count = 0;
      for (int64_t t = 0; t < win.taps; ++t) {
        if (offs[t] >= 0) {
          const double v = plane[offs[t]];
          acc = is_max ? (std::isnan(v) || std::isnan(acc) ? NAN : std::max(acc, v)) : acc + v;
          ++count;
        } else if (offs[t] == kPadTap && include_pad) {
          ++count;
        }
      }
      result[static_cast<size_t>(pl * win.positions + p)] = is_max ? acc : (count ? acc / static_cast<double>(count) : 0.0);
    }
  }
  out.set_doubles(result);
}

}  // namespace fusetune::reference
