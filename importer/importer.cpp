#include "importer/importer.h"

#include <algorithm>
#include <queue>
#include <set>
#include <unordered_map>

#include "core/error.h"
#include "importer/builder.h"
#include "importer/control_flow.h"
#include "importer/data_extent.h"
#include "importer/cancel_transposes.h"
#include "importer/clone_constant_chains.h"
#include "importer/fold_constant_cones.h"
#include "importer/fold_conv_affine.h"
#include "importer/fold_product_scales.h"
#include "importer/sequences.h"
#include "importer/functions.h"
#include "importer/lower.h"
#include "importer/onnx_io.h"
#include "importer/pack_sibling_products.h"
#include "importer/pair_gated_products.h"
#include "importer/pointwise_conv.h"

namespace fusetune::importer {

namespace fs = std::filesystem;

namespace {

std::string node_label(const onnx::NodeProto& n) {
  return "node '" + (n.name().empty() ? (n.output_size() ? n.output(0) : std::string("?")) : n.name()) + "' (" +
         n.op_type() + ")";
}

OnnxSummary summarize(const onnx::ModelProto& m) {
  OnnxSummary s;
  s.ir_version = m.ir_version();
  s.opset = default_opset(m);
  s.producer = m.producer_name() + (m.producer_version().empty() ? "" : " " + m.producer_version());
  s.nodes = static_cast<size_t>(m.graph().node_size());
  for (const auto& n : m.graph().node()) {
    const bool def = is_default_domain(n.domain());
    ++s.op_histogram[def ? n.op_type() : n.domain() + ":" + n.op_type()];
    if (!def || !is_supported_onnx_op(n.op_type())) {
      int64_t version = 0;
      for (const auto& o : m.opset_import()) {
        if (o.domain() == n.domain() || (def && is_default_domain(o.domain()))) version = o.version();
      }
      s.unsupported.push_back({n.name(), n.op_type(), def ? "ai.onnx" : n.domain(), version});
    }
  }
  return s;
}

// Static shape of a graph input from its declaration and the overrides. Sets `overridden` when
// an override replaces a static declared dimension (declared output shapes may then be stale).
Shape input_shape(const onnx::ValueInfoProto& vi, const ImportOptions& opt, bool& overridden) {
  if (auto it = opt.input_shapes.find(vi.name()); it != opt.input_shapes.end()) {
    checked_numel(it->second, "input '" + vi.name() + "' (from --shape)");
    const auto& tt = vi.type().tensor_type();
    if (!tt.has_shape() || tt.shape().dim_size() != static_cast<int>(it->second.size())) {
      overridden = true;
    } else {
      for (int d = 0; d < tt.shape().dim_size(); ++d) {
        const auto& dim = tt.shape().dim(d);
        if (dim.has_dim_value() && dim.dim_value() != it->second[static_cast<size_t>(d)]) overridden = true;
      }
    }
    return it->second;
  }
  require_tensor(vi, "input");
  const auto& tt = vi.type().tensor_type();
  check(tt.has_shape(), "input '", vi.name(), "' has no shape; give one with --shape ", vi.name(), "=DxDx...");
  Shape s;
  for (int d = 0; d < tt.shape().dim_size(); ++d) {
    const auto& dim = tt.shape().dim(d);
    if (dim.has_dim_value()) {
      check(dim.dim_value() >= 0, "input '", vi.name(), "' dimension ", d, " is negative (", dim.dim_value(), ")");
      s.push_back(dim.dim_value());
    } else {
      fail("input '", vi.name(), "' dimension ", d, dim.has_dim_param() ? " ('" + dim.dim_param() + "')" : std::string(),
           " has no static value; give the shape with --shape ", vi.name(), "=DxDx...");
    }
  }
  checked_numel(s, "input '" + vi.name() + "'");
  return s;
}

// Checks a declared value_info/output type against what import computed (static dims only).
// `padded`: the value's axis of data-dependent extent (importer/data_extent.h), which the declared
// shape may give as any size up to the bound; -1 for none.
void check_declared(const onnx::ValueInfoProto& vi, const Value& v, const char* what, int padded = -1) {
  if (!vi.type().has_tensor_type()) return;
  const auto& tt = vi.type().tensor_type();
  const DType declared = dtype_from_onnx(tt.elem_type());
  check(tt.elem_type() == 0 || declared == v.dtype, what, " '", vi.name(), "' is declared ", dtype_name(declared),
        " but the model computes ", dtype_name(v.dtype));
  if (!tt.has_shape()) return;
  bool ok = tt.shape().dim_size() == static_cast<int>(v.shape.size());
  for (int d = 0; ok && d < tt.shape().dim_size(); ++d) {
    const auto& dim = tt.shape().dim(d);
    if (dim.has_dim_value()) {
      ok = d == padded ? dim.dim_value() <= v.shape[static_cast<size_t>(d)] : dim.dim_value() == v.shape[static_cast<size_t>(d)];
    }
  }
  if (!ok) {
    std::string decl;
    for (int d = 0; d < tt.shape().dim_size(); ++d) {
      const auto& dim = tt.shape().dim(d);
      decl += (d ? "x" : "") + (dim.has_dim_value() ? std::to_string(dim.dim_value()) : dim.dim_param().empty() ? "?" : dim.dim_param());
    }
    fail(what, " '", vi.name(), "' is declared with shape ", decl.empty() ? "scalar" : decl,
         " but the model computes ", shape_str(v.shape), " (inconsistent shapes)");
  }
}

// Node indices in a topological order (stable: file order where the data flow allows).
std::vector<int> topo_order(const onnx::GraphProto& g, const std::set<std::string>& available) {
  std::unordered_map<std::string, int> producer;
  for (int i = 0; i < g.node_size(); ++i) {
    for (const auto& o : g.node(i).output()) {
      if (o.empty()) continue;
      check(!available.count(o), node_label(g.node(i)), ": output '", o, "' redefines a graph input or initializer");
      const auto [it, fresh] = producer.emplace(o, i);
      check(fresh, node_label(g.node(i)), ": output '", o, "' is also produced by ", node_label(g.node(it->second)));
    }
  }
  std::vector<int> pending(static_cast<size_t>(g.node_size()), 0);
  std::vector<std::vector<int>> users(static_cast<size_t>(g.node_size()));
  for (int i = 0; i < g.node_size(); ++i) {
    std::set<std::string> reads(g.node(i).input().begin(), g.node(i).input().end());
    outer_names(g.node(i), reads);  // what its subgraphs read from this graph
    for (const auto& in : reads) {
      if (in.empty() || available.count(in)) continue;
      auto it = producer.find(in);
      check(it != producer.end(), node_label(g.node(i)), ": input '", in,
            "' is not produced by any node, initializer or graph input");
      if (it->second == i) continue;
      ++pending[static_cast<size_t>(i)];
      users[static_cast<size_t>(it->second)].push_back(i);
    }
  }
  std::priority_queue<int, std::vector<int>, std::greater<>> ready;
  for (int i = 0; i < g.node_size(); ++i) {
    if (pending[static_cast<size_t>(i)] == 0) ready.push(i);
  }
  std::vector<int> order;
  while (!ready.empty()) {
    const int i = ready.top();
    ready.pop();
    order.push_back(i);
    for (int u : users[static_cast<size_t>(i)]) {
      if (--pending[static_cast<size_t>(u)] == 0) ready.push(u);
    }
  }
  if (order.size() != static_cast<size_t>(g.node_size())) {
    for (int i = 0; i < g.node_size(); ++i) {
      if (pending[static_cast<size_t>(i)] > 0) fail("the graph has a cycle through ", node_label(g.node(i)));
    }
  }
  return order;
}

// Imports g's nodes in a topological order into b, `ids` the names visible (its inputs,
// initializers and enclosing scopes'), which it extends with the nodes' outputs. A subgraph's
// copy (`prefix` not empty) names its nodes and values with the prefix.
void import_nodes(const onnx::GraphProto& g, Scope& ids, GraphBuilder& b, int64_t opset, const fs::path& base_dir,
                  const std::string& prefix) {
  Graph& graph = b.graph();
  std::set<std::string> available;
  for (const auto& [name, id] : ids) available.insert(name);
  const SubgraphImporter import = [&](const onnx::GraphProto& body, const Scope& outer, const std::vector<int>& inputs,
                                      const std::string& inner) {
    Scope scope = outer;
    check(body.input_size() == static_cast<int>(inputs.size()), "a subgraph of ", body.input_size(), " inputs is given ",
          inputs.size());
    for (int k = 0; k < body.input_size(); ++k) scope[body.input(k).name()] = inputs[static_cast<size_t>(k)];
    for (const auto& init : body.initializer()) scope[init.name()] = b.constant(decode_tensor(init, base_dir), inner + init.name());
    import_nodes(body, scope, b, opset, base_dir, inner);
    std::vector<int> outs;
    for (const auto& o : body.output()) {
      auto it = scope.find(o.name());
      check(it != scope.end(), "subgraph output '", o.name(), "' is never produced");
      outs.push_back(it->second);
    }
    return outs;
  };
  for (int idx : topo_order(g, available)) {
    const onnx::NodeProto& original = g.node(idx);
    onnx::NodeProto renamed;
    if (!prefix.empty()) {
      renamed = original;
      renamed.set_name(prefix + (original.name().empty() ? (original.output_size() > 0 ? original.output(0) : original.op_type()) : original.name()));
    }
    const onnx::NodeProto& n = prefix.empty() ? original : renamed;
    try {
      std::vector<int> ins;
      for (const auto& in : n.input()) ins.push_back(in.empty() ? kNoValue : ids.at(in));
      const size_t first_new = graph.values().size();
      std::vector<int> outs;
      if (is_default_domain(n.domain()) && is_control_flow(n.op_type())) {
        outs = lower_control_flow(n, opset, ins, ids, b, import);
      } else if (is_default_domain(n.domain()) && is_sequence_op(n.op_type())) {
        outs = lower_sequence_op(n, ins, ids, b, import);
      } else if (n.op_type() == "Identity" && !ins.empty() && (b.sequence_of(ins[0]) || b.optional_of(ins[0]))) {
        outs = {ins[0]};  // a sequence or an optional passed on
      } else {
        for (size_t k = 0; k < ins.size(); ++k) {
          check(ins[k] == kNoValue || (!b.sequence_of(ins[k]) && !b.optional_of(ins[k])), "input ", k, " ('", n.input(static_cast<int>(k)),
                "') is a ", b.sequence_of(ins[k]) ? "sequence" : "optional", ", which ", n.op_type(), " does not take");
        }
        NodeLowering L(n, opset, b, std::move(ins), base_dir);
        lower_node(L);
        outs = L.outputs();
      }
      for (int k = 0; k < n.output_size(); ++k) {
        const std::string& out = n.output(k);
        if (out.empty()) continue;
        const int v = outs[static_cast<size_t>(k)];
        check(v != kNoValue, "output ", k, " ('", out, "') is not supported");
        if (static_cast<size_t>(v) >= first_new) graph.value(v).name = prefix + out;
        ids[out] = v;
      }
    } catch (const Error& e) {
      const std::string msg = e.what();
      if (msg.rfind("node '", 0) == 0) throw;  // already names a node
      fail(node_label(n), ": ", msg);
    }
  }
}

ImportedModel import_model(const onnx::ModelProto& m, const fs::path& base_dir, const ImportOptions& opt) {
  ImportedModel result;
  result.onnx = summarize(m);
  const int64_t opset = result.onnx.opset;
  const auto refuse = [&](const OnnxOpUse& u) {
    const std::string why = u.domain == "ai.onnx" ? unsupported_op_reason(u.op_type) : "";
    fail("node '", u.node_name, "': op '", u.op_type, "' of domain '", u.domain, "' (opset ", u.opset, ") is not supported",
         u.domain == "ai.onnx" ? "" : " (fusetune reads the default ONNX domain only)", why.empty() ? "" : ": " + why,
         result.onnx.unsupported.size() > 1
             ? " (and " + std::to_string(result.onnx.unsupported.size() - 1) + " more unsupported nodes; see 'fusetune inspect')"
             : std::string());
  };
  // A node of another domain first: a model of such nodes may import no default opset at all.
  for (const OnnxOpUse& u : result.onnx.unsupported) {
    if (u.domain != "ai.onnx") refuse(u);
  }
  check(opset != 0, "no opset is imported for the default ONNX domain");
  check(opset >= kMinOpset && opset <= kMaxOpset, "opset ", opset, " of the default domain is unsupported (fusetune reads ",
        kMinOpset, " to ", kMaxOpset, ")");
  if (!result.onnx.unsupported.empty()) refuse(result.onnx.unsupported.front());
  const onnx::GraphProto& g = m.graph();
  Graph& graph = result.graph;
  GraphBuilder b(graph);
  Scope ids;
  bool overridden = false;
  for (const auto& init : g.initializer()) {
    check(!init.name().empty(), "an initializer has no name");
    check(!ids.count(init.name()), "initializer '", init.name(), "' is defined twice");
    ids[init.name()] = b.constant(decode_tensor(init, base_dir), init.name());
  }
  // A tensor graph input named `name`, of the ONNX tensor type `type`.
  const auto tensor_input = [&](const std::string& name, const onnx::TypeProto& type) {
    onnx::ValueInfoProto vi;
    vi.set_name(name);
    *vi.mutable_type() = type;
    const DType dt = dtype_from_onnx(type.tensor_type().elem_type());
    check(dt != DType::kUndefined, "input '", name, "' has element type ", onnx_type_name(type.tensor_type().elem_type()),
          ", which fusetune does not support");
    Value v;
    v.name = name;
    v.dtype = dt;
    v.shape = input_shape(vi, opt, overridden);
    const int id = graph.add_value(std::move(v));
    graph.inputs().push_back(id);
    if (auto it = opt.input_values.find(name); it != opt.input_values.end()) {
      check(it->second.dtype() == dt && it->second.shape() == graph.value(id).shape, "the value given for input '", name, "' is ",
            dtype_name(it->second.dtype()), " ", shape_str(it->second.shape()), ", the model expects ", dtype_name(dt), " ",
            shape_str(graph.value(id).shape));
      b.set_known(id, it->second);
    }
    return id;
  };
  // A sequence graph input: its elements' tensor inputs, then the import-time sequence of them.
  const auto sequence_input = [&](const std::string& name, const onnx::TypeProto& element) {
    int64_t length = 0;
    if (auto it = opt.sequence_lengths.find(name); it != opt.sequence_lengths.end()) {
      length = it->second;
    } else {
      while (opt.input_shapes.count(element_name(name, length))) ++length;
      check(length > 0, "input '", name, "' is a sequence of unknown length: give its data (fusetune run --inputs), or each ",
            "element's shape with --shape '", element_name(name, 0), "=DxD' and so on");
    }
    std::vector<int> elements;
    for (int64_t i = 0; i < length; ++i) elements.push_back(tensor_input(element_name(name, i), element));
    return b.sequence(std::move(elements), name);
  };
  // Where a graph input or output is a sequence or an optional, each ONNX input and output in
  // order and the graph inputs or outputs it became (Graph::onnx_inputs).
  bool composite = false;
  const auto record = [&](std::vector<OnnxValue>& list, const onnx::ValueInfoProto& vi, size_t before, size_t after) {
    const onnx::TypeProto& t = vi.type();
    const OnnxValue::Kind kind = t.has_sequence_type()   ? OnnxValue::Kind::kSequence
                                 : t.has_optional_type() ? OnnxValue::Kind::kOptional
                                                         : OnnxValue::Kind::kTensor;
    composite = composite || kind != OnnxValue::Kind::kTensor;
    list.push_back({vi.name(), kind, static_cast<int>(after - before)});
  };
  for (const auto& vi : g.input()) {
    if (ids.count(vi.name())) continue;  // an initializer listed as input (IR < 4): a constant here
    require_graph_value(vi, "input");
    const onnx::TypeProto& t = vi.type();
    const size_t before = graph.inputs().size();
    if (t.has_tensor_type()) {
      ids[vi.name()] = tensor_input(vi.name(), t);
    } else if (t.has_sequence_type()) {
      ids[vi.name()] = sequence_input(vi.name(), t.sequence_type().elem_type());
    } else {
      const onnx::TypeProto& held = t.optional_type().elem_type();
      const int element = opt.empty_optionals.count(vi.name())
                              ? kNoValue
                              : held.has_tensor_type() ? tensor_input(vi.name(), held)
                                                       : sequence_input(vi.name(), held.sequence_type().elem_type());
      ids[vi.name()] = b.optional(element, vi.name());
    }
    record(graph.onnx_inputs(), vi, before, graph.inputs().size());
  }
  for (const auto& [name, shape] : opt.input_shapes) {
    bool known = false;
    for (int v : graph.inputs()) known = known || graph.value(v).name == name;
    check(known, "--shape names '", name, "', which is not an input of the model");
  }
  b.set_bounds(opt.output_bounds);
  import_nodes(g, ids, b, opset, base_dir, "");
  if (const std::vector<std::string> unused = b.unused_bounds(); !unused.empty()) {
    fail("a bound is set for '", unused.front(), "', which is no output of data-dependent size in the model (NonMaxSuppression's",
         " selected_indices, Unique's outputs, NonZero of run-time data)");
  }
  // Graph output `name` computed as value `id`.
  const auto add_output = [&](int id, const std::string& name) {
    // An output whose op lowered to nothing (a Reshape to the same shape, an Identity) is the
    // value of an earlier node: it takes the output's name, which deployments ask for. A graph
    // input or an earlier output keeps its own name, and the output gets a copy (a Reshape to
    // the same shape) that carries it.
    const bool claimed = std::find(graph.inputs().begin(), graph.inputs().end(), id) != graph.inputs().end() ||
                         std::find(graph.outputs().begin(), graph.outputs().end(), id) != graph.outputs().end();
    if (claimed && graph.value(id).name != name) {
      Attributes same;
      same.set("shape", graph.value(id).shape);
      id = b.emit("Reshape", {id}, same, name);
    }
    graph.value(id).name = name;
    graph.outputs().push_back(id);
  };
  // A sequence output's elements are outputs of their own, as an optional's contents are (none
  // for an empty one): importer/onnx_io.h's names.
  const auto add_sequence_output = [&](int id, const std::string& name) {
    const std::vector<int>* elements = b.sequence_of(id);
    check(elements != nullptr, "graph output '", name, "' is declared a sequence, but the model computes a tensor");
    for (size_t i = 0; i < elements->size(); ++i) add_output((*elements)[i], element_name(name, static_cast<int64_t>(i)));
  };
  std::vector<int> tensor_output(static_cast<size_t>(g.output_size()), -1);  // per ONNX output: its graph output, if a tensor
  for (int k = 0; k < g.output_size(); ++k) {
    const onnx::ValueInfoProto& vi = g.output(k);
    auto it = ids.find(vi.name());
    require_graph_value(vi, "graph output");
    check(it != ids.end(), "graph output '", vi.name(), "' is never produced");
    const int id = it->second;
    const onnx::TypeProto& t = vi.type();
    const size_t before = graph.outputs().size();
    if (t.has_sequence_type()) {
      add_sequence_output(id, vi.name());
    } else if (t.has_optional_type()) {
      const int* held = b.optional_of(id);
      check(held != nullptr, "graph output '", vi.name(), "' is declared an optional, but the model computes ",
            b.sequence_of(id) ? "a sequence" : "a tensor");
      if (*held == kNoValue) {
        record(graph.onnx_outputs(), vi, before, before);
        continue;
      }
      if (t.optional_type().elem_type().has_sequence_type()) {
        add_sequence_output(*held, vi.name());
      } else {
        check(!b.sequence_of(*held), "graph output '", vi.name(), "' is declared an optional tensor, but holds a sequence");
        add_output(*held, vi.name());
      }
    } else {
      check(!b.sequence_of(id) && !b.optional_of(id), "graph output '", vi.name(), "' is declared a tensor, but the model computes ",
            b.sequence_of(id) ? "a sequence" : "an optional");
      tensor_output[static_cast<size_t>(k)] = static_cast<int>(graph.outputs().size());
      add_output(id, vi.name());
    }
    record(graph.onnx_outputs(), vi, before, graph.outputs().size());
  }
  if (!composite) {
    graph.onnx_inputs().clear();
    graph.onnx_outputs().clear();
  }
  const std::map<int, int> padded = carry_extents(b);
  if (!overridden) {
    const auto padded_axis = [&](int id) {
      auto it = padded.find(id);
      return it == padded.end() ? -1 : it->second;
    };
    for (size_t k = 0; k < static_cast<size_t>(g.output_size()); ++k) {
      if (tensor_output[k] < 0) continue;
      const int id = graph.outputs()[static_cast<size_t>(tensor_output[k])];
      check_declared(g.output(static_cast<int>(k)), graph.value(id), "output", graph.extents().count(id) ? graph.extents().at(id).axis : -1);
    }
    for (const auto& vi : g.value_info()) {
      if (auto it = ids.find(vi.name()); it != ids.end()) check_declared(vi, graph.value(it->second), "value", padded_axis(it->second));
    }
  }
  graph.remove_dead();
  result.folded = b.folded() + fold_constant_cones(graph);
  if (opt.fold_affines) fold_layout_and_affines(graph);
  graph.validate();
  return result;
}

}  // namespace

void fold_layout_and_affines(Graph& g) {
  fold_conv_affine(g);
  cancel_transposes(g);
  pointwise_convs_as_matmuls(g);
  fold_product_scales(g);
  pair_gated_products(g);
  pack_sibling_products(g);
  clone_constant_chains(g);
}

namespace {

// The model at `path` (or in `bytes`, `label` naming them) with its local functions inlined
// (importer/functions.h); errors name the file.
onnx::ModelProto inlined(onnx::ModelProto model, const std::string& label) {
  try {
    inline_local_functions(model);
  } catch (const Error& e) {
    fail(label, ": ", e.what());
  }
  return model;
}

}  // namespace

OnnxSummary summarize_onnx(const fs::path& path) { return summarize(inlined(read_model(path), path.string())); }

ImportedModel import_onnx_bytes(std::string_view bytes, const fs::path& base_dir, const ImportOptions& options) {
  const onnx::ModelProto model = inlined(parse_model(bytes, "<memory>"), "<memory>");
  try {
    return import_model(model, base_dir, options);
  } catch (const Error& e) {
    fail("<memory>: ", e.what());
  }
}

ImportedModel import_onnx(const fs::path& path, const ImportOptions& options) {
  const onnx::ModelProto model = inlined(read_model(path), path.string());
  try {
    return import_model(model, path.parent_path(), options);
  } catch (const Error& e) {
    fail(path.string(), ": ", e.what());
  }
}

}  // namespace fusetune::importer
