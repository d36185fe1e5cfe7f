// The index evaluator (codegen/index_expr.h) against C's arithmetic and the prelude's helpers,
// its relation of values under two environments (IndexExpr::shift) against evaluation in both,
// and barrier elision by ownership (codegen/barrier_ownership.h) on hand-written kernels: a
// barrier between stages whose threads touch only their own elements goes, one that hands an
// element to another thread (read-after-write or write-after-read) stays, removal grows the
// interval the next barrier guards, a uniform loop's barriers go only when no iteration hands an
// element over, blocks that are translates of one analysed are not run again (and one that is not
// is), and the analysis keeps everything it cannot know. The host
// executor then runs what is left with its race checks.
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <random>
#include <set>
#include <utility>

#include "codegen/barrier_ownership.h"
#include "codegen/emit.h"
#include "codegen/index_expr.h"
#include "core/error.h"
#include "simt/executor.h"
#include "simt/module.h"
#include "tests/unit/test_seed.h"

namespace fusetune::codegen {
namespace {

// Variables a, b, n in slots 0..2; buffers x (0) and y (1).
struct Env {
  std::vector<IndexValue> slots = {IndexValue(10), IndexValue(-7), IndexValue(4)};
  std::vector<std::pair<int, IndexValue>> loads;

  IndexValue eval(const std::string& text) {
    const IndexExpr e = IndexExpr::parse(text, [](const std::string& name) {
      static const std::map<std::string, IndexExpr::Binding> names = {
          {"a", {IndexExpr::Binding::Kind::kSlot, 0}},   {"b", {IndexExpr::Binding::Kind::kSlot, 1}},
          {"n", {IndexExpr::Binding::Kind::kSlot, 2}},   {"x", {IndexExpr::Binding::Kind::kBuffer, 0}},
          {"y", {IndexExpr::Binding::Kind::kBuffer, 1}}, {"tl", {IndexExpr::Binding::Kind::kLocalArray, -1}}};
      const auto it = names.find(name);
      return it == names.end() ? IndexExpr::Binding{} : it->second;
    });
    loads.clear();
    return e.eval(slots, [&](int buffer, IndexValue index) { loads.emplace_back(buffer, index); });
  }
};

TEST(IndexExpr, IntegerArithmeticCastsAndHelpersAsCComputesThem) {
  Env env;
  EXPECT_EQ(env.eval("((int)a / (int)(4LL)) % (int)3LL"), 2);
  EXPECT_EQ(env.eval("a * n - b"), 47);
  EXPECT_EQ(env.eval("b / 2"), -3);  // C truncates
  EXPECT_EQ(env.eval("ft_fdiv(b, 2LL)"), -4);  // the prelude floors
  EXPECT_EQ(env.eval("ft_fmod(b, 2LL)"), 1);
  EXPECT_EQ(env.eval("ft_min(a, n) + ft_max(a, n)"), 14);
  EXPECT_EQ(env.eval("(int)5000000000LL"), static_cast<int64_t>(static_cast<int32_t>(5000000000LL)));
  EXPECT_EQ(env.eval("(unsigned)b"), 4294967289LL);
  EXPECT_EQ(env.eval("a > n ? a << 2 : 0LL"), 40);
  EXPECT_EQ(env.eval("!(a == 10) || (n & 1) != 0"), 0);
  EXPECT_EQ(env.eval("0x10u + -a"), 6);
  EXPECT_EQ(env.eval("ft_aligned16(x, a + 2)"), 1);
  EXPECT_FALSE(env.eval("(0.5f)").has_value());
  EXPECT_FALSE(env.eval("(float)a").has_value());
  EXPECT_FALSE(env.eval("a / (n - 4)").has_value());  // division by zero: not known
  EXPECT_FALSE(env.eval("unknown_name + 1").has_value());
  EXPECT_FALSE(env.eval("expf(1.0f) > 0.0f").has_value());
}

TEST(IndexExpr, LoadsAreReportedAsCEvaluatesThemAndBothSidesWhenTheConditionIsUnknown) {
  Env env;
  EXPECT_FALSE(env.eval("x[a + 1] * 2.0f").has_value());
  ASSERT_EQ(env.loads.size(), 1u);
  EXPECT_EQ(env.loads[0], std::make_pair(0, IndexValue(11)));
  env.eval("a < n && x[a] > 0.0f");  // short-circuit: never loads
  EXPECT_TRUE(env.loads.empty());
  env.eval("a > n ? x[1] : y[2]");
  ASSERT_EQ(env.loads.size(), 1u);
  EXPECT_EQ(env.loads[0].first, 0);
  env.eval("x[0] > 0.0f ? y[a] : y[(long long)x[3]]");  // unknown condition: both sides
  ASSERT_EQ(env.loads.size(), 4u);
  EXPECT_EQ(env.loads[1], std::make_pair(1, IndexValue(10)));
  EXPECT_EQ(env.loads[3], std::make_pair(1, IndexValue()));  // an index loaded from memory
  env.eval("tl[a] + 1.0f");  // a thread-local array: no memory access
  EXPECT_TRUE(env.loads.empty());
}

IndexExpr parse_abnx(const std::string& text) {
  return IndexExpr::parse(text, [](const std::string& name) {
    static const std::map<std::string, IndexExpr::Binding> names = {
        {"a", {IndexExpr::Binding::Kind::kSlot, 0}},
        {"b", {IndexExpr::Binding::Kind::kSlot, 1}},
        {"n", {IndexExpr::Binding::Kind::kSlot, 2, true}},  // invariant: a known factor
        {"x", {IndexExpr::Binding::Kind::kBuffer, 0}},
        {"y", {IndexExpr::Binding::Kind::kBuffer, 1}}};
    const auto it = names.find(name);
    return it == names.end() ? IndexExpr::Binding{} : it->second;
  });
}

// a moves by 6 between the two environments, b moves by nothing known, n stays (4).
struct Related {
  std::vector<Shift> slots = {Shift::of(6), Shift::other(), Shift::same()};
  std::vector<IndexValue> first = {IndexValue(10), IndexValue(-7), IndexValue(4)};
  std::vector<std::pair<int, Shift>> loads;

  Shift shift(const std::string& text) {
    loads.clear();
    return parse_abnx(text).shift(slots, first, [&](int buffer, Shift index) { loads.emplace_back(buffer, index); });
  }
};

TEST(IndexExpr, ShiftRelatesAValueInTwoEnvironmentsWithoutEvaluatingIt) {
  Related r;
  EXPECT_EQ(r.shift("a + 1LL"), Shift::of(6));
  EXPECT_EQ(r.shift("(a + 3LL) - a"), Shift::same());
  EXPECT_EQ(r.shift("a * 4LL"), Shift::of(24));
  EXPECT_EQ(r.shift("n * a"), Shift::of(24));  // an invariant factor is evaluated
  EXPECT_EQ(r.shift("a * a"), Shift::other());
  EXPECT_EQ(r.shift("ft_fdiv(a, 3LL)"), Shift::of(2));
  EXPECT_EQ(r.shift("ft_fmod(a, 3LL)"), Shift::same());
  EXPECT_EQ(r.shift("ft_fdiv(a, 4LL)"), Shift::other());  // 4 does not divide 6
  EXPECT_EQ(r.shift("a / 1LL"), Shift::of(6));
  EXPECT_EQ(r.shift("a / 2LL"), Shift::other());  // C truncates towards zero: not a translate
  EXPECT_EQ(r.shift("ft_min(a, a + 2LL)"), Shift::of(6));
  EXPECT_EQ(r.shift("ft_min(a, n)"), Shift::other());
  EXPECT_EQ(r.shift("a < a + n"), Shift::same());
  EXPECT_EQ(r.shift("a < n"), Shift::other());
  EXPECT_EQ(r.shift("(long long)a"), Shift::of(6));
  EXPECT_EQ(r.shift("(int)a"), Shift::other());
  EXPECT_EQ(r.shift("b - 1LL"), Shift::other());
  EXPECT_EQ(r.shift("expf((float)b)"), Shift::same());  // unknown in both
  EXPECT_EQ(r.shift("x[a - n] * 2.0f"), Shift::same());
  ASSERT_EQ(r.loads.size(), 1u);
  EXPECT_EQ(r.loads[0], std::make_pair(0, Shift::of(6)));
  r.shift("a < n ? x[a] : y[0LL]");  // a branch that may go either way: its loads relate by nothing
  ASSERT_EQ(r.loads.size(), 2u);
  EXPECT_EQ(r.loads[0].second, Shift::other());
  EXPECT_EQ(r.loads[1].second, Shift::other());
}

// Differential: for random values related as the slots say, what shift() reports holds between
// the two evaluations.
TEST(IndexExpr, ARelationShiftReportsHoldsBetweenTheTwoEvaluations) {
  const unsigned seed = testing::test_seed();
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int64_t> value(-300, 300), step(-12, 12);
  const std::vector<std::string> exprs = {
      "a + b * n",         "(a - 3LL) * n + 7LL",  "ft_fdiv(a, n) * n",       "ft_fmod(a + b, n)",
      "a / 1LL - a % 1LL", "ft_max(a, a + n) - a", "(a < a + 1LL) + (b == b)", "a + 2LL < n ? b : b + 1LL",
      "ft_min(a + n, a - n) * 3LL", "(long long)(a * 2LL) - b"};
  int related = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const int64_t d = step(rng);
    const std::vector<Shift> slots = {Shift::of(d), Shift::same(), Shift::same()};
    std::vector<IndexValue> first = {value(rng), value(rng), IndexValue(std::max<int64_t>(1, step(rng) + 13))};
    std::vector<IndexValue> second = first;
    *second[0] += d;
    for (const std::string& text : exprs) {
      const IndexExpr e = parse_abnx(text);
      const Shift s = e.shift(slots, first, [](int, Shift) {});
      if (!s.known()) continue;
      ++related;
      const IndexValue v1 = e.eval(first, [](int, IndexValue) {}), v2 = e.eval(second, [](int, IndexValue) {});
      ASSERT_EQ(v1.has_value(), v2.has_value()) << text << " seed " << seed;
      if (v1) {
        EXPECT_EQ(*v2, *v1 + s.offset()) << text << " a=" << *first[0] << " d=" << d << " b=" << *first[1]
                                         << " n=" << *first[2] << " seed " << seed;
      }
    }
  }
  EXPECT_GT(related, 400);  // most relations are known, so the test checks something
}

// A run's first element a, a multiple of 8, moved by 0 <= d < 8 (the run's lanes): comparisons
// and floor divisions against multiples of 8 do not change, remainders move by d; against other
// values, or moved by 8 or more, or without the alignment, nothing is known.
TEST(IndexExpr, AnAlignedRunsLanesCompareAndDivideAsItsFirst) {
  const std::vector<IndexValue> first = {IndexValue(16), IndexValue(-7), IndexValue(4)};
  const std::vector<int> aligned = {3};  // a: a multiple of 8
  const auto shift = [&](const std::string& text, int64_t d, const std::vector<int>& al) {
    return parse_abnx(text).shift({Shift::of(d), Shift::same(), Shift::same()}, first, [](int, Shift) {}, al);
  };
  for (int64_t d = 1; d < 8; ++d) {
    EXPECT_EQ(shift("a < 64LL", d, aligned), Shift::same()) << d;
    EXPECT_EQ(shift("(a + -8LL) >= 0LL", d, aligned), Shift::same()) << d;
    EXPECT_EQ(shift("24LL > a", d, aligned), Shift::same()) << d;
    EXPECT_EQ(shift("ft_fdiv(a + 8LL, 32LL)", d, aligned), Shift::same()) << d;
    EXPECT_EQ(shift("ft_fmod(a + 8LL, 32LL)", d, aligned), Shift::of(d)) << d;
    EXPECT_EQ(shift("(a >= 0LL && a < 8LL) && b < 3LL", d, aligned), Shift::same()) << d;
    EXPECT_EQ(shift("a <= 64LL", d, aligned), Shift::other()) << d;  // a = 64: true, a + d: false
    // 60 is a multiple of 4, not of 8: the lanes up to 3 compare alike, no further.
    EXPECT_EQ(shift("a < 60LL", d, aligned), d < 4 ? Shift::same() : Shift::other()) << d;
    EXPECT_EQ(shift("a < n", d, aligned), Shift::other()) << d;      // n's alignment is not known
    EXPECT_EQ(shift("a < 64LL", d, {}), Shift::other()) << d;
    EXPECT_EQ(shift("ft_fmod(a, 12LL)", d, aligned), d < 4 ? Shift::of(d) : Shift::other()) << d;
  }
  EXPECT_EQ(shift("a < 64LL", 8, aligned), Shift::other());
  EXPECT_EQ(shift("a < 64LL", -1, aligned), Shift::other());
  EXPECT_EQ(shift("ft_fmod(a + 8LL, 32LL)", 8, aligned), Shift::other());
}

// Differential: a a random multiple of 2^t, moved by a random 0 <= d < 2^t; what shift() reports
// with the alignment holds between the two evaluations.
TEST(IndexExpr, ARelationOfAnAlignedRunHoldsBetweenTheTwoEvaluations) {
  const unsigned seed = testing::test_seed();
  std::mt19937 rng(seed);
  const std::vector<std::string> exprs = {
      "a < 64LL",          "(a - 16LL) >= 0LL",         "ft_fmod(a + 32LL, 64LL)", "ft_fdiv(a - 8LL, 16LL)",
      "ft_fmod(a, 8LL) + ft_fdiv(a, 8LL)", "128LL > a + 8LL", "a + 16LL <= 0LL", "(a < 32LL) ? a + 32LL : a - 32LL"};
  int related = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const int t = std::uniform_int_distribution<int>(0, 5)(rng);
    const int64_t d = std::uniform_int_distribution<int64_t>(0, (int64_t{1} << t) - 1)(rng);
    const int64_t a = std::uniform_int_distribution<int64_t>(-20, 20)(rng) * (int64_t{1} << t);
    const std::vector<IndexValue> first = {IndexValue(a), IndexValue(0), IndexValue(1)};
    std::vector<IndexValue> second = first;
    *second[0] += d;
    for (const std::string& text : exprs) {
      const IndexExpr e = parse_abnx(text);
      const Shift s = e.shift({Shift::of(d), Shift::same(), Shift::same()}, first, [](int, Shift) {}, {t});
      if (!s.known()) continue;
      ++related;
      const IndexValue v1 = e.eval(first, [](int, IndexValue) {}), v2 = e.eval(second, [](int, IndexValue) {});
      ASSERT_TRUE(v1 && v2) << text;
      EXPECT_EQ(*v2, *v1 + s.offset()) << text << " a=" << a << " d=" << d << " t=" << t << " seed " << seed;
    }
  }
  EXPECT_GT(related, 1000);
}

TEST(IndexExpr, WhatItCannotReadIsAnErrorNamingTheExpression) {
  Env env;
  try {
    env.eval("a @ b");
    ADD_FAILURE() << "parsed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'a @ b'"), std::string::npos) << e.what();
  }
}

// A kernel of 64 threads over x[64] -> y[64] with a 64-float shared buffer s.
Kernel staged(Block body, int64_t grid = 1) {
  Kernel k;
  k.name = "k";
  k.threads = 64;
  k.grid = grid;
  k.params = {{"x", DType::kF32, 64, false}, {"y", DType::kF32, 64, true}};
  k.add_shared("s", DType::kF32, 64);
  k.body = std::move(body);
  return k;
}

int barriers(const Block& b) {
  int n = 0;
  for (const Stmt& s : b) n += s.kind == Stmt::Kind::kBarrier ? 1 : barriers(s.body) + barriers(s.orelse);
  return n;
}

// Runs k (x and y of one size) on the host executor with its checks: the findings (empty: no
// hazard) and y.
std::pair<std::vector<std::string>, std::vector<float>> execute(const Kernel& k) {
  simt::Module m(emit_cuda({k}));
  const auto elements = static_cast<size_t>(k.params[0].elements);
  std::vector<float> x(elements), y(elements, 0.0f);
  for (size_t i = 0; i < elements; ++i) x[i] = static_cast<float>(i);
  const simt::LaunchResult r = simt::launch(m.kernel("k"), {x.data(), y.data()}, {elements * 4, elements * 4},
                                            {k.grid, k.threads, k.shared_bytes}, {});
  return {r.findings, y};
}

TEST(BarrierOwnership, ABarrierBetweenStagesOfTheSameThreadMappingGoes) {
  Kernel k = staged({thread_for("ft_e", "0LL", "64LL", {store("s", "ft_e", "x[ft_e] * 2.0f")}), barrier(),
                     thread_for("ft_e", "0LL", "64LL", {store("y", "ft_e", "s[ft_e] + 1.0f")})});
  const auto before = execute(k);
  const OwnershipResult r = remove_unordering_barriers(k, {0});
  EXPECT_TRUE(r.analysed) << r.reason;
  EXPECT_EQ(r.removed, 1);
  EXPECT_EQ(barriers(k.body), 0);
  const auto after = execute(k);
  EXPECT_TRUE(after.first.empty()) << after.first.front();
  EXPECT_EQ(after.second, before.second);
}

TEST(BarrierOwnership, ABarrierThatHandsAnElementToAnotherThreadStays) {
  // Read-after-write: each thread reads its neighbour's element.
  Kernel raw = staged({thread_for("ft_e", "0LL", "64LL", {store("s", "ft_e", "x[ft_e]")}), barrier(),
                       thread_for("ft_e", "0LL", "64LL", {store("y", "ft_e", "s[(ft_e + 1LL) % 64LL]")})});
  EXPECT_EQ(remove_unordering_barriers(raw, {0}).removed, 0);
  // Write-after-read: the second barrier keeps thread t's read of s[63 - t] before thread 63 - t
  // overwrites it.
  Kernel war = staged({thread_for("ft_e", "0LL", "64LL", {store("s", "ft_e", "x[ft_e]")}), barrier(),
                       thread_for("ft_e", "0LL", "64LL", {store("y", "ft_e", "s[63LL - ft_e]")}), barrier(),
                       thread_for("ft_e", "0LL", "64LL", {store("s", "ft_e", "0.0f")})});
  const OwnershipResult r = remove_unordering_barriers(war, {0});
  EXPECT_TRUE(r.analysed) << r.reason;
  EXPECT_EQ(r.removed, 0);
  // A thread-strided loop over 128 elements with 64 threads: element e belongs to thread e % 64
  // in both stages.
  Kernel strided = staged({thread_for("ft_e", "0LL", "128LL", {store("y", "ft_e % 64LL", "1.0f")}), barrier(),
                           thread_for("ft_e", "64LL", "128LL", {store("y", "ft_e - 64LL", "2.0f")})});
  EXPECT_EQ(remove_unordering_barriers(strided, {0}).removed, 1);  // global output buffers count too
}

TEST(BarrierOwnership, ARemovedBarrierGrowsTheIntervalTheNextOneGuards) {
  // Stage 1 writes s[t], stage 2 reads s[t] (its own: the first barrier goes), stage 3 reads
  // s[t + 1], written in stage 1: the second barrier orders that and stays.
  Kernel k = staged({thread_for("ft_e", "0LL", "64LL", {store("s", "ft_e", "x[ft_e]")}), barrier(),
                     thread_for("ft_e", "0LL", "64LL", {store("y", "ft_e", "s[ft_e]")}), barrier(),
                     thread_for("ft_e", "0LL", "63LL", {store("y", "ft_e", "s[ft_e + 1LL]")})});
  const OwnershipResult r = remove_unordering_barriers(k, {0});
  EXPECT_EQ(r.removed, 1);
  ASSERT_EQ(k.body.size(), 4u);
  EXPECT_EQ(k.body[1].kind, Stmt::Kind::kFor);
  EXPECT_EQ(k.body[2].kind, Stmt::Kind::kBarrier);
  const auto ran = execute(k);
  EXPECT_TRUE(ran.first.empty()) << ran.first.front();
}

// A uniform loop's barriers order one iteration against the next as well as the stages inside it:
// every iteration is run, and a barrier goes only when no iteration hands an element over.
TEST(BarrierOwnership, AUniformLoopsBarriersGoOnlyWhenNoIterationHandsOver) {
  const auto loop = [](const std::string& trips, const std::string& read, Block after) {
    Block body = {uniform_for("ft_ks", "0LL", trips,
                              {thread_for("ft_e", "0LL", "64LL", {store("s", "ft_e", "x[ft_e] + (float)ft_ks")}), barrier(),
                               thread_for("ft_e", "0LL", "64LL", {store("y", "ft_e", "y[ft_e] + s[" + read + "]")}),
                               barrier()})};
    for (Stmt& st : after) body.push_back(std::move(st));
    return staged(std::move(body));
  };
  // Each thread reads its own element in both iterations: both barriers go.
  Kernel own = loop("2LL", "ft_e", {});
  const auto before = execute(own);
  OwnershipResult r = remove_unordering_barriers(own, {0});
  EXPECT_TRUE(r.analysed) << r.reason;
  EXPECT_EQ(r.removed, 2);
  EXPECT_EQ(barriers(own.body[0].body), 0);
  const auto after = execute(own);
  EXPECT_TRUE(after.first.empty()) << after.first.front();
  EXPECT_EQ(after.second, before.second);
  // Thread t reads s[63 - t]: the first barrier orders the read after the write (RAW); with two
  // iterations the second orders it before the next iteration's write (WAR): both stay.
  Kernel crossed = loop("2LL", "63LL - ft_e", {});
  r = remove_unordering_barriers(crossed, {0});
  EXPECT_TRUE(r.analysed) << r.reason;
  EXPECT_EQ(r.removed, 0);
  // One iteration, and what follows the loop touches only the thread's own y element: the
  // second barrier orders nothing and goes; the first stays.
  Kernel once = loop("1LL", "63LL - ft_e", {thread_for("ft_e", "0LL", "64LL", {store("y", "ft_e", "y[ft_e] * 2.0f")})});
  const auto once_before = execute(once);
  r = remove_unordering_barriers(once, {0});
  EXPECT_EQ(r.removed, 1);
  ASSERT_EQ(once.body[0].body.size(), 3u);
  EXPECT_EQ(once.body[0].body[1].kind, Stmt::Kind::kBarrier);
  const auto once_after = execute(once);
  EXPECT_TRUE(once_after.first.empty()) << once_after.first.front();
  EXPECT_EQ(once_after.second, once_before.second);
  // One iteration, then thread t stores to s[t], which thread 63 - t read in the loop: a
  // write-after-read across the second barrier, which stays.
  Kernel war = loop("1LL", "63LL - ft_e", {thread_for("ft_e", "0LL", "64LL", {store("s", "ft_e", "0.0f")})});
  EXPECT_EQ(remove_unordering_barriers(war, {0}).removed, 0);
}

// A ring of two slots filled by cp.async (flash attention's key tiles): iteration i issues the
// copies of tile i + 1 into the slot tile i - 1 was read from, and waits for tile i's. The copy
// may write from its issue on, so the barrier ending iteration i - 1 (after its reads) orders
// those reads before the next iteration's issue and stays, though the copy lands an iteration
// later; deleted, the host executor reports the write-after-read.
TEST(BarrierOwnership, ACopyInFlightWritesFromItsIssue) {
  const auto copy = [](const std::string& slot) {
    return thread_for("ft_e", "0LL", "8LL", {copy_async("s", slot + " * 32LL + ft_e * 4LL", "x", "ft_e * 4LL", "16")});
  };
  Block tile = {if_then("ft_kt + 1LL < 4LL", {copy("((ft_kt + 1LL) & 1LL)")}), copy_async_commit(), copy_async_wait(1), barrier(),
                thread_for("ft_e", "0LL", "64LL", {store("y", "ft_e", "y[ft_e] + s[(ft_kt & 1LL) * 32LL + (63LL - ft_e) % 32LL]")}),
                barrier()};
  Kernel k = staged({copy("0LL"), copy_async_commit(), uniform_for("ft_kt", "0LL", "4LL", tile)});
  const OwnershipResult r = remove_unordering_barriers(k, {0});
  EXPECT_TRUE(r.analysed) << r.reason;
  EXPECT_EQ(r.removed, 0) << to_text(k);
  const auto ran = execute(k);
  EXPECT_TRUE(ran.first.empty()) << ran.first.front();
  for (size_t e = 0; e < 64; ++e) EXPECT_EQ(ran.second[e], 4.0f * static_cast<float>((63 - e) % 32)) << e;
  k.body.back().body.pop_back();  // the barrier ending the iteration
  const auto raced = execute(k);
  ASSERT_FALSE(raced.first.empty());
  EXPECT_NE(raced.first.front().find("hazard"), std::string::npos) << raced.first.front();
}

// When running every iteration of a loop exceeds the budget, the top-level barriers are still
// decided, with the loop's barriers kept (its middle iterations not run).
TEST(BarrierOwnership, ALoopTooLongToRunStillLetsTheTopLevelBarriersGo) {
  const auto kernel = [] {
    return staged({thread_for("ft_e", "0LL", "64LL", {store("s", "ft_e", "x[ft_e]")}), barrier(),
                   thread_for("ft_e", "0LL", "64LL", {store("y", "ft_e", "s[ft_e]")}),
                   uniform_for("ft_ks", "0LL", "50LL",
                               {thread_for("ft_e", "0LL", "64LL", {store("s", "ft_e", "(float)ft_ks")}), barrier(),
                                thread_for("ft_e", "0LL", "64LL", {store("y", "ft_e", "y[ft_e] + s[63LL - ft_e]")}),
                                barrier()})});
  };
  Kernel roomy = kernel();
  OwnershipResult r = remove_unordering_barriers(roomy, {0});
  EXPECT_TRUE(r.analysed) << r.reason;
  EXPECT_EQ(r.removed, 1);  // the loop's barriers hand elements over
  // 64 threads x 50 iterations x 7 steps do not fit in 5,000; the shortcut's first and last
  // iterations do.
  Kernel tight = kernel();
  r = remove_unordering_barriers(tight, {0}, 5000);
  EXPECT_TRUE(r.analysed) << r.reason;
  EXPECT_EQ(r.removed, 1);
  EXPECT_EQ(barriers(tight.body), 2);
  const auto ran = execute(tight);
  EXPECT_TRUE(ran.first.empty()) << ran.first.front();
}

TEST(BarrierOwnership, WhatItCannotKnowKeepsEveryBarrier) {
  // An index loaded from memory.
  Kernel gather = staged({thread_for("ft_e", "0LL", "64LL", {store("s", "(long long)x[ft_e] % 64LL", "1.0f")}),
                          barrier(), thread_for("ft_e", "0LL", "64LL", {store("y", "ft_e", "s[ft_e]")})});
  OwnershipResult r = remove_unordering_barriers(gather, {0});
  EXPECT_FALSE(r.analysed);
  EXPECT_NE(r.reason.find("'s'"), std::string::npos) << r.reason;
  EXPECT_EQ(barriers(gather.body), 1);
  // More accesses than the budget.
  Kernel big = staged({thread_for("ft_e", "0LL", "64LL", {store("s", "ft_e", "1.0f")}), barrier(),
                       thread_for("ft_e", "0LL", "64LL", {store("y", "ft_e", "s[ft_e]")})});
  r = remove_unordering_barriers(big, {0}, 100);
  EXPECT_FALSE(r.analysed);
  EXPECT_EQ(barriers(big.body), 1);
}

TEST(BarrierOwnership, EveryBlockGivenIsAnalysed) {
  // Block 0's region has 64 elements, block 1's 32 (a clipped edge): thread t reads s[t % n], its
  // own element in block 0 only.
  Kernel k = staged({thread_for("ft_e", "0LL", "n", {store("s", "ft_e", "x[ft_e]")}), barrier(),
                     thread_for("ft_e", "0LL", "64LL", {store("y", "ft_e", "s[ft_e % n]")})},
                    2);
  k.uniform = {let("long long", "n", "ft_block == 0LL ? 64LL : 32LL")};
  Kernel interior = k;
  EXPECT_EQ(remove_unordering_barriers(interior, {0}).removed, 1);
  EXPECT_EQ(remove_unordering_barriers(k, {0, 1}).removed, 0);
}

// A grid of tiles: block b stages x[64b ..] in s (at `write`) and writes y[64b ..] from s (at
// `read`); with the defaults every block is the first moved by 64 elements, so one is run and the
// others are known to hand over what it does.
Kernel tiled(const std::string& read, const std::string& write = "ft_e % 64LL") {
  Kernel k = staged({thread_for("ft_e", "0LL", "128LL", {store("s", write, "x[lo + ft_e % 64LL]")}), barrier(),
                     thread_for("ft_e", "0LL", "64LL", {store("y", "lo + ft_e", "s[" + read + "]")})},
                    16);
  k.params = {{"x", DType::kF32, 16 * 64, false}, {"y", DType::kF32, 16 * 64, true}};
  k.uniform = {let("long long", "lo", "ft_block * 64LL")};
  return k;
}

TEST(BarrierOwnership, BlocksThatAreTranslatesOfOneAnalysedAreNotRunAgain) {
  std::vector<int64_t> blocks(16);
  for (size_t b = 0; b < blocks.size(); ++b) blocks[b] = static_cast<int64_t>(b);
  Kernel k = tiled("ft_e");
  const auto before = execute(k);
  // One block takes some 450 steps: 16 of them would not fit in 1,000.
  OwnershipResult r = remove_unordering_barriers(k, blocks, 1000);
  EXPECT_TRUE(r.analysed) << r.reason;
  EXPECT_EQ(r.translates, 15);
  EXPECT_EQ(r.removed, 1);
  const auto after = execute(k);
  EXPECT_TRUE(after.first.empty()) << after.first.front();
  EXPECT_EQ(after.second, before.second);
  // Block b stages and reads s rotated by b mod 2: odd blocks are no translate of block 0 (s's
  // index moves by 1 and wraps) but hand nothing over either.
  const std::string rotated = "(ft_e + ft_fmod(ft_block, 2LL)) % 64LL";
  Kernel turned = tiled(rotated, rotated);
  r = remove_unordering_barriers(turned, blocks);
  EXPECT_TRUE(r.analysed) << r.reason;
  EXPECT_EQ(r.translates, 14);  // every even block translates block 0, every odd one block 1
  EXPECT_EQ(r.removed, 1);
  const auto unraced = execute(turned);
  EXPECT_TRUE(unraced.first.empty()) << unraced.first.front();
  // Block b reads s[t + b mod 2]: odd blocks hand an element over (thread t reads what thread
  // t + 1 wrote). Once block 1 keeps the one barrier nothing is left to decide: the analysis
  // ends there, without asking whether blocks 2 to 15 are translates.
  Kernel odd = tiled(rotated);
  r = remove_unordering_barriers(odd, blocks);
  EXPECT_TRUE(r.analysed) << r.reason;
  EXPECT_EQ(r.translates, 0);
  EXPECT_EQ(r.removed, 0);
  // A last tile clipped to 32 elements runs other loop trips: it is analysed.
  Kernel clipped = tiled("ft_e");
  clipped.uniform.push_back(let("long long", "n", "ft_min(64LL, 1000LL - lo)"));
  clipped.body[2].b = "n";
  r = remove_unordering_barriers(clipped, blocks);
  EXPECT_EQ(r.translates, 14);
}

}  // namespace
}  // namespace fusetune::codegen
