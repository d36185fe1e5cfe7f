#include "importer/control_flow.h"

#include "core/error.h"
#include "core/ops.h"
#include "importer/onnx_io.h"

namespace fusetune::importer {

namespace {

const onnx::GraphProto* graph_attr(const onnx::NodeProto& n, const std::string& name) {
  for (const auto& a : n.attribute()) {
    if (a.name() == name && a.has_g()) return &a.g();
  }
  return nullptr;
}

std::vector<int64_t> ints_attr(const onnx::NodeProto& n, const std::string& name, std::vector<int64_t> fallback) {
  for (const auto& a : n.attribute()) {
    if (a.name() == name) return {a.ints().begin(), a.ints().end()};
  }
  return fallback;
}

// A value known at import (a constant, or computed from inputs whose values were given).
const Tensor* known_value(const GraphBuilder& b, int v) {
  if (v == kNoValue) return nullptr;
  if (b.value(v).is_constant()) return b.value(v).data.get();
  return b.known(v);
}

}  // namespace

int64_t int_attr(const onnx::NodeProto& n, const std::string& name, int64_t fallback) {
  for (const auto& a : n.attribute()) {
    if (a.name() == name) return a.i();
  }
  return fallback;
}

void check_attributes(const onnx::NodeProto& n, const std::set<std::string>& known) {
  for (const auto& a : n.attribute()) {
    check(known.count(a.name()) != 0, "attribute '", a.name(), "' is not supported (fusetune reads ", n.op_type(), " without it)");
  }
}

int64_t known_scalar(const onnx::NodeProto& n, const GraphBuilder& b, const std::vector<int>& ins, size_t k, const char* what) {
  const Tensor* t = known_value(b, ins[k]);
  check(t != nullptr, "input ", k, " ('", n.input(static_cast<int>(k)), "', the ", what, ") is not known at import: fusetune inlines ",
        n.op_type(), " only when it is a constant, shape arithmetic or an input whose value is given");
  check(t->numel() == 1, "input ", k, " (the ", what, ") must hold one value, it has shape ", shape_str(t->shape()));
  return t->to_ints()[0];
}

namespace {

int scalar_constant(GraphBuilder& b, const Tensor& t, const std::string& name) { return b.constant(t, name); }

// Per-iteration values (equal shapes) stacked on a new axis `axis`.
int stack(GraphBuilder& b, const std::vector<int>& parts, int64_t axis, const std::string& name) {
  check(!parts.empty(), "a scan output of no iteration has no shape");
  const Shape s = b.value(parts[0]).shape;
  check(axis >= 0 && axis <= static_cast<int64_t>(s.size()), "scan output axis ", axis, " is outside a rank of ", s.size() + 1);
  Shape one = s;
  one.insert(one.begin() + axis, 1);
  std::vector<int> lifted;
  for (int p : parts) {
    check(b.value(p).shape == s, "scan output values of shapes ", shape_str(s), " and ", shape_str(b.value(p).shape),
          " cannot be stacked");
    Attributes r;
    r.set("shape", one);
    lifted.push_back(b.emit("Reshape", {p}, r, name + "/lift"));
  }
  if (lifted.size() == 1) return lifted[0];
  Attributes c;
  c.set("axis", axis);
  return b.emit("Concat", lifted, c, name + "/stack");
}

// An If whose condition is known only at run time: both branches imported, each under a guard on
// the condition, and each output an IfMerge of the two branch results.
std::vector<int> lower_runtime_if(const onnx::NodeProto& n, int cond, const Scope& scope, GraphBuilder& b,
                                  const SubgraphImporter& import) {
  const Value& c = b.value(cond);
  check(c.dtype == DType::kBool && numel(c.shape) == 1, "input 0 ('", n.input(0), "', the condition) must be one bool, it is ",
        dtype_name(c.dtype), " ", shape_str(c.shape));
  std::vector<int> results[2];
  for (const bool when : {true, false}) {
    const char* attr = when ? "then_branch" : "else_branch";
    const onnx::GraphProto* branch = graph_attr(n, attr);
    check(branch != nullptr, "the ", attr, " subgraph is missing");
    const GuardScope guarded(b, {cond, when});
    std::vector<int>& outs = results[when ? 0 : 1];
    outs = import(*branch, scope, {}, n.name() + (when ? "/then/" : "/else/"));
    check(outs.size() == static_cast<size_t>(n.output_size()), "the ", attr, " has ", outs.size(), " outputs, the node ", n.output_size());
  }
  std::vector<int> merged;
  for (int k = 0; k < n.output_size(); ++k) {
    const int t = results[0][static_cast<size_t>(k)], e = results[1][static_cast<size_t>(k)];
    for (const int v : {t, e}) {
      check(!b.sequence_of(v) && !b.optional_of(v), "output ", k, " ('", n.output(k), "') is a ", b.sequence_of(v) ? "sequence" : "optional",
            ": an If whose condition is known only at run time gives tensors (pin the condition with --input-value)");
      check(!b.extents().count(v), "output ", k, " ('", n.output(k), "') has a size that depends on the data: an If whose condition",
            " is known only at run time gives tensors of one shape (pin the condition with --input-value)");
    }
    const Value &tv = b.value(t), &ev = b.value(e);
    check(tv.dtype == ev.dtype && tv.shape == ev.shape, "output ", k, " ('", n.output(k), "') is ", dtype_name(tv.dtype), " ",
          shape_str(tv.shape), " from the then_branch and ", dtype_name(ev.dtype), " ", shape_str(ev.shape),
          " from the else_branch: an If whose condition is known only at run time needs one type from both (pin the condition",
          " with --input-value)");
    merged.push_back(b.emit("IfMerge", {cond, t, e}, {}, n.name() + "/merge" + std::to_string(k)));
  }
  return merged;
}

std::vector<int> lower_if(const onnx::NodeProto& n, const std::vector<int>& ins, const Scope& scope, GraphBuilder& b,
                          const SubgraphImporter& import) {
  check_attributes(n, {"then_branch", "else_branch"});
  check(!ins.empty() && ins[0] != kNoValue, "the condition (input 0) is missing");
  const Tensor* known = known_value(b, ins[0]);
  if (known == nullptr) return lower_runtime_if(n, ins[0], scope, b, import);
  check(known->numel() == 1, "input 0 (the condition) must hold one value, it has shape ", shape_str(known->shape()));
  const bool cond = known->to_ints()[0] != 0;
  const onnx::GraphProto* branch = graph_attr(n, cond ? "then_branch" : "else_branch");
  check(branch != nullptr, "the ", cond ? "then_branch" : "else_branch", " subgraph is missing");
  std::vector<int> outs = import(*branch, scope, {}, n.name() + (cond ? "/then/" : "/else/"));
  check(outs.size() == static_cast<size_t>(n.output_size()), "the branch has ", outs.size(), " outputs, the node ", n.output_size());
  return outs;
}

std::vector<int> lower_loop(const onnx::NodeProto& n, const std::vector<int>& ins, const Scope& scope, GraphBuilder& b,
                            const SubgraphImporter& import) {
  check_attributes(n, {"body"});
  const onnx::GraphProto* body = graph_attr(n, "body");
  check(body != nullptr, "the body subgraph is missing");
  const int64_t trips = ins.size() > 0 && ins[0] != kNoValue ? known_scalar(n, b, ins, 0, "trip count M") : -1;
  bool cond = ins.size() > 1 && ins[1] != kNoValue ? known_scalar(n, b, ins, 1, "condition") != 0 : true;
  check(trips >= 0 || (ins.size() > 1 && ins[1] != kNoValue), "a Loop without a trip count or a condition never ends");
  std::vector<int> carried(ins.begin() + std::min<size_t>(2, ins.size()), ins.end());
  const size_t n_carried = carried.size();
  check(body->input_size() == static_cast<int>(n_carried) + 2, "the body takes ", body->input_size(), " inputs, the Loop gives ",
        n_carried + 2);
  const size_t n_scan = static_cast<size_t>(body->output_size()) - 1 - n_carried;
  check(static_cast<size_t>(n.output_size()) == n_carried + n_scan, "the Loop has ", n.output_size(), " outputs, its body makes ",
        n_carried + n_scan);
  std::vector<std::vector<int>> scans(n_scan);
  int cond_id = ins.size() > 1 && ins[1] != kNoValue ? ins[1] : scalar_constant(b, Tensor::scalar_int(DType::kBool, 1), n.name() + "/cond");
  for (int64_t i = 0; (trips < 0 || i < trips) && cond; ++i) {
    check(i < kMaxIterations, "the Loop runs more than ", kMaxIterations, " iterations (fusetune unrolls it)");
    std::vector<int> args = {scalar_constant(b, Tensor::scalar_int(DType::kI64, i), n.name() + "/iteration" + std::to_string(i)), cond_id};
    args.insert(args.end(), carried.begin(), carried.end());
    const std::vector<int> outs = import(*body, scope, args, n.name() + "/" + std::to_string(i) + "/");
    cond_id = outs[0];
    const Tensor* c = known_value(b, cond_id);
    check(c != nullptr || trips >= 0, "the body's condition output is computed from data at iteration ", i,
          ": fusetune unrolls a Loop only when its condition is known at import");
    if (c != nullptr) cond = c->to_ints().at(0) != 0;
    carried.assign(outs.begin() + 1, outs.begin() + 1 + static_cast<std::ptrdiff_t>(n_carried));
    for (size_t s = 0; s < n_scan; ++s) scans[s].push_back(outs[1 + n_carried + s]);
  }
  std::vector<int> result = carried;
  for (size_t s = 0; s < n_scan; ++s) result.push_back(stack(b, scans[s], 0, n.name() + "/scan" + std::to_string(s)));
  return result;
}

std::vector<int> lower_scan(const onnx::NodeProto& n, int64_t opset, const std::vector<int>& ins, const Scope& scope, GraphBuilder& b,
                            const SubgraphImporter& import) {
  check(opset >= 9, "Scan of opset ", opset, " (with sequence_lens and a batch axis) is not supported; opset 9 and later are");
  check_attributes(n, {"body", "num_scan_inputs", "scan_input_axes", "scan_input_directions", "scan_output_axes",
                       "scan_output_directions"});
  const onnx::GraphProto* body = graph_attr(n, "body");
  check(body != nullptr, "the body subgraph is missing");
  const auto m = static_cast<size_t>(int_attr(n, "num_scan_inputs", 0));
  check(m >= 1 && m <= ins.size(), "num_scan_inputs ", m, " is outside [1, ", ins.size(), "]");
  const size_t n_states = ins.size() - m;
  const size_t n_scan_out = static_cast<size_t>(body->output_size()) - n_states;
  const auto in_axes = ints_attr(n, "scan_input_axes", std::vector<int64_t>(m, 0));
  const auto in_dirs = ints_attr(n, "scan_input_directions", std::vector<int64_t>(m, 0));
  const auto out_axes = ints_attr(n, "scan_output_axes", std::vector<int64_t>(n_scan_out, 0));
  const auto out_dirs = ints_attr(n, "scan_output_directions", std::vector<int64_t>(n_scan_out, 0));
  check(in_axes.size() == m && in_dirs.size() == m && out_axes.size() == n_scan_out && out_dirs.size() == n_scan_out,
        "the scan axes and directions must have one entry per scan input and output");
  int64_t steps = -1;
  std::vector<int64_t> axes(m);
  for (size_t k = 0; k < m; ++k) {
    const Shape& s = b.value(ins[n_states + k]).shape;
    axes[k] = normalize_axis(in_axes[k], static_cast<int64_t>(s.size()), "scan_input_axes");
    const int64_t len = s[static_cast<size_t>(axes[k])];
    check(steps < 0 || len == steps, "scan inputs of ", steps, " and ", len, " elements along their axes");
    steps = len;
  }
  check(steps <= kMaxIterations, "the Scan runs ", steps, " iterations, more than ", kMaxIterations, " (fusetune unrolls it)");
  std::vector<int> states(ins.begin(), ins.begin() + static_cast<std::ptrdiff_t>(n_states));
  std::vector<std::vector<int>> outs(n_scan_out);
  for (int64_t t = 0; t < steps; ++t) {
    std::vector<int> args = states;
    for (size_t k = 0; k < m; ++k) {
      const int64_t at = in_dirs[k] != 0 ? steps - 1 - t : t;
      Attributes g;
      g.set("axis", axes[k]);
      const std::string name = n.name() + "/" + std::to_string(t) + "/slice" + std::to_string(k);
      args.push_back(b.emit("Gather", {ins[n_states + k], scalar_constant(b, Tensor::scalar_int(DType::kI64, at), name + "/at")}, g, name));
    }
    const std::vector<int> r = import(*body, scope, args, n.name() + "/" + std::to_string(t) + "/");
    states.assign(r.begin(), r.begin() + static_cast<std::ptrdiff_t>(n_states));
    for (size_t s = 0; s < n_scan_out; ++s) outs[s].push_back(r[n_states + s]);
  }
  std::vector<int> result = states;
  for (size_t s = 0; s < n_scan_out; ++s) {
    if (out_dirs[s] != 0) std::reverse(outs[s].begin(), outs[s].end());
    const auto rank = static_cast<int64_t>(outs[s].empty() ? 0 : b.value(outs[s][0]).shape.size()) + 1;
    result.push_back(stack(b, outs[s], normalize_axis(out_axes[s], rank, "scan_output_axes"), n.name() + "/scan" + std::to_string(s)));
  }
  return result;
}

// The names a graph reads that it does not define (its own inputs, initializers, node outputs),
// through nested subgraphs too.
void free_names(const onnx::GraphProto& g, std::set<std::string>& out) {
  std::set<std::string> defined;
  for (const auto& i : g.input()) defined.insert(i.name());
  for (const auto& i : g.initializer()) defined.insert(i.name());
  for (const auto& node : g.node()) {
    for (const auto& o : node.output()) defined.insert(o);
  }
  std::set<std::string> used;
  for (const auto& node : g.node()) {
    for (const auto& i : node.input()) {
      if (!i.empty()) used.insert(i);
    }
    outer_names(node, used);
  }
  for (const auto& o : g.output()) used.insert(o.name());
  for (const std::string& u : used) {
    if (!defined.count(u)) out.insert(u);
  }
}

}  // namespace

bool is_control_flow(const std::string& op_type) { return op_type == "If" || op_type == "Loop" || op_type == "Scan"; }

void outer_names(const onnx::NodeProto& n, std::set<std::string>& names) {
  each_subgraph(n, [&](const onnx::GraphProto& g) { free_names(g, names); });
}

std::vector<int> lower_control_flow(const onnx::NodeProto& n, int64_t opset, const std::vector<int>& ins, const Scope& scope,
                                    GraphBuilder& b, const SubgraphImporter& import) {
  if (n.op_type() == "If") return lower_if(n, ins, scope, b, import);
  if (n.op_type() == "Loop") return lower_loop(n, ins, scope, b, import);
  return lower_scan(n, opset, ins, scope, b, import);
}

}  // namespace fusetune::importer
