#include "importer/lower_roi_align.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace fusetune::importer {

namespace {

// The bin grid of sampling_ratio 0: ceil(extent / bins) of each ROI, which must agree over the ROIs.
int64_t common_grid(const std::vector<float>& rois, int64_t count, size_t lo, size_t hi, double scale, double offset,
                    bool half_pixel, int64_t bins, const char* axis) {
  int64_t grid = -1;
  for (int64_t r = 0; r < count; ++r) {
    const auto at = static_cast<size_t>(r * 4);
    double extent = (static_cast<double>(rois[at + hi]) * scale - offset) - (static_cast<double>(rois[at + lo]) * scale - offset);
    if (!half_pixel) extent = std::max(extent, 1.0);
    const auto g = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(extent / static_cast<double>(bins))));
    check(grid < 0 || g == grid, "sampling_ratio 0: ROI ", r, " samples its bins on a ", axis, " grid of ", g, " where ROI 0 takes ",
          grid, "; give sampling_ratio");
    grid = g;
  }
  return std::max<int64_t>(grid, 1);
}

}  // namespace

void roi_align(NodeLowering& L) {
  const Shape xs = L.shape(0), rs = L.shape(1);
  check(xs.size() == 4, "X must be [N, C, H, W], got ", shape_str(xs));
  check(rs.size() == 2 && rs[1] == 4, "rois must be [num_rois, 4], got ", shape_str(rs));
  check(L.shape(2) == Shape{rs[0]}, "batch_indices must hold one index per ROI (", rs[0], "), got shape ", shape_str(L.shape(2)));
  const std::string ctm = L.opset() >= 16 ? L.attr_s("coordinate_transformation_mode", "half_pixel") : "output_half_pixel";
  check(ctm == "half_pixel" || ctm == "output_half_pixel", "coordinate_transformation_mode '", ctm,
        "' is not one of half_pixel, output_half_pixel");
  const std::string mode = L.attr_s("mode", "avg");
  check(mode == "avg" || mode == "max", "mode '", mode, "' is not one of avg, max");
  const int64_t ph = L.attr_i("output_height", 1), pw = L.attr_i("output_width", 1), ratio = L.attr_i("sampling_ratio", 0);
  check(ph > 0 && pw > 0 && ratio >= 0, "output_height and output_width must be positive and sampling_ratio not negative");
  const double scale = L.attr_f("spatial_scale", 1.0f);
  const bool half_pixel = ctm == "half_pixel";
  const double offset = half_pixel ? 0.5 : 0.0;
  const int64_t rois = rs[0], channels = xs[1], height = xs[2], width = xs[3];
  int64_t gh = ratio, gw = ratio;
  if (ratio == 0) {
    std::vector<float> values;
    try {
      values = L.const_floats(1, "rois");
    } catch (const Error&) {
      fail("sampling_ratio 0 samples each ROI by its size, so the ROIs must be constant; give sampling_ratio");
    }
    gh = common_grid(values, rois, 1, 3, scale, offset, half_pixel, ph, "vertical");
    gw = common_grid(values, rois, 0, 2, scale, offset, half_pixel, pw, "horizontal");
  }
  check(rois * channels * ph * gh * pw * gw <= kMaxElements, "RoiAlign samples too many points");

  const auto c = [&](double v) { return L.constant(Tensor::scalar_float(DType::kF32, static_cast<float>(v))); };
  const auto op = [&](const char* name, int a, int b) { return L.emit(name, {a, b}); };
  const int box = cast_to(L, L.input(1), DType::kF32);
  const auto coordinate = [&](int64_t k) {  // rois[:, k] x scale - offset, as [R, 1]
    return op("Sub", op("Mul", L.reshape(slice_last_axis(L, box, k, k + 1), {rois, 1}), c(scale)), c(offset));
  };
  // The sample points along one axis, [R, bins x grid] (bin-major), clamped and split into the
  // low neighbour (int64), the high one and the fraction towards it; and whether each lies within
  // a pixel of the map.
  struct Axis {
    int low = kNoValue, high = kNoValue, frac = kNoValue, valid = kNoValue;
  };
  const auto axis = [&](int64_t lo, int64_t hi, int64_t bins, int64_t grid, int64_t extent) {
    int size = op("Sub", coordinate(hi), coordinate(lo));
    if (!half_pixel) size = L.emit("Max", {size, c(1.0)});
    const int bin = op("Div", size, c(static_cast<double>(bins)));
    std::vector<float> at(static_cast<size_t>(bins * grid));  // bin index + (sample + 0.5) / grid
    for (int64_t b = 0; b < bins; ++b) {
      for (int64_t s = 0; s < grid; ++s) {
        at[static_cast<size_t>(b * grid + s)] = static_cast<float>(static_cast<double>(b) + (static_cast<double>(s) + 0.5) / static_cast<double>(grid));
      }
    }
    const int p = op("Add", coordinate(lo), op("Mul", L.constant(Tensor::from_floats(DType::kF32, {1, bins * grid}, at)), bin));
    const auto e = static_cast<double>(extent);
    Axis a;
    a.valid = L.emit("And", {op("GreaterOrEqual", p, c(-1.0)), op("LessOrEqual", p, c(e))});
    const int clamped = L.emit("Max", {p, c(0.0)});
    const int floor = L.emit("Floor", {clamped});
    const int last = op("GreaterOrEqual", floor, c(e - 1));
    const int low = L.emit("Where", {last, c(e - 1), floor});
    a.low = cast_to(L, low, DType::kI64);
    a.high = cast_to(L, L.emit("Where", {last, c(e - 1), op("Add", floor, c(1.0))}), DType::kI64);
    a.frac = L.emit("Where", {last, c(0.0), op("Sub", clamped, floor)});
    return a;
  };
  const Axis y = axis(1, 3, ph, gh, height), x = axis(0, 2, pw, gw, width);
  const int64_t rows = ph * gh, cols = pw * gw;
  // [R, rows, 1] against [R, 1, cols]: every point of the ROI.
  const auto down = [&](int v) { return L.reshape(v, {rois, rows, 1}); };
  const auto across = [&](int v) { return L.reshape(v, {rois, 1, cols}); };
  const int valid = cast_to(L, L.emit("And", {down(y.valid), across(x.valid)}), DType::kF32);
  const int ly = down(y.frac), lx = across(x.frac);
  const int hy = op("Sub", c(1.0), ly), hx = op("Sub", c(1.0), lx);
  // Each ROI's channel planes in X flattened: (batch_indices[r] x C + c) x H x W, as [R, C, 1, 1].
  std::vector<int64_t> planes(static_cast<size_t>(channels));
  for (int64_t k = 0; k < channels; ++k) planes[static_cast<size_t>(k)] = k * height * width;
  const int batch = L.reshape(cast_to(L, L.input(2), DType::kI64), {rois, 1, 1, 1});
  const int base = op("Add", op("Mul", batch, L.constant(Tensor::scalar_int(DType::kI64, channels * height * width))),
                      L.constant(Tensor::from_ints(DType::kI64, {1, channels, 1, 1}, planes)));
  const int flat = L.reshape(cast_to(L, L.input(0), DType::kF32), {numel(xs)});
  Attributes gather;
  gather.set("axis", int64_t{0});
  const int row_stride = L.constant(Tensor::scalar_int(DType::kI64, width));
  const auto neighbour = [&](int row, int col, int weight) {  // weight x X at (row, col) of each point, [R, C, rows, cols]
    const int at = op("Add", op("Mul", down(row), row_stride), across(col));
    const int index = op("Add", base, L.reshape(at, {rois, 1, rows, cols}));
    const int value = L.emit("Gather", {flat, index}, gather);
    return op("Mul", value, L.reshape(op("Mul", weight, valid), {rois, 1, rows, cols}));
  };
  const int t1 = neighbour(y.low, x.low, op("Mul", hy, hx)), t2 = neighbour(y.low, x.high, op("Mul", hy, lx));
  const int t3 = neighbour(y.high, x.low, op("Mul", ly, hx)), t4 = neighbour(y.high, x.high, op("Mul", ly, lx));
  int pooled;
  if (mode == "avg") {
    const int sum = op("Add", op("Add", t1, t2), op("Add", t3, t4));
    pooled = op("Div", reduce_node(L, "ReduceSum", L.reshape(sum, {rois, channels, ph, gh, pw, gw}), {3, 5}, 0),
                c(static_cast<double>(gh * gw)));
  } else {
    const int best = L.emit("Max", {L.emit("Max", {t1, t2}), L.emit("Max", {t3, t4})});
    pooled = reduce_node(L, "ReduceMax", L.reshape(best, {rois, channels, ph, gh, pw, gw}), {3, 5}, 0);
  }
  L.set_output(0, cast_to(L, pooled, L.val(0).dtype));
}

}  // namespace fusetune::importer
