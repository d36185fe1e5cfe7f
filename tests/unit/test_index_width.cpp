// Index arithmetic for the GPU: bounds and C types of index expressions (IndexExpr::range) against
// evaluation at random points, block-uniform constants folded into literals
// (codegen/uniform_constants.h) against evaluation in every block, and the index type's width
// (codegen/index_width.h): int where every value fits, long long where one may not, an error where
// int arithmetic would overflow whatever the index type. The generated text's host runs (the
// compiled-plan and model tests) then check the 32-bit kernels against the reference.
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "codegen/emit.h"
#include "codegen/index_expr.h"
#include "codegen/index_width.h"
#include "codegen/lower_group.h"
#include "codegen/uniform_constants.h"
#include "core/error.h"
#include "planner/tiling.h"
#include "unit/graph_helpers.h"
#include "tests/unit/test_seed.h"

namespace fusetune::codegen {
namespace {

// Variables a (slot 0, int), b (slot 1, int), w (slot 2, long long); buffers x (float) and q
// (long long elements).
IndexExpr parse_abw(const std::string& text) {
  return IndexExpr::parse(text, [](const std::string& name) {
    IndexExpr::Binding b;
    if (name == "a" || name == "b" || name == "w") {
      b.kind = IndexExpr::Binding::Kind::kSlot;
      b.index = name == "a" ? 0 : (name == "b" ? 1 : 2);
    } else if (name == "x" || name == "q") {
      b.kind = IndexExpr::Binding::Kind::kBuffer;
      b.index = name == "x" ? 0 : 1;
      b.bits = name == "x" ? 0 : 64;
    }
    return b;
  });
}

struct Bounded {
  std::vector<ValueRange> slots;
  std::vector<std::string> overflows;
  ValueRange range(const std::string& text, int index_bits = 32) {
    overflows.clear();
    return parse_abw(text).range(slots, index_bits, [&](const std::string& what) { overflows.push_back(what); });
  }
};

// Differential: at random points inside random bounds, every value an expression takes lies in the
// bounds range() gives (when it reported no overflow), for C's operators and the prelude's helpers.
TEST(IndexExpr, RangeHoldsEveryValueTheExpressionTakes) {
  const unsigned seed = testing::test_seed();
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int64_t> end(-400, 400);
  const std::vector<std::string> exprs = {
      "a + b * 3",          "(a - 7) * b",        "a / (b + 401)",      "a % 13",           "ft_fdiv(a, 6)",
      "ft_fmod(a - b, 5)",  "ft_min(a, b) - ft_max(a, 2)",          "a < b ? a * 2 : b - 1", "-a + ~b",
      "(a & 255) + (b | 3)", "a >> 2",            "(a + 500) << 3",     "(int)(w * 2)",     "ft_fdiv(w - a, 7)",
      "(a * b) % 17",       "ft_max(0, a - b + 1)", "(long long)a * 1000000 + w", "a / (a * a + 1)"};
  int checked = 0;
  for (int trial = 0; trial < 300; ++trial) {
    Bounded bounded;
    std::vector<std::pair<int64_t, int64_t>> spans;
    for (int s = 0; s < 3; ++s) {
      int64_t lo = end(rng), hi = end(rng);
      if (lo > hi) std::swap(lo, hi);
      spans.emplace_back(lo, hi);
      bounded.slots.push_back(ValueRange::of(lo, hi, s == 2 ? 64 : 32));
    }
    for (const std::string& text : exprs) {
      const ValueRange r = bounded.range(text);
      if (!bounded.overflows.empty()) continue;
      const IndexExpr e = parse_abw(text);
      for (int point = 0; point < 20; ++point) {
        std::vector<IndexValue> env;
        for (const auto& [lo, hi] : spans) env.emplace_back(std::uniform_int_distribution<int64_t>(lo, hi)(rng));
        const IndexValue v = e.eval(env, [](int, IndexValue) {});
        if (!v) continue;  // a division by zero: not known, and undefined in C
        ++checked;
        EXPECT_TRUE(*v >= r.lo && *v <= r.hi) << text << " = " << *v << " outside [" << r.lo << ", " << r.hi << "] with a="
                                              << *env[0] << " b=" << *env[1] << " w=" << *env[2] << " seed " << seed;
      }
    }
  }
  EXPECT_GT(checked, 50000);
}

// Differential: at random points, every value an expression takes is a multiple of 2^twos(), and
// twos() is as large as its rules say on expressions whose alignment is known.
TEST(IndexExpr, TwosDivideEveryValueTheExpressionTakes) {
  const unsigned seed = testing::test_seed();
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int64_t> any(-100000, 100000);
  const std::vector<std::pair<std::string, int>> exprs = {
      {"a * 8192", 13},           {"a * 8192 + b * 4096 + 2048", 11}, {"(a % 4) * 1024 - 512", 9}, {"-(a * 96)", 5},
      {"(a + 1) << 4", 4},        {"a * 6 * (b * 4)", 3},             {"(int)(a * 64)", 6},        {"a < b ? a * 32 : 64", 5},
      {"ft_min(a * 16, b * 48)", 4}, {"(a * 12) & (b * 8)", 3},       {"a + 1", 0},                {"a / 2 * 4", 2},
      {"0", 62},                   {"a * 0 + 16", 4},                  {"(a * 2) << b", 0}};
  for (const auto& [text, want] : exprs) {
    const IndexExpr e = parse_abw(text);
    EXPECT_EQ(e.twos(), want) << text;
    const int64_t m = int64_t{1} << std::min(e.twos(), 40);
    for (int point = 0; point < 2000; ++point) {
      const std::vector<IndexValue> env = {any(rng), any(rng), any(rng)};
      const IndexValue v = e.eval(env, [](int, IndexValue) {});
      if (!v) continue;
      ASSERT_EQ(*v % m, 0) << text << " = " << *v << " with a=" << *env[0] << " b=" << *env[1] << " seed " << seed;
    }
  }
}

TEST(IndexExpr, RangeTypesAsCDoesAndReportsIntArithmeticThatMayOverflow) {
  Bounded b;
  b.slots = {ValueRange::of(0, 100, 32), ValueRange::of(0, 8, 32), ValueRange::of(0, 1000, 64)};
  ValueRange r = b.range("a * 4 + 3");
  EXPECT_EQ(r.lo, 3);
  EXPECT_EQ(r.hi, 403);
  EXPECT_EQ(r.bits, 32);
  EXPECT_TRUE(b.overflows.empty());
  b.range("a * 30000000");  // 3e9 in int
  EXPECT_EQ(b.overflows.size(), 1u);
  r = b.range("a * 30000000LL");  // long long: no overflow
  EXPECT_TRUE(b.overflows.empty());
  EXPECT_EQ(r.bits, 64);
  EXPECT_EQ(r.hi, 3000000000LL);
  EXPECT_EQ(b.range("3000000000").bits, 64);  // a decimal literal beyond int is long
  EXPECT_EQ(b.range("0xffffffffu").bits, 32);
  EXPECT_EQ(b.range("w + a").bits, 64);
  EXPECT_EQ(b.range("ft_min(a, w)").bits, 64);  // the helpers compute in the common type
  EXPECT_EQ(b.range("ft_min(a, 7)").bits, 32);
  EXPECT_EQ(b.range("(float)a").bits, 0);
  EXPECT_EQ(b.range("x[a] * 2.0f").bits, 0);
  r = b.range("q[a]");
  EXPECT_EQ(r.bits, 64);
  EXPECT_EQ(r.lo, INT64_MIN);  // a loaded value: its type's whole range
  r = b.range("a / b");  // b is 0 in some blocks: where the division runs, it is not
  EXPECT_EQ(r.lo, 0);
  EXPECT_EQ(r.hi, 100);
  r = b.range("ft_fmod(a - 50, 7)");
  EXPECT_EQ(r.lo, 0);
  EXPECT_EQ(r.hi, 6);
  // ft_i is int: a value that may not fit is reported where it is converted.
  b.range("(ft_i)(w * 10000000)");
  EXPECT_EQ(b.overflows.size(), 1u);
  b.range("(ft_i)(w * 10000000)", 64);
  EXPECT_TRUE(b.overflows.empty());
  // The branch a known condition never takes is not computed.
  b.slots[1] = ValueRange::point(0, 32);
  b.range("b == 0 ? a : a * 100000000");
  EXPECT_TRUE(b.overflows.empty());
}

// A prologue as tile_setup writes it: 172 columns in tiles of 16 (the last one 12 wide) by 32 rows
// in tiles of 8, one block per tile.
Kernel tiled_kernel() {
  Kernel k;
  k.name = "k";
  k.threads = 64;
  k.grid = 44;
  k.params = {{"x", DType::kF32, 32 * 172, false}, {"y", DType::kF32, 32 * 172, true}};
  k.uniform = {let(kIndexType, "t1", "ft_fmod(ft_fdiv(ft_block - 0, 1), 11)"),
               let(kIndexType, "lo1", "t1 * 16"),
               let(kIndexType, "hi1", "ft_min(lo1 + 16, 172) - 1"),
               let(kIndexType, "t0", "ft_fmod(ft_fdiv(ft_block - 0, 11), 4)"),
               let(kIndexType, "lo0", "t0 * 8"),
               let(kIndexType, "hi0", "ft_min(lo0 + 8, 32) - 1"),
               let(kIndexType, "n0", "ft_max(0, hi0 - lo0 + 1)"),
               let(kIndexType, "n1", "ft_max(0, hi1 - lo1 + 1)"),
               let(kIndexType, "unread", "n0 * n1 + t1")};
  k.body = {thread_for("ft_e", "0", "n0 * n1",
                       {store("y", "(lo0 + ft_e / n1) * 172 + lo1 + ft_e % n1", "x[(lo0 + ft_e / n1) * 172 + lo1 + ft_e % n1]")})};
  return k;
}

std::vector<int64_t> blocks_of(const Kernel& k) {
  std::vector<int64_t> b(static_cast<size_t>(k.grid));
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<int64_t>(i);
  return b;
}

// Every let's value in every block, by evaluating the prologue.
std::map<std::string, std::vector<IndexValue>> prologue_values(const Kernel& k) {
  std::map<std::string, int> slot;
  std::vector<IndexExpr> exprs;
  for (const Stmt& s : k.uniform) {
    exprs.push_back(IndexExpr::parse(s.a, [&](const std::string& name) {
      IndexExpr::Binding b;
      if (name == "ft_block") b = {IndexExpr::Binding::Kind::kSlot, 0};
      else if (slot.count(name)) b = {IndexExpr::Binding::Kind::kSlot, slot.at(name)};
      return b;
    }));
    slot[s.name] = static_cast<int>(exprs.size());
  }
  std::map<std::string, std::vector<IndexValue>> out;
  for (int64_t block : blocks_of(k)) {
    std::vector<IndexValue> env(exprs.size() + 1);
    env[0] = block;
    for (size_t i = 0; i < exprs.size(); ++i) {
      env[i + 1] = exprs[i].eval(env, [](int, IndexValue) {});
      out[k.uniform[i].name].push_back(env[i + 1]);
    }
  }
  return out;
}

TEST(UniformConstants, FoldsWhatEveryBlockAgreesOnAndDropsWhatNothingReads) {
  const Kernel before = tiled_kernel();
  Kernel k = before;
  const FoldResult r = fold_uniform_constants(k, blocks_of(k));
  EXPECT_EQ(r.lets, 9);
  std::map<std::string, std::string> value;
  for (const Stmt& s : k.uniform) value[s.name] = s.a;
  EXPECT_EQ(value.at("n0"), "8");  // 32 rows in tiles of 8: every tile whole
  EXPECT_EQ(value.at("n1"), "ft_max(0, hi1 - lo1 + 1)");  // 16 or 12 columns: kept
  EXPECT_EQ(r.bounds.at("n1"), std::make_pair(int64_t{12}, int64_t{16}));
  EXPECT_EQ(r.bounds.at("lo0"), std::make_pair(int64_t{0}, int64_t{24}));
  EXPECT_EQ(value.count("unread"), 0u) << "a let nothing reads stays";
  EXPECT_EQ(value.count("hi0"), 0u) << "hi0 is read only by n0, now a literal";
  EXPECT_EQ(r.dropped, 2);  // unread, then hi0 (n0 no longer reads it); lo0 and t0 are still read
  // Differential: every let left has the value it had, in every block.
  const auto was = prologue_values(before), now = prologue_values(k);
  for (const auto& [name, values] : now) EXPECT_EQ(values, was.at(name)) << name;
  // Within the budget only: nothing is folded when the coordinates cannot be enumerated.
  Kernel tight = before;
  EXPECT_EQ(fold_uniform_constants(tight, blocks_of(tight), 10).folded, 0);
}

TEST(IndexWidth, IntWhereEveryIndexFitsLongLongWhereOneMayNot) {
  Kernel k = tiled_kernel();
  const FoldResult folded = fold_uniform_constants(k, blocks_of(k));
  EXPECT_EQ(choose_index_width(k, blocks_of(k), folded.bounds).bits, 32);
  EXPECT_EQ(k.index_bits, 32);
  EXPECT_NE(emit_cuda({k}).find("typedef int ft_i;"), std::string::npos);
  // The same kernel on a tensor of 3 * 2^30 elements: its flattened index leaves int's range.
  Kernel big = tiled_kernel();
  big.params = {{"x", DType::kF32, int64_t{3} << 30, false}, {"y", DType::kF32, int64_t{3} << 30, true}};
  big.body = {thread_for("ft_e", "0", "n0 * n1",
                         {store("y", "(lo0 + ft_e / n1) * 100000000 + lo1", "x[(lo0 + ft_e / n1) * 100000000 + lo1]")})};
  const IndexWidth w = choose_index_width(big, blocks_of(big));
  EXPECT_EQ(w.bits, 64);
  EXPECT_NE(w.reason.find("multiplication"), std::string::npos) << w.reason;
  EXPECT_NE(emit_cuda({big}).find("typedef long long ft_i;"), std::string::npos);
  // A loop whose last increment would pass int's range.
  Kernel edge = tiled_kernel();
  edge.body = {thread_for("ft_e", "0", "2147483600", {store("y", "0", "1.0f")})};
  EXPECT_EQ(choose_index_width(edge, blocks_of(edge)).bits, 64);
  // int arithmetic that overflows whatever ft_i is: a lowering bug, named.
  Kernel bad = tiled_kernel();
  bad.body = {thread_for("ft_e", "0", "8", {store("y", "ft_thread * 100000000", "1.0f")})};
  try {
    choose_index_width(bad, blocks_of(bad));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("kernel k"), std::string::npos) << e.what();
  }
}

// A lowered group over a tensor too large for int indices gets long long ones; the same group over
// a small tensor gets int ones.
TEST(IndexWidth, LoweringChoosesTheWidthFromTheShapes) {
  for (const int64_t rows : {int64_t{1}, int64_t{2049}}) {  // 2^20 elements, and 2^20 more than 2^31
    Graph g;
    const int x = testing::add_input(g, "x", DType::kF32, {rows, int64_t{1} << 20});
    testing::add_op(g, "Relu", {x});
    const planner::FusionGroup group = testing::whole_graph_group(g);
    const LoweredKernel lk = lower_group(g, group, planner::TileConfig{{1, 4096}, 0, 256, 1}, "relu");
    EXPECT_EQ(lk.kernel.index_bits, rows == 1 ? 32 : 64) << rows << " rows";
  }
}

}  // namespace
}  // namespace fusetune::codegen
