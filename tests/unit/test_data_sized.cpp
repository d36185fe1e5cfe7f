// Outputs whose size depends on the data (importer/lower_data_sized.h, importer/data_extent.h):
// NonMaxSuppression, Unique and NonZero against plain implementations written here from the
// operators' definitions (onnxruntime's greedy NMS, numpy's unique), on seeded random data, on
// the reference interpreter and compiled on the host executor; the padding carried through
// gathers to an output and counted there (bundle manifest, deployment API, `fusetune run`);
// a node that would read the padding refused naming it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <random>

#include "backend/backend.h"
#include "compiler/pipeline.h"
#include "fusetune/runtime.h"
#include "importer/importer.h"
#include "importer/onnx_io.h"
#include "reference/interpreter.h"
#include "runtime/plan_runner.h"
#include "unit/cli_run.h"
#include "unit/import_check.h"
#include "unit/onnx_builder.h"
#include "unit/test_dir.h"
#include "unit/test_seed.h"

namespace fusetune {
namespace {

namespace fs = std::filesystem;
using testing::kFloat;
using testing::kInt64;
using testing::OnnxBuilder;

// The model's outputs on the reference interpreter and compiled for the H100 on the host
// executor, each trimmed to its count; the compiled plan's launches in `launches` where given.
std::pair<std::vector<Tensor>, std::vector<Tensor>> run_both(const OnnxBuilder& b, const std::vector<Tensor>& inputs, const char* dir_name,
                                                             size_t* launches = nullptr) {
  const Graph g = importer::import_onnx_bytes(b.bytes(), ".").graph;
  std::vector<Tensor> ref = trim_to_counts(reference::run_graph(g, inputs), g.output_extents());
  testing::TestDir dir(dir_name);
  b.write(dir / "model.onnx");
  const compiler::PipelineResult r = compiler::compile_model(dir / "model.onnx", planner::find_device("h100"), {});
  auto host = backend::make_host_backend();
  runtime::PlanRunner runner(r.bundle, *host);
  std::vector<Tensor> got = trim_to_counts(runner.run(inputs), runtime::output_extents(runner.outputs()));
  if (launches != nullptr) *launches = runner.launches();
  return {ref, got};
}

struct NmsBox {
  float a, b, c, d;
};

// onnxruntime's NonMaxSuppression, written from its definition: per batch and class, the boxes
// over the score threshold by descending score (lower index first among equals), each kept
// unless a kept one overlaps it with IoU over the threshold, at most `k` a class.
std::vector<int64_t> greedy_nms(const std::vector<NmsBox>& boxes, const std::vector<float>& scores, int64_t batches, int64_t classes,
                                int64_t n, int64_t k, float iou_threshold, float score_threshold, bool center) {
  const auto corners = [&](const NmsBox& x, float* x0, float* y0, float* x1, float* y1) {
    if (center) {
      *x0 = x.a - x.c / 2, *x1 = x.a + x.c / 2, *y0 = x.b - x.d / 2, *y1 = x.b + x.d / 2;
    } else {
      *y0 = std::min(x.a, x.c), *y1 = std::max(x.a, x.c), *x0 = std::min(x.b, x.d), *x1 = std::max(x.b, x.d);
    }
  };
  const auto suppresses = [&](const NmsBox& p, const NmsBox& q) {
    float px0, py0, px1, py1, qx0, qy0, qx1, qy1;
    corners(p, &px0, &py0, &px1, &py1);
    corners(q, &qx0, &qy0, &qx1, &qy1);
    const float inter = std::max(std::min(px1, qx1) - std::max(px0, qx0), 0.0f) * std::max(std::min(py1, qy1) - std::max(py0, qy0), 0.0f);
    const float ap = (px1 - px0) * (py1 - py0), aq = (qx1 - qx0) * (qy1 - qy0), uni = ap + aq - inter;
    if (inter <= 0 || ap <= 0 || aq <= 0 || uni <= 0) return false;
    return inter / uni > iou_threshold;
  };
  std::vector<int64_t> out;
  for (int64_t b = 0; b < batches; ++b) {
    for (int64_t c = 0; c < classes; ++c) {
      const float* s = &scores[static_cast<size_t>((b * classes + c) * n)];
      std::vector<int64_t> order;
      for (int64_t i = 0; i < n; ++i) {
        if (s[i] > score_threshold) order.push_back(i);
      }
      std::stable_sort(order.begin(), order.end(), [&](int64_t p, int64_t q) { return s[p] > s[q]; });
      std::vector<int64_t> kept;
      for (int64_t i : order) {
        if (static_cast<int64_t>(kept.size()) == k) break;
        const NmsBox& x = boxes[static_cast<size_t>(b * n + i)];
        if (std::none_of(kept.begin(), kept.end(), [&](int64_t j) { return suppresses(boxes[static_cast<size_t>(b * n + j)], x); })) {
          kept.push_back(i);
        }
      }
      for (int64_t i : kept) out.insert(out.end(), {b, c, i});
    }
  }
  return out;
}

// Random boxes in a few clusters (so that many overlap), scores with ties, both box formats;
// the thresholds are run-time inputs.
TEST(DataSized, NonMaxSuppressionIsTheGreedySelection) {
  const unsigned seed = testing::test_seed();
  std::mt19937 rng(seed);
  const int64_t B = 2, C = 3, N = 24, K = 12;
  for (const bool center : {false, true}) {
    std::uniform_real_distribution<float> u(0.0f, 1.0f);
    std::vector<NmsBox> boxes;
    std::vector<float> flat;
    for (int64_t i = 0; i < B * N; ++i) {
      const float cx = 0.3f * static_cast<float>(i % 3) + 0.04f * u(rng), cy = 0.3f * static_cast<float>(i % 2) + 0.04f * u(rng);
      const float w = 0.1f + 0.15f * u(rng), h = 0.1f + 0.15f * u(rng);
      const NmsBox x = center ? NmsBox{cx, cy, w, h} : (i % 4 == 0 ? NmsBox{cy + h, cx + w, cy, cx} : NmsBox{cy, cx, cy + h, cx + w});
      boxes.push_back(x);
      flat.insert(flat.end(), {x.a, x.b, x.c, x.d});
    }
    std::vector<float> scores(static_cast<size_t>(B * C * N));
    for (float& s : scores) s = std::round(u(rng) * 20.0f) / 20.0f;  // ties
    const float iou = 0.3f, threshold = 0.25f;
    OnnxBuilder b(11);
    b.input("boxes", kFloat, {B, N, 4}).input("scores", kFloat, {B, C, N}).input("iou", kFloat, {1}).input("score", kFloat, {1});
    b.output("selected", kInt64, {-1, 3});
    b.initializer("k", Tensor::from_ints(DType::kI64, {1}, std::vector<int64_t>{K}));
    OnnxBuilder::attr_i(b.node("NonMaxSuppression", {"boxes", "scores", "k", "iou", "score"}, {"selected"}), "center_point_box", center ? 1 : 0);
    const std::vector<Tensor> inputs = {Tensor::from_floats(DType::kF32, {B, N, 4}, flat), Tensor::from_floats(DType::kF32, {B, C, N}, scores),
                                        Tensor::from_floats(DType::kF32, {1}, std::vector<float>{iou}),
                                        Tensor::from_floats(DType::kF32, {1}, std::vector<float>{threshold})};
    const std::vector<int64_t> want = greedy_nms(boxes, scores, B, C, N, K, iou, threshold, center);
    ASSERT_GT(want.size(), 3u * B * C) << "seed " << seed << ": too few selections to test anything";
    const auto candidates = static_cast<size_t>(std::count_if(scores.begin(), scores.end(), [&](float v) { return v > threshold; }));
    ASSERT_LT(want.size() / 3, candidates) << "seed " << seed << ": nothing suppressed";
    size_t launches = 0;
    const auto [ref, got] = run_both(b, inputs, "nms", &launches);
    // Selection rounds share launches: a round's ArgMax and the marking-off of what it suppresses
    // in one kernel, several rounds one after the other in one block (planner/fusion.h's row
    // epilogues and row chains); a few more launches for the overlaps and the output. (Two
    // launches a round before: 29.)
    EXPECT_LE(launches, static_cast<size_t>(K) / 2 + 3) << "center_point_box " << center;
    EXPECT_EQ(ref.at(0).shape(), (Shape{static_cast<int64_t>(want.size() / 3), 3}));
    EXPECT_EQ(ref.at(0).to_ints(), want) << "reference, center_point_box " << center << ", seed " << seed;
    EXPECT_EQ(got.at(0).to_ints(), want) << "compiled, center_point_box " << center << ", seed " << seed;
  }
}

// numpy.unique of the elements (sorted, and by first occurrence) and of the rows of a matrix.
TEST(DataSized, UniqueIsNumpys) {
  const unsigned seed = testing::test_seed();
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> digit(0, 6);
  const int64_t rows = 12, cols = 2;
  std::vector<float> x(static_cast<size_t>(rows * cols));
  for (float& v : x) v = static_cast<float>(digit(rng)) * 0.5f;
  for (int64_t c = 0; c < cols; ++c) x[static_cast<size_t>(5 * cols + c)] = x[static_cast<size_t>(2 * cols + c)];  // a repeated row
  const Tensor input = Tensor::from_floats(DType::kF32, {rows, cols}, x);
  for (const int64_t sorted : {1, 0}) {
    // Elements: Y, indices (first occurrences), inverse, counts.
    std::vector<float> y;
    std::map<float, int64_t> first, count;
    for (size_t i = 0; i < x.size(); ++i) {
      if (!first.count(x[i])) {
        first[x[i]] = static_cast<int64_t>(i);
        y.push_back(x[i]);
      }
      ++count[x[i]];
    }
    if (sorted != 0) std::sort(y.begin(), y.end());
    std::vector<int64_t> indices, counts, inverse;
    for (float v : y) indices.push_back(first[v]), counts.push_back(count[v]);
    for (float v : x) inverse.push_back(std::find(y.begin(), y.end(), v) - y.begin());
    OnnxBuilder b(11);
    b.input("x", kFloat, {rows, cols}).output("y", kFloat, {-1}).output("i", kInt64, {-1}).output("inv", kInt64, {rows * cols}).output("c", kInt64, {-1});
    OnnxBuilder::attr_i(b.node("Unique", {"x"}, {"y", "i", "inv", "c"}), "sorted", sorted);
    const auto [ref, got] = run_both(b, {input}, "unique");
    for (const auto* outs : {&ref, &got}) {
      const char* where = outs == &ref ? "reference" : "compiled";
      ASSERT_EQ(outs->size(), 4u) << where;
      EXPECT_EQ((*outs)[0].to_floats(), y) << where << ", sorted " << sorted << ", seed " << seed;
      EXPECT_EQ((*outs)[1].to_ints(), indices) << where << ", sorted " << sorted << ", seed " << seed;
      EXPECT_EQ((*outs)[2].to_ints(), inverse) << where << ", sorted " << sorted << ", seed " << seed;
      EXPECT_EQ((*outs)[3].to_ints(), counts) << where << ", sorted " << sorted << ", seed " << seed;
    }
  }
  // Rows, sorted lexicographically.
  std::map<std::vector<float>, int64_t> row_count;
  for (int64_t r = 0; r < rows; ++r) ++row_count[std::vector<float>(x.begin() + r * cols, x.begin() + (r + 1) * cols)];
  std::vector<float> y;
  std::vector<int64_t> counts;
  for (const auto& [row, n] : row_count) y.insert(y.end(), row.begin(), row.end()), counts.push_back(n);
  OnnxBuilder b(11);
  b.input("x", kFloat, {rows, cols}).output("y", kFloat, {-1, cols}).output("i", kInt64, {-1}).output("inv", kInt64, {rows}).output("c", kInt64, {-1});
  OnnxBuilder::attr_i(b.node("Unique", {"x"}, {"y", "i", "inv", "c"}), "axis", 0);
  const auto [ref, got] = run_both(b, {input}, "unique_rows");
  EXPECT_EQ(ref.at(0).to_floats(), y) << "reference, seed " << seed;
  EXPECT_EQ(got.at(0).to_floats(), y) << "compiled, seed " << seed;
  EXPECT_EQ(ref.at(3).to_ints(), counts) << "reference, seed " << seed;
  EXPECT_EQ(got.at(3).to_ints(), counts) << "compiled, seed " << seed;
}

TEST(DataSized, NonZeroOfRunTimeData) {
  const unsigned seed = testing::test_seed();
  std::mt19937 rng(seed);
  std::bernoulli_distribution hit(0.3);
  const Shape s = {3, 4, 5};
  std::vector<float> x(60);
  std::vector<std::vector<int64_t>> coords(3);
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = hit(rng) ? 1.5f : 0.0f;
    if (x[i] != 0) coords[0].push_back(static_cast<int64_t>(i) / 20), coords[1].push_back(static_cast<int64_t>(i) / 5 % 4), coords[2].push_back(static_cast<int64_t>(i) % 5);
  }
  std::vector<int64_t> want;
  for (const auto& c : coords) want.insert(want.end(), c.begin(), c.end());
  OnnxBuilder b(13);
  b.input("x", kFloat, {3, 4, 5}).output("nz", kInt64, {3, -1});
  b.node("NonZero", {"x"}, {"nz"});
  const auto [ref, got] = run_both(b, {Tensor::from_floats(DType::kF32, s, x)}, "nonzero");
  const Shape shape = {3, static_cast<int64_t>(coords[0].size())};
  EXPECT_EQ(ref.at(0).shape(), shape);
  EXPECT_EQ(ref.at(0).to_ints(), want) << "reference, seed " << seed;
  EXPECT_EQ(got.at(0).to_ints(), want) << "compiled, seed " << seed;
}

// A NonZero over a 2 x 3,000 score mask (more flags than one pairwise prefix count
// takes: counted in blocks, two levels), reference and compiled.
TEST(DataSized, NonZeroOfALargeMaskCountsInBlocks) {
  const unsigned seed = testing::test_seed();
  std::mt19937 rng(seed);
  std::bernoulli_distribution hit(0.02);
  const int64_t rows = 2, cols = 3000;
  std::vector<float> x(static_cast<size_t>(rows * cols));
  std::vector<int64_t> r, c;
  for (int64_t i = 0; i < rows * cols; ++i) {
    if (!hit(rng)) continue;
    x[static_cast<size_t>(i)] = 0.5f;
    r.push_back(i / cols);
    c.push_back(i % cols);
  }
  std::vector<int64_t> want = r;
  want.insert(want.end(), c.begin(), c.end());
  OnnxBuilder b(13);
  b.input("x", kFloat, {rows, cols}).output("nz", kInt64, {2, -1});
  b.node("NonZero", {"x"}, {"nz"});
  const auto [ref, got] = run_both(b, {Tensor::from_floats(DType::kF32, {rows, cols}, x)}, "nonzero_large");
  EXPECT_EQ(ref.at(0).to_ints(), want) << "reference, seed " << seed;
  EXPECT_EQ(got.at(0).to_ints(), want) << "compiled, seed " << seed;
}

// A bound the user sets (`compile --bound NAME=N`, ImportOptions::output_bounds) keeps that many
// entries of an output of data-dependent size: the buffer shrinks to it, the count still says how
// many there were, and the trimmed output is the first entries of the unbounded one, on the
// reference and compiled alike; a bound naming no such output, or of no entry, is refused naming it.
TEST(DataSized, AUserBoundKeepsTheFirstEntriesAndCountsThemAll) {
  const unsigned seed = testing::test_seed();
  std::mt19937 rng(seed);
  std::bernoulli_distribution hit(0.05);
  const int64_t rows = 2, cols = 400, bound = 17;
  std::vector<float> x(static_cast<size_t>(rows * cols));
  std::vector<int64_t> r, c;
  for (int64_t i = 0; i < rows * cols; ++i) {
    if (!hit(rng)) continue;
    x[static_cast<size_t>(i)] = 1.5f;
    r.push_back(i / cols);
    c.push_back(i % cols);
  }
  ASSERT_GT(static_cast<int64_t>(r.size()), bound) << "seed " << seed;
  std::vector<int64_t> want(r.begin(), r.begin() + bound);
  want.insert(want.end(), c.begin(), c.begin() + bound);
  OnnxBuilder b(13);
  b.input("x", kFloat, {rows, cols}).output("nz", kInt64, {2, -1});
  b.node("NonZero", {"x"}, {"nz"});
  const std::vector<Tensor> inputs = {Tensor::from_floats(DType::kF32, {rows, cols}, x)};
  importer::ImportOptions opt;
  opt.output_bounds["nz"] = bound;
  const Graph g = importer::import_onnx_bytes(b.bytes(), ".", opt).graph;
  const std::vector<Tensor> ref = reference::run_graph(g, inputs);
  ASSERT_EQ(ref.size(), 2u);
  EXPECT_EQ(ref[0].shape(), (Shape{2, bound}));
  EXPECT_EQ(ref[1].to_ints().at(0), static_cast<int64_t>(r.size())) << "the count is every nonzero element, seed " << seed;
  EXPECT_EQ(trim_to_counts(ref, g.output_extents()).at(0).to_ints(), want) << "reference, seed " << seed;
  testing::TestDir dir("bound");
  b.write(dir / "model.onnx");
  compiler::PipelineOptions po;
  po.import.output_bounds = opt.output_bounds;
  auto host = backend::make_host_backend();
  runtime::PlanRunner runner(compiler::compile_model(dir / "model.onnx", planner::find_device("h100"), po).bundle, *host);
  const std::vector<Tensor> got = runner.run(inputs);
  EXPECT_EQ(got.at(0).to_ints(), ref[0].to_ints()) << "compiled, seed " << seed;
  EXPECT_EQ(got.at(1).to_ints(), ref[1].to_ints()) << "compiled, seed " << seed;
  importer::ImportOptions stray;
  stray.output_bounds["x"] = 3;
  try {
    importer::import_onnx_bytes(b.bytes(), ".", stray);
    ADD_FAILURE() << "a bound on an input was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("a bound is set for 'x', which is no output of data-dependent size"), std::string::npos) << e.what();
  }
  const testing::Outcome zero = testing::run_cli("compile '" + (dir / "model.onnx").string() + "' --device h100 --out '" +
                                                 (dir / "plan").string() + "' --bound nz=0");
  EXPECT_NE(zero.exit_code, 0) << zero.output;
  EXPECT_NE(zero.output.find("--bound 'nz=0': N must be a whole number of entries, at least 1"), std::string::npos) << zero.output;
}

// A detector's tail: the boxes NMS selects, gathered (Gather of the box index column, Gather of
// the boxes at it): the padding is carried to the output and counted there, in the bundle's
// manifest, the deployment API's TensorInfo, `fusetune inspect`'s listing and `fusetune run`'s
// comparison with the model's expected output.
TEST(DataSized, PaddingIsCarriedToTheOutputAndCounted) {
  const int64_t N = 6;
  const std::vector<float> boxes = {0, 0, 1, 1, 0, 0.1f, 1, 1.1f, 0, -0.1f, 1, 0.9f, 0, 10, 1, 11, 0, 10.1f, 1, 11.1f, 0, 100, 1, 101};
  const std::vector<float> scores = {0.9f, 0.75f, 0.6f, 0.95f, 0.5f, 0.3f};
  OnnxBuilder b(13);
  b.input("boxes", kFloat, {1, N, 4}).input("scores", kFloat, {1, 1, N}).output("picked", kFloat, {-1, 4});
  b.initializer("k", Tensor::from_ints(DType::kI64, {1}, std::vector<int64_t>{3}));
  b.initializer("iou", Tensor::from_floats(DType::kF32, {1}, std::vector<float>{0.5f}));
  b.initializer("col", Tensor::scalar_int(DType::kI64, 2));
  b.initializer("flat", Tensor::from_ints(DType::kI64, {2}, std::vector<int64_t>{N, 4}));
  b.node("NonMaxSuppression", {"boxes", "scores", "k", "iou"}, {"sel"});
  OnnxBuilder::attr_i(b.node("Gather", {"sel", "col"}, {"box_index"}), "axis", 1);
  b.node("Reshape", {"boxes", "flat"}, {"all"});
  b.node("Gather", {"all", "box_index"}, {"picked"});
  const std::vector<Tensor> inputs = {Tensor::from_floats(DType::kF32, {1, N, 4}, boxes), Tensor::from_floats(DType::kF32, {1, 1, N}, scores)};
  const std::vector<float> want = {0, 10, 1, 11, 0, 0, 1, 1, 0, 100, 1, 101};  // boxes 3, 0, 5
  const auto [ref, got] = run_both(b, inputs, "nms_tail");
  EXPECT_EQ(ref.at(0).to_floats(), want);
  EXPECT_EQ(got.at(0).to_floats(), want);
  testing::TestDir dir("nms_tail_cli");
  b.write(dir / "model.onnx");
  fs::create_directories(dir / "data");
  importer::write_tensor_file(dir / "data" / "input_0.pb", "boxes", inputs[0]);
  importer::write_tensor_file(dir / "data" / "input_1.pb", "scores", inputs[1]);
  importer::write_tensor_file(dir / "data" / "output_0.pb", "picked", Tensor::from_floats(DType::kF32, {3, 4}, want));
  const testing::Outcome compiled = testing::run_cli("compile " + (dir / "model.onnx").string() + " --device h100 --out " + (dir / "plan").string());
  ASSERT_EQ(compiled.exit_code, 0) << compiled.output;
  for (const std::string target : {"model.onnx", "plan"}) {
    const testing::Outcome ran = testing::run_cli("run " + (dir / target).string() + " --backend host --inputs " + (dir / "data").string());
    EXPECT_EQ(ran.exit_code, 0) << ran.output;
    EXPECT_NE(ran.output.find("outputs: 1 match, 0 differ"), std::string::npos) << ran.output;
  }
  const testing::Outcome listed = testing::run_cli("inspect " + (dir / "model.onnx").string());
  EXPECT_NE(listed.output.find("picked  float32 3x4 (a bound: the first 'sel.count' entries along axis 0 hold data)"), std::string::npos)
      << listed.output;
  const Plan plan = Plan::load((dir / "plan").string(), "host");
  ASSERT_EQ(plan.outputs().size(), 2u);
  EXPECT_EQ(plan.outputs()[0].shape, (std::vector<int64_t>{3, 4}));  // the bound: one class, three selections
  EXPECT_EQ(plan.outputs()[0].count_output, "sel.count");
  EXPECT_EQ(plan.outputs()[0].count_axis, 0);
  EXPECT_EQ(plan.outputs()[1].name, "sel.count");
  EXPECT_EQ(plan.outputs()[1].shape, std::vector<int64_t>{});
}

TEST(DataSized, ANodeThatWouldReadThePaddingIsRefused) {
  OnnxBuilder sum(13);
  sum.input("x", kFloat, {4, 5}).output("n", kInt64, {2});
  sum.initializer("axes", Tensor::from_ints(DType::kI64, {1}, std::vector<int64_t>{1}));
  sum.node("NonZero", {"x"}, {"nz"});
  OnnxBuilder::attr_i(sum.node("ReduceSum", {"nz", "axes"}, {"n"}, "culprit"), "keepdims", 0);
  testing::expect_refused(sum, "node 'culprit' (ReduceSum): reads 'nz', whose extent along axis 1 depends on the data",
                          "it reduces the padded axis");
  OnnxBuilder cat(11);
  cat.input("x", kFloat, {6}).output("y", kFloat, {-1});
  cat.node("Unique", {"x"}, {"u"});
  OnnxBuilder::attr_i(cat.node("Concat", {"u", "x"}, {"y"}, "culprit"), "axis", 0);
  testing::expect_refused(cat, "node 'culprit' (Concat)", "it concatenates along the padded axis");
  OnnxBuilder rounds(11);
  rounds.input("b", kFloat, {1, 2000, 4}).input("s", kFloat, {1, 1, 2000}).output("sel", kInt64, {-1, 3});
  rounds.initializer("k", Tensor::from_ints(DType::kI64, {1}, std::vector<int64_t>{1500}));
  rounds.node("NonMaxSuppression", {"b", "s", "k"}, {"sel"}, "culprit");
  testing::expect_refused(rounds, "culprit", "max_output_boxes_per_class 1500 is over the 1024 selection rounds");
  OnnxBuilder unknown(11);
  unknown.input("b", kFloat, {1, 8, 4}).input("s", kFloat, {1, 1, 8}).input("k", kInt64, {1}).output("sel", kInt64, {-1, 3});
  unknown.node("NonMaxSuppression", {"b", "s", "k"}, {"sel"}, "culprit");
  testing::expect_refused(unknown, "culprit", "max_output_boxes_per_class (the bound of the selections)) is not a constant");
}

}  // namespace
}  // namespace fusetune
