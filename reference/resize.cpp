// Reference Resize (ONNX semantics, opsets 11-17): nearest and N-linear modes, every coordinate
// transformation mode of those opsets. Scales and output sizes arrive resolved as attributes.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "reference/kernels.h"

namespace fusetune::reference {

namespace {

// Maps an output coordinate to the input coordinate it samples. As in ONNX, the resized length in
// the formulas is in_len * scale, which is not an integer when the scales were given.
double source_coord(const std::string& mode, double x, double scale, int64_t in_len, int64_t out_len, double roi_start,
                    double roi_end) {
  const double in = static_cast<double>(in_len);
  const double resized = in * scale;
  if (mode == "half_pixel") return (x + 0.5) / scale - 0.5;
  if (mode == "half_pixel_symmetric") {  // opset 19: half_pixel, centred when the output length was rounded
    const double offset = in / 2 * (1 - static_cast<double>(out_len) / resized);
    return offset + (x + 0.5) / scale - 0.5;
  }
  if (mode == "pytorch_half_pixel") return resized > 1 ? (x + 0.5) / scale - 0.5 : 0.0;
  if (mode == "tf_half_pixel_for_nn") return (x + 0.5) / scale;
  if (mode == "align_corners") return resized == 1 ? 0.0 : x * (in - 1) / (resized - 1);
  if (mode == "asymmetric") return x / scale;
  if (mode == "tf_crop_and_resize") {
    return resized > 1 ? roi_start * (in - 1) + x * (roi_end - roi_start) * (in - 1) / (resized - 1)
                       : 0.5 * (roi_start + roi_end) * (in - 1);
  }
  fail("unsupported coordinate_transformation_mode '", mode, "'");
}

int64_t nearest_index(const std::string& mode, double x) {
  if (mode == "floor") return static_cast<int64_t>(std::floor(x));
  if (mode == "ceil") return static_cast<int64_t>(std::ceil(x));
  const double fl = std::floor(x);
  if (x - fl == 0.5) return static_cast<int64_t>(mode == "round_prefer_ceil" ? fl + 1 : fl);
  if (mode == "round_prefer_floor" || mode == "round_prefer_ceil") return static_cast<int64_t>(std::round(x));
  fail("unsupported nearest_mode '", mode, "'");
}

struct Tap {
  int64_t index[2];
  double weight[2];
  bool outside;  // beyond the input in tf_crop_and_resize: the extrapolation value is used
};

}  // namespace

void run_resize(const Node& node, const Tensor& x, Tensor& out) {
  const Shape& in = x.shape();
  const Shape& os = out.shape();
  const size_t r = in.size();
  const auto scales = node.attrs.floats("scales");
  const auto roi = node.attrs.floats("roi", {});
  const std::string coord = node.attrs.s("coordinate_transformation_mode", "half_pixel");
  const std::string nearest = node.attrs.s("nearest_mode", "round_prefer_floor");
  const bool linear = node.attrs.s("mode", "nearest") == "linear";
  const double extrapolation = node.attrs.f("extrapolation_value", 0.0f);
  std::vector<std::vector<Tap>> taps(r);
  for (size_t d = 0; d < r; ++d) {
    const double rs = roi.size() == 2 * r ? roi[d] : 0.0;
    const double re = roi.size() == 2 * r ? roi[d + r] : 1.0;
    for (int64_t o = 0; o < os[d]; ++o) {
      const double c_raw = source_coord(coord, static_cast<double>(o), scales[d], in[d], os[d], rs, re);
      check(!std::isnan(c_raw), "axis ", d, ": the sampling coordinate of output ", o,
            " is not a number (roi or scales out of range)");
      // Indices are clamped to the input below anyway; clamping the coordinate first keeps huge
      // values (from an extreme roi or scale) out of the conversions to int64.
      const double c = std::clamp(c_raw, -1.0, static_cast<double>(in[d]));
      Tap t{{0, 0}, {1.0, 0.0}, false};
      if (coord == "tf_crop_and_resize" && (c < 0 || c > static_cast<double>(in[d] - 1))) t.outside = true;
      if (linear) {
        const double cc = std::min(std::max(c, 0.0), static_cast<double>(in[d] - 1));
        const int64_t i0 = static_cast<int64_t>(std::floor(cc));
        const int64_t i1 = std::min(i0 + 1, in[d] - 1);
        t.index[0] = i0;
        t.index[1] = i1;
        t.weight[1] = cc - static_cast<double>(i0);
        t.weight[0] = 1.0 - t.weight[1];
      } else {
        t.index[0] = std::min(std::max<int64_t>(nearest_index(nearest, c), 0), in[d] - 1);
      }
      taps[d].push_back(t);
    }
  }
  const std::vector<double> xv = x.to_doubles();
  const std::vector<int64_t> in_strides = strides_of(in);
  std::vector<double> result(static_cast<size_t>(out.numel()));
  std::vector<int64_t> idx(r, 0);
  const int corners = linear ? (1 << r) : 1;
  for (size_t k = 0; k < result.size(); ++k) {
    bool outside = false;
    for (size_t d = 0; d < r; ++d) outside = outside || taps[d][static_cast<size_t>(idx[d])].outside;
    double acc = 0;
    if (outside) {
      acc = extrapolation;
    } else {
      for (int corner = 0; corner < corners; ++corner) {
        double w = 1;
        int64_t off = 0;
        for (size_t d = 0; d < r; ++d) {
          const Tap& t = taps[d][static_cast<size_t>(idx[d])];
          const int bit = (corner >> d) & 1;
          w *= t.weight[bit];
          off += t.index[bit] * in_strides[d];
        }
        if (w != 0) acc += w * xv[static_cast<size_t>(off)];
      }
    }
    result[k] = acc;
    for (size_t d = r; d-- > 0;) {
      if (++idx[d] < os[d]) break;
      idx[d] = 0;
    }
  }
  out.set_doubles(result);
}

}  // namespace fusetune::reference
