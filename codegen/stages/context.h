// The shared state of one group's lowering (codegen/lower_group.cpp drives it; the stages in this
// folder use it): the group's facts, the block's tile and the regions of its values, the shared
// buffers of staged values, and the expression emitter.
//
// Takes a canonical graph, a group, a tile configuration and the lowering options. The driver
// binds the group's inputs and outputs to parameters (`param`, `out_param`), then tile_setup and
// regions emit, as block-uniform lets, the root's tile of this block and the region every internal
// value needs (lo, hi and extent variables per axis; the tensor expressions' region arithmetic,
// consumers before producers). numeric_regions evaluates the same arithmetic for one tile, so the
// driver can size shared memory over sample_tiles (`capacity`: the most elements of each value's
// region). value() emits what computes a value at an index into the current block and returns the
// local holding it: what a stage provides, a load from a parameter, a read of an anchor's shared
// buffer, or the producer inlined (stages/inline.h), common subexpressions kept in locals (memoised per block; a block
// opened with with_block sees the locals of the block around it, one opened with fresh_block
// none). dims_loop/region_loop distribute a value's region over the block's threads (32-bit index
// decomposition when it fits), store_value writes a computed element to the value's shared buffer
// and, when exported, to its output parameter. Guarantees: value locals (vN) are numbered uniquely
// within the kernel; a region loop over a value with a shared buffer is clamped to its allocation
// (a region the sampled tiles missed cannot write past it); everything region and tile arithmetic
// emits is block-uniform (k.uniform).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "codegen/kernel_ir.h"
#include "codegen/lower_group.h"
#include "core/graph.h"
#include "planner/fusion.h"
#include "planner/tensor_expr.h"
#include "planner/tiling.h"

namespace fusetune::codegen::stages {

// Iterations of an inlined reduction's loops unrolled, all levels of the nest together (short
// inner loops whole up to twice this; LoweringContext::reduction_loops): enough loads in flight,
// without the register pressure of a long loop unrolled whole.
inline constexpr int kReductionUnroll = planner::kReductionLoadsInFlight;
// An integer literal of the index arithmetic (planner::index_literal: int when it fits 32 bits).
std::string lit(int64_t v);
// The C product of the factors ("1" when there are none).
std::string product(const std::vector<std::string>& xs);
// The flat row-major index of `idx` into a tensor of shape `s`.
std::string flat(const Shape& s, const std::vector<std::string>& idx);
// Elements of a numeric region (0 when an axis is empty).
int64_t elems(const std::vector<planner::Interval>& r);
// One chunk of a staged operand: the first `valid` (an expression from 0 to `lanes`) of the `lanes`
// elements of parameter `param` at index `at` to shared allocation `buf` at `dst`, the rest zero:
// one 16-byte cp.async where the chunk is 16-byte aligned (floats: their address, since a
// parameter may be a view at any 4-byte offset; 16-bit elements: their index, their buffers
// starting aligned) or nothing is read, element by element otherwise. `lanes` elements fill 16
// bytes.
Stmt copy_chunk(const std::string& buf, const std::string& dst, const std::string& param, const std::string& at,
                const std::string& valid, int64_t lanes);

// One reduction step's slice of a staged MatMul operand by 16-byte cp.async chunks (the
// tensor-core form's ring and the SIMT form's): chunks of `lanes` elements, thread e taking chunk
// e of `count`. `row`, `col` and `at` are expressions of ft_e: the chunk's row in the slice, its
// first column, and its first element in `buf`. Its K index, let as ft_k, is `ks` x `step` plus the
// column (A) or the row (B); the chunk's elements inside the region (A: rows below `nm`, the whole
// chunk, K being a multiple of `lanes`; B: columns below `nn`) and below K are read, the rest
// zero-filled (copy_chunk). `index` gives the operand's index of the chunk (row ft_r, column ft_c).
struct CopiedSlice {
  bool is_a = false;
  std::string buf, param;
  Shape shape;  // the operand's
  std::function<std::vector<std::string>(const std::string& row, const std::string& col)> index;
  std::string ks, nm, nn, row, col, at;
  int64_t step = 0, k = 0, lanes = 0, count = 0;
};

// The region of a value a block computes: per axis, the names of its lo, hi and extent variables.
struct Region {
  std::vector<std::string> lo, hi, n;
};

using IndexFn = std::function<void(const std::vector<std::string>&)>;

class LoweringContext {
 public:
  LoweringContext(const Graph& graph, const planner::FusionGroup& fusion_group, const planner::TileConfig& config,
                  const LowerOptions& lower_options);

  const Graph& g;
  const planner::FusionGroup& group;
  const planner::TileConfig& cfg;
  const LowerOptions& options;
  std::set<int> members;                       // the group's nodes
  std::map<int, int> producer;                 // value -> the member node computing it
  std::set<int> produced() const;              // the values the group computes (producer's keys)
  // The group input whose buffer holds v's elements in v's row-major order: v itself for an input,
  // the input a chain of the group's Reshapes of it starts from; -1 otherwise. computed(): the
  // values whose elements the group computes (planner::computed_elements), what staged operands
  // cannot copy from.
  int buffer_of(int v) const;
  std::set<int> computed() const;
  std::map<int, planner::TensorExpr> exprs;    // member node -> its tensor expression
  int root = -1;                               // the value the tiles range over
  std::map<int, std::string> param;            // group input -> parameter
  std::map<int, std::string> out_param;        // exported value -> parameter
  std::map<int, Region> region;                // value -> its region variables
  std::map<int, std::string> buffer;           // anchor value (not the root) -> its shared buffer
  // A buffer holding its value in the value's own 16-bit type, rows this many elements apart (a
  // tensor-core product's resident A: planner::resident_a); other buffers hold floats (or
  // 64-bit integers), rows their region's extent apart.
  std::map<int, int64_t> resident_pitch;
  std::map<int, int64_t> capacity;             // value -> the most elements of its region over the tiles
  // Values a stage holds itself while it emits (flash attention's scores, a tile at a time):
  // value(v, idx) returns provided[v](idx) instead of a load, a buffer read or the producer inlined.
  std::map<int, std::function<std::string(const std::vector<std::string>&)>> provided;
  // Anchor values whose stage computes their consumers from registers (a register epilogue,
  // planner/epilogue.h; a normalization's row handed to the next, stages/row_stats.h): no shared
  // buffer; and the exported values such a stage writes itself.
  std::set<int> in_registers;
  std::set<int> written;
  // Values of a float type narrower than float that the group computes (in float) and whose
  // elements reach an op whose result jumps (scalar_ops.h result_jumps) through the group's ops:
  // value() gives them as the reference stores them (as_stored), so a chain like Sign(Sqrt(x) - 2)
  // jumps where the reference's does (sqrt(4.0039) is 2 in float16, and the difference 0).
  std::set<int> rounded;

  // ---- tiles and regions ----
  // The block's root tile (and the grid), as block-uniform lets: blocks take the tiles in the
  // candidate's tile order (planner::tile_order). With split-K (TileConfig::
  // split_k > 1) the grid is the tiles' splits, tile-major (a tile's splits are consecutive
  // blocks): uniform lets ft_tile (the tile's index) and ft_split (the block's split).
  void tile_setup(Kernel& k);
  int64_t tiles() const { return tiles_; }
  int64_t splits() const { return std::max(1, cfg.split_k); }
  // Region bounds of every internal value, consumers before producers, as block-uniform lets.
  void regions(Kernel& k);
  // The member node computing v, or -1.
  int producer_or(int v) const;
  // The region arithmetic, numerically, for one tile.
  std::map<int, std::vector<planner::Interval>> numeric_regions(int64_t tile_index) const;
  // Tiles whose regions bound every tile's: all of them when there are at most 65536, else the
  // first, second, middle and last ones along each axis (regions are translation-invariant in the
  // interior and only shrink at the clipped edges).
  std::vector<int64_t> sample_tiles() const;

  // ---- expressions ----
  // Emits (into the current block) what computes value v at index idx; returns the local's name.
  std::string value(int v, const std::vector<std::string>& idx);
  // A guarded read: `fill` unless idx lies inside v's shape (the load happens only inside).
  std::string guarded(int v, const std::vector<std::string>& idx, const std::string& fill);
  std::vector<std::string> index_of(const planner::Access& a, const std::vector<std::string>& vars) const;
  // The C condition that idx lies inside shape s.
  std::string in_range(const Shape& s, const std::vector<std::string>& idx) const;
  // Statements f emits into a new block that starts with no shared locals (a loop body whose
  // index variables differ from everything emitted so far).
  Block fresh_block(const std::function<void()>& f);
  // Statements f emits into b; the current block's locals stay visible inside.
  void with_block(Block& b, const std::function<void()>& f);
  // The block statements are emitted into.
  Block& cur() { return *cur_; }
  // A fresh number for a local's name.
  int next_local() { return next_local_++; }

  // ---- loops and stores ----
  // A thread-distributed loop over the axes `dims` of value v's region (other axes of the index
  // are "0LL"), at most `capacity` iterations (0: no clamp); calls body(o) with the index inside.
  void dims_loop(Kernel& k, int v, const std::vector<size_t>& dims, int64_t cap, const IndexFn& body);
  // The element loop over value v's whole region (clamped to its buffer, if it has one). With
  // `vectorize`, for a float32, float16 or bfloat16 value exported to an output whose rows are
  // whole 16-byte units: each iteration takes the 16 bytes of V consecutive elements along the
  // innermost axis (V = 4 or 8). Where all V lie inside the region and every address is 16-byte
  // aligned (checked at run time), the group inputs read along that axis (a load whose innermost
  // index is the innermost coordinate, and no other index is) are read as one vector each (and
  // inputs read at one index by all V elements, such as a token id, once for them all), body
  // runs once per element in its own scope, and the output is written as one vector; elsewhere
  // (a tail, an unaligned row) each element runs as in the scalar loop. The body must store v
  // through store_value and declare nothing but locals.
  void region_loop(Kernel& k, int v, const IndexFn& body, bool vectorize = false);
  // The loop staging `count` elements (at most `cap`: the count is clamped to it) of an operand
  // slice into shared allocation `buf`, element e by thread e % threads: `element` emits into the
  // current block what computes the float local ft_x (which it declares) for element ft_e. Where a
  // thread stages several elements, they go in batches of up to kStagingLoads: a batch's
  // elements are all computed (their loads issued) into k's thread-local ft_sx before the first of
  // them is stored, so a thread has a batch of loads in flight where a loop of load-then-store
  // waits a memory latency for each (planner::staging_batch; the cost model charges the rounds).
  // Element e goes to buf[base + e] (a ring slot's first element; "" for 0), or, given rows of
  // `row` elements laid `pitch` apart (padded rows), to buf[base + e / row * pitch + e % row].
  Stmt staging_loop(Kernel& k, const std::string& buf, const std::string& count, int64_t cap,
                    const std::function<void()>& element, const std::string& base = "", int64_t row = 0,
                    int64_t pitch = 0);
  // The thread-distributed loop over `count` items (an expression, let as ft_sn) in batches of
  // `batch`: thread t takes items b * threads * batch + i * threads + t in its batch b (i < batch:
  // the plain loop's items of that thread, in its order), all of a batch through `load`, then all
  // through `put`, each emitted into a block of its own where ft_e is the item (possibly past the
  // count: the bodies guard) and ft_si its place in the batch. Both loops over i are unrolled
  // whole, so the thread-local `local` (`size` floats, declared once per kernel) indexed by ft_si
  // stays in registers.
  Stmt batched_loop(Kernel& k, const std::string& count, int64_t batch, const std::string& local, int64_t size,
                    const std::function<void()>& load, const std::function<void()>& put);
  // Nested serial loops over e's reduction variables; body(vars) with vars = o then reductions.
  void reduction_loops(const planner::TensorExpr& e, const std::vector<std::string>& o, const IndexFn& body);
  // o followed by e's reduction variables at element `flat` of its reduction space (row-major,
  // the last reduction axis fastest), emitted into the current block as lets ft_r0, ft_r1, ...
  // with literal divisors: a lane's element of a reduction the lanes share.
  std::vector<std::string> reduction_vars_at(const planner::TensorExpr& e, const std::vector<std::string>& o, const std::string& flat);
  // Element o of value v computed as x: to its shared buffer and, when exported, its parameter.
  void store_value(int v, const std::vector<std::string>& o, const std::string& x);
  // The first half of store_value: to v's shared buffer, if it has one.
  void store_shared(int v, const std::vector<std::string>& o, const std::string& x);
  // The element of v's shared buffer that holds index idx of v (row-major over v's region, rows
  // resident_pitch apart where set).
  std::string buffer_offset(int v, const std::vector<std::string>& idx) const;
  // Elements o, o + 1, ... (xs.size() of them along the innermost axis, all inside v's shape) of
  // an exported value v, computed as xs, to its parameter (its shared buffer, if any, is the
  // caller's: store_shared): in the widest accesses that fit and are aligned (checked at run
  // time): 16 bytes (4 floats, 8 16-bit values), else pairs (8 or 4 bytes), else elements.
  void store_run(int v, const std::vector<std::string>& o, const std::vector<std::string>& xs);
  // Elements o, o + 1, ... of v along the innermost axis, computed as xs, to v's shared buffer,
  // which holds v in its own 16-bit type (resident_pitch), as store_run stores a parameter's (16
  // bytes where the element's offset is aligned, checked at run time).
  void store_shared_run(int v, const std::vector<std::string>& o, const std::vector<std::string>& xs);
  // store_run's accesses: xs (computed, dtype dt) to buffer or parameter `p` from element `start`
  // (an index expression), 16 bytes (else pairs, else elements) where the element is aligned.
  void store_run_at(const std::string& p, const std::string& start, DType dt, const std::vector<std::string>& xs);

  // ---- runs of reads along the innermost axis ----
  // A group input whose elements a run of consecutive elements along the innermost axis reads at
  // consecutive places: lane t's at flat index `at` + t (`at` a local), where `guard` holds ("":
  // always; else lane 0's condition, proved the same for every lane), memoised under keys[t] (the
  // key value() looks up for lane t's element). `base`: what that proof assumes, the run's first
  // element aligned to the run ("": nothing).
  struct VectorRead {
    int u = -1;
    std::string at, guard, base;
    std::vector<std::string> keys;
  };
  // The group inputs body(o_t) reads at lane t of a run of `run` elements (o_t: o with its
  // innermost coordinate lane(t), lane(t) = lane(0) + t) at consecutive places: float32, float16
  // or bfloat16 values whose 16-byte vectors divide the run, each read at flat index i + t by lane
  // t (IndexExpr::shift on the body emitted aside with a placeholder for lane 0), unconditionally
  // or under conditions the same for every lane (a Concat's piece, where the pieces' bounds and
  // the run's first element are multiples of the run), with no index naming what the body
  // declares; their first flat indices as locals emitted into the current block. Inputs read at
  // one index by the whole run (a token id) are loaded there first, once. A run that no 16-byte
  // vector divides finds nothing.
  std::vector<VectorRead> along_reads(const std::vector<std::string>& o, int64_t run,
                                      const std::function<std::string(int64_t)>& lane, const IndexFn& body);
  // The run-time condition that every read starts a 16-byte aligned vector (a guarded one where
  // its guard holds) and the run's first element is aligned where a read's proof assumes it.
  std::string reads_aligned(const std::vector<VectorRead>& reads) const;
  // The reads as 16-byte vector loads into the current block, each element memoised as the local
  // value() returns for it. Each load is predicated on its read's guard and on `guard` (zero
  // elsewhere: vector_load's guard), so that loads of several runs can be in flight before any is
  // used; with a `guard` the caller then computes an element where it fails apart from the memo
  // (fresh_block).
  void load_runs(const std::vector<VectorRead>& reads, int64_t run, const std::string& guard = "");
  // compute() into the current block as a run's elements: with reads, twice, under reads_aligned,
  // after load_runs (the reads from their vectors) and without it (element by element).
  void with_runs(const std::vector<VectorRead>& reads, int64_t run, const std::function<void()>& compute);

 private:
  std::string var(int v, const char* what, size_t d) const;
  void emit_extents(Kernel& k, int v);
  // region_loop's vector form; false (nothing emitted) where it does not apply.
  bool vector_loop(Kernel& k, int v, int64_t cap, const IndexFn& body);

  int64_t tiles_ = 1;
  std::vector<int64_t> ntiles_;
  std::vector<int64_t> strides_;  // tiles between consecutive tile indices along each axis (the tile order)
  std::vector<int64_t> tile_extent_;
  Block* cur_ = nullptr;
  std::map<std::string, std::string>* memo_ = nullptr;
  int next_local_ = 0;
  int with_depth_ = 0;  // with_block nesting
  // While along_reads looks for its loads: the group-input loads value() emits (at with_block
  // depth record_depth_ or deeper: unconditional ones at it).
  struct Recorded {
    int u = -1;
    std::vector<std::string> idx;
    std::string local;  // the let that holds it
    bool conditional = false;
    // The conditions of the branches its let lies in, "&&"-joined ("": none); "\x01" where it
    // lies in anything else (a loop) or in no statement of the body's text (record_loads).
    std::string guard;
  };
  std::vector<Recorded>* recording_ = nullptr;
  int record_depth_ = 0;
  // body(o) emitted aside with loads recorded; `declared` gets the names the body declares.
  std::vector<Recorded> record_loads(const std::vector<std::string>& o, const IndexFn& body, std::set<std::string>& declared);
  // While vector_loop emits its vector path: the value whose output store_value gathers, and the
  // local that receives the current element.
  int vector_value_ = -1;
  std::string vector_lane_;
};

// One anchor's stage: computes the anchor's value over its region, into its shared buffer (where
// later stages read it) and, when it is exported, its output parameter. The driver emits a
// comment before and a barrier after each stage.
class AnchorStage {
 public:
  virtual ~AnchorStage() = default;
  // Appends the stage's statements to k.body (and any block-uniform lets or thread-locals it needs).
  virtual void emit(Kernel& k) = 0;
  // Where the driver lets it (a stage after the group's first), the statements emit may set aside
  // to run before the group's first stage: ones that read only the group's inputs and write only
  // the stage's own shared memory, asynchronously (a tensor-core product's first weight slices,
  // stages/mma_matmul.h), so their loads fly while the stages before this one run. Null: none.
  Block* ahead_of_stages = nullptr;
};

// Whether element `at` of parameter `param` (of dtype t) starts a 16-byte aligned vector: for
// float32 checked on the address (ft_aligned16: a parameter may be a view at any 4-byte offset),
// for 16-bit types on the index (a multiple of 8: their buffers start 16-byte aligned).
std::string aligned16(DType t, const std::string& param, const std::string& at);

// `text` (an expression) with every identifier `name` replaced by `by`.
std::string replace_name(const std::string& text, const std::string& name, const std::string& by);

// The loop copying slice `s` (CopiedSlice above).
Stmt copy_slice(LoweringContext& cx, const CopiedSlice& s);

// The SIMT forms' cp.async ring (the staged MatMul's, planner::simt_staging, and the implicit-GEMM
// Conv's, planner::conv_staging) over a block's `local_steps` steps (its split's, from global step
// k0 with split-K): a prologue stages the first `ring.ahead` local steps, one cp.async group each;
// then local step ft_ks waits for its group (all but the newest ahead - 1), a barrier makes every
// thread's copies and stores visible, step ft_ks + ahead goes into the slot step ft_ks - 1 used
// (every thread has passed the barrier, so none still reads it) and, while those copies fly, the
// threads compute on their own slot. One barrier a step. `slices(ks, slot)` stages global step
// `ks` into ring slot `slot`; `compute(gks, slot)` is global step `gks`'s work on slot `slot`
// (expressions). With `early` (B copied by cp.async, the stage not its group's first: the
// AnchorStage::ahead_of_stages the driver gave), the prologue's B slices, `b_slices(ks, slot)`,
// are groups of their own put there, ahead of the group's stages, and `a_slices(ks, slot)` the
// prologue's groups here (a step's wait still finds both landed: groups complete in order).
using RingSlices = std::function<Block(const std::string& ks, const std::string& slot)>;
struct RingAhead {
  Block* early = nullptr;
  RingSlices a_slices, b_slices;
};
void emit_ring(LoweringContext& cx, Kernel& k, const planner::MmaStaging& ring, int64_t local_steps, const std::string& k0,
               const RingSlices& slices, const std::function<Stmt(const std::string& gks, const std::string& slot)>& compute,
               const RingAhead& ahead_of_stages = {});
// A cp.async ring's prologue (emit_ring's, the tensor-core form's): local steps 0 .. ahead - 1
// into their slots, `global(local)` the step of K each stages, one group each: `slices` into
// k.body; or, with `early.early`, B's slices there and A's (unless early.a_slices is empty: A
// resident) into k.body.
void emit_prologue(Kernel& k, int64_t ahead, const std::function<std::string(const std::string&)>& global, const RingSlices& slices,
                   const RingAhead& early);

}  // namespace fusetune::codegen::stages
