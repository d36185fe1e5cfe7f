#include "backend/library_host.h"

#include <algorithm>
#include <cstdint>
#include <thread>
#include <vector>

#include "core/dtype.h"

namespace fusetune::backend {

namespace {

float load(const void* base, int64_t i, DType dt) {
  return dt == DType::kF16 ? half_to_float(static_cast<const uint16_t*>(base)[i]) : static_cast<const float*>(base)[i];
}

void store(void* base, int64_t i, DType dt, float v) {
  if (dt == DType::kF16) static_cast<uint16_t*>(base)[i] = float_to_half(v);
  else static_cast<float*>(base)[i] = v;
}

}  // namespace

void run_library_call_host(const planner::LibraryCall& c, void* const* args, int workers) {
  const void* a = args[0];
  const void* b = args[1];
  size_t next = 2;
  const void* bias = c.bias ? args[next++] : nullptr;
  const void* residual = c.residual ? args[next++] : nullptr;
  void* y = args[next];
  const int64_t rows = c.batch * c.m;
  // TF32 mode: each operand rounded to TF32 as the tensor cores take it (products exact in float).
  const auto operand = [&](const void* base, int64_t i) {
    const float v = load(base, i, c.dtype);
    return c.tf32 ? round_to_tf32(v) : v;
  };
  auto work = [&](int64_t lo, int64_t hi) {
    std::vector<float> acc(static_cast<size_t>(c.n));
    for (int64_t r = lo; r < hi; ++r) {
      const int64_t batch = r / c.m;
      const int64_t b_base = c.b_batched ? batch * c.k * c.n : 0;
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t kk = 0; kk < c.k; ++kk) {
        const float av = operand(a, r * c.k + kk);
        for (int64_t j = 0; j < c.n; ++j) acc[static_cast<size_t>(j)] += av * operand(b, b_base + kk * c.n + j);
      }
      for (int64_t j = 0; j < c.n; ++j) {
        float v = acc[static_cast<size_t>(j)];
        if (bias != nullptr) v += load(bias, j, c.dtype);
        if (residual != nullptr) v += load(residual, r * c.n + j, c.dtype);
        if (c.relu) v = std::max(v, 0.0f);
        store(y, r * c.n + j, c.dtype, v);
      }
    }
  };
  const int64_t threads = std::max<int64_t>(1, std::min<int64_t>(workers, rows));
  if (threads == 1) {
    work(0, rows);
    return;
  }
  std::vector<std::thread> pool;
  for (int64_t t = 0; t < threads; ++t) pool.emplace_back(work, rows * t / threads, rows * (t + 1) / threads);
  for (std::thread& t : pool) t.join();
}

}  // namespace fusetune::backend
