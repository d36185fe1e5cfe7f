// The prelude shared by generated CUDA and host kernels: index helpers with floor semantics (templates,
// so that they compute in the type C's arithmetic conversions give their operands: int in a kernel
// whose index type ft_i is int, codegen/index_width.h),
// float8/E8M0/float4 conversions and 4/2-bit
// integer wraps (the semantics of core/narrow_types.h, written again in float and integer
// operations a GPU runs natively: ft_f2mini rounds with rintf after an exact power-of-two scaling),
// activation helpers and the Philox generator of RandomUniform. emit_cuda puts it
// at the top of a module after the intrinsic layer defines FT_FN (device inline on the GPU, static
// inline in the host build of the same text, simt/prelude.h).
#pragma once

#include <string_view>

namespace fusetune::codegen {

inline constexpr std::string_view kPrelude = R"PRELUDE(
template <class A, class B> FT_FN auto ft_fdiv(A a, B b) -> decltype(a + b) { const decltype(a + b) q = a / b; return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q; }
template <class A, class B> FT_FN auto ft_fmod(A a, B b) -> decltype(a + b) { return a - ft_fdiv(a, b) * b; }
template <class A, class B> FT_FN auto ft_min(A a, B b) -> decltype(a + b) { return a < b ? a : b; }
template <class A, class B> FT_FN auto ft_max(A a, B b) -> decltype(a + b) { return a > b ? a : b; }
FT_FN float ft_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
FT_FN float ft_softplus(float x) { return x > 0.0f ? x + log1pf(expf(-x)) : log1pf(expf(x)); }
FT_FN float ft_hardswish(float x) { return x * fminf(1.0f, fmaxf(0.0f, x / 6.0f + 0.5f)); }
FT_FN float ft_fmaxn(float a, float b) { return (a != a || b != b) ? (a + b) : fmaxf(a, b); }
FT_FN float ft_fminn(float a, float b) { return (a != a || b != b) ? (a + b) : fminf(a, b); }
// ArgMax's and ArgMin's order, the reference's serial scan regrouped (a lane's strided share, then
// the warp's lanes, then the warps): candidate (x, i) beats the held (b, j), j 0xffffffff for none
// yet. The scan starts from element 0 and takes only strictly better (last: better or equal)
// elements, so a NaN at index 0 wins and a NaN elsewhere never does; equal values go to the lower
// (last: the higher) index. A total order over the elements, so any grouping gives the scan's pick.
FT_FN bool ft_arg_beats(float x, unsigned int i, float b, unsigned int j, bool is_max, bool last) {
  if (i == 0xffffffffu) return false;
  if (j == 0xffffffffu) return x == x || i == 0u;
  if (b != b) return false;
  if (x != x) return i == 0u;
  if (x == b) return last ? i > j : i < j;
  return is_max ? x > b : x < b;
}
FT_FN float ft_sign(float x) { return x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : x); }
FT_FN float ft_inf() { union { unsigned int u; float f; } c; c.u = 0x7f800000u; return c.f; }
FT_FN float ft_nan() { union { unsigned int u; float f; } c; c.u = 0x7fc00000u; return c.f; }
FT_FN long long ft_f2i(float x) { return x != x ? 0LL : (x >= 9.2e18f ? 9223372036854775807LL : (x <= -9.2e18f ? (-9223372036854775807LL - 1) : (long long)x)); }
FT_FN long long ft_wrap_add(long long a, long long b) { return (long long)((unsigned long long)a + (unsigned long long)b); }
FT_FN long long ft_wrap_sub(long long a, long long b) { return (long long)((unsigned long long)a - (unsigned long long)b); }
FT_FN long long ft_wrap_mul(long long a, long long b) { return (long long)((unsigned long long)a * (unsigned long long)b); }
FT_FN long long ft_idiv(long long a, long long b) { return (b == 0 || (b == -1 && a == (-9223372036854775807LL - 1))) ? 0LL : a / b; }
FT_FN long long ft_ipymod(long long a, long long b) { if (b == 0 || b == -1) return 0LL; long long r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }
FT_FN long long ft_ipow(long long a, long long b) {
  if (b < 0) return a == 1 ? 1LL : (a == -1 ? ((b & 1) ? -1LL : 1LL) : 0LL);
  long long r = 1;
  for (long long base = a; b > 0; b >>= 1, base = ft_wrap_mul(base, base)) if (b & 1) r = ft_wrap_mul(r, base);
  return r;
}
FT_FN long long ft_ifmod(long long a, long long b) { return (b == 0 || b == -1) ? 0LL : a % b; }
FT_FN float ft_pymod(float a, float b) { float r = fmodf(a, b); return (r != 0.0f && ((r < 0.0f) != (b < 0.0f))) ? r + b : r; }
FT_FN float ft_exp2i(int k) { union { unsigned int u; float f; } c; c.u = (unsigned int)(k + 127) << 23; return c.f; }
FT_FN float ft_mini2f(unsigned int c, int eb, int mb, int bias, int kind) {
  const int sb = eb + mb; const unsigned int s = (c >> sb) & 1u, mag = c & ((1u << sb) - 1u);
  const int e = (int)(mag >> mb), m = (int)(mag & ((1u << mb) - 1u));
  const float nan = s ? -ft_nan() : ft_nan();  // a NaN keeps its sign, as casting it back needs
  if ((kind == 2 && c == 0x80u) || (kind == 0 && mag == (1u << sb) - 1u)) return nan;
  if (kind == 1 && e == (1 << eb) - 1) return m ? nan : (s ? -ft_inf() : ft_inf());
  const float v = e == 0 ? (float)m * ft_exp2i(1 - bias - mb) : (float)((1 << mb) + m) * ft_exp2i(e - bias - mb);
  return s ? -v : v;
}
FT_FN unsigned int ft_f2mini(float f, int eb, int mb, int bias, int kind, unsigned int maxcode, int saturate) {
  union { float f; unsigned int u; } c; c.f = f;
  const int sb = eb + mb; const unsigned int s = c.u >> 31, sign = s << sb, a = c.u & 0x7fffffffu;
  if (a > 0x7f800000u) return kind == 3 ? (s ? 0u : 1u << sb) : (kind == 2 ? 0x80u : (sign | (kind == 1 ? 0x7eu : 0x7fu)));
  const unsigned int over = (saturate || kind == 3) ? (sign | maxcode) : (kind == 2 ? 0x80u : (sign | (kind == 1 ? 0x7cu : 0x7fu)));
  const int emin = 1 - bias, emax = (int)(maxcode >> mb) - bias;
  int E = (int)(a >> 23) - 127;
  if (E > emax) return over;
  if (E < emin) E = emin;
  c.u = a;
  const unsigned int q = (unsigned int)rintf(c.f * ft_exp2i(mb - E));
  if (q == 0u) return kind == 2 ? 0u : sign;
  const unsigned int code = ((unsigned int)(E + bias - 1) << mb) + q;
  return code > maxcode ? over : (sign | code);
}
FT_FN float ft_e4m3fn2f(unsigned char c) { return ft_mini2f(c, 4, 3, 7, 0); }
FT_FN float ft_e4m3fnuz2f(unsigned char c) { return ft_mini2f(c, 4, 3, 8, 2); }
FT_FN float ft_e5m22f(unsigned char c) { return ft_mini2f(c, 5, 2, 15, 1); }
FT_FN float ft_e5m2fnuz2f(unsigned char c) { return ft_mini2f(c, 5, 2, 16, 2); }
FT_FN float ft_e2m12f(unsigned char c) { return ft_mini2f(c, 2, 1, 1, 3); }
FT_FN unsigned char ft_f2e4m3fn(float f, int sat) { return (unsigned char)ft_f2mini(f, 4, 3, 7, 0, 0x7eu, sat); }
FT_FN unsigned char ft_f2e4m3fnuz(float f, int sat) { return (unsigned char)ft_f2mini(f, 4, 3, 8, 2, 0x7fu, sat); }
FT_FN unsigned char ft_f2e5m2(float f, int sat) { return (unsigned char)ft_f2mini(f, 5, 2, 15, 1, 0x7bu, sat); }
FT_FN unsigned char ft_f2e5m2fnuz(float f, int sat) { return (unsigned char)ft_f2mini(f, 5, 2, 16, 2, 0x7fu, sat); }
FT_FN unsigned char ft_f2e2m1(float f, int sat) { return (unsigned char)ft_f2mini(f, 2, 1, 1, 3, 0x7u, sat); }
FT_FN float ft_e8m02f(unsigned char c) {
  union { unsigned int u; float f; } v; v.u = c == 0 ? 0x00400000u : ((unsigned int)c << 23);
  return c == 0xffu ? ft_nan() : v.f;
}
FT_FN unsigned char ft_f2e8m0(float f, int sat, int mode) {
  union { float f; unsigned int u; } c; c.f = f;
  unsigned int e = (c.u >> 23) & 0xffu;
  if (e == 0xffu) return 0xffu;
  const unsigned int g = c.u & 0x400000u, r = c.u & 0x200000u, st = c.u & 0x1fffffu;
  const int up = mode == 0 ? (c.u & 0x7fffffu) != 0u : (mode == 2 ? (g != 0u && (r != 0u || st != 0u || e > 0u)) : 0);
  if (up && !(sat && e == 0xfeu)) ++e;
  return (unsigned char)e;
}
// Philox4x32-10 (core/philox.h: the same rounds, key schedule and word) at counter (i, 0): the
// top 24 bits of word `word` times 2^-24, a uniform in [0, 1) exact in float.
FT_FN float ft_philox_uniform(unsigned int k0, unsigned int k1, unsigned long long i, int word) {
  unsigned int c0 = (unsigned int)i, c1 = (unsigned int)(i >> 32), c2 = 0u, c3 = 0u;
  for (int r = 0; r < 10; ++r) {
    if (r > 0) { k0 += 0x9E3779B9u; k1 += 0xBB67AE85u; }
    const unsigned long long p0 = (unsigned long long)0xD2511F53u * c0, p1 = (unsigned long long)0xCD9E8D57u * c2;
    const unsigned int n0 = (unsigned int)(p1 >> 32) ^ c1 ^ k0, n2 = (unsigned int)(p0 >> 32) ^ c3 ^ k1;
    c1 = (unsigned int)p1;
    c3 = (unsigned int)p0;
    c0 = n0;
    c2 = n2;
  }
  const unsigned int w = word == 0 ? c0 : (word == 1 ? c1 : (word == 2 ? c2 : c3));
  return (float)(w >> 8) * 5.9604644775390625e-8f;
}
FT_FN long long ft_wrap_i4(long long v) { return (long long)(((unsigned long long)v & 15ULL) ^ 8ULL) - 8LL; }
FT_FN long long ft_wrap_u4(long long v) { return (long long)((unsigned long long)v & 15ULL); }
FT_FN long long ft_wrap_i2(long long v) { return (long long)(((unsigned long long)v & 3ULL) ^ 2ULL) - 2LL; }
FT_FN long long ft_wrap_u2(long long v) { return (long long)((unsigned long long)v & 3ULL); }
)PRELUDE";

}  // namespace fusetune::codegen
