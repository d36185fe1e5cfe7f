#include "codegen/kernel_ir.h"

#include <algorithm>
#include <cctype>
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

namespace {

// A statement of `kind` with nothing else set.
Stmt bare(Stmt::Kind kind) {
  Stmt s;
  s.kind = kind;
  return s;
}

}  // namespace

Stmt barrier() { return bare(Stmt::Kind::kBarrier); }

Stmt part(std::string cond, Block uniform, Block body) {
  Stmt s;
  s.kind = Stmt::Kind::kPart;
  s.a = std::move(cond);
  s.uniform = std::move(uniform);
  s.body = std::move(body);
  return s;
}

Stmt uniform_for(std::string var, std::string lo, std::string hi, Block body, int unroll) {
  Stmt s = serial_for(std::move(var), std::move(lo), std::move(hi), std::move(body), unroll);
  s.kind = Stmt::Kind::kUniformFor;
  return s;
}

Stmt roles(int threads, Block first, Block rest) {
  check(threads > 0 && threads % (4 * kWarpSize) == 0, "roles split at thread ", threads, ", not a warpgroup boundary");
  Stmt s = if_then("ft_thread < " + std::to_string(threads), std::move(first), std::move(rest));
  s.role_threads = threads;
  return s;
}

Stmt set_max_registers(bool inc, int count) {
  Stmt s;
  s.kind = Stmt::Kind::kSetMaxNReg;
  s.a = inc ? "inc" : "dec";
  s.groups = count;
  return s;
}

Stmt uniform_if(std::string var, const std::string& cond, Block body) {
  return uniform_for(std::move(var), "0", "((" + cond + ") ? 1 : 0)", std::move(body));
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

bool is_arg_reduce(const std::string& op) {
  return op == "argmax" || op == "argmin" || op == "argmax_last" || op == "argmin_last";
}

std::string arg_beats_flags(const std::string& op) {
  const bool is_max = op.rfind("argmax", 0) == 0, last = op.find("_last") != std::string::npos;
  return std::string(is_max ? "true" : "false") + ", " + (last ? "true" : "false");
}

Stmt warp_arg_reduce(std::string local, std::string index, std::string op, std::string guard) {
  check(is_arg_reduce(op), "warp reduction of index pairs with unknown op '", op, "'");
  Stmt s = warp_reduce(std::move(local), "max", std::move(guard));
  s.a = std::move(op);
  s.c = std::move(index);
  return s;
}

Stmt shuffle_xor(std::string local, int64_t at, std::string value, int mask) {
  check(mask >= 1 && mask < kWarpSize, "shuffle with lane mask ", mask);
  Stmt s;
  s.kind = Stmt::Kind::kShuffle;
  s.name = std::move(local);
  s.at = {at};
  s.a = std::move(value);
  s.groups = mask;
  return s;
}

// Butterflies on the slot's bits: at bit b the lane keeps the slots whose bit b is its own lane's
// and receives, into the others, its partner's slots of that bit; after both, slot s holds lane
// s's slot t. Every lane sends both slots of a pair and keeps what it needs, so what a lane sends
// never depends on its lane (a selection before the shuffle could become a branch around it, two
// warp operations where the warp must meet at one).
Block transpose_quad(const std::string& q, const std::string& sent, const std::string& t) {
  Block out;
  const auto qe = [&](int64_t slot, int64_t e) { return q + "[" + std::to_string(slot * 2 + e) + "]"; };
  for (int b = 0; b < 2; ++b) {
    const int m = 1 << b;
    const std::string bit = "((" + t + " >> " + std::to_string(b) + ") & 1)";
    for (int64_t lo = 0; lo < 4; ++lo) {
      if ((lo & m) != 0) continue;
      for (int64_t e = 0; e < 2; ++e) {
        const std::string keep0 = qe(lo, e), keep1 = qe(lo | m, e);
        out.push_back(shuffle_xor(sent, 0, keep0, m));
        out.push_back(shuffle_xor(sent, 1, keep1, m));
        out.push_back(if_then(bit, {assign(keep0, sent + "[1]")}, {assign(keep1, sent + "[0]")}));
      }
    }
  }
  return out;
}

std::string vector_ctype(DType dtype, int lanes) {
  check(dtype == DType::kF32 || dtype_size(dtype) == 2, "no vector of ", dtype_name(dtype));
  check(lanes == 0 || lanes == 2 || lanes == vector_lanes(dtype), "no vector of ", lanes, " ", dtype_name(dtype));
  if (lanes == 2) return dtype == DType::kF32 ? "float2" : "ft_u16x2";
  return dtype == DType::kF32 ? "float4" : "ft_u16x8";
}

int vector_lanes(DType dtype) { return 16 / static_cast<int>(dtype_size(dtype)); }

int stmt_lanes(const Stmt& s) { return s.lanes > 0 ? s.lanes : vector_lanes(s.dtype); }

std::string vector_element(const std::string& local, DType dtype, int i) {
  const char* const components[] = {".x", ".y", ".z", ".w"};
  return local + (dtype == DType::kF32 ? std::string(components[i]) : ".v[" + std::to_string(i) + "]");
}

Stmt vector_store(std::string buffer, std::string index, std::string local, DType dtype, int lanes) {
  vector_ctype(dtype, lanes);
  Stmt s;
  s.kind = Stmt::Kind::kVectorStore;
  s.name = std::move(buffer);
  s.a = std::move(index);
  s.b = std::move(local);
  s.dtype = dtype;
  s.lanes = lanes == vector_lanes(dtype) ? 0 : lanes;
  return s;
}

Stmt vector_load(std::string local, std::string buffer, std::string index, DType dtype, std::string guard) {
  vector_ctype(dtype);
  Stmt s;
  s.kind = Stmt::Kind::kVectorLoad;
  s.name = std::move(local);
  s.a = std::move(buffer);
  s.b = std::move(index);
  s.c = std::move(guard);
  s.dtype = dtype;
  return s;
}

Stmt vector_load_l2(std::string local, std::string buffer, std::string index) {
  Stmt s = vector_load(std::move(local), std::move(buffer), std::move(index));
  s.past_l1 = true;
  return s;
}

Stmt mma(std::string d, int64_t d_at, std::string a, int64_t a_at, std::string b, int64_t b_at, DType dtype, DType b_dtype) {
  const auto byte = [](DType t) { return t == DType::kI8 || t == DType::kU8; };
  check(dtype == DType::kF16 || dtype == DType::kBF16 || dtype == DType::kF32 || (byte(dtype) && byte(b_dtype)), "mma of ",
        dtype_name(dtype), " (needs float16, bfloat16, float32 as TF32, or int8/uint8 operands both)");
  Stmt s;
  s.kind = Stmt::Kind::kMma;
  s.name = std::move(d);
  s.a = std::move(a);
  s.b = std::move(b);
  s.at = {d_at, a_at, b_at};
  s.dtype = dtype;
  s.b_dtype = b_dtype;
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

Stmt copy_async(std::string shared, std::string shared_index, std::string buffer, std::string index, std::string bytes,
                int copy_bytes) {
  check(copy_bytes == 16 || copy_bytes == 4, "cp.async of ", copy_bytes, " bytes");
  Stmt s;
  s.copy_bytes = copy_bytes;
  s.kind = Stmt::Kind::kCopyAsync;
  s.name = std::move(shared);
  s.a = std::move(shared_index);
  s.b = std::move(buffer);
  s.c = std::move(index);
  s.d = std::move(bytes);
  return s;
}

Stmt copy_async_commit() { return bare(Stmt::Kind::kCopyAsyncCommit); }

Stmt copy_async_wait(int groups) {
  check(groups >= 0, "cp.async.wait_group ", groups);
  Stmt s = bare(Stmt::Kind::kCopyAsyncWait);
  s.groups = groups;
  return s;
}

Stmt wgmma(std::string d, int64_t d_at, int n, std::string a, std::string a_at, int64_t a_lbo, int64_t a_sbo,
           std::string b, std::string b_at, int64_t b_lbo, int64_t b_sbo, DType dtype, bool b_k_major, int swizzle) {
  check(dtype == DType::kF16 || dtype == DType::kBF16, "wgmma of ", dtype_name(dtype), " (needs float16 or bfloat16)");
  check(swizzle == 0 || swizzle == 32 || swizzle == 64 || swizzle == 128, "wgmma operands swizzled in ", swizzle, "-byte spans");
  check(n >= 8 && n <= 256 && n % 8 == 0, "wgmma with N ", n, " (needs a multiple of 8 from 8 to 256)");
  Stmt s;
  s.kind = Stmt::Kind::kWgmma;
  s.name = std::move(d);
  s.a = std::move(a);
  s.b = std::move(a_at);
  s.c = std::move(b);
  s.d = std::move(b_at);
  s.at = {d_at, a_lbo, a_sbo, b_lbo, b_sbo};
  s.wgmma_n = n;
  s.dtype = dtype;
  s.trans = !b_k_major;
  s.swizzle = swizzle;
  return s;
}

Stmt wgmma_registers(std::string d, int64_t d_at, int n, std::string a, int64_t a_at, std::string b, std::string b_at,
                     int64_t b_lbo, int64_t b_sbo, DType dtype, bool b_k_major) {
  Stmt s = wgmma(std::move(d), d_at, n, std::move(a), "", 16, 16, std::move(b), std::move(b_at), b_lbo, b_sbo, dtype, b_k_major);
  s.a_registers = true;
  s.at[1] = a_at;
  s.at[2] = 0;
  return s;
}

namespace {
Stmt wgmma_sync(std::string what, std::string d = "", int groups = 0) {
  Stmt s = bare(Stmt::Kind::kWgmmaSync);
  s.a = std::move(what);
  s.name = std::move(d);
  s.groups = groups;
  return s;
}
}  // namespace

Stmt wgmma_fence(std::string d, std::string operand) {
  Stmt s = wgmma_sync("fence", std::move(d));
  s.b = std::move(operand);
  return s;
}
Stmt wgmma_commit() { return wgmma_sync("commit"); }
Stmt wgmma_wait(std::string d, int groups) {
  check(groups >= 0, "wgmma.wait_group ", groups);
  return wgmma_sync("wait", std::move(d), groups);
}
Stmt proxy_fence() { return wgmma_sync("proxy"); }

namespace {
Stmt mbarrier_op(std::string op, std::string bar, std::string index, std::string operand) {
  Stmt s = bare(Stmt::Kind::kMbarrier);
  s.a = std::move(op);
  s.name = std::move(bar);
  s.b = std::move(index);
  s.c = std::move(operand);
  return s;
}
}  // namespace

Stmt mbarrier_init(std::string bar, std::string index, int64_t count) {
  check(count > 0 && count < (int64_t{1} << 20), "mbarrier.init of ", count, " arrivals (1 to 2^20 - 1)");
  return mbarrier_op("init", std::move(bar), std::move(index), std::to_string(count));
}
Stmt mbarrier_init_fence() { return mbarrier_op("fence", "", "", ""); }
Stmt mbarrier_arrive(std::string bar, std::string index, std::string tx_bytes) {
  return mbarrier_op("arrive", std::move(bar), std::move(index), std::move(tx_bytes));
}
Stmt mbarrier_arrive_warp(std::string bar, std::string index) {
  return mbarrier_op("arrive_warp", std::move(bar), std::move(index), "");
}
Stmt mbarrier_wait(std::string bar, std::string index, std::string parity) {
  return mbarrier_op("wait", std::move(bar), std::move(index), std::move(parity));
}
Stmt tensor_load(std::string dst, std::string dst_index, std::string map, const std::vector<std::string>& coords, std::string bar,
                 std::string bar_index) {
  check(coords.size() >= 2 && coords.size() <= 3, "a tensor copy with ", coords.size(), " coordinates (2 or 3)");
  Stmt s = bare(Stmt::Kind::kTensorLoad);
  s.name = std::move(dst);
  s.a = std::move(dst_index);
  s.b = std::move(map);
  for (size_t i = 0; i < coords.size(); ++i) s.c += (i ? ", " : "") + coords[i];
  s.d = std::move(bar);
  s.e = std::move(bar_index);
  return s;
}

std::vector<std::string> tensor_coords(const Stmt& s) {
  std::vector<std::string> out(1);
  int depth = 0;
  for (size_t i = 0; i < s.c.size(); ++i) {
    const char ch = s.c[i];
    depth += ch == '(' ? 1 : ch == ')' ? -1 : 0;
    if (ch == ',' && depth == 0) {
      out.emplace_back();
      if (i + 1 < s.c.size() && s.c[i + 1] == ' ') ++i;
      continue;
    }
    out.back() += ch;
  }
  return out;
}

Stmt atomic(std::string buffer, std::string index, std::string value, std::string op, std::string old) {
  check(op == "add" || op == "exch", "atomic operation '", op, "' (needs add or exch)");
  Stmt s = bare(Stmt::Kind::kAtomic);
  s.name = std::move(buffer);
  s.a = std::move(index);
  s.b = std::move(value);
  s.c = std::move(op);
  s.d = std::move(old);
  return s;
}
Stmt fence() { return bare(Stmt::Kind::kFence); }
Stmt exit_unless(std::string cond) {
  Stmt s = bare(Stmt::Kind::kExitUnless);
  s.a = std::move(cond);
  return s;
}

namespace {
bool any_set_max_registers(const Block& b) {
  return std::any_of(b.begin(), b.end(), [](const Stmt& s) {
    return s.kind == Stmt::Kind::kSetMaxNReg || any_set_max_registers(s.body) || any_set_max_registers(s.orelse) ||
           any_set_max_registers(s.uniform);
  });
}

void collect_wgmma_shapes(const Block& b, std::set<WgmmaShape>& out) {
  for (const Stmt& s : b) {
    if (s.kind == Stmt::Kind::kWgmma) out.insert({s.wgmma_n, s.dtype == DType::kBF16, s.a_registers, s.trans});
    collect_wgmma_shapes(s.body, out);
    collect_wgmma_shapes(s.orelse, out);
    collect_wgmma_shapes(s.uniform, out);
  }
}
}  // namespace

bool sets_max_registers(const Kernel& k) { return any_set_max_registers(k.body); }

std::set<WgmmaShape> wgmma_shapes(const Kernel& k) {
  std::set<WgmmaShape> out;
  collect_wgmma_shapes(k.body, out);
  return out;
}

std::string warp_combine(const std::string& op, const std::string& x, const std::string& y) {
  return op == "sum" ? "(" + x + " + " + y + ")" : "ft_fmaxn(" + x + ", " + y + ")";
}

std::string Kernel::add_shared(const std::string& alloc_name, DType dtype, int64_t elements, int64_t align) {
  check(align >= 16 && (align & (align - 1)) == 0, "shared allocation '", alloc_name, "' aligned to ", align, " bytes");
  const int64_t offset = (shared_bytes + align - 1) / align * align;
  shared.push_back({alloc_name, dtype, elements, offset});
  shared_bytes = offset + elements * static_cast<int64_t>(dtype_size(dtype));
  return alloc_name;
}

void Kernel::declare_local(const std::string& local, int64_t count) {
  const auto declared = [&](const ThreadLocal& t) { return t.name == local; };
  if (std::none_of(thread_locals.begin(), thread_locals.end(), declared)) thread_locals.push_back({local, count});
}

std::set<std::string> expression_names(const std::string& text) {
  std::set<std::string> out;
  for (size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (std::isalpha(c) || c == '_') {
      size_t j = i + 1;
      while (j < text.size() && (std::isalnum(static_cast<unsigned char>(text[j])) || text[j] == '_')) ++j;
      out.insert(text.substr(i, j - i));
      i = j;
    } else if (std::isdigit(c)) {
      while (i < text.size() && (std::isalnum(static_cast<unsigned char>(text[i])) || text[i] == '.' || text[i] == '_')) ++i;
    } else {
      ++i;
    }
  }
  return out;
}

std::string line_text(const Stmt& s) {
  std::ostringstream out;
  switch (s.kind) {
    case Stmt::Kind::kComment: out << "// " << s.a; break;
    case Stmt::Kind::kLet: out << "let " << s.ctype << " " << s.name << " = " << s.a; break;
    case Stmt::Kind::kAssign: out << s.name << " = " << s.a; break;
    case Stmt::Kind::kStore: out << s.name << "[" << s.a << "] = " << s.b; break;
    case Stmt::Kind::kFor:
      out << (s.threads ? "for.threads " : "for ") << s.name << " in [" << s.a << ", " << s.b << ")"
          << (s.unroll > 0 ? " unroll " + std::to_string(s.unroll) : std::string());
      break;
    case Stmt::Kind::kIf: out << (s.role_threads > 0 ? "roles " : "if ") << s.a; break;
    case Stmt::Kind::kBarrier: out << "barrier"; break;
    case Stmt::Kind::kVectorLoad:
      out << "let " << vector_ctype(s.dtype) << " " << s.name << " = " << (s.c.empty() ? "" : s.c + " ? ") << s.a << "[" << s.b
          << " .. +" << vector_lanes(s.dtype) << "]" << (s.c.empty() ? "" : " : 0") << (s.past_l1 ? " past L1" : "");
      break;
    case Stmt::Kind::kVectorStore:
      out << s.name << "[" << s.a << " .. +" << stmt_lanes(s) << "] = " << vector_ctype(s.dtype, s.lanes) << " " << s.b;
      break;
    case Stmt::Kind::kWarpReduce:
      out << "warp.reduce " << s.a << " " << s.name << (s.c.empty() ? "" : ", " + s.c) << (s.b.empty() ? "" : " if (" + s.b + ")");
      break;
    case Stmt::Kind::kShuffle: out << s.name << "[" << s.at[0] << "] = warp.shuffle_xor " << s.groups << " " << s.a; break;
    case Stmt::Kind::kMma:
      out << (s.dtype == DType::kF32                                ? std::string("mma.m16n8k8.tf32 ")
              : s.dtype == DType::kI8 || s.dtype == DType::kU8 ? "mma.m16n8k32." + std::string(dtype_name(s.dtype)) + "." +
                                                                      std::string(dtype_name(s.b_dtype)) + " "
                                                                : "mma.m16n8k16." + std::string(dtype_name(s.dtype)) + " ")
          << s.name << "[" << (s.at.size() > 0 ? s.at[0] : -1) << "] += " << s.a
          << "[" << (s.at.size() > 1 ? s.at[1] : -1) << "] * " << s.b << "[" << (s.at.size() > 2 ? s.at[2] : -1) << "]";
      break;
    case Stmt::Kind::kLdmatrix:
      out << "ldmatrix.x" << s.matrices << (s.trans ? ".trans " : " ") << s.name << "[" << (s.at.empty() ? -1 : s.at[0])
          << "] = " << s.a << "[row " << s.b << "]";
      break;
    case Stmt::Kind::kCopyAsync:
      out << "cp.async." << s.copy_bytes << " " << s.name << "[" << s.a << " ..] <- " << s.b << "[" << s.c << " ..] bytes " << s.d;
      break;
    case Stmt::Kind::kCopyAsyncCommit: out << "cp.async.commit_group"; break;
    case Stmt::Kind::kCopyAsyncWait: out << "cp.async.wait_group " << s.groups; break;
    case Stmt::Kind::kWgmma:
      out << "wgmma.m64n" << s.wgmma_n << "k16." << dtype_name(s.dtype) << " " << s.name << "[" << (s.at.empty() ? -1 : s.at[0])
          << "] += " << s.a << "[" << (s.a_registers ? "registers " + std::to_string(s.at.size() > 1 ? s.at[1] : -1) : s.b)
          << "] * " << s.c << "[" << s.d << "]" << (s.trans ? "" : " (B K-major)") << (s.swizzle ? " (" + std::to_string(s.swizzle) + "-byte swizzle)" : "");
      break;
    case Stmt::Kind::kWgmmaSync:
      out << (s.a == "proxy" ? "fence.proxy.async" : "wgmma." + s.a) << (s.a == "wait" ? " " + std::to_string(s.groups) : "")
          << (s.name.empty() ? "" : " (" + s.name + ")");
      break;
    case Stmt::Kind::kAtomic:
      out << (s.d.empty() ? "" : "let unsigned " + s.d + " = ") << "atomic." << s.c << " " << s.name << "[" << s.a << "] " << s.b;
      break;
    case Stmt::Kind::kFence: out << "fence.gpu"; break;
    case Stmt::Kind::kMbarrier:
      out << "mbarrier." << s.a;
      if (s.a != "fence") out << " " << s.name << "[" << s.b << "]" << (s.c.empty() ? "" : " " + s.c);
      break;
    case Stmt::Kind::kTensorLoad: out << s.name << "[" << s.a << " ..] = tensor " << s.b << " at (" << s.c << ") on " << s.d << "[" << s.e << "]"; break;
    case Stmt::Kind::kExitUnless: out << "exit unless " << s.a; break;
    case Stmt::Kind::kSetMaxNReg: out << "setmaxnreg." << s.a << " " << s.groups; break;
    case Stmt::Kind::kUniformFor:
      out << "for.uniform " << s.name << " in [" << s.a << ", " << s.b << ")"
          << (s.unroll > 0 ? " unroll " + std::to_string(s.unroll) : std::string());
      break;
    case Stmt::Kind::kPart: out << "part if " << s.a; break;
  }
  return out.str();
}

namespace {

void dump(std::ostringstream& out, const Block& b, int depth) {
  const std::string pad(static_cast<size_t>(depth) * 2, ' ');
  for (const Stmt& s : b) {
    out << pad << line_text(s) << "\n";
    if (s.kind == Stmt::Kind::kPart) {
      out << pad << "  uniform:\n";
      dump(out, s.uniform, depth + 2);
    }
    dump(out, s.body, depth + 1);
    if (!s.orelse.empty()) {
      out << pad << "else\n";
      dump(out, s.orelse, depth + 1);
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
  for (const Param& p : k.scratch) out << "  scratch " << p.name << ": " << dtype_name(p.dtype) << "[" << p.elements << "]\n";
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
