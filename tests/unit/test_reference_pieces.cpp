// The reference's element-wise kernels stream large tensors in pieces (reference/kernel_util.h
// for_element_chunks, on several threads): every element of an output spanning several pieces,
// with operands broadcast along different axes and a piece boundary inside a row, equals the op
// applied to the operands numpy's broadcasting names, computed here element by element from the
// indices; and the pieces cover the range exactly once.
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
