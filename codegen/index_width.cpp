#include "codegen/index_width.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "codegen/index_expr.h"
#include "core/error.h"

namespace fusetune::codegen {

namespace {

// The integer width of a value of this C type in arithmetic (0: not an integer).
int ctype_bits(const std::string& c, int index_bits) {
  if (c == kIndexType) return index_bits;
  if (c == "long long" || c == "unsigned long long") return 64;
  if (c == "int" || c == "unsigned" || c == "unsigned int" || c == "bool") return 32;
  return 0;
}

// The width of an element of a buffer of this dtype as generated code stores it (codegen/emit.h):
// 16-bit floats are unsigned shorts, read only through conversions.
int element_bits(DType t) {
  if (t == DType::kI64) return 64;
  if (t == DType::kF32 || t == DType::kF64) return 0;
  return 32;
}

using Bounds = std::map<std::string, std::pair<int64_t, int64_t>>;

struct Overflow {
  std::string what;
};

class Walker {
 public:
  Walker(const Kernel& k, const std::vector<int64_t>& blocks, int index_bits, const Bounds& uniform_bounds)
      : k_(k), bits_(index_bits), uniform_bounds_(uniform_bounds) {
    int64_t lo = 0, hi = 0;
    if (!blocks.empty()) {
      lo = *std::min_element(blocks.begin(), blocks.end());
      hi = *std::max_element(blocks.begin(), blocks.end());
    }
    bind("ft_block", ValueRange::of(lo, hi, bits_));
    bind("ft_thread", ValueRange::of(0, k.threads - 1, 32));
    for (const Param& p : k.params) buffer(p.name, element_bits(p.dtype));
    for (const Param& p : k.scratch) buffer(p.name, element_bits(p.dtype));
    for (const SharedAlloc& s : k.shared) buffer(s.name, s.dtype == DType::kI64 ? 64 : (dtype_size(s.dtype) == 2 ? 32 : 0));
    for (const ThreadLocal& t : k.thread_locals) {
      IndexExpr::Binding b;
      b.kind = IndexExpr::Binding::Kind::kLocalArray;
      b.bits = t.dtype == DType::kF32 ? 0 : 32;
      names_[t.name] = b;
    }
    collect_assigned(k.uniform);
    collect_assigned(k.body);
  }

  void run() {
    in_uniform_ = true;
    block(k_.uniform, false);
    in_uniform_ = false;
    block(k_.body, true);
  }

 private:
  void collect_assigned(const Block& b) {
    for (const Stmt& s : b) {
      if (s.kind == Stmt::Kind::kAssign) assigned_.insert(s.name);
      collect_assigned(s.body);
      collect_assigned(s.orelse);
      collect_assigned(s.uniform);
    }
  }

  void bind(const std::string& name, ValueRange r) {
    IndexExpr::Binding b;
    b.kind = IndexExpr::Binding::Kind::kSlot;
    b.index = static_cast<int>(slots_.size());
    slots_.push_back(r);
    names_[name] = b;
  }
  void buffer(const std::string& name, int bits) {
    IndexExpr::Binding b;
    b.kind = IndexExpr::Binding::Kind::kBuffer;
    b.index = 0;
    b.bits = bits;
    names_[name] = b;
  }

  ValueRange range(const std::string& text, const char* role, const Stmt& s) {
    const IndexExpr e = IndexExpr::parse(text, [&](const std::string& name) {
      const auto it = names_.find(name);
      return it == names_.end() ? IndexExpr::Binding{} : it->second;
    });
    return e.range(slots_, bits_, [&](const std::string& what) { overflow(what, role, text, s); });
  }
  // A value converted to ft_i (a let's, a loop variable's) must fit it.
  void converts(const ValueRange& r, const std::string& what, const Stmt& s) {
    if (bits_ == 32 && (r.bits == 0 || !r.fits_int())) overflow("a conversion to ft_i", "the value of", what, s);
  }
  [[noreturn]] void overflow(const std::string& what, const char* role, const std::string& text, const Stmt& s) {
    throw Overflow{what + " in " + role + " '" + text + "' (statement " + s.name + ")"};
  }

  void block(const Block& b, bool scoped) {
    std::vector<std::pair<std::string, std::optional<IndexExpr::Binding>>> shadowed;
    const auto declare = [&](const std::string& name) {
      const auto it = names_.find(name);
      if (it == names_.end()) shadowed.emplace_back(name, std::nullopt);
      else shadowed.emplace_back(name, it->second);
    };
    for (const Stmt& s : b) {
      switch (s.kind) {
        case Stmt::Kind::kComment:
        case Stmt::Kind::kBarrier:
        case Stmt::Kind::kMma:
        case Stmt::Kind::kWgmmaSync:
        case Stmt::Kind::kSetMaxNReg:
        case Stmt::Kind::kCopyAsyncCommit:
        case Stmt::Kind::kCopyAsyncWait:
        case Stmt::Kind::kFence: break;
        case Stmt::Kind::kExitUnless: range(s.a, "the exit's condition", s); break;
        case Stmt::Kind::kAtomic:
          range(s.a, "the index", s);
          range(s.b, "the operand", s);
          if (!s.d.empty()) {
            declare(s.d);
            bind(s.d, ValueRange::of(0, UINT32_MAX, 64));
          }
          break;
        case Stmt::Kind::kLet: {
          ValueRange r = range(s.a, "the let", s);
          if (const auto it = uniform_bounds_.find(s.name); in_uniform_ && it != uniform_bounds_.end() && r.bits != 0) {
            r.lo = std::max(r.lo, it->second.first);
            r.hi = std::min(r.hi, it->second.second);
          }
          const int width = ctype_bits(s.ctype, bits_);
          if (s.ctype == kIndexType) converts(r, s.a, s);
          declare(s.name);
          if (width == 0) {
            names_.erase(s.name);  // a float: not an integer in arithmetic
          } else if (assigned_.count(s.name)) {
            bind(s.name, width == 32 ? ValueRange::of(INT32_MIN, INT32_MAX, 32) : ValueRange::of(INT64_MIN, INT64_MAX, 64));
          } else {
            bind(s.name, ValueRange::of(std::max(r.lo, width == 32 ? int64_t{INT32_MIN} : INT64_MIN),
                                        std::min(r.hi, width == 32 ? int64_t{INT32_MAX} : INT64_MAX), width));
          }
          break;
        }
        case Stmt::Kind::kAssign: {
          const ValueRange r = range(s.a, "the assignment", s);
          const auto it = names_.find(s.name);
          if (it != names_.end() && it->second.kind == IndexExpr::Binding::Kind::kSlot &&
              slots_[static_cast<size_t>(it->second.index)].bits == 32 && (r.bits == 0 || !r.fits_int())) {
            overflow("a conversion to a 32-bit variable", "the assignment", s.a, s);
          }
          break;
        }
        case Stmt::Kind::kStore:
          range(s.a, "the index", s);
          range(s.b, "the stored value", s);
          break;
        case Stmt::Kind::kFor:
        case Stmt::Kind::kUniformFor: {
          const ValueRange a = range(s.a, "the start", s);
          const ValueRange e = range(s.b, "the bound", s);
          const int64_t step = s.threads ? k_.threads : 1;
          // The first value (a plus the thread index, for a loop over threads), every value inside
          // (below the bound) and the one that ends the loop (at most the bound's last plus the step).
          const int64_t spread = s.threads ? k_.threads - 1 : 0;
          const ValueRange first = ValueRange::of(a.lo, a.hi > INT64_MAX - spread ? INT64_MAX : a.hi + spread, a.bits);
          converts(first, s.a, s);
          if (bits_ == 32) {
            const bool ends = e.bits != 0 && e.hi <= int64_t{INT32_MAX} - step + 1;
            if (!ends) overflow("the last increment", "the bound", s.b, s);
          }
          // Inside the body: from the first value up to below the bound (one value when it never runs).
          const int64_t hi = std::max(first.lo, e.hi == INT64_MIN ? e.hi : e.hi - 1);
          declare(s.name);
          bind(s.name, ValueRange::of(first.lo, hi, bits_));
          block(s.body, true);
          break;
        }
        case Stmt::Kind::kIf:
          range(s.a, "the condition", s);
          block(s.body, true);
          block(s.orelse, true);
          break;
        case Stmt::Kind::kPart:
          range(s.a, "the part's condition", s);
          block(s.uniform, false);
          block(s.body, true);
          break;
        case Stmt::Kind::kWarpReduce:
          if (!s.b.empty()) range(s.b, "the guard", s);
          break;
        case Stmt::Kind::kShuffle: break;  // a float of another lane; its selection reads the lane's bits
        case Stmt::Kind::kVectorLoad:
          range(s.b, "the index", s);
          if (!s.c.empty()) range(s.c, "the guard", s);
          declare(s.name);
          names_.erase(s.name);
          break;
        case Stmt::Kind::kVectorStore: range(s.a, "the index", s); break;
        case Stmt::Kind::kLdmatrix: range(s.b, "the row address", s); break;
        case Stmt::Kind::kWgmma:
          if (!s.a_registers) range(s.b, "A's offset", s);
          range(s.d, "B's offset", s);
          break;
        case Stmt::Kind::kCopyAsync:
          range(s.a, "the shared index", s);
          range(s.c, "the index", s);
          range(s.d, "the byte count", s);
          break;
        case Stmt::Kind::kMbarrier:
          if (s.a != "fence") range(s.b, "the mbarrier's element", s);
          if (!s.c.empty()) range(s.c, "the mbarrier's operand", s);
          break;
        case Stmt::Kind::kTensorLoad: {
          range(s.a, "the shared index", s);
          range(s.e, "the mbarrier's element", s);
          for (const std::string& c : tensor_coords(s)) range(c, "a coordinate", s);  // a 32-bit int on either side
          break;
        }
      }
    }
    if (!scoped) return;
    for (auto it = shadowed.rbegin(); it != shadowed.rend(); ++it) {
      if (it->second) names_[it->first] = *it->second;
      else names_.erase(it->first);
    }
  }

  const Kernel& k_;
  const int bits_;
  const Bounds& uniform_bounds_;
  bool in_uniform_ = false;  // walking Kernel::uniform
  std::map<std::string, IndexExpr::Binding> names_;
  std::vector<ValueRange> slots_;
  std::set<std::string> assigned_;
};

}  // namespace

IndexWidth choose_index_width(Kernel& k, const std::vector<int64_t>& blocks, const Bounds& uniform_bounds) {
  IndexWidth out;
  try {
    Walker(k, blocks, 32, uniform_bounds).run();
    out.bits = 32;
  } catch (const Overflow& o) {
    out.reason = o.what;
    try {
      Walker(k, blocks, 64, uniform_bounds).run();
    } catch (const Overflow& again) {
      fail("kernel ", k.name, ": int arithmetic that may overflow even with 64-bit indices: ", again.what);
    }
  }
  k.index_bits = out.bits;
  return out;
}

}  // namespace fusetune::codegen
