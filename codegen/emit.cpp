#include "codegen/emit.h"

#include <sstream>

#include "codegen/emit_common.h"
#include "core/error.h"

namespace fusetune::codegen {

std::string storage_ctype(DType t) {
  switch (t) {
    case DType::kF32: return "float";
    case DType::kF16:
    case DType::kBF16: return "unsigned short";
    case DType::kF64: return "double";
    case DType::kI64: return "long long";
    case DType::kI32: return "int";
    case DType::kI8: return "signed char";
    case DType::kU8:
    case DType::kBool: return "unsigned char";
    default: fail("code generation does not support dtype ", dtype_name(t));
  }
}

namespace {

const ThreadLocal* find_local(const std::string& name, const std::vector<ThreadLocal>& locals) {
  for (const ThreadLocal& t : locals) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

// The thread-local a warp reduction combines: it must be declared, with one float per thread.
void check_warp_local(const Stmt& s, const std::vector<ThreadLocal>& locals) {
  const ThreadLocal* t = find_local(s.name, locals);
  check(t != nullptr, "warp reduction of '", s.name, "', which is not a thread-local");
  check(t->count == 1 && t->dtype == DType::kF32, "warp reduction of thread-local '", s.name, "' of ", t->count, " ",
        dtype_name(t->dtype), " (needs one float)");
}

// A fragment operand: `size` elements of thread-local `name` of `dtype` from `at`.
void check_fragment(const std::string& what, const std::string& name, int64_t at, int64_t size, DType dtype,
                    const std::vector<ThreadLocal>& locals) {
  const ThreadLocal* t = find_local(name, locals);
  check(t != nullptr, what, " '", name, "' is not a thread-local");
  check(t->dtype == dtype, what, " '", name, "' is ", dtype_name(t->dtype), ", needs ", dtype_name(dtype));
  check(at >= 0 && at + size <= t->count, what, " '", name, "' [", at, ", ", at + size, ") outside its ", t->count,
        " elements");
}

const SharedAlloc& shared_b16(const std::string& name, const Kernel& k) {
  for (const SharedAlloc& a : k.shared) {
    if (a.name == name) {
      check(dtype_size(a.dtype) == 2, "ldmatrix from shared allocation '", name, "' of ", dtype_name(a.dtype));
      return a;
    }
  }
  fail("ldmatrix from '", name, "', which is not a shared allocation");
}

// The operands of a warp-level matrix statement, checked against the kernel's declarations.
void check_matrix_stmt(const Stmt& s, const Kernel& k) {
  if (s.kind == Stmt::Kind::kMma) {
    check_fragment("mma accumulator", s.name, s.at[0], 4, DType::kF32, k.thread_locals);
    check_fragment("mma A fragment", s.a, s.at[1], 4, DType::kU32, k.thread_locals);
    check_fragment("mma B fragment", s.b, s.at[2], 2, DType::kU32, k.thread_locals);
  } else {
    check_fragment("ldmatrix destination", s.name, s.at[0], s.matrices, DType::kU32, k.thread_locals);
    shared_b16(s.a, k);
  }
}

std::string local_ctype(const ThreadLocal& t) { return t.dtype == DType::kF32 ? "float" : "unsigned int"; }

// Statements in the CUDA form, or inside one stretch of the host form (`host`: there, barriers and
// warp-synchronous statements cannot occur; emit_host_body splits stretches at them).
void emit_block(std::ostringstream& out, const Kernel& k, const Block& b, int depth, bool host) {
  const int threads = k.threads;
  const std::string pad(static_cast<size_t>(depth) * 2, ' ');
  for (const Stmt& s : b) {
    switch (s.kind) {
      case Stmt::Kind::kComment: out << pad << "// " << s.a << "\n"; break;
      case Stmt::Kind::kLet: out << pad << s.ctype << " " << s.name << " = " << s.a << ";\n"; break;
      case Stmt::Kind::kAssign: out << pad << s.name << " = " << s.a << ";\n"; break;
      case Stmt::Kind::kStore: out << pad << s.name << "[" << s.a << "] = " << s.b << ";\n"; break;
      case Stmt::Kind::kFor:
        if (s.threads) {
          out << pad << "for (long long " << s.name << " = (" << s.a << ") + ft_thread; " << s.name << " < (" << s.b
              << "); " << s.name << " += " << threads << ") {\n";
        } else {
          out << pad << "for (long long " << s.name << " = " << s.a << "; " << s.name << " < (" << s.b << "); ++" << s.name
              << ") {\n";
        }
        emit_block(out, k, s.body, depth + 1, host);
        out << pad << "}\n";
        break;
      case Stmt::Kind::kIf:
        out << pad << "if (" << s.a << ") {\n";
        emit_block(out, k, s.body, depth + 1, host);
        if (!s.orelse.empty()) {
          out << pad << "} else {\n";
          emit_block(out, k, s.orelse, depth + 1, host);
        }
        out << pad << "}\n";
        break;
      case Stmt::Kind::kBarrier:
        check(!host, "a barrier inside a thread loop or a branch");
        out << pad << "__syncthreads();\n";
        break;
      case Stmt::Kind::kVectorLoad:
        if (host) {  // the same element reads, with the GPU's alignment requirement checked
          out << pad << "if (((unsigned long long)(" << s.a << " + (" << s.b << ")) & 15ULL) != 0ULL) ft_misaligned(\""
              << s.a << "\");\n";
          out << pad << "const float4 " << s.name << " = {" << s.a << "[" << s.b << "]";
          for (int i = 1; i < 4; ++i) out << ", " << s.a << "[(" << s.b << ") + " << i << "]";
          out << "};\n";
        } else {
          out << pad << "const float4 " << s.name << " = *(const float4*)(" << s.a << " + (" << s.b << "));\n";
        }
        break;
      case Stmt::Kind::kWarpReduce:
        check(!host, "a warp reduction inside a thread loop or a branch");
        out << pad << "#pragma unroll\n"
            << pad << "for (int ft_off = " << kWarpSize / 2 << "; ft_off > 0; ft_off >>= 1) " << s.name << "[0] = "
            << warp_combine(s.a, s.name + "[0]", "__shfl_xor_sync(0xffffffffu, " + s.name + "[0], ft_off)") << ";\n";
        break;
      case Stmt::Kind::kMma: {
        check(!host, "an mma inside a thread loop or a branch");
        check_matrix_stmt(s, k);
        const auto reg = [&](const std::string& local, int64_t i) { return local + "[" + std::to_string(i) + "]"; };
        out << pad << "asm volatile(\"mma.sync.aligned.m16n8k16.row.col.f32." << (s.dtype == DType::kBF16 ? "bf16.bf16" : "f16.f16")
            << ".f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\"\n"
            << pad << "    : \"+f\"(" << reg(s.name, s.at[0]) << "), \"+f\"(" << reg(s.name, s.at[0] + 1) << "), \"+f\"("
            << reg(s.name, s.at[0] + 2) << "), \"+f\"(" << reg(s.name, s.at[0] + 3) << ")\n"
            << pad << "    : \"r\"(" << reg(s.a, s.at[1]) << "), \"r\"(" << reg(s.a, s.at[1] + 1) << "), \"r\"(" << reg(s.a, s.at[1] + 2)
            << "), \"r\"(" << reg(s.a, s.at[1] + 3) << "), \"r\"(" << reg(s.b, s.at[2]) << "), \"r\"(" << reg(s.b, s.at[2] + 1)
            << "));\n";
        break;
      }
      case Stmt::Kind::kLdmatrix: {
        check(!host, "an ldmatrix inside a thread loop or a branch");
        check_matrix_stmt(s, k);
        out << pad << "{\n" << pad << "  const unsigned int ft_row = (unsigned int)__cvta_generic_to_shared(" << s.a << " + ("
            << s.b << "));\n";
        out << pad << "  asm volatile(\"ldmatrix.sync.aligned.m8n8.x" << s.matrices << (s.trans ? ".trans" : "")
            << ".shared.b16 {";
        for (int i = 0; i < s.matrices; ++i) out << (i ? ", " : "") << "%" << i;
        out << "}, [%" << s.matrices << "];\"\n" << pad << "      : ";
        for (int i = 0; i < s.matrices; ++i) out << (i ? ", " : "") << "\"=r\"(" << s.name << "[" << s.at[0] + i << "])";
        out << "\n" << pad << "      : \"r\"(ft_row));\n" << pad << "}\n";
        break;
      }
      case Stmt::Kind::kPart:
        check(!host, "a packed kernel's part inside a thread loop or a branch");
        out << pad << "if (" << s.a << ") {\n";
        emit_block(out, k, s.uniform, depth + 1, host);
        emit_block(out, k, s.body, depth + 1, host);
        out << pad << "}\n";
        break;
      case Stmt::Kind::kUniformFor:
        check(!host, "a uniform loop inside a thread loop or a branch");
        out << pad << "for (long long " << s.name << " = " << s.a << "; " << s.name << " < (" << s.b << "); ++" << s.name
            << ") {\n";
        emit_block(out, k, s.body, depth + 1, host);
        out << pad << "}\n";
        break;
    }
  }
}

std::string param_decl(const Param& p) {
  return (p.output ? "" : "const ") + storage_ctype(p.dtype) + "* __restrict__ " + p.name;
}

void shared_views(std::ostringstream& out, const Kernel& k, const char* pad) {
  for (const SharedAlloc& s : k.shared) {
    const std::string t = s.dtype == DType::kI64 ? "long long" : (dtype_size(s.dtype) == 2 ? "unsigned short" : "float");
    out << pad << t << "* " << s.name << " = (" << t << "*)(ft_smem + " << s.offset << ");\n";
  }
}

// Host form of a block body: each stretch between barriers runs for every thread of the block in
// turn; a packed kernel's parts are block-uniform branches around their own stretches. A warp
// reduction ends a stretch too and replays the CUDA butterfly on each warp's 32 thread-local
// values: at every step all lanes read their partners' values of the previous step. An mma or
// ldmatrix ends a stretch and runs the warp's emulation (ft_mma_m16n8k16, ft_ldmatrix) per warp,
// each lane's row address of an ldmatrix evaluated with that lane's ft_thread.
void emit_host_body(std::ostringstream& out, const Kernel& k, const Block& body, int depth) {
  const std::string pad(static_cast<size_t>(depth) * 2, ' ');
  const int threads = k.threads;
  const std::vector<ThreadLocal>& locals = k.thread_locals;
  const std::string warps = std::to_string(threads / kWarpSize);
  const auto lane_base = [&](const std::string& local) {
    return local + "_all + (long long)ft_w * " + std::to_string(kWarpSize) + " * " +
           std::to_string(find_local(local, locals)->count);
  };
  const auto stride = [&](const std::string& local) { return std::to_string(find_local(local, locals)->count); };
  Block segment;
  auto flush = [&]() {
    if (segment.empty()) return;
    out << pad << "for (int ft_thread = 0; ft_thread < " << threads << "; ++ft_thread) {\n";
    for (const ThreadLocal& t : locals) {
      out << pad << "  " << local_ctype(t) << "* " << t.name << " = " << t.name << "_all + (long long)ft_thread * " << t.count
          << ";\n";
    }
    emit_block(out, k, segment, depth + 1, true);
    out << pad << "}\n";
    segment.clear();
  };
  for (const Stmt& s : body) {
    if (s.kind == Stmt::Kind::kBarrier) {
      flush();
      out << pad << "// barrier\n";
    } else if (s.kind == Stmt::Kind::kWarpReduce) {
      flush();
      check_warp_local(s, locals);
      check(threads % kWarpSize == 0, "warp reduction in a block of ", threads, " threads");
      out << pad << "// warp reduce " << s.a << " " << s.name << "\n";
      out << pad << "for (int ft_w = 0; ft_w < " << threads / kWarpSize << "; ++ft_w) {\n";
      out << pad << "  float* ft_v = " << s.name << "_all + ft_w * " << kWarpSize << ";\n";
      out << pad << "  for (int ft_off = " << kWarpSize / 2 << "; ft_off > 0; ft_off >>= 1) {\n";
      out << pad << "    float ft_next[" << kWarpSize << "];\n";
      out << pad << "    for (int ft_l = 0; ft_l < " << kWarpSize << "; ++ft_l) ft_next[ft_l] = "
          << warp_combine(s.a, "ft_v[ft_l]", "ft_v[ft_l ^ ft_off]") << ";\n";
      out << pad << "    memcpy(ft_v, ft_next, sizeof ft_next);\n";
      out << pad << "  }\n" << pad << "}\n";
    } else if (s.kind == Stmt::Kind::kMma) {
      flush();
      check_matrix_stmt(s, k);
      check(threads % kWarpSize == 0, "mma in a block of ", threads, " threads");
      out << pad << "// mma.m16n8k16." << dtype_name(s.dtype) << " " << s.name << "[" << s.at[0] << "] += " << s.a << "["
          << s.at[1] << "] * " << s.b << "[" << s.at[2] << "]\n";
      out << pad << "for (int ft_w = 0; ft_w < " << warps << "; ++ft_w) ft_mma_m16n8k16(" << lane_base(s.name) << " + "
          << s.at[0] << ", " << stride(s.name) << ", " << lane_base(s.a) << " + " << s.at[1] << ", " << stride(s.a) << ", "
          << lane_base(s.b) << " + " << s.at[2] << ", " << stride(s.b) << ", " << (s.dtype == DType::kBF16 ? 1 : 0) << ");\n";
    } else if (s.kind == Stmt::Kind::kLdmatrix) {
      flush();
      check_matrix_stmt(s, k);
      check(threads % kWarpSize == 0, "ldmatrix in a block of ", threads, " threads");
      out << pad << "// ldmatrix.x" << s.matrices << (s.trans ? ".trans " : " ") << s.name << "[" << s.at[0] << "] = " << s.a
          << "\n";
      out << pad << "for (int ft_w = 0; ft_w < " << warps << "; ++ft_w) {\n";
      out << pad << "  long long ft_rows[" << kWarpSize << "];\n";
      out << pad << "  for (int ft_l = 0; ft_l < " << kWarpSize << "; ++ft_l) {\n";
      out << pad << "    const int ft_thread = ft_w * " << kWarpSize << " + ft_l;\n";
      out << pad << "    (void)ft_thread;\n";
      out << pad << "    ft_rows[ft_l] = " << s.b << ";\n" << pad << "  }\n";
      out << pad << "  ft_ldmatrix(" << lane_base(s.name) << " + " << s.at[0] << ", " << stride(s.name) << ", " << s.a << ", "
          << shared_b16(s.a, k).elements << "LL, ft_rows, " << s.matrices << ", " << (s.trans ? 1 : 0) << ", \"" << s.a << "\");\n";
      out << pad << "}\n";
    } else if (s.kind == Stmt::Kind::kPart) {
      flush();
      out << pad << "if (" << s.a << ") {\n";
      emit_block(out, k, s.uniform, depth + 1, true);
      emit_host_body(out, k, s.body, depth + 1);
      out << pad << "}\n";
    } else if (s.kind == Stmt::Kind::kUniformFor) {
      flush();
      out << pad << "for (long long " << s.name << " = " << s.a << "; " << s.name << " < (" << s.b << "); ++" << s.name
          << ") {\n";
      emit_host_body(out, k, s.body, depth + 1);
      out << pad << "}\n";
    } else {
      segment.push_back(s);
    }
  }
  flush();
}

}  // namespace

std::string emit_cuda(const std::vector<Kernel>& kernels) {
  std::ostringstream out;
  out << "// Generated by fusetune (codegen/emit.cpp). CUDA C++ for NVRTC.\n";
  out << "#define FT_FN static __device__ __forceinline__\n" << kPrelude << "\n";
  for (const Kernel& k : kernels) {
    if (!k.library.empty()) continue;  // a library call: the backend runs it
    out << "extern \"C\" __global__ void __launch_bounds__(" << k.threads << ") " << k.name << "(";
    for (size_t i = 0; i < k.params.size(); ++i) out << (i ? ", " : "") << param_decl(k.params[i]);
    out << ") {\n";
    out << "  extern __shared__ __align__(16) unsigned char ft_smem[];\n";
    shared_views(out, k, "  ");
    out << "  const long long ft_block = blockIdx.x;\n  const int ft_thread = threadIdx.x;\n";
    for (const ThreadLocal& t : k.thread_locals) out << "  " << local_ctype(t) << " " << t.name << "[" << t.count << "];\n";
    emit_block(out, k, k.uniform, 1, false);
    emit_block(out, k, k.body, 1, false);
    out << "}\n\n";
  }
  return out.str();
}

std::string emit_host(const std::vector<Kernel>& kernels) {
  std::ostringstream out;
  out << "// Generated by fusetune (codegen/emit.cpp). The host form of the CUDA kernels.\n";
  out << "#include <math.h>\n#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n";
  out << "#define FT_FN static inline\n#define __restrict__ __restrict\n" << kPrelude;
  out << "struct float4 { float x, y, z, w; };\n";
  out << "static void ft_misaligned(const char* buffer) {\n"
         "  fprintf(stderr, \"fusetune: misaligned vector load from %s\\n\", buffer);\n  abort();\n}\n";
  out << kHostMatrixPrelude << "\n";
  for (const Kernel& k : kernels) {
    if (!k.library.empty()) continue;  // a library call: the backend runs it
    out << "extern \"C\" void " << k.name << "(void** ft_args, long long ft_first_block, long long ft_last_block) {\n";
    for (size_t i = 0; i < k.params.size(); ++i) {
      const Param& p = k.params[i];
      out << "  " << param_decl(p) << " = (" << (p.output ? "" : "const ") << storage_ctype(p.dtype) << "*)ft_args[" << i
          << "];\n";
    }
    out << "  unsigned char* ft_smem = (unsigned char*)aligned_alloc(16, " << (k.shared_bytes + 15) / 16 * 16 + 16 << ");\n";
    shared_views(out, k, "  ");
    for (const ThreadLocal& t : k.thread_locals) {
      const std::string ct = local_ctype(t);
      out << "  " << ct << "* " << t.name << "_all = (" << ct << "*)malloc(sizeof(" << ct << ") * " << k.threads * t.count << ");\n";
    }
    out << "  for (long long ft_block = ft_first_block; ft_block < ft_last_block; ++ft_block) {\n";
    emit_block(out, k, k.uniform, 2, true);
    emit_host_body(out, k, k.body, 2);
    out << "  }\n  free(ft_smem);\n";
    for (const ThreadLocal& t : k.thread_locals) out << "  free(" << t.name << "_all);\n";
    out << "}\n\n";
  }
  return out.str();
}

}  // namespace fusetune::codegen
