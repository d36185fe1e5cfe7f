/* The interface between a kernel module compiled for host execution and the SIMT executor.
 *
 * A module is the CUDA text of a plan (codegen/emit.h) compiled by the host C++ compiler after
 * simt/prelude.h. Every memory access, barrier and warp-synchronous operation of that text calls
 * the executor through one table of function pointers, handed to the module once when it is
 * loaded (ft_simt_bind). The executor answers from the calling CUDA thread's fiber: which thread
 * and block it is, and its block's shared memory. Plain C so that both sides agree on layout
 * whatever compiled them; included by the prelude (module side) and by simt/executor.cpp. */
#ifndef FUSETUNE_SIMT_DEVICE_API_H
#define FUSETUNE_SIMT_DEVICE_API_H

#ifdef __cplusplus
extern "C" {
#endif

#define FT_SIMT_API_VERSION 8

enum { FT_SIMT_LOAD = 0, FT_SIMT_STORE = 1 };

/* A buffer a kernel addresses: a global parameter or a view of the block's shared memory.
 * Owned by the executor; `state` is the executor's bookkeeping for it. */
typedef struct ft_simt_buffer {
  unsigned char* base;
  long long bytes;
  int element_bytes;
  int shared; /* 1: a view of the block's shared memory; 0: a global parameter */
  /* 1: the executor neither race-checks nor counts the running block's accesses of the buffer, so
   * the module addresses an access inside the buffer and aligned to its size itself (ft_simt_at)
   * and calls `access` for the others alone, which memcheck reports. */
  int fast;
  void* state;
} ft_simt_buffer;

/* memcheck's test, one text for both sides (the executor's checked accesses and the module's
 * inline path, ft_simt_at): the host address of an access of `size` bytes at element `index` of
 * b, where it lies inside b and is aligned to `align` (a power of two, or any other size); else
 * null, and *outside says which test failed (1: outside b, 0: misaligned). Unsigned arithmetic
 * throughout: a negative or huge index fails the first comparison, and no product can overflow
 * (so nothing lets the compiler assume the check away). */
static inline unsigned char* ft_simt_checked(const ft_simt_buffer* b, long long index, int size, int align, int* outside) {
  const unsigned long long u = (unsigned long long)index;
  const unsigned long long byte = u * (unsigned long long)b->element_bytes;
  if (u >= (1ull << 40) || byte + (unsigned long long)size > (unsigned long long)b->bytes) {
    *outside = 1;
    return 0;
  }
  unsigned char* addr = b->base + byte;
  const unsigned long long a = (unsigned long long)align, at = (unsigned long long)addr;
  if (((a & (a - 1)) == 0 ? at & (a - 1) : at % a) != 0) { /* no division where it is a power of two */
    *outside = 0;
    return 0;
  }
  return addr;
}

/* A TMA tensor map as the executor hands it to the module (FT_TENSOR_MAP parameters; the GPU's is
 * the driver's opaque 128 bytes): which parameter's buffer it maps and its TensorMapSpec
 * (core/kernel_text.h), innermost dimension first. Built by the executor at launch. */
typedef struct ft_simt_tensor_map {
  int source; /* the parameter it maps */
  int rank;
  int swizzle; /* bytes of a swizzle span; 0: none */
  int box[5];
  long long dims[5];
  long long strides[5]; /* bytes; strides[0] is the element's size */
} ft_simt_tensor_map;

typedef struct ft_simt_api {
  int version;
  /* The host address of `size` bytes at element `index` of `b`, to be loaded or stored (`kind`;
   * a store passes the bytes it will write as `value`), after the checks and counters of one
   * access. An access outside `b` is reported and redirected to zeroed scratch memory, so
   * execution goes on. The caller is the access site: the executor takes its return address as
   * the instruction's identity. */
  void* (*access)(const ft_simt_buffer* b, long long index, int size, int kind, const void* value);
  /* __syncthreads() at `line` of the CUDA text: returns when every thread of the block has
   * arrived. */
  void (*barrier)(int line);
  /* A warp-synchronous exchange: this lane's `bytes` (at most 64); returns the 32 lanes' values,
   * lane-major, once every lane of the warp has arrived at the same operation with `mask`. With
   * `bytes` 0 it is __syncwarp(), which also orders the lanes' memory accesses for other threads
   * (the executor's vector clocks, simt/hazards.h); the other exchanges order them within the
   * warp alone. */
  const void* (*warp_exchange)(const void* mine, int bytes, unsigned mask);
  /* A view of the calling block's dynamic shared memory: [offset, offset + bytes), `name` for
   * reports; the same descriptor for every thread of the block. */
  const ft_simt_buffer* (*shared_view)(long long offset, long long bytes, int element_bytes, const char* name);
  /* cp.async of `copy_bytes` (16, or 4; codegen/kernel_ir.h): from element `src_index` of global
   * `src`, `src_bytes` of them read (0 to copy_bytes, the rest zero), into element `dst_index` of
   * shared view `dst`; both copy_bytes-aligned. The bytes are read now and land in shared memory
   * when the thread's wait_group completes the copy's group; until then any access of the
   * destination is a hazard. */
  void (*copy_async)(const ft_simt_buffer* dst, long long dst_index, const ft_simt_buffer* src, long long src_index,
                     int src_bytes, int copy_bytes);
  /* cp.async.commit_group: the thread's copies issued since its last commit form a group. */
  void (*copy_async_commit)(void);
  /* cp.async.wait_group `groups` at `line` of the CUDA text: completes the thread's oldest
   * committed groups until at most `groups` are in flight. */
  void (*copy_async_wait)(int groups, int line);
  /* wgmma.mma_async (sm_90a) by the calling thread, whose `count` accumulators are its registers at
   * `d`: returns the floats the wgmma is to accumulate into, kept by the executor (the values the
   * thread's wgmmas in flight on those registers will leave, else the registers' values), and
   * fills the registers with NaN: they hold no defined value until the wait that completes the
   * wgmma lands the result in them. */
  float* (*wgmma_issue)(float* d, int count);
  /* 16 bytes a wgmma reads at element `index` of shared view `b`: checked as a load now, then in
   * flight until the thread's wait completes the wgmma, and a store to them before that is a
   * hazard. Counted as a shared load when `counted` (the warpgroup reads each row once; the
   * emulation's warps may read a row each). Returns their host address. */
  const void* (*wgmma_read)(const ft_simt_buffer* b, long long index, int counted);
  /* wgmma.commit_group: the thread's wgmmas since its last commit form a group. */
  void (*wgmma_commit)(void);
  /* wgmma.wait_group `groups` at `line` of the CUDA text: completes the thread's oldest committed
   * groups until at most `groups` are pending (their results land, their reads end). */
  void (*wgmma_wait)(int groups, int line);
  /* mbarrier.init of the 8-byte mbarrier at element `index` of shared view `b` with `count`
   * expected arrivals: phase 0, no transaction bytes pending. Threads other than the one that
   * initialised it may use it from the next barrier interval on. */
  void (*mbarrier_init)(const ft_simt_buffer* b, long long index, unsigned count);
  /* mbarrier.arrive.expect_tx: `tx_bytes` more transaction bytes expected in the current phase,
   * then one arrival (tx_bytes 0: a plain arrive). The phase completes once every expected thread
   * has arrived and every expected byte has landed; the next phase begins. */
  void (*mbarrier_arrive)(const ft_simt_buffer* b, long long index, unsigned tx_bytes);
  /* mbarrier.try_wait.parity in a loop at `line` of the CUDA text: returns once the phase of
   * parity `parity` (the current one or the one before it) has completed. The tensor copies that
   * phase completed are then visible to the calling thread (and, after a barrier, to the block). */
  void (*mbarrier_wait)(const ft_simt_buffer* b, long long index, unsigned parity, int line);
  /* cp.async.bulk.tensor tile load: the box of tensor map `map` at `coords` (innermost first;
   * elements outside the tensor zero) into shared view `dst` from element `dst_index` (128-byte
   * aligned), laid out box-row-major and swizzled within each span by the shared address; its
   * bytes complete the transaction count of the mbarrier at element `bar_index` of shared view
   * `bar`. The global bytes are read now; the shared ones hold no defined value until a wait
   * observes the phase the copy completed. */
  void (*tensor_load)(const ft_simt_buffer* dst, long long dst_index, const ft_simt_buffer* map, const int* coords,
                      const ft_simt_buffer* bar, long long bar_index);
  /* atomicAdd (`op` 0) or atomicExch (1) of `value` on the 32-bit unsigned element `index` of global
   * buffer `b`; returns the old value. Atomics are never races with each other. With the checks,
   * one publishes the calling block's global stores (when each storing thread fenced after its
   * last store, before a barrier that precedes the atomic) and acquires those of the blocks that
   * published through the same element earlier: a load of another block's store is a hazard
   * unless the loading block acquired it and the loading thread fenced afterwards. */
  unsigned (*atomic)(const ft_simt_buffer* b, long long index, int op, unsigned value);
  /* __threadfence() of the calling thread. */
  void (*fence)(void);
  /* threadIdx.x, blockIdx.x, blockDim.x, gridDim.x of the calling thread. */
  unsigned (*thread_index)(void);
  unsigned (*block_index)(void);
  unsigned (*block_dim)(void);
  unsigned (*grid_dim)(void);
} ft_simt_api;

/* The floating-point operations a module's code executed on the calling OS thread (simt/prelude.h,
 * ft_flt): [0] adds, subtracts, multiplies and divides, [1] calls of transcendental functions.
 * Defined by the executor, in the program that loads modules (which exports it); the executor
 * zeroes them before an OS thread runs blocks and adds them to the launch's counters after. A
 * module keeps no thread-local storage of its own: LeakSanitizer's exit scan faults on the
 * thread-local block of a module that was unloaded. */
extern __thread unsigned long long ft_simt_ops[2];

/* One CUDA thread of kernel NAME: the module exports `void ft_simt_entry_NAME(void* const* args)`
 * with args[i] the `const ft_simt_buffer*` of parameter i; and `void ft_simt_bind(const
 * ft_simt_api*)`, called once before any entry. */
typedef void (*ft_simt_entry)(void* const* args);
typedef void (*ft_simt_bind_fn)(const ft_simt_api* api);

#ifdef __cplusplus
}
#endif

#endif
