#include "backend/nvrtc.h"

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <mutex>
#include <regex>
#include <sstream>

#include "core/error.h"
#include "core/files.h"
#include "core/sha256.h"

#ifdef FUSETUNE_HAVE_NVRTC
#include <nvrtc.h>
#endif

namespace fusetune::backend {

#ifdef FUSETUNE_HAVE_NVRTC

namespace {

// NVRTC's entry points, from the library opened at run time: nothing of fusetune links libnvrtc,
// so a deployment that only runs bundles with cubins for its GPU loads without it. Tried in
// order: the soname of the NVRTC the build was made with (found by the loader's search: the
// library path, the caller's run path), then that file in the toolkit the build used.
struct Nvrtc {
  void* lib = nullptr;
  decltype(&nvrtcVersion) version = nullptr;
  decltype(&nvrtcGetErrorString) error_string = nullptr;
  decltype(&nvrtcCreateProgram) create = nullptr;
  decltype(&nvrtcCompileProgram) compile = nullptr;
  decltype(&nvrtcDestroyProgram) destroy = nullptr;
  decltype(&nvrtcGetProgramLogSize) log_size = nullptr;
  decltype(&nvrtcGetProgramLog) log = nullptr;
  decltype(&nvrtcGetCUBINSize) cubin_size = nullptr;
  decltype(&nvrtcGetCUBIN) cubin = nullptr;
  decltype(&nvrtcGetPTXSize) ptx_size = nullptr;
  decltype(&nvrtcGetPTX) ptx = nullptr;

  template <typename F>
  bool sym(F& f, const char* name) {
    f = reinterpret_cast<F>(dlsym(lib, name));
    return f != nullptr;
  }
  bool open(std::string& why) {
    for (const std::string& name : {std::string(FUSETUNE_NVRTC_SONAME), std::string(FUSETUNE_NVRTC_DIR "/" FUSETUNE_NVRTC_SONAME)}) {
      if ((lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL)) != nullptr) break;
    }
    if (lib == nullptr) {
      why = "NVRTC is not installed (" FUSETUNE_NVRTC_SONAME " not found: install the CUDA toolkit's NVRTC, e.g. pip's "
            "nvidia-cuda-nvrtc or Debian's libnvrtc, or run a bundle that holds a cubin or PTX for this GPU)";
      return false;
    }
    const bool ok = sym(version, "nvrtcVersion") && sym(error_string, "nvrtcGetErrorString") &&
                    sym(create, "nvrtcCreateProgram") && sym(compile, "nvrtcCompileProgram") &&
                    sym(destroy, "nvrtcDestroyProgram") && sym(log_size, "nvrtcGetProgramLogSize") &&
                    sym(log, "nvrtcGetProgramLog") && sym(cubin_size, "nvrtcGetCUBINSize") && sym(cubin, "nvrtcGetCUBIN") &&
                    sym(ptx_size, "nvrtcGetPTXSize") && sym(ptx, "nvrtcGetPTX");
    if (!ok) why = FUSETUNE_NVRTC_SONAME " lacks an expected entry point";
    return ok;
  }
};

// The library, opened once; nullptr with the reason when it cannot be.
const Nvrtc* nvrtc_library(std::string* why = nullptr) {
  static std::once_flag once;
  static Nvrtc lib;
  static std::string reason;
  static bool ok = false;
  std::call_once(once, [] { ok = lib.open(reason); });
  if (!ok && why != nullptr) *why = reason;
  return ok ? &lib : nullptr;
}

const Nvrtc& nvrtc() {
  std::string why;
  const Nvrtc* lib = nvrtc_library(&why);
  check(lib != nullptr, why);
  return *lib;
}

void nvrtc_check(nvrtcResult r, const char* what) {
  check(r == NVRTC_SUCCESS, "NVRTC ", what, " failed: ", nvrtc().error_string(r));
}

// Parses ptxas -v output: "Function properties for NAME" / "Compiling entry function 'NAME'"
// followed by "Used N registers, ... M bytes smem" and stack/spill lines.
std::map<std::string, KernelResources> parse_resources(const std::string& log) {
  std::map<std::string, KernelResources> out;
  std::istringstream in(log);
  std::string line, current;
  // Compiled once, not per call: a worker's compile pool parses logs on several threads at once.
  static const std::regex entry(R"(Compiling entry function '([^']+)')");
  static const std::regex props(R"(Function properties for ([A-Za-z_0-9]+))");
  static const std::regex spill(R"((\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads)");
  static const std::regex used(R"(Used (\d+) registers)");
  static const std::regex smem(R"((\d+) bytes smem)");
  std::smatch m;
  while (std::getline(in, line)) {
    if (std::regex_search(line, m, entry) || std::regex_search(line, m, props)) current = m[1];
    if (current.empty()) continue;
    KernelResources& r = out[current];
    if (std::regex_search(line, m, spill)) {
      r.stack_bytes = std::stoi(m[1]);
      r.spill_store_bytes = std::stoi(m[2]);
      r.spill_load_bytes = std::stoi(m[3]);
    }
    if (std::regex_search(line, m, used)) r.registers = std::stoi(m[1]);
    if (std::regex_search(line, m, smem)) r.shared_bytes = std::stoi(m[1]);
  }
  return out;
}

}  // namespace

bool nvrtc_available() { return nvrtc_library() != nullptr; }

std::string nvrtc_unavailable_reason() {
  std::string why;
  return nvrtc_library(&why) != nullptr ? "" : why;
}

std::string nvrtc_version() {
  const Nvrtc* lib = nvrtc_library();
  if (lib == nullptr) return "unavailable";
  int major = 0, minor = 0;
  lib->version(&major, &minor);
  return std::to_string(major) + "." + std::to_string(minor);
}

namespace {

// What NVRTC said while compiling the program (warnings, errors, ptxas's report).
std::string program_log(nvrtcProgram prog) {
  size_t size = 0;
  nvrtc().log_size(prog, &size);
  std::string log(size, '\0');
  if (size > 0) nvrtc().log(prog, log.data());
  while (!log.empty() && log.back() == '\0') log.pop_back();
  return log;
}

}  // namespace

std::string target_architecture(const std::string& arch) { return arch == "sm_90" ? "sm_90a" : arch; }

CompiledCuda compile_cuda(const std::string& source, const std::string& arch, int max_registers) {
  const Nvrtc& nv = nvrtc();
  const auto t0 = std::chrono::steady_clock::now();
  nvrtcProgram prog = nullptr;
  // No fast-math: the kernels are verified against the reference. --split-compile=0 optimises the
  // kernels of a module on all cores (a bundle's module of 74 kernels: 12.1 s alone, 8.0 s on 2
  // cores; the same registers, shared memory and spills). --no-cache: where a CUDA driver is
  // installed, NVRTC 13 keeps its own cache of cubins, across processes, and a compilation it
  // answers from that cache prints no ptxas report (seen on an H100 machine: the second identical
  // compilation's log held no "Compiling entry function" line); compile_cuda_cached is the cache
  // here, and it keeps the report. An NVRTC that knows neither option compiles without them.
  const std::vector<std::string> optional = {"--split-compile=0", "--no-cache"};
  std::vector<std::string> opts = {"--gpu-architecture=" + target_architecture(arch), "--std=c++17", "--ptxas-options=-v"};
  opts.insert(opts.end(), optional.begin(), optional.end());
  if (max_registers > 0) opts.push_back("--maxrregcount=" + std::to_string(max_registers));
  nvrtcResult rc = NVRTC_SUCCESS;
  for (bool with_optional : {true, false}) {
    if (!with_optional) {
      for (const std::string& o : optional) opts.erase(std::find(opts.begin(), opts.end(), o));
    }
    nvrtc_check(nv.create(&prog, source.c_str(), "fusetune_kernels.cu", 0, nullptr, nullptr), "program creation");
    std::vector<const char*> copts;
    for (const auto& o : opts) copts.push_back(o.c_str());
    rc = nv.compile(prog, static_cast<int>(copts.size()), copts.data());
    if (rc != NVRTC_ERROR_INVALID_OPTION || !with_optional) break;
    nv.destroy(&prog);
  }
  const std::string log = program_log(prog);
  if (rc != NVRTC_SUCCESS) {
    nv.destroy(&prog);
    fail("NVRTC compilation for ", arch, " failed: ", nv.error_string(rc), "\n", log.substr(0, 4000));
  }
  CompiledCuda out;
  out.arch = arch;
  out.log = log;
  size_t cubin_size = 0;
  nvrtc_check(nv.cubin_size(prog, &cubin_size), "cubin size");
  out.cubin.resize(cubin_size);
  nvrtc_check(nv.cubin(prog, out.cubin.data()), "cubin");
  size_t ptx_size = 0;
  nvrtc_check(nv.ptx_size(prog, &ptx_size), "PTX size");
  out.ptx.resize(ptx_size);
  nvrtc_check(nv.ptx(prog, out.ptx.data()), "PTX");
  while (!out.ptx.empty() && out.ptx.back() == '\0') out.ptx.pop_back();
  nv.destroy(&prog);
  out.resources = parse_resources(log);
  out.compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

std::string compile_ptx(const std::string& source, const std::string& arch) {
  check(arch.rfind("sm_", 0) == 0, "compile_ptx: an architecture sm_XX, got ", arch);
  const Nvrtc& nv = nvrtc();
  nvrtcProgram prog = nullptr;
  nvrtc_check(nv.create(&prog, source.c_str(), "fusetune_kernels.cu", 0, nullptr, nullptr), "program creation");
  const std::string target = "--gpu-architecture=compute_" + target_architecture(arch).substr(3);
  const std::vector<const char*> opts = {target.c_str(), "--std=c++17"};
  const nvrtcResult rc = nv.compile(prog, static_cast<int>(opts.size()), opts.data());
  const std::string log = program_log(prog);
  if (rc != NVRTC_SUCCESS) {
    nv.destroy(&prog);
    fail("NVRTC compilation to PTX for ", arch, " failed: ", nv.error_string(rc), "\n", log.substr(0, 4000));
  }
  size_t size = 0;
  nvrtc_check(nv.ptx_size(prog, &size), "PTX size");
  std::string ptx(size, '\0');
  nvrtc_check(nv.ptx(prog, ptx.data()), "PTX");
  nv.destroy(&prog);
  while (!ptx.empty() && ptx.back() == '\0') ptx.pop_back();
  return ptx;
}

CompiledCuda compile_cuda_cached(const std::string& source, const std::string& arch, int max_registers) {
  const auto t0 = std::chrono::steady_clock::now();
  // "no-cache": entries written before NVRTC's own cache was turned off may lack the report.
  const std::string key = sha256_hex(source + "\n// arch " + target_architecture(arch) + " maxrreg " + std::to_string(max_registers) + " nvrtc " +
                                     nvrtc_version() + " no-cache");
  const std::filesystem::path dir = cache_dir("nvrtc");
  const std::filesystem::path cubin = dir / (key + ".cubin"), log = dir / (key + ".log"), ptx = dir / (key + ".ptx");
  std::error_code ec;
  if (std::filesystem::exists(cubin, ec) && std::filesystem::exists(log, ec) && std::filesystem::exists(ptx, ec)) {
    CompiledCuda out;
    out.arch = arch;
    const std::string bytes = read_file(cubin, "cached cubin");
    out.cubin.assign(bytes.begin(), bytes.end());
    out.ptx = read_file(ptx, "cached PTX");
    out.log = read_file(log, "cached ptxas report");
    out.resources = parse_resources(out.log);
    out.cached = true;
    out.compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return out;
  }
  CompiledCuda out = compile_cuda(source, arch, max_registers);
  std::filesystem::create_directories(dir, ec);
  if (!ec) {  // a cache that cannot be written only costs the next compilation
    try {
      write_file_atomically(log, out.log);
      write_file_atomically(ptx, out.ptx);
      write_file_atomically(cubin, std::string(out.cubin.begin(), out.cubin.end()));
    } catch (const Error&) {
    }
  }
  return out;
}

#else

bool nvrtc_available() { return false; }
std::string nvrtc_unavailable_reason() { return "this build has no NVRTC (the CUDA toolkit was not found at build time)"; }
std::string nvrtc_version() { return "unavailable"; }
CompiledCuda compile_cuda(const std::string&, const std::string& arch, int) {
  fail("this build has no NVRTC (the CUDA toolkit was not found at build time); cannot compile for ", arch);
}
CompiledCuda compile_cuda_cached(const std::string& source, const std::string& arch, int max_registers) {
  return compile_cuda(source, arch, max_registers);
}
std::string compile_ptx(const std::string&, const std::string& arch) {
  fail("this build has no NVRTC (the CUDA toolkit was not found at build time); cannot compile for ", arch);
}

#endif

}  // namespace fusetune::backend
