#include "codegen/stages/resize.h"

#include <cstdio>

#include "codegen/scalar_ops.h"
#include "core/error.h"

namespace fusetune::codegen::stages {

namespace {

std::string dbl(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  std::string s = buf;
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return "(" + s + ")";
}

}  // namespace

std::string resize_expr(LoweringContext& cx, const Node& n, const std::vector<std::string>& idx) {
  const int x = n.inputs[0];
  const Shape& in = cx.g.value(x).shape;
  const Shape& out = cx.g.value(n.outputs[0]).shape;
  const auto scales = n.attrs.floats("scales");
  const auto roi = n.attrs.floats("roi", {});
  const std::string coord = n.attrs.s("coordinate_transformation_mode", "half_pixel");
  const std::string nearest = n.attrs.s("nearest_mode", "round_prefer_floor");
  const bool linear = n.attrs.s("mode", "nearest") == "linear";
  const size_t r = in.size();
  const std::string id = std::to_string(cx.next_local());
  std::vector<std::string> i0(r), i1(r), w1(r);
  std::vector<size_t> blended;
  std::string outside = "0";
  for (size_t d = 0; d < r; ++d) {
    const bool crop = coord == "tf_crop_and_resize";
    if (in[d] == out[d] && scales[d] == 1.0f && !crop) {
      i0[d] = idx[d];
      continue;
    }
    const double scale = scales[d];
    const double len = static_cast<double>(in[d]);
    const double resized = len * scale;
    const std::string o = "((double)" + idx[d] + ")";
    std::string c;
    if (coord == "half_pixel") c = "(" + o + " + 0.5) / " + dbl(scale) + " - 0.5";
    if (coord == "half_pixel_symmetric") {
      const double offset = len / 2 * (1 - static_cast<double>(out[d]) / resized);
      c = dbl(offset) + " + (" + o + " + 0.5) / " + dbl(scale) + " - 0.5";
    }
    if (coord == "pytorch_half_pixel") c = resized > 1 ? "(" + o + " + 0.5) / " + dbl(scale) + " - 0.5" : "0.0";
    if (coord == "tf_half_pixel_for_nn") c = "(" + o + " + 0.5) / " + dbl(scale);
    if (coord == "align_corners") c = resized == 1 ? "0.0" : o + " * " + dbl(len - 1) + " / " + dbl(resized - 1);
    if (coord == "asymmetric") c = o + " / " + dbl(scale);
    if (crop) {
      const double rs = roi.size() == 2 * r ? roi[d] : 0.0, re = roi.size() == 2 * r ? roi[d + r] : 1.0;
      c = resized > 1 ? dbl(rs * (len - 1)) + " + " + o + " * " + dbl((re - rs) * (len - 1)) + " / " + dbl(resized - 1)
                      : dbl(0.5 * (rs + re) * (len - 1));
    }
    check(!c.empty(), "unsupported coordinate_transformation_mode '", coord, "'");
    const std::string cv = "ft_c" + id + "_" + std::to_string(d);
    cx.cur().push_back(let("double", cv, c));
    if (crop) outside += " || " + cv + " < 0.0 || " + cv + " > " + dbl(len - 1);
    if (linear) {
      const std::string cc = "ft_cc" + id + "_" + std::to_string(d);
      cx.cur().push_back(let("double", cc, "fmin(fmax(" + cv + ", 0.0), " + dbl(len - 1) + ")"));
      i0[d] = "ft_i" + id + "_" + std::to_string(d);
      cx.cur().push_back(let("long long", i0[d], "(long long)floor(" + cc + ")"));
      i1[d] = "ft_min(" + i0[d] + " + 1, " + lit(in[d] - 1) + ")";
      w1[d] = "(float)(" + cc + " - (double)" + i0[d] + ")";
      blended.push_back(d);
    } else {
      std::string ni;
      if (nearest == "floor") ni = "floor(" + cv + ")";
      if (nearest == "ceil") ni = "ceil(" + cv + ")";
      if (nearest == "round_prefer_floor") ni = "(" + cv + " - floor(" + cv + ") == 0.5 ? floor(" + cv + ") : round(" + cv + "))";
      if (nearest == "round_prefer_ceil") ni = "(" + cv + " - floor(" + cv + ") == 0.5 ? floor(" + cv + ") + 1.0 : round(" + cv + "))";
      check(!ni.empty(), "unsupported nearest_mode '", nearest, "'");
      i0[d] = "ft_min(" + lit(in[d] - 1) + ", ft_max(0, (long long)" + ni + "))";
    }
  }
  std::string result;
  if (!linear) {
    result = cx.value(x, i0);
  } else {
    for (int corner = 0; corner < (1 << blended.size()); ++corner) {
      std::vector<std::string> ci = i0;
      std::string w = "1.0f";
      for (size_t b = 0; b < blended.size(); ++b) {
        const size_t d = blended[b];
        const bool hi = (corner >> b) & 1;
        ci[d] = hi ? i1[d] : i0[d];
        w += " * " + (hi ? w1[d] : "(1.0f - " + w1[d] + ")");
      }
      result += (result.empty() ? "" : " + ") + ("(" + w + ") * " + cx.value(x, ci));
    }
  }
  if (outside == "0") return result;
  return "((" + outside + ") ? " + float_literal(n.attrs.f("extrapolation_value", 0.0f)) + " : (" + result + "))";
}

}  // namespace fusetune::codegen::stages
