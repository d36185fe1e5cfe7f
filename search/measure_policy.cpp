#include "search/measure_policy.h"

#include <algorithm>

namespace fusetune::search {

int MeasurePolicy::group_budget(size_t groups) const {
  if (trials == 0) return kRoundsByDefault * candidates;
  return std::max(candidates, trials / std::max<int>(1, static_cast<int>(groups)));
}

}  // namespace fusetune::search
