// The index evaluator (codegen/index_expr.h) against C's arithmetic and the prelude's helpers,
// and barrier elision by ownership (codegen/barrier_ownership.h) on hand-written kernels: a
// barrier between stages whose threads touch only their own elements goes, one that hands an
// element to another thread (read-after-write or write-after-read) stays, removal grows the
// interval the next barrier guards, a uniform loop's barriers go only when no iteration hands an
// element over, and the analysis keeps everything it cannot know. The host
// executor then runs what is left with its race checks.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <utility>

#include "codegen/barrier_ownership.h"
#include "codegen/emit.h"
#include "codegen/index_expr.h"
#include "core/error.h"
#include "simt/executor.h"
#include "simt/module.h"

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

// Runs k on the host executor with its checks: the findings (empty: no hazard) and y.
std::pair<std::vector<std::string>, std::vector<float>> execute(const Kernel& k) {
  simt::Module m(emit_cuda({k}));
  std::vector<float> x(64), y(64, 0.0f);
  for (size_t i = 0; i < 64; ++i) x[i] = static_cast<float>(i);
  const simt::LaunchResult r =
      simt::launch(m.kernel("k"), {x.data(), y.data()}, {256, 256}, {k.grid, k.threads, k.shared_bytes}, {});
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

}  // namespace
}  // namespace fusetune::codegen
