#include "importer/lower_deform_conv.h"

#include "core/error.h"

namespace fusetune::importer {

void deform_conv(NodeLowering& L) {
  const Shape xs = L.shape(0), ws = L.shape(1), os = L.shape(2);
  check(xs.size() == 4 && ws.size() == 4 && os.size() == 4, "only 2-D deformable convolutions are supported: X ", shape_str(xs),
        ", W ", shape_str(ws), ", offset ", shape_str(os));
  const int64_t n = xs[0], channels = xs[1], height = xs[2], width = xs[3], out_channels = ws[0];
  const int64_t group = L.attr_i("group", 1), offset_group = L.attr_i("offset_group", 1);
  const std::vector<int64_t> kernel = L.attr_ints("kernel_shape", {ws[2], ws[3]});
  const std::vector<int64_t> strides = L.attr_ints("strides", {1, 1}), dilations = L.attr_ints("dilations", {1, 1});
  const std::vector<int64_t> pads = L.attr_ints("pads", {0, 0, 0, 0});
  check(kernel.size() == 2 && strides.size() == 2 && dilations.size() == 2 && pads.size() == 4,
        "kernel_shape, strides and dilations need 2 entries and pads 4");
  check(kernel[0] == ws[2] && kernel[1] == ws[3], "kernel_shape ", shape_str(kernel), " is not W's ", ws[2], "x", ws[3]);
  check(group > 0 && offset_group > 0 && channels == ws[1] * group && out_channels % group == 0 && channels % offset_group == 0,
        "X's ", channels, " channels, W ", shape_str(ws), ", group ", group, " and offset_group ", offset_group, " disagree");
  const int64_t taps = kernel[0] * kernel[1], oh = os[2], ow = os[3], points = oh * ow;
  check(os[0] == n && os[1] == offset_group * taps * 2, "offset ", shape_str(os), " is not [N, offset_group x kH x kW x 2, OH, OW] = [",
        n, ", ", offset_group * taps * 2, ", OH, OW]");
  for (size_t d = 0; d < 2; ++d) {
    const int64_t span = (kernel[d] - 1) * dilations[d] + 1;
    const int64_t extent = (xs[d + 2] + pads[d] + pads[d + 2] - span) / strides[d] + 1;
    check(strides[d] > 0 && dilations[d] > 0 && extent == os[d + 2], "the offsets' output extent ", os[d + 2], " along axis ", d + 2,
          " is not the convolution's ", extent);
  }
  const bool masked = L.has_input(4);
  if (masked) {
    check(L.shape(4) == Shape{n, offset_group * taps, oh, ow}, "mask ", shape_str(L.shape(4)), " is not [N, offset_group x kH x kW, OH, OW]");
  }
  const auto c = [&](double v) { return L.constant(Tensor::scalar_float(DType::kF32, static_cast<float>(v))); };
  const auto op = [&](const char* name, int a, int b) { return L.emit(name, {a, b}); };
  // The sample points: [N, G, taps, points] per axis, the convolution's position plus the offset.
  const int offsets = L.reshape(cast_to(L, L.input(2), DType::kF32), {n, offset_group, taps, 2 * points});
  const auto coordinate = [&](size_t axis) {
    std::vector<float> at(static_cast<size_t>(taps * points));
    for (int64_t k = 0; k < taps; ++k) {
      const int64_t tap = axis == 0 ? k / kernel[1] : k % kernel[1];
      for (int64_t p = 0; p < points; ++p) {
        const int64_t out = axis == 0 ? p / ow : p % ow;
        at[static_cast<size_t>(k * points + p)] =
            static_cast<float>(out * strides[axis] - pads[axis] + tap * dilations[axis]);
      }
    }
    const auto begin = static_cast<int64_t>(axis) * points;
    return op("Add", L.constant(Tensor::from_floats(DType::kF32, {1, 1, taps, points}, at)),
              slice_last_axis(L, offsets, begin, begin + points));
  };
  // One axis's two neighbours of each point: index (int64, kept inside), weight (0 outside).
  struct Neighbour {
    int index = kNoValue, weight = kNoValue;
  };
  const auto neighbours = [&](int x, int64_t extent) {
    const int low = L.emit("Floor", {x});
    const int frac = op("Sub", x, low);
    std::vector<Neighbour> out;
    for (int k = 0; k < 2; ++k) {
      const int at = k == 0 ? low : op("Add", low, c(1.0));
      const int inside = L.emit("And", {op("GreaterOrEqual", at, c(0.0)), op("LessOrEqual", at, c(static_cast<double>(extent - 1)))});
      const int weight = k == 0 ? op("Sub", c(1.0), frac) : frac;
      out.push_back({cast_to(L, clip_between(L, at, 0, static_cast<double>(extent - 1)), DType::kI64),
                     L.emit("Where", {inside, weight, c(0.0)})});
    }
    return out;
  };
  const std::vector<Neighbour> ys = neighbours(coordinate(0), height), xs_ = neighbours(coordinate(1), width);
  // Each channel's plane in X flattened, [N, G, C / G, 1, 1]; a point's neighbour [N, G, 1, taps, points].
  const int64_t per_group = channels / offset_group;
  std::vector<int64_t> planes(static_cast<size_t>(n * channels));
  for (int64_t k = 0; k < n * channels; ++k) planes[static_cast<size_t>(k)] = k * height * width;
  const int base = L.constant(Tensor::from_ints(DType::kI64, {n, offset_group, per_group, 1, 1}, planes));
  const int flat = L.reshape(cast_to(L, L.input(0), DType::kF32), {numel(xs)});
  const int row = L.constant(Tensor::scalar_int(DType::kI64, width));
  Attributes gather;
  gather.set("axis", int64_t{0});
  const Shape spread = {n, offset_group, 1, taps, points};
  int sampled = kNoValue;
  for (const Neighbour& y : ys) {
    for (const Neighbour& x : xs_) {
      const int index = op("Add", base, L.reshape(op("Add", op("Mul", y.index, row), x.index), spread));
      const int term = op("Mul", L.emit("Gather", {flat, index}, gather), L.reshape(op("Mul", y.weight, x.weight), spread));
      sampled = sampled == kNoValue ? term : op("Add", sampled, term);
    }
  }
  if (masked) sampled = op("Mul", sampled, L.reshape(cast_to(L, L.input(4), DType::kF32), spread));
  // The columns [N, group, C / group x taps, points] against W [group, OC / group, C / group x taps].
  const int64_t in_per_group = channels / group, out_per_group = out_channels / group;
  const int columns = L.reshape(sampled, {n, group, in_per_group * taps, points});
  const int weights = L.reshape(cast_to(L, L.input(1), DType::kF32), {group, out_per_group, in_per_group * taps});
  int y = L.reshape(L.emit("MatMul", {weights, columns}), {n, out_channels, oh, ow});
  if (L.has_input(3)) y = op("Add", y, L.reshape(cast_to(L, L.input(3), DType::kF32), {1, out_channels, 1, 1}));
  L.set_output(0, cast_to(L, y, L.val(0).dtype));
}

}  // namespace fusetune::importer
