// ConvTranspose (importer/lower_conv_transpose.h) against its definition, computed here by
// scattering every input element through every tap: seeded random 1-D to 3-D cases of every
// attribute, both forms (sub-pixel where the weight is an initializer and strided axes are not
// dilated, spread otherwise), on the reference and, for some, compiled.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "backend/backend.h"
#include "core/error.h"
#include "core/integer.h"
#include "compiler/pipeline.h"
#include "importer/importer.h"
#include "reference/interpreter.h"
#include "runtime/plan_runner.h"
#include "unit/onnx_builder.h"
#include "unit/test_dir.h"
#include "unit/test_seed.h"

namespace fusetune {
namespace {

using testing::OnnxBuilder;

struct TransposeCase {
  int64_t batch = 1, c_in = 1, c_out_g = 1, group = 1;
  std::vector<int64_t> in, kernel, strides, dil, pads, out_pad, wanted;  // wanted: output_shape, if set
  bool bias = false, weight_input = false;
  std::string auto_pad;  // SAME_UPPER or SAME_LOWER, if set
};

std::vector<int64_t> resolved_pads(const TransposeCase& c) {
  if (c.wanted.empty() && c.auto_pad.empty()) return c.pads;
  const size_t sp = c.in.size();
  std::vector<int64_t> pads(2 * sp);
  for (size_t i = 0; i < sp; ++i) {  // the excess over the output wanted, the larger half first but for SAME_UPPER
    const int64_t wanted = c.wanted.empty() ? c.in[i] * c.strides[i] : c.wanted[i];
    const int64_t total = c.strides[i] * (c.in[i] - 1) + c.out_pad[i] + (c.kernel[i] - 1) * c.dil[i] + 1 - wanted;
    const int64_t half = total >= 0 ? total / 2 : -((-total + 1) / 2);
    pads[i] = c.auto_pad == "SAME_UPPER" ? half : total - half;
    pads[sp + i] = total - pads[i];
  }
  return pads;
}

// y[n, g x Cog + co, h x s + k x d - pad] += x[n, g x Cig + ci, h] x w[g x Cig + ci, co, k], plus b.
std::vector<double> definition(const TransposeCase& c, const std::vector<float>& x, const std::vector<float>& w,
                               const std::vector<float>& b, Shape& out_shape) {
  const size_t sp = c.in.size();
  const std::vector<int64_t> pads = resolved_pads(c);
  const int64_t cig = c.c_in / c.group, c_out = c.c_out_g * c.group;
  out_shape = {c.batch, c_out};
  for (size_t i = 0; i < sp; ++i) {
    out_shape.push_back(c.strides[i] * (c.in[i] - 1) + c.out_pad[i] + (c.kernel[i] - 1) * c.dil[i] + 1 - pads[i] - pads[sp + i]);
  }
  const int64_t in_px = numel(c.in), taps = numel(c.kernel), out_px = numel(Shape(out_shape.begin() + 2, out_shape.end()));
  std::vector<double> y(static_cast<size_t>(c.batch * c_out * out_px), 0.0);
  for (int64_t n = 0; n < c.batch; ++n) {
    for (int64_t ch = 0; ch < c.c_in; ++ch) {
      const int64_t grp = ch / cig;
      for (int64_t p = 0; p < in_px; ++p) {
        for (int64_t t = 0; t < taps; ++t) {
          int64_t o = 0;
          bool inside = true;
          for (int64_t rp = p, rt = t, i = static_cast<int64_t>(sp) - 1, stride = 1; i >= 0; --i) {
            const auto a = static_cast<size_t>(i);
            const int64_t h = rp % c.in[a], k = rt % c.kernel[a];
            rp /= c.in[a];
            rt /= c.kernel[a];
            const int64_t at = h * c.strides[a] + k * c.dil[a] - pads[a];
            inside = inside && at >= 0 && at < out_shape[2 + a];
            o += at * stride;
            stride *= out_shape[2 + a];
          }
          if (!inside) continue;
          for (int64_t co = 0; co < c.c_out_g; ++co) {
            y[static_cast<size_t>((n * c_out + grp * c.c_out_g + co) * out_px + o)] +=
                static_cast<double>(x[static_cast<size_t>((n * c.c_in + ch) * in_px + p)]) *
                w[static_cast<size_t>((ch * c.c_out_g + co) * taps + t)];
          }
        }
      }
    }
  }
  if (c.bias) {
    for (size_t i = 0; i < y.size(); ++i) y[i] += b[static_cast<size_t>(i / static_cast<size_t>(out_px)) % static_cast<size_t>(c_out)];
  }
  return y;
}

TransposeCase random_case(std::mt19937& rng) {
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  TransposeCase c;
  const size_t sp = static_cast<size_t>(pick(1, 10) <= 3 ? 1 : pick(1, 8) <= 7 ? 2 : 3);
  c.batch = pick(1, 2);
  c.group = pick(1, 3) == 1 ? 2 : 1;
  c.c_in = c.group * pick(1, 3);
  c.c_out_g = pick(1, 3);
  c.bias = pick(0, 1) == 1;
  c.weight_input = pick(1, 5) == 1;
  for (size_t i = 0; i < sp; ++i) {
    c.in.push_back(pick(1, sp == 3 ? 3 : 6));
    c.kernel.push_back(pick(1, 4));
    c.strides.push_back(pick(1, 3));
    c.dil.push_back(pick(1, 4) == 1 ? 2 : 1);
    c.out_pad.push_back(pick(0, std::max(c.strides[i], c.dil[i]) - 1));
  }
  c.pads.assign(2 * sp, 0);
  for (size_t i = 0; i < sp; ++i) {  // pads that leave at least one output
    const int64_t full = c.strides[i] * (c.in[i] - 1) + c.out_pad[i] + (c.kernel[i] - 1) * c.dil[i] + 1;
    c.pads[i] = std::min(pick(0, (c.kernel[i] - 1) * c.dil[i]), full - 1);
    c.pads[sp + i] = std::min(pick(0, (c.kernel[i] - 1) * c.dil[i]), full - 1 - c.pads[i]);
  }
  if (pick(1, 5) == 1) {  // output_shape instead of pads: up to 2 more or fewer than the full output
    for (size_t i = 0; i < sp; ++i) {
      const int64_t full = c.strides[i] * (c.in[i] - 1) + c.out_pad[i] + (c.kernel[i] - 1) * c.dil[i] + 1;
      c.wanted.push_back(std::max<int64_t>(1, full + pick(-2, 2)));
    }
  }
  return c;
}

struct BuiltCase {
  OnnxBuilder model;
  std::vector<Tensor> inputs;
  std::vector<double> expected;
  Shape out_shape;
};

BuiltCase build(const TransposeCase& c, std::mt19937& rng) {
  std::normal_distribution<float> value(0.0f, 1.0f);
  Shape xs = {c.batch, c.c_in}, ws = {c.c_in, c.c_out_g};
  xs.insert(xs.end(), c.in.begin(), c.in.end());
  ws.insert(ws.end(), c.kernel.begin(), c.kernel.end());
  std::vector<float> x(static_cast<size_t>(numel(xs))), w(static_cast<size_t>(numel(ws))), b(static_cast<size_t>(c.c_out_g * c.group));
  for (float& v : x) v = value(rng);
  for (float& v : w) v = value(rng);
  for (float& v : b) v = value(rng);
  BuiltCase out;
  out.expected = definition(c, x, w, b, out.out_shape);
  OnnxBuilder& m = out.model;
  m = OnnxBuilder(17);
  m.input("x", testing::kFloat, xs);
  out.inputs.push_back(Tensor::from_floats(DType::kF32, xs, x));
  const Tensor wt = Tensor::from_floats(DType::kF32, ws, w);
  if (c.weight_input) {
    m.input("w", testing::kFloat, ws);
    out.inputs.push_back(wt);
  } else {
    m.initializer("w", wt);
  }
  if (c.bias) m.initializer("b", Tensor::from_floats(DType::kF32, {c.c_out_g * c.group}, b));
  m.output("y", testing::kFloat, out.out_shape);
  auto& n = c.bias ? m.node("ConvTranspose", {"x", "w", "b"}, {"y"}, "up") : m.node("ConvTranspose", {"x", "w"}, {"y"}, "up");
  OnnxBuilder::attr_ints(n, "strides", c.strides);
  OnnxBuilder::attr_ints(n, "dilations", c.dil);
  OnnxBuilder::attr_ints(n, "output_padding", c.out_pad);
  if (c.group > 1) OnnxBuilder::attr_i(n, "group", c.group);
  if (!c.auto_pad.empty()) {
    OnnxBuilder::attr_s(n, "auto_pad", c.auto_pad);
  } else if (c.wanted.empty()) {
    OnnxBuilder::attr_ints(n, "pads", c.pads);
  } else {
    OnnxBuilder::attr_ints(n, "output_shape", c.wanted);
  }
  return out;
}

std::string describe(const TransposeCase& c) {
  auto list = [](const std::vector<int64_t>& v) {
    std::string s;
    for (int64_t x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
    return "[" + s + "]";
  };
  return "in " + list(c.in) + " kernel " + list(c.kernel) + " strides " + list(c.strides) + " dilations " + list(c.dil) +
         " pads " + list(c.pads) + " output_padding " + list(c.out_pad) + " output_shape " + list(c.wanted) + " auto_pad " +
         c.auto_pad + " group " +
         std::to_string(c.group) + " c_in " + std::to_string(c.c_in) + " c_out/g " + std::to_string(c.c_out_g) +
         (c.weight_input ? " W an input" : " W an initializer") + (c.bias ? " with bias" : "");
}

double worst_error(const Tensor& got, const std::vector<double>& expected) {
  const std::vector<float> g = got.to_floats();
  if (g.size() != expected.size()) return INFINITY;
  double worst = 0;
  for (size_t i = 0; i < g.size(); ++i) worst = std::max(worst, std::fabs(g[i] - expected[i]) / (1.0 + std::fabs(expected[i])));
  return worst;
}

// 200 random cases on the reference, the first 6 of them compiled too. Where the weight is an
// initializer and no strided axis is dilated, the lowering is the sub-pixel form: one Conv and
// no Pad; otherwise the spread form (a Pad spreads the input).
TEST(ConvTranspose, RandomAttributesMatchTheDefinition) {
  const unsigned seed = testing::test_seed();
  std::mt19937 rng(seed);
  auto host = backend::make_host_backend();
  int sub_pixel = 0, spread = 0;
  for (int k = 0; k < 200; ++k) {
    const TransposeCase c = random_case(rng);
    BuiltCase built = build(c, rng);
    Graph g;
    try {
      g = importer::import_onnx_bytes(built.model.bytes(), ".").graph;
    } catch (const Error& e) {
      ADD_FAILURE() << e.what() << ": " << describe(c) << ", seed " << seed;
      continue;
    }
    int convs = 0, pads = 0;
    for (const Node& n : g.nodes()) {
      convs += n.op == "Conv" || n.op == "MatMul";  // a pointwise one is a MatMul (importer/pointwise_conv.h)
      pads += n.op == "Pad";
    }
    bool strided = false, dilated_stride = false;
    for (size_t i = 0; i < c.in.size(); ++i) {
      strided = strided || c.strides[i] > 1;
      dilated_stride = dilated_stride || (c.strides[i] > 1 && c.dil[i] > 1);
    }
    // The sub-pixel form also needs some input left once its window's offsets crop it
    // (lower_conv_transpose.cpp's sub_pixel_plan): per axis, residue classes 0..s-1 of the output.
    bool cropped_away = false;
    const std::vector<int64_t> pads_begin = resolved_pads(c);
    for (size_t i = 0; i < c.in.size(); ++i) {
      const int64_t s = c.strides[i], kk = c.kernel[i], h = c.in[i], pb = pads_begin[i], out = built.out_shape[2 + i];
      int64_t qmin = std::numeric_limits<int64_t>::max(), qmax = std::numeric_limits<int64_t>::min();
      for (int64_t rho = 0; rho < s; ++rho) {
        qmin = std::min(qmin, -floor_div(rho - pb, s));
        qmax = std::max(qmax, floor_div(out - 1 + pb - rho, s));
      }
      const int64_t span = ((kk - 1) / s) * (s == 1 ? c.dil[i] : 1);
      const int64_t pad_begin = span - qmin, pad_end = (qmax - qmin + 1) - h - pad_begin + span;
      cropped_away = cropped_away || h - std::max<int64_t>(-pad_begin, 0) - std::max<int64_t>(-pad_end, 0) < 1;
    }
    const bool expect_sub_pixel = strided && !dilated_stride && !c.weight_input && !cropped_away;
    EXPECT_EQ(convs, 1) << describe(c) << ", seed " << seed;
    if (expect_sub_pixel) {
      EXPECT_EQ(pads, 0) << describe(c) << ", seed " << seed;
    }
    (expect_sub_pixel ? sub_pixel : spread) += 1;
    const std::vector<Tensor> ref = reference::run_graph(g, built.inputs);
    ASSERT_EQ(ref[0].shape(), built.out_shape) << describe(c) << ", seed " << seed;
    EXPECT_LT(worst_error(ref[0], built.expected), 1e-4) << "reference, " << describe(c) << ", seed " << seed;
    if (k < 6) {
      testing::TestDir dir("conv_transpose_" + std::to_string(k));
      built.model.write(dir / "model.onnx");
      runtime::PlanRunner runner(compiler::compile_model(dir / "model.onnx", planner::find_device("h100"), {}).bundle, *host);
      EXPECT_LT(worst_error(runner.run(built.inputs)[0], built.expected), 1e-4) << "compiled, " << describe(c) << ", seed " << seed;
    }
  }
  std::printf("%d cases in the sub-pixel form, %d in the spread form\n", sub_pixel, spread);
  EXPECT_GT(sub_pixel, 50);
  EXPECT_GT(spread, 20);
}

// Cases the random ones seldom reach, on the reference and compiled: pads beyond the kernel's
// reach and an output_shape well below the full output (the sub-pixel form crops x), an output
// made only of output_padding (its residue classes have no taps: the bias alone), SAME_UPPER and
// SAME_LOWER, and a grouped 3-D case.
TEST(ConvTranspose, EdgeCasesOfPadsAndOutputShape) {
  auto host = backend::make_host_backend();
  std::mt19937 rng(20261204);
  auto one_d = [](int64_t h, int64_t k, int64_t s) {
    TransposeCase c;
    c.c_in = 2;
    c.c_out_g = 3;
    c.bias = true;
    c.in = {h};
    c.kernel = {k};
    c.strides = {s};
    c.dil = {1};
    c.out_pad = {0};
    c.pads = {0, 0};
    return c;
  };
  std::vector<TransposeCase> cases;
  cases.push_back(one_d(6, 1, 2));
  cases.back().pads = {3, 3};
  cases.push_back(one_d(6, 3, 2));
  cases.back().wanted = {4};
  cases.push_back(one_d(1, 1, 3));
  cases.back().out_pad = {2};
  cases.back().wanted = {2};
  for (const char* mode : {"SAME_UPPER", "SAME_LOWER"}) {
    TransposeCase c;
    c.c_in = 3;
    c.c_out_g = 2;
    c.in = {5, 4};
    c.kernel = {mode == std::string("SAME_UPPER") ? 3 : 4, 3};
    c.strides = {2, 2};
    c.dil = {1, 1};
    c.out_pad = {1, 0};
    c.auto_pad = mode;
    cases.push_back(c);
  }
  TransposeCase grouped;
  grouped.c_in = 4;
  grouped.group = 2;
  grouped.c_out_g = 2;
  grouped.bias = true;
  grouped.in = {3, 2, 3};
  grouped.kernel = {2, 2, 2};
  grouped.strides = {2, 2, 2};
  grouped.dil = {1, 1, 1};
  grouped.out_pad = {0, 1, 0};
  grouped.pads = {0, 1, 0, 1, 0, 0};
  cases.push_back(grouped);
  for (size_t k = 0; k < cases.size(); ++k) {
    const TransposeCase& c = cases[k];
    BuiltCase built = build(c, rng);
    const std::vector<Tensor> ref = reference::run_graph(importer::import_onnx_bytes(built.model.bytes(), ".").graph, built.inputs);
    EXPECT_LT(worst_error(ref[0], built.expected), 1e-4) << "reference, " << describe(c);
    testing::TestDir dir("conv_transpose_edge_" + std::to_string(k));
    built.model.write(dir / "model.onnx");
    runtime::PlanRunner runner(compiler::compile_model(dir / "model.onnx", planner::find_device("h100"), {}).bundle, *host);
    EXPECT_LT(worst_error(runner.run(built.inputs)[0], built.expected), 1e-4) << "compiled, " << describe(c);
  }
}

}  // namespace
}  // namespace fusetune
