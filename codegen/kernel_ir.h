// Kernel IR: an explicit kernel program that the emitter prints as CUDA C++ (codegen/emit.h), the
// text NVRTC compiles and the host's SIMT executor runs (simt/executor.h).
//
// A Kernel has typed buffer parameters, a launch shape (a 1-D grid of blocks, a 1-D block of
// threads), shared-memory allocations with byte offsets, and a body of statements. Statements are
// structured: `for` loops are either serial or bound to the block's threads (iteration i runs on
// thread i % threads, strided), barriers appear only between top-level statements, and values
// cross a barrier only through shared memory or global buffers, never through locals; values
// that must persist per thread across barriers are declared as Kernel::thread_locals (the
// verifier, codegen/verify_ir.h, checks these placement rules on every generated kernel).
// Warp reductions (`warp_reduce`) follow the same rule: a warp reduce combines, with sum or max,
// the one-float thread-local NAME of the 32 lanes of each warp by a butterfly of __shfl_xor_sync
// (at each step lane l takes op(v[l], v[l ^ offset]) for offsets 16, 8, 4, 2, 1), so every lane
// ends with the same warp total. It appears only where a barrier may (top level of the body, of a
// part or of a uniform loop), every thread of the block reaches it (the block is whole warps), and
// values cross it only through thread-locals, shared or global memory.
// Vector loads (`vector_load`) read 16 consecutive bytes of a buffer in one access into a local:
// four floats as a float4 (components .x .y .z .w), or eight 16-bit values as an ft_u16x8
// (elements .v[0] .. .v[7], raw bits); vector stores (`vector_store`) write one; the lowering
// guarantees the address is 16-byte aligned (the host executor's memcheck reports a misaligned
// one, which would fault on the GPU).
// Matrix fragments (tensor cores, sm_80+): `mma` is one warp-level m16n8k16 multiply-accumulate,
// D(16x8, f32) += A(16x16, row-major) * B(16x8, column-major), A and B float16 or bfloat16, and
// `ldmatrix` loads 8x8 tiles of 16-bit values from shared memory into fragments. Both are
// warp-synchronous and placed like warp reductions (every lane of every warp of the block reaches
// them; values cross them only through thread-locals, shared or global memory); the host
// executor's expansion of the intrinsic (simt/prelude.h) exchanges the 32 lanes' fragments and
// computes each lane's share following exactly the layout below (NVIDIA PTX ISA, "Matrix
// Fragments for mma.m16n8k16 with floating point type" and "ldmatrix"). Fragments are thread-locals: A and B
// in 32-bit registers (ThreadLocal dtype kU32) holding two 16-bit values each, the lower-indexed
// element in the low half; the accumulator in floats (kF32). With lane l, g = l / 4, t = l % 4:
//   A (4 registers, elements a0..a7, register i/2, half i%2):
//     a_i = A[g + 8 * ((i / 2) % 2)][2t + i % 2 + 8 * (i / 4)]
//     (r0 = A[g][2t..2t+1], r1 = A[g+8][2t..2t+1], r2 = A[g][2t+8..2t+9], r3 = A[g+8][2t+8..2t+9])
//   B (2 registers, elements b0..b3): b_i = B[k = 2t + i % 2 + 8 * (i / 2)][n = g]
//   C/D (4 floats c0..c3): c_i = D[g + 8 * (i / 2)][2t + i % 2]
// The products of 16-bit values are exact in float; the host sums the 16 of each element in k
// order in float, the hardware in its own order, so the two agree up to float rounding.
// With dtype kF32 `mma` is m16n8k8 on TF32 values (the float32 precision policy's): A 16x8 and B
// 8x8 in one 32-bit register per element, each a float rounded by ft_tf32 (cvt.rna.tf32.f32):
//   A (4 registers): a0 = A[g][t], a1 = A[g+8][t], a2 = A[g][t+4], a3 = A[g+8][t+4]
//   B (2 registers): b0 = B[k = t][n = g], b1 = B[k = t+4][n = g];  C/D as above
// (PTX ISA, "Matrix Fragments for mma.m16n8k8"); fragments are loaded by plain shared reads.
// With dtype kI8 or kU8 (A's; Stmt::b_dtype B's) `mma` is m16n8k32 on 8-bit integers with int32
// accumulators (the dp4a stage's tensor-core form): A 16x32 and B 32x8 in registers of four bytes,
// the lower-indexed element in the low byte, the accumulator in 32-bit registers (kU32: int32
// bits, wrapping):
//   A (4 registers): r_i byte j = A[g + 8 * (i % 2)][4t + j + 16 * (i / 2)]
//   B (2 registers): r_i byte j = B[k = 4t + j + 16 i][n = g];  C/D (4 registers) as above
// (PTX ISA, "Matrix Fragments for mma.m16n8k32"); fragments are loaded by plain 32-bit shared reads.
//   ldmatrix .xN (N = 1, 2, 4 matrices), row address from lane: matrix j's 8 rows come from lanes
//   8j .. 8j + 7, each the element offset (into a 16-bit shared allocation) of 8 consecutive
//   values, 16-byte aligned. Register j of lane l receives matrix j's row g, elements 2t and 2t+1;
//   with .trans, elements [2t][g] and [2t + 1][g] (the matrix transposed). So .x4 over the
//   quadrants (rows 0-7 / 8-15 x columns 0-7 / 8-15, in the order top-left, bottom-left,
//   top-right, bottom-right) of a row-major 16x16 A tile yields r0..r3 above, and .x2.trans over
//   the two 8-row halves of a row-major (k x n) 16x8 B tile yields B's r0, r1. On the host every
//   used row is a 16-byte load by the lane giving its address, under the executor's checks.
// Asynchronous copies (sm_80+, cp.async): `copy_async` starts a 16-byte copy from a global buffer
// into a shared allocation of the same element type (16-bit, or float32) (cp.async.cg.shared.global, 16 bytes, the first `bytes` read
// from global, the rest zero-filled: 0 reads nothing); both addresses 16-byte aligned (every
// parameter's base is: buffers are cudaMalloc'd or placed at 256-byte offsets). A 4-byte copy
// (cp.async.ca.shared.global, 4 bytes: one float, 4 or 0 of them read) moves an element a gather
// reads (a convolution's patch), both addresses 4-byte aligned. The copy belongs
// to the issuing thread: `copy_async_commit` closes the thread's copies issued since its last
// commit into a group; `copy_async_wait` (cp.async.wait_group N) returns once at most N of the
// thread's most recent groups are still in flight. Until then the destination holds no defined
// value and no thread may touch it; once waited for, the data is the issuing thread's store, seen
// by other threads after a barrier. The host executor lands a copy's bytes at its wait and
// reports any access of a destination still in flight (simt/hazards.h).
// Warpgroup matrix multiply-accumulate (sm_90a, wgmma): `wgmma` is one wgmma.mma_async
// m64nNk16 of a warpgroup (the 4 warps 4w .. 4w + 3, 128 threads), D(64xN, f32) += A(64x16) *
// B(16xN), A and B float16 or bfloat16 read from shared memory through matrix descriptors (PTX ISA,
// "Matrix Descriptor Format"), without swizzling: each operand is made of core matrices of 8 rows
// of 16 bytes (8 elements), stored as 128 contiguous bytes; A is K-major (a core matrix holds rows
// m .. m + 7 at columns k .. k + 7, each row 16 bytes), B is N-major (imm-trans-b 1: a core matrix
// holds rows k .. k + 7, each row the 8 columns n .. n + 7). The leading byte offset (LBO) is the
// distance between core matrices adjacent in K, the stride byte offset (SBO) between core
// matrices adjacent in M or N. The statement names A's shared allocation and the element offset
// of A[0][0] (the core matrix of its first rows and columns), the same for B, and each operand's
// LBO and SBO in bytes. The accumulator is a float thread-local of N / 2 elements from `at`: with
// lane l of warp w (w = warp % 4 in the warpgroup), g = l / 4, t = l % 4, element 4j + i holds
// D[16w + g + 8 (i / 2)][8j + 2t + i % 2] (each 8 columns laid out as mma.m16n8's C). The hardware
// reads the operands asynchronously: `wgmma_fence` (wgmma.fence) orders the thread's earlier
// accesses of the accumulators before the next wgmma, `wgmma_commit` closes the wgmmas issued
// since the last commit into a group, `wgmma_wait` N (wgmma.wait_group) returns once at most N
// groups are pending, and only then may the accumulators be read or the operands' shared memory
// be written again. Shared memory the threads wrote (stores, landed cp.async) is visible to the
// wgmma's asynchronous proxy after a `proxy_fence` (fence.proxy.async.shared::cta) by the writing
// thread and a barrier. wgmma, its fence, commit and wait are warpgroup-collective (the proxy
// fence is per thread), and all five are placed like barriers; a kernel with them has whole
// warpgroups. The host executor (simt/prelude.h) computes each wgmma when it is
// issued: every lane reads its share of the operands' core-matrix rows (16-byte reads under the
// executor's checks, decoded from the descriptor's bits as the ISA defines them), the warp
// exchanges them and each lane sums its accumulator elements into values the executor keeps;
// the registers read NaN until the wait lands those values, and a store to a row a wgmma reads
// before its wait is a hazard the executor reports (simt/hazards.h), so a missing wait shows;
// wgmma.fence and the proxy fence order nothing the host's threads and barriers do not.
// Tensor copies (TMA, sm_90+): `tensor_load` copies the box of a tensor map (Kernel::tensor_maps)
// at block-chosen coordinates into a shared allocation of the source's element type (128-byte
// aligned; under a swizzle its 16-byte units permuted by the shared address, as wgmma descriptors
// of that swizzle read them), zero outside the tensor, and completes its bytes on an mbarrier: an
// 8-byte object in a kU64 shared allocation that one thread initialises (`mbarrier_init` with the
// arrivals a phase expects, then `mbarrier_init_fence` and a barrier before any other thread uses
// it). A phase completes once its expected arrivals (`mbarrier_arrive`, with the transaction bytes
// the phase's copies will complete) have come and those bytes have landed; `mbarrier_wait`
// returns once the phase of the given parity has completed, and the copies that phase completed
// are then visible to the waiting thread (to others after a barrier). Until a wait observes it,
// a copy's destination holds no defined value; the host executor lands the bytes at that wait and
// reports an access by a thread nothing orders after it (simt/hazards.h).
// Warp specialization (sm_90a): `roles` splits the block at a warpgroup boundary, threads below
// `role_threads` (a multiple of 128) taking its body and the rest its else-branch, so that each
// side is warpgroup-uniform: warp- and warpgroup-collective statements (mma, wgmma and its
// fence, commit and wait, warp reductions and shuffles, a warp's mbarrier arrival) and uniform
// loops may appear inside, block-wide ones (barriers, parts, exits) and thread loops (whose
// iterations bind to the whole block's threads) may not; the sides meet again only through
// mbarriers (a producer warpgroup's tensor copies, the consumers' releases of their slots).
// `set_max_registers` (setmaxnreg.inc/.dec.sync.aligned) is the first statement of a side: every
// warp of its warpgroups moves its per-thread register budget to `count` (24 to 256, a multiple
// of 8), taken from or given back to the block's pool, which the launch sized at the entry count
// ptxas fixes for a kernel launched at its thread count with one block an SM
// (`__launch_bounds__(threads, 1)`, which emit prints for a kernel holding one). An .inc blocks
// until the pool has the registers, so the counts must fit it (planner/tiling.h's
// warp_specialized_registers). The host executor checks that the warp's lanes meet there and does
// nothing else: registers are no resource on the host.
// Blocks that cooperate (split-K: several blocks sum partial products of one tile): a kernel may
// declare scratch buffers (Kernel::scratch), global memory the backend allocates zeroed with the
// module and binds after the parameters; every launch leaves them zero again. A counter buffer
// (Param::group_blocks) holds one 32-bit counter per cooperating group: its groups are
// consecutive blocks, group_blocks a group from first_block on (a sampled launch on the host takes
// whole groups); a kernel's counter buffers cover disjoint ranges of its grid (a packed kernel's
// split-K parts, each its own counters and partial products).
// `atomic` is one atomicAdd or atomicExch on a 32-bit unsigned element of a global buffer (the
// old value into a new local, or discarded); `fence` is __threadfence() (membar.gl in PTX, the ISA's fence.sc.gpu:
// the thread's earlier global accesses are ordered before its later ones for every other block);
// `exit_unless` (a block-uniform condition) ends the block's threads when it is false. A block
// publishes its global stores to another block by: each storing thread's fence, a barrier, one
// thread's atomic on a counter; the other block reads them after its own atomic on that counter
// (later in the counter's order), a barrier, and a fence by each reading thread. The host
// executor reports a read of another block's store that lacks any link of that chain.
// Packed kernels (several groups in one launch) are a sequence of `part` statements, each taken by
// a range of blocks; barriers inside a part are block-uniform.
// Scalar expressions are C expressions over the kernel's variables and the helpers of the common
// prelude (emit_common.h); they are valid in both CUDA and C++.
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"

namespace fusetune::codegen {

// The version of the code generator: part of every tuning record's key, bumped whenever the code
// generated for the same group and candidate changes.
inline constexpr int kCodegenVersion = 46;

// Threads per warp: warp reductions combine this many lanes; blocks are whole warps.
inline constexpr int kWarpSize = 32;

// The C type of index arithmetic in generated code: lets, loop variables and the block index are
// declared `ft_i`, which each kernel defines as int when its index arithmetic is proven to fit 32
// bits (Kernel::index_bits, codegen/index_width.h) and as long long otherwise.
inline constexpr const char* kIndexType = "ft_i";

struct Param {
  std::string name;
  DType dtype = DType::kF32;
  int64_t elements = 0;
  bool output = false;
  // A scratch buffer of counters (see the header comment: cooperating blocks): one uint32 counter
  // for each group of `group_blocks` consecutive blocks from `first_block` on (elements groups).
  int64_t first_block = 0;
  int64_t group_blocks = 0;  // 0: not a counter buffer
};

struct SharedAlloc {
  std::string name;
  DType dtype = DType::kF32;  // computed values are kept as float (or int64 for integer dtypes), a resident A in its 16-bit type; kU32: 32-bit words
  int64_t elements = 0;
  int64_t offset = 0;  // bytes from the start of the block's shared memory
};

// Per-thread storage that persists across barriers (register-blocked accumulators, matrix
// fragments): an array of `count` floats (dtype kF32) or 32-bit registers (kU32: pairs of 16-bit
// values, or the dp4a form's int32 accumulators) per thread: a local array of the kernel, in registers on the GPU and on each CUDA
// thread's own fiber stack on the host.
struct ThreadLocal {
  std::string name;
  int64_t count = 0;
  DType dtype = DType::kF32;
};

struct Stmt;
using Block = std::vector<Stmt>;

struct Stmt {
  enum class Kind {
    kComment,   // text
    kLet,       // ctype name = a;
    kAssign,    // name = a;
    kStore,     // name[a] = b;  (global buffer or shared allocation)
    kFor,       // for (ft_i name = a; name < b; ...) body   (binding: serial or threads)
    kIf,        // if (a) body else orelse
    kBarrier,   // block-wide barrier
    kPart,      // if (a) { uniform; body }: a part of a packed kernel, chosen per block
    kUniformFor,  // for (ft_i name = a; name < b; ++name) body: block-uniform, barriers allowed inside
    kWarpReduce,  // name[0] = the op ("sum" or "max", in a) of name[0] over the lanes of the warp,
                  // if b (a warp-uniform condition; empty: always); op "argmax" or "argmin" (a "_last"
                  // suffix: select_last_index) picks a lane's (name[0], c[0]) pair, c its index
    kVectorLoad,  // name = a[b ..]: one aligned 16-byte load from buffer a at index b (dtype: its elements);
                  // with c (a guard), only where c holds, else zeros; with `past_l1`, read from L2 (__ldcg)
    kVectorStore,  // name[a ..] = b: one aligned store of vector local b into buffer name (16 bytes; a pair: 4 or 8)
    kMma,         // name[at0..] += a[at1..] * b[at2..]: warp-level m16n8k16 on fragments (dtype f16 or bf16; f32: m16n8k8
                  // tf32; i8/u8 with b_dtype: m16n8k32)
    kLdmatrix,    // name[at0..] = ldmatrix.x<matrices>[.trans] of shared allocation a, this lane's row at b
    kCopyAsync,   // name[a .. a + copy_bytes) <- b[c ..]: cp.async of copy_bytes (16 or 4), the first d read, the rest zero
    kCopyAsyncCommit,  // cp.async.commit_group
    kCopyAsyncWait,    // cp.async.wait_group `groups`
    kWgmma,       // name[at0..] += a[b..] * c[d..]: wgmma m64n<wgmma_n>k16 (at1..at4: A's LBO, SBO, B's LBO, SBO in bytes;
                  // with a_registers, at1: A's first register in thread-local a, at2 unused)
    kWgmmaSync,   // a: "fence" (wgmma.fence; name: the accumulators, b: A's registers or ""), "commit", "wait" (`groups`; name), "proxy"
    kAtomic,      // [unsigned d =] atomic c ("add" or "exch") of b on name[a] (a 32-bit unsigned global element)
    kFence,       // __threadfence()
    kExitUnless,  // if (!(a)) return;  (block-uniform; placed like a barrier)
    kShuffle,     // name[at0] = a (a float expression) of the lane `lane ^ groups` of the warp (placed like a warp reduction)
    kMbarrier,    // a: "init" (c: expected arrivals), "fence" (fence.mbarrier_init), "arrive" (c: transaction bytes expected, "":
                  // none), "arrive_warp" (the warp's lanes meet, lane 0 arrives) or "wait" (c: the parity) on the
                  // mbarrier at element b of 64-bit shared allocation name
    kTensorLoad,  // name[a ..] <- tensor map b's box at coordinates c ("c0, c1[, c2]", innermost first), completing on the
                  // mbarrier at element e of shared allocation d
    kSetMaxNReg,  // setmaxnreg a ("inc" or "dec") to `groups` registers a thread (the warpgroup's; see the header comment)
  };
  Kind kind = Kind::kComment;
  std::string name;
  std::string ctype;  // for kLet: kIndexType (index arithmetic), or a C type: "long long" (64-bit data), "float", "int"
  std::string a, b;
  std::string c, d;  // kCopyAsync: the global index and the bytes read; kVectorLoad: c, its guard ("": none)
  std::string e;     // kTensorLoad: the mbarrier's element
  bool threads = false;  // kFor: distribute iterations over the block's threads
  Block body;
  Block orelse;
  Block uniform;  // kPart: block-uniform statements run before the part's body
  std::vector<int64_t> at;  // kMma: first elements of D, A, B in their thread-locals; kLdmatrix: of the destination
  DType dtype = DType::kUndefined;  // kMma: the type of A and B (kF16 or kBF16); kVectorLoad/Store: the elements'
  int unroll = 0;      // kFor (serial), kUniformFor: iterations the compiler may unroll at most (#pragma unroll N); 0: its choice
  int matrices = 0;    // kLdmatrix: 8x8 matrices loaded (1, 2 or 4)
  bool trans = false;  // kLdmatrix: transposed; kWgmma: B N-major
  int groups = 0;      // kCopyAsyncWait: groups the thread may leave in flight; kShuffle: the lane mask xor-ed
  int copy_bytes = 16;  // kCopyAsync: the bytes it lands (16, or 4: one float)
  int lanes = 0;       // kVectorStore: elements stored (2: a pair; 0: 16 bytes' worth)
  int wgmma_n = 0;     // kWgmma: N (8 to 256, a multiple of 8)
  int swizzle = 0;     // kWgmma: the shared operands' swizzle span in bytes (128, 64, 32; 0: core matrices unswizzled)
  bool a_registers = false;  // kWgmma: A from 4 32-bit registers of thread-local `a` from at[1] (else shared)
  bool past_l1 = false;  // kVectorLoad: bypasses L1 (ld.global.cg), for what other blocks stored in this launch
  DType b_dtype = DType::kUndefined;  // kMma of 8-bit integers: B's type (kI8 or kU8; dtype is A's)
  int role_threads = 0;  // kIf: > 0, the warpgroup roles `ft_thread < role_threads` (see `roles`)
};

// A comment line; the text goes through inert_comment (core/inert_text.h): it may echo model text.
Stmt comment(std::string text);
Stmt let(std::string ctype, std::string name, std::string value);
Stmt assign(std::string name, std::string value);
Stmt store(std::string buffer, std::string index, std::string value);
// `unroll` > 0 bounds the compiler's unrolling (a reduction loop fully unrolled batches all its
// loads in registers; ptxas then spills at the register count it aims for).
Stmt serial_for(std::string var, std::string lo, std::string hi, Block body, int unroll = 0);
Stmt thread_for(std::string var, std::string lo, std::string hi, Block body);
Stmt if_then(std::string cond, Block body, Block orelse = {});
Stmt barrier();
// A block-uniform branch of a packed kernel: `cond` depends only on the block index; `uniform`
// holds the part's block-uniform statements, `body` its stages (barriers allowed inside).
Stmt part(std::string cond, Block uniform, Block body);
// A serial loop every thread of the block runs in step (bounds depend only on the block), so its
// body may hold barriers: the reduction-step loop of a staged contraction. `unroll` as serial_for's
// (flash attention unrolls its loop over the batches of rows a warp owns, so that the rows'
// statistics, thread-locals indexed by the batch, stay in registers).
Stmt uniform_for(std::string var, std::string lo, std::string hi, Block body, int unroll = 0);
// A branch on the block-uniform condition `cond` whose body may hold barriers and warp- or
// warpgroup-collective statements: a uniform loop over `var` of one trip or none, which every pass
// that reads uniform loops reads as it is.
Stmt uniform_if(std::string var, const std::string& cond, Block body);
// The block's warpgroups in two roles (warp specialization; see the header comment): threads below
// `threads` (a positive multiple of 128) run `first`, the others `rest`; a kIf on
// `ft_thread < threads` with role_threads set.
Stmt roles(int threads, Block first, Block rest);
// setmaxnreg.inc (`inc`) or .dec to `count` registers a thread, the first statement of a role.
Stmt set_max_registers(bool inc, int count);
// A warp reduction of the one-float thread-local `local` with `op` "sum" or "max" (NaN-propagating,
// as ft_fmaxn); placed like a barrier (see the header comment). A non-empty `guard` skips the
// reduction in warps where it is false; it must have one value for all lanes of a warp (block-
// uniform values and the thread index divided by the warp size): a guard that splits a warp leaves
// lanes missing, which the host executor's synccheck reports.
Stmt warp_reduce(std::string local, std::string op, std::string guard = "");
// A warp reduction of ArgMax's or ArgMin's pairs (`op` "argmax", "argmin", "argmax_last" or
// "argmin_last"): the one-float thread-local `local` holds a lane's extreme and the one-u32
// thread-local `index` its index (0xffffffff: none yet); every lane ends with the pair that
// ft_arg_beats (codegen/emit_common.h) orders first, as the reference's scan picks it. Placed
// like warp_reduce.
Stmt warp_arg_reduce(std::string local, std::string index, std::string op, std::string guard = "");
// Whether op (a warp reduction's) is ArgMax's or ArgMin's, and ft_arg_beats' two flags for it.
bool is_arg_reduce(const std::string& op);
std::string arg_beats_flags(const std::string& op);
// Element `at` of the float thread-local `local` = the float expression `value` as the lane
// `lane ^ mask` of the warp computes it (__shfl_xor_sync over the whole warp); placed like a warp
// reduction, every lane reaching it.
Stmt shuffle_xor(std::string local, int64_t at, std::string value, int mask);
// The lanes of each quad (four consecutive lanes; `t` the lane's place in its quad) exchange the 4
// slots of 2 floats each of the 8-float thread-local `q` (slot s, element e at q[2s + e]) through
// the 2-float thread-local `sent`, so that slot s of lane t ends up holding slot t of lane s: two
// butterflies (lane masks 1 and 2, shuffle_xor's), placed like them. An mma C fragment's quad
// holds each row's 8 columns of a unit a pair a lane: transposed, a lane holds 8 consecutive
// columns, one 16-byte store of 16-bit values.
Block transpose_quad(const std::string& q, const std::string& sent, const std::string& t);
// `local` = buffer[index ..], one 16-byte load of `dtype` elements (kF32: a float4 of 4; a 16-bit
// type: an ft_u16x8 of 8); buffer + index must be 16-byte aligned. With a `guard` (an input
// parameter's load only, verify_ir checks), the load happens where the guard holds and the local
// is zero elsewhere: a predicated load with no branch around it, so that a thread's guarded loads
// can all be in flight before the first is used (the GEMV form's batch of B's rows).
Stmt vector_load(std::string local, std::string buffer, std::string index, DType dtype = DType::kF32, std::string guard = "");
// vector_load of float32 values other blocks of the launch stored (split-K's partial products,
// published as the header comment says): read past L1, which is not coherent across SMs, as
// ft_ldcg reads one value; unguarded.
Stmt vector_load_l2(std::string local, std::string buffer, std::string index);
// buffer[index ..] = the vector `local` (as vector_load's), one 16-byte store; buffer + index must
// be 16-byte aligned (a staged operand slice: four scalar stores of a quad by 32 lanes are four
// requests with 4-way bank conflicts, one vector store is one request of four wavefronts).
// With `lanes` 2: a pair of elements in one 8-byte (float2) or 4-byte (ft_u16x2) store, aligned to
// its size (a register epilogue's two adjacent columns of an mma fragment).
Stmt vector_store(std::string buffer, std::string index, std::string local, DType dtype = DType::kF32, int lanes = 0);
// The C type of a vector local of `dtype` elements (float4 or ft_u16x8; with `lanes` 2, float2 or
// ft_u16x2), and its elements.
std::string vector_ctype(DType dtype, int lanes = 0);
int vector_lanes(DType dtype);
// The elements a vector statement moves.
int stmt_lanes(const Stmt& s);
// Element i of vector local `local` of `dtype` elements, as stored (local.x .. local.w, or
// local.v[i]: raw 16-bit bits).
std::string vector_element(const std::string& local, DType dtype, int i);
// D(16x8 f32) += A(16x16) * B(16x8) with A and B of `dtype` (kF16 or kBF16; kF32: m16n8k8 on TF32
// values, A 16x8 and B 8x8; kI8 or kU8: m16n8k32 of A of that type and B of `b_dtype`, kI8 or kU8,
// into int32): fragments in thread-locals `d` (4 floats from d_at; 4 32-bit registers for
// integers), `a` (4 registers from a_at) and `b` (2 registers from b_at), laid out as the header
// comment says; placed like a barrier.
Stmt mma(std::string d, int64_t d_at, std::string a, int64_t a_at, std::string b, int64_t b_at, DType dtype,
         DType b_dtype = DType::kUndefined);
// `matrices` 8x8 tiles of 16-bit shared allocation `shared` into registers [at, at + matrices) of
// thread-local `local`; `row` is this lane's row address (an element offset, an expression of
// ft_thread and block-uniform values); placed like a barrier.
Stmt ldmatrix(std::string local, int64_t at, int matrices, bool trans, std::string shared, std::string row);
// shared[shared_index .. + copy_bytes) <- buffer[index ..]: one cp.async of `copy_bytes` (16, or 4
// for one float) into shared allocation `shared` (16-bit or float32, the buffer's element type),
// `bytes` (an expression, 0 to copy_bytes) read from global buffer `buffer` and the rest
// zero-filled; both addresses `copy_bytes`-aligned (index 0 when nothing is read).
Stmt copy_async(std::string shared, std::string shared_index, std::string buffer, std::string index, std::string bytes,
                int copy_bytes = 16);
Stmt copy_async_commit();
// Waits until at most `groups` of this thread's committed copy groups are in flight.
Stmt copy_async_wait(int groups);
// D(64 x n, f32) += A(64x16) * B(16 x n), one wgmma.mma_async of the warpgroup (see the header
// comment): accumulators from element d_at of float thread-local `d`; A from element a_at of
// 16-bit shared allocation `a` (K-major core matrices, LBO/SBO `a_lbo`/`a_sbo` bytes), B from
// b_at of `b` (N-major unless `b_k_major`, `b_lbo`/`b_sbo`: for either major LBO between core
// matrices adjacent along K, SBO along N); both of `dtype` (kF16 or kBF16).
Stmt wgmma(std::string d, int64_t d_at, int n, std::string a, std::string a_at, int64_t a_lbo, int64_t a_sbo,
           std::string b, std::string b_at, int64_t b_lbo, int64_t b_sbo, DType dtype, bool b_k_major = false, int swizzle = 0);
// The same with A from registers: 4 32-bit registers from element a_at of thread-local `a`, each
// warp of the warpgroup holding its 16 rows of A in mma.m16n8k16's A fragment layout (the PTX
// ISA's register fragment of wgmma's A); the registers must not change until the wait.
Stmt wgmma_registers(std::string d, int64_t d_at, int n, std::string a, int64_t a_at, std::string b, std::string b_at,
                     int64_t b_lbo, int64_t b_sbo, DType dtype, bool b_k_major = false);
// The wgmma forms a kernel issues: N, bfloat16 (else float16), A from registers, B N-major.
struct WgmmaShape {
  int n = 0;
  bool bf16 = false, a_registers = false, b_n_major = true;
  auto operator<=>(const WgmmaShape&) const = default;
};
// wgmma.fence before the wgmmas that accumulate into thread-local `d` (and, where not empty, read
// A from 32-bit thread-local `operand`: both held there, so that no write to them moves past the
// fence); commit_group; wait_group `groups` (after which `d` may be read);
// fence.proxy.async.shared::cta.
Stmt wgmma_fence(std::string d, std::string operand = "");
Stmt wgmma_commit();
Stmt wgmma_wait(std::string d, int groups);
Stmt proxy_fence();
// mbarriers and tensor copies (TMA; sm_90+): see the header comment. `bar` is a 64-bit (kU64)
// shared allocation, `index` an element of it.
Stmt mbarrier_init(std::string bar, std::string index, int64_t count);
Stmt mbarrier_init_fence();
Stmt mbarrier_arrive(std::string bar, std::string index, std::string tx_bytes = "");
// The warp's one arrival: its lanes meet (__syncwarp), then lane 0 arrives; every lane of the
// warp reaches it (placed like a warp reduction), and the mbarrier counts warps.
Stmt mbarrier_arrive_warp(std::string bar, std::string index);
Stmt mbarrier_wait(std::string bar, std::string index, std::string parity);
Stmt tensor_load(std::string dst, std::string dst_index, std::string map, const std::vector<std::string>& coords, std::string bar,
                 std::string bar_index);
// A tensor_load's coordinates (its c, split at its top-level commas).
std::vector<std::string> tensor_coords(const Stmt& s);
// atomicAdd (`op` "add") or atomicExch ("exch") of `value` on element `index` of 32-bit unsigned
// global buffer `buffer` (a scratch buffer); the old value into new local `old` (unsigned) unless
// empty.
Stmt atomic(std::string buffer, std::string index, std::string value, std::string op, std::string old = "");
Stmt fence();
// Ends every thread of the block unless `cond` (block-uniform: the block index, uniform lets and
// shared values read after a barrier); placed like a barrier.
Stmt exit_unless(std::string cond);
// The expression a warp reduction with `op` combines its own value x and its partner's y with.
std::string warp_combine(const std::string& op, const std::string& x, const std::string& y);

// A TMA tensor map (core/kernel_text.h's TensorMapSpec over parameter `source`: dimensions
// innermost first, byte strides of the outer ones, the box a copy moves, the swizzle span in
// bytes), a kernel parameter after the scratch buffers that the backend encodes for each launch
// from the source's address (the host executor builds its own from the same spec).
struct TensorMap {
  std::string name;
  std::string source;
  std::vector<int64_t> dims, strides, box;
  int swizzle = 0;
};

struct Kernel {
  std::string name;
  std::vector<Param> params;
  int64_t grid = 1;   // blocks
  int threads = 32;   // per block
  std::vector<SharedAlloc> shared;
  std::vector<ThreadLocal> thread_locals;
  int64_t shared_bytes = 0;
  // The width of ft_i, the index type: 32 once codegen/index_width.h has proven that every value
  // of the kernel's index arithmetic fits an int, else 64.
  int index_bits = 64;
  // Block-uniform statements (lets depending only on `ft_block`, the block index), run once per
  // block before the body; their variables are visible everywhere in the body.
  Block uniform;
  Block body;  // reads the thread index as `ft_thread`
  // Zeroed global buffers bound after the parameters, allocated with the module by the backend
  // and left zero by every launch (see the header comment: cooperating blocks); `output` set.
  std::vector<Param> scratch;
  std::vector<TensorMap> tensor_maps;
  // Set (planner::LibraryCall JSON): not generated code but a vendor-library call with these
  // parameters; the body is empty, the emitters print nothing for it, and backends run the call
  // (cuBLASLt on the GPU, an equivalent host GEMM on the host).
  std::string library;

  // Adds a shared allocation at the next `align`-byte aligned offset (a power of two from 16);
  // returns its name.
  std::string add_shared(const std::string& name, DType dtype, int64_t elements, int64_t align = 16);
  // A float thread-local of `count` elements, declared once: a stage that declares `local` again
  // gets the one already declared.
  void declare_local(const std::string& local, int64_t count);
};

// The identifiers a scalar expression names (a number and its suffix, 1LL or 0.5f, name nothing).
std::set<std::string> expression_names(const std::string& text);
// A statement's own line in the readable dump (without its nested blocks).
std::string line_text(const Stmt& s);
// A readable dump of the IR (tests compare it; `fusetune compile --dump-after generate` prints it).
std::string to_text(const Kernel& k);
// Whether the kernel moves its warpgroups' register budgets (set_max_registers): it launches with
// one block an SM, its entry register count fixed for that (emit prints __launch_bounds__(threads, 1)).
bool sets_max_registers(const Kernel& k);
// The (N, bfloat16) shapes of the wgmmas the kernel issues; a kernel with any compiles for sm_90a
// only (emit_cuda specialises ft_wgmma for each).
std::set<WgmmaShape> wgmma_shapes(const Kernel& k);

}  // namespace fusetune::codegen
