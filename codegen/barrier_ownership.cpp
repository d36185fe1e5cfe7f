#include "codegen/barrier_ownership.h"

#include <algorithm>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>

#include "codegen/index_expr.h"
#include "core/cancel.h"
#include "core/error.h"

namespace fusetune::codegen {

namespace {

// A block is compared with this many of the blocks analysed before it (the latest first) for
// being their translate.
constexpr size_t kTranslateTries = 8;
// Passes translated() makes to find how the variables of two blocks relate before giving up.
constexpr int kRelatePasses = 6;

// The analysis gives up: the reason, caught by remove_unordering_barriers.
struct GiveUp {
  std::string reason;
  bool budget = false;  // the budget ran out (a smaller question may fit)
};

// Who touched one element in one interval: the first thread and whether others did, the first
// storing thread and whether others stored.
struct Touch {
  int thread = -1;
  bool many = false;
  int writer = -1;
  bool many_writers = false;

  void add(int t, bool store) {
    if (thread < 0) thread = t;
    else if (thread != t) many = true;
    if (!store) return;
    if (writer < 0) writer = t;
    else if (writer != t) many_writers = true;
  }
  void merge(const Touch& o) {
    if (o.thread >= 0) add(o.thread, false);
    if (o.many) many = true;
    if (o.writer >= 0) {
      if (writer < 0) writer = o.writer;
      else if (writer != o.writer) many_writers = true;
    }
    if (o.many_writers) many_writers = true;
  }
};

// True when some thread of `a` and a different thread of `b` touch the element with a store on
// either side.
bool hands_over(const Touch& a, const Touch& b) {
  const auto only = [](const Touch& t, int who) { return !t.many && t.thread == who; };
  if (a.writer >= 0 && (a.many_writers || !only(b, a.writer))) return true;
  if (b.writer >= 0 && (b.many_writers || !only(a, b.writer))) return true;
  return false;
}

using Interval = std::unordered_map<uint64_t, Touch>;  // (buffer << 40 | element) -> who touched it

// One statement of the kernel with its expressions parsed.
struct StmtNode {
  const Stmt* src = nullptr;
  Stmt::Kind kind = Stmt::Kind::kComment;
  int slot = -1;    // kLet / kAssign of an integer variable, loop variables
  int buffer = -1;  // kStore, kVectorLoad/Store, kLdmatrix, kCopyAsync: the buffer
  int elements = 0;  // kCopyAsync: the shared elements its bytes fill
  IndexExpr a, b;   // what the statement evaluates (see compile())
  bool has_a = false, has_b = false;
  bool candidate = false;  // a barrier of the kernel's body or of a top-level uniform loop's body
  bool barriers = false;   // holds a barrier
  // Does anything the analysis sees: holds a barrier, an access of a tracked buffer or an
  // assignment of an integer variable. A loop or branch that does not is not run at all.
  bool touches = false;
  std::vector<StmtNode> body, orelse;
};

struct Buffer {
  std::string name;
  bool tracked = false;  // shared allocations and output parameters
};

class Analysis {
 public:
  // loop_barriers: the barriers of top-level uniform loops are candidates too (every iteration of
  // such a loop is run); else they stay and only a loop's first and last iterations are run.
  Analysis(const Kernel& k, int64_t budget, bool loop_barriers) : k_(k), budget_(budget), loop_barriers_(loop_barriers) {
    bind("ft_thread", slot());
    bind("ft_block", slot());
    names_["ft_block"].invariant = true;
    for (const Param& p : k.params) add_buffer(p.name, p.output);
    for (const Param& p : k.scratch) add_buffer(p.name, true);
    publish_ = static_cast<int>(buffers_.size());
    buffers_.push_back({"the block's publication of its global stores", true});
    for (const SharedAlloc& s : k.shared) add_buffer(s.name, true);
    for (const ThreadLocal& t : k.thread_locals) names_[t.name] = {IndexExpr::Binding::Kind::kLocalArray, -1};
    invariant_lets_ = true;
    uniform_ = compile(k.uniform, 2, false);  // its lets stay visible in the body
    invariant_lets_ = false;
    uniform_slots_ = slots_;
    body_ = compile(k.body, 0);
  }

  // The candidate barriers to remove. Blocks are analysed one at a time, in order: a barrier
  // that hands an element over in one block stays, and the rest are decided again in the next
  // block with it kept. Keeping a barrier only shrinks the interval before the next one, so a
  // barrier found removable in an earlier block stays removable; analysis ends as soon as every
  // barrier stays (the blocks after are not looked at). A block that is a translate of a block
  // analysed (translated()) is not analysed again: its threads touch the same elements, each
  // buffer's moved by one offset, so it hands over what that block does. `translates` counts
  // them.
  std::set<const Stmt*> run(const std::vector<int64_t>& blocks, int64_t& translates) {
    std::set<const Stmt*> removable;
    for (const StmtNode& n : body_) {
      if (n.kind == Stmt::Kind::kBarrier) removable.insert(n.src);
      for (const StmtNode& kid : n.body) {
        if (kid.kind == Stmt::Kind::kBarrier && kid.candidate && loop_barriers_) removable.insert(kid.src);
      }
    }
    removable_ = &removable;
    std::vector<std::vector<IndexValue>> analysed;  // the block-uniform values of the blocks analysed
    int64_t first_cost = 0;  // the steps the first block analysed took
    for (const int64_t block : blocks) {
      if (removable.empty()) break;
      cancellation_point();  // a grid of 100,000 blocks: planning is given up between two
      std::vector<IndexValue> env(static_cast<size_t>(slots_));
      env[1] = block;
      ++block_stamp_;  // invariant subexpressions are evaluated afresh for this block
      intervals_ = nullptr;
      exec(uniform_, env);
      bool translate = false;
      for (size_t r = analysed.size(); r-- > 0 && r + kTranslateTries >= analysed.size() && !translate && relate_work_ < budget_;) {
        translate = translated(analysed[r], env);
      }
      if (translate) {
        ++translates;
        continue;
      }
      // The first block is a whole tile, usually as large as any: when one more block at its
      // cost would not fit in the budget, stop now rather than after spending it.
      if (!analysed.empty() && work_ + first_cost > budget_) {
        throw GiveUp{"block " + std::to_string(block) + " would take the analysis past " + std::to_string(budget_) +
                         " steps (" + std::to_string(analysed.size()) + " blocks analysed, not translates of each other, the first in " +
                         std::to_string(first_cost) + ")",
                     true};
      }
      analyse(block, env, removable);
      if (analysed.empty()) first_cost = work_;
      analysed.push_back(std::move(env));
    }
    return removable;
  }

  // Runs every thread of the block whose block-uniform values are `env` through the statements
  // that can matter and keeps, out of `removable`, the barriers across which it hands an element
  // over.
  void analyse(int64_t block, const std::vector<IndexValue>& env, std::set<const Stmt*>& removable) {
    ++block_stamp_;
    thread_ = 0;
    ordinal_ = 0;
    const std::vector<bool> relevant = relevant_statements(removable);
    std::vector<const Stmt*> barriers;  // per ordinal: the barrier statement
    std::vector<Interval> intervals(1);  // per interval between barriers: who touched what
    for (int t = 0; t < k_.threads; ++t) {
      std::vector<IndexValue> e = env;
      e[0] = t;
      thread_ = t;
      ordinal_ = 0;
      copies_open_.clear();
      copy_groups_.clear();
      intervals_ = &intervals;
      order_ = t == 0 ? &barriers : nullptr;
      for (size_t j = 0; j < body_.size(); ++j) {
        if (relevant[j]) {
          exec_one(body_[j], e);
        } else {
          pass_barriers(body_[j], e);
        }
      }
      if (static_cast<size_t>(ordinal_) != barriers.size()) {
        throw GiveUp{"thread " + std::to_string(t) + " of block " + std::to_string(block) + " reaches " +
                     std::to_string(ordinal_) + " barriers, thread 0 " + std::to_string(barriers.size())};
      }
    }
    keep_handing_over(barriers, intervals, removable);
  }

  // True when every thread of the block whose block-uniform values are `second` touches the
  // elements the same thread touches in the block of `first`, each buffer's moved by one offset,
  // on the same path (the same branches, loop trips and barriers): the block hands over exactly
  // what that one does. Decided from the kernel's text, not by running threads: each variable's
  // values relate by Shift (the same, or moved by a constant: a tile's origin), found for the
  // block-uniform ones from their values and for the others from the expressions assigning them
  // (flow-insensitively, until no relation changes); every branch and loop bound must be the same,
  // every subscript of a tracked buffer moved by that buffer's one offset.
  bool translated(const std::vector<IndexValue>& first, const std::vector<IndexValue>& second) {
    std::vector<Shift> slots(static_cast<size_t>(slots_), Shift::same());
    for (size_t s = 1; s < static_cast<size_t>(uniform_slots_); ++s) {
      if (first[s].has_value() != second[s].has_value()) return false;
      slots[s] = first[s] ? Shift::of(static_cast<int64_t>(static_cast<uint64_t>(*second[s]) - static_cast<uint64_t>(*first[s])))
                          : Shift::same();
    }
    // Passes that read each assignment as soon as it is made find the relations (a statement
    // reads the variables assigned before it); a last pass reading them frozen proves that they
    // hold: every assignment gives what is assumed, every access and branch relates. A pass in
    // which every assignment gave what was assumed read only assumed relations: it was that
    // proof (interior tiles: usually the first pass).
    for (int pass = 0;; ++pass) {
      if (pass == kRelatePasses) return false;
      Relating r(slots, first, buffers_.size(), uniform_slots_, false);
      const bool ok = relate(body_, r);
      if (!r.departed) return ok;
      if (r.next == slots) break;
      slots = std::move(r.next);
    }
    Relating r(slots, first, buffers_.size(), uniform_slots_, true);
    return relate(body_, r) && r.next == slots;
  }

 private:
  // How translated() relates two blocks in one pass over the body.
  struct Relating {
    Relating(const std::vector<Shift>& assumed, const std::vector<IndexValue>& first_env, size_t buffer_count,
             int uniform_slots, bool proving)
        : slots(assumed), next(assumed), assigned(assumed.size(), false), buffers(buffer_count), first(first_env), proof(proving) {
      for (size_t s = 0; s < static_cast<size_t>(uniform_slots); ++s) assigned[s] = true;
    }
    const std::vector<Shift>& slots;  // the relations assumed
    std::vector<Shift> next;           // the relations the assignments give
    std::vector<bool> assigned;        // this pass assigned the slot
    bool departed = false;             // an assignment gave other than the relation assumed
    std::vector<std::optional<Shift>> buffers;  // each tracked buffer's offset so far
    const std::vector<IndexValue>& first;
    const bool proof;  // reads the assumed relations and stops at the first mismatch
    const std::vector<Shift>& reads() const { return proof ? slots : next; }
  };

  // One pass of translated() over `nodes`: false at a mismatch (a pass that is not the proof
  // goes on, to find the relations).
  bool relate(const std::vector<StmtNode>& nodes, Relating& r) {
    bool ok = true;
    const auto record = [&](int buffer, Shift index) {
      if (!buffers_[static_cast<size_t>(buffer)].tracked) return;
      std::optional<Shift>& b = r.buffers[static_cast<size_t>(buffer)];
      b = b ? b->join(index) : index;
      ok = ok && b->known();
    };
    const IndexExpr::ShiftVisitor visit = record;  // made once: a std::function per expression allocates
    const auto rel = [&](const IndexExpr& e) { return e.shift(r.reads(), r.first, visit); };
    const auto assign = [&](int slot, Shift v) {
      const auto s = static_cast<size_t>(slot);
      r.next[s] = r.assigned[s] ? r.next[s].join(v) : v;
      r.assigned[s] = true;
      r.departed = r.departed || !(v == r.slots[s]);
    };
    for (const StmtNode& n : nodes) {
      ++relate_work_;
      switch (n.kind) {
        case Stmt::Kind::kLet:
        case Stmt::Kind::kAssign: {
          const Shift v = rel(n.a);
          if (n.slot >= 0) assign(n.slot, v);
          break;
        }
        case Stmt::Kind::kStore:
          rel(n.b);
          record(n.buffer, rel(n.a));
          break;
        case Stmt::Kind::kFor:
        case Stmt::Kind::kUniformFor: {
          if (!n.touches) break;
          const Shift lo = rel(n.a), hi = rel(n.b);
          ok = ok && lo.known() && lo == hi;  // else trips that may differ
          assign(n.slot, lo);
          ok = relate(n.body, r) && ok;
          break;
        }
        case Stmt::Kind::kIf:
        case Stmt::Kind::kPart:
          if (!n.touches) break;
          ok = rel(n.a) == Shift::same() && ok;  // else a branch that may go the other way
          ok = relate(n.body, r) && ok;
          ok = relate(n.orelse, r) && ok;
          break;
        case Stmt::Kind::kVectorLoad:
        case Stmt::Kind::kLdmatrix: record(n.buffer, rel(n.b)); break;
        case Stmt::Kind::kVectorStore: record(n.buffer, rel(n.a)); break;
        case Stmt::Kind::kCopyAsync:
          rel(n.b);
          record(n.buffer, rel(n.a));
          break;
        case Stmt::Kind::kFence: record(publish_, Shift::same()); break;
        case Stmt::Kind::kAtomic:
          rel(n.b);
          record(publish_, Shift::same());
          record(n.buffer, rel(n.a));
          break;
        case Stmt::Kind::kExitUnless: rel(n.a); break;  // both blocks are followed on the path that goes on
        default: break;
      }
      if (!ok && r.proof) return false;
    }
    return ok;
  }

  // The top-level statements whose accesses can matter: those between two barriers that stay
  // (a top-level barrier not removable, a uniform loop's barriers) with a removable barrier
  // among them. A uniform loop with barriers none of which is removable borders two such
  // stretches (its first iteration's head, its last iteration's tail) and matters when either
  // does; one holding a removable barrier is run in full, like a removable barrier.
  std::vector<bool> relevant_statements(const std::set<const Stmt*>& removable) const {
    std::vector<bool> relevant(body_.size(), false);
    size_t start = 0;  // the first statement of the current stretch
    bool wanted = false;
    auto close = [&](size_t end) {  // the stretch [start, end]
      if (!wanted) return;
      for (size_t j = start; j <= end && j < body_.size(); ++j) relevant[j] = true;
    };
    for (size_t j = 0; j < body_.size(); ++j) {
      const StmtNode& n = body_[j];
      if ((n.kind == Stmt::Kind::kBarrier && removable.count(n.src) != 0) || holds_removable(n)) {
        wanted = true;
      } else if (n.barriers) {
        close(j);
        start = j;  // a uniform loop also opens the next stretch; a barrier opens it after itself
        if (n.kind == Stmt::Kind::kBarrier) ++start;
        wanted = false;
      }
    }
    close(body_.size());
    return relevant;
  }

  // A uniform loop whose body holds a barrier still removable: run in every iteration.
  bool holds_removable(const StmtNode& n) const {
    if (n.kind != Stmt::Kind::kUniformFor || removable_ == nullptr) return false;
    return std::any_of(n.body.begin(), n.body.end(),
                       [&](const StmtNode& kid) { return kid.kind == Stmt::Kind::kBarrier && removable_->count(kid.src) != 0; });
  }

  // A top-level statement that does not matter: only the barriers it would reach count (the same
  // number exec_one's schedule of a uniform loop reaches).
  void pass_barriers(const StmtNode& n, std::vector<IndexValue>& env) {
    if (n.kind == Stmt::Kind::kBarrier) {
      exec_one(n, env);
      return;
    }
    if (!n.barriers) return;
    if (n.kind != Stmt::Kind::kUniformFor) throw GiveUp{"a barrier inside a top-level statement other than a uniform loop"};
    const int64_t trips = std::max<int64_t>(0, bound(n.b, env, *n.src) - bound(n.a, env, *n.src));
    int per_iteration = 0;
    for (const StmtNode& kid : n.body) {
      if (kid.kind == Stmt::Kind::kBarrier) ++per_iteration;
      else if (kid.barriers) throw GiveUp{"a barrier nested inside a uniform loop's statement"};
    }
    const int64_t hits = trips >= 2 ? 1 + per_iteration : trips * per_iteration;
    for (int64_t h = 0; h < hits; ++h) reach_barrier(nullptr);
  }

  // The running thread reaches a barrier (`barrier`: its statement, or nullptr for one that always
  // stays): the next interval begins. Thread 0 records the order; the others must follow it.
  void reach_barrier(const Stmt* barrier) {
    if (order_) order_->push_back(barrier);
    else if (static_cast<size_t>(ordinal_) + 1 >= intervals_->size()) throw GiveUp{"threads reach different barriers"};
    ++ordinal_;
    if (intervals_->size() <= static_cast<size_t>(ordinal_)) intervals_->emplace_back();
  }

  int slot() { return slots_++; }
  void bind(const std::string& name, int s) { names_[name] = {IndexExpr::Binding::Kind::kSlot, s}; }
  void add_buffer(const std::string& name, bool tracked) {
    names_[name] = {IndexExpr::Binding::Kind::kBuffer, static_cast<int>(buffers_.size())};
    buffers_.push_back({name, tracked});
  }
  IndexExpr parse(const std::string& text) {
    return IndexExpr::parse(text, [&](const std::string& name) {
      const auto it = names_.find(name);
      return it == names_.end() ? IndexExpr::Binding{} : it->second;
    });
  }
  int buffer_of(const std::string& name) const {
    const auto it = names_.find(name);
    check(it != names_.end() && it->second.kind == IndexExpr::Binding::Kind::kBuffer, "index analysis: '", name,
          "' is not a buffer of kernel ", k_.name);
    return it->second.index;
  }
  static bool integer_ctype(const std::string& c) {
    return c != "float" && c != "double" && c != vector_ctype(DType::kF32) && c != vector_ctype(DType::kF16) &&
           c != vector_ctype(DType::kF32, 2) && c != vector_ctype(DType::kF16, 2);
  }

  // depth: 0 for the kernel's body, 1 for a top-level uniform loop's body, 2 below.
  std::vector<StmtNode> compile(const Block& b, int depth, bool scoped = true) {
    std::vector<StmtNode> out;
    std::vector<std::pair<std::string, IndexExpr::Binding>> shadowed;  // restored at the block's end
    auto declare = [&](const std::string& name, IndexExpr::Binding binding) {
      const auto it = names_.find(name);
      shadowed.emplace_back(name, it == names_.end() ? IndexExpr::Binding{} : it->second);
      names_[name] = binding;
    };
    for (const Stmt& s : b) {
      StmtNode n;
      n.src = &s;
      n.kind = s.kind;
      switch (s.kind) {
        case Stmt::Kind::kComment:
        case Stmt::Kind::kWarpReduce:
        case Stmt::Kind::kShuffle:  // registers of the warp's lanes only
        case Stmt::Kind::kMma:
        case Stmt::Kind::kSetMaxNReg: continue;
        case Stmt::Kind::kLet:
          n.a = parse(s.a), n.has_a = true;
          if (integer_ctype(s.ctype)) {
            n.slot = slot();
            declare(s.name, {IndexExpr::Binding::Kind::kSlot, n.slot, invariant_lets_});
          } else {
            declare(s.name, {});
          }
          break;
        case Stmt::Kind::kAssign: {
          n.a = parse(s.a), n.has_a = true;
          const auto it = names_.find(s.name);
          if (it != names_.end() && it->second.kind == IndexExpr::Binding::Kind::kSlot) n.slot = it->second.index;
          break;
        }
        case Stmt::Kind::kStore:
          n.buffer = buffer_of(s.name);
          n.a = parse(s.a), n.has_a = true;
          n.b = parse(s.b), n.has_b = true;
          break;
        case Stmt::Kind::kFor:
        case Stmt::Kind::kUniformFor: {
          n.a = parse(s.a), n.has_a = true;
          n.b = parse(s.b), n.has_b = true;
          n.slot = slot();
          const auto it = names_.find(s.name);
          const IndexExpr::Binding old = it == names_.end() ? IndexExpr::Binding{} : it->second;
          bind(s.name, n.slot);
          n.body = compile(s.body, depth == 0 && s.kind == Stmt::Kind::kUniformFor ? 1 : 2);
          names_[s.name] = old;
          break;
        }
        case Stmt::Kind::kIf:
          n.a = parse(s.a), n.has_a = true;
          n.body = compile(s.body, 2);
          n.orelse = compile(s.orelse, 2);
          break;
        case Stmt::Kind::kPart:
          n.a = parse(s.a), n.has_a = true;
          n.body = compile(s.uniform, 2);
          for (StmtNode& m : compile(s.body, 2)) n.body.push_back(std::move(m));
          break;
        case Stmt::Kind::kBarrier: n.candidate = depth <= 1; break;
        case Stmt::Kind::kVectorLoad:
          n.buffer = buffer_of(s.a);
          // A guarded load reads an input parameter (verify_ir), which no barrier orders.
          if (!s.c.empty() && buffers_[static_cast<size_t>(n.buffer)].tracked) throw GiveUp{"a guarded load of '" + s.a + "'"};
          n.b = parse(s.b), n.has_b = true;
          declare(s.name, {});
          break;
        case Stmt::Kind::kVectorStore:
          n.buffer = buffer_of(s.name);
          n.a = parse(s.a), n.has_a = true;
          break;
        case Stmt::Kind::kLdmatrix:
          n.buffer = buffer_of(s.a);
          n.b = parse(s.b), n.has_b = true;
          break;
        case Stmt::Kind::kCopyAsync: {  // a: the shared index; b: the global index (its bytes read nothing tracked)
          n.buffer = buffer_of(s.name);
          const auto alloc = std::find_if(k_.shared.begin(), k_.shared.end(), [&](const SharedAlloc& x) { return x.name == s.name; });
          check(alloc != k_.shared.end(), "index analysis: cp.async into '", s.name, "', not a shared allocation of kernel ", k_.name);
          n.elements = s.copy_bytes / static_cast<int>(dtype_size(alloc->dtype));
          n.a = parse(s.a), n.has_a = true;
          n.b = parse(s.c), n.has_b = true;
          break;
        }
        case Stmt::Kind::kCopyAsyncCommit:
        case Stmt::Kind::kCopyAsyncWait: break;
        // Its operands are read through descriptors, by the warpgroup as one: not an access of
        // one thread that the analysis could follow.
        case Stmt::Kind::kWgmma:
        case Stmt::Kind::kWgmmaSync: throw GiveUp{"a wgmma reads shared memory through matrix descriptors"};
        case Stmt::Kind::kMbarrier:
        case Stmt::Kind::kTensorLoad: throw GiveUp{"tensor copies land in shared memory where an mbarrier wait observes them"};
        // Blocks that cooperate (codegen/stages/split_k.h): a fence stores, and an atomic loads, the
        // element of a pseudo-buffer that stands for the block's global stores being published, so
        // the barrier between other threads' fences and one thread's atomic (and the one between
        // the atomic and the fences after it) orders something; the atomic also stores its element.
        case Stmt::Kind::kFence: n.buffer = publish_; break;
        case Stmt::Kind::kAtomic:
          n.buffer = buffer_of(s.name);
          n.a = parse(s.a), n.has_a = true;
          n.b = parse(s.b), n.has_b = true;
          if (!s.d.empty()) declare(s.d, {});  // the old value: unknown
          break;
        // Only the blocks for which it holds go on; the analysis follows them (the others run a
        // prefix of what they run).
        case Stmt::Kind::kExitUnless: n.a = parse(s.a), n.has_a = true; break;
      }
      n.barriers = n.kind == Stmt::Kind::kBarrier;
      n.touches = n.barriers || (n.slot >= 0 && n.kind == Stmt::Kind::kAssign) || n.kind == Stmt::Kind::kCopyAsyncWait ||
                  n.kind == Stmt::Kind::kExitUnless ||
                  n.kind == Stmt::Kind::kCopyAsyncCommit ||
                  (n.buffer >= 0 && buffers_[static_cast<size_t>(n.buffer)].tracked) || loads_tracked(n.a) ||
                  loads_tracked(n.b);
      for (const std::vector<StmtNode>* kids : {&n.body, &n.orelse}) {
        for (const StmtNode& kid : *kids) {
          n.barriers = n.barriers || kid.barriers;
          n.touches = n.touches || kid.touches;
        }
      }
      out.push_back(std::move(n));
    }
    if (scoped) {
      for (auto it = shadowed.rbegin(); it != shadowed.rend(); ++it) names_[it->first] = it->second;
    }
    return out;
  }

  bool loads_tracked(const IndexExpr& e) const {
    for (const int b : e.buffers()) {
      if (buffers_[static_cast<size_t>(b)].tracked) return true;
    }
    return false;
  }

  void touch(int buffer, IndexValue index, int elements, bool store) {
    if (!buffers_[static_cast<size_t>(buffer)].tracked || intervals_ == nullptr) return;
    if (!index) throw GiveUp{"an index into '" + buffers_[static_cast<size_t>(buffer)].name + "' that is not known"};
    if ((work_ += elements) > budget_) over_budget();
    Interval& iv = (*intervals_)[static_cast<size_t>(ordinal_)];
    for (int e = 0; e < elements; ++e) {
      iv[(static_cast<uint64_t>(buffer) << 40) | static_cast<uint64_t>(*index + e)].add(thread_, store);
    }
  }

  IndexValue eval(const IndexExpr& e, const std::vector<IndexValue>& env) {
    return e.eval(env, [&](int buffer, IndexValue index) { touch(buffer, index, 1, false); }, block_stamp_);
  }

  int64_t bound(const IndexExpr& e, const std::vector<IndexValue>& env, const Stmt& s) {
    const IndexValue v = eval(e, env);
    if (!v) throw GiveUp{"the bounds of the loop over '" + s.name + "' are not known"};
    return *v;
  }

  [[noreturn]] void over_budget() const {
    throw GiveUp{"more than " + std::to_string(budget_) + " loop iterations and element accesses", true};
  }

  void iterate(const StmtNode& loop, std::vector<IndexValue>& env, int64_t i) {
    if (++work_ > budget_) over_budget();
    env[static_cast<size_t>(loop.slot)] = i;
  }

  void exec(const std::vector<StmtNode>& nodes, std::vector<IndexValue>& env) {
    for (const StmtNode& n : nodes) {
      if (stopped_) return;
      exec_one(n, env);
    }
  }

  void exec_one(const StmtNode& n, std::vector<IndexValue>& env) {
    switch (n.kind) {
      case Stmt::Kind::kLet:
      case Stmt::Kind::kAssign: {
        const IndexValue v = eval(n.a, env);
        if (n.slot >= 0) env[static_cast<size_t>(n.slot)] = v;
        break;
      }
      case Stmt::Kind::kStore: {
        eval(n.b, env);
        touch(n.buffer, eval(n.a, env), 1, true);
        break;
      }
      case Stmt::Kind::kFor:
      case Stmt::Kind::kUniformFor: {
        if (!n.touches) break;
        const bool threads = n.kind == Stmt::Kind::kFor && n.src->threads;
        const int64_t lo = bound(n.a, env, *n.src) + (threads ? thread_ : 0);
        const int64_t hi = bound(n.b, env, *n.src);  // loop-invariant in every loop the stages emit
        const int64_t step = threads ? k_.threads : 1;
        if (n.barriers && hi - lo >= 2 && !holds_removable(n)) {
          // A uniform loop whose barriers all stay: only its first iteration up to its first
          // barrier and its last iteration border the intervals of top-level barriers; the
          // intervals in between lie between barriers that stay, and are not run.
          iterate(n, env, lo);
          stop_at_barrier_ = true;
          exec(n.body, env);
          stop_at_barrier_ = false;
          if (!stopped_) throw GiveUp{"a uniform loop whose barrier is not reached"};
          stopped_ = false;
          iterate(n, env, hi - 1);
          exec(n.body, env);
          break;
        }
        for (int64_t i = lo; i < hi; i += step) {
          iterate(n, env, i);
          exec(n.body, env);
        }
        break;
      }
      case Stmt::Kind::kIf:
      case Stmt::Kind::kPart: {
        if (!n.touches) break;
        const IndexValue c = eval(n.a, env);
        if (!c && n.barriers) {
          throw GiveUp{"a branch holding a barrier on a condition that is not known"};
        }
        if (!c || *c != 0) exec(n.body, env);
        if (!c || *c == 0) exec(n.orelse, env);
        break;
      }
      case Stmt::Kind::kBarrier:
        if (intervals_ == nullptr) throw GiveUp{"a barrier among the block-uniform statements"};
        if (stop_at_barrier_) stopped_ = true;
        reach_barrier(n.src);
        break;
      case Stmt::Kind::kFence: touch(publish_, 0, 1, true); break;
      case Stmt::Kind::kAtomic:
        eval(n.b, env);
        touch(publish_, 0, 1, false);
        touch(n.buffer, eval(n.a, env), 1, true);
        break;
      case Stmt::Kind::kExitUnless: eval(n.a, env); break;
      case Stmt::Kind::kVectorLoad: touch(n.buffer, eval(n.b, env), vector_lanes(n.src->dtype), false); break;
      case Stmt::Kind::kVectorStore: touch(n.buffer, eval(n.a, env), stmt_lanes(*n.src), true); break;
      case Stmt::Kind::kLdmatrix:
        // Lanes 0 .. 8 * matrices - 1 give a row each: 8 consecutive 16-bit elements.
        if (thread_ % kWarpSize < 8 * n.src->matrices) touch(n.buffer, eval(n.b, env), 8, false);
        break;
      // An asynchronous copy may store its elements at any moment from its issue until the
      // thread's wait lands it: a store in the interval it is issued in (a read by another thread
      // before it must stay ordered before the issue) and in the interval the wait runs in (a
      // read after it must follow the wait). Zero-filled bytes are stored too.
      case Stmt::Kind::kCopyAsync: {
        eval(n.b, env);
        const auto at = eval(n.a, env);
        touch(n.buffer, at, n.elements, true);
        copies_open_.push_back({n.buffer, at, n.elements});
        break;
      }
      case Stmt::Kind::kCopyAsyncCommit:
        copy_groups_.push_back(std::move(copies_open_));
        copies_open_.clear();
        break;
      case Stmt::Kind::kCopyAsyncWait:
        while (copy_groups_.size() > static_cast<size_t>(n.src->groups)) {
          for (const auto& [buffer, index, elements] : copy_groups_.front()) touch(buffer, index, elements, true);
          copy_groups_.pop_front();
        }
        break;
      default: break;
    }
  }

  // Drops from `removable` the barriers of one block's run that hand an element over: walking the
  // barriers in order, the interval before a barrier grows by the interval after it when it is
  // removed, and starts afresh after a barrier that stays.
  static void keep_handing_over(const std::vector<const Stmt*>& barriers, std::vector<Interval>& intervals,
                                std::set<const Stmt*>& removable) {
    Interval before = std::move(intervals[0]);
    for (size_t j = 0; j < barriers.size(); ++j) {
      Interval& after = intervals[j + 1];
      bool handed = removable.count(barriers[j]) == 0;
      if (!handed) {
        const bool after_smaller = after.size() < before.size();
        const Interval& small = after_smaller ? after : before;
        const Interval& large = after_smaller ? before : after;
        for (const auto& [key, t] : small) {
          const auto it = large.find(key);
          if (it != large.end() && hands_over(after_smaller ? it->second : t, after_smaller ? t : it->second)) {
            handed = true;
            break;
          }
        }
      }
      if (handed) {
        removable.erase(barriers[j]);
        before = std::move(after);
      } else {
        for (const auto& [key, t] : after) before[key].merge(t);
      }
    }
  }

  const Kernel& k_;
  const int64_t budget_;
  const bool loop_barriers_;
  std::map<std::string, IndexExpr::Binding> names_;
  std::vector<Buffer> buffers_;
  int slots_ = 0;
  int publish_ = -1;  // the pseudo-buffer of fences and atomics
  int uniform_slots_ = 0;  // slots below: ft_thread, ft_block and the block-uniform lets
  std::vector<StmtNode> uniform_, body_;
  // The thread being run.
  int thread_ = 0;
  int ordinal_ = 0;
  std::vector<Interval>* intervals_ = nullptr;
  std::vector<const Stmt*>* order_ = nullptr;
  // The running thread's asynchronous copies (buffer, shared index, elements): not yet committed, and the
  // committed groups not yet waited for, oldest first.
  struct Copy {
    int buffer;
    IndexValue index;
    int elements;
  };
  std::vector<Copy> copies_open_;
  std::deque<std::vector<Copy>> copy_groups_;
  int64_t work_ = 0;  // loop iterations and element accesses so far
  int64_t relate_work_ = 0;  // statements translated() went through: past the budget, it is not asked
  uint64_t block_stamp_ = 0;
  const std::set<const Stmt*>* removable_ = nullptr;  // the barriers still removable (run())
  bool invariant_lets_ = false;  // compiling the block-uniform lets
  bool stop_at_barrier_ = false;  // running a uniform loop's first iteration: stop at its first barrier
  bool stopped_ = false;
};

}  // namespace

OwnershipResult remove_unordering_barriers(Kernel& k, const std::vector<int64_t>& blocks, int64_t budget) {
  OwnershipResult result;
  std::set<const Stmt*> removed;
  // Loops' barriers first; when running every iteration does not fit the budget, the top-level
  // barriers alone (their loops' middle iterations are not run).
  for (const bool loop_barriers : {true, false}) {
    try {
      Analysis analysis(k, budget, loop_barriers);
      result.translates = 0;
      removed = analysis.run(blocks, result.translates);
      result.reason.clear();
      break;
    } catch (const GiveUp& g) {
      result.reason = g.reason;
      if (!g.budget) return result;
    }
  }
  if (!result.reason.empty()) return result;
  result.analysed = true;
  const auto drop = [&](Block& b) {
    Block kept;
    for (Stmt& s : b) {
      if (removed.count(&s) == 0) kept.push_back(std::move(s));
    }
    result.removed += static_cast<int>(b.size() - kept.size());
    b = std::move(kept);
  };
  for (Stmt& s : k.body) {
    if (s.kind == Stmt::Kind::kUniformFor) drop(s.body);
  }
  drop(k.body);  // after the loops: their statements' addresses are the ones recorded
  return result;
}

}  // namespace fusetune::codegen
