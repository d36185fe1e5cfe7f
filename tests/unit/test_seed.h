// The seed of a randomised test: FUSETUNE_TEST_SEED when set (to replay a failure), else a fresh
// one. Printed with the test's name, so that every run says how to repeat it.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>

namespace fusetune::testing {

inline unsigned test_seed() {
  const char* fixed = std::getenv("FUSETUNE_TEST_SEED");
  const unsigned seed = fixed != nullptr ? static_cast<unsigned>(std::stoul(fixed)) : std::random_device{}();
  const ::testing::TestInfo* t = ::testing::UnitTest::GetInstance()->current_test_info();
  std::printf("%s.%s: seed %u (replay with FUSETUNE_TEST_SEED=%u)\n", t != nullptr ? t->test_suite_name() : "",
              t != nullptr ? t->name() : "", seed, seed);
  return seed;
}

}  // namespace fusetune::testing
