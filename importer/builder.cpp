#include "importer/builder.h"

#include <optional>

#include "core/ops.h"
#include "reference/kernels.h"

namespace fusetune::importer {

int GraphBuilder::constant(Tensor t, const std::string& name) { return g_.add_constant(name, std::move(t)); }

int GraphBuilder::sequence(std::vector<int> elements, const std::string& name) {
  Value v;
  v.name = name;
  const int id = g_.add_value(std::move(v));
  sequences_[id] = std::move(elements);
  return id;
}

int GraphBuilder::optional(int element, const std::string& name) {
  Value v;
  v.name = name;
  const int id = g_.add_value(std::move(v));
  optionals_[id] = element;
  return id;
}

int GraphBuilder::emit(const std::string& op, std::vector<int> inputs, Attributes attrs, const std::string& name) {
  Node node;
  node.name = name;
  node.op = op;
  node.inputs = std::move(inputs);
  node.attrs = std::move(attrs);
  node.guards = guards_;
  std::vector<TensorType> types;
  bool all_constant = true;
  bool all_known = true;
  for (int in : node.inputs) {
    if (in == kNoValue) {
      types.emplace_back();
      continue;
    }
    const Value& v = g_.value(in);
    types.push_back({v.dtype, v.shape});
    all_constant = all_constant && v.is_constant();
    all_known = all_known && (v.is_constant() || known(in) != nullptr);
  }
  const std::vector<TensorType> out = infer_types(node, types);
  if (out.size() == 1 && numel(out[0].shape) == 0) {  // an empty result is known whatever the inputs hold
    ++folded_;
    return g_.add_constant(name, Tensor(out[0].dtype, out[0].shape));
  }
  // A node without inputs (a RandomUniform) is a generator: it computes its elements where they
  // are read, which costs less than a constant's bytes.
  if (all_constant && !node.inputs.empty() && numel(out[0].shape) <= kFoldLimit) {
    std::vector<const Tensor*> args;
    for (int in : node.inputs) args.push_back(in == kNoValue ? nullptr : g_.value(in).data.get());
    ++folded_;
    return g_.add_constant(name, std::move(reference::run_node(node, args)[0]));
  }
  std::optional<Tensor> known_value;
  if (all_known && !node.inputs.empty() && numel(out[0].shape) <= kKnownLimit) {  // shape arithmetic on a known input
    std::vector<const Tensor*> args;
    for (int in : node.inputs) args.push_back(in == kNoValue ? nullptr : g_.value(in).is_constant() ? g_.value(in).data.get() : known(in));
    known_value = std::move(reference::run_node(node, args)[0]);
  }
  Value v;
  v.name = name;
  v.dtype = out[0].dtype;
  v.shape = out[0].shape;
  const int id = g_.add_value(std::move(v));
  node.outputs = {id};
  producer_[id] = g_.nodes().size();
  g_.add_node(std::move(node));
  if (known_value) set_known(id, std::move(*known_value));
  return id;
}

}  // namespace fusetune::importer
