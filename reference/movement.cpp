// Reference data movement: every op here computes, for each output element, the offset of the
// input element it copies (or -1 for a fill value) and copies raw bytes, so all dtypes work alike.
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/ops.h"
#include "reference/kernel_util.h"
#include "reference/kernels.h"

namespace fusetune::reference {

void run_resize(const Node& node, const Tensor& x, Tensor& out);  // resize.cpp

namespace {

// out[i] = in[offsets[i]], or `fill` (a one-element tensor of out's dtype) where offsets[i] < 0.
void copy_by_offsets(const Tensor& in, const std::vector<int64_t>& offsets, Tensor& out, const Tensor* fill = nullptr) {
  const size_t elem = dtype_size(out.dtype());
  for (size_t i = 0; i < offsets.size(); ++i) {
    const std::byte* src = offsets[i] >= 0 ? in.data() + offsets[i] * static_cast<int64_t>(elem) : fill->data();
    std::memcpy(out.data() + i * elem, src, elem);
  }
}

// Calls f(coords) for each output coordinate in row-major order and collects the offsets it returns.
template <typename F>
std::vector<int64_t> offsets_for(const Shape& out, F&& f) {
  const int64_t n = numel(out);
  std::vector<int64_t> offsets(static_cast<size_t>(n));
  std::vector<int64_t> idx(out.size(), 0);
  for (int64_t k = 0; k < n; ++k) {
    offsets[static_cast<size_t>(k)] = f(idx);
    for (size_t d = out.size(); d-- > 0;) {
      if (++idx[d] < out[d]) break;
      idx[d] = 0;
    }
  }
  return offsets;
}

void run_transpose(const Node& n, const Tensor& x, Tensor& out) {
  const auto perm = n.attrs.ints("perm");
  const auto in_strides = strides_of(x.shape());
  copy_by_offsets(x, offsets_for(out.shape(), [&](const std::vector<int64_t>& idx) {
    int64_t off = 0;
    for (size_t d = 0; d < idx.size(); ++d) off += idx[d] * in_strides[static_cast<size_t>(perm[d])];
    return off;
  }), out);
}

void run_concat(const Node& n, std::span<const Tensor* const> in, Tensor& out) {
  const int64_t axis = normalize_axis(n.attrs.i("axis"), out.rank(), "axis");
  const AxisSplit s = split_at(out.shape(), axis);
  const size_t elem = dtype_size(out.dtype());
  std::byte* dst = out.data();
  for (int64_t o = 0; o < s.outer; ++o) {
    for (const Tensor* t : in) {
      const size_t chunk = static_cast<size_t>(t->shape()[static_cast<size_t>(axis)] * s.inner) * elem;
      if (chunk == 0) continue;  // an empty tensor's data() may be null, which memcpy must not get
      std::memcpy(dst, t->data() + static_cast<size_t>(o) * chunk, chunk);
      dst += chunk;
    }
  }
}

void run_slice(const Node& n, const Tensor& x, Tensor& out) {
  const auto starts = n.attrs.ints("starts");
  const auto steps = n.attrs.ints("steps");
  const auto in_strides = strides_of(x.shape());
  copy_by_offsets(x, offsets_for(out.shape(), [&](const std::vector<int64_t>& idx) {
    int64_t off = 0;
    for (size_t d = 0; d < idx.size(); ++d) off += (starts[d] + idx[d] * steps[d]) * in_strides[d];
    return off;
  }), out);
}

void run_gather(const Node& n, const Tensor& data, const Tensor& indices, Tensor& out) {
  const int64_t axis = normalize_axis(n.attrs.i("axis"), data.rank(), "axis");
  const AxisSplit s = split_at(data.shape(), axis);
  std::vector<int64_t> idx = indices.to_ints();
  for (int64_t& i : idx) {
    check(i >= -s.extent && i < s.extent, "index ", i, " is out of range for axis ", axis, " of extent ", s.extent);
    if (i < 0) i += s.extent;
  }
  std::vector<int64_t> offsets;
  offsets.reserve(static_cast<size_t>(out.numel()));
  for (int64_t o = 0; o < s.outer; ++o) {
    for (int64_t i : idx) {
      for (int64_t r = 0; r < s.inner; ++r) offsets.push_back((o * s.extent + i) * s.inner + r);
    }
  }
  copy_by_offsets(data, offsets, out);
}

void run_tile(const Tensor& x, Tensor& out) {
  const auto in_strides = strides_of(x.shape());
  copy_by_offsets(x, offsets_for(out.shape(), [&](const std::vector<int64_t>& idx) {
    int64_t off = 0;
    for (size_t d = 0; d < idx.size(); ++d) off += (idx[d] % x.shape()[d]) * in_strides[d];
    return off;
  }), out);
}

void run_pad(const Node& n, const Tensor& x, Tensor& out) {
  const auto pads = n.attrs.ints("pads");
  const std::string mode = n.attrs.s("mode", "constant");
  const size_t r = x.shape().size();
  const auto in_strides = strides_of(x.shape());
  const Tensor fill = Tensor::from_floats(out.dtype(), {}, std::vector<float>{n.attrs.f("value")});
  copy_by_offsets(x, offsets_for(out.shape(), [&](const std::vector<int64_t>& idx) -> int64_t {
    int64_t off = 0;
    for (size_t d = 0; d < r; ++d) {
      const int64_t dim = x.shape()[d];
      int64_t c = idx[d] - pads[d];
      if (c < 0 || c >= dim) {
        if (mode == "constant") return -1;
        if (mode == "edge") {
          c = c < 0 ? 0 : dim - 1;
        } else {  // reflect, without repeating the edge; pads are smaller than the extent
          const int64_t period = 2 * (dim - 1);
          c = period == 0 ? 0 : ((c % period) + period) % period;
          if (c >= dim) c = period - c;
        }
      }
      off += c * in_strides[d];
    }
    return off;
  }), out, &fill);
}

void run_scatter_nd(const Node& n, const Tensor& data, const Tensor& indices, const Tensor& updates, Tensor& out) {
  out = data;
  const int64_t k = indices.shape().back();
  const int64_t tuples = k == 0 ? 0 : indices.numel() / k;
  const auto strides = strides_of(data.shape());
  const int64_t slice = numel(Shape(data.shape().begin() + k, data.shape().end()));
  const std::vector<int64_t> idx = indices.to_ints();
  const std::string reduction = n.attrs.s("reduction", "none");
  std::vector<double> values;
  std::vector<double> upd;
  if (reduction != "none") {
    values = out.to_doubles();
    upd = updates.to_doubles();
  }
  const size_t elem = dtype_size(data.dtype());
  for (int64_t t = 0; t < tuples; ++t) {
    int64_t off = 0;
    for (int64_t d = 0; d < k; ++d) {
      int64_t i = idx[static_cast<size_t>(t * k + d)];
      const int64_t dim = data.shape()[static_cast<size_t>(d)];
      check(i >= -dim && i < dim, "index ", i, " out of range for dimension ", d, " of extent ", dim);
      if (i < 0) i += dim;
      off += i * strides[static_cast<size_t>(d)];
    }
    if (reduction == "none") {
      std::memcpy(out.data() + off * static_cast<int64_t>(elem), updates.data() + t * slice * static_cast<int64_t>(elem),
                  static_cast<size_t>(slice) * elem);
      continue;
    }
    for (int64_t e = 0; e < slice; ++e) {
      double& v = values[static_cast<size_t>(off + e)];
      const double u = upd[static_cast<size_t>(t * slice + e)];
      if (reduction == "add") v += u;
      else if (reduction == "mul") v *= u;
      else if (reduction == "max") v = std::max(v, u);
      else if (reduction == "min") v = std::min(v, u);
      else fail("unsupported reduction '", reduction, "'");
    }
  }
  if (reduction != "none") out.set_doubles(values);
}

}  // namespace

void run_data_movement(const Node& node, std::span<const Tensor* const> in, Tensor& out) {
  const std::string& op = node.op;
  if (op == "Reshape") {
    out = in[0]->reshaped(out.shape());
  } else if (op == "Transpose") {
    run_transpose(node, *in[0], out);
  } else if (op == "Concat") {
    run_concat(node, in, out);
  } else if (op == "Slice") {
    run_slice(node, *in[0], out);
  } else if (op == "Gather") {
    run_gather(node, *in[0], *in[1], out);
  } else if (op == "Expand") {
    copy_by_offsets(*in[0], broadcast_offsets(in[0]->shape(), out.shape()), out);
  } else if (op == "Tile") {
    run_tile(*in[0], out);
  } else if (op == "Pad") {
    run_pad(node, *in[0], out);
  } else if (op == "ScatterND") {
    run_scatter_nd(node, *in[0], *in[1], *in[2], out);
  } else if (op == "Resize") {
    run_resize(node, *in[0], out);
  } else if (op == "IfMerge") {
    out = *in[in[0]->to_ints().at(0) != 0 ? 1 : 2];
  } else {
    fail("no reference kernel");
  }
}

}  // namespace fusetune::reference
