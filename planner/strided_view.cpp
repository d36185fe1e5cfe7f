#include "planner/strided_view.h"

#include <algorithm>

namespace fusetune::planner {

StridedView contiguous_view(int base, const Shape& dims) {
  StridedView v;
  v.base = base;
  v.dims = dims;
  v.strides.assign(dims.size(), 1);
  v.groups.assign(dims.size(), 1);
  for (size_t d = dims.size(); d-- > 1;) v.strides[d - 1] = v.strides[d] * dims[d];
  return v;
}

bool grouped(const StridedView& v) {
  return std::any_of(v.groups.begin(), v.groups.end(), [](int64_t g) { return g != 1; });
}

namespace {

// An ungrouped view reshaped by runs of contiguous axes.
std::optional<StridedView> reshape_plain(const StridedView& v, const Shape& to) {
  StridedView out = v;
  out.dims = to;
  out.strides.assign(to.size(), 0);
  out.groups.assign(to.size(), 1);
  // From the last axis: each run of input axes contiguous with each other (a "chunk") must be
  // covered exactly by a run of output axes, which then step through it at its base stride.
  int64_t view_d = static_cast<int64_t>(to.size()) - 1;
  int64_t chunk_stride = v.strides.back(), tensor_numel = 1, view_numel = 1;
  for (int64_t d = static_cast<int64_t>(v.dims.size()) - 1; d >= 0; --d) {
    const auto du = static_cast<size_t>(d);
    tensor_numel *= v.dims[du];
    const bool chunk_ends = d == 0 || (v.dims[du - 1] != 1 && v.strides[du - 1] != tensor_numel * chunk_stride);
    if (!chunk_ends) continue;
    while (view_d >= 0 && (view_numel < tensor_numel || to[static_cast<size_t>(view_d)] == 1)) {
      out.strides[static_cast<size_t>(view_d)] = view_numel * chunk_stride;
      view_numel *= to[static_cast<size_t>(view_d)];
      --view_d;
    }
    if (view_numel != tensor_numel) return std::nullopt;
    if (d > 0) {
      chunk_stride = v.strides[du - 1];
      tensor_numel = view_numel = 1;
    }
  }
  if (view_d != -1) return std::nullopt;
  return out;
}

// Axes [a, b) of v, at offset 0.
StridedView axes(const StridedView& v, size_t a, size_t b) {
  StridedView out;
  out.base = v.base;
  out.dims.assign(v.dims.begin() + static_cast<std::ptrdiff_t>(a), v.dims.begin() + static_cast<std::ptrdiff_t>(b));
  out.strides.assign(v.strides.begin() + static_cast<std::ptrdiff_t>(a), v.strides.begin() + static_cast<std::ptrdiff_t>(b));
  out.groups.assign(v.groups.begin() + static_cast<std::ptrdiff_t>(a), v.groups.begin() + static_cast<std::ptrdiff_t>(b));
  return out;
}

// A part of a view reshaped; a part of one element (either side may have no axes) becomes axes
// of extent 1.
std::optional<StridedView> reshape_part(const StridedView& v, const Shape& to) {
  if (numel(v.dims) != numel(to)) return std::nullopt;
  if (numel(to) == 1) {
    StridedView out = axes(v, 0, 0);
    out.dims = to;
    out.strides.assign(to.size(), 0);
    out.groups.assign(to.size(), 1);
    return out;
  }
  return reshape_view(v, to);
}

}  // namespace

std::optional<StridedView> reshape_view(const StridedView& v, const Shape& to) {
  if (v.dims.empty() || to.empty() || numel(v.dims) != numel(to) || numel(to) == 0) return std::nullopt;
  const size_t rank = v.dims.size();
  const auto first_grouped = std::find_if(v.groups.begin(), v.groups.end(), [](int64_t g) { return g != 1; });
  if (first_grouped == v.groups.end()) {
    if (std::optional<StridedView> out = reshape_plain(v, to)) return out;
    // A broadcast axis merged into the axis before it: that axis grouped by its extent.
    for (size_t d = 1; d < rank; ++d) {
      if (v.strides[d] != 0 || v.dims[d] < 2 || v.strides[d - 1] == 0 || v.dims[d - 1] < 2) continue;
      StridedView merged = v;
      merged.dims[d - 1] *= v.dims[d];
      merged.groups[d - 1] = v.dims[d];
      merged.dims.erase(merged.dims.begin() + static_cast<std::ptrdiff_t>(d));
      merged.strides.erase(merged.strides.begin() + static_cast<std::ptrdiff_t>(d));
      merged.groups.erase(merged.groups.begin() + static_cast<std::ptrdiff_t>(d));
      if (std::optional<StridedView> out = reshape_view(merged, to)) return out;
    }
    return std::nullopt;
  }
  // A grouped axis stays one axis of the result, the axes on either side reshaped apart.
  const size_t d = static_cast<size_t>(first_grouped - v.groups.begin());
  const int64_t before = numel(Shape(v.dims.begin(), v.dims.begin() + static_cast<std::ptrdiff_t>(d)));
  int64_t seen = 1;
  size_t o = 0;
  while (o < to.size() && (seen < before || (seen == before && to[o] != v.dims[d]))) seen *= to[o++];
  if (o == to.size() || seen != before) return std::nullopt;
  const std::optional<StridedView> left = reshape_part(axes(v, 0, d), Shape(to.begin(), to.begin() + static_cast<std::ptrdiff_t>(o)));
  const std::optional<StridedView> right = reshape_part(axes(v, d + 1, rank), Shape(to.begin() + static_cast<std::ptrdiff_t>(o) + 1, to.end()));
  if (!left || !right) return std::nullopt;
  StridedView out = v;
  out.dims = to;
  out.strides = left->strides;
  out.strides.push_back(v.strides[d]);
  out.strides.insert(out.strides.end(), right->strides.begin(), right->strides.end());
  out.groups = left->groups;
  out.groups.push_back(v.groups[d]);
  out.groups.insert(out.groups.end(), right->groups.begin(), right->groups.end());
  return out;
}

namespace {

int producer_in(const Graph& g, const std::set<int>& nodes, int value) {
  for (int id : nodes) {
    for (int out : g.nodes()[static_cast<size_t>(id)].outputs) {
      if (out == value) return id;
    }
  }
  return -1;
}

std::vector<int> consumers_in(const Graph& g, const std::set<int>& nodes, int value) {
  std::vector<int> users;
  for (int id : nodes) {
    const std::vector<int>& ins = g.nodes()[static_cast<size_t>(id)].inputs;
    if (std::find(ins.begin(), ins.end(), value) != ins.end()) users.push_back(id);
  }
  return users;
}

}  // namespace

std::optional<StridedView> input_view(const Graph& g, const std::set<int>& nodes, int value) {
  const int id = producer_in(g, nodes, value);
  if (id < 0) return contiguous_view(value, g.value(value).shape);
  const Node& n = g.nodes()[static_cast<size_t>(id)];
  if (n.inputs.size() != 1) return std::nullopt;
  std::optional<StridedView> in = input_view(g, nodes, n.inputs[0]);
  if (!in) return std::nullopt;
  const Shape& out_shape = g.value(value).shape;
  std::optional<StridedView> out;
  if (n.op == "Reshape") {
    out = reshape_view(*in, out_shape);
  } else if (n.op == "Transpose") {
    const auto perm = n.attrs.ints("perm");
    out = *in;
    for (size_t d = 0; d < perm.size(); ++d) {
      out->dims[d] = in->dims[static_cast<size_t>(perm[d])];
      out->strides[d] = in->strides[static_cast<size_t>(perm[d])];
      out->groups[d] = in->groups[static_cast<size_t>(perm[d])];
    }
  } else if (n.op == "Slice") {
    const auto starts = n.attrs.ints("starts"), steps = n.attrs.ints("steps");
    out = *in;
    for (size_t d = 0; d < starts.size(); ++d) {
      if (steps[d] < 1 || (in->groups[d] != 1 && (starts[d] != 0 || steps[d] != 1))) return std::nullopt;
      out->offset += starts[d] * in->strides[d];
      out->strides[d] *= steps[d];
    }
    out->dims = out_shape;
  } else if (n.op == "Expand") {
    if (out_shape.size() < in->dims.size()) return std::nullopt;
    out = *in;
    const size_t lead = out_shape.size() - in->dims.size();
    out->dims = out_shape;
    out->strides.insert(out->strides.begin(), lead, 0);
    out->groups.insert(out->groups.begin(), lead, 1);
    for (size_t d = lead; d < out_shape.size(); ++d) {
      if (in->dims[d - lead] != out_shape[d]) out->strides[d] = 0;  // a broadcast axis of extent 1
    }
  }
  if (!out) return std::nullopt;
  out->path.push_back(id);
  return out;
}

std::optional<StridedView> output_view(const Graph& g, const std::set<int>& nodes, int value) {
  const std::vector<int> users = consumers_in(g, nodes, value);
  if (users.empty()) return contiguous_view(value, g.value(value).shape);
  if (users.size() != 1) return std::nullopt;
  const Node& n = g.nodes()[static_cast<size_t>(users[0])];
  if (n.op != "Reshape" && n.op != "Transpose") return std::nullopt;
  std::optional<StridedView> next = output_view(g, nodes, n.outputs[0]);
  if (!next) return std::nullopt;
  std::optional<StridedView> out;
  if (n.op == "Reshape") {
    out = reshape_view(*next, g.value(value).shape);
  } else {  // output axis d is input axis perm[d]
    const auto perm = n.attrs.ints("perm");
    out = *next;
    for (size_t d = 0; d < perm.size(); ++d) {
      out->dims[static_cast<size_t>(perm[d])] = next->dims[d];
      out->strides[static_cast<size_t>(perm[d])] = next->strides[d];
      out->groups[static_cast<size_t>(perm[d])] = next->groups[d];
    }
  }
  if (!out) return std::nullopt;
  out->path.insert(out->path.begin(), users[0]);
  return out;
}

}  // namespace fusetune::planner
