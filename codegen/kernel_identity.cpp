#include "codegen/kernel_identity.h"

#include <cctype>
#include <map>

#include "codegen/emit.h"

namespace fusetune::codegen {

namespace {

class Renamer {
 public:
  void declare(const std::string& name) {
    if (!name.empty()) names_.emplace(name, "ftc_" + std::to_string(names_.size()));
  }
  void declare_all(const Block& block) {
    for (const Stmt& s : block) {
      switch (s.kind) {
        case Stmt::Kind::kLet:
        case Stmt::Kind::kFor:
        case Stmt::Kind::kUniformFor:
        case Stmt::Kind::kVectorLoad: declare(s.name); break;
        case Stmt::Kind::kAtomic: declare(s.d); break;
        default: break;
      }
      declare_all(s.uniform);
      declare_all(s.body);
      declare_all(s.orelse);
    }
  }
  // `text` with every declared name (a whole identifier) replaced; numbers (1LL, 0.5f) are kept.
  std::string rename(const std::string& text) const {
    std::string out;
    for (size_t i = 0; i < text.size();) {
      const auto c = static_cast<unsigned char>(text[i]);
      size_t j = i + 1;
      if (std::isalpha(c) || c == '_') {
        while (j < text.size() && (std::isalnum(static_cast<unsigned char>(text[j])) || text[j] == '_')) ++j;
        const auto it = names_.find(text.substr(i, j - i));
        out += it == names_.end() ? text.substr(i, j - i) : it->second;
      } else {
        if (std::isdigit(c)) {
          while (j < text.size() && (std::isalnum(static_cast<unsigned char>(text[j])) || text[j] == '.' || text[j] == '_')) ++j;
        }
        out += text.substr(i, j - i);
      }
      i = j;
    }
    return out;
  }
  // The block without comments, its statements' names and expressions renamed.
  Block rename_all(const Block& block) const {
    Block out;
    for (const Stmt& s : block) {
      if (s.kind == Stmt::Kind::kComment) continue;
      Stmt r = s;
      for (std::string* field : {&r.name, &r.a, &r.b, &r.c, &r.d, &r.e}) *field = rename(*field);
      r.uniform = rename_all(s.uniform);
      r.body = rename_all(s.body);
      r.orelse = rename_all(s.orelse);
      out.push_back(std::move(r));
    }
    return out;
  }

 private:
  std::map<std::string, std::string> names_;
};

}  // namespace

std::string canonical_text(const Kernel& k) {
  Renamer r;
  for (const Param& p : k.params) r.declare(p.name);
  for (const Param& p : k.scratch) r.declare(p.name);
  for (const TensorMap& m : k.tensor_maps) r.declare(m.name);
  for (const SharedAlloc& s : k.shared) r.declare(s.name);
  for (const ThreadLocal& t : k.thread_locals) r.declare(t.name);
  r.declare_all(k.uniform);
  r.declare_all(k.body);
  Kernel c = k;
  c.name.clear();
  for (Param& p : c.params) p.name = r.rename(p.name);
  for (Param& p : c.scratch) p.name = r.rename(p.name);
  for (TensorMap& m : c.tensor_maps) {
    m.name = r.rename(m.name);
    m.source = r.rename(m.source);
  }
  for (SharedAlloc& s : c.shared) s.name = r.rename(s.name);
  for (ThreadLocal& t : c.thread_locals) t.name = r.rename(t.name);
  c.uniform = r.rename_all(k.uniform);
  c.body = r.rename_all(k.body);
  return emit_kernel(c);
}

}  // namespace fusetune::codegen
