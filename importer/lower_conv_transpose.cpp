#include "importer/lower_conv_transpose.h"

#include <algorithm>
#include <limits>
#include <optional>

#include "core/error.h"
#include "core/integer.h"

namespace fusetune::importer {

namespace {

// The node's shapes and attributes, checked, with the pads resolved and the output's extents.
struct Geometry {
  size_t sp = 0;  // spatial axes
  Shape x, w;
  int64_t group = 1, c_in = 0, c_out = 0;
  std::vector<int64_t> kernel, strides, dil, out_pad, pads, out;
};

Geometry geometry(NodeLowering& L) {
  check(L.rank(0) >= 3, "input must be at least 3-D (N, C, spatial...), got ", shape_str(L.shape(0)));
  Geometry g;
  g.sp = static_cast<size_t>(L.rank(0) - 2);
  const size_t sp = g.sp, r = sp + 2;
  check(L.rank(1) == L.rank(0), "weight of shape ", shape_str(L.shape(1)), " does not match input rank");
  g.x = L.shape(0);
  g.w = L.shape(1);
  g.group = L.attr_i("group", 1);
  g.c_in = g.x[1];
  check(g.group >= 1 && g.c_in % g.group == 0 && g.w[0] == g.c_in, "weight of shape ", shape_str(g.w), " does not take ", g.c_in,
        " input channels in ", g.group, " groups");
  g.c_out = g.w[1] * g.group;
  g.kernel.assign(g.w.begin() + 2, g.w.end());
  if (L.has_attr("kernel_shape")) check(L.attr_ints("kernel_shape") == g.kernel, "kernel_shape disagrees with the weight");
  g.strides = L.attr_ints("strides", std::vector<int64_t>(sp, 1));
  g.dil = L.attr_ints("dilations", std::vector<int64_t>(sp, 1));
  g.out_pad = L.attr_ints("output_padding", std::vector<int64_t>(sp, 0));
  check(g.strides.size() == sp && g.dil.size() == sp && g.out_pad.size() == sp, "strides, dilations and output_padding must have ",
        sp, " entries");
  for (size_t i = 0; i < sp; ++i) {
    check(g.strides[i] >= 1 && g.dil[i] >= 1 && g.kernel[i] >= 1 && g.strides[i] <= kMaxElements && g.dil[i] <= kMaxElements &&
              g.kernel[i] - 1 <= kMaxElements / g.dil[i],
          "kernel ", g.kernel[i], ", stride ", g.strides[i], " and dilation ", g.dil[i], " of spatial axis ", i,
          " must be positive and not absurdly large");
    check(g.out_pad[i] >= 0 && g.out_pad[i] < std::max(g.strides[i], g.dil[i]), "output_padding ", g.out_pad[i],
          " of spatial axis ", i, " must be below its stride or dilation");
  }
  // pads: given, or from output_shape / auto_pad (total = the full output less the one wanted).
  g.pads.assign(2 * sp, 0);
  const std::string auto_pad = L.attr_s("auto_pad", "NOTSET");
  check(auto_pad == "NOTSET" || auto_pad == "VALID" || auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER", "unknown auto_pad '",
        auto_pad, "'");
  if (L.has_attr("output_shape") || auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    std::vector<int64_t> wanted = L.attr_ints("output_shape", {});
    if (wanted.size() == r) wanted.erase(wanted.begin(), wanted.begin() + 2);  // N and C given too
    if (wanted.empty()) {
      for (size_t i = 0; i < sp; ++i) wanted.push_back(g.x[2 + i] * g.strides[i]);
    }
    check(wanted.size() == sp, "output_shape has ", wanted.size(), " entries, expected ", sp);
    for (size_t i = 0; i < sp; ++i) {
      // Negative where output_shape asks more than the transpose makes: the end grows by zeros.
      const int64_t total = g.strides[i] * (g.x[2 + i] - 1) + g.out_pad[i] + (g.kernel[i] - 1) * g.dil[i] + 1 - wanted[i];
      check(wanted[i] >= 1 && wanted[i] <= kMaxElements, "output_shape ", wanted[i], " of spatial axis ", i,
            " must be positive and not absurdly large");
      const int64_t half = total >= 0 ? total / 2 : -((-total + 1) / 2);  // rounded down, as ONNX's reference does
      g.pads[i] = auto_pad == "SAME_UPPER" ? half : total - half;
      g.pads[i + sp] = total - g.pads[i];
    }
  } else if (auto_pad == "NOTSET") {
    g.pads = L.attr_ints("pads", g.pads);
    check(g.pads.size() == 2 * sp, "pads has ", g.pads.size(), " entries, expected ", 2 * sp);
  }
  for (size_t i = 0; i < sp; ++i) {
    g.out.push_back(g.strides[i] * (g.x[2 + i] - 1) + g.out_pad[i] + (g.kernel[i] - 1) * g.dil[i] + 1 - g.pads[i] - g.pads[i + sp]);
    check(g.out.back() >= 1, "pads of spatial axis ", i, " leave no output");
  }
  return g;
}

// W [C_in, C_out/g, k...] as a Conv's weight: [g, C_in/g, C_out/g, k...] -> [g, C_out/g, C_in/g,
// k...] -> [C_out, C_in/g, k...]; its spatial axes not yet reversed.
int swapped_weight(NodeLowering& L, const Geometry& g) {
  Shape grouped = {g.group, g.c_in / g.group, g.w[1]};
  grouped.insert(grouped.end(), g.kernel.begin(), g.kernel.end());
  std::vector<int64_t> perm = {0, 2, 1};
  for (size_t i = 0; i < g.sp; ++i) perm.push_back(static_cast<int64_t>(3 + i));
  Attributes t;
  t.set("perm", perm);
  Shape conv_w = {g.c_out, g.c_in / g.group};
  conv_w.insert(conv_w.end(), g.kernel.begin(), g.kernel.end());
  return L.reshape(L.emit("Transpose", {L.reshape(L.input(1), grouped)}, t), conv_w);
}

// A stride-1 Conv of x by w with these pads and dilations, the bias (if any) added when `bias`.
int conv(NodeLowering& L, const Geometry& g, int x, int w, const std::vector<int64_t>& pads, const std::vector<int64_t>& dil,
         bool bias) {
  Attributes a;
  a.set("strides", std::vector<int64_t>(g.sp, 1));
  a.set("dilations", dil);
  a.set("pads", pads);
  a.set("group", g.group);
  std::vector<int> ins = {x, w};
  if (bias && L.has_input(2)) ins.push_back(L.input(2));
  return L.emit("Conv", ins, a);
}

// One spatial axis of the sub-pixel form. Output o = q x stride + rho - pad_begin (residue rho of
// o + pad_begin) takes taps k = rho, rho + stride, ... (a strided axis is not dilated) from input
// h = q - j, j = (k - rho) / stride; on an unstrided axis, taps k from h = q - k x dilation. The
// residues' offsets share one window of `taps` positions on a grid of `step` (the dilation of an
// unstrided axis, else 1), last offset first; q runs over one range common to the residues.
struct SubPixelAxis {
  int64_t stride = 1, step = 1, taps = 1, qmin = 0, count = 0, pad_begin = 0, pad_end = 0;
  std::vector<int64_t> size;  // per residue: how many taps it has
  // The kernel tap of residue rho at window position u, or -1 where it has none.
  int64_t tap(int64_t rho, int64_t u) const {
    const int64_t j = taps - 1 - u;
    return j < size[static_cast<size_t>(rho)] ? rho + j * stride : -1;
  }
};

// The sub-pixel form's axes, or nullopt where it does not apply: no axis strided, a strided axis
// dilated, a weight known only at run time, or an input cropped away.
std::optional<std::vector<SubPixelAxis>> sub_pixel_plan(NodeLowering& L, const Geometry& g) {
  if (std::all_of(g.strides.begin(), g.strides.end(), [](int64_t s) { return s == 1; }) || !L.val(1).is_constant()) return std::nullopt;
  std::vector<SubPixelAxis> axes(g.sp);
  for (size_t i = 0; i < g.sp; ++i) {
    SubPixelAxis& a = axes[i];
    const int64_t s = g.strides[i], k = g.kernel[i], h = g.x[2 + i], pb = g.pads[i];
    if (s > 1 && g.dil[i] != 1) return std::nullopt;
    a.stride = s;
    a.step = s == 1 ? g.dil[i] : 1;
    int64_t qmax = std::numeric_limits<int64_t>::min();
    a.qmin = std::numeric_limits<int64_t>::max();
    for (int64_t rho = 0; rho < s; ++rho) {
      a.qmin = std::min(a.qmin, -floor_div(rho - pb, s));
      qmax = std::max(qmax, floor_div(g.out[i] - 1 + pb - rho, s));
      a.size.push_back(k > rho ? (k - 1 - rho) / s + 1 : 0);
    }
    a.count = qmax - a.qmin + 1;
    a.taps = a.size[0];  // residue 0 has the most
    // A stride-1 Conv of x padded by the last offset less qmin (cropped where negative) gives q =
    // qmin, qmin + 1, ...
    const int64_t span = (a.taps - 1) * a.step;
    a.pad_begin = span - a.qmin;
    a.pad_end = a.count - h - a.pad_begin + span;
    if (h - std::max<int64_t>(-a.pad_begin, 0) - std::max<int64_t>(-a.pad_end, 0) < 1) return std::nullopt;
  }
  return axes;
}

// The union weight [group x residues x C_out/g, C_in/g, taps...]: for output channel (group,
// residue tuple, co) the taps of that residue class at their offsets, zero elsewhere.
Tensor sub_pixel_weight(const Geometry& g, const std::vector<SubPixelAxis>& axes, const Tensor& w) {
  const size_t sp = g.sp;
  int64_t phases = 1, window = 1, kernel_taps = 1;
  for (size_t i = 0; i < sp; ++i) {
    phases *= axes[i].stride;
    window *= axes[i].taps;
    kernel_taps *= g.kernel[i];
  }
  const int64_t cig = g.c_in / g.group, cog = g.w[1];
  Shape shape = {g.group * phases * cog, cig};
  for (const SubPixelAxis& a : axes) shape.push_back(a.taps);
  const std::vector<double> src = w.to_doubles();  // [C_in, C_out/g, k...]
  std::vector<double> dst(static_cast<size_t>(numel(shape)), 0.0);
  std::vector<int64_t> rho(sp), u(sp);
  for (int64_t phase = 0; phase < phases; ++phase) {
    for (int64_t rest = phase, i = static_cast<int64_t>(sp) - 1; i >= 0; --i) {
      rho[static_cast<size_t>(i)] = rest % axes[static_cast<size_t>(i)].stride;
      rest /= axes[static_cast<size_t>(i)].stride;
    }
    for (int64_t at = 0; at < window; ++at) {
      int64_t tap = 0;  // the kernel's flat tap, or -1
      for (int64_t rest = at, i = static_cast<int64_t>(sp) - 1; i >= 0; --i) {
        u[static_cast<size_t>(i)] = rest % axes[static_cast<size_t>(i)].taps;
        rest /= axes[static_cast<size_t>(i)].taps;
      }
      for (size_t i = 0; i < sp && tap >= 0; ++i) {
        const int64_t k = axes[i].tap(rho[i], u[i]);
        tap = k < 0 ? -1 : tap * g.kernel[i] + k;
      }
      if (tap < 0) continue;
      for (int64_t grp = 0; grp < g.group; ++grp) {
        for (int64_t co = 0; co < cog; ++co) {
          for (int64_t ci = 0; ci < cig; ++ci) {
            const int64_t out = ((grp * phases + phase) * cog + co) * cig + ci;
            dst[static_cast<size_t>(out * window + at)] = src[static_cast<size_t>(((grp * cig + ci) * cog + co) * kernel_taps + tap)];
          }
        }
      }
    }
  }
  Tensor t(w.dtype(), shape);
  t.set_doubles(dst);
  return t;
}

// One Conv of x by the union weight, every residue's outputs as channels, then shuffled into
// place: [N, g, residues..., C_out/g, q...] -> [N, g, C_out/g, q_1, residue_1, ...] -> [N, C_out,
// q_1 x stride_1, ...], cut to the output, the bias added.
int sub_pixel_form(NodeLowering& L, const Geometry& g, const std::vector<SubPixelAxis>& axes) {
  const size_t sp = g.sp;
  std::vector<int64_t> crop_starts, crop_ends, crop_axes, pads(2 * sp, 0), dil;
  for (size_t i = 0; i < sp; ++i) {
    const SubPixelAxis& a = axes[i];
    pads[i] = std::max<int64_t>(a.pad_begin, 0);
    pads[sp + i] = std::max<int64_t>(a.pad_end, 0);
    dil.push_back(a.step);
    if (a.pad_begin < 0 || a.pad_end < 0) {
      crop_axes.push_back(static_cast<int64_t>(2 + i));
      crop_starts.push_back(std::max<int64_t>(-a.pad_begin, 0));
      crop_ends.push_back(g.x[2 + i] - std::max<int64_t>(-a.pad_end, 0));
    }
  }
  const int x = slice_axes(L, L.input(0), crop_starts, crop_ends, crop_axes, std::vector<int64_t>(crop_axes.size(), 1));
  const int y = conv(L, g, x, L.constant(sub_pixel_weight(g, axes, L.const_input(1, "W"))), pads, dil, false);
  const int64_t cog = g.w[1];
  Shape split = {g.x[0], g.group};
  for (const SubPixelAxis& ax : axes) split.push_back(ax.stride);
  split.push_back(cog);
  for (const SubPixelAxis& ax : axes) split.push_back(ax.count);
  std::vector<int64_t> perm = {0, 1, static_cast<int64_t>(2 + sp)};  // N, g, C_out/g
  Shape merged = {g.x[0], g.c_out};
  std::vector<int64_t> starts, ends, cut;
  for (size_t i = 0; i < sp; ++i) {
    perm.push_back(static_cast<int64_t>(3 + sp + i));  // q_i
    perm.push_back(static_cast<int64_t>(2 + i));       // residue_i
    merged.push_back(axes[i].count * axes[i].stride);
    starts.push_back(g.pads[i] - axes[i].qmin * axes[i].stride);
    ends.push_back(starts.back() + g.out[i]);
    cut.push_back(static_cast<int64_t>(2 + i));
  }
  Attributes t;
  t.set("perm", perm);
  int out = slice_axes(L, L.reshape(L.emit("Transpose", {L.reshape(y, split)}, t), merged), starts, ends, cut,
                       std::vector<int64_t>(sp, 1));
  if (L.has_input(2)) {
    Shape along(sp + 2, 1);
    along[1] = g.c_out;
    out = L.emit("Add", {out, L.reshape(L.input(2), along)});
  }
  return out;
}

int spread_form(NodeLowering& L, const Geometry& g, int w) {
  const size_t sp = g.sp, r = sp + 2;
  // The input spread out: along each strided axis [.., D, ..] -> [.., D, 1, ..] -> pad to
  // [.., D, s, ..] -> [.., D * s, ..], then the last s - 1 zeros cut off.
  int x = L.input(0);
  for (size_t i = 0; i < sp; ++i) {
    if (g.strides[i] == 1) continue;
    const Shape cur = L.builder().value(x).shape;
    const size_t axis = 2 + i;
    Shape split(cur.begin(), cur.end());
    split.insert(split.begin() + static_cast<std::ptrdiff_t>(axis) + 1, 1);
    std::vector<int64_t> zeros(2 * (r + 1), 0);
    zeros[(r + 1) + axis + 1] = g.strides[i] - 1;
    const int spread = zero_pad(L, L.reshape(x, split), zeros);
    Shape joined(cur.begin(), cur.end());
    joined[axis] = cur[axis] * g.strides[i];
    x = slice_axes(L, L.reshape(spread, joined), {0}, {(cur[axis] - 1) * g.strides[i] + 1}, {static_cast<int64_t>(axis)}, {1});
  }
  // Padded by (k - 1) * d less the transpose's pads (output_padding at the end); where that is
  // negative, cropped instead (a negative pad), in one Pad.
  std::vector<int64_t> grow(2 * r, 0);
  for (size_t i = 0; i < sp; ++i) {
    const int64_t full = (g.kernel[i] - 1) * g.dil[i];
    grow[2 + i] = full - g.pads[i];
    grow[r + 2 + i] = full - g.pads[i + sp] + g.out_pad[i];
  }
  if (std::any_of(grow.begin(), grow.end(), [](int64_t p) { return p != 0; })) x = zero_pad(L, x, grow);
  // Each spatial axis of the weight reversed.
  std::vector<int64_t> flip_axes, flip_starts, flip_ends;
  for (size_t i = 0; i < sp; ++i) {
    if (g.kernel[i] == 1) continue;
    flip_axes.push_back(static_cast<int64_t>(2 + i));
    flip_starts.push_back(-1);
    flip_ends.push_back(std::numeric_limits<int64_t>::min());
  }
  if (!flip_axes.empty()) w = slice_axes(L, w, flip_starts, flip_ends, flip_axes, std::vector<int64_t>(flip_axes.size(), -1));
  return conv(L, g, x, w, std::vector<int64_t>(2 * sp, 0), g.dil, true);
}

}  // namespace

void conv_transpose(NodeLowering& L) {
  const Geometry g = geometry(L);
  const auto plan = sub_pixel_plan(L, g);
  L.set_output(0, plan ? sub_pixel_form(L, g, *plan) : spread_form(L, g, swapped_weight(L, g)));
}

}  // namespace fusetune::importer
