#include "planner/held_rows.h"

#include <algorithm>
#include <set>

#include "core/ops.h"

namespace fusetune::planner {

namespace {

constexpr int64_t kLanes = 32;

bool normalization(const Node& n) { return find_op(n.op)->kind == OpKind::kNormalization; }

}  // namespace

std::vector<size_t> normalized_axes(const Graph& g, const Node& n) {
  const auto rank = static_cast<int64_t>(g.value(n.inputs[0]).shape.size());
  const auto axis = static_cast<size_t>(normalize_axis(n.attrs.i("axis", -1), rank, "axis"));
  std::vector<size_t> axes;
  for (size_t d = axis; d < static_cast<size_t>(rank); ++d) {
    if (d == axis || n.op == "LayerNormalization") axes.push_back(d);
  }
  return axes;
}

HeldRows held_rows(const Graph& g, const FusionGroup& group, const Node& n, int threads, int64_t max_rows) {
  HeldRows h;
  const Shape& xs = g.value(n.inputs[0]).shape;
  const std::vector<size_t> axes = normalized_axes(g, n);
  h.count = 1;
  for (size_t d : axes) h.count *= xs[d];
  const int64_t warps = threads / kLanes;
  while (h.warps_per_row * 2 <= warps / std::max<int64_t>(1, max_rows) && warps % (h.warps_per_row * 2) == 0) {
    h.warps_per_row *= 2;
  }
  for (int v : group.inputs) {
    if (dtype_size(g.value(v).dtype) == 2 && is_float(g.value(v).dtype)) h.run = 8;
  }
  const int64_t lanes = kLanes * h.warps_per_row;
  h.runs = (h.count + lanes * h.run - 1) / (lanes * h.run);
  const bool inner = !axes.empty() && axes.back() + 1 == xs.size();
  h.held = inner && xs.back() % h.run == 0 && 2 * (h.count / h.run) >= lanes && h.runs * h.run <= kHeldElements;
  return h;
}

int row_consumer(const Graph& g, const FusionGroup& group, int node) {
  const Node& p = g.nodes()[static_cast<size_t>(node)];
  if (!normalization(p)) return -1;
  const int v = p.outputs[0];
  const Shape& shape = g.value(v).shape;
  const std::set<int> exported(group.outputs.begin(), group.outputs.end());
  for (int cur = v;;) {
    int reader = -1;
    for (int id : group.nodes) {
      const Node& m = g.nodes()[static_cast<size_t>(id)];
      if (std::find(m.inputs.begin(), m.inputs.end(), cur) == m.inputs.end()) continue;
      if (reader >= 0) return -1;  // a second reader
      reader = id;
    }
    if (reader < 0) return -1;
    const Node& r = g.nodes()[static_cast<size_t>(reader)];
    if (normalization(r)) {
      const bool only_x = std::count(r.inputs.begin(), r.inputs.end(), cur) == 1 && r.inputs[0] == cur;
      return only_x ? reader : -1;
    }
    if (find_op(r.op)->kind != OpKind::kElementwise || r.outputs.size() != 1 || g.value(r.outputs[0]).shape != shape ||
        exported.count(r.outputs[0])) {
      return -1;
    }
    cur = r.outputs[0];
  }
}

bool rows_handed(const Graph& g, const FusionGroup& group, const Node& producer, int64_t producer_rows,
                 const Node& consumer, int64_t consumer_rows, int threads) {
  const HeldRows a = held_rows(g, group, producer, threads, producer_rows);
  const HeldRows b = held_rows(g, group, consumer, threads, consumer_rows);
  const int64_t batch = threads / kLanes / a.warps_per_row;  // rows a batch of the block's warps takes
  return a.held && b.held && a.warps_per_row == b.warps_per_row && a.run == b.run && a.runs == b.runs &&
         a.count == b.count && normalized_axes(g, producer) == normalized_axes(g, consumer) &&
         producer_rows == consumer_rows && producer_rows <= batch;
}

bool rows_coincide(const Graph& g, const Node& producer, const std::vector<Interval>& producer_region,
                   const std::vector<Interval>& consumer_region) {
  if (producer_region != consumer_region) return false;
  const Shape& s = g.value(producer.outputs[0]).shape;
  for (size_t a : normalized_axes(g, producer)) {
    if (!(producer_region[a] == Interval{0, s[a] - 1})) return false;
  }
  return true;
}

}  // namespace fusetune::planner
