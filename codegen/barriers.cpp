#include "codegen/barriers.h"

namespace fusetune::codegen {

namespace {

bool only_comments(const Block& b, size_t from, size_t to) {
  for (size_t i = from; i < to; ++i) {
    if (b[i].kind != Stmt::Kind::kComment) return false;
  }
  return true;
}

// `tail`: nothing of the kernel runs after this sequence.
int clean(Block& b, bool tail) {
  int removed = 0;
  for (Stmt& s : b) {
    if (s.kind == Stmt::Kind::kUniformFor) removed += clean(s.body, false);
  }
  // Parts: a block runs one part; after it the kernel ends when nothing follows the parts.
  size_t last_part = b.size();
  for (size_t i = 0; i < b.size(); ++i) {
    if (b[i].kind == Stmt::Kind::kPart) last_part = i;
  }
  for (size_t i = 0; i < b.size(); ++i) {
    if (b[i].kind == Stmt::Kind::kPart) removed += clean(b[i].body, tail && only_comments(b, last_part + 1, b.size()));
  }
  Block kept;
  size_t since = 0;  // statements of `kept` after its last barrier start here
  bool barrier_seen = false;
  for (size_t i = 0; i < b.size(); ++i) {
    Stmt& s = b[i];
    if (s.kind == Stmt::Kind::kBarrier) {
      const bool doubled = barrier_seen && only_comments(kept, since, kept.size());
      const bool trailing = tail && only_comments(b, i + 1, b.size());
      if (doubled || trailing) {
        ++removed;
        continue;
      }
      barrier_seen = true;
      kept.push_back(std::move(s));
      since = kept.size();
      continue;
    }
    kept.push_back(std::move(s));
  }
  b = std::move(kept);
  return removed;
}

}  // namespace

int remove_redundant_barriers(Kernel& k) { return clean(k.body, true); }

}  // namespace fusetune::codegen
