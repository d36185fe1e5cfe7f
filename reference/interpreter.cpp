#include "reference/interpreter.h"

#include <memory>

#include "core/error.h"
#include "reference/kernels.h"

namespace fusetune::reference {

std::vector<Tensor> run_graph(const Graph& g, std::span<const Tensor> inputs, const Progress& progress) {
  check(inputs.size() == g.inputs().size(), "the graph takes ", g.inputs().size(), " inputs, ", inputs.size(),
        " were given");
  std::vector<std::shared_ptr<const Tensor>> live(g.values().size());
  for (size_t v = 0; v < g.values().size(); ++v) live[v] = g.values()[v].data;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Value& v = g.value(g.inputs()[i]);
    check(inputs[i].dtype() == v.dtype && inputs[i].shape() == v.shape, "input '", v.name, "' expects ",
          dtype_name(v.dtype), " ", shape_str(v.shape), ", got ", dtype_name(inputs[i].dtype()), " ",
          shape_str(inputs[i].shape()));
    live[static_cast<size_t>(g.inputs()[i])] = std::make_shared<const Tensor>(inputs[i]);
  }
  // Last node that reads each value (an input, or a guard's condition); graph outputs are never
  // freed.
  std::vector<int> last_use(g.values().size(), -1);
  for (size_t n = 0; n < g.nodes().size(); ++n) {
    for (int in : reads(g.nodes()[n])) last_use[static_cast<size_t>(in)] = static_cast<int>(n);
  }
  for (int o : g.outputs()) last_use[static_cast<size_t>(o)] = static_cast<int>(g.nodes().size());
  const auto cond_value = [&](int v) {
    check(live[static_cast<size_t>(v)] != nullptr, "the condition '", g.value(v).name, "' is read before it is computed");
    return live[static_cast<size_t>(v)]->to_ints().at(0) != 0;
  };
  for (size_t n = 0; n < g.nodes().size(); ++n) {
    const Node& node = g.nodes()[n];
    // A node of a branch that does not run computes nothing; an IfMerge reads only the branch
    // result its condition picks (the other is never computed), passed for both.
    const bool runs = guards_hold(node.guards, cond_value);
    std::vector<int> ins = runs ? node.inputs : std::vector<int>{};
    if (runs && node.op == "IfMerge") {
      const bool picked_then = cond_value(ins[0]);
      ins[picked_then ? 2 : 1] = ins[picked_then ? 1 : 2];
    }
    std::vector<const Tensor*> args;
    for (int in : ins) {
      if (in == kNoValue) {
        args.push_back(nullptr);
        continue;
      }
      check(live[static_cast<size_t>(in)] != nullptr, "node '", node.name, "' reads '", g.value(in).name,
            "' before it is computed");
      args.push_back(live[static_cast<size_t>(in)].get());
    }
    if (runs) {
      std::vector<Tensor> outs = run_node(node, args);
      for (size_t o = 0; o < outs.size(); ++o) {
        live[static_cast<size_t>(node.outputs[o])] = std::make_shared<const Tensor>(std::move(outs[o]));
      }
    }
    for (int in : reads(node)) {
      if (last_use[static_cast<size_t>(in)] == static_cast<int>(n) && !g.value(in).is_constant()) {
        live[static_cast<size_t>(in)].reset();
      }
    }
    if (progress) progress(n + 1, g.nodes().size());
  }
  std::vector<Tensor> result;
  for (int o : g.outputs()) result.push_back(*live[static_cast<size_t>(o)]);
  return result;
}

}  // namespace fusetune::reference
