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
//   ft_mma_m16n8k16_*, ft_mma_m16n8k32_* and ft_ldmatrix_* exchange the 32 lanes' operands through the executor's
//   warp_exchange and compute what the PTX ISA documents for each lane (the fragment layout is
//   in codegen/kernel_ir.h); an ldmatrix row is a 16-byte load by the lane that gives its address;
// - ft_atomic_add, ft_atomic_exch and __threadfence go to the executor, which orders other blocks'
//   stores by them (simt/device_api.h); FT_SCRATCH(T, elements) parameters are ft_ptr<T> too;
// - ft_cp_async16, ft_cp_async4, ft_cp_async_commit and ft_cp_async_wait hand cp.async and its groups to the
//   executor, which lands each copy at the wait that completes it;
// - ft_mbarrier_* and ft_tma_load_* hand mbarriers and tensor copies to the executor, which keeps
//   each mbarrier's phase, suspends a wait until its phase completes and lands a copy's bytes
//   (swizzled, zero outside the tensor) where a wait observes the phase they completed;
//   FT_TENSOR_MAP parameters are the executor's ft_simt_tensor_map, built from the signature;
// - ft_wgmma<N, BF16, TRANS_B> (and ft_wgmma_ra, A from registers) decodes its matrix descriptors
//   as the PTX ISA defines them, reads the operands' core-matrix rows through the executor (in
//   flight until the wait) and computes each
//   lane's accumulators into values the executor keeps; ft_wgmma_commit and ft_wgmma_wait hand
//   its groups to the executor, which lands the results in the registers at the wait.
// - ft_setmaxnreg_inc/dec<N> check the count and that the warp's lanes meet, and do nothing else.
// The build (simt/module.cpp) compiles, in one or more translation units: simt/device_api.h and
// this file (one header, precompiled once per compiler), the CUDA text's head (what precedes its
// first kernel) and a run of its kernels, each under `#line` directives naming its lines in
// kernels.cu, and one FT_SIMT_ENTRY(NAME) per kernel of the unit.
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
#define __launch_bounds__(...)
#define __align__(n) alignas(n)

// One table per shared library, however many translation units it was built from
// (simt/module.cpp): the first unit holds it and its binder (FT_SIMT_TABLE(), after this file, so
// that this file reads the same in every unit and its precompiled form serves them all).
extern "C" __attribute__((visibility("hidden"))) const ft_simt_api* ft_simt_api_;
#define FT_SIMT_TABLE()                          \
  const ft_simt_api* ft_simt_api_ = nullptr;     \
  extern "C" void ft_simt_bind(const ft_simt_api* api) { ft_simt_api_ = api; }

// The host address of an access of `size` bytes at element `i` of b: where the executor neither
// checks nor counts the block's accesses of b (b->fast), memcheck's test (ft_simt_checked) here
// for an access inside b and aligned to its size; every other access goes to the executor, which
// checks and counts it (memcheck reports one outside b or misaligned).
FT_INTRINSIC void* ft_simt_at(const ft_simt_buffer* b, long long i, int size, int kind, const void* value) {
  if (b->fast) {
    int outside = 0;
    if (unsigned char* a = ft_simt_checked(b, i, size, size, &outside)) return a;
  }
  return ft_simt_api_->access(b, i, size, kind, value);
}

struct ft_dim3 {
  unsigned x, y, z;
};
#define threadIdx (ft_dim3{ft_simt_api_->thread_index(), 0u, 0u})
#define blockIdx (ft_dim3{ft_simt_api_->block_index(), 0u, 0u})
#define blockDim (ft_dim3{ft_simt_api_->block_dim(), 1u, 1u})
#define gridDim (ft_dim3{ft_simt_api_->grid_dim(), 1u, 1u})
#define __syncthreads() ft_simt_api_->barrier(__LINE__)

// Floating-point operations, counted as the CUDA text executes them (Counters::flops and
// special_ops): the text's `float` is, on the host, ft_flt (the last line of this file), a float
// whose arithmetic counts itself. Each add, subtract, multiply and divide with a float operand is
// one operation (a * b + c is two, as the FMA a GPU contracts it into counts in Nsight Compute's
// FLOP metrics); a negation, comparison, min, max, absolute value, rounding or conversion is none;
// a call of a transcendental math function (expf, sqrtf, erff, ...) is one special operation,
// counted apart (the GPU runs it on its special function unit); an mma.m16n8k16 is the
// 2 * 16 * 8 * 16 = 4096 operations of its multiply-adds, 128 per lane. The counts accumulate per
// OS thread in the executor's ft_simt_ops (simt/device_api.h), which it adds to the launch's
// counters when the thread has run its blocks.
#define ft_flops_ ft_simt_ops[0]
#define ft_special_ ft_simt_ops[1]

struct ft_flt {
  float v;
  ft_flt() = default;
  template <class T, class = std::enable_if_t<std::is_arithmetic_v<T>>>
  constexpr ft_flt(T x) : v(static_cast<float>(x)) {}
  template <class T, class = std::enable_if_t<std::is_arithmetic_v<T>>>
  constexpr explicit operator T() const { return static_cast<T>(v); }
  constexpr ft_flt operator-() const { return ft_flt(-v); }
  constexpr ft_flt operator+() const { return *this; }
};
static_assert(sizeof(ft_flt) == sizeof(float) && std::is_trivially_copyable_v<ft_flt>, "ft_flt is a float");

template <class T>
struct ft_ref;
template <class T>
struct ft_is_flt : std::false_type {};
template <>
struct ft_is_flt<ft_flt> : std::true_type {};
template <>
struct ft_is_flt<ft_ref<ft_flt>> : std::true_type {};
template <>
struct ft_is_flt<ft_ref<const ft_flt>> : std::true_type {};
// An operand of counted arithmetic: at least one side is a float of the text, the other a number.
template <class A, class B>
inline constexpr bool ft_counted_v = (ft_is_flt<A>::value || ft_is_flt<B>::value) &&
                                     (ft_is_flt<A>::value || std::is_arithmetic_v<A>) &&
                                     (ft_is_flt<B>::value || std::is_arithmetic_v<B>);
FT_INTRINSIC float ft_val(ft_flt x) { return x.v; }
template <class T>
FT_INTRINSIC std::enable_if_t<std::is_arithmetic_v<T>, float> ft_val(T x) { return static_cast<float>(x); }
template <class T>
FT_INTRINSIC float ft_val(const ft_ref<T>& r) { return static_cast<ft_flt>(r).v; }

#define FT_FLT_ARITHMETIC(OP)                                                                 \
  template <class A, class B, class = std::enable_if_t<ft_counted_v<A, B>>>                   \
  FT_INTRINSIC ft_flt operator OP(const A& a, const B& b) {                                   \
    ++ft_flops_;                                                                              \
    return ft_flt(ft_val(a) OP ft_val(b));                                                    \
  }                                                                                           \
  template <class B, class = std::enable_if_t<ft_counted_v<ft_flt, B>>>                       \
  FT_INTRINSIC ft_flt& operator OP##=(ft_flt & a, const B & b) {                              \
    ++ft_flops_;                                                                              \
    a.v = a.v OP ft_val(b);                                                                   \
    return a;                                                                                 \
  }
FT_FLT_ARITHMETIC(+)
FT_FLT_ARITHMETIC(-)
FT_FLT_ARITHMETIC(*)
FT_FLT_ARITHMETIC(/)
#undef FT_FLT_ARITHMETIC
#define FT_FLT_COMPARISON(OP)                                               \
  template <class A, class B, class = std::enable_if_t<ft_counted_v<A, B>>> \
  FT_INTRINSIC bool operator OP(const A& a, const B& b) {                   \
    return ft_val(a) OP ft_val(b);                                          \
  }
FT_FLT_COMPARISON(<)
FT_FLT_COMPARISON(<=)
FT_FLT_COMPARISON(>)
FT_FLT_COMPARISON(>=)
FT_FLT_COMPARISON(==)
FT_FLT_COMPARISON(!=)
#undef FT_FLT_COMPARISON
FT_INTRINSIC bool operator!(ft_flt x) { return x.v == 0.0f; }
// The math library on the text's floats: transcendental functions count a special operation.
#define FT_FLT_SPECIAL(F) \
  FT_INTRINSIC ft_flt F(ft_flt x) { return ++ft_special_, ft_flt(::F(x.v)); }
#define FT_FLT_FREE(F) \
  FT_INTRINSIC ft_flt F(ft_flt x) { return ft_flt(::F(x.v)); }
#define FT_FLT_SPECIAL2(F)                                                                \
  template <class A, class B, class = std::enable_if_t<ft_counted_v<A, B>>>               \
  FT_INTRINSIC ft_flt F(const A& a, const B& b) { return ++ft_special_, ft_flt(::F(ft_val(a), ft_val(b))); }
#define FT_FLT_FREE2(F)                                                                   \
  template <class A, class B, class = std::enable_if_t<ft_counted_v<A, B>>>               \
  FT_INTRINSIC ft_flt F(const A& a, const B& b) { return ft_flt(::F(ft_val(a), ft_val(b))); }
FT_FLT_SPECIAL(acosf) FT_FLT_SPECIAL(asinf) FT_FLT_SPECIAL(atanf) FT_FLT_SPECIAL(cosf) FT_FLT_SPECIAL(coshf)
FT_FLT_SPECIAL(erff) FT_FLT_SPECIAL(expf) FT_FLT_SPECIAL(expm1f) FT_FLT_SPECIAL(log1pf) FT_FLT_SPECIAL(logf)
FT_FLT_SPECIAL(sinf) FT_FLT_SPECIAL(sinhf) FT_FLT_SPECIAL(sqrtf) FT_FLT_SPECIAL(tanf) FT_FLT_SPECIAL(tanhf)
FT_FLT_FREE(ceilf) FT_FLT_FREE(fabsf) FT_FLT_FREE(floorf) FT_FLT_FREE(rintf) FT_FLT_FREE(roundf) FT_FLT_FREE(truncf)
FT_FLT_SPECIAL2(fmodf) FT_FLT_SPECIAL2(powf) FT_FLT_FREE2(fmaxf) FT_FLT_FREE2(fminf) FT_FLT_FREE2(copysignf)
#undef FT_FLT_SPECIAL
#undef FT_FLT_FREE
#undef FT_FLT_SPECIAL2
#undef FT_FLT_FREE2
FT_INTRINSIC bool isnan(ft_flt x) { return __builtin_isnan(x.v); }
FT_INTRINSIC bool isinf(ft_flt x) { return __builtin_isinf(x.v); }

struct float4 {
  ft_flt x, y, z, w;
};
struct float2 {
  ft_flt x, y;
};

// One element of a buffer, read or written through the executor.
template <class T>
struct ft_ref {
  using V = std::remove_const_t<T>;
  const ft_simt_buffer* b;
  long long i;
  __attribute__((always_inline)) operator V() const {
    V v;
    memcpy(&v, ft_simt_at(b, i, (int)sizeof(V), FT_SIMT_LOAD, nullptr), sizeof(V));
    return v;
  }
  // A float element also converts to a plain float, as `cond ? x[i] : 0.0f` needs.
  template <class U = V, class = std::enable_if_t<std::is_same_v<U, ft_flt>>>
  __attribute__((always_inline)) operator float() const {
    return static_cast<V>(*this).v;
  }
  // And to any other number type when cast, as `(double)acc[i]` and `(int)acc[i]` ask.
  template <class A, class U = V,
            class = std::enable_if_t<std::is_same_v<U, ft_flt> && std::is_arithmetic_v<A> && !std::is_same_v<A, float>>>
  __attribute__((always_inline)) explicit operator A() const {
    return static_cast<A>(static_cast<V>(*this).v);
  }
  // A number element (an integer, a double) converts to the text's float when cast, as
  // `(float)x[i]` asks.
  template <class U = V, class = std::enable_if_t<std::is_arithmetic_v<U>>>
  __attribute__((always_inline)) explicit operator ft_flt() const {
    return ft_flt(static_cast<V>(*this));
  }
  __attribute__((always_inline)) const ft_ref& operator=(V v) const {
    static_assert(!std::is_const_v<T>, "store through a const buffer");
    memcpy(ft_simt_at(b, i, (int)sizeof(V), FT_SIMT_STORE, &v), &v, sizeof(V));
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
#define FT_SCRATCH(T, ...) ft_ptr<T>
// Blocks that cooperate (codegen/kernel_ir.h): atomics and fences go to the executor, which orders
// other blocks' stores by them; a load that bypasses L1 is a plain load here.
FT_INTRINSIC unsigned ft_atomic_add(ft_ptr<unsigned int> p, long long i, unsigned v) { return ft_simt_api_->atomic(p.b, i, 0, v); }
FT_INTRINSIC unsigned ft_atomic_exch(ft_ptr<unsigned int> p, long long i, unsigned v) { return ft_simt_api_->atomic(p.b, i, 1, v); }
FT_INTRINSIC void __threadfence() { ft_simt_api_->fence(); }
FT_INTRINSIC ft_flt ft_ldcg(ft_ptr<ft_flt> p, long long i) { return p[i]; }
FT_INTRINSIC unsigned ft_ldcg(ft_ptr<unsigned int> p, long long i) { return p[i]; }
#define FT_SHARED_MEMORY (void)0
// Programmatic dependent launch's wait and trigger: the executor runs a plan's launches one after
// another, each after the one before has completed, which is what the wait guarantees.
#define FT_GRID_DEPENDENCY() (void)0
#define FT_SHARED(T, name, offset, elements) \
  const ft_ptr<T> name(ft_simt_api_->shared_view((offset), (long long)(elements) * (long long)sizeof(T), (int)sizeof(T), #name))

FT_INTRINSIC unsigned ft_simt_lane() { return ft_simt_api_->thread_index() % 32u; }

FT_INTRINSIC float4 ft_load_float4(ft_ptr<const ft_flt> p, long long i) {
  float4 v;
  memcpy(&v, ft_simt_at(p.b, i, 16, FT_SIMT_LOAD, nullptr), 16);
  return v;
}

FT_INTRINSIC float4 ft_ldcg_float4(ft_ptr<ft_flt> p, long long i) {  // past L1: a plain load here
  float4 v;
  memcpy(&v, ft_simt_at(p.b, i, 16, FT_SIMT_LOAD, nullptr), 16);
  return v;
}

FT_INTRINSIC void ft_store_float4(ft_ptr<ft_flt> p, long long i, float4 v) {
  memcpy(ft_simt_at(p.b, i, 16, FT_SIMT_STORE, &v), &v, 16);
}

FT_INTRINSIC float4 ft_pack_float4(ft_flt a, ft_flt b, ft_flt c, ft_flt d) { return float4{a, b, c, d}; }

// Eight 16-bit values in one 16-byte access (float16 or bfloat16 bits).
struct ft_u16x8 {
  unsigned short v[8];
};
FT_INTRINSIC ft_u16x8 ft_load_ft_u16x8(ft_ptr<const unsigned short> p, long long i) {
  ft_u16x8 v;
  memcpy(&v, ft_simt_at(p.b, i, 16, FT_SIMT_LOAD, nullptr), 16);
  return v;
}
FT_INTRINSIC void ft_store_ft_u16x8(ft_ptr<unsigned short> p, long long i, ft_u16x8 v) {
  memcpy(ft_simt_at(p.b, i, 16, FT_SIMT_STORE, &v), &v, 16);
}
FT_INTRINSIC ft_u16x8 ft_pack_ft_u16x8(unsigned short a, unsigned short b, unsigned short c, unsigned short d,
                                       unsigned short e, unsigned short f, unsigned short g, unsigned short h) {
  return ft_u16x8{{a, b, c, d, e, f, g, h}};
}

// Two adjacent elements in one 8-byte (float) or 4-byte (16-bit) access.
struct ft_u16x2 {
  unsigned short v[2];
};
FT_INTRINSIC void ft_store_float2(ft_ptr<ft_flt> p, long long i, float2 v) {
  memcpy(ft_simt_at(p.b, i, 8, FT_SIMT_STORE, &v), &v, 8);
}
FT_INTRINSIC float2 ft_pack_float2(ft_flt a, ft_flt b) { return float2{a, b}; }
FT_INTRINSIC void ft_store_ft_u16x2(ft_ptr<unsigned short> p, long long i, ft_u16x2 v) {
  memcpy(ft_simt_at(p.b, i, 4, FT_SIMT_STORE, &v), &v, 4);
}
FT_INTRINSIC ft_u16x2 ft_pack_ft_u16x2(unsigned short a, unsigned short b) { return ft_u16x2{{a, b}}; }

FT_INTRINSIC bool ft_aligned16(ft_ptr<const ft_flt> p, long long i) {
  return (((unsigned long long)(p.b->base + i * 4)) & 15ULL) == 0ULL;
}

// Four bytes of an 8-bit buffer in one 4-byte access; whether element i's address is 4-byte
// aligned; bytes packed into words (the CUDA text's prmt, by shifts);
// dp4a as the PTX ISA defines it: d = c + the sum of a's four bytes times b's, each
// operand's bytes signed (s) or unsigned (u), modulo 2^32. A dp4a counts as its 8 operations
// (four multiplies, four adds), as an mma counts its multiply-adds.
template <class T, class = std::enable_if_t<sizeof(T) == 1>>
FT_INTRINSIC unsigned ft_load_word(ft_ptr<const T> p, long long i) {
  unsigned v;
  memcpy(&v, ft_simt_at(p.b, i, 4, FT_SIMT_LOAD, nullptr), 4);
  return v;
}
template <class T, class = std::enable_if_t<sizeof(T) == 1>>
FT_INTRINSIC bool ft_aligned4(ft_ptr<const T> p, long long i) {
  return (((unsigned long long)(p.b->base + i)) & 3ULL) == 0ULL;
}
FT_FN unsigned ft_pack_bytes(long long a, long long b, long long c, long long d) {
  return ((unsigned)a & 255u) | (((unsigned)b & 255u) << 8) | (((unsigned)c & 255u) << 16) | ((unsigned)d << 24);
}
FT_FN unsigned ft_byte_column(unsigned w0, unsigned w1, unsigned w2, unsigned w3, int j) {
  const int s = 8 * j;
  return ((w0 >> s) & 255u) | (((w1 >> s) & 255u) << 8) | (((w2 >> s) & 255u) << 16) | (((w3 >> s) & 255u) << 24);
}
template <bool SignedA, bool SignedB>
FT_INTRINSIC unsigned ft_dp4a(unsigned a, unsigned b, unsigned c) {
  ft_flops_ += 8;
  unsigned d = c;
  for (int i = 0; i < 4; ++i) {
    const unsigned ab = (a >> (8 * i)) & 255u, bb = (b >> (8 * i)) & 255u;
    const long long x = SignedA ? (long long)(signed char)ab : (long long)ab;
    const long long y = SignedB ? (long long)(signed char)bb : (long long)bb;
    d += (unsigned)(x * y);
  }
  return d;
}
#define ft_dp4a_ss ft_dp4a<true, true>
#define ft_dp4a_su ft_dp4a<true, false>
#define ft_dp4a_us ft_dp4a<false, true>
#define ft_dp4a_uu ft_dp4a<false, false>

// cp.async: the executor reads the source now and lands the bytes at the thread's wait_group.
template <class T>
FT_INTRINSIC void ft_cp_async16(ft_ptr<T> s, long long si, ft_ptr<const T> g, long long gi, int bytes) {
  ft_simt_api_->copy_async(s.b, si, g.b, gi, bytes, 16);
}
FT_INTRINSIC void ft_cp_async4(ft_ptr<ft_flt> s, long long si, ft_ptr<const ft_flt> g, long long gi, int bytes) {
  ft_simt_api_->copy_async(s.b, si, g.b, gi, bytes, 4);
}
#define ft_cp_async_commit() ft_simt_api_->copy_async_commit()
#define ft_cp_async_wait(n) ft_simt_api_->copy_async_wait((n), __LINE__)

FT_INTRINSIC ft_flt __shfl_xor_sync(unsigned mask, ft_flt v, int lane_mask, int width = 32) {
  if (width != 32) {
    fprintf(stderr, "fusetune simt: __shfl_xor_sync with width %d is not supported\n", width);
    abort();
  }
  const ft_flt* all = static_cast<const ft_flt*>(ft_simt_api_->warp_exchange(&v, (int)sizeof v, mask));
  return all[(ft_simt_lane() ^ (unsigned)lane_mask) & 31u];
}
// __syncwarp: a warp-synchronous operation that exchanges nothing and orders the lanes' memory
// accesses (device_api.h warp_exchange of 0 bytes); the whole warp's mask only (another is
// reported as a warp operation with lanes missing).
FT_INTRINSIC void __syncwarp(unsigned mask = 0xffffffffu) { ft_simt_api_->warp_exchange(nullptr, 0, mask); }
// The unsigned form (ArgMax's indices) takes an unsigned int alone: a literal or an int must not
// prefer it, by a standard conversion, to the float form above.
template <class U, class = typename std::enable_if<std::is_same<U, unsigned int>::value>::type>
FT_INTRINSIC unsigned int __shfl_xor_sync(unsigned mask, U v, int lane_mask, int width = 32) {
  if (width != 32) {
    fprintf(stderr, "fusetune simt: __shfl_xor_sync with width %d is not supported\n", width);
    abort();
  }
  const unsigned int* all = static_cast<const unsigned int*>(ft_simt_api_->warp_exchange(&v, (int)sizeof v, mask));
  return all[(ft_simt_lane() ^ (unsigned)lane_mask) & 31u];
}

// cvt.f32.f16, cvt.rn.f16.f32, cvt.rn.bf16.f32 and bfloat16's widening shift, as the PTX ISA
// defines them: exact widening; narrowing rounds to nearest even, keeps infinities, overflows to
// infinity, rounds into the subnormals; a NaN stays a NaN (its payload is not modelled). Computed
// here in the host's own float, so the emulation's operations are not counted: on the GPU each is
// one instruction, no floating-point operation of the kernel.
FT_FN unsigned int ft_float_bits(float f) {
  unsigned int u;
  memcpy(&u, &f, 4);
  return u;
}
FT_FN float ft_bits_float(unsigned int u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
// __float_as_uint and __uint_as_float (a mov.b32): a float's bits and the float of bits.
FT_FN unsigned int __float_as_uint(ft_flt f) { return ft_float_bits(f.v); }
FT_FN ft_flt __uint_as_float(unsigned int u) { return ft_flt(ft_bits_float(u)); }
FT_FN ft_flt ft_h2f(unsigned short h) {
  unsigned int sign = (unsigned int)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0) { float v = (float)mant * 5.9604644775390625e-8f; return sign ? -v : v; }
  return ft_bits_float(exp == 31 ? (sign | 0x7f800000u | (mant << 13)) : (sign | ((exp + 112u) << 23) | (mant << 13)));
}
FT_FN unsigned short ft_f2h(ft_flt value) {
  const unsigned int x = ft_float_bits(value.v);
  const unsigned int sign = (x >> 16) & 0x8000u, a = x & 0x7fffffffu;
  if (a >= 0x7f800000u) return (unsigned short)(sign | 0x7c00u | (a > 0x7f800000u ? 0x200u : 0u));
  if (a >= 0x477ff000u) return (unsigned short)(sign | 0x7c00u);
  if (a < 0x38800000u) return (unsigned short)(sign | (unsigned int)rintf(ft_bits_float(a) * 16777216.0f));
  unsigned int r = a + 0xfffu + ((a >> 13) & 1u);
  r -= 0x38000000u;
  return (unsigned short)(sign | (r >> 13));
}
FT_FN ft_flt ft_bf2f(unsigned short b) { return ft_bits_float((unsigned int)b << 16); }
FT_FN unsigned short ft_f2bf(ft_flt value) {
  const unsigned int u = ft_float_bits(value.v);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
  return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
// cvt.rn.f16x2.f32 and cvt.rn.bf16x2.f32: each float rounded as one cvt rounds it, the first in the
// low half.
FT_FN unsigned ft_pack_h2(ft_flt lo, ft_flt hi) { return (unsigned)ft_f2h(lo) | ((unsigned)ft_f2h(hi) << 16); }
FT_FN unsigned ft_pack_bf2(ft_flt lo, ft_flt hi) { return (unsigned)ft_f2bf(lo) | ((unsigned)ft_f2bf(hi) << 16); }

// mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}: D = A * B + C with C in D's registers.
struct ft_mma_operands {
  unsigned a[4], b[2];
};
FT_FN ft_flt ft_frag_half(unsigned reg, int high, int bf16) {
  const unsigned short h = (unsigned short)(high ? reg >> 16 : reg & 0xffffu);
  return bf16 ? ft_bf2f(h) : ft_h2f(h);
}
FT_INTRINSIC void ft_mma_m16n8k16(ft_flt& d0, ft_flt& d1, ft_flt& d2, ft_flt& d3, unsigned a0, unsigned a1, unsigned a2,
                                  unsigned a3, unsigned b0, unsigned b1, int bf16) {
  const ft_mma_operands mine = {{a0, a1, a2, a3}, {b0, b1}};
  const ft_mma_operands* all =
      static_cast<const ft_mma_operands*>(ft_simt_api_->warp_exchange(&mine, (int)sizeof mine, 0xffffffffu));
  const unsigned lane = ft_simt_lane(), g = lane >> 2, t = lane & 3u;
  // This lane's rows g, g + 8 of A and columns 2t, 2t + 1 of B, as floats. The conversions are
  // the emulation's (the GPU's tensor cores read the 16-bit fragments): their operations are not
  // counted.
  const unsigned long long uncounted = ft_flops_;
  ft_flt a[2][16], b[2][16];
  for (unsigned k = 0; k < 16; ++k) {
    for (unsigned r = 0; r < 2; ++r) {
      const unsigned row = g + 8u * r;
      // A[row][k]: lane 4 (row % 8) + (k % 8) / 2, element 4 (k / 8) + 2 (row / 8) + k % 2.
      const unsigned ai = 4u * (k / 8u) + 2u * (row / 8u) + (k & 1u);
      a[r][k] = ft_frag_half(all[4u * (row % 8u) + (k % 8u) / 2u].a[ai >> 1], (int)(ai & 1u), bf16);
    }
    for (unsigned c = 0; c < 2; ++c) {
      const unsigned col = 2u * t + c;
      // B[k][col]: lane 4 col + (k % 8) / 2, element 2 (k / 8) + k % 2.
      const unsigned bi = 2u * (k / 8u) + (k & 1u);
      b[c][k] = ft_frag_half(all[4u * col + (k % 8u) / 2u].b[bi >> 1], (int)(bi & 1u), bf16);
    }
  }
  ft_flops_ = uncounted;
  ft_flt* d[4] = {&d0, &d1, &d2, &d3};
  for (int i = 0; i < 4; ++i) {  // D[g + 8 (i / 2)][2t + i % 2]
    ft_flt s = *d[i];
    for (unsigned k = 0; k < 16; ++k) s = s + a[i >> 1][k] * b[i & 1][k];  // the FMA's multiply and add
    *d[i] = s;
  }
}
FT_INTRINSIC void ft_mma_m16n8k16_f16(ft_flt& d0, ft_flt& d1, ft_flt& d2, ft_flt& d3, unsigned a0, unsigned a1, unsigned a2,
                                      unsigned a3, unsigned b0, unsigned b1) {
  ft_mma_m16n8k16(d0, d1, d2, d3, a0, a1, a2, a3, b0, b1, 0);
}
FT_INTRINSIC void ft_mma_m16n8k16_bf16(ft_flt& d0, ft_flt& d1, ft_flt& d2, ft_flt& d3, unsigned a0, unsigned a1,
                                       unsigned a2, unsigned a3, unsigned b0, unsigned b1) {
  ft_mma_m16n8k16(d0, d1, d2, d3, a0, a1, a2, a3, b0, b1, 1);
}

// mma.sync.aligned.m16n8k32.row.col.s32.{s8,u8}.{s8,u8}.s32: D = A * B + C in int32, wrapping, A
// 16x32 and B 32x8 of bytes (signed or unsigned as the name says) in the layout of
// codegen/kernel_ir.h: A[row][k] is byte k % 4 of register (row / 8) + 2 (k / 16) of lane
// 4 (row % 8) + (k % 16) / 4; B[k][col] byte k % 4 of register k / 16 of lane 4 col + (k % 16) / 4.
// Counted as its 2 x 16 x 8 x 32 operations, 256 a lane.
struct ft_mma_bytes {
  unsigned a[4], b[2];
};
template <bool SignedA, bool SignedB>
FT_INTRINSIC void ft_mma_m16n8k32(unsigned& d0, unsigned& d1, unsigned& d2, unsigned& d3, unsigned a0, unsigned a1, unsigned a2,
                                  unsigned a3, unsigned b0, unsigned b1) {
  const ft_mma_bytes mine = {{a0, a1, a2, a3}, {b0, b1}};
  const ft_mma_bytes* all = static_cast<const ft_mma_bytes*>(ft_simt_api_->warp_exchange(&mine, (int)sizeof mine, 0xffffffffu));
  const unsigned lane = ft_simt_lane(), g = lane >> 2, t = lane & 3u;
  const auto byte = [](unsigned reg, unsigned k, bool is_signed) {
    const unsigned v = (reg >> (8u * (k % 4u))) & 255u;
    return is_signed ? (long long)(signed char)v : (long long)v;
  };
  unsigned* d[4] = {&d0, &d1, &d2, &d3};
  for (unsigned i = 0; i < 4; ++i) {  // D[g + 8 (i / 2)][2t + i % 2]
    const unsigned row = g + 8u * (i / 2u), col = 2u * t + (i & 1u);
    unsigned s = *d[i];
    for (unsigned k = 0; k < 32; ++k) {
      const long long x = byte(all[4u * (row % 8u) + (k % 16u) / 4u].a[row / 8u + 2u * (k / 16u)], k, SignedA);
      const long long y = byte(all[4u * col + (k % 16u) / 4u].b[k / 16u], k, SignedB);
      s += (unsigned)(x * y);
    }
    *d[i] = s;
  }
  ft_flops_ += 256;
}
#define ft_mma_m16n8k32_ss ft_mma_m16n8k32<true, true>
#define ft_mma_m16n8k32_su ft_mma_m16n8k32<true, false>
#define ft_mma_m16n8k32_us ft_mma_m16n8k32<false, true>
#define ft_mma_m16n8k32_uu ft_mma_m16n8k32<false, false>

// cvt.rna.tf32.f32: the float rounded to TF32's 10 mantissa bits, to nearest with ties away from
// zero (adding half of the dropped part to the magnitude carries into the exponent as the rounding
// does), kept in a float's bits with the low 13 zero; infinities and NaNs keep their class.
FT_FN unsigned ft_tf32(ft_flt x) {
  const unsigned u = ft_float_bits(x.v);
  if ((u & 0x7f800000u) == 0x7f800000u) return (u & 0x7fffffffu) > 0x7f800000u ? (u | 0x00400000u) & ~0x1fffu : u;
  return (u + 0x1000u) & ~0x1fffu;
}
// mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32: D = A * B + C, A 16x8 and B 8x8 of TF32
// values in 32-bit registers (lane l, g = l / 4, t = l % 4: a0 = A[g][t], a1 = A[g + 8][t],
// a2 = A[g][t + 4], a3 = A[g + 8][t + 4]; b0 = B[t][g], b1 = B[t + 4][g]), C and D as m16n8k16's.
// The tensor cores read a register's upper 19 bits; products of TF32 values are exact in float.
FT_INTRINSIC void ft_mma_m16n8k8_tf32(ft_flt& d0, ft_flt& d1, ft_flt& d2, ft_flt& d3, unsigned a0, unsigned a1,
                                      unsigned a2, unsigned a3, unsigned b0, unsigned b1) {
  const ft_mma_operands mine = {{a0, a1, a2, a3}, {b0, b1}};
  const ft_mma_operands* all =
      static_cast<const ft_mma_operands*>(ft_simt_api_->warp_exchange(&mine, (int)sizeof mine, 0xffffffffu));
  const unsigned lane = ft_simt_lane(), g = lane >> 2, t = lane & 3u;
  ft_flt a[2][8], b[2][8];
  for (unsigned k = 0; k < 8; ++k) {
    for (unsigned r = 0; r < 2; ++r) {  // A[g + 8r][k]: lane 4g + k % 4, register r + 2 (k / 4)
      a[r][k] = ft_flt(ft_bits_float(all[4u * g + (k & 3u)].a[r + 2u * (k >> 2)] & ~0x1fffu));
    }
    for (unsigned c = 0; c < 2; ++c) {  // B[k][2t + c]: lane 4 (2t + c) + k % 4, register k / 4
      b[c][k] = ft_flt(ft_bits_float(all[4u * (2u * t + c) + (k & 3u)].b[k >> 2] & ~0x1fffu));
    }
  }
  ft_flt* d[4] = {&d0, &d1, &d2, &d3};
  for (int i = 0; i < 4; ++i) {  // D[g + 8 (i / 2)][2t + i % 2]
    ft_flt s = *d[i];
    for (unsigned k = 0; k < 8; ++k) s = s + a[i >> 1][k] * b[i & 1][k];  // the FMA's multiply and add
    *d[i] = s;
  }
}

// ldmatrix.sync.aligned.m8n8.xN[.trans].shared.b16: lanes 8m .. 8m + 7 give matrix m's rows.
struct ft_ldmatrix_row {
  unsigned short v[8];
};
FT_INTRINSIC void ft_ldmatrix(unsigned* r, int matrices, int trans, ft_ptr<unsigned short> s, long long row) {
  const unsigned lane = ft_simt_lane(), g = lane >> 2, t = lane & 3u;
  ft_ldmatrix_row mine = {};
  if (lane < 8u * (unsigned)matrices) memcpy(&mine, ft_simt_at(s.b, row, 16, FT_SIMT_LOAD, nullptr), 16);
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

// mbarriers and tensor copies (TMA; codegen/kernel_ir.h): the executor keeps each mbarrier's
// phase, arrivals and transaction bytes, suspends a wait until its phase completes, and lands a
// tensor copy's bytes where a wait observes the phase they completed (simt/device_api.h). A tensor
// map parameter is the executor's ft_simt_tensor_map, built from the signature's FT_TENSOR_MAP.
#define FT_TENSOR_MAP(...) ft_ptr<const ft_simt_tensor_map>
FT_INTRINSIC void ft_mbarrier_init(ft_ptr<unsigned long long> s, long long i, unsigned count) {
  ft_simt_api_->mbarrier_init(s.b, i, count);
}
// fence.mbarrier_init: the barrier after it is what orders the init before other threads' use.
FT_INTRINSIC void ft_mbarrier_init_fence() {}
FT_INTRINSIC void ft_mbarrier_arrive_expect_tx(ft_ptr<unsigned long long> s, long long i, unsigned bytes) {
  ft_simt_api_->mbarrier_arrive(s.b, i, bytes);
}
FT_INTRINSIC void ft_mbarrier_arrive(ft_ptr<unsigned long long> s, long long i) { ft_simt_api_->mbarrier_arrive(s.b, i, 0); }
// The warp's one arrival, once every lane got here (__syncwarp), by its lane 0.
FT_INTRINSIC void ft_mbarrier_arrive_warp(ft_ptr<unsigned long long> s, long long i) {
  __syncwarp();
  if (ft_simt_lane() == 0) ft_simt_api_->mbarrier_arrive(s.b, i, 0);
}
#define ft_mbarrier_wait(s, i, parity) ft_simt_api_->mbarrier_wait((s).b, (i), (parity), __LINE__)
template <class T>
FT_INTRINSIC void ft_tma_load_2d(ft_ptr<T> s, long long si, ft_ptr<const ft_simt_tensor_map> map, int c0, int c1,
                                 ft_ptr<unsigned long long> bar, long long bi) {
  const int coords[5] = {c0, c1, 0, 0, 0};
  ft_simt_api_->tensor_load(s.b, si, map.b, coords, bar.b, bi);
}
template <class T>
FT_INTRINSIC void ft_tma_load_3d(ft_ptr<T> s, long long si, ft_ptr<const ft_simt_tensor_map> map, int c0, int c1, int c2,
                                 ft_ptr<unsigned long long> bar, long long bi) {
  const int coords[5] = {c0, c1, c2, 0, 0};
  ft_simt_api_->tensor_load(s.b, si, map.b, coords, bar.b, bi);
}

// wgmma (codegen/kernel_ir.h): a matrix descriptor as the PTX ISA encodes it (start address, LBO
// and SBO in 16-byte units in bits 0-13, 16-29 and 32-45; no swizzling), kept with the shared
// view it points into so that the operands are read through the executor's checks.
// With `swizzle` (bytes of a span: 128, 64 or 32; bits 62-63 1, 2, 3) the operand lies in the
// swizzled canonical layouts: K-major rows of `swizzle` bytes, 8 to an atom, atoms SBO apart (LBO
// unused); MN-major rows (8 consecutive K) of `swizzle` bytes along M or N, atoms LBO apart along
// M or N and SBO apart along K; each address's 16-byte unit (bits 4..) XOR-ed with its bits 7..
// (ft_wgmma_swizzled), by its offset in the block's shared memory as the tensor copies that fill
// it place them (simt/tensor_copy.h), the atoms 1024-byte aligned (base offset 0).
struct ft_wgmma_operand {
  const ft_simt_buffer* view;
  long long view_offset;  // the view's byte offset in the block's shared memory
  unsigned long long bits;
};
FT_INTRINSIC ft_wgmma_operand ft_wgmma_desc(ft_ptr<unsigned short> s, long long i, unsigned lbo, unsigned sbo, int swizzle = 0) {
  const long long offset = (long long)(s.b->base - ft_simt_api_->shared_view(0, 0, 1, "shared memory")->base);
  const unsigned long long address = (unsigned long long)(offset + 2 * i);
  const unsigned long long layout = swizzle == 128 ? 1ull : swizzle == 64 ? 2ull : swizzle == 32 ? 3ull : 0ull;
  return {s.b, offset,
          ((address & 0x3FFFFull) >> 4) | ((unsigned long long)(lbo >> 4) << 16) | ((unsigned long long)(sbo >> 4) << 32) |
              (layout << 62)};
}
FT_FN unsigned long long ft_wgmma_field(unsigned long long bits, int at) { return ((bits >> at) & 0x3FFFull) << 4; }
FT_FN unsigned ft_wgmma_swizzle(unsigned long long bits) {
  const unsigned layout = (unsigned)(bits >> 62);
  return layout == 1u ? 128u : layout == 2u ? 64u : layout == 3u ? 32u : 0u;
}
FT_FN unsigned long long ft_wgmma_swizzled(unsigned long long a, unsigned swizzle) {
  return a ^ (((a >> 7) & (unsigned long long)(swizzle / 16u - 1u)) << 4);
}
// The 16 bytes of a K-major operand at row r (of M, or N) and K from 8h.
FT_FN unsigned long long ft_wgmma_k_major(unsigned long long bits, unsigned r, unsigned h) {
  const unsigned long long start = ft_wgmma_field(bits, 0), lbo = ft_wgmma_field(bits, 16), sbo = ft_wgmma_field(bits, 32);
  const unsigned sw = ft_wgmma_swizzle(bits);
  if (sw == 0u) return start + (r / 8u) * sbo + (r % 8u) * 16u + h * lbo;
  return ft_wgmma_swizzled(start + (r % 8u) * sw + (r / 8u) * sbo + 16u * h, sw);
}
// The 16 bytes of an MN-major operand at K k and M or N from 8nb.
FT_FN unsigned long long ft_wgmma_mn_major(unsigned long long bits, unsigned nb, unsigned k) {
  const unsigned long long start = ft_wgmma_field(bits, 0), lbo = ft_wgmma_field(bits, 16), sbo = ft_wgmma_field(bits, 32);
  const unsigned sw = ft_wgmma_swizzle(bits);
  if (sw == 0u) return start + nb * sbo + (k / 8u) * lbo + (k % 8u) * 16u;
  return ft_wgmma_swizzled(start + (16u * nb) % sw + sw * (k % 8u) + lbo * ((16u * nb) / sw) + sbo * (k / 8u), sw);
}
// The 16 bytes at byte `address` of the block's shared memory, read through the operand's view
// (in flight until the wait that completes the wgmma), counted as a shared load when `counted`.
FT_INTRINSIC ft_ldmatrix_row ft_wgmma_row(const ft_wgmma_operand& o, unsigned long long address, int counted) {
  ft_ldmatrix_row r;
  memcpy(&r, ft_simt_api_->wgmma_read(o.view, ((long long)address - o.view_offset) / 2, counted), 16);
  return r;
}
struct ft_wgmma_rows {
  ft_ldmatrix_row r[4];
};
// wgmma.mma_async.sync.aligned.m64nNk16.f32.{f16,bf16}, scale-d 1: each warp of the warpgroup
// gathers this lane's rows g, g + 8 of its 16 rows of A (a[r][k]) and columns 8j + 2t, 8j + 2t + 1
// of B (b[2j + c][k]), and each lane adds A * B to its accumulator elements (element 4j + i: row
// 16w + g + 8 (i / 2), column 8j + 2t + i % 2). The registers hold no defined value until the wait
// (the executor keeps the sums: wgmma_issue).
// B from shared memory (TRANS_B 1, N-major: row q = 16 nb + k holds columns 8 nb .. 8 nb + 7 at k,
// ft_wgmma_mn_major; TRANS_B 0, K-major: row q = 2n + h holds k = 8h .. 8h + 7 of column n,
// ft_wgmma_k_major): its 2N rows of 16 bytes in rounds
// of 128, four a lane, the 8 rows of a core matrix by 8 consecutive lanes, exchanged. The counters
// see each row read once by the warpgroup (by its first warp): the least one wgmma reads, not the
// emulation's repeats for each warp's exchange.
template <int N, int BF16, int TRANS_B>
FT_INTRINSIC void ft_wgmma_b(const ft_wgmma_operand& b_desc, ft_flt (*b)[16]) {
  const unsigned lane = ft_simt_lane(), t = lane & 3u, w = (ft_simt_api_->thread_index() / 32u) % 4u;
  const auto address = [&](unsigned q) {
    return TRANS_B ? ft_wgmma_mn_major(b_desc.bits, q / 16u, q % 16u) : ft_wgmma_k_major(b_desc.bits, q / 2u, q % 2u);
  };
  for (unsigned round = 0; round < (2u * N + 127u) / 128u; ++round) {
    ft_wgmma_rows mine_b = {};
    for (unsigned u = 0; u < 4; ++u) {  // rows 32u .. 32u + 31 of the round
      const unsigned q = 128u * round + 32u * u + lane;
      if (q < 2u * N) mine_b.r[u] = ft_wgmma_row(b_desc, address(q), w == 0u);
    }
    const ft_wgmma_rows* rows_b =
        static_cast<const ft_wgmma_rows*>(ft_simt_api_->warp_exchange(&mine_b, (int)sizeof mine_b, 0xffffffffu));
    for (unsigned p = 0; p < 128u && 128u * round + p < 2u * N; ++p) {
      const unsigned q = 128u * round + p;
      const ft_ldmatrix_row& row = rows_b[p % 32u].r[p / 32u];
      if (TRANS_B) {
        const unsigned nb = q / 16u, k = q % 16u;
        for (unsigned c = 0; c < 2; ++c) b[2u * nb + c][k] = BF16 ? ft_bf2f(row.v[2u * t + c]) : ft_h2f(row.v[2u * t + c]);
      } else {
        const unsigned n = q / 2u, h = q % 2u;
        if ((n % 8u) / 2u != t) continue;
        for (unsigned e = 0; e < 8; ++e) b[2u * (n / 8u) + n % 2u][8u * h + e] = BF16 ? ft_bf2f(row.v[e]) : ft_h2f(row.v[e]);
      }
    }
  }
}
template <int N>
FT_INTRINSIC void ft_wgmma_accumulate(ft_flt* registers, ft_flt (*a)[16], ft_flt (*b)[16]) {
  ft_flt* const d = reinterpret_cast<ft_flt*>(ft_simt_api_->wgmma_issue(reinterpret_cast<float*>(registers), N / 2));
  for (unsigned j = 0; j < N / 8u; ++j) {
    for (unsigned i = 0; i < 4; ++i) {
      ft_flt s = d[4u * j + i];
      for (unsigned k = 0; k < 16; ++k) s = s + a[i >> 1][k] * b[2u * j + (i & 1u)][k];  // the FMA's multiply and add
      d[4u * j + i] = s;
    }
  }
}
// A K-major from shared memory: lane l reads row 16w + l % 16 (core matrix row / 8, its row row %
// 8) at columns 8 (l / 16) .., exchanged within the warp.
template <int N, int BF16, int TRANS_B>
FT_INTRINSIC void ft_wgmma(ft_flt* registers, ft_wgmma_operand a_desc, ft_wgmma_operand b_desc) {
  static_assert(N >= 8 && N <= 256 && N % 8 == 0, "wgmma N");
  const unsigned lane = ft_simt_lane(), g = lane >> 2, w = (ft_simt_api_->thread_index() / 32u) % 4u;
  const unsigned row = 16u * w + (lane & 15u), half = lane >> 4;
  const ft_ldmatrix_row mine = ft_wgmma_row(a_desc, ft_wgmma_k_major(a_desc.bits, row, half), 1);
  const ft_ldmatrix_row* rows_a =
      static_cast<const ft_ldmatrix_row*>(ft_simt_api_->warp_exchange(&mine, (int)sizeof mine, 0xffffffffu));
  // (The conversions below count no operation: ft_h2f and ft_bf2f compute in the host's float.)
  ft_flt a[2][16], b[N / 4][16];
  for (unsigned k = 0; k < 16; ++k) {
    for (unsigned r = 0; r < 2; ++r) {
      const unsigned short h = rows_a[(g + 8u * r) + 16u * (k / 8u)].v[k % 8u];
      a[r][k] = BF16 ? ft_bf2f(h) : ft_h2f(h);
    }
  }
  ft_wgmma_b<N, BF16, TRANS_B>(b_desc, b);
  ft_wgmma_accumulate<N>(registers, a, b);
}
// A from registers: each lane's four (mma.m16n8k16's A fragment on its warp's 16 rows: register r
// + 2h holds row g + 8r at k = 8h + 2t, 8h + 2t + 1), exchanged within the warp, read when issued.
struct ft_wgmma_a_fragment {
  unsigned r[4];
};
template <int N, int BF16, int TRANS_B>
FT_INTRINSIC void ft_wgmma_ra(ft_flt* registers, const unsigned* a_registers, ft_wgmma_operand b_desc) {
  static_assert(N >= 8 && N <= 256 && N % 8 == 0, "wgmma N");
  const unsigned g = ft_simt_lane() >> 2;
  const ft_wgmma_a_fragment mine = {{a_registers[0], a_registers[1], a_registers[2], a_registers[3]}};
  const ft_wgmma_a_fragment* all =
      static_cast<const ft_wgmma_a_fragment*>(ft_simt_api_->warp_exchange(&mine, (int)sizeof mine, 0xffffffffu));
  ft_flt a[2][16], b[N / 4][16];
  for (unsigned k = 0; k < 16; ++k) {
    for (unsigned r = 0; r < 2; ++r) a[r][k] = ft_frag_half(all[4u * g + (k % 8u) / 2u].r[r + 2u * (k / 8u)], (int)(k % 2u), BF16);
  }
  ft_wgmma_b<N, BF16, TRANS_B>(b_desc, b);
  ft_wgmma_accumulate<N>(registers, a, b);
}
// Groups and waits go to the executor; wgmma.fence orders register accesses the host's sequential
// thread already orders, and the proxy fence makes the threads' stores visible to the wgmma's
// reads, which the barrier after it orders on the host.
template <int C>
FT_INTRINSIC void ft_wgmma_fence(ft_flt*) {}
template <int C>
FT_INTRINSIC void ft_wgmma_hold_operand(unsigned*) {}
#define ft_wgmma_commit() ft_simt_api_->wgmma_commit()
#define ft_wgmma_wait(groups, d, count) ft_simt_api_->wgmma_wait((groups), __LINE__)
FT_INTRINSIC void ft_fence_proxy_async() {}
// setmaxnreg: registers are no resource on the host; what is checked is what the instruction
// demands of its callers: a count it takes (24 to 256, a multiple of 8; the compiler says) and the
// warp's lanes all there (.sync.aligned; a lane missing is a warp operation the executor reports).
// That whole warpgroups take it, codegen/verify_ir.h checks where it is placed.
template <int N>
FT_INTRINSIC void ft_setmaxnreg_inc() {
  static_assert(N >= 24 && N <= 256 && N % 8 == 0, "setmaxnreg count");
  __syncwarp();
}
template <int N>
FT_INTRINSIC void ft_setmaxnreg_dec() {
  static_assert(N >= 24 && N <= 256 && N % 8 == 0, "setmaxnreg count");
  __syncwarp();
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
#define FT_SIMT_ENTRY(K)                                                   \
  extern "C" void ft_simt_entry_##K(void* const* args) {                   \
    ft_simt_invoke(K, args, std::make_index_sequence<ft_simt_arity(K)>()); \
  }

// The CUDA text's floats are counted floats (see ft_flt).
#define float ft_flt
