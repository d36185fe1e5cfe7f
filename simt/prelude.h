// The host prelude: what the CUDA text that fusetune ships (codegen/emit.h) uses of CUDA, mapped
// onto the SIMT executor (simt/executor.h), so that the host C++ compiler builds that very text
// and the executor runs it with a GPU's semantics.
//
// The CUDA text starts with an intrinsic layer guarded by `#ifndef FT_SIMT` (CUDA expansions:
// plain pointers, the dynamic shared array, inline PTX for mma and ldmatrix); this file defines
// FT_SIMT and the host expansions of the same names:
// - `FT_GLOBAL(T)` parameters and `FT_SHARED(T, name, offset, elements)` views are ft_ptr<T>:
//   indexing one gives an ft_ref whose every load and store goes through the executor's `access`
//   (bounds, alignment, race and initialisation checks, counters), from the access site itself
//   (the helpers are always inlined, so the call's return address identifies the instruction);
// - threadIdx/blockIdx/blockDim/gridDim ask the executor for the calling fiber's indices;
// - __syncthreads() suspends the thread until its block arrives; __shfl_xor_sync,
//   ft_mma_m16n8k16_* and ft_ldmatrix_* exchange the 32 lanes' operands through the executor's
//   warp_exchange and compute what the PTX ISA documents for each lane (the fragment layout is
//   in codegen/kernel_ir.h); an ldmatrix row is a 16-byte load by the lane that gives its address.
// The build (simt/module.cpp) compiles: simt/device_api.h, this file, `#line 1 "kernels.cu"`, the
// CUDA text, and one FT_SIMT_ENTRY(NAME) per kernel.
#ifndef FUSETUNE_SIMT_DEVICE_API_H
#include "simt/device_api.h"
#endif

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cstddef>
#include <type_traits>
#include <utility>

#define FT_SIMT 1
#define FT_FN static inline
#define FT_INTRINSIC __attribute__((always_inline)) static inline
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(n)
#define __align__(n) alignas(n)

static const ft_simt_api* ft_simt_api_ = nullptr;

extern "C" void ft_simt_bind(const ft_simt_api* api) { ft_simt_api_ = api; }

struct ft_dim3 {
  unsigned x, y, z;
};
#define threadIdx (ft_dim3{ft_simt_api_->thread_index(), 0u, 0u})
#define blockIdx (ft_dim3{ft_simt_api_->block_index(), 0u, 0u})
#define blockDim (ft_dim3{ft_simt_api_->block_dim(), 1u, 1u})
#define gridDim (ft_dim3{ft_simt_api_->grid_dim(), 1u, 1u})
#define __syncthreads() ft_simt_api_->barrier(__LINE__)

struct float4 {
  float x, y, z, w;
};

// One element of a buffer, read or written through the executor.
template <class T>
struct ft_ref {
  using V = std::remove_const_t<T>;
  const ft_simt_buffer* b;
  long long i;
  __attribute__((always_inline)) operator V() const {
    V v;
    memcpy(&v, ft_simt_api_->access(b, i, (int)sizeof(V), FT_SIMT_LOAD, nullptr), sizeof(V));
    return v;
  }
  __attribute__((always_inline)) const ft_ref& operator=(V v) const {
    static_assert(!std::is_const_v<T>, "store through a const buffer");
    memcpy(ft_simt_api_->access(b, i, (int)sizeof(V), FT_SIMT_STORE, &v), &v, sizeof(V));
    return *this;
  }
  __attribute__((always_inline)) const ft_ref& operator=(const ft_ref& o) const { return *this = static_cast<V>(o); }
};

template <class T>
struct ft_ptr {
  const ft_simt_buffer* b;
  explicit ft_ptr(const void* buffer) : b(static_cast<const ft_simt_buffer*>(buffer)) {}
  __attribute__((always_inline)) ft_ref<T> operator[](long long i) const { return ft_ref<T>{b, i}; }
};

#define FT_GLOBAL(T) ft_ptr<T>
#define FT_SHARED_MEMORY (void)0
#define FT_SHARED(T, name, offset, elements) \
  const ft_ptr<T> name(ft_simt_api_->shared_view((offset), (long long)(elements) * (long long)sizeof(T), (int)sizeof(T), #name))

FT_INTRINSIC unsigned ft_simt_lane() { return ft_simt_api_->thread_index() % 32u; }

FT_INTRINSIC float4 ft_load_float4(ft_ptr<const float> p, long long i) {
  float4 v;
  memcpy(&v, ft_simt_api_->access(p.b, i, 16, FT_SIMT_LOAD, nullptr), 16);
  return v;
}

FT_INTRINSIC void ft_store_float4(ft_ptr<float> p, long long i, float4 v) {
  memcpy(ft_simt_api_->access(p.b, i, 16, FT_SIMT_STORE, &v), &v, 16);
}

FT_INTRINSIC bool ft_aligned16(ft_ptr<const float> p, long long i) {
  return (((unsigned long long)(p.b->base + i * 4)) & 15ULL) == 0ULL;
}

FT_INTRINSIC float __shfl_xor_sync(unsigned mask, float v, int lane_mask, int width = 32) {
  if (width != 32) {
    fprintf(stderr, "fusetune simt: __shfl_xor_sync with width %d is not supported\n", width);
    abort();
  }
  const float* all = static_cast<const float*>(ft_simt_api_->warp_exchange(&v, (int)sizeof v, mask));
  return all[(ft_simt_lane() ^ (unsigned)lane_mask) & 31u];
}

// mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}: D = A * B + C with C in D's registers. The
// 16-bit conversions are the CUDA text's own (its prelude, codegen/emit_common.h, defines them).
FT_FN float ft_h2f(unsigned short h);
FT_FN float ft_bf2f(unsigned short b);
struct ft_mma_operands {
  unsigned a[4], b[2];
};
FT_FN float ft_frag_half(unsigned reg, int high, int bf16) {
  const unsigned short h = (unsigned short)(high ? reg >> 16 : reg & 0xffffu);
  return bf16 ? ft_bf2f(h) : ft_h2f(h);
}
FT_INTRINSIC void ft_mma_m16n8k16(float& d0, float& d1, float& d2, float& d3, unsigned a0, unsigned a1, unsigned a2,
                                  unsigned a3, unsigned b0, unsigned b1, int bf16) {
  const ft_mma_operands mine = {{a0, a1, a2, a3}, {b0, b1}};
  const ft_mma_operands* all =
      static_cast<const ft_mma_operands*>(ft_simt_api_->warp_exchange(&mine, (int)sizeof mine, 0xffffffffu));
  const unsigned lane = ft_simt_lane(), g = lane >> 2, t = lane & 3u;
  float* d[4] = {&d0, &d1, &d2, &d3};
  for (int i = 0; i < 4; ++i) {
    const unsigned row = g + 8u * (unsigned)(i >> 1), col = 2u * t + (unsigned)(i & 1);
    float s = *d[i];
    for (unsigned k = 0; k < 16; ++k) {
      // A[row][k]: lane 4 (row % 8) + (k % 8) / 2, element 4 (k / 8) + 2 (row / 8) + k % 2.
      const unsigned ai = 4u * (k / 8u) + 2u * (row / 8u) + (k & 1u);
      const float x = ft_frag_half(all[4u * (row % 8u) + (k % 8u) / 2u].a[ai >> 1], (int)(ai & 1u), bf16);
      // B[k][col]: lane 4 col + (k % 8) / 2, element 2 (k / 8) + k % 2.
      const unsigned bi = 2u * (k / 8u) + (k & 1u);
      const float y = ft_frag_half(all[4u * col + (k % 8u) / 2u].b[bi >> 1], (int)(bi & 1u), bf16);
      s += x * y;
    }
    *d[i] = s;
  }
}
FT_INTRINSIC void ft_mma_m16n8k16_f16(float& d0, float& d1, float& d2, float& d3, unsigned a0, unsigned a1, unsigned a2,
                                      unsigned a3, unsigned b0, unsigned b1) {
  ft_mma_m16n8k16(d0, d1, d2, d3, a0, a1, a2, a3, b0, b1, 0);
}
FT_INTRINSIC void ft_mma_m16n8k16_bf16(float& d0, float& d1, float& d2, float& d3, unsigned a0, unsigned a1,
                                       unsigned a2, unsigned a3, unsigned b0, unsigned b1) {
  ft_mma_m16n8k16(d0, d1, d2, d3, a0, a1, a2, a3, b0, b1, 1);
}

// ldmatrix.sync.aligned.m8n8.xN[.trans].shared.b16: lanes 8m .. 8m + 7 give matrix m's rows.
struct ft_ldmatrix_row {
  unsigned short v[8];
};
FT_INTRINSIC void ft_ldmatrix(unsigned* r, int matrices, int trans, ft_ptr<unsigned short> s, long long row) {
  const unsigned lane = ft_simt_lane(), g = lane >> 2, t = lane & 3u;
  ft_ldmatrix_row mine = {};
  if (lane < 8u * (unsigned)matrices) memcpy(&mine, ft_simt_api_->access(s.b, row, 16, FT_SIMT_LOAD, nullptr), 16);
  const ft_ldmatrix_row* all =
      static_cast<const ft_ldmatrix_row*>(ft_simt_api_->warp_exchange(&mine, (int)sizeof mine, 0xffffffffu));
  for (int m = 0; m < matrices; ++m) {
    const unsigned lo = trans ? all[8 * m + 2 * t].v[g] : all[8 * m + g].v[2 * t];
    const unsigned hi = trans ? all[8 * m + 2 * t + 1].v[g] : all[8 * m + g].v[2 * t + 1];
    r[m] = lo | (hi << 16);
  }
}
FT_INTRINSIC void ft_ldmatrix_x1(unsigned& r0, ft_ptr<unsigned short> s, long long row) { ft_ldmatrix(&r0, 1, 0, s, row); }
FT_INTRINSIC void ft_ldmatrix_x2(unsigned& r0, unsigned& r1, ft_ptr<unsigned short> s, long long row) {
  unsigned r[2];
  ft_ldmatrix(r, 2, 0, s, row);
  r0 = r[0], r1 = r[1];
}
FT_INTRINSIC void ft_ldmatrix_x4(unsigned& r0, unsigned& r1, unsigned& r2, unsigned& r3, ft_ptr<unsigned short> s,
                                 long long row) {
  unsigned r[4];
  ft_ldmatrix(r, 4, 0, s, row);
  r0 = r[0], r1 = r[1], r2 = r[2], r3 = r[3];
}
FT_INTRINSIC void ft_ldmatrix_x1_trans(unsigned& r0, ft_ptr<unsigned short> s, long long row) {
  ft_ldmatrix(&r0, 1, 1, s, row);
}
FT_INTRINSIC void ft_ldmatrix_x2_trans(unsigned& r0, unsigned& r1, ft_ptr<unsigned short> s, long long row) {
  unsigned r[2];
  ft_ldmatrix(r, 2, 1, s, row);
  r0 = r[0], r1 = r[1];
}
FT_INTRINSIC void ft_ldmatrix_x4_trans(unsigned& r0, unsigned& r1, unsigned& r2, unsigned& r3,
                                       ft_ptr<unsigned short> s, long long row) {
  unsigned r[4];
  ft_ldmatrix(r, 4, 1, s, row);
  r0 = r[0], r1 = r[1], r2 = r[2], r3 = r[3];
}

// The per-thread entry of a kernel: its parameters from the executor's buffer descriptors.
template <class... P, size_t... I>
static inline void ft_simt_invoke(void (*kernel)(P...), void* const* args, std::index_sequence<I...>) {
  kernel(P(args[I])...);
}
template <class... P>
constexpr size_t ft_simt_arity(void (*)(P...)) {
  return sizeof...(P);
}
#define FT_SIMT_ENTRY(K)                                              \
  extern "C" void ft_simt_entry_##K(void* const* args) {              \
    ft_simt_invoke(K, args, std::make_index_sequence<ft_simt_arity(K)>()); \
  }
