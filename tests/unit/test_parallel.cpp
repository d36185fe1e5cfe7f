// core/parallel.h: every index runs once, whatever the thread count, a failure reads the same
// however the work was divided (the lowest failing index's exception), and the work knows it runs
// inside a parallel_for.
#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/parallel.h"

namespace fusetune {
namespace {

TEST(ParallelFor, EveryIndexRunsExactlyOnce) {
  for (int threads : {0, 1, 3, 64}) {
    std::vector<std::atomic<int>> calls(1000);
    parallel_for(calls.size(), [&](size_t i) { ++calls[i]; }, threads);
    for (size_t i = 0; i < calls.size(); ++i) ASSERT_EQ(calls[i].load(), 1) << "index " << i << ", threads " << threads;
  }
  parallel_for(0, [](size_t) { FAIL() << "called for an empty range"; });
}

TEST(ParallelFor, TheLowestFailingIndexIsRethrownAfterAllIndicesRan) {
  for (int threads : {1, 2, 8}) {
    std::atomic<int> ran{0};
    try {
      parallel_for(200, [&](size_t i) {
        ++ran;
        if (i == 150 || i == 37 || i == 99) throw std::runtime_error("index " + std::to_string(i));
      }, threads);
      ADD_FAILURE() << "nothing thrown";
    } catch (const std::runtime_error& e) {
      EXPECT_STREQ(e.what(), "index 37") << "threads " << threads;
    }
    EXPECT_EQ(ran.load(), 200);
  }
}

// Every call runs inside_parallel_for(), on the pool's threads and the caller's alike; the
// caller itself is outside before and after (and after a failure).
TEST(ParallelFor, CallsKnowTheyAreInsideAndTheCallerIsNot) {
  EXPECT_FALSE(inside_parallel_for());
  for (int threads : {1, 4}) {
    std::atomic<int> inside{0};
    parallel_for(50, [&](size_t) { inside += inside_parallel_for(); }, threads);
    EXPECT_EQ(inside.load(), 50) << "threads " << threads;
    EXPECT_FALSE(inside_parallel_for()) << "threads " << threads;
  }
  EXPECT_THROW(parallel_for(3, [](size_t) { throw std::runtime_error("x"); }, 1), std::runtime_error);
  EXPECT_FALSE(inside_parallel_for());
}

}  // namespace
}  // namespace fusetune
