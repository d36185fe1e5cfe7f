#include "core/model_stats.h"

#include <set>

#include "core/ops.h"
#include "core/signature.h"

namespace fusetune {

int64_t value_bytes(const Value& v) { return numel(v.shape) * static_cast<int64_t>(dtype_size(v.dtype)); }

ModelStats compute_stats(const Graph& g) {
  ModelStats s;
  s.nodes = g.nodes().size();
  std::set<int> params;
  std::set<std::string> sigs;
  for (size_t k = 0; k < g.nodes().size(); ++k) {
    const Node& n = g.nodes()[k];
    ++s.op_histogram[n.op];
    s.flops += node_flops(g, n);
    sigs.insert(node_signature(g, static_cast<int>(k)).digest);
    for (int in : n.inputs) {
      if (in == kNoValue) continue;
      if (g.value(in).is_constant()) params.insert(in);
      if (n.op != "Reshape") s.unfused_dram_bytes += value_bytes(g.value(in));
    }
    if (n.op != "Reshape") {
      for (int o : n.outputs) s.unfused_dram_bytes += value_bytes(g.value(o));
    }
  }
  for (int p : params) s.param_bytes += value_bytes(g.value(p));
  s.min_dram_bytes = s.param_bytes;
  for (int i : g.inputs()) s.min_dram_bytes += value_bytes(g.value(i));
  for (int o : g.outputs()) s.min_dram_bytes += value_bytes(g.value(o));
  s.unique_op_signatures = sigs.size();
  return s;
}

}  // namespace fusetune
