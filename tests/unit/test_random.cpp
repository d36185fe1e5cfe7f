// Random operators (importer/lower_random.h): Philox4x32-10 against Random123's known answers, the
// compiled draws against the reference's bit for bit, the draws against their distributions, the
// keys (repeatable, apart per seed and per draw), and the refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>
#include <optional>
#include <random>

#include "backend/backend.h"
#include "compiler/pipeline.h"
#include "core/error.h"
#include "core/philox.h"
#include "importer/importer.h"
#include "reference/interpreter.h"
#include "runtime/plan_runner.h"
#include "unit/import_check.h"
#include "unit/onnx_builder.h"
#include "unit/test_dir.h"
#include "unit/test_seed.h"

namespace fusetune {
namespace {

using testing::OnnxBuilder;

// Random123's kat_vectors for philox4x32 10: counter, key, the four words.
TEST(Random, PhiloxGivesRandom123sKnownAnswers) {
  EXPECT_EQ(philox4x32_10({0, 0, 0, 0}, {0, 0}), (PhiloxWords{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}));
  EXPECT_EQ(philox4x32_10({~0u, ~0u, ~0u, ~0u}, {~0u, ~0u}), (PhiloxWords{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}));
  EXPECT_EQ(philox4x32_10({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, {0xa4093822u, 0x299f31d0u}),
            (PhiloxWords{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}));
  // The uniform is the word's top 24 bits on a 2^-24 grid: index 0 under key 0 is word 0 above.
  EXPECT_EQ(random_uniform(0, 0, 0), static_cast<float>(0x6627e8d5u >> 8) * 0x1p-24f);
  EXPECT_EQ(random_uniform(0, 0, 3), static_cast<float>(0x9b00dbd8u >> 8) * 0x1p-24f);
}

constexpr int64_t kDrawRows = 64, kDrawCols = 1024;  // 65,536 draws a tensor: past import's known-value limit
constexpr int64_t kDrawBatch = 4, kDrawClasses = 6, kDrawSamples = 4096;

// One model of every random op: uniform on [-2, 3), normal (mean 1.5, scale 0.5), Bernoulli of p,
// uniform like p, float16 normal like p, and a Multinomial of 4 rows of 6 classes.
OnnxBuilder every_random_op() {
  OnnxBuilder b(22);
  b.input("p", testing::kFloat, {kDrawRows, kDrawCols}).input("logits", testing::kFloat, {kDrawBatch, kDrawClasses});
  b.output("u", testing::kFloat, {kDrawRows, kDrawCols}).output("n", testing::kFloat, {kDrawRows, kDrawCols});
  b.output("b", testing::kFloat, {kDrawRows, kDrawCols}).output("ul", testing::kFloat, {kDrawRows, kDrawCols});
  b.output("nh", testing::kFloat16, {kDrawRows, kDrawCols}).output("m", testing::kInt64, {kDrawBatch, kDrawSamples});
  auto& u = b.node("RandomUniform", {}, {"u"}, "uniform");
  OnnxBuilder::attr_ints(u, "shape", {kDrawRows, kDrawCols});
  OnnxBuilder::attr_f(u, "low", -2.0f);
  OnnxBuilder::attr_f(u, "high", 3.0f);
  OnnxBuilder::attr_f(u, "seed", 7.0f);
  auto& n = b.node("RandomNormal", {}, {"n"}, "normal");
  OnnxBuilder::attr_ints(n, "shape", {kDrawRows, kDrawCols});
  OnnxBuilder::attr_f(n, "mean", 1.5f);
  OnnxBuilder::attr_f(n, "scale", 0.5f);
  b.node("Bernoulli", {"p"}, {"b"}, "coin");
  b.node("RandomUniformLike", {"p"}, {"ul"}, "uniform_like");
  OnnxBuilder::attr_i(b.node("RandomNormalLike", {"p"}, {"nh"}, "normal_like"), "dtype", testing::kFloat16);
  auto& m = b.node("Multinomial", {"logits"}, {"m"}, "sample");
  OnnxBuilder::attr_i(m, "sample_size", kDrawSamples);
  OnnxBuilder::attr_i(m, "dtype", testing::kInt64);
  return b;
}

struct DrawInputs {
  Tensor p, logits;
  std::vector<float> probs;  // softmax of each row of logits
};

// Probabilities: a quarter 0, a quarter 1, the rest 0.3 or seeded random; logits fixed.
DrawInputs draw_random_inputs(unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  std::vector<float> p(static_cast<size_t>(kDrawRows * kDrawCols));
  for (size_t i = 0; i < p.size(); ++i) {
    const size_t row = i / kDrawCols;
    p[i] = row < 16 ? 0.0f : row < 32 ? 1.0f : row < 48 ? 0.3f : unit(rng);
  }
  std::vector<float> l(static_cast<size_t>(kDrawBatch * kDrawClasses)), probs(l.size());
  // Fixed logits: the Multinomial's draws, and so whether one lands within rounding of a
  // cumulative probability, do not move with the seed.
  for (size_t i = 0; i < l.size(); ++i) l[i] = 2.0f * std::sin(1.7f * static_cast<float>(i) + 0.3f);
  for (int64_t r = 0; r < kDrawBatch; ++r) {
    double sum = 0;
    for (int64_t c = 0; c < kDrawClasses; ++c) sum += std::exp(static_cast<double>(l[r * kDrawClasses + c]));
    for (int64_t c = 0; c < kDrawClasses; ++c) probs[r * kDrawClasses + c] = static_cast<float>(std::exp(static_cast<double>(l[r * kDrawClasses + c])) / sum);
  }
  return {Tensor::from_floats(DType::kF32, {kDrawRows, kDrawCols}, p), Tensor::from_floats(DType::kF32, {kDrawBatch, kDrawClasses}, l), probs};
}

// The compiled plan (verified on the host by compile_model under every check) draws what the
// reference draws: the uniforms and the Bernoulli bit for bit, the normals within float rounding of
// the reference's double arithmetic, the Multinomial's classes but for a rare neighbour. The generators are not folded into
// constants: the graph keeps its RandomUniform nodes.
TEST(Random, CompiledDrawsEqualTheReferenceDraws) {
  const unsigned seed = testing::test_seed();
  const DrawInputs in = draw_random_inputs(seed);
  const OnnxBuilder b = every_random_op();
  testing::TestDir dir("random_ops");
  b.write(dir / "model.onnx");
  const Graph g = importer::import_onnx_bytes(b.bytes(), ".").graph;
  EXPECT_EQ(std::count_if(g.nodes().begin(), g.nodes().end(), [](const Node& n) { return n.op == "RandomUniform"; }), 8);
  const std::vector<Tensor> ref = reference::run_graph(g, std::vector<Tensor>{in.p, in.logits});
  const compiler::PipelineResult r = compiler::compile_model(dir / "model.onnx", planner::find_device("h100"), {});
  auto host = backend::make_host_backend();
  runtime::PlanRunner runner(r.bundle, *host);
  const std::vector<Tensor> got = runner.run(std::vector<Tensor>{in.p, in.logits});
  ASSERT_EQ(got.size(), 6u);
  for (size_t k : {0u, 2u, 3u}) {
    EXPECT_EQ(std::memcmp(got[k].data(), ref[k].data(), ref[k].nbytes()), 0) << "output " << k << ", seed " << seed;
  }
  // Multinomial: the same class, or where U falls within float rounding of a cumulative
  // probability (float32 here, float64 in the reference) the neighbouring one, seldom.
  const std::vector<int64_t> mg = got[5].to_ints(), mr = ref[5].to_ints();
  int64_t moved = 0;
  for (size_t i = 0; i < mg.size(); ++i) {
    moved += mg[i] != mr[i];
    EXPECT_LE(std::abs(mg[i] - mr[i]), 1) << "sample " << i << ", seed " << seed;
  }
  EXPECT_LE(moved, 4) << "of " << mg.size() << " samples, seed " << seed;
  for (size_t k : {1u, 4u}) {
    const std::vector<float> a = got[k].to_floats(), e = ref[k].to_floats();
    double worst = 0;
    for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - e[i]) / (1.0 + std::fabs(e[i])));
    EXPECT_LT(worst, k == 1 ? 1e-5 : 1e-3) << "output " << k << ", seed " << seed;
  }
}

double mean_of_draws(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += x;
  return s / static_cast<double>(v.size());
}

// The reference's draws (the compiled ones equal them, above) follow their distributions: a
// Kolmogorov-Smirnov distance under its 0.1% critical value for the uniforms (and for the normals'
// standard scores against the normal CDF), moments within 5 standard errors, neighbours
// uncorrelated, each Bernoulli rate, and a chi-square of the Multinomial's class counts under its
// 0.1% critical value. The draws are fixed by their keys, so the verdict is too; the seed moves
// only the probabilities and logits.
TEST(Random, DrawsFollowTheirDistributions) {
  const unsigned seed = testing::test_seed();
  const DrawInputs in = draw_random_inputs(seed);
  const OnnxBuilder b = every_random_op();
  const std::vector<Tensor> out = reference::run_graph(importer::import_onnx_bytes(b.bytes(), ".").graph, std::vector<Tensor>{in.p, in.logits});
  const double n = static_cast<double>(kDrawRows * kDrawCols), ks_limit = 1.95 / std::sqrt(n), se = 5.0 / std::sqrt(n);
  auto ks = [](std::vector<double> x, const auto& cdf) {
    std::sort(x.begin(), x.end());
    double d = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const double f = cdf(x[i]);
      d = std::max({d, f - static_cast<double>(i) / x.size(), static_cast<double>(i + 1) / x.size() - f});
    }
    return d;
  };
  for (size_t k : {0u, 3u}) {  // uniform on [-2, 3) and on [0, 1)
    const std::vector<float> u = out[k].to_floats();
    const double lo = k == 0 ? -2 : 0, hi = k == 0 ? 3 : 1;
    EXPECT_GE(*std::min_element(u.begin(), u.end()), lo);
    EXPECT_LT(*std::max_element(u.begin(), u.end()), hi);
    std::vector<double> x(u.begin(), u.end());
    EXPECT_LT(ks(x, [&](double v) { return (v - lo) / (hi - lo); }), ks_limit) << "output " << k;
    double corr = 0;  // neighbours along the rows, standardized
    for (size_t i = 0; i + 1 < u.size(); ++i) corr += ((u[i] - lo) / (hi - lo) - 0.5) * ((u[i + 1] - lo) / (hi - lo) - 0.5) * 12.0;
    EXPECT_LT(std::fabs(corr / n), se) << "output " << k;
  }
  for (size_t k : {1u, 4u}) {  // normal (1.5, 0.5) in float32; (0, 1) in float16
    const std::vector<float> z = out[k].to_floats();
    const double mu = k == 1 ? 1.5 : 0.0, sigma = k == 1 ? 0.5 : 1.0;
    std::vector<double> s;
    for (float v : z) s.push_back((v - mu) / sigma);
    EXPECT_LT(std::fabs(mean_of_draws(std::vector<float>(s.begin(), s.end()))), se) << "output " << k;
    double var = 0;
    for (double v : s) var += v * v;
    EXPECT_LT(std::fabs(var / n - 1.0), se * std::sqrt(2.0)) << "output " << k;
    EXPECT_LT(ks(s, [](double v) { return 0.5 * std::erfc(-v / std::numbers::sqrt2); }), ks_limit + (k == 4 ? 2e-3 : 0.0)) << "output " << k;
  }
  const std::vector<float> coin = out[2].to_floats(), p = in.p.to_floats();
  const auto rows = [&](int64_t from, int64_t to) { return std::vector<float>(coin.begin() + from * kDrawCols, coin.begin() + to * kDrawCols); };
  EXPECT_EQ(mean_of_draws(rows(0, 16)), 0.0);  // p = 0: never
  EXPECT_EQ(mean_of_draws(rows(16, 32)), 1.0);  // p = 1: always
  EXPECT_NEAR(mean_of_draws(rows(32, 48)), 0.3, 5.0 * std::sqrt(0.3 * 0.7 / (16 * kDrawCols)));
  double expected = 0, var = 0, got = 0;
  for (int64_t i = 48 * kDrawCols; i < kDrawRows * kDrawCols; ++i) {
    expected += p[static_cast<size_t>(i)];
    var += p[static_cast<size_t>(i)] * (1 - p[static_cast<size_t>(i)]);
    got += coin[static_cast<size_t>(i)];
    EXPECT_TRUE(coin[static_cast<size_t>(i)] == 0.0f || coin[static_cast<size_t>(i)] == 1.0f);
  }
  EXPECT_NEAR(got, expected, 5.0 * std::sqrt(var)) << "seed " << seed;
  const std::vector<int64_t> m = out[5].to_ints();
  for (int64_t r = 0; r < kDrawBatch; ++r) {
    std::vector<double> count(kDrawClasses, 0.0);
    for (int64_t s = 0; s < kDrawSamples; ++s) {
      const int64_t c = m[static_cast<size_t>(r * kDrawSamples + s)];
      ASSERT_TRUE(c >= 0 && c < kDrawClasses) << c;
      ++count[static_cast<size_t>(c)];
    }
    double chi2 = 0;
    for (int64_t c = 0; c < kDrawClasses; ++c) {
      const double e = kDrawSamples * in.probs[static_cast<size_t>(r * kDrawClasses + c)];
      chi2 += (count[static_cast<size_t>(c)] - e) * (count[static_cast<size_t>(c)] - e) / e;
    }
    EXPECT_LT(chi2, 20.52) << "row " << r << ", seed " << seed;  // chi-square, 5 degrees of freedom, 0.1%
  }
}

std::vector<float> reference_draw(const OnnxBuilder& b, size_t output) {
  return reference::run_graph(importer::import_onnx_bytes(b.bytes(), ".").graph, std::vector<Tensor>{})[output].to_floats();
}

OnnxBuilder two_uniforms(std::optional<float> seed_a, std::optional<float> seed_b) {
  OnnxBuilder b(22);
  b.output("a", testing::kFloat, {kDrawRows, kDrawCols}).output("b", testing::kFloat, {kDrawRows, kDrawCols});
  for (const auto& [name, seed] : {std::pair{"a", seed_a}, std::pair{"b", seed_b}}) {
    auto& u = b.node("RandomUniform", {}, {name}, name);
    OnnxBuilder::attr_ints(u, "shape", {kDrawRows, kDrawCols});
    if (seed) OnnxBuilder::attr_f(u, "seed", *seed);
  }
  return b;
}

// A model draws the same values on every import and run; another seed draws others, and so does a
// second draw of one seed (the ordinal is in the key), seeded or not.
TEST(Random, SeedsAndDrawOrdinalsKeyTheStreams) {
  const OnnxBuilder seeded = two_uniforms(1.0f, 1.0f), other = two_uniforms(2.0f, 1.0f), unseeded = two_uniforms({}, {});
  EXPECT_EQ(reference_draw(seeded, 0), reference_draw(seeded, 0));
  EXPECT_NE(reference_draw(seeded, 0), reference_draw(seeded, 1));
  EXPECT_NE(reference_draw(seeded, 0), reference_draw(other, 0));
  EXPECT_EQ(reference_draw(seeded, 1), reference_draw(other, 1));
  EXPECT_EQ(reference_draw(unseeded, 0), reference_draw(unseeded, 0));
  EXPECT_NE(reference_draw(unseeded, 0), reference_draw(unseeded, 1));
  EXPECT_NE(reference_draw(unseeded, 0), reference_draw(seeded, 0));
}

TEST(Random, WhatTheOpsCannotMeanIsRefusedNamingTheNode) {
  OnnxBuilder int_out(22);
  int_out.output("y", testing::kInt32, {4});
  auto& u = int_out.node("RandomUniform", {}, {"y"}, "culprit");
  OnnxBuilder::attr_ints(u, "shape", {4});
  OnnxBuilder::attr_i(u, "dtype", testing::kInt32);
  testing::expect_refused(int_out, "culprit", "the output type int32 is not float16, bfloat16, float or double");
  OnnxBuilder no_shape(22);
  no_shape.output("y", testing::kFloat, {4});
  no_shape.node("RandomNormal", {}, {"y"}, "culprit");
  testing::expect_refused(no_shape, "culprit", "the required attribute 'shape' is missing");
  OnnxBuilder cube(22);
  cube.input("x", testing::kFloat, {2, 3, 4}).output("y", testing::kInt32, {2, 1});
  cube.node("Multinomial", {"x"}, {"y"}, "culprit");
  testing::expect_refused(cube, "culprit", "the input has shape 2x3x4, not [batch_size, class_size]");
  OnnxBuilder none(22);
  none.input("x", testing::kFloat, {2, 3}).output("y", testing::kInt32, {2, 0});
  OnnxBuilder::attr_i(none.node("Multinomial", {"x"}, {"y"}, "culprit"), "sample_size", 0);
  testing::expect_refused(none, "culprit", "sample_size 0 is below 1");
  OnnxBuilder vocabulary(22);
  vocabulary.input("x", testing::kFloat, {1, 32000}).output("y", testing::kInt32, {1, 1});
  vocabulary.node("Multinomial", {"x"}, {"y"}, "culprit");
  testing::expect_refused(vocabulary, "culprit", "class_size 32000 is outside [1, 4096]");
  OnnxBuilder bounds(22);
  bounds.output("y", testing::kFloat, {4});
  auto& r = bounds.node("RandomUniform", {}, {"y"}, "culprit");
  OnnxBuilder::attr_ints(r, "shape", {4});
  OnnxBuilder::attr_f(r, "low", 2.0f);
  OnnxBuilder::attr_f(r, "high", 1.0f);
  testing::expect_refused(bounds, "culprit", "low 2 is above high 1");
}

}  // namespace
}  // namespace fusetune
