// The reference's kernels stream large tensors in pieces (reference/kernel_util.h
// for_element_chunks, on several threads): every element of an output spanning several pieces,
// with operands broadcast along different axes and a piece boundary inside a row, equals the op
// applied to the operands numpy's broadcasting names, computed here element by element from the
// indices; MatMul's rows and Conv's planes are the definitions' sums; and the pieces cover the
// range exactly once.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <random>
#include <vector>

#include "core/tensor.h"
#include "reference/kernel_util.h"
#include "reference/kernels.h"
#include "test_seed.h"

namespace fusetune {
namespace {

Tensor normal_tensor(DType dt, const Shape& shape, std::mt19937& rng) {
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> v(static_cast<size_t>(numel(shape)));
  for (float& x : v) x = d(rng);
  return Tensor::from_floats(dt, shape, v);
}

// v rounded to `dt` as a kernel's store rounds it (through float).
float stored_as(DType dt, double v) {
  return Tensor::from_floats(dt, {}, std::vector<float>{static_cast<float>(v)}).to_floats()[0];
}

Node node_of(const std::string& op) {
  Node n;
  n.name = op;
  n.op = op;
  return n;
}

// Element (i, j, k) of a [3, 7, 1031]-broadcast operand of shape `s` (rank 3 or less, numpy's rule).
int64_t operand_offset(const Shape& s, int64_t i, int64_t j, int64_t k) {
  const int64_t idx[3] = {i, j, k};
  int64_t off = 0;
  for (size_t d = 0; d < s.size(); ++d) {
    const int64_t at = idx[3 - s.size() + d];
    off = off * s[d] + (s[d] == 1 ? 0 : at);
  }
  return off;
}

TEST(ReferencePieces, BroadcastBinaryOpsAndWhereOverSeveralPiecesMatchTheIndexedElements) {
  const unsigned seed = testing::test_seed();
  std::mt19937 rng(seed);
  const Shape out{3, 7, 1031};  // 21,651 elements: two pieces, the boundary inside a row
  ASSERT_GT(numel(out), reference::kElementChunk);
  const Shape sa{7, 1}, sb{3, 1, 1031}, sc{1031};
  const Tensor a = normal_tensor(DType::kF16, sa, rng);
  const Tensor b = normal_tensor(DType::kF16, sb, rng);
  const std::vector<float> av = a.to_floats(), bv = b.to_floats();
  for (const char* op : {"Sub", "Div", "Max"}) {
    const Tensor* ins[] = {&a, &b};
    const std::vector<Tensor> got = reference::run_node(node_of(op), ins);
    ASSERT_EQ(got[0].shape(), out) << op;
    const std::vector<double> g = got[0].to_doubles();
    int64_t wrong = 0;
    for (int64_t i = 0; i < 3; ++i) {
      for (int64_t j = 0; j < 7; ++j) {
        for (int64_t k = 0; k < 1031; ++k) {
          const double x = av[static_cast<size_t>(operand_offset(sa, i, j, k))];
          const double y = bv[static_cast<size_t>(operand_offset(sb, i, j, k))];
          const std::string o = op;
          const double want = o == "Sub" ? x - y : o == "Div" ? x / y : std::max(x, y);
          const double e = g[static_cast<size_t>((i * 7 + j) * 1031 + k)];
          if (e != stored_as(DType::kF16, want) && ++wrong <= 3) {
            ADD_FAILURE() << op << " at (" << i << ", " << j << ", " << k << "): " << e << ", want " << want
                          << " (seed " << seed << ")";
          }
        }
      }
    }
    EXPECT_EQ(wrong, 0) << op;
  }
  // Where(c, x, y): the condition along the last axis, x along the middle one, y whole.
  std::vector<int64_t> cv(1031);
  for (int64_t& c : cv) c = static_cast<int64_t>(rng() % 2);
  const Tensor c = Tensor::from_ints(DType::kBool, sc, cv);
  const Tensor y = normal_tensor(DType::kF16, out, rng);
  const std::vector<float> yv = y.to_floats();
  const Tensor* ins[] = {&c, &a, &y};
  const std::vector<float> w = reference::run_node(node_of("Where"), ins)[0].to_floats();
  int64_t wrong = 0;
  for (int64_t i = 0; i < 3; ++i) {
    for (int64_t j = 0; j < 7; ++j) {
      for (int64_t k = 0; k < 1031; ++k) {
        const size_t at = static_cast<size_t>((i * 7 + j) * 1031 + k);
        const float want = cv[static_cast<size_t>(k)] != 0 ? av[static_cast<size_t>(j)] : yv[at];
        wrong += w[at] != want;
      }
    }
  }
  EXPECT_EQ(wrong, 0) << "Where (seed " << seed << ")";
}

TEST(ReferencePieces, AUnaryOpOfAHalfTensorRoundsEachElementOnce) {
  const unsigned seed = testing::test_seed();
  std::mt19937 rng(seed);
  const Tensor x = normal_tensor(DType::kF16, {5, 9001}, rng);
  const Tensor* ins[] = {&x};
  const Tensor got = reference::run_node(node_of("Exp"), ins)[0];
  ASSERT_EQ(got.dtype(), DType::kF16);
  const std::vector<float> xv = x.to_floats(), gv = got.to_floats();
  int64_t wrong = 0;
  for (size_t i = 0; i < xv.size(); ++i) {
    wrong += gv[i] != stored_as(DType::kF16, std::exp(double{xv[i]}));
  }
  EXPECT_EQ(wrong, 0) << "seed " << seed;
}

// MatMul's rows and a grouped, strided, padded Conv's planes are computed in pieces on several
// threads: every element is the double sum, in order, written out here from the definitions.
TEST(ReferencePieces, MatMulRowsAndConvPlanesInPiecesAreTheDefinitionsSums) {
  const unsigned seed = testing::test_seed();
  std::mt19937 rng(seed);
  const Tensor a = normal_tensor(DType::kF32, {2, 1, 37, 300}, rng), b = normal_tensor(DType::kF32, {3, 300, 70}, rng);
  const Tensor* mm[] = {&a, &b};
  const std::vector<float> got = reference::run_node(node_of("MatMul"), mm)[0].to_floats();
  const std::vector<float> av = a.to_floats(), bv = b.to_floats();
  ASSERT_EQ(got.size(), size_t{2 * 3 * 37 * 70});
  int64_t wrong = 0;
  for (int64_t p = 0; p < 2; ++p) {
    for (int64_t q = 0; q < 3; ++q) {
      for (int64_t i = 0; i < 37; ++i) {
        for (int64_t j = 0; j < 70; ++j) {
          double sum = 0;
          for (int64_t k = 0; k < 300; ++k) {
            sum += double{av[static_cast<size_t>((p * 37 + i) * 300 + k)]} * double{bv[static_cast<size_t>((q * 300 + k) * 70 + j)]};
          }
          wrong += got[static_cast<size_t>(((p * 3 + q) * 37 + i) * 70 + j)] != static_cast<float>(sum);
        }
      }
    }
  }
  EXPECT_EQ(wrong, 0) << "MatMul (seed " << seed << ")";

  // Conv: 2 images of 4 channels 60 x 60, 6 filters of 2 channels 3 x 3 in 2 groups, stride 2, pad 1.
  const Tensor x = normal_tensor(DType::kF32, {2, 4, 60, 60}, rng), w = normal_tensor(DType::kF32, {6, 2, 3, 3}, rng);
  const Tensor bias = normal_tensor(DType::kF32, {6}, rng);
  Node conv = node_of("Conv");
  conv.attrs.set("group", int64_t{2});
  conv.attrs.set("strides", std::vector<int64_t>{2, 2});
  conv.attrs.set("pads", std::vector<int64_t>{1, 1, 1, 1});
  conv.attrs.set("kernel_shape", std::vector<int64_t>{3, 3});
  const Tensor* cv[] = {&x, &w, &bias};
  const Tensor out = reference::run_node(conv, cv)[0];
  ASSERT_EQ(out.shape(), (Shape{2, 6, 30, 30}));
  const std::vector<float> o = out.to_floats(), xv = x.to_floats(), wv = w.to_floats(), bsv = bias.to_floats();
  wrong = 0;
  for (int64_t n = 0; n < 2; ++n) {
    for (int64_t oc = 0; oc < 6; ++oc) {
      for (int64_t y = 0; y < 30; ++y) {
        for (int64_t z = 0; z < 30; ++z) {
          double acc = bsv[static_cast<size_t>(oc)];
          for (int64_t c = 0; c < 2; ++c) {
            double s = 0;  // a channel's taps, then added (the reference's order)
            for (int64_t r = 0; r < 3; ++r) {
              for (int64_t t = 0; t < 3; ++t) {
                const int64_t iy = 2 * y - 1 + r, iz = 2 * z - 1 + t;
                if (iy < 0 || iy >= 60 || iz < 0 || iz >= 60) continue;
                const int64_t ic = (oc / 3) * 2 + c;
                s += double{xv[static_cast<size_t>(((n * 4 + ic) * 60 + iy) * 60 + iz)]} *
                     double{wv[static_cast<size_t>(((oc * 2 + c) * 3 + r) * 3 + t)]};
              }
            }
            acc += s;
          }
          wrong += o[static_cast<size_t>(((n * 6 + oc) * 30 + y) * 30 + z)] != static_cast<float>(acc);
        }
      }
    }
  }
  EXPECT_EQ(wrong, 0) << "Conv (seed " << seed << ")";
}

TEST(ReferencePieces, PiecesCoverTheRangeOnceAndOffsetsFromAnyElementMatchTheWholeTable) {
  for (const int64_t n : {int64_t{0}, int64_t{1}, reference::kElementChunk, 3 * reference::kElementChunk + 5}) {
    std::vector<std::atomic<int>> seen(static_cast<size_t>(n));
    reference::for_element_chunks(n, [&](int64_t first, int64_t count) {
      EXPECT_GT(count, 0);
      EXPECT_LE(count, reference::kElementChunk);
      for (int64_t i = first; i < first + count; ++i) ++seen[static_cast<size_t>(i)];
    });
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(seen[static_cast<size_t>(i)].load(), 1) << "element " << i << " of " << n;
  }
  const Shape in{3, 1, 5}, out{2, 3, 4, 5};
  const std::vector<int64_t> whole = reference::broadcast_offsets(in, out);
  for (const int64_t first : {0, 1, 19, 20, 59, 119}) {
    std::vector<int64_t> part(static_cast<size_t>(numel(out) - first));
    reference::broadcast_offsets_from(in, out, first, part);
    EXPECT_TRUE(std::equal(part.begin(), part.end(), whole.begin() + first)) << "from element " << first;
  }
}

}  // namespace
}  // namespace fusetune
