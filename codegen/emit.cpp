#include "codegen/emit.h"

#include <sstream>

#include "codegen/emit_common.h"
#include "core/error.h"

namespace fusetune::codegen {

std::string storage_ctype(DType t) {
  switch (t) {
    case DType::kF32: return "float";
    case DType::kF16: return "unsigned short";
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

// The thread-local a warp reduction combines: it must be declared, with one float per thread.
void check_warp_local(const Stmt& s, const std::vector<ThreadLocal>& locals) {
  for (const ThreadLocal& t : locals) {
    if (t.name == s.name) {
      check(t.count == 1, "warp reduction of thread-local '", s.name, "' of ", t.count, " floats (needs one)");
      return;
    }
  }
  fail("warp reduction of '", s.name, "', which is not a thread-local");
}

// Statements in the CUDA form, or inside one stretch of the host form (`host`: there, barriers and
// warp reductions cannot occur; emit_host_body splits stretches at them).
void emit_block(std::ostringstream& out, const Block& b, int depth, int threads, bool host) {
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
        emit_block(out, s.body, depth + 1, threads, host);
        out << pad << "}\n";
        break;
      case Stmt::Kind::kIf:
        out << pad << "if (" << s.a << ") {\n";
        emit_block(out, s.body, depth + 1, threads, host);
        if (!s.orelse.empty()) {
          out << pad << "} else {\n";
          emit_block(out, s.orelse, depth + 1, threads, host);
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
      case Stmt::Kind::kPart:
        check(!host, "a packed kernel's part inside a thread loop or a branch");
        out << pad << "if (" << s.a << ") {\n";
        emit_block(out, s.uniform, depth + 1, threads, host);
        emit_block(out, s.body, depth + 1, threads, host);
        out << pad << "}\n";
        break;
      case Stmt::Kind::kUniformFor:
        check(!host, "a uniform loop inside a thread loop or a branch");
        out << pad << "for (long long " << s.name << " = " << s.a << "; " << s.name << " < (" << s.b << "); ++" << s.name
            << ") {\n";
        emit_block(out, s.body, depth + 1, threads, host);
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
    const std::string t = s.dtype == DType::kI64 ? "long long" : "float";
    out << pad << t << "* " << s.name << " = (" << t << "*)(ft_smem + " << s.offset << ");\n";
  }
}

// Host form of a block body: each stretch between barriers runs for every thread of the block in
// turn; a packed kernel's parts are block-uniform branches around their own stretches. A warp
// reduction ends a stretch too and replays the CUDA butterfly on each warp's 32 thread-local
// values: at every step all lanes read their partners' values of the previous step.
void emit_host_body(std::ostringstream& out, const Block& body, int depth, int threads,
                    const std::vector<ThreadLocal>& locals) {
  const std::string pad(static_cast<size_t>(depth) * 2, ' ');
  Block segment;
  auto flush = [&]() {
    if (segment.empty()) return;
    out << pad << "for (int ft_thread = 0; ft_thread < " << threads << "; ++ft_thread) {\n";
    for (const ThreadLocal& t : locals) {
      out << pad << "  float* " << t.name << " = " << t.name << "_all + (long long)ft_thread * " << t.count << ";\n";
    }
    emit_block(out, segment, depth + 1, threads, true);
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
    } else if (s.kind == Stmt::Kind::kPart) {
      flush();
      out << pad << "if (" << s.a << ") {\n";
      emit_block(out, s.uniform, depth + 1, threads, true);
      emit_host_body(out, s.body, depth + 1, threads, locals);
      out << pad << "}\n";
    } else if (s.kind == Stmt::Kind::kUniformFor) {
      flush();
      out << pad << "for (long long " << s.name << " = " << s.a << "; " << s.name << " < (" << s.b << "); ++" << s.name
          << ") {\n";
      emit_host_body(out, s.body, depth + 1, threads, locals);
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
    for (const ThreadLocal& t : k.thread_locals) out << "  float " << t.name << "[" << t.count << "];\n";
    emit_block(out, k.uniform, 1, k.threads, false);
    emit_block(out, k.body, 1, k.threads, false);
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
         "  fprintf(stderr, \"fusetune: misaligned vector load from %s\\n\", buffer);\n  abort();\n}\n\n";
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
      out << "  float* " << t.name << "_all = (float*)malloc(sizeof(float) * " << k.threads * t.count << ");\n";
    }
    out << "  for (long long ft_block = ft_first_block; ft_block < ft_last_block; ++ft_block) {\n";
    emit_block(out, k.uniform, 2, k.threads, true);
    emit_host_body(out, k.body, 2, k.threads, k.thread_locals);
    out << "  }\n  free(ft_smem);\n";
    for (const ThreadLocal& t : k.thread_locals) out << "  free(" << t.name << "_all);\n";
    out << "}\n\n";
  }
  return out.str();
}

}  // namespace fusetune::codegen
