#include "core/graph.h"

#include <algorithm>

#include "core/error.h"

namespace fusetune {

namespace {

template <typename T>
const T& get_as(const std::map<std::string, AttrValue>& m, const std::string& name, const char* type) {
  const AttrValue& v = m.at(name);
  const T* p = std::get_if<T>(&v);
  check(p != nullptr, "attribute '", name, "' is not of type ", type);
  return *p;
}

}  // namespace

int64_t Attributes::i(const std::string& name, int64_t fallback) const {
  return has(name) ? get_as<int64_t>(values_, name, "int") : fallback;
}

float Attributes::f(const std::string& name, float fallback) const {
  return has(name) ? get_as<float>(values_, name, "float") : fallback;
}

std::string Attributes::s(const std::string& name, const std::string& fallback) const {
  return has(name) ? get_as<std::string>(values_, name, "string") : fallback;
}

std::vector<int64_t> Attributes::ints(const std::string& name, std::vector<int64_t> fallback) const {
  return has(name) ? get_as<std::vector<int64_t>>(values_, name, "ints") : fallback;
}

std::vector<float> Attributes::floats(const std::string& name, std::vector<float> fallback) const {
  return has(name) ? get_as<std::vector<float>>(values_, name, "floats") : fallback;
}

int Graph::add_value(Value v) {
  values_.push_back(std::move(v));
  return static_cast<int>(values_.size()) - 1;
}

int Graph::add_constant(const std::string& name, Tensor t) {
  Value v;
  v.name = name;
  v.dtype = t.dtype();
  v.shape = t.shape();
  v.data = std::make_shared<const Tensor>(std::move(t));
  return add_value(std::move(v));
}

int Graph::add_node(Node n) {
  nodes_.push_back(std::move(n));
  return static_cast<int>(nodes_.size()) - 1;
}

std::vector<int> reads(const Node& n) {
  std::vector<int> out;
  for (int in : n.inputs) {
    if (in != kNoValue) out.push_back(in);
  }
  for (const Guard& gd : n.guards) out.push_back(gd.cond);
  return out;
}

bool is_column_bias(const Value& c, const Value& p) {
  return c.is_constant() && c.dtype == p.dtype && !c.shape.empty() && !p.shape.empty() && c.shape.back() == p.shape.back() &&
         numel(c.shape) == c.shape.back() && c.shape.size() <= p.shape.size();
}

std::vector<int> Graph::sole_readers() const {
  std::vector<int> readers(values_.size(), -1);
  for (size_t i = 0; i < nodes_.size(); ++i) {
    for (int in : reads(nodes_[i])) {
      int& r = readers[static_cast<size_t>(in)];
      r = r == -1 || r == static_cast<int>(i) ? static_cast<int>(i) : -2;
    }
  }
  return readers;
}

std::vector<int> Graph::producers() const {
  std::vector<int> prod(values_.size(), -1);
  for (size_t n = 0; n < nodes_.size(); ++n) {
    for (int o : nodes_[n].outputs) prod[static_cast<size_t>(o)] = static_cast<int>(n);
  }
  return prod;
}

void Graph::remove_dead() {
  std::vector<bool> live_value(values_.size(), false);
  for (int o : outputs_) live_value[static_cast<size_t>(o)] = true;
  for (int i : inputs_) live_value[static_cast<size_t>(i)] = true;
  std::vector<bool> live_node(nodes_.size(), false);
  for (size_t n = nodes_.size(); n-- > 0;) {
    bool used = false;
    for (int o : nodes_[n].outputs) used = used || live_value[static_cast<size_t>(o)];
    if (!used) continue;
    live_node[n] = true;
    for (int o : nodes_[n].outputs) live_value[static_cast<size_t>(o)] = true;
    for (int in : reads(nodes_[n])) live_value[static_cast<size_t>(in)] = true;
  }
  std::vector<int> remap(values_.size(), kNoValue);
  std::vector<Value> kept_values;
  for (size_t v = 0; v < values_.size(); ++v) {
    if (!live_value[v]) continue;
    remap[v] = static_cast<int>(kept_values.size());
    kept_values.push_back(std::move(values_[v]));
  }
  std::vector<Node> kept_nodes;
  for (size_t n = 0; n < nodes_.size(); ++n) {
    if (!live_node[n]) continue;
    Node node = std::move(nodes_[n]);
    for (int& in : node.inputs) {
      if (in != kNoValue) in = remap[static_cast<size_t>(in)];
    }
    for (int& o : node.outputs) o = remap[static_cast<size_t>(o)];
    for (Guard& gd : node.guards) gd.cond = remap[static_cast<size_t>(gd.cond)];
    kept_nodes.push_back(std::move(node));
  }
  for (int& i : inputs_) i = remap[static_cast<size_t>(i)];
  for (int& o : outputs_) o = remap[static_cast<size_t>(o)];
  std::map<int, DataExtent> extents;
  for (const auto& [v, e] : extents_) extents[remap[static_cast<size_t>(v)]] = {remap[static_cast<size_t>(e.count)], e.axis};
  extents_ = std::move(extents);
  values_ = std::move(kept_values);
  nodes_ = std::move(kept_nodes);
}

const char* onnx_value_kind_name(OnnxValue::Kind kind) {
  switch (kind) {
    case OnnxValue::Kind::kSequence:
      return "sequence";
    case OnnxValue::Kind::kOptional:
      return "optional";
    case OnnxValue::Kind::kTensor:
      break;
  }
  return "tensor";
}

std::vector<OutputExtent> Graph::output_extents() const {
  std::vector<OutputExtent> out(outputs_.size());
  for (size_t k = 0; k < outputs_.size(); ++k) {
    auto it = extents_.find(outputs_[k]);
    if (it == extents_.end()) continue;
    out[k] = {static_cast<int>(std::find(outputs_.begin(), outputs_.end(), it->second.count) - outputs_.begin()), it->second.axis};
  }
  return out;
}

std::vector<Tensor> trim_to_counts(const std::vector<Tensor>& outputs, const std::vector<OutputExtent>& extents) {
  check(extents.size() == outputs.size(), "trim_to_counts: ", outputs.size(), " outputs but ", extents.size(), " extents");
  std::vector<bool> is_count(outputs.size(), false);
  for (const OutputExtent& e : extents) {
    if (e.count_output >= 0) is_count.at(static_cast<size_t>(e.count_output)) = true;
  }
  std::vector<Tensor> out;
  for (size_t k = 0; k < outputs.size(); ++k) {
    if (is_count[k]) continue;
    const Tensor& t = outputs[k];
    const OutputExtent& e = extents[k];
    if (e.count_output < 0) {
      out.push_back(t);
      continue;
    }
    const auto axis = static_cast<size_t>(e.axis);
    const int64_t bound = t.shape().at(axis);
    const int64_t count = std::clamp<int64_t>(outputs[static_cast<size_t>(e.count_output)].to_ints().at(0), 0, bound);
    Shape shape = t.shape();
    shape[axis] = count;
    int64_t outer = 1, inner = 1;
    for (size_t d = 0; d < axis; ++d) outer *= shape[d];
    for (size_t d = axis + 1; d < shape.size(); ++d) inner *= shape[d];
    const size_t row = static_cast<size_t>(inner) * dtype_size(t.dtype());
    std::vector<std::byte> bytes(static_cast<size_t>(outer * count) * row);
    for (int64_t o = 0; o < outer; ++o) {
      std::copy_n(t.data() + static_cast<size_t>(o * bound) * row, static_cast<size_t>(count) * row, bytes.data() + static_cast<size_t>(o * count) * row);
    }
    out.push_back(Tensor::from_bytes(t.dtype(), shape, std::move(bytes)));
  }
  return out;
}

void Graph::validate() const {
  const int nvalues = static_cast<int>(values_.size());
  std::vector<bool> ready(values_.size(), false);
  for (int i : inputs_) {
    check(i >= 0 && i < nvalues, "graph input id ", i, " out of range");
    ready[static_cast<size_t>(i)] = true;
  }
  for (int v = 0; v < nvalues; ++v) {
    if (values_[static_cast<size_t>(v)].is_constant()) ready[static_cast<size_t>(v)] = true;
  }
  // The guards each value is computed under (none for inputs and constants): a node reads only
  // values computed under a prefix of its own guards (an IfMerge's branch results: of its guards
  // and its condition's value for that branch), so nothing reads a value of a branch that may
  // not have run.
  std::vector<const std::vector<Guard>*> computed_under(values_.size(), nullptr);
  const auto readable = [&](const Node& n, int v, const std::vector<Guard>& reader) {
    const std::vector<Guard>* under = computed_under[static_cast<size_t>(v)];
    check(under == nullptr || (under->size() <= reader.size() && std::equal(under->begin(), under->end(), reader.begin())), "node '", n.name,
          "' (", n.op, "): it reads '", values_[static_cast<size_t>(v)].name, "' of a branch it is not guarded by");
  };
  for (const Node& n : nodes_) {
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      const int in = n.inputs[k];
      if (in == kNoValue) continue;
      check(in >= 0 && in < nvalues, "node '", n.name, "' (", n.op, "): input id ", in, " out of range");
      check(ready[static_cast<size_t>(in)], "node '", n.name, "' (", n.op, "): input '",
            values_[static_cast<size_t>(in)].name, "' is used before it is produced");
      if (n.op == "IfMerge" && (k == 1 || k == 2)) {
        std::vector<Guard> branch = n.guards;
        branch.push_back({n.inputs[0], k == 1});
        readable(n, in, branch);
      } else {
        readable(n, in, n.guards);
      }
    }
    for (const Guard& gd : n.guards) {
      check(gd.cond >= 0 && gd.cond < nvalues, "node '", n.name, "' (", n.op, "): guard id ", gd.cond, " out of range");
      const Value& c = values_[static_cast<size_t>(gd.cond)];
      check(ready[static_cast<size_t>(gd.cond)], "node '", n.name, "' (", n.op, "): its guard '", c.name, "' is used before it is produced");
      check(c.dtype == DType::kBool && numel(c.shape) == 1, "node '", n.name, "' (", n.op, "): its guard '", c.name,
            "' must be one bool, it is ", dtype_name(c.dtype), " ", shape_str(c.shape));
      readable(n, gd.cond, n.guards);
    }
    for (int o : n.outputs) {
      check(o >= 0 && o < nvalues, "node '", n.name, "' (", n.op, "): output id ", o, " out of range");
      check(!ready[static_cast<size_t>(o)], "node '", n.name, "' (", n.op, "): output '",
            values_[static_cast<size_t>(o)].name, "' is produced twice");
      ready[static_cast<size_t>(o)] = true;
      computed_under[static_cast<size_t>(o)] = &n.guards;
    }
  }
  for (int o : outputs_) {
    check(o >= 0 && o < nvalues && ready[static_cast<size_t>(o)], "graph output id ", o, " is never produced");
    const std::vector<Guard>* under = computed_under[static_cast<size_t>(o)];
    check(under == nullptr || under->empty(), "graph output '", values_[static_cast<size_t>(o)].name, "' is computed by a branch that may not run");
  }
  const auto is_output = [&](int v) { return std::find(outputs_.begin(), outputs_.end(), v) != outputs_.end(); };
  for (const auto& [v, e] : extents_) {
    check(is_output(v) && is_output(e.count), "the extent of value id ", v, " must be a graph output counted by another");
    const Value& c = values_[static_cast<size_t>(e.count)];
    const Value& x = values_[static_cast<size_t>(v)];
    check(c.dtype == DType::kI64 && c.shape.empty(), "the count of '", x.name, "' must be an int64 scalar");
    check(e.axis >= 0 && e.axis < static_cast<int>(x.shape.size()), "the extent axis of '", x.name, "' is out of range");
  }
}

}  // namespace fusetune
