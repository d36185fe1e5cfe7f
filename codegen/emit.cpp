#include "codegen/emit.h"

#include <set>
#include <sstream>
#include <utility>

#include "codegen/emit_common.h"
#include "core/error.h"
#include "core/inert_text.h"

namespace fusetune::codegen {

std::string storage_ctype(DType t) {
  switch (t) {
    case DType::kF32: return "float";
    case DType::kF16:
    case DType::kBF16: return "unsigned short";
    case DType::kF64: return "double";
    case DType::kI64: return "long long";
    case DType::kU64: return "unsigned long long";
    case DType::kI32: return "int";
    case DType::kU32: return "unsigned int";
    case DType::kI16: return "short";
    case DType::kU16: return "unsigned short";
    case DType::kI8:
    case DType::kI4:
    case DType::kI2: return "signed char";
    case DType::kU8:
    case DType::kBool:
    case DType::kU4:
    case DType::kU2:
    case DType::kF8E4M3FN:
    case DType::kF8E4M3FNUZ:
    case DType::kF8E5M2:
    case DType::kF8E5M2FNUZ:
    case DType::kF8E8M0:
    case DType::kF4E2M1: return "unsigned char";
    default: fail("code generation does not support dtype ", dtype_name(t));
  }
}

namespace {

std::string local_ctype(const ThreadLocal& t) { return t.dtype == DType::kF32 ? "float" : "unsigned int"; }

// The intrinsic layer's CUDA expansions; simt/prelude.h defines FT_SIMT and the host expansions of
// the same names, so the host builds and runs this very text.
constexpr std::string_view kCudaIntrinsics = R"CUDA(#ifndef FT_SIMT
#define FT_FN static __device__ __forceinline__
#define FT_GLOBAL(T) T* __restrict__
#define FT_SCRATCH(T, ...) T* __restrict__
#define FT_SHARED_MEMORY extern __shared__ __align__(1024) unsigned char ft_smem[]
#define FT_SHARED(T, name, offset, elements) T* name = (T*)(ft_smem + (offset))
FT_FN float4 ft_load_float4(const float* p, long long i) { return *(const float4*)(p + i); }
FT_FN void ft_store_float4(float* p, long long i, float4 v) { *(float4*)(p + i) = v; }
FT_FN bool ft_aligned16(const float* p, long long i) { return (((unsigned long long)(p + i)) & 15ULL) == 0ULL; }
FT_FN float4 ft_pack_float4(float a, float b, float c, float d) { return make_float4(a, b, c, d); }
// Eight 16-bit values (float16 or bfloat16 bits) in one 16-byte access.
struct __align__(16) ft_u16x8 { unsigned short v[8]; };
FT_FN ft_u16x8 ft_load_ft_u16x8(const unsigned short* p, long long i) { return *(const ft_u16x8*)(p + i); }
FT_FN void ft_store_ft_u16x8(unsigned short* p, long long i, ft_u16x8 v) { *(ft_u16x8*)(p + i) = v; }
// Two adjacent elements in one 8-byte (float) or 4-byte (16-bit) access.
struct __align__(4) ft_u16x2 { unsigned short v[2]; };
FT_FN void ft_store_float2(float* p, long long i, float2 v) { *(float2*)(p + i) = v; }
FT_FN void ft_store_ft_u16x2(unsigned short* p, long long i, ft_u16x2 v) { *(ft_u16x2*)(p + i) = v; }
FT_FN float2 ft_pack_float2(float a, float b) { return make_float2(a, b); }
FT_FN ft_u16x2 ft_pack_ft_u16x2(unsigned short a, unsigned short b) {
  ft_u16x2 r;
  r.v[0] = a; r.v[1] = b;
  return r;
}
FT_FN ft_u16x8 ft_pack_ft_u16x8(unsigned short a, unsigned short b, unsigned short c, unsigned short d, unsigned short e,
                                unsigned short f, unsigned short g, unsigned short h) {
  ft_u16x8 r;
  r.v[0] = a; r.v[1] = b; r.v[2] = c; r.v[3] = d; r.v[4] = e; r.v[5] = f; r.v[6] = g; r.v[7] = h;
  return r;
}
// float16 and bfloat16 to and from float: one cvt instruction each (bfloat16 widening is a shift).
FT_FN float ft_h2f(unsigned short h) { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f; }
FT_FN unsigned short ft_f2h(float f) { unsigned short h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h; }
FT_FN float ft_bf2f(unsigned short b) { return __uint_as_float((unsigned)b << 16); }
#if __CUDA_ARCH__ >= 800
FT_FN unsigned short ft_f2bf(float f) { unsigned short h; asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h; }
#else  // no bfloat16 cvt before sm_80: round to nearest even on the bits
FT_FN unsigned short ft_f2bf(float f) {
  const unsigned u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
  return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
#endif
// Two floats as one register of 16-bit mma operands, the first in the low half (a probability
// fragment of flash attention, stages/attention.h): one cvt for the pair.
#if __CUDA_ARCH__ >= 800
FT_FN unsigned ft_pack_h2(float lo, float hi) { unsigned r; asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo)); return r; }
FT_FN unsigned ft_pack_bf2(float lo, float hi) { unsigned r; asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo)); return r; }
#else  // no packed cvt before sm_80 (nor mma.m16n8k16 to read it)
FT_FN unsigned ft_pack_h2(float lo, float hi) { return (unsigned)ft_f2h(lo) | ((unsigned)ft_f2h(hi) << 16); }
FT_FN unsigned ft_pack_bf2(float lo, float hi) { return (unsigned)ft_f2bf(lo) | ((unsigned)ft_f2bf(hi) << 16); }
#endif
// 8-bit integer operands (codegen/stages/dp4a_matmul.h): four bytes in one 32-bit load (read
// only), whether element i's address is 4-byte aligned, and dp4a: the sum of the four byte
// products of a and b (each signed, s, or unsigned, u) plus c, modulo 2^32.
FT_FN unsigned ft_load_word(const signed char* p, long long i) { return __ldg((const unsigned*)(p + i)); }
FT_FN unsigned ft_load_word(const unsigned char* p, long long i) { return __ldg((const unsigned*)(p + i)); }
FT_FN bool ft_aligned4(const signed char* p, long long i) { return (((unsigned long long)(p + i)) & 3ULL) == 0ULL; }
FT_FN bool ft_aligned4(const unsigned char* p, long long i) { return (((unsigned long long)(p + i)) & 3ULL) == 0ULL; }
// Four integers' low bytes packed into a word, the first lowest; byte j of four words packed
// likewise (a column of a 4 x 4 byte transpose: bytes j and j ^ 1 of w0 and w1 interleaved, of w2
// and w3 likewise, then the halves picked; the four columns' calls share the interleaved pairs,
// 8 prmt a transpose).
FT_FN unsigned ft_pack_bytes(long long a, long long b, long long c, long long d) {
  return ((unsigned)a & 255u) | (((unsigned)b & 255u) << 8) | (((unsigned)c & 255u) << 16) | ((unsigned)d << 24);
}
FT_FN unsigned ft_byte_column(unsigned w0, unsigned w1, unsigned w2, unsigned w3, int j) {
  const unsigned pair = j < 2 ? 0x5140u : 0x7362u;
  return __byte_perm(__byte_perm(w0, w1, pair), __byte_perm(w2, w3, pair), (j & 1) ? 0x7632u : 0x5410u);
}
#define FT_DP4A(NAME, TYPES)                                                                     \
  FT_FN unsigned NAME(unsigned a, unsigned b, unsigned c) {                                     \
    unsigned d;                                                                                 \
    asm("dp4a." TYPES " %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));                   \
    return d;                                                                                   \
  }
FT_DP4A(ft_dp4a_ss, "s32.s32")
FT_DP4A(ft_dp4a_su, "s32.u32")
FT_DP4A(ft_dp4a_us, "u32.s32")
FT_DP4A(ft_dp4a_uu, "u32.u32")
// mma.sync (sm_80+): D += A * B on one warp's fragments (codegen/kernel_ir.h), INSTRUCTION's shape
// and types, the accumulators T (float, or int32 bits in unsigned) in registers of constraint C.
#define FT_MMA_SYNC(NAME, INSTRUCTION, T, C)                                                                  \
  FT_FN void NAME(T& d0, T& d1, T& d2, T& d3, unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0, \
                  unsigned b1) {                                                                              \
    asm volatile(INSTRUCTION " {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"               \
                 : "+" C(d0), "+" C(d1), "+" C(d2), "+" C(d3)                                                 \
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));                                     \
  }
FT_MMA_SYNC(ft_mma_m16n8k16_f16, "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", float, "f")
FT_MMA_SYNC(ft_mma_m16n8k16_bf16, "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", float, "f")
// 8-bit integers: D (int32, wrapping) += A (16x32) * B (32x8), A and B each s8 or u8.
FT_MMA_SYNC(ft_mma_m16n8k32_ss, "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32", unsigned, "r")
FT_MMA_SYNC(ft_mma_m16n8k32_su, "mma.sync.aligned.m16n8k32.row.col.s32.s8.u8.s32", unsigned, "r")
FT_MMA_SYNC(ft_mma_m16n8k32_us, "mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32", unsigned, "r")
FT_MMA_SYNC(ft_mma_m16n8k32_uu, "mma.sync.aligned.m16n8k32.row.col.s32.u8.u8.s32", unsigned, "r")
// TF32 (the float32 precision policy): a float rounded to 10 mantissa bits, ties away from zero,
// then mma.m16n8k8 on such values with float accumulators.
FT_FN unsigned ft_tf32(float f) { unsigned u; asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(u) : "f"(f)); return u; }
FT_MMA_SYNC(ft_mma_m16n8k8_tf32, "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32", float, "f")
FT_FN unsigned ft_shared_address(const unsigned short* s, long long row) { return (unsigned)__cvta_generic_to_shared(s + row); }
FT_FN unsigned ft_shared_address(const float* s, long long row) { return (unsigned)__cvta_generic_to_shared(s + row); }
FT_FN void ft_ldmatrix_x1(unsigned& r0, const unsigned short* s, long long row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];" : "=r"(r0) : "r"(ft_shared_address(s, row)));
}
FT_FN void ft_ldmatrix_x2(unsigned& r0, unsigned& r1, const unsigned short* s, long long row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];" : "=r"(r0), "=r"(r1) : "r"(ft_shared_address(s, row)));
}
FT_FN void ft_ldmatrix_x4(unsigned& r0, unsigned& r1, unsigned& r2, unsigned& r3, const unsigned short* s, long long row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(ft_shared_address(s, row)));
}
FT_FN void ft_ldmatrix_x1_trans(unsigned& r0, const unsigned short* s, long long row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];" : "=r"(r0) : "r"(ft_shared_address(s, row)));
}
FT_FN void ft_ldmatrix_x2_trans(unsigned& r0, unsigned& r1, const unsigned short* s, long long row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];" : "=r"(r0), "=r"(r1) : "r"(ft_shared_address(s, row)));
}
FT_FN void ft_ldmatrix_x4_trans(unsigned& r0, unsigned& r1, unsigned& r2, unsigned& r3, const unsigned short* s, long long row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(ft_shared_address(s, row)));
}
// Blocks that cooperate (codegen/kernel_ir.h): atomics on a scratch counter, and loads of what
// other blocks stored that bypass the SM's L1 (which is not coherent across SMs).
FT_FN unsigned ft_atomic_add(unsigned* p, long long i, unsigned v) { return atomicAdd(p + i, v); }
FT_FN unsigned ft_atomic_exch(unsigned* p, long long i, unsigned v) { return atomicExch(p + i, v); }
FT_FN float ft_ldcg(const float* p, long long i) { return __ldcg(p + i); }
FT_FN unsigned ft_ldcg(const unsigned* p, long long i) { return __ldcg(p + i); }
FT_FN float4 ft_ldcg_float4(const float* p, long long i) { return __ldcg((const float4*)(p + i)); }
#if __CUDA_ARCH__ >= 800
// cp.async (sm_80+): 16 bytes global -> shared, `bytes` of them read, the rest zero-filled; commit
// and wait per thread (codegen/kernel_ir.h).
FT_FN void ft_cp_async16(unsigned short* s, long long si, const unsigned short* g, long long gi, int bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" :: "r"(ft_shared_address(s, si)), "l"(g + gi), "r"(bytes) : "memory");
}
FT_FN void ft_cp_async16(float* s, long long si, const float* g, long long gi, int bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" :: "r"(ft_shared_address(s, si)), "l"(g + gi), "r"(bytes) : "memory");
}
// One float (a gather's element): through L1 (.ca; .cg takes 16 bytes only), 4 or 0 bytes read.
FT_FN void ft_cp_async4(float* s, long long si, const float* g, long long gi, int bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" :: "r"(ft_shared_address(s, si)), "l"(g + gi), "r"(bytes) : "memory");
}
#define ft_cp_async_commit() asm volatile("cp.async.commit_group;" ::: "memory")
#define ft_cp_async_wait(n) asm volatile("cp.async.wait_group %0;" :: "n"(n) : "memory")
#else
// Before sm_80 (the SIMT ring of a float32 MatMul runs there too): the copy done at once, as
// loads and stores of the issuing thread, so every group has landed when it is waited for.
FT_FN void ft_cp_async16(unsigned short* s, long long si, const unsigned short* g, long long gi, int bytes) {
  for (int i = 0; i < 8; ++i) s[si + i] = 2 * i < bytes ? g[gi + i] : (unsigned short)0;
}
FT_FN void ft_cp_async16(float* s, long long si, const float* g, long long gi, int bytes) {
  for (int i = 0; i < 4; ++i) s[si + i] = 4 * i < bytes ? g[gi + i] : 0.0f;
}
FT_FN void ft_cp_async4(float* s, long long si, const float* g, long long gi, int bytes) { s[si] = bytes > 0 ? g[gi] : 0.0f; }
#define ft_cp_async_commit() ((void)0)
#define ft_cp_async_wait(n) ((void)0)
#endif
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// wgmma (sm_90a; codegen/kernel_ir.h): the warpgroup's m64nNk16 from shared memory through matrix
// descriptors (no swizzling: start address, leading and stride byte offsets, each in 16-byte
// units), its fences, groups and waits. The module specialises ft_wgmma for the shapes it issues. The accumulators pass through an empty asm at the fence and after the wait,
// so the compiler neither moves their accesses into the asynchronous region nor keeps a copy.
template <int N, int BF16, int TRANS_B>
__device__ void ft_wgmma(float* d, unsigned long long a, unsigned long long b);
template <int N, int BF16, int TRANS_B>
__device__ void ft_wgmma_ra(float* d, const unsigned* a, unsigned long long b);
// With `swizzle` (bytes of a span: 128, 64, 32) the swizzled canonical layout, atoms 1024-byte
// aligned (base offset 0; simt/prelude.h says how each address is formed).
FT_FN unsigned long long ft_wgmma_desc(const unsigned short* s, long long i, unsigned lbo, unsigned sbo, int swizzle = 0) {
  const unsigned long long layout = swizzle == 128 ? 1ull : swizzle == 64 ? 2ull : swizzle == 32 ? 3ull : 0ull;
  return (unsigned long long)((ft_shared_address(s, i) & 0x3FFFFu) >> 4) | ((unsigned long long)(lbo >> 4) << 16) |
         ((unsigned long long)(sbo >> 4) << 32) | (layout << 62);
}
template <int C>
FT_FN void ft_wgmma_hold(float* d) {
#pragma unroll
  for (int i = 0; i < C; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
// A's registers of a register-A wgmma, held likewise before the fence.
template <int C>
FT_FN void ft_wgmma_hold_operand(unsigned* r) {
#pragma unroll
  for (int i = 0; i < C; ++i) asm volatile("" : "+r"(r[i])::"memory");
}
template <int C>
FT_FN void ft_wgmma_fence(float* d) {
  ft_wgmma_hold<C>(d);
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}
FT_FN void ft_wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
#define ft_wgmma_wait(groups, d, count)                                        \
  do {                                                                         \
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(groups) : "memory"); \
    ft_wgmma_hold<count>(d);                                                   \
  } while (0)
FT_FN void ft_fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
// setmaxnreg (warp specialization): the warpgroup's per-thread register budget to N.
template <int N>
FT_FN void ft_setmaxnreg_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(N)); }
template <int N>
FT_FN void ft_setmaxnreg_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(N)); }
#endif
// A TMA tensor map parameter (FT_TENSOR_MAP(source, dims, strides, box, swizzle) name; its spec is
// read from the signature, core/kernel_text.h): the driver's 128 bytes, passed by value.
struct __align__(64) ft_tensor_map { unsigned long long opaque[16]; };
#define FT_TENSOR_MAP(...) const __grid_constant__ ft_tensor_map
#if __CUDA_ARCH__ >= 900
// mbarriers (sm_90+; codegen/kernel_ir.h): an 8-byte object in shared memory counting a phase's
// arrivals and transaction bytes; the wait spins on try_wait.parity until the phase of that
// parity has completed. Tensor copies (cp.async.bulk.tensor, TMA): a box of a tensor map into
// shared memory, completing its bytes on an mbarrier.
FT_FN unsigned ft_shared_address(const unsigned long long* s, long long i) { return (unsigned)__cvta_generic_to_shared(s + i); }
FT_FN void ft_mbarrier_init(unsigned long long* s, long long i, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(ft_shared_address(s, i)), "r"(count) : "memory");
}
FT_FN void ft_mbarrier_init_fence() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }
FT_FN void ft_mbarrier_arrive_expect_tx(unsigned long long* s, long long i, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(ft_shared_address(s, i)), "r"(bytes) : "memory");
}
FT_FN void ft_mbarrier_arrive(unsigned long long* s, long long i) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(ft_shared_address(s, i)) : "memory");
}
// The warp's one arrival (an mbarrier expecting a warp's), once every lane got here.
FT_FN void ft_mbarrier_arrive_warp(unsigned long long* s, long long i) {
  __syncwarp();
  if ((threadIdx.x & 31u) == 0u) ft_mbarrier_arrive(s, i);
}
FT_FN void ft_mbarrier_wait(unsigned long long* s, long long i, unsigned parity) {
  asm volatile("{\n\t.reg .pred p;\n\tFT_WAIT:\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n\t@!p bra FT_WAIT;\n\t}"
               :: "r"(ft_shared_address(s, i)), "r"(parity) : "memory");
}
template <class T>
FT_FN void ft_tma_load_2d(T* s, long long si, const ft_tensor_map& map, int c0, int c1, unsigned long long* bar, long long bi) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
               :: "r"((unsigned)__cvta_generic_to_shared(s + si)), "l"(&map), "r"(c0), "r"(c1), "r"(ft_shared_address(bar, bi))
               : "memory");
}
template <class T>
FT_FN void ft_tma_load_3d(T* s, long long si, const ft_tensor_map& map, int c0, int c1, int c2, unsigned long long* bar, long long bi) {
  asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];"
               :: "r"((unsigned)__cvta_generic_to_shared(s + si)), "l"(&map), "r"(c0), "r"(c1), "r"(c2),
                  "r"(ft_shared_address(bar, bi))
               : "memory");
}
// Programmatic dependent launch (sm_90+), the first statement of every kernel: wait until the grid
// before this one in the stream has completed and its writes are visible, then let the next grid
// begin launching once every block of this one has started. The launch that overlaps this way
// (CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION) hides the next kernel's launch behind
// this one's last wave; without that attribute both instructions do nothing.
#define FT_GRID_DEPENDENCY() asm volatile("griddepcontrol.wait;\n\tgriddepcontrol.launch_dependents;" ::: "memory")
#else
#define FT_GRID_DEPENDENCY() (void)0
#endif
#endif
)CUDA";

std::string reg(const std::string& local, int64_t i) { return local + "[" + std::to_string(i) + "]"; }

// `for (ft_i NAME = A; NAME < (B); ++NAME) {`: a serial or block-uniform loop's head.
void serial_loop_head(std::ostringstream& out, const std::string& pad, const Stmt& s) {
  out << pad << "for (" << kIndexType << " " << s.name << " = " << s.a << "; " << s.name << " < (" << s.b << "); ++" << s.name
      << ") {\n";
}

int64_t local_count(const Kernel& k, const std::string& name) {
  for (const ThreadLocal& t : k.thread_locals) {
    if (t.name == name) return t.count;
  }
  fail("emit_cuda: kernel ", k.name, ": no thread-local '", name, "'");
}

// ft_wgmma<N, BF16, TRANS_B>: wgmma.mma_async m64nNk16 with f32 accumulators, A K-major from
// shared memory (imm-trans-a 0), B N-major (imm-trans-b 1) or K-major (0), scale-d 1 (D += A * B),
// the inputs unscaled; ft_wgmma_ra<N, BF16, TRANS_B>: A from the thread's four registers at `a`.
std::string wgmma_specialization(const WgmmaShape& w) {
  std::ostringstream out;
  const int regs = w.n / 2;
  const int a_regs = w.a_registers ? 4 : 1;
  const char* t = w.bf16 ? "bf16" : "f16";
  out << "template <>\n__device__ __forceinline__ void " << (w.a_registers ? "ft_wgmma_ra<" : "ft_wgmma<") << w.n << ", "
      << (w.bf16 ? 1 : 0) << ", " << (w.b_n_major ? 1 : 0) << ">(float* d, "
      << (w.a_registers ? "const unsigned* a" : "unsigned long long a") << ", unsigned long long b) {\n"
      << "  asm volatile(\"{\\n.reg .pred p;\\nsetp.ne.b32 p, %" << regs + a_regs + 1 << ", 0;\\n\"\n"
      << "               \"wgmma.mma_async.sync.aligned.m64n" << w.n << "k16.f32." << t << "." << t << " {";
  for (int i = 0; i < regs; ++i) out << (i ? ", " : "") << "%" << i;
  out << "}, ";
  if (w.a_registers) {
    out << "{%" << regs << ", %" << regs + 1 << ", %" << regs + 2 << ", %" << regs + 3 << "}";
  } else {
    out << "%" << regs;
  }
  // Register A has no transpose operand.
  out << ", %" << regs + a_regs << ", p, 1, 1, " << (w.a_registers ? "" : "0, ") << (w.b_n_major ? 1 : 0)
      << ";\\n}\\n\"\n               : ";
  for (int i = 0; i < regs; ++i) out << (i ? ", " : "") << "\"+f\"(d[" << i << "])";
  out << "\n               : ";
  if (w.a_registers) {
    out << "\"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3])";
  } else {
    out << "\"l\"(a)";
  }
  out << ", \"l\"(b), \"r\"(1));\n}\n";
  return out.str();
}

void emit_block(std::ostringstream& out, const Kernel& k, const Block& b, int depth) {
  const std::string pad(static_cast<size_t>(depth) * 2, ' ');
  for (const Stmt& s : b) {
    switch (s.kind) {
      case Stmt::Kind::kComment:
        // Comments echo model text (comment() made it inert); a comment that could end its line
        // or itself never reaches the compiler.
        check(is_inert_comment(s.a), "emit_cuda: kernel ", k.name, ": a comment holds characters outside the inert alphabet");
        out << pad << "// " << s.a << "\n";
        break;
      case Stmt::Kind::kLet: out << pad << s.ctype << " " << s.name << " = " << s.a << ";\n"; break;
      case Stmt::Kind::kAssign: out << pad << s.name << " = " << s.a << ";\n"; break;
      case Stmt::Kind::kStore: out << pad << s.name << "[" << s.a << "] = " << s.b << ";\n"; break;
      case Stmt::Kind::kFor:
        if (s.threads) {
          out << pad << "for (" << kIndexType << " " << s.name << " = (" << s.a << ") + ft_thread; " << s.name << " < (" << s.b
              << "); " << s.name << " += " << k.threads << ") {\n";
        } else {
          if (s.unroll > 0) out << pad << "#pragma unroll " << s.unroll << "\n";
          serial_loop_head(out, pad, s);
        }
        emit_block(out, k, s.body, depth + 1);
        out << pad << "}\n";
        break;
      case Stmt::Kind::kIf:
        out << pad << "if (" << s.a << ") {\n";
        emit_block(out, k, s.body, depth + 1);
        if (!s.orelse.empty()) {
          out << pad << "} else {\n";
          emit_block(out, k, s.orelse, depth + 1);
        }
        out << pad << "}\n";
        break;
      case Stmt::Kind::kBarrier: out << pad << "__syncthreads();\n"; break;
      case Stmt::Kind::kVectorLoad: {
        const std::string load = (s.past_l1 ? "ft_ldcg_" : "ft_load_") + vector_ctype(s.dtype) + "(" + s.a + ", " + s.b + ")";
        // Guarded: the zero vector elsewhere (ft_pack_* of zeros, in both preludes).
        const std::string zero = s.dtype == DType::kF32 ? "ft_pack_float4(0.0f, 0.0f, 0.0f, 0.0f)"
                                                        : "ft_pack_ft_u16x8(0, 0, 0, 0, 0, 0, 0, 0)";
        out << pad << "const " << vector_ctype(s.dtype) << " " << s.name << " = "
            << (s.c.empty() ? load : "(" + s.c + ") ? " + load + " : " + zero) << ";\n";
        break;
      }
      case Stmt::Kind::kVectorStore:
        out << pad << "ft_store_" << vector_ctype(s.dtype, s.lanes) << "(" << s.name << ", " << s.a << ", " << s.b << ");\n";
        break;
      case Stmt::Kind::kWarpReduce:
        if (!s.b.empty()) out << pad << "if (" << s.b << ")\n";
        if (is_arg_reduce(s.a)) {
          out << pad << "#pragma unroll\n"
              << pad << "for (int ft_off = " << kWarpSize / 2 << "; ft_off > 0; ft_off >>= 1) {\n"
              << pad << "  const float ft_xv = __shfl_xor_sync(0xffffffffu, " << s.name << "[0], ft_off);\n"
              << pad << "  const unsigned int ft_xi = __shfl_xor_sync(0xffffffffu, " << s.c << "[0], ft_off);\n"
              << pad << "  if (ft_arg_beats(ft_xv, ft_xi, " << s.name << "[0], " << s.c << "[0], " << arg_beats_flags(s.a) << ")) {\n"
              << pad << "    " << s.name << "[0] = ft_xv;\n"
              << pad << "    " << s.c << "[0] = ft_xi;\n"
              << pad << "  }\n"
              << pad << "}\n";
          break;
        }
        out << pad << "#pragma unroll\n"
            << pad << "for (int ft_off = " << kWarpSize / 2 << "; ft_off > 0; ft_off >>= 1) " << s.name << "[0] = "
            << warp_combine(s.a, s.name + "[0]", "__shfl_xor_sync(0xffffffffu, " + s.name + "[0], ft_off)") << ";\n";
        break;
      case Stmt::Kind::kShuffle:
        out << pad << s.name << "[" << s.at[0] << "] = __shfl_xor_sync(0xffffffffu, " << s.a << ", " << s.groups << ");\n";
        break;
      case Stmt::Kind::kMma:
        if (s.dtype == DType::kI8 || s.dtype == DType::kU8) {
          out << pad << "ft_mma_m16n8k32_" << (s.dtype == DType::kI8 ? "s" : "u") << (s.b_dtype == DType::kI8 ? "s" : "u") << "(";
        } else {
          out << pad << (s.dtype == DType::kF32 ? "ft_mma_m16n8k8_tf32(" : s.dtype == DType::kBF16 ? "ft_mma_m16n8k16_bf16(" : "ft_mma_m16n8k16_f16(");
        }
        for (int i = 0; i < 4; ++i) out << reg(s.name, s.at[0] + i) << ", ";
        for (int i = 0; i < 4; ++i) out << reg(s.a, s.at[1] + i) << ", ";
        out << reg(s.b, s.at[2]) << ", " << reg(s.b, s.at[2] + 1) << ");\n";
        break;
      case Stmt::Kind::kLdmatrix:
        out << pad << "ft_ldmatrix_x" << s.matrices << (s.trans ? "_trans" : "") << "(";
        for (int i = 0; i < s.matrices; ++i) out << reg(s.name, s.at[0] + i) << ", ";
        out << s.a << ", " << s.b << ");\n";
        break;
      case Stmt::Kind::kCopyAsync:
        out << pad << "ft_cp_async" << s.copy_bytes << "(" << s.name << ", " << s.a << ", " << s.b << ", " << s.c << ", " << s.d << ");\n";
        break;
      case Stmt::Kind::kCopyAsyncCommit: out << pad << "ft_cp_async_commit();\n"; break;
      case Stmt::Kind::kCopyAsyncWait: out << pad << "ft_cp_async_wait(" << s.groups << ");\n"; break;
      case Stmt::Kind::kWgmma: {
        const std::string swizzle = s.swizzle != 0 ? ", " + std::to_string(s.swizzle) : "";
        out << pad << (s.a_registers ? "ft_wgmma_ra<" : "ft_wgmma<") << s.wgmma_n << ", " << (s.dtype == DType::kBF16 ? 1 : 0)
            << ", " << (s.trans ? 1 : 0) << ">(" << s.name << " + " << s.at[0] << ", ";
        if (s.a_registers) {
          out << s.a << " + " << s.at[1];
        } else {
          out << "ft_wgmma_desc(" << s.a << ", " << s.b << ", " << s.at[1] << "u, " << s.at[2] << "u" << swizzle << ")";
        }
        out << ", ft_wgmma_desc(" << s.c << ", " << s.d << ", " << s.at[3] << "u, " << s.at[4] << "u" << swizzle << "));\n";
        break;
      }
      case Stmt::Kind::kWgmmaSync:
        if (s.a == "fence" && !s.b.empty()) out << pad << "ft_wgmma_hold_operand<" << local_count(k, s.b) << ">(" << s.b << ");\n";
        if (s.a == "fence") out << pad << "ft_wgmma_fence<" << local_count(k, s.name) << ">(" << s.name << ");\n";
        if (s.a == "commit") out << pad << "ft_wgmma_commit();\n";
        if (s.a == "wait") out << pad << "ft_wgmma_wait(" << s.groups << ", " << s.name << ", " << local_count(k, s.name) << ");\n";
        if (s.a == "proxy") out << pad << "ft_fence_proxy_async();\n";
        break;
      case Stmt::Kind::kAtomic:
        out << pad << (s.d.empty() ? "" : "const unsigned " + s.d + " = ") << "ft_atomic_" << s.c << "(" << s.name << ", " << s.a
            << ", " << s.b << ");\n";
        break;
      case Stmt::Kind::kFence: out << pad << "__threadfence();\n"; break;
      case Stmt::Kind::kMbarrier:
        if (s.a == "init") out << pad << "ft_mbarrier_init(" << s.name << ", " << s.b << ", " << s.c << ");\n";
        if (s.a == "fence") out << pad << "ft_mbarrier_init_fence();\n";
        if (s.a == "arrive" && s.c.empty()) out << pad << "ft_mbarrier_arrive(" << s.name << ", " << s.b << ");\n";
        if (s.a == "arrive" && !s.c.empty()) out << pad << "ft_mbarrier_arrive_expect_tx(" << s.name << ", " << s.b << ", " << s.c << ");\n";
        if (s.a == "arrive_warp") out << pad << "ft_mbarrier_arrive_warp(" << s.name << ", " << s.b << ");\n";
        if (s.a == "wait") out << pad << "ft_mbarrier_wait(" << s.name << ", " << s.b << ", " << s.c << ");\n";
        break;
      case Stmt::Kind::kTensorLoad:
        out << pad << "ft_tma_load_" << tensor_coords(s).size() << "d(" << s.name << ", " << s.a << ", " << s.b
            << ", " << s.c << ", " << s.d << ", " << s.e << ");\n";
        break;
      case Stmt::Kind::kExitUnless: out << pad << "if (!(" << s.a << ")) return;\n"; break;
      case Stmt::Kind::kSetMaxNReg: out << pad << "ft_setmaxnreg_" << s.a << "<" << s.groups << ">();\n"; break;
      case Stmt::Kind::kPart:
        out << pad << "if (" << s.a << ") {\n";
        emit_block(out, k, s.uniform, depth + 1);
        emit_block(out, k, s.body, depth + 1);
        out << pad << "}\n";
        break;
      case Stmt::Kind::kUniformFor:
        if (s.unroll > 0) out << pad << "#pragma unroll " << s.unroll << "\n";
        serial_loop_head(out, pad, s);
        emit_block(out, k, s.body, depth + 1);
        out << pad << "}\n";
        break;
    }
  }
}

std::string shared_ctype(DType t) {
  if (t == DType::kI64) return "long long";
  if (t == DType::kU64) return "unsigned long long";  // mbarriers
  if (t == DType::kU32) return "unsigned int";
  return dtype_size(t) == 2 ? "unsigned short" : "float";
}

}  // namespace

std::string emit_kernel(const Kernel& k) {
  std::ostringstream out;
  // A kernel that moves its warpgroups' register budgets launches one block an SM: ptxas then fixes
  // its entry register count to the pool that the counts share (codegen/kernel_ir.h).
  out << "extern \"C\" __global__ void __launch_bounds__(" << k.threads << (sets_max_registers(k) ? ", 1" : "") << ") " << k.name
      << "(";
  for (size_t i = 0; i < k.params.size(); ++i) {
    const Param& p = k.params[i];
    out << (i ? ", " : "") << "FT_GLOBAL(" << (p.output ? "" : "const ") << storage_ctype(p.dtype) << ") " << p.name;
  }
  for (size_t i = 0; i < k.scratch.size(); ++i) {
    const Param& p = k.scratch[i];
    out << (i || !k.params.empty() ? ", " : "") << "FT_SCRATCH(" << storage_ctype(p.dtype) << ", " << p.elements;
    if (p.group_blocks > 0) out << ", " << p.first_block << ", " << p.group_blocks;  // counters: their groups of blocks
    out << ") " << p.name;
  }
  const auto extents = [](const std::vector<int64_t>& v) {
    std::string t;
    for (size_t i = 0; i < v.size(); ++i) t += (i ? "x" : "") + std::to_string(v[i]);
    return t;
  };
  for (size_t i = 0; i < k.tensor_maps.size(); ++i) {
    const TensorMap& m = k.tensor_maps[i];
    out << (i || !k.params.empty() || !k.scratch.empty() ? ", " : "") << "FT_TENSOR_MAP(" << m.source << ", " << extents(m.dims)
        << ", " << extents(m.strides) << ", " << extents(m.box) << ", " << m.swizzle << ") " << m.name;
  }
  out << ") {\n  FT_GRID_DEPENDENCY();\n  FT_SHARED_MEMORY;\n";
  for (const SharedAlloc& s : k.shared) {
    out << "  FT_SHARED(" << shared_ctype(s.dtype) << ", " << s.name << ", " << s.offset << ", " << s.elements << ");\n";
  }
  out << "  typedef " << (k.index_bits == 32 ? "int" : "long long") << " " << kIndexType << ";\n";
  out << "  const " << kIndexType << " ft_block = blockIdx.x;\n  const int ft_thread = threadIdx.x;\n";
  for (const ThreadLocal& t : k.thread_locals) out << "  " << local_ctype(t) << " " << t.name << "[" << t.count << "];\n";
  emit_block(out, k, k.uniform, 1);
  emit_block(out, k, k.body, 1);
  out << "}\n\n";
  return out.str();
}

std::string emit_cuda(const std::vector<Kernel>& kernels) {
  std::ostringstream out;
  out << "// Generated by fusetune (codegen/emit.cpp). CUDA C++ for NVRTC; on a host without a GPU, fusetune\n"
         "// builds and runs this same text with simt/prelude.h defining FT_SIMT (docs/simt.md).\n";
  out << kCudaIntrinsics << kPrelude << "\n";
  std::set<WgmmaShape> shapes;
  for (const Kernel& k : kernels) {
    const std::set<WgmmaShape> mine = wgmma_shapes(k);
    shapes.insert(mine.begin(), mine.end());
  }
  if (!shapes.empty()) {
    out << "#if !defined(FT_SIMT) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)\n#error \"this module issues wgmma: compile it for "
           "sm_90a\"\n#endif\n#ifndef FT_SIMT\n";
    for (const WgmmaShape& w : shapes) out << wgmma_specialization(w);
    out << "#endif\n\n";
  }
  for (const Kernel& k : kernels) {
    if (k.library.empty()) out << emit_kernel(k);  // a library call prints nothing: the backend runs it
  }
  return out.str();
}

}  // namespace fusetune::codegen
