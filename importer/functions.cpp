#include "importer/functions.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "importer/onnx_io.h"

namespace fusetune::importer {

namespace {

constexpr size_t kMaxInlinedNodes = 1000000;

using Key = std::tuple<std::string, std::string, std::string>;  // domain, name, overload

std::string function_label(const onnx::FunctionProto& f) {
  return "function '" + (f.domain().empty() ? std::string() : f.domain() + ":") + f.name() +
         (f.overload().empty() ? std::string() : "@" + f.overload()) + "'";
}

std::string call_label(const onnx::NodeProto& n) {
  if (!n.name().empty()) return n.name();
  for (const std::string& o : n.output()) {
    if (!o.empty()) return o;
  }
  return n.op_type();
}

class Inliner {
 public:
  Inliner(onnx::ModelProto& model) : model_(model) {
    for (const onnx::FunctionProto& f : model.functions()) {
      const auto [it, fresh] = functions_.emplace(Key{f.domain(), f.name(), f.overload()}, &f);
      check(fresh, function_label(f), " is defined twice");
    }
    opset_ = default_opset(model);
  }

  void run() {
    if (functions_.empty()) return;
    check(nodes_of(model_.graph().node()) <= kMaxInlinedNodes, "inlining the model's functions makes more than ",
          kMaxInlinedNodes, " nodes");
    expand(*model_.mutable_graph()->mutable_node(), {});
  }

 private:
  // Replaces the calls among `nodes` (and inside their subgraphs) by the functions' bodies;
  // `stack` holds the functions being inlined around them.
  void expand(google::protobuf::RepeatedPtrField<onnx::NodeProto>& nodes, const std::vector<const onnx::FunctionProto*>& stack) {
    google::protobuf::RepeatedPtrField<onnx::NodeProto> out;
    for (onnx::NodeProto& n : nodes) {
      each_subgraph(n, [&](onnx::GraphProto& g) { expand(*g.mutable_node(), stack); });
      auto it = functions_.find(Key{n.domain(), n.op_type(), n.overload()});
      if (it == functions_.end()) {
        *out.Add() = std::move(n);
        continue;
      }
      for (onnx::NodeProto& inlined : inline_call(n, *it->second, stack)) *out.Add() = std::move(inlined);
    }
    nodes.Swap(&out);
  }

  // The body of `f` for the call `call`, renamed and with its attribute references resolved, its
  // own calls inlined.
  google::protobuf::RepeatedPtrField<onnx::NodeProto> inline_call(const onnx::NodeProto& call, const onnx::FunctionProto& f,
                                                                 std::vector<const onnx::FunctionProto*> stack) {
    const std::string where = "node '" + call_label(call) + "' (" + call.op_type() + "), a call of " + function_label(f);
    for (const onnx::FunctionProto* outer : stack) {
      check(outer != &f, where, ": the function calls itself (directly or through another function)");
    }
    check(stack.size() < 64, where, ": functions nested more than 64 deep");
    check(call.input_size() <= f.input_size(), where, ": ", call.input_size(), " inputs given, the function takes ",
          f.input_size());
    check(call.output_size() <= f.output_size(), where, ": ", call.output_size(), " outputs asked for, the function has ",
          f.output_size());
    for (const auto& o : f.opset_import()) {
      check(!is_default_domain(o.domain()) || o.version() == opset_, where, ": the function imports opset ", o.version(),
            " of the default domain and the model ", opset_, " (fusetune reads a model at one opset)");
    }
    std::string prefix = call_label(call) + "/";
    for (int k = 2; !prefixes_.insert(prefix).second; ++k) prefix = call_label(call) + "#" + std::to_string(k) + "/";
    std::map<std::string, std::string> formal;
    for (int i = 0; i < f.input_size(); ++i) formal[f.input(i)] = i < call.input_size() ? call.input(i) : std::string();
    for (int i = 0; i < f.output_size() && i < call.output_size(); ++i) {
      if (!call.output(i).empty()) formal[f.output(i)] = call.output(i);
    }
    const auto rename = [&](const std::string& name) -> std::string {
      if (name.empty()) return name;
      auto it = formal.find(name);
      return it != formal.end() ? it->second : prefix + name;
    };
    google::protobuf::RepeatedPtrField<onnx::NodeProto> body(f.node());
    for (onnx::NodeProto& n : body) {
      rename_node(n, rename, prefix);
      resolve_attributes(n, call, f, where);
    }
    stack.push_back(&f);
    expand(body, stack);
    return body;
  }

  template <typename Rename>
  static void rename_node(onnx::NodeProto& n, const Rename& rename, const std::string& prefix) {
    n.set_name(prefix + call_label(n));
    for (std::string& in : *n.mutable_input()) in = rename(in);
    for (std::string& o : *n.mutable_output()) o = rename(o);
    each_subgraph(n, [&](onnx::GraphProto& g) { rename_graph(g, rename, prefix); });
  }

  template <typename Rename>
  static void rename_graph(onnx::GraphProto& g, const Rename& rename, const std::string& prefix) {
    for (auto* list : {g.mutable_input(), g.mutable_output(), g.mutable_value_info()}) {
      for (onnx::ValueInfoProto& vi : *list) vi.set_name(rename(vi.name()));
    }
    for (onnx::TensorProto& t : *g.mutable_initializer()) t.set_name(rename(t.name()));
    for (onnx::NodeProto& n : *g.mutable_node()) rename_node(n, rename, prefix);
  }

  // Attribute references of n (and of its subgraphs' nodes) resolved against the call.
  static void resolve_attributes(onnx::NodeProto& n, const onnx::NodeProto& call, const onnx::FunctionProto& f,
                                 const std::string& where) {
    each_subgraph(n, [&](onnx::GraphProto& g) {
      for (onnx::NodeProto& inner : *g.mutable_node()) resolve_attributes(inner, call, f, where);
    });
    google::protobuf::RepeatedPtrField<onnx::AttributeProto> kept;
    for (onnx::AttributeProto& a : *n.mutable_attribute()) {
      if (a.ref_attr_name().empty()) {
        *kept.Add() = std::move(a);
        continue;
      }
      const onnx::AttributeProto* value = nullptr;
      for (const onnx::AttributeProto& given : call.attribute()) {
        if (given.name() == a.ref_attr_name()) value = &given;
      }
      for (const onnx::AttributeProto& given : f.attribute_proto()) {
        if (value == nullptr && given.name() == a.ref_attr_name()) value = &given;
      }
      if (value == nullptr) continue;  // neither given nor defaulted: the attribute is absent
      check(value->ref_attr_name().empty(), where, ": attribute '", value->name(), "' refers to '", value->ref_attr_name(),
            "' outside any function");
      onnx::AttributeProto resolved = *value;
      resolved.set_name(a.name());
      *kept.Add() = std::move(resolved);
    }
    n.mutable_attribute()->Swap(&kept);
  }

  // How many nodes `nodes` become once inlined (saturating past the limit), before any is made:
  // calls that double at each level would otherwise be made until the limit. A function that
  // calls itself counts once here; expand refuses it naming the call.
  size_t nodes_of(const google::protobuf::RepeatedPtrField<onnx::NodeProto>& nodes) {
    size_t total = 0;
    for (const onnx::NodeProto& n : nodes) {
      size_t here = 1;
      auto it = functions_.find(Key{n.domain(), n.op_type(), n.overload()});
      if (it != functions_.end()) {
        const onnx::FunctionProto* f = it->second;
        if (auto known = sizes_.find(f); known != sizes_.end()) {
          here = known->second;
        } else {
          sizes_[f] = 1;  // a cycle reached again counts one node
          here = sizes_[f] = nodes_of(f->node());
        }
      }
      each_subgraph(n, [&](const onnx::GraphProto& g) { here += nodes_of(g.node()); });
      total = std::min(total + here, kMaxInlinedNodes + 1);
    }
    return total;
  }

  onnx::ModelProto& model_;
  std::map<Key, const onnx::FunctionProto*> functions_;
  std::map<const onnx::FunctionProto*, size_t> sizes_;
  std::set<std::string> prefixes_;
  int64_t opset_ = 0;
};

}  // namespace

void inline_local_functions(onnx::ModelProto& model) {
  Inliner(model).run();
  model.clear_functions();
}

}  // namespace fusetune::importer
