#include "codegen/kernel_ir.h"

#include <sstream>

#include "core/error.h"
#include "core/inert_text.h"

namespace fusetune::codegen {

Stmt comment(std::string text) {
  Stmt s;
  s.kind = Stmt::Kind::kComment;
  s.a = inert_comment(text);
  return s;
}

Stmt let(std::string ctype, std::string name, std::string value) {
  Stmt s;
  s.kind = Stmt::Kind::kLet;
  s.ctype = std::move(ctype);
  s.name = std::move(name);
  s.a = std::move(value);
  return s;
}

Stmt assign(std::string name, std::string value) {
  Stmt s;
  s.kind = Stmt::Kind::kAssign;
  s.name = std::move(name);
  s.a = std::move(value);
  return s;
}

Stmt store(std::string buffer, std::string index, std::string value) {
  Stmt s;
  s.kind = Stmt::Kind::kStore;
  s.name = std::move(buffer);
  s.a = std::move(index);
  s.b = std::move(value);
  return s;
}

Stmt serial_for(std::string var, std::string lo, std::string hi, Block body, int unroll) {
  Stmt s;
  s.kind = Stmt::Kind::kFor;
  s.unroll = unroll;
  s.name = std::move(var);
  s.a = std::move(lo);
  s.b = std::move(hi);
  s.body = std::move(body);
  return s;
}

Stmt thread_for(std::string var, std::string lo, std::string hi, Block body) {
  Stmt s = serial_for(std::move(var), std::move(lo), std::move(hi), std::move(body));
  s.threads = true;
  return s;
}

Stmt if_then(std::string cond, Block body, Block orelse) {
  Stmt s;
  s.kind = Stmt::Kind::kIf;
  s.a = std::move(cond);
  s.body = std::move(body);
  s.orelse = std::move(orelse);
  return s;
}

Stmt barrier() {
  Stmt s;
  s.kind = Stmt::Kind::kBarrier;
  return s;
}

Stmt part(std::string cond, Block uniform, Block body) {
  Stmt s;
  s.kind = Stmt::Kind::kPart;
  s.a = std::move(cond);
  s.uniform = std::move(uniform);
  s.body = std::move(body);
  return s;
}

Stmt uniform_for(std::string var, std::string lo, std::string hi, Block body) {
  Stmt s = serial_for(std::move(var), std::move(lo), std::move(hi), std::move(body));
  s.kind = Stmt::Kind::kUniformFor;
  return s;
}

Stmt warp_reduce(std::string local, std::string op, std::string guard) {
  check(op == "sum" || op == "max", "warp reduction with unknown op '", op, "'");
  Stmt s;
  s.kind = Stmt::Kind::kWarpReduce;
  s.name = std::move(local);
  s.a = std::move(op);
  s.b = std::move(guard);
  return s;
}

Stmt vector_store(std::string buffer, std::string index, std::string local) {
  Stmt s;
  s.kind = Stmt::Kind::kVectorStore;
  s.name = std::move(buffer);
  s.a = std::move(index);
  s.b = std::move(local);
  return s;
}

Stmt vector_load(std::string local, std::string buffer, std::string index) {
  Stmt s;
  s.kind = Stmt::Kind::kVectorLoad;
  s.name = std::move(local);
  s.a = std::move(buffer);
  s.b = std::move(index);
  return s;
}

Stmt mma(std::string d, int64_t d_at, std::string a, int64_t a_at, std::string b, int64_t b_at, DType dtype) {
  check(dtype == DType::kF16 || dtype == DType::kBF16, "mma of ", dtype_name(dtype), " (needs float16 or bfloat16)");
  Stmt s;
  s.kind = Stmt::Kind::kMma;
  s.name = std::move(d);
  s.a = std::move(a);
  s.b = std::move(b);
  s.at = {d_at, a_at, b_at};
  s.dtype = dtype;
  return s;
}

Stmt ldmatrix(std::string local, int64_t at, int matrices, bool trans, std::string shared, std::string row) {
  check(matrices == 1 || matrices == 2 || matrices == 4, "ldmatrix of ", matrices, " matrices (1, 2 or 4)");
  Stmt s;
  s.kind = Stmt::Kind::kLdmatrix;
  s.name = std::move(local);
  s.a = std::move(shared);
  s.b = std::move(row);
  s.at = {at};
  s.matrices = matrices;
  s.trans = trans;
  return s;
}

std::string warp_combine(const std::string& op, const std::string& x, const std::string& y) {
  return op == "sum" ? "(" + x + " + " + y + ")" : "ft_fmaxn(" + x + ", " + y + ")";
}

std::string Kernel::add_shared(const std::string& alloc_name, DType dtype, int64_t elements) {
  const int64_t offset = (shared_bytes + 15) / 16 * 16;
  shared.push_back({alloc_name, dtype, elements, offset});
  shared_bytes = offset + elements * static_cast<int64_t>(dtype_size(dtype));
  return alloc_name;
}

namespace {

void dump(std::ostringstream& out, const Block& b, int depth) {
  const std::string pad(static_cast<size_t>(depth) * 2, ' ');
  for (const Stmt& s : b) {
    switch (s.kind) {
      case Stmt::Kind::kComment: out << pad << "// " << s.a << "\n"; break;
      case Stmt::Kind::kLet: out << pad << "let " << s.ctype << " " << s.name << " = " << s.a << "\n"; break;
      case Stmt::Kind::kAssign: out << pad << s.name << " = " << s.a << "\n"; break;
      case Stmt::Kind::kStore: out << pad << s.name << "[" << s.a << "] = " << s.b << "\n"; break;
      case Stmt::Kind::kFor:
        out << pad << (s.threads ? "for.threads " : "for ") << s.name << " in [" << s.a << ", " << s.b << ")" << (s.unroll > 0 ? " unroll " + std::to_string(s.unroll) : std::string()) << "\n";
        dump(out, s.body, depth + 1);
        break;
      case Stmt::Kind::kIf:
        out << pad << "if " << s.a << "\n";
        dump(out, s.body, depth + 1);
        if (!s.orelse.empty()) {
          out << pad << "else\n";
          dump(out, s.orelse, depth + 1);
        }
        break;
      case Stmt::Kind::kBarrier: out << pad << "barrier\n"; break;
      case Stmt::Kind::kVectorLoad: out << pad << "let float4 " << s.name << " = " << s.a << "[" << s.b << " .. +4]\n"; break;
      case Stmt::Kind::kVectorStore: out << pad << s.name << "[" << s.a << " .. +4] = float4 " << s.b << "\n"; break;
      case Stmt::Kind::kWarpReduce:
        out << pad << "warp.reduce " << s.a << " " << s.name << (s.b.empty() ? "" : " if (" + s.b + ")") << "\n";
        break;
      case Stmt::Kind::kMma:
        out << pad << "mma.m16n8k16." << dtype_name(s.dtype) << " " << s.name << "[" << s.at[0] << "] += " << s.a << "["
            << s.at[1] << "] * " << s.b << "[" << s.at[2] << "]\n";
        break;
      case Stmt::Kind::kLdmatrix:
        out << pad << "ldmatrix.x" << s.matrices << (s.trans ? ".trans " : " ") << s.name << "[" << s.at[0] << "] = " << s.a
            << "[row " << s.b << "]\n";
        break;
      case Stmt::Kind::kUniformFor:
        out << pad << "for.uniform " << s.name << " in [" << s.a << ", " << s.b << ")\n";
        dump(out, s.body, depth + 1);
        break;
      case Stmt::Kind::kPart:
        out << pad << "part if " << s.a << "\n" << pad << "  uniform:\n";
        dump(out, s.uniform, depth + 2);
        dump(out, s.body, depth + 1);
        break;
    }
  }
}

}  // namespace

std::string to_text(const Kernel& k) {
  std::ostringstream out;
  out << "kernel " << k.name << " grid=" << k.grid << " threads=" << k.threads << " shared=" << k.shared_bytes << "B index_bits=" << k.index_bits << "\n";
  for (const Param& p : k.params) {
    out << "  param " << (p.output ? "out " : "in ") << p.name << ": " << dtype_name(p.dtype) << "[" << p.elements << "]\n";
  }
 if (!k.library.empty()) out << "  library call " << k.library << "\n";
  for (const SharedAlloc& s : k.shared) {
    out << "  shared " << s.name << ": " << dtype_name(s.dtype) << "[" << s.elements << "] @" << s.offset << "\n";
  }
  for (const ThreadLocal& t : k.thread_locals) {
    out << "  thread-local " << t.name << ": " << (t.dtype == DType::kF32 ? "float" : dtype_name(t.dtype)) << "[" << t.count << "]\n";
  }
  if (!k.uniform.empty()) {
    out << "  uniform:\n";
    dump(out, k.uniform, 2);
  }
  dump(out, k.body, 1);
  return out.str();
}

}  // namespace fusetune::codegen
