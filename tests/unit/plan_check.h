// A plan bundle run by the plan runner on the host backend against the reference interpreter, for
// the tests of plans that take library calls.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "core/graph.h"
#include "reference/interpreter.h"
#include "runtime/bundle.h"
#include "runtime/plan_runner.h"

namespace fusetune::testing {

// A bundle run by the plan runner on the host, on normal random inputs (seed `seed`), against the
// reference interpreter: every output within 1e-4 plus `of_largest` of its largest magnitude.
inline void expect_plan_matches_reference(const runtime::Bundle& bundle, const Graph& g, unsigned seed, float of_largest = 1e-4f) {
  auto backend = backend::make_host_backend();
  runtime::PlanRunner runner(bundle, *backend);
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist;
  std::vector<Tensor> inputs;
  for (int in : g.inputs()) {
    std::vector<float> xs(static_cast<size_t>(numel(g.value(in).shape)));
    for (float& v : xs) v = dist(rng);
    inputs.push_back(Tensor::from_floats(g.value(in).dtype, g.value(in).shape, xs));
  }
  const std::vector<Tensor> got = runner.run(inputs);
  const std::vector<Tensor> want = reference::run_graph(g, inputs);
  ASSERT_EQ(got.size(), want.size());
  for (size_t o = 0; o < got.size(); ++o) {
    const auto want_v = want[o].to_floats(), got_v = got[o].to_floats();
    ASSERT_EQ(got_v.size(), want_v.size());
    float scale = 0;
    for (float v : want_v) scale = std::max(scale, std::abs(v));
    for (size_t i = 0; i < want_v.size(); ++i) ASSERT_NEAR(got_v[i], want_v[i], 1e-4f + of_largest * scale) << "output " << o << " at " << i;
  }
}

}  // namespace fusetune::testing
