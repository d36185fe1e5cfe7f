// Tiling: tile candidates for one fusion group, ranked by a memory-traffic cost model.
//
// Takes a canonical graph, a group of it and a device. The group's iteration space is its root
// output (the exported value computed last); a candidate fixes the root's tile extents, the
// reduction step of a contraction, the threads per block and the vector width. evaluate_tile
// propagates the root tile backwards through the group's tensor expressions (planner/tensor_expr)
// to the region of every internal value and external input, and derives:
//   - traffic L2 -> SM: per tile, each external input's region rounded up to 32-byte sectors along
//     its contiguous runs (the innermost axis, and the axes outside it while those inside are
//     whole; the coalescing penalty), times the number of tiles, plus outputs; an input read at
//     disjoint regions whose hull is larger than both (a packed projection's Q, K and V slices)
//     is charged each region apart, overlapping ones their hull;
//     a Gather's data input counts at most as many rows along the gathered axis as the tile reads
//     indices (its region spans the axis: the rows are picked at run time);
//   - traffic DRAM: an input that fits in half the L2 is read from DRAM once; a larger one once
//     per wave of tiles running at once (a block an SM) for each distinct region of it the wave's
//     tiles read, when those fit in half the L2, else as often as the tiles read it. Blocks take
//     tiles in the candidate's tile order (`order`: the root's axes from the fastest-varying);
//     tile_candidates gives each candidate the order that reads least from DRAM (the default,
//     the last axis fastest, on ties): attention's query tiles before its heads, so that the
//     tiles of a wave share their head's keys and values;
//   - shared memory: per-step operand regions of contractions (the SIMT MatMul's ring of 3 of
//     them, simt_staging; the tensor-core form's ring, mma_staging), plus the rows a
//     row reduction keeps on chip; registers from the accumulators per thread; a Conv as codegen
//     stages it: with a step, an implicit GEMM (weight slice and im2col patches per step, or at
//     vector width 4 a ring of 3 of them, conv_staging) or, for depthwise, the tile's input
//     window; without one, two loads per multiply-add;
//   - time: the slowest of DRAM, L2 and issue (arithmetic plus the loads that stage contraction
//     operands, one per element or one per float4 quad at vector width 4 where codegen can use
//     quads; with `mma`, a contraction's arithmetic, padded to m16n8 and whole reduction steps, at the rate mma.sync
//     attains, Device::mma_sync_fp16_tflops (on Hopper two thirds of the peak only wgmma reaches;
//     with `wgmma`, padded to m64nN, at the tensor peak Device::fp16_tensor_tflops), each at the
//     share of it a kernel sustains (kTensorSustained, the share cuBLASLt's calls are charged);
//     special-function results (core/ops.h node_special_ops; flash attention's exponentials per
//     score and rescale factors per row and key tile) at Device::special_ops_per_us; each pipe
//     overlapping the issue of the rest; the compute terms divided by the share of an SM's four
//     warp schedulers its resident warps occupy), divided by the fraction of SMs the blocks keep
//     busy (the parallelism penalty: grids under the SM count, and the blocks of the busiest SM);
//     for a group with a staged MatMul, at
//     least Little's law's bound: the DRAM bytes of what streams from DRAM (an input over half
//     the L2, or a weight of a model whose weights are: neither stays in L2 between launches)
//     over the bandwidth the resident blocks' bytes in flight sustain (bytes in flight x blocks /
//     Device::dram_latency_ns). A step's operand bytes are in flight for as many latencies as its
//     loads take rounds (a thread stages a batch of staging_batch elements or 16-byte vectors a
//     round, waiting for them before storing them to shared memory; cp.async keeps
//     MmaStaging::ahead steps in flight, in the tensor-core form and the SIMT MatMul's ring, the
//     GEMV form 4 of each thread's loads); the group's
//     least is its bound. For the generic reduction stage (codegen/stages/reduce.h), at least its
//     threads' rounds of loads (kReductionLoadsInFlight a round, a DRAM latency each, the first
//     excepted: every kernel waits for one, in its launch overhead): one thread an output
//     (ceil(outputs / threads) x ceil(count / 8) rounds) or a group of reduction_lanes lanes an
//     output (a round per 8 of a lane's share, a batch of outputs at a time). Plus a launch
//     overhead.
//   - the GEMV form (`gemv`; decode steps, classifier heads): a MatMul whose region has at most 8
//     rows and whose B is an input of the group stages only A, a reduction step of it at a time;
//     the block's threads split each step's rows of B (threads / column vectors slices, each
//     thread a 16-byte vector of columns, 4 rows in flight), multiply them straight from
//     registers, and sum the slices' partial products through shared memory at the end.
//   - flash attention (`flash`): a group with an attention core (planner/attention.h) computes it a
//     tile of `reduce_step` keys at a time (codegen/stages/attention.h): the region of the core's
//     output must be one matrix, or grouped-query heads sharing K and V folded into its rows
//     (planner::head_fold); shared memory holds Q's rows, a key tile of K and V, the tile's
//     probabilities and the rows' statistics, not the scores; the issue term charges Q's loads
//     once, K's and V's per tile, the micro-tiles' shared reads and the softmax's passes.
// Candidates that exceed the device's shared memory, registers or threads are rejected with a
// reason. tile_candidates enumerates tiles Welder-style (from a small tile, repeatedly doubling
// the axis that cuts traffic per output element most), crosses them with thread shapes (32 to
// 512, up to 64 an output, or a lane per kReductionLoadsInFlight elements of the group's longest
// reduction space, which the cooperative reduction form keeps busy: unstaged candidates only
// beyond 64 an output), steps (a
// Conv also keeps step 0, the unstaged schedule; a depthwise Conv has one staged step) and
// (for contractions with a float4-capable operand or a Conv the ring takes, conv_staging) vector
// widths 1 and 4, adds tensor-core (`mma`)
// candidates for groups with a float16/bfloat16 MatMul on devices of compute capability 8.0 or
// later (one matrix per tile, tile extents from 16x8 to 128x128, whole warps each owning 1 to 16
// m16n8 fragments, steps of 16, 32, 64; evaluate_tile rejects mma elsewhere; a convolution's
// byte product, whose output the group reshapes, also 16 to 128 output channels by whole rows of
// the map), on devices that
// issue wgmma (has_wgmma) also `wgmma` ones (tiles of 64 to 256 rows by 16 to 256 columns, one or
// two warpgroups, steps of 16, 32, 64; float16/bfloat16 operands only), adds GEMV candidates
// for groups with a MatMul of at most 8 rows (all its rows, 1 to 16 column vectors, 64 to 256
// threads, steps of 128, 256, 512; evaluate_tile rejects gemv where no MatMul takes the form),
// adds flash-attention candidates for groups with an attention core (per row count of its
// output, 16 to 128 or all, the smallest root tile whose output region is one matrix of those
// rows and all its columns, and where heads share K and V, tiles of 2 to 128 / queries heads of
// every query row; 64 to 256 threads; key tiles of 16 to 128),
// and returns the best `top_k` by modeled time (two modeled alike, as Little's law, DRAM or the
// launch bound them, then by the issue term alone, then by the larger reduction step: fewer
// barriers a tile), deterministically. A group a vendor library can run whole
// (planner/library_call.h) also gets that library's candidates, one per ranked algorithm
// (TilingOptions::library_algorithms), kept in the list whatever their rank, each displacing the
// last generated candidate while the list is full: measurement decides between them and the
// generated kernels.
#pragma once

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/graph.h"
#include "core/integer.h"
#include "planner/attention.h"
#include "planner/device.h"
#include "planner/fusion.h"
#include "planner/index_expr.h"
#include "planner/tensor_expr.h"

namespace fusetune::planner {

struct TileConfig {
  std::vector<int64_t> tile;  // per axis of the group's root output
  int64_t reduce_step = 0;    // reduction step of a contraction (0: none)
  int threads = 0;
  int vector = 1;             // 4: stage contraction operands in float4 quads where possible
  bool mma = false;           // tensor cores for MatMuls with float16/bfloat16 operands (sm_80+)
  bool wgmma = false;         // ... by warpgroups issuing wgmma (sm_90a; with mma; see wgmma_groups)
  bool gemv = false;          // the GEMV form of MatMuls of at most 8 rows whose B the group reads (see above)
  bool flash = false;         // the group's attention core as flash attention, reduce_step keys a tile (see above)
  bool in_place = false;      // a lone ScatterND writing its updates into its data's buffer (planner/in_place.h); tile: elements a block
  std::string library = "";   // set ("cublasLt", "cudnn", ...): the group runs as a library call (planner/library_call.h)
  int algorithm = 0;          // a library call's: the library's ranked choice (0: its heuristic's first)
  int split_k = 1;            // > 1: that many blocks per tile each sum a slice of the reduction steps (see above)
  int ring_stages = 0;        // > 0: the cp.async ring's depth in place of its form's default (MmaStaging, below)
  bool tma = false;           // with wgmma: operand slices by tensor copies (TMA) into 128-byte swizzled slots (tma_operands)
  bool ws = false;            // with tma: warp-specialized, a producer warpgroup issuing the copies (warp_specialized_registers)
  std::vector<int> order = {};  // the root's axes, fastest-varying in block order first (empty: the last axis fastest)
  std::string str() const;
  bool operator==(const TileConfig&) const = default;
};

// The order in which blocks take a candidate's tiles: the root's axes (of `rank`), the fastest-
// varying first; TileConfig::order, or the last axis fastest. Throws unless order is empty or a
// permutation of the axes.
std::vector<size_t> tile_order(const TileConfig& cfg, size_t rank);

// The library a candidate's TileConfig::str() names ("cudnn-tf32" of "library=cudnn-tf32 algo=2"),
// or "" for a generated kernel.
std::string config_library(const std::string& config);

struct Cost {
  bool valid = false;
  std::string reject;      // why the candidate does not fit, when !valid
  int64_t tiles = 0;       // thread blocks
  int64_t dram_bytes = 0;
  int64_t l2_bytes = 0;
  int64_t flops = 0;       // arithmetic of all tiles (recomputed halos included; tensor-core products padded)
  int64_t smem_bytes = 0;  // per block
  int registers = 0;       // per thread, estimated
  int blocks_per_sm = 0;
  double efficiency = 0;   // fraction of the device kept busy
  int64_t bytes_in_flight = 0;  // per block, of its staged contractions' operand loads (0: no bound)
  int64_t steps = 0;       // per block, the reduction steps (flash attention's key tiles) its staged contractions walk
  double issue_us = 0;     // the issue term alone: orders candidates modeled alike
  bool latency_bound = false;  // the time is a latency bound (Little's law's, or rounds of loads), not throughput's
  double fills_ahead = 0;  // per block, the ring fills' latencies hidden behind the stages before their products
  double modeled_us = 0;
};

struct Candidate {
  TileConfig config;
  Cost cost;
};

// What the cost model finds of a group's attention core under flash attention, the same for every
// candidate: its causal mask (planner/attention.h causal_mask_of), and, under that mask, the
// group's inputs read a key tile at a time (those K, V and the chain's operands are computed from,
// not Q's); and, by tile shape, whether a fold of heads holds in every tile (uniform_flash_tiles).
struct FlashFacts {
  bool found = false;
  std::optional<CausalMask> causal;
  std::set<int> keyed_inputs;
  std::map<std::vector<int64_t>, bool> uniform_folds;  // uniform_flash_tiles of a folded tile shape
};

struct TilingOptions {
  int top_k = 12;
  double launch_overhead_us = 2.0;
  // The bytes of the model's constants (weights); -1: summed from the graph. Weights of a model
  // whose constants exceed half the L2 do not stay there between launches: they stream from DRAM.
  int64_t constant_bytes = -1;
  // The precision policy (`--precision tf32`): float32 MatMuls may run on tensor cores as TF32
  // (inputs rounded to 10 mantissa bits, products summed in float32), as torch's allow_tf32.
  bool tf32 = false;
  // A group a library runs gets the library's first `library_algorithms` ranked algorithms, each
  // a candidate of its own (the model cannot tell them apart; measurement can).
  int library_algorithms = 3;
  // The libraries whose calls may be candidates (planner::library_set; `--libraries`): a plan
  // for a host without cuDNN leaves it out.
  std::set<std::string> libraries = {"cublasLt", "cudnn"};
  // Set by tile_candidates for the group it enumerates: the widest tile of a staged Conv or byte
  // product by root tile shape (the scan of tiling.cpp's widest_staged_tile, the same for every
  // candidate of a tile shape), so that it runs once a shape. Null: scanned for each candidate.
  std::map<std::vector<int64_t>, std::vector<Interval>>* widest_tiles = nullptr;
  // Set by tile_candidates likewise: what flash attention candidates share, found once for the
  // group it enumerates, and only for that group (causal_mask_of scans the whole mask: a
  // 2,048-token prefill's is 4 M elements). Null: found for each candidate.
  FlashFacts* flash_facts = nullptr;
};

// The bytes of g's constants.
int64_t constant_bytes(const Graph& g);

// The value a group's tiles range over.
int group_root(const Graph& g, const FusionGroup& group);

// The register-blocked micro-tile (rows, columns of each thread, each 1, 2, 4 or 8) with which
// `threads` threads cover a rows x cols region of a staged contraction: the smallest (squarest)
// one; {0, 0} when none covers it. Codegen's staged Conv uses it, and the cost model with it.
std::pair<int64_t, int64_t> micro_tile(int64_t rows, int64_t cols, int threads);

// The row pitch (in 16-bit elements) of a 16-bit slice with `count` elements a row that ldmatrix
// reads: an odd number of 16-byte units, so the eight rows of an ldmatrix phase fall in distinct
// banks. The tensor-core stages allocate with it and the cost model charges it.
inline int64_t ldmatrix_pitch(int64_t count) { return (count / 8) % 2 == 1 ? count : count + 8; }

// The tensor-core MatMul's instruction and slices by operand type t (codegen/stages/mma_matmul.h
// builds them, the cost model charges them): K per instruction, 16 (m16n8k16, 16-bit operands) or
// 8 (m16n8k8 on TF32, float32 operands); and the row pitches (elements) of the staged A slice
// (`count` = the reduction step) and B slice (`count` = its columns). 16-bit slices take
// ldmatrix_pitch. TF32 fragments are read by the lanes an element each: A's rows (lane group g reads
// row g, column t) with a pitch of 4 mod 32 floats, B's rows (row t, column g) with a pitch of 8
// mod 32, so a warp's 32 reads of one fragment register fall in 32 distinct banks; both multiples
// of 4 (16-byte cp.async chunks).
inline int64_t mma_k(DType t) { return t == DType::kF32 ? 8 : 16; }
inline int64_t mma_pitch_a(DType t, int64_t count) {
  return t == DType::kF32 ? count + (36 - count % 32) % 32 : ldmatrix_pitch(count);
}
inline int64_t mma_pitch_b(DType t, int64_t count) {
  return t == DType::kF32 ? count + (40 - count % 32) % 32 : ldmatrix_pitch(count);
}

// Warp schedulers per SM (four sub-partitions on every NVIDIA SM since Volta): an SM with fewer
// than two resident warps per scheduler leaves issue slots idle, which the cost model charges.
inline constexpr int kWarpSchedulersPerSm = 4;

// What each thread block costs its SM beyond its work: blocks start and retire at a bounded rate.
// Measured on an H200 (2026-12-04, bench/model_vs_measured over BERT float16's tune): 485
// element-wise candidates, each launched alone, took 3.6 us + 1.18 ns a block of the grid
// whatever their threads (32 to 512; rms 0.8 us), 156 ns a block on each of its 132 SMs. The cost
// model charges the busiest SM's blocks that much each (other GPUs alike until measured).
inline constexpr double kBlockCostNs = 156;
// That cost for a grid of `blocks` on `d`: the busiest SM's share of them, kBlockCostNs each.
inline double block_cost_us(int64_t blocks, const Device& d) {
  return static_cast<double>(ceil_div(blocks, static_cast<int64_t>(d.sms))) * kBlockCostNs / 1e3;
}

// The rows of statistics a normalization (Softmax, LogSoftmax, LayerNormalization) keeps for one
// region of its value: the region with the normalized axes dropped (the axis for Softmax, every
// axis from it on for layer norm). codegen/stages/row_stats.h keeps two floats per row in shared
// memory, and the cost model charges them.
int64_t normalization_rows(const Graph& g, const Node& n, const std::vector<Interval>& region);

// Loads a thread of the generic reduction stage keeps in flight: its reduction loop unrolled
// (codegen/stages/context.h's kReductionUnroll, which this is).
inline constexpr int kReductionLoadsInFlight = 8;

// Loads a thread keeps in flight when it stages an operand slice of a contraction element by
// element (codegen/stages/context.h's staging_loop): its elements in batches of up to this many,
// every load of a batch issued before its first store to shared memory.
inline constexpr int kStagingLoads = 8;
// The same for an operand staged in 16-byte vectors: up to 64 bytes a thread in flight.
inline constexpr int kVectorStagingLoads = 4;
// Rows of B a thread of the GEMV form (codegen/stages/matmul.h) loads, each one 16-byte vector,
// before it multiplies the first of them: up to 128 bytes a thread in flight.
inline constexpr int kGemvLoads = 8;
// The batch of a slice of at most `cap` loads (elements, or 16-byte vectors) staged by `threads`
// threads: a thread's share of the slice, up to `most` (1: a plain loop, one load a thread).
inline int64_t staging_batch(int64_t cap, int threads, int most = kStagingLoads) {
  return std::clamp<int64_t>((cap + threads - 1) / threads, 1, most);
}

// The lanes that reduce one output of the generic reduction stage together (codegen/stages/
// reduce.h's cooperative form), or 0 where each output is a thread's own (its serial form), for a
// region of at most `outputs` elements of n's value on `threads` threads. Cooperative: a float
// ReduceSum, ReduceMean, ReduceMax, ReduceMin, ArgMax or ArgMin (never split-K), or a float MatMul or Conv the candidate does not
// stage, whose reduction space has at least a warp's elements, where one thread an output would
// leave half the block idle or more, or (the reductions) where a warp's consecutive lanes read
// the input along its innermost axis, which one thread an output reads a row apart. Lanes: a warp
// per output, or with fewer outputs than warps the most warps that divide the block evenly (a
// power of two) with every warp working.
int64_t reduction_lanes(const Graph& g, const Node& n, int64_t outputs, int threads);
// The form the generic reduction stage takes for node n (both predicates above and below, from
// one description of n): for a candidate of `splits` split-K blocks a tile, the columns form
// where column_reduction holds and the candidate is not split, else reduction_lanes' lanes (0:
// the serial form); row_apart where such lanes step along an outer axis of a reduction's input
// (elements a row apart: a 32-byte sector requested for each, which the cost model charges).
struct ReductionForm {
  bool columns = false;
  int64_t lanes = 0;
  bool row_apart = false;
  // ArgMax and ArgMin with lanes: (value, index) pairs, an index a warp beside each float partial,
  // and no split-K (split_k.h hands over float accumulators alone).
  bool pairs = false;
};
// With `members` (the group's nodes), the input's reads follow the group's Transposes that
// produce it (inlined, they move the axes) to the innermost axis of the buffer read.
ReductionForm reduction_form(const Graph& g, const Node& n, int64_t outputs, int threads, int splits,
                             const std::vector<int>* members = nullptr);
// True where the generic reduction takes its columns form (codegen/stages/reduce.h) for a region
// of at most `outputs` elements of n's value on `threads` threads (two warps or more): a float
// ReduceSum, ReduceMean, ReduceMax or ReduceMin whose output's innermost axis is the input's
// innermost axis (a sum down the rows, not along them), of at least 16 outputs a region and 64
// elements an output. A warp's 32 lanes take 32 consecutive outputs (one request of consecutive
// elements a row, where the cooperative form's lanes each read a row of their own: a 32-byte
// sector a 4-byte element, counted on memory_bound's ReduceMean at 22% of an H200's copy
// bandwidth) and its warps every (threads / 32)-th row; the warps' partials meet in shared memory.
// Unsplit candidates take it where it applies; a split-K candidate keeps the cooperative form.
// Judged on n's own access (reduction_form without the group's members: no Transpose followed).
bool column_reduction(const Graph& g, const Node& n, int64_t outputs, int threads);

// The warps of a tensor-core MatMul over a region of at most rows x cols (codegen/stages/
// mma_matmul.h lays them out, the cost model charges what they compute and stage): a warps_m x
// warps_n grid of the block's warps, each owning fm x fn m16n8 fragments, the split with the
// fewest fragments per warp, then the fewest fragment loads. Every warp issues all its fragments'
// mma, and the staged slices span the grid: A (warps_m * fm * 16) rows, B (warps_n * fn * 8) columns.
struct MmaWarps {
  int64_t warps_m = 1, warps_n = 1, fm = 1, fn = 1;
  int64_t rows() const { return warps_m * fm * 16; }
  int64_t cols() const { return warps_n * fn * 8; }
};
MmaWarps mma_warps(int64_t rows, int64_t cols, int64_t warps);

// The warpgroups of a wgmma MatMul (sm_90a) over a region of at most rows x cols (codegen/stages/
// mma_matmul.h lays them out, the cost model charges them): a groups_m x groups_n grid of the
// block's warpgroups (128 threads each), each owning fm x fn wgmma tiles of 64 rows by n columns
// (n a multiple of 8, at most 256); the split that pads the region least, then with the fewest
// instructions. The staged slices span the grid: A (groups_m * fm * 64) rows, B (groups_n * fn *
// n) columns, in core matrices without padding.
struct WgmmaGroups {
  int64_t groups_m = 1, groups_n = 1, fm = 1, fn = 1, n = 8;
  int64_t rows() const { return groups_m * fm * 64; }
  int64_t cols() const { return groups_n * fn * n; }
};
WgmmaGroups wgmma_groups(int64_t rows, int64_t cols, int64_t warpgroups);
// Whether every tile of the group's root in tiles of `tile` holds a flash block as `fold` says
// (planner::head_fold). One matrix (fold.axis < 0): one index along every batch axis of the
// core's output. Folded: along fold.axis at most fold.heads heads, the first a multiple of
// fold.heads (so that all read the same K and V), every query row from the first, and one index
// along every other batch axis. Scans every tile (false where the root has more than 4,096): the
// representative tile alone cannot show a tile that straddles two groups, or a tile of rows that
// holds two heads' rows in part (heads merged with the rows in the root). The planner admits a
// fold, and codegen's flash stage folds, only where it holds; flash_tiles offers one-matrix tiles
// of at most 4,096 tiles only where it holds. `exprs`: the group's nodes described in order (null:
// described here).
bool uniform_flash_tiles(const Graph& g, const FusionGroup& group, const AttentionCore& core, const std::vector<int64_t>& tile,
                         const HeadFold& fold, const std::vector<TensorExpr>* exprs = nullptr);

// Whether the device issues wgmma: compute capability 9.0 exactly (sm_90a; later architectures
// have other instructions).
bool has_wgmma(const Device& d);

// True if MatMul n has operands tensor cores take: both float16, both bfloat16 or both float32
// (as TF32), of rank 2 or more. Whether float32 ones may go there is the precision policy's
// (TilingOptions::tf32).
bool tensor_core_operands(const Graph& g, const Node& n);

// True if MatMul n is a product of two 8-bit integer operands (int8 or uint8 each) into int32, of
// rank 2 or more: the form MatMulInteger and QLinearMatMul lower to, staged by the dp4a form
// (codegen/stages/dp4a_matmul.h: four byte products and their sum an instruction) on a device of
// compute capability 6.1 or later.
bool dp4a_matmul(const Graph& g, const Node& n);
// The dp4a form's slices, in 32-bit words of four consecutive K entries: A's rows of step / 4
// words plus one (an odd pitch: the rows a warp's micro-tiles read fall in different banks), B's
// rows of the region's columns.
inline int64_t dp4a_pitch_a(int64_t step) { return step / 4 + 1; }
// Its tensor-core form (m16n8k32; steps of a multiple of 32) pads A's rows by four words (a lane
// reads word t of row g: 8 rows 4 mod 8 words apart fill the 32 banks) and B's rows to 8 mod 16
// words (4 rows of 8 consecutive words).
inline int64_t imma_pitch_a(int64_t step) { return step / 4 + 4; }
inline int64_t imma_pitch_b(int64_t cols) { return cols + ((8 - cols % 16) + 16) % 16; }

// The values of `produced` (what `group` computes) whose elements the group computes: less the
// results of its unguarded Reshapes (chains of them) of values it does not compute. A Reshape moves no
// element: element i of its result, row-major, is element i of its input's buffer, so a staged
// operand that is such a result copies from the input's buffer (codegen's
// LoweringContext::buffer_of), as from an input: a pointwise convolution's channels-by-pixels
// matrix (importer/pointwise_conv.h). The staging functions below take this set.
std::set<int> computed_elements(const Graph& g, const FusionGroup& group, const std::set<int>& produced);

// How a tensor-core MatMul stages its operands (codegen/stages/mma_matmul.h): per operand whether
// it streams from global memory by cp.async (a value the group does not compute, whose rows are a
// whole number of 16-byte units), the stages of the ring of operand slices and how many steps
// ahead of the one multiplied are staged: with mma.sync 3 stages and 2 steps ahead with an
// operand copied asynchronously (two steps in flight while one is multiplied), else 2 and 1; with
// wgmma one stage more for the same steps ahead, since the previous step's wgmmas are still
// reading their slot while the next copies are issued. A candidate's TileConfig::ring_stages
// deepens a ring with an operand copied asynchronously (any of the three forms: mma_staging,
// simt_staging, conv_staging) to that many stages, the steps ahead growing with them (stages - 1;
// wgmma stages - 2): more bytes in flight per block where one block an SM cannot cover the
// latency of its operands with two steps, for more shared memory (kMaxRingStages bounds it).
struct MmaStaging {
  bool async_a = false, async_b = false;
  int stages = 2;
  int ahead = 1;
};
inline constexpr int kMaxRingStages = 8;

// The TMA form of a wgmma MatMul (TileConfig::tma; codegen/stages/mma_matmul.h): each operand a
// 16-bit value the group does not compute, of rank 2 or 3, read as laid out (index d of the
// MatMul's access a variable of the product, or 0 on an axis of one element) with rows of a whole
// number of 16 bytes. Per operand: its tensor map's dimensions and byte strides (innermost
// first), and per dimension the product variable that indexes it (the output's axes, then K as
// the output's rank; -1: 0). The stage takes reduction steps of 64 (one 128-byte swizzle span of
// A's rows) and B in boxes of 64 columns. Empty where either operand is not such a value.
struct TmaOperand {
  std::vector<int64_t> dims, strides;
  std::vector<int> vars;
};
std::optional<std::pair<TmaOperand, TmaOperand>> tma_operands(const Graph& g, const Node& matmul, const std::set<int>& produced);
// The warp-specialized TMA form (TileConfig::ws): a producer warpgroup appended to the candidate's
// `consumers` threads (block_threads in all) issues the tensor copies, one thread of it, while
// the consumers' warpgroups only wait, multiply and release (codegen/stages/mma_matmul.h). Its
// registers: the kernel launches one block an SM (`__launch_bounds__(threads, 1)`: a block's
// 65,536 registers shared by its threads, 8-aligned, at most 255 a thread: the same on every GPU
// the form runs on), ptxas fixing every thread's count at entry to `entry`, that bound or, where
// lower, the consumers' count (an .inc never lowers one); then the producer gives all but
// `producer` back (setmaxnreg.dec) and the consumers take `consumer` (setmaxnreg.inc, at most
// 240), both within the pool the launch sized. 128 consumers: entry 240, consumers 240, producer
// 40; 256: entry 168, consumers 232, producer 40 (the pool exactly).
inline constexpr int kBlockRegisters = 65536;  // the registers a block's threads share at most (every sm since 5.0)
struct WarpSpecializedRegisters {
  int block_threads = 0;
  int entry = 0, producer = 0, consumer = 0;
};
WarpSpecializedRegisters warp_specialized_registers(int consumers);
// `produced`: the values whose elements the group computes (computed_elements); cfg: its wgmma
// and ring_stages.
MmaStaging mma_staging(const Graph& g, const Node& matmul, const std::set<int>& produced, const TileConfig& cfg);

// A tensor-core MatMul whose A the block holds whole (codegen/stages/mma_matmul.h's resident A):
// on mma.sync (not wgmma, not TF32) with 16-bit operands, A is the value of a normalization of
// the group along A's last axis alone (LayerNormalization with axis -1, Softmax or LogSoftmax
// along the last axis: its stage computes the tile's rows whole before the product runs), read
// by no other member of the group, and K is a multiple of the reduction step as the stage rounds
// it (16, so ldmatrix never reads past a row). The normalization's shared buffer then holds its
// rows in A's type, resident_pitch elements apart, for the product's warps' rows (those beyond
// the region zero), and each step's A fragments come from it by ldmatrix: only B is staged a
// step. Where it holds, codegen allocates that buffer and the cost model charges it.
bool resident_a(const Graph& g, const FusionGroup& group, const Node& matmul, const TileConfig& cfg);
// The row pitch of a resident A (elements): its K, as ldmatrix_pitch pads a staged slice.
int64_t resident_pitch(const Graph& g, const Node& matmul);

// How the SIMT form of a staged MatMul (codegen/stages/matmul.h, register micro-tiles) stages its
// operands, in the same terms: a candidate that stages in 16-byte vectors (vector 4), is neither
// GEMV nor on tensor cores, has a reduction step of a multiple of 4 and a B that is a float32
// value the group does not compute, with rows of a multiple of 4 floats, copies B's slices by
// cp.async into a ring of 3 stages, 2 steps ahead of the one multiplied, and A's too where A is
// such a value (its K a multiple of 4), else computes and stores A's into the ring. Otherwise
// (async_b false) the operands are staged a step at a time, two barriers a step. The ring's slots:
// A's rows of simt_pitch_a floats, B's rows of the region's columns rounded up to 4.
MmaStaging simt_staging(const Graph& g, const Node& matmul, const std::set<int>& produced, const TileConfig& cfg);
inline int64_t simt_pitch_a(const MmaStaging& s, int64_t step) {
  // Four floats of padding put the rows that a warp's micro-tiles read (several, a column each)
  // four banks apart, and keep each row 16-byte aligned for cp.async.
  return s.async_a ? step + 4 : step;
}
inline int64_t simt_pitch_b(int64_t cols) { return (cols + 3) / 4 * 4; }
// How the implicit-GEMM Conv (codegen/stages/conv_gemm.h) stages its slices, in the same terms: a
// candidate that stages in 16-byte vectors (vector 4), not on tensor cores, with a reduction step
// of a multiple of 4, whose input and weights are float32 values the group does not compute and
// whose K (C_in / group x window) is a multiple of 4, copies both slices by cp.async into a ring
// of 3 stages, 2 steps ahead: the weights' rows (simt_pitch_a floats apart) in 16-byte chunks,
// the im2col patches an element (4 bytes) at a time. Otherwise (async_b false) the threads stage
// them a step at a time, two barriers a step.
MmaStaging conv_staging(const Graph& g, const Node& conv, const std::set<int>& produced, const TileConfig& cfg);
// The implicit-GEMM Conv's weight rows in shared memory, in floats: the ring's simt_pitch_a (16-byte
// aligned for cp.async), else the step rounded up to an odd count. A thread's micro-tile rows are
// interleaved (row lane r owns rows r, r + R, r + 2R, ...: codegen/stages/conv_gemm.h), so a warp's
// reads of one fragment register fall on consecutive rows, which an odd pitch puts in distinct
// banks (contiguous rows of 8 with a pitch of 64 floats put every lane of a warp in one bank:
// measured on an H200, ResNet-50's 3x3 convolutions ran 20-24x their modeled time).
inline int64_t conv_pitch_a(const MmaStaging& s, int64_t step) { return s.async_b ? simt_pitch_a(s, step) : step | 1; }

Cost evaluate_tile(const Graph& g, const FusionGroup& group, const Device& d, const TileConfig& cfg,
                   const TilingOptions& opt = {});

std::vector<Candidate> tile_candidates(const Graph& g, const FusionGroup& group, const Device& d,
                                       const TilingOptions& opt = {});

}  // namespace fusetune::planner
