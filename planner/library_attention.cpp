#include "planner/library_attention.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <vector>

#include "planner/attention.h"
#include "planner/strided_view.h"

namespace fusetune::planner {

namespace {

class Matcher {
 public:
  Matcher(const Graph& g, const FusionGroup& group) : g_(g), members_(group.nodes.begin(), group.nodes.end()) {}

  const Node& node(int id) const { return g_.nodes()[static_cast<size_t>(id)]; }

  // The member computing v, or -1.
  int producer(int v) const {
    for (int id : members_) {
      if (node(id).outputs[0] == v) return id;
    }
    return -1;
  }

  // A scalar constant's value.
  std::optional<float> scalar(int v) const {
    const Value& c = g_.value(v);
    if (!c.is_constant() || c.data->numel() != 1 || !is_float(c.dtype)) return std::nullopt;
    return c.data->to_floats()[0];
  }

  // v's view in a buffer outside the group after the scalings by constants just before it (their
  // product multiplies `scale`), as [batch, heads, rows, width] (a rank-3 value gets batch 1).
  std::optional<StridedView> operand(int v, float& scale) {
    for (int p = producer(v); p >= 0; p = producer(v)) {
      const Node& n = node(p);
      if (n.op != "Mul" && n.op != "Div") break;
      const std::optional<float> c = scalar(n.inputs[1]);
      const std::optional<float> c0 = n.op == "Mul" ? scalar(n.inputs[0]) : std::nullopt;
      if (c) {
        scale = n.op == "Mul" ? scale * *c : scale / *c;
        v = n.inputs[0];
      } else if (c0) {
        scale *= *c0;
        v = n.inputs[1];
      } else {
        break;
      }
      covered_.insert(p);
    }
    std::optional<StridedView> view = input_view(g_, members_, v);
    if (!view || grouped(*view)) return std::nullopt;
    covered_.insert(view->path.begin(), view->path.end());
    return rank4(*view);
  }

  static std::optional<StridedView> rank4(StridedView v) {
    if (v.dims.size() == 3) {
      v.dims.insert(v.dims.begin(), 1);
      v.strides.insert(v.strides.begin(), 0);
      v.groups.insert(v.groups.begin(), 1);
    }
    if (v.dims.size() != 4) return std::nullopt;
    return v;
  }

  // v's value where the members computing it read constants only (the causal condition a model
  // slices from a buffer it keeps).
  std::optional<Tensor> constant(int v) { return member_constant(g_, members_, v, &covered_); }

  void cover(int id) { covered_.insert(id); }
  bool covers_all() const {
    return std::all_of(members_.begin(), members_.end(), [&](int id) { return covered_.count(id) != 0; });
  }
  const std::set<int>& members() const { return members_; }

 private:
  const Graph& g_;
  const std::set<int> members_;
  std::set<int> covered_;
};

OperandLayout layout(const StridedView& v) {
  OperandLayout l;
  l.offset = v.offset;
  std::copy(v.strides.begin(), v.strides.end(), l.strides.begin());
  return l;
}

bool aligned(const OperandLayout& l, int width_axis) {
  constexpr int64_t kElements = 8;  // 16 bytes of 16-bit values
  if (l.offset % kElements != 0) return false;
  for (int d = 0; d < 4; ++d) {
    if (d == width_axis ? l.strides[static_cast<size_t>(d)] != 1 : l.strides[static_cast<size_t>(d)] % kElements != 0) return false;
  }
  return true;
}

}  // namespace

std::optional<LibraryMatch> match_attention_call(const Graph& g, const FusionGroup& group) {
  if (group.outputs.size() != 1) return std::nullopt;
  const std::optional<AttentionCore> core = match_attention(g, group);
  if (!core) return std::nullopt;
  Matcher m(g, group);
  const Node& qk = m.node(core->scores);
  const Node& pv = m.node(core->output);
  const DType dt = g.value(qk.inputs[0]).dtype;
  if (dt != DType::kF16 && dt != DType::kBF16) return std::nullopt;
  for (int v : {qk.inputs[1], pv.inputs[1], pv.outputs[0], group.outputs[0]}) {
    if (g.value(v).dtype != dt) return std::nullopt;
  }
  LibraryMatch match;
  LibraryCall& c = match.call;
  c.op = LibraryOp::kAttention;
  c.library = kCudnn;
  c.dtype = dt;
  AttentionShape& a = c.attention;
  for (int id : core->absorbed) m.cover(id);
  m.cover(core->output);
  float scale = 1.0f;
  const std::optional<StridedView> q = m.operand(qk.inputs[0], scale);
  const std::optional<StridedView> kt = m.operand(qk.inputs[1], scale);
  float unscaled = 1.0f;
  const std::optional<StridedView> v = m.operand(pv.inputs[1], unscaled);
  std::optional<StridedView> o = output_view(g, m.members(), pv.outputs[0]);
  if (!q || !kt || !v || !o || unscaled != 1.0f || o->base != group.outputs[0]) return std::nullopt;
  for (int id : o->path) m.cover(id);
  o = Matcher::rank4(*o);
  if (!o) return std::nullopt;
  const Shape &qd = q->dims, &kd = kt->dims, &vd = v->dims, &od = o->dims;
  for (size_t d = 0; d < 2; ++d) {
    if (kd[d] != qd[d] || vd[d] != qd[d] || od[d] != qd[d]) return std::nullopt;
  }
  if (kd[2] != qd[3] || vd[2] != kd[3] || od[2] != qd[2] || od[3] != vd[3]) return std::nullopt;
  c.batch = qd[0];
  a.heads = qd[1];
  a.queries = qd[2];
  a.head = qd[3];
  a.keys = kd[3];
  a.value_head = vd[3];
  a.q = layout(*q);
  a.k = layout(*kt);
  std::swap(a.k.strides[2], a.k.strides[3]);  // Kᵀ's view, as K [batch, heads, keys, head]
  a.v = layout(*v);
  a.o = layout(*o);
  match.inputs = {q->base, kt->base, v->base};
  // The chain between the product and the softmax.
  std::set<int> path = {qk.outputs[0]};
  for (int id : core->absorbed) path.insert(m.node(id).outputs[0]);
  const auto on_path = [&](int x) { return path.count(x) != 0; };
  // In path order (the absorbed nodes are sorted by id, the graph's order): the library scales the
  // product before it adds the bias and masks, so a scaling after either is no call.
  bool biased_or_masked = false;
  for (int id : core->absorbed) {
    const Node& n = m.node(id);
    if (id == core->scores || id == core->softmax) continue;
    if (n.op == "Cast") {
      if (!is_float(g.value(n.outputs[0]).dtype)) return std::nullopt;
    } else if (n.op == "Mul" || n.op == "Div") {
      const int other = on_path(n.inputs[0]) ? n.inputs[1] : n.inputs[0];
      const std::optional<float> s = m.scalar(other);
      if (!s || on_path(other) || (n.op == "Div" && other != n.inputs[1]) || biased_or_masked) return std::nullopt;
      scale = n.op == "Mul" ? scale * *s : scale / *s;
    } else if (n.op == "Add") {
      const int other = on_path(n.inputs[0]) ? n.inputs[1] : n.inputs[0];
      if (c.bias || on_path(other) || g.value(other).dtype != dt) return std::nullopt;
      std::optional<StridedView> b = input_view(g, m.members(), other);
      if (!b || grouped(*b) || b->dims.size() > 4) return std::nullopt;
      for (int p : b->path) m.cover(p);
      // Broadcast to [batch, heads, queries, keys]: leading axes added, extent-1 axes stride 0.
      const Shape want = {c.batch, a.heads, a.queries, a.keys};
      const size_t lead = 4 - b->dims.size();
      c.bias = true;
      for (size_t d = 0; d < 4; ++d) {
        const int64_t extent = d < lead ? 1 : b->dims[d - lead];
        if (extent != want[d] && extent != 1) return std::nullopt;
        a.bias.strides[d] = d < lead || extent != want[d] ? 0 : b->strides[d - lead];
      }
      a.bias.offset = b->offset;
      match.inputs.push_back(b->base);
      biased_or_masked = true;
    } else if (n.op == "Where") {
      const bool scores_kept = on_path(n.inputs[1]);
      const int fill = scores_kept ? n.inputs[2] : n.inputs[1];
      const std::optional<float> f = m.scalar(fill);
      const std::optional<Tensor> cond = m.constant(n.inputs[0]);
      bool causal = false;
      if (!f || !(*f <= kMaskedScore) || on_path(fill) || !cond || a.causal ||
          !causal_mask(*cond, a.queries, a.keys, !scores_kept, causal)) {
        return std::nullopt;
      }
      a.causal = causal;
      biased_or_masked = true;
    } else {
      return std::nullopt;
    }
  }
  a.scale = scale;
  if (!m.covers_all() || !std::isfinite(scale)) return std::nullopt;
  // Every query sees a key (more queries than keys under a causal mask leave rows with none, which
  // the library and the model would fill differently).
  if (a.causal && a.queries > a.keys) return std::nullopt;
  // One K and V per head: a head axis of stride 0 is a broadcast of an operand (grouped-query
  // attention's repeat is a grouped axis, refused above), which the generated flash form computes.
  for (const StridedView* view : std::initializer_list<const StridedView*>{&*q, &*kt, &*v, &*o}) {
    for (size_t d = 0; d < 4; ++d) {
      if (view->dims[d] > 1 && view->strides[d] == 0) return std::nullopt;
    }
  }
  // The library's layout rules (cuDNN's SDPA moves its operands in 16-byte vectors).
  if (a.head % 8 != 0 || a.value_head % 8 != 0 || a.head > 256 || a.value_head > 256) return std::nullopt;
  if (!aligned(a.q, 3) || !aligned(a.k, 3) || !aligned(a.v, 3) || !aligned(a.o, 3)) return std::nullopt;
  if (c.bias && (a.bias.offset % 8 != 0 || !(a.bias.strides[3] == 1 || a.keys == 1) ||
                 std::any_of(a.bias.strides.begin(), a.bias.strides.begin() + 3, [](int64_t s) { return s % 8 != 0; }))) {
    return std::nullopt;
  }
  match.output = group.outputs[0];
  return match;
}

}  // namespace fusetune::planner
