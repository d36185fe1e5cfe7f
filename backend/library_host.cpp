#include "backend/library_host.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <thread>
#include <vector>

#include "core/dtype.h"

namespace fusetune::backend {

namespace {

float load(const void* base, int64_t i, DType dt) {
  if (dt == DType::kF16) return half_to_float(static_cast<const uint16_t*>(base)[i]);
  if (dt == DType::kBF16) return bfloat16_to_float(static_cast<const uint16_t*>(base)[i]);
  return static_cast<const float*>(base)[i];
}

void store(void* base, int64_t i, DType dt, float v) {
  if (dt == DType::kF16) static_cast<uint16_t*>(base)[i] = float_to_half(v);
  else if (dt == DType::kBF16) static_cast<uint16_t*>(base)[i] = float_to_bfloat16(v);
  else static_cast<float*>(base)[i] = v;
}

// Spreads [0, n) over up to `workers` threads.
template <typename F>
void parallel(int64_t n, int workers, F work) {
  const int64_t threads = std::max<int64_t>(1, std::min<int64_t>(workers, n));
  if (threads == 1) {
    work(int64_t{0}, n);
    return;
  }
  std::vector<std::thread> pool;
  for (int64_t t = 0; t < threads; ++t) pool.emplace_back(work, n * t / threads, n * (t + 1) / threads);
  for (std::thread& t : pool) t.join();
}

// The epilogue both libraries apply, in their order: bias, residual, activation.
struct Epilogue {
  const planner::LibraryCall& c;
  const void* bias;
  const void* residual;
  float apply(float v, int64_t bias_index, int64_t y_index) const {
    if (bias != nullptr) v += load(bias, bias_index, c.dtype);
    if (residual != nullptr) v += load(residual, y_index, c.dtype);
    if (c.relu) v = std::max(v, 0.0f);
    if (c.relu_max > 0.0f) v = std::min(v, c.relu_max);
    if (c.gelu) v = 0.5f * v * (1.0f + std::tanh(0.7978845608f * (v + 0.044715f * v * v * v)));  // cuBLASLt's GELU
    return v;
  }
};

void gemm(const planner::LibraryCall& c, const void* a, const void* b, const Epilogue& epi, void* y, int workers) {
  // TF32 mode: each operand rounded to TF32 as the tensor cores take it (products exact in float).
  const auto operand = [&](const void* base, int64_t i) {
    const float v = load(base, i, c.dtype);
    return c.tf32 ? round_to_tf32(v) : v;
  };
  parallel(c.batch * c.m, workers, [&](int64_t lo, int64_t hi) {
    std::vector<float> acc(static_cast<size_t>(c.n));
    for (int64_t r = lo; r < hi; ++r) {
      const int64_t batch = r / c.m;
      const int64_t b_base = c.b_batched ? batch * c.k * c.n : 0;
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t kk = 0; kk < c.k; ++kk) {
        const float av = operand(a, r * c.k + kk);
        for (int64_t j = 0; j < c.n; ++j) acc[static_cast<size_t>(j)] += av * operand(b, b_base + kk * c.n + j);
      }
      for (int64_t j = 0; j < c.n; ++j) store(y, r * c.n + j, c.dtype, epi.apply(acc[static_cast<size_t>(j)], j, r * c.n + j));
    }
  });
}

void conv(const planner::LibraryCall& c, const void* x, const void* w, const Epilogue& epi, void* y, int workers) {
  const planner::ConvShape& cs = c.conv;
  const int64_t p = cs.p(), q = cs.q(), cin = cs.c / cs.groups, kout = cs.k / cs.groups;
  // The operands once as float (rounded to TF32 in that mode), then one output plane per (batch, channel).
  const auto floats = [&](const void* base, int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = c.tf32 ? round_to_tf32(load(base, i, c.dtype)) : load(base, i, c.dtype);
    return v;
  };
  const std::vector<float> xs = floats(x, c.batch * cs.c * cs.h * cs.w), ws = floats(w, cs.k * cin * cs.r * cs.s);
  parallel(c.batch * cs.k, workers, [&](int64_t lo, int64_t hi) {
    std::vector<float> acc(static_cast<size_t>(p * q));
    for (int64_t plane = lo; plane < hi; ++plane) {
      const int64_t n = plane / cs.k, ko = plane % cs.k, first = (ko / kout) * cin;
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t ci = 0; ci < cin; ++ci) {
        const float* xp = &xs[static_cast<size_t>((n * cs.c + first + ci) * cs.h * cs.w)];
        for (int64_t r = 0; r < cs.r; ++r) {
          for (int64_t s = 0; s < cs.s; ++s) {
            const float wv = ws[static_cast<size_t>(((ko * cin + ci) * cs.r + r) * cs.s + s)];
            for (int64_t oh = 0; oh < p; ++oh) {
              const int64_t ih = oh * cs.strides[0] - cs.pads[0] + r * cs.dilations[0];
              if (ih < 0 || ih >= cs.h) continue;
              for (int64_t ow = 0; ow < q; ++ow) {
                const int64_t iw = ow * cs.strides[1] - cs.pads[1] + s * cs.dilations[1];
                if (iw >= 0 && iw < cs.w) acc[static_cast<size_t>(oh * q + ow)] += wv * xp[ih * cs.w + iw];
              }
            }
          }
        }
      }
      for (int64_t i = 0; i < p * q; ++i) {
        const int64_t at = plane * p * q + i;
        store(y, at, c.dtype, epi.apply(acc[static_cast<size_t>(i)], ko, at));
      }
    }
  });
}

// Scaled dot-product attention over strided operands: each (batch, head, query) row's scores in
// float, the bias added, keys past the causal bound left out, the softmax, then the weighted sum
// of V's rows; rows spread over the workers.
void attention(const planner::LibraryCall& c, void* const* args, int workers) {
  const planner::AttentionShape& a = c.attention;
  const void* bias = c.bias ? args[3] : nullptr;
  void* y = args[c.bias ? 4 : 3];
  const auto at = [](const planner::OperandLayout& l, int64_t b, int64_t h, int64_t r, int64_t w) {
    return l.offset + b * l.strides[0] + h * l.strides[1] + r * l.strides[2] + w * l.strides[3];
  };
  parallel(c.batch * a.heads * a.queries, workers, [&](int64_t from, int64_t to) {
    std::vector<float> p(static_cast<size_t>(a.keys)), out(static_cast<size_t>(a.value_head));
    for (int64_t row = from; row < to; ++row) {
      const int64_t b = row / (a.heads * a.queries), h = row / a.queries % a.heads, i = row % a.queries;
      const int64_t seen = a.causal ? std::min(a.keys, i + a.keys - a.queries + 1) : a.keys;
      float top = -INFINITY;
      for (int64_t j = 0; j < seen; ++j) {
        float s = 0;
        for (int64_t d = 0; d < a.head; ++d) s += load(args[0], at(a.q, b, h, i, d), c.dtype) * load(args[1], at(a.k, b, h, j, d), c.dtype);
        s *= a.scale;
        if (bias != nullptr) s += load(bias, at(a.bias, b, h, i, j), c.dtype);
        p[static_cast<size_t>(j)] = s;
        top = std::max(top, s);
      }
      float sum = 0;
      for (int64_t j = 0; j < seen; ++j) sum += p[static_cast<size_t>(j)] = std::exp(p[static_cast<size_t>(j)] - top);
      std::fill(out.begin(), out.end(), 0.0f);
      for (int64_t j = 0; j < seen; ++j) {
        const float w = p[static_cast<size_t>(j)] / sum;
        for (int64_t d = 0; d < a.value_head; ++d) out[static_cast<size_t>(d)] += w * load(args[2], at(a.v, b, h, j, d), c.dtype);
      }
      for (int64_t d = 0; d < a.value_head; ++d) store(y, at(a.o, b, h, i, d), c.dtype, out[static_cast<size_t>(d)]);
    }
  });
}

}  // namespace

void run_library_call_host(const planner::LibraryCall& c, void* const* args, int workers) {
  if (c.op == planner::LibraryOp::kAttention) {
    attention(c, args, workers);
    return;
  }
  size_t next = 2;
  const void* bias = c.bias ? args[next++] : nullptr;
  const void* residual = c.residual ? args[next++] : nullptr;
  const Epilogue epi{c, bias, residual};
  if (c.op == planner::LibraryOp::kConv) {
    conv(c, args[0], args[1], epi, args[next], workers);
  } else {
    gemm(c, args[0], args[1], epi, args[next], workers);
  }
}

}  // namespace fusetune::backend
