#include "codegen/verify_ir.h"

#include <algorithm>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "codegen/index_expr.h"
#include "core/error.h"
#include "planner/tiling.h"

namespace fusetune::codegen {

namespace {

// A warp's one mbarrier arrival, its lanes meeting first (__syncwarp).
bool warp_arrival(const Stmt& s) { return s.kind == Stmt::Kind::kMbarrier && s.a == "arrive_warp"; }

// Statements that must be reached by every thread of the block at once.
bool block_uniform_only(const Stmt& s) {
  const Stmt::Kind kind = s.kind;
  return warp_arrival(s) || kind == Stmt::Kind::kBarrier || kind == Stmt::Kind::kWarpReduce || kind == Stmt::Kind::kShuffle || kind == Stmt::Kind::kMma ||
         kind == Stmt::Kind::kLdmatrix || kind == Stmt::Kind::kPart || kind == Stmt::Kind::kUniformFor ||
         kind == Stmt::Kind::kWgmma || kind == Stmt::Kind::kWgmmaSync || kind == Stmt::Kind::kExitUnless ||
         kind == Stmt::Kind::kSetMaxNReg || (kind == Stmt::Kind::kIf && s.role_threads > 0);
}

bool warp_synchronous(const Stmt& s) {
  const Stmt::Kind kind = s.kind;
  return warp_arrival(s) || kind == Stmt::Kind::kWarpReduce || kind == Stmt::Kind::kShuffle || kind == Stmt::Kind::kMma || kind == Stmt::Kind::kLdmatrix ||
         kind == Stmt::Kind::kWgmma || kind == Stmt::Kind::kWgmmaSync || kind == Stmt::Kind::kSetMaxNReg;
}

// Statements that every thread of the block must reach together, which a warpgroup role (a side of
// `roles`) cannot hold: the other role's threads never get there.
bool block_wide(const Stmt& s) {
  return s.kind == Stmt::Kind::kBarrier || s.kind == Stmt::Kind::kPart || s.kind == Stmt::Kind::kExitUnless ||
         (s.kind == Stmt::Kind::kIf && s.role_threads > 0);
}

const char* what(const Stmt& s) {
  if (warp_arrival(s)) return "a warp's mbarrier arrival";
  switch (s.kind) {
    case Stmt::Kind::kBarrier: return "a barrier";
    case Stmt::Kind::kWarpReduce: return "a warp reduction";
    case Stmt::Kind::kShuffle: return "a warp shuffle";
    case Stmt::Kind::kMma: return "an mma";
    case Stmt::Kind::kLdmatrix: return "an ldmatrix";
    case Stmt::Kind::kWgmma: return "a wgmma";
    case Stmt::Kind::kWgmmaSync: return "a wgmma fence, commit or wait";
    case Stmt::Kind::kPart: return "a part";
    case Stmt::Kind::kUniformFor: return "a uniform loop";
    case Stmt::Kind::kExitUnless: return "an exit";
    case Stmt::Kind::kSetMaxNReg: return "a setmaxnreg";
    case Stmt::Kind::kIf: return s.role_threads > 0 ? "warpgroup roles" : "a statement";
    default: return "a statement";
  }
}

// The identifiers an expression names.
void identifiers(const std::string& text, std::set<std::string>& out) {
  const std::set<std::string> names = expression_names(text);
  out.insert(names.begin(), names.end());
}

void identifiers(const Block& b, std::set<std::string>& out);

void identifiers(const Stmt& s, std::set<std::string>& out) {
  if (s.kind == Stmt::Kind::kComment) return;
  identifiers(s.name, out);
  identifiers(s.a, out);
  identifiers(s.b, out);
  identifiers(s.c, out);
  identifiers(s.d, out);
  identifiers(s.e, out);
  identifiers(s.body, out);
  identifiers(s.orelse, out);
  identifiers(s.uniform, out);
}

void identifiers(const Block& b, std::set<std::string>& out) {
  for (const Stmt& s : b) identifiers(s, out);
}

class Verifier {
 public:
  explicit Verifier(const Kernel& k) : k_(k) {}

  void run() {
    declarations();
    walk(k_.uniform, "the kernel's block-uniform lets", nullptr);
    walk(k_.body, nullptr, nullptr);
    if (first_warp_sync_ != nullptr) {
      check(k_.threads > 0 && k_.threads % kWarpSize == 0, "kernel '", k_.name, "': ", k_.threads,
            " threads, not a positive multiple of ", kWarpSize, ", with warp-synchronous `", line_text(*first_warp_sync_), "`");
    }
    if (first_warpgroup_ != nullptr) {
      check(k_.threads % (4 * kWarpSize) == 0, "kernel '", k_.name, "': ", k_.threads, " threads, not whole warpgroups of ",
            4 * kWarpSize, ", with `", line_text(*first_warpgroup_), "`");
    }
    shared_layout();
  }

 private:
  template <typename... Parts>
  [[noreturn]] void fail_at(const Stmt& s, Parts&&... parts) const {
    fail("kernel '", k_.name, "': ", std::forward<Parts>(parts)..., ": `", line_text(s), "`");
  }

  void declarations() {
    check(k_.threads > 0, "kernel '", k_.name, "': ", k_.threads, " threads");
    std::map<std::string, std::string> seen;  // name -> what declared it
    auto declare = [&](const std::string& name, const std::string& kind) {
      auto [it, fresh] = seen.emplace(name, kind);
      check(fresh, "kernel '", k_.name, "': ", kind, " '", name, "' has the name of ", it->second == kind ? "another " : "a ",
            it->second);
    };
    for (const Param& p : k_.params) declare(p.name, "parameter");
    for (const Param& p : k_.scratch) {
      declare(p.name, "scratch buffer");
      check(p.output && (p.dtype == DType::kF32 || p.dtype == DType::kU32), "kernel '", k_.name, "': scratch buffer '", p.name,
            "' must be a writable float32 or uint32 buffer");
    }
    // Counter buffers: uint32, their groups of blocks within the grid and apart from each other's.
    std::vector<std::pair<int64_t, int64_t>> ranges;  // first block, end
    for (const Param& p : k_.scratch) {
      if (p.group_blocks <= 0) continue;
      check(p.dtype == DType::kU32 && p.elements > 0 && p.first_block >= 0 && p.first_block + p.elements * p.group_blocks <= k_.grid,
            "kernel '", k_.name, "': counter buffer '", p.name, "' must hold uint32 counters of groups of blocks within the grid of ",
            k_.grid);
      ranges.emplace_back(p.first_block, p.first_block + p.elements * p.group_blocks);
    }
    std::sort(ranges.begin(), ranges.end());
    int64_t covered = 0;
    for (const auto& [first, end] : ranges) {
      check(first >= covered, "kernel '", k_.name, "': two counter buffers count the blocks from ", first);
      covered = end;
    }
    check(k_.scratch.empty() || !ranges.empty(), "kernel '", k_.name, "': scratch buffers and no counter buffer of cooperating blocks");
    for (const TensorMap& m : k_.tensor_maps) {
      declare(m.name, "tensor map");
      const Param* p = nullptr;
      for (const Param& q : k_.params) p = q.name == m.source ? &q : p;
      check(p != nullptr, "kernel '", k_.name, "': tensor map '", m.name, "' maps '", m.source, "', which is no parameter");
      const int64_t eb = static_cast<int64_t>(dtype_size(p->dtype));
      bool ok = !m.dims.empty() && m.dims.size() <= 5 && m.box.size() == m.dims.size() && m.strides.size() + 1 == m.dims.size() &&
                (m.swizzle == 0 || m.swizzle == 32 || m.swizzle == 64 || m.swizzle == 128) && m.box[0] * eb % 16 == 0 &&
                (m.swizzle == 0 || m.box[0] * eb == m.swizzle);
      for (size_t d = 0; d < m.dims.size() && ok; ++d) ok = m.dims[d] > 0 && m.box[d] > 0 && m.box[d] <= 256;
      for (const int64_t st : m.strides) ok = ok && st > 0 && st % 16 == 0;
      check(ok, "kernel '", k_.name, "': tensor map '", m.name, "' is not one cuTensorMapEncodeTiled takes (core/kernel_text.h)");
    }
    for (const SharedAlloc& a : k_.shared) declare(a.name, "shared allocation");
    for (const ThreadLocal& t : k_.thread_locals) declare(t.name, "thread-local");
  }

  const TensorMap* tensor_map(const std::string& name) const {
    for (const TensorMap& m : k_.tensor_maps) {
      if (m.name == name) return &m;
    }
    return nullptr;
  }

  const ThreadLocal* local(const std::string& name) const {
    for (const ThreadLocal& t : k_.thread_locals) {
      if (t.name == name) return &t;
    }
    return nullptr;
  }

  const SharedAlloc* shared(const std::string& name) const {
    for (const SharedAlloc& a : k_.shared) {
      if (a.name == name) return &a;
    }
    return nullptr;
  }

  const Param* param(const std::string& name) const {
    for (const std::vector<Param>* list : {&k_.params, &k_.scratch}) {
      for (const Param& p : *list) {
        if (p.name == name) return &p;
      }
    }
    return nullptr;
  }

  // A fragment operand: `size` elements of thread-local `name` of `dtype` from `at`.
  void fragment(const Stmt& s, const char* role, const std::string& name, int64_t at, int64_t size, DType dtype) const {
    const ThreadLocal* t = local(name);
    if (t == nullptr) fail_at(s, role, " '", name, "' is not a thread-local");
    if (t->dtype != dtype) fail_at(s, role, " '", name, "' is ", dtype_name(t->dtype), ", needs ", dtype_name(dtype));
    if (at < 0 || at + size > t->count) {
      fail_at(s, role, " '", name, "' [", at, ", ", at + size, ") outside its ", t->count, " elements");
    }
  }

  void statement(const Stmt& s) {
    switch (s.kind) {
      case Stmt::Kind::kVectorStore:
      case Stmt::Kind::kVectorLoad: {
        const std::string& buffer = s.kind == Stmt::Kind::kVectorStore ? s.name : s.a;
        const SharedAlloc* a = shared(buffer);
        const Param* p = param(buffer);
        const DType t = a != nullptr ? a->dtype : (p != nullptr ? p->dtype : DType::kUndefined);
        const bool matches = s.dtype == DType::kF32 ? t == DType::kF32 : t != DType::kUndefined && dtype_size(t) == 2;
        if (!matches) {
          fail_at(s, "a vector of ", dtype_name(s.dtype), " on '", buffer, "', which is ",
                  t == DType::kUndefined ? "not a buffer" : "a buffer of " + std::string(dtype_name(t)));
        }
        if (s.kind == Stmt::Kind::kVectorStore && p != nullptr && !p->output) fail_at(s, "store to input parameter '", buffer, "'");
        if (s.kind == Stmt::Kind::kVectorLoad && !s.c.empty() && (p == nullptr || p->output)) {
          fail_at(s, "a guarded vector load of '", buffer, "', which is not an input parameter");
        }
        break;
      }
      case Stmt::Kind::kStore: {
        if (shared(s.name) != nullptr) break;
        const Param* p = param(s.name);
        if (p == nullptr) fail_at(s, "store to '", s.name, "', which is neither an output parameter nor a shared allocation");
        if (!p->output) fail_at(s, "store to input parameter '", s.name, "'");
        break;
      }
      case Stmt::Kind::kWarpReduce: {
        const ThreadLocal* t = local(s.name);
        if (t == nullptr) fail_at(s, "warp reduction of '", s.name, "', which is not a thread-local");
        if (t->count != 1 || t->dtype != DType::kF32) {
          fail_at(s, "warp reduction of thread-local '", s.name, "' of ", t->count, " ", dtype_name(t->dtype),
                  " (needs one float)");
        }
        if (is_arg_reduce(s.a)) {
          const ThreadLocal* index = local(s.c);
          if (index == nullptr || index->count != 1 || index->dtype != DType::kU32) {
            fail_at(s, "warp reduction of index pairs whose index '", s.c, "' is not one u32 thread-local");
          }
        }
        break;
      }
      case Stmt::Kind::kShuffle: {
        const ThreadLocal* t = local(s.name);
        if (t == nullptr || t->dtype != DType::kF32) fail_at(s, "shuffle into '", s.name, "', which is not a float thread-local");
        if (s.at.size() != 1 || s.at[0] < 0 || s.at[0] >= t->count) {
          fail_at(s, "shuffle into element ", s.at.empty() ? -1 : s.at[0], " of thread-local '", s.name, "' of ", t->count);
        }
        break;
      }
      case Stmt::Kind::kMma:
        if (s.at.size() != 3) fail_at(s, "mma with ", s.at.size(), " operand offsets (needs 3)");
        {
          const auto byte = [](DType t) { return t == DType::kI8 || t == DType::kU8; };
          const bool integer = byte(s.dtype) && byte(s.b_dtype);
          if (s.dtype != DType::kF16 && s.dtype != DType::kBF16 && s.dtype != DType::kF32 && !integer) {
            fail_at(s, "mma of ", dtype_name(s.dtype), " (needs float16, bfloat16, float32 as TF32, or int8/uint8 operands both)");
          }
          fragment(s, "mma accumulator", s.name, s.at[0], 4, integer ? DType::kU32 : DType::kF32);
        }
        fragment(s, "mma A fragment", s.a, s.at[1], 4, DType::kU32);
        fragment(s, "mma B fragment", s.b, s.at[2], 2, DType::kU32);
        break;
      case Stmt::Kind::kLdmatrix: {
        if (s.matrices != 1 && s.matrices != 2 && s.matrices != 4) {
          fail_at(s, "ldmatrix of ", s.matrices, " matrices (1, 2 or 4)");
        }
        if (s.at.size() != 1) fail_at(s, "ldmatrix with ", s.at.size(), " destination offsets (needs 1)");
        fragment(s, "ldmatrix destination", s.name, s.at[0], s.matrices, DType::kU32);
        const SharedAlloc* a = shared(s.a);
        if (a == nullptr) fail_at(s, "ldmatrix from '", s.a, "', which is not a shared allocation");
        if (dtype_size(a->dtype) != 2) {
          fail_at(s, "ldmatrix from shared allocation '", s.a, "' of ", dtype_name(a->dtype), " (needs 16-bit)");
        }
        break;
      }
      case Stmt::Kind::kWgmma: {
        if (s.at.size() != 5) fail_at(s, "wgmma with ", s.at.size(), " offsets and strides (needs 5)");
        if (s.dtype != DType::kF16 && s.dtype != DType::kBF16) fail_at(s, "wgmma of ", dtype_name(s.dtype), " (needs float16 or bfloat16)");
        if (s.wgmma_n < 8 || s.wgmma_n > 256 || s.wgmma_n % 8 != 0) fail_at(s, "wgmma with N ", s.wgmma_n, " (needs 8 to 256, a multiple of 8)");
        fragment(s, "wgmma accumulator", s.name, s.at[0], s.wgmma_n / 2, DType::kF32);
        if (s.a_registers) fragment(s, "wgmma A fragment", s.a, s.at[1], 4, DType::kU32);
        for (const std::string* operand : {&s.a, &s.c}) {
          if (operand == &s.a && s.a_registers) continue;
          const SharedAlloc* a = shared(*operand);
          if (a == nullptr || dtype_size(a->dtype) != 2) fail_at(s, "wgmma operand '", *operand, "' is not a 16-bit shared allocation");
        }
        for (size_t i = s.a_registers ? 3 : 1; i < 5; ++i) {
          // 14 bits of 16-byte units in the descriptor
          if (s.at[i] <= 0 || s.at[i] % 16 != 0 || s.at[i] >= (int64_t{1} << 18)) fail_at(s, "wgmma stride ", s.at[i], " bytes (needs a multiple of 16 below 2^18)");
        }
        break;
      }
      case Stmt::Kind::kAtomic: {
        const Param* p = param(s.name);
        if (p == nullptr || !p->output || p->dtype != DType::kU32) fail_at(s, "an atomic on '", s.name, "', which is not a writable uint32 buffer");
        break;
      }
      case Stmt::Kind::kWgmmaSync:
        if (s.a != "fence" && s.a != "commit" && s.a != "wait" && s.a != "proxy") fail_at(s, "wgmma synchronisation '", s.a, "'");
        if ((s.a == "fence" || s.a == "wait") && local(s.name) == nullptr) fail_at(s, "wgmma ", s.a, " of '", s.name, "', which is not a thread-local");
        if (s.a == "fence" && !s.b.empty()) fragment(s, "wgmma fence's A operand", s.b, 0, 1, DType::kU32);
        break;
      case Stmt::Kind::kMbarrier: {
        if (s.a != "init" && s.a != "fence" && s.a != "arrive" && s.a != "arrive_warp" && s.a != "wait") {
          fail_at(s, "mbarrier operation '", s.a, "'");
        }
        if (s.a == "arrive_warp" && !s.c.empty()) fail_at(s, "a warp's mbarrier arrival with transaction bytes");
        if (s.a == "fence") break;
        const SharedAlloc* a = shared(s.name);
        if (a == nullptr || a->dtype != DType::kU64) fail_at(s, "mbarrier '", s.name, "' is not a 64-bit shared allocation");
        if ((s.a == "init" || s.a == "wait") && s.c.empty()) fail_at(s, "mbarrier ", s.a, " without its ", s.a == "init" ? "count" : "parity");
        break;
      }
      case Stmt::Kind::kSetMaxNReg:
        if ((s.a != "inc" && s.a != "dec") || s.groups < 24 || s.groups > 256 || s.groups % 8 != 0) {
          fail_at(s, "setmaxnreg '", s.a, "' to ", s.groups, " registers (inc or dec, to 24 .. 256, a multiple of 8)");
        }
        break;
      case Stmt::Kind::kTensorLoad: {
        const TensorMap* m = tensor_map(s.b);
        if (m == nullptr) fail_at(s, "a tensor copy through '", s.b, "', which is no tensor map");
        const size_t coords = tensor_coords(s).size();
        if (coords != m->dims.size()) fail_at(s, "a tensor copy with ", coords, " coordinates through a map of ", m->dims.size(), " dimensions");
        const SharedAlloc* a = shared(s.name);
        const Param* p = param(m->source);
        if (a == nullptr || dtype_size(a->dtype) != dtype_size(p->dtype)) {
          fail_at(s, "a tensor copy into '", s.name, "', which is not a shared allocation of ", dtype_name(p->dtype), "'s size");
        }
        const SharedAlloc* bar = shared(s.d);
        if (bar == nullptr || bar->dtype != DType::kU64) fail_at(s, "a tensor copy completing on '", s.d, "', which is not a 64-bit shared allocation");
        // Its destination: 128-byte aligned, 1 KB under the 128-byte swizzle (whose atoms of 8 rows
        // the shared address's bits 7-9 pick), for every value of the index's variables.
        const int need = m->swizzle == 128 ? 10 : 7;
        const int index_twos = IndexExpr::parse(s.a, [](const std::string&) { return IndexExpr::Binding{}; }).twos();
        const int element_twos = __builtin_ctz(static_cast<unsigned>(dtype_size(a->dtype)));
        if (a->offset % (int64_t{1} << need) != 0 || index_twos + element_twos < need) {
          fail_at(s, "a tensor copy into '", s.name, "' (at shared byte ", a->offset, ") whose destination is not proven ", 1 << need,
                  "-byte aligned");
        }
        break;
      }
      case Stmt::Kind::kCopyAsync: {
        const SharedAlloc* a = shared(s.name);
        if (a == nullptr) fail_at(s, "cp.async into '", s.name, "', which is not a shared allocation");
        if (dtype_size(a->dtype) != 2 && a->dtype != DType::kF32) {
          fail_at(s, "cp.async into shared allocation '", s.name, "' of ", dtype_name(a->dtype), " (needs 16-bit or float32)");
        }
        if (s.copy_bytes != 16 && !(s.copy_bytes == 4 && a->dtype == DType::kF32)) {
          fail_at(s, "cp.async of ", s.copy_bytes, " bytes into '", s.name, "' of ", dtype_name(a->dtype), " (16, or 4 for a float)");
        }
        const Param* p = param(s.b);
        if (p == nullptr) fail_at(s, "cp.async from '", s.b, "', which is not a parameter");
        if (dtype_size(p->dtype) != dtype_size(a->dtype) || (a->dtype == DType::kF32) != (p->dtype == DType::kF32)) {
          fail_at(s, "cp.async from parameter '", s.b, "' of ", dtype_name(p->dtype), " into '", s.name, "' of ",
                  dtype_name(a->dtype), " (needs the same element type)");
        }
        break;
      }
      default: break;
    }
  }

  // Statements of block b. `not_uniform` says why b is not a block-uniform point (null when it is),
  // `enclosing` the statement that makes it so.
  // Inside a warpgroup role (`role_`, the roles statement) the warp- and warpgroup-collective
  // statements are allowed where they would be at the top level; `side_` is the role's own block
  // while it is walked, where a setmaxnreg may stand first.
  void walk(const Block& b, const char* not_uniform, const Stmt* enclosing) {
    for (const Stmt& s : b) {
      if (block_uniform_only(s) && not_uniform != nullptr) {
        if (enclosing == nullptr) fail_at(s, what(s), " inside ", not_uniform);
        fail_at(s, what(s), " inside ", not_uniform, " (`", line_text(*enclosing), "`)");
      }
      if (role_ != nullptr && block_wide(s)) fail_at(s, what(s), " inside a warpgroup role (`", line_text(*role_), "`)");
      if (role_ != nullptr && s.kind == Stmt::Kind::kFor && s.threads) {
        fail_at(s, "a thread loop inside a warpgroup role (`", line_text(*role_), "`): its iterations bind to every thread of the block");
      }
      if (s.kind == Stmt::Kind::kSetMaxNReg && (side_ != &b || &s != &b.front())) {
        fail_at(s, "a setmaxnreg that is not the first statement of a warpgroup role");
      }
      if (warp_synchronous(s) && first_warp_sync_ == nullptr) first_warp_sync_ = &s;
      if ((s.kind == Stmt::Kind::kWgmma || s.kind == Stmt::Kind::kWgmmaSync) && first_warpgroup_ == nullptr) first_warpgroup_ = &s;
      statement(s);
      switch (s.kind) {
        case Stmt::Kind::kFor: walk(s.body, s.threads ? "a thread loop" : "a serial loop", &s); break;
        case Stmt::Kind::kIf:
          if (s.role_threads > 0) {
            roles(s, b);
            break;
          }
          walk(s.body, "a branch", &s);
          walk(s.orelse, "a branch", &s);
          break;
        case Stmt::Kind::kPart:
          walk(s.uniform, "the block-uniform lets of a part", &s);
          walk(s.body, not_uniform, enclosing);
          break;
        case Stmt::Kind::kUniformFor: walk(s.body, not_uniform, enclosing); break;
        default: break;
      }
    }
  }

  // Warpgroup roles: at a block-uniform point (walk checked), on `ft_thread < N` with N the
  // statement's warpgroup boundary inside the block; each side walked as a warpgroup-uniform block.
  // The roles run once (the top level of the body, one roles statement: a warpgroup's setmaxnregs
  // must not follow each other unsynchronised), and where a side moves its registers both do,
  // within the block's 65,536.
  void roles(const Stmt& s, const Block& in) {
    const int n = s.role_threads;
    if (s.a != "ft_thread < " + std::to_string(n) || n % (4 * kWarpSize) != 0 || n >= k_.threads || k_.threads % (4 * kWarpSize) != 0) {
      fail_at(s, "warpgroup roles that do not split the block's ", k_.threads, " threads at a warpgroup boundary");
    }
    if (&in != &k_.body) fail_at(s, "warpgroup roles below the top level of the body");
    if (roles_ != nullptr) fail_at(s, "a second warpgroup roles statement (the first: `", line_text(*roles_), "`)");
    roles_ = &s;
    role_ = &s;
    side_ = &s.body;
    walk(s.body, nullptr, nullptr);
    side_ = &s.orelse;
    walk(s.orelse, nullptr, nullptr);
    role_ = nullptr;
    side_ = nullptr;
    const auto budget = [](const Block& side) {
      return !side.empty() && side.front().kind == Stmt::Kind::kSetMaxNReg ? side.front().groups : 0;
    };
    const int first = budget(s.body), rest = budget(s.orelse);
    if ((first == 0) != (rest == 0)) fail_at(s, "a setmaxnreg on one side of warpgroup roles only");
    if (int64_t{first} * n + int64_t{rest} * (k_.threads - n) > planner::kBlockRegisters) {
      fail_at(s, "setmaxnreg budgets of ", first, " x ", n, " and ", rest, " x ", k_.threads - n, " threads beyond the block's ",
              planner::kBlockRegisters, " registers");
    }
  }

  // Alignment, bounds and overlap of the shared allocations.
  void shared_layout() const {
    for (const SharedAlloc& a : k_.shared) {
      const int64_t bytes = a.elements * static_cast<int64_t>(dtype_size(a.dtype));
      check(a.offset >= 0 && a.offset % 16 == 0, "kernel '", k_.name, "': shared allocation '", a.name, "' at byte ", a.offset,
            ", not 16-byte aligned");
      check(a.elements >= 0 && a.offset + bytes <= k_.shared_bytes, "kernel '", k_.name, "': shared allocation '", a.name,
            "' [", a.offset, ", ", a.offset + bytes, ") beyond the kernel's ", k_.shared_bytes, " bytes of shared memory");
    }
    // Who names each allocation: parts of a packed kernel (their index), or the rest of the kernel (-1).
    std::vector<std::set<std::string>> scopes;
    std::set<std::string> rest;
    identifiers(k_.uniform, rest);
    for (const Stmt& s : k_.body) {
      if (s.kind == Stmt::Kind::kPart) {
        scopes.emplace_back();
        identifiers(s, scopes.back());
      } else {
        identifiers(s, rest);
      }
    }
    auto users = [&](const std::string& name) {
      std::set<int> u;
      if (rest.count(name) || scopes.empty()) u.insert(-1);
      for (size_t i = 0; i < scopes.size(); ++i) {
        if (scopes[i].count(name)) u.insert(static_cast<int>(i));
      }
      if (u.empty()) u.insert(-1);  // named nowhere: kernel-wide
      return u;
    };
    for (size_t i = 0; i < k_.shared.size(); ++i) {
      const SharedAlloc& a = k_.shared[i];
      const int64_t a_end = a.offset + a.elements * static_cast<int64_t>(dtype_size(a.dtype));
      for (size_t j = i + 1; j < k_.shared.size(); ++j) {
        const SharedAlloc& b = k_.shared[j];
        const int64_t b_end = b.offset + b.elements * static_cast<int64_t>(dtype_size(b.dtype));
        if (a.offset >= b_end || b.offset >= a_end || a.offset == a_end || b.offset == b_end) continue;
        const std::set<int> ua = users(a.name), ub = users(b.name);
        bool shared_user = ua.count(-1) || ub.count(-1);
        for (int u : ua) shared_user = shared_user || ub.count(u);
        check(!shared_user, "kernel '", k_.name, "': shared allocations '", a.name, "' [", a.offset, ", ", a_end, ") and '",
              b.name, "' [", b.offset, ", ", b_end, ") overlap");
      }
    }
  }

  const Kernel& k_;
  const Stmt* first_warp_sync_ = nullptr;
  const Stmt* first_warpgroup_ = nullptr;  // the first wgmma statement
  const Stmt* roles_ = nullptr;            // the kernel's roles statement
  const Stmt* role_ = nullptr;             // the roles statement being walked
  const Block* side_ = nullptr;            // ... and the side whose own statements are walked
};

}  // namespace

void verify_ir(const Kernel& k) { Verifier(k).run(); }

}  // namespace fusetune::codegen
