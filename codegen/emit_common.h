// The prelude shared by generated CUDA and host kernels: index helpers with floor semantics,
// float16 and bfloat16 conversions by bit manipulation (no cuda_fp16.h needed; round to nearest
// even, NaN and infinity preserved, as core/dtype.h), and activation helpers. emit_cuda puts it
// at the top of a module after the intrinsic layer defines FT_FN (device inline on the GPU, static
// inline in the host build of the same text, simt/prelude.h).
#pragma once

#include <string_view>

namespace fusetune::codegen {

inline constexpr std::string_view kPrelude = R"PRELUDE(
FT_FN long long ft_fdiv(long long a, long long b) { long long q = a / b; return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q; }
FT_FN long long ft_fmod(long long a, long long b) { return a - ft_fdiv(a, b) * b; }
FT_FN long long ft_min(long long a, long long b) { return a < b ? a : b; }
FT_FN long long ft_max(long long a, long long b) { return a > b ? a : b; }
FT_FN float ft_h2f(unsigned short h) {
  unsigned int sign = (unsigned int)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0) { float v = (float)mant * 5.9604644775390625e-8f; return sign ? -v : v; }
  unsigned int bits = exp == 31 ? (sign | 0x7f800000u | (mant << 13)) : (sign | ((exp + 112u) << 23) | (mant << 13));
  union { unsigned int u; float f; } c; c.u = bits; return c.f;
}
FT_FN unsigned short ft_f2h(float f) {
  union { float f; unsigned int u; } c; c.f = f;
  unsigned int x = c.u, sign = (x >> 16) & 0x8000u, a = x & 0x7fffffffu;
  if (a >= 0x7f800000u) return (unsigned short)(sign | 0x7c00u | (a > 0x7f800000u ? 0x200u : 0u));
  if (a >= 0x477ff000u) return (unsigned short)(sign | 0x7c00u);
  if (a < 0x38800000u) { union { unsigned int u; float f; } m; m.u = a; return (unsigned short)(sign | (unsigned int)rintf(m.f * 16777216.0f)); }
  unsigned int r = a + 0xfffu + ((a >> 13) & 1u); r -= 0x38000000u; return (unsigned short)(sign | (r >> 13));
}
FT_FN float ft_bf2f(unsigned short b) { union { unsigned int u; float f; } c; c.u = (unsigned int)b << 16; return c.f; }
FT_FN unsigned short ft_f2bf(float f) {
  union { float f; unsigned int u; } c; c.f = f;
  if ((c.u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((c.u >> 16) | 0x40u);
  return (unsigned short)((c.u + 0x7fffu + ((c.u >> 16) & 1u)) >> 16);
}
FT_FN float ft_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
FT_FN float ft_softplus(float x) { return x > 0.0f ? x + log1pf(expf(-x)) : log1pf(expf(x)); }
FT_FN float ft_hardswish(float x) { return x * fminf(1.0f, fmaxf(0.0f, x / 6.0f + 0.5f)); }
FT_FN float ft_fmaxn(float a, float b) { return (a != a || b != b) ? (a + b) : fmaxf(a, b); }
FT_FN float ft_fminn(float a, float b) { return (a != a || b != b) ? (a + b) : fminf(a, b); }
FT_FN float ft_sign(float x) { return x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : x); }
FT_FN float ft_inf() { union { unsigned int u; float f; } c; c.u = 0x7f800000u; return c.f; }
FT_FN float ft_nan() { union { unsigned int u; float f; } c; c.u = 0x7fc00000u; return c.f; }
FT_FN long long ft_f2i(float x) { return x != x ? 0LL : (x >= 9.2e18f ? 9223372036854775807LL : (x <= -9.2e18f ? (-9223372036854775807LL - 1) : (long long)x)); }
FT_FN long long ft_wrap_add(long long a, long long b) { return (long long)((unsigned long long)a + (unsigned long long)b); }
FT_FN long long ft_wrap_sub(long long a, long long b) { return (long long)((unsigned long long)a - (unsigned long long)b); }
FT_FN long long ft_wrap_mul(long long a, long long b) { return (long long)((unsigned long long)a * (unsigned long long)b); }
FT_FN long long ft_idiv(long long a, long long b) { return (b == 0 || (b == -1 && a == (-9223372036854775807LL - 1))) ? 0LL : a / b; }
FT_FN long long ft_ipymod(long long a, long long b) { if (b == 0 || b == -1) return 0LL; long long r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }
FT_FN long long ft_ifmod(long long a, long long b) { return (b == 0 || b == -1) ? 0LL : a % b; }
FT_FN float ft_pymod(float a, float b) { float r = fmodf(a, b); return (r != 0.0f && ((r < 0.0f) != (b < 0.0f))) ? r + b : r; }
)PRELUDE";

}  // namespace fusetune::codegen
