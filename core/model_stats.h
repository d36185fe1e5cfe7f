// Model statistics for `fusetune inspect`: op histogram, FLOPs, parameter bytes, the DRAM traffic
// of an unfused execution against the minimum, and the number of distinct single-op signatures.
//
// Conventions (also in docs/canonical-ops.md): unfused traffic counts, for every node but
// Reshape (a view of contiguous memory), the bytes of all its inputs and outputs; the minimum
// counts the graph inputs, the constants nodes read and the graph outputs once each.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "core/graph.h"

namespace fusetune {

struct ModelStats {
  size_t nodes = 0;
  std::map<std::string, int> op_histogram;
  int64_t flops = 0;
  int64_t param_bytes = 0;
  int64_t unfused_dram_bytes = 0;
  int64_t min_dram_bytes = 0;
  size_t unique_op_signatures = 0;
};

ModelStats compute_stats(const Graph& g);

int64_t value_bytes(const Value& v);

}  // namespace fusetune
