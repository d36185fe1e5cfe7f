#include "simt/module.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <regex>
#include <sstream>
#include <thread>

#include "core/error.h"
#include "core/files.h"
#include "core/kernel_text.h"
#include "core/sha256.h"
#include "simt/prelude_text.h"

namespace fusetune::simt {

namespace fs = std::filesystem;

namespace {


const char* const kFlags = "-std=c++17 -O2 -g1 -shared -fPIC -w";

}  // namespace

std::string build_unit(const std::string& cuda_source) {
  std::ostringstream unit;
  unit << kDeviceApiText << "\n" << kPreludeText << "\n#line 1 \"kernels.cu\"\n" << cuda_source << "\n";
  for (const KernelSignature& k : kernel_signatures(cuda_source)) unit << "FT_SIMT_ENTRY(" << k.name << ")\n";
  return unit.str();
}

std::string default_compiler() { return std::getenv("CXX") ? std::getenv("CXX") : "c++"; }

std::string compiler_identity(const std::string& compiler) {
  static std::mutex mutex;
  static std::map<std::string, std::string> known;
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = known.find(compiler); it != known.end()) return it->second;
  std::string first;
  if (FILE* p = ::popen((compiler + " --version 2>/dev/null").c_str(), "r")) {
    char line[512];
    if (std::fgets(line, sizeof line, p)) first = line;
    ::pclose(p);
  }
  while (!first.empty() && (first.back() == '\n' || first.back() == '\r')) first.pop_back();
  return known[compiler] = compiler + ": " + (first.empty() ? "version unknown" : first);
}

std::string compile(const std::string& cuda_source, const std::string& compiler_arg) {
  const std::string compiler = compiler_arg.empty() ? default_compiler() : compiler_arg;
  const std::string unit = build_unit(cuda_source);
  const std::string digest = sha256_hex(unit + "\n// compiler: " + compiler_identity(compiler) + " " + kFlags);
  const fs::path dir = cache_dir("host-kernels");
  std::error_code ec;
  fs::create_directories(dir, ec);
  check(!ec, dir.string(), ": cannot create the kernel cache (", ec.message(), ")");
  const fs::path lib = dir / (digest + ".so");
  if (fs::exists(lib)) return lib.string();
  std::ostringstream tag_text;
  tag_text << ::getpid() << "_" << std::this_thread::get_id();
  const std::string tag = tag_text.str();
  const fs::path src = dir / (digest + "." + tag + ".cpp");
  const fs::path tmp = dir / (digest + "." + tag + ".so");
  const fs::path log = dir / (digest + "." + tag + ".log");
  std::ofstream(src) << unit;
  const std::string cmd = compiler + " " + kFlags + " -o '" + tmp.string() + "' '" + src.string() + "' > '" + log.string() + "' 2>&1";
  if (std::system(cmd.c_str()) != 0) {
    std::ifstream in(log);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    fail("host build of the CUDA text failed (", compiler, ", unit kept at ", src.string(), "): ", text.substr(0, 2000));
  }
  fs::rename(tmp, lib, ec);  // atomic publish; a concurrent identical build is as good
  fs::remove(src, ec);
  fs::remove(log, ec);
  return lib.string();
}

namespace {

// The host kernels resolve ft_simt_ops (simt/device_api.h) dynamically. Where the library defining
// it was itself loaded with RTLD_LOCAL (the runtime library under a Python extension module, which
// Python opens locally), its symbols are not in the global scope: promote that library, once.
void make_ops_counter_global() {
  static std::once_flag once;
  std::call_once(once, [] {
    Dl_info info{};  // the library this function is in defines the counter (a thread-local's address is no help)
    if (dladdr(reinterpret_cast<const void*>(&make_ops_counter_global), &info) == 0 || info.dli_fname == nullptr) return;
    if (void* self = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_GLOBAL)) dlclose(self);
  });
}

}  // namespace

Module::Module(const std::string& cuda_source, const std::string& compiler) {
  const std::string lib = compile(cuda_source, compiler);
  make_ops_counter_global();
  handle_ = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
  check(handle_ != nullptr, "dlopen of ", lib, " failed: ", dlerror());
  try {
    auto bind = reinterpret_cast<ft_simt_bind_fn>(dlsym(handle_, "ft_simt_bind"));
    check(bind != nullptr, lib, ": no ft_simt_bind (not a host build of fusetune's CUDA text)");
    bind(api());
    for (KernelSignature& sig : kernel_signatures(cuda_source)) kernels_.push_back({sig.name, nullptr, std::move(sig.params)});
    for (KernelRef& k : kernels_) {
      k.entry = reinterpret_cast<ft_simt_entry>(dlsym(handle_, ("ft_simt_entry_" + k.name).c_str()));
      check(k.entry != nullptr, "kernel '", k.name, "' missing from ", lib);
    }
  } catch (...) {
    dlclose(handle_);
    throw;
  }
}

Module::~Module() { dlclose(handle_); }

const KernelRef& Module::kernel(const std::string& name) const {
  for (const KernelRef& k : kernels_) {
    if (k.name == name) return k;
  }
  fail("no kernel '", name, "' in the module");
}

}  // namespace fusetune::simt
