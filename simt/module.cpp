#include "simt/module.h"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
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
#include "core/parallel.h"
#include "core/sha256.h"
#include "simt/prelude_text.h"

namespace fusetune::simt {

namespace fs = std::filesystem;

namespace {

// Compiling (each unit to an object) and linking (the objects to one shared library). -fwrapv:
// signed integers wrap as a GPU's do, so an index computed with an overflow reaches memcheck as
// the GPU would compute it (never assumed away by the optimizer). -O1, not -O2: the kernels'
// checked accesses are calls into the executor that no optimization level removes, so -O2 ran no
// faster and built a third slower (measured on this kind of machine, caches cold: a flash-decoding
// test's 20 kernels 75.7 s -> 51.7 s to build and run, run alone 14.9 s -> 14.3 s; CI's tier of
// 704 tests 4,056 s -> 2,865 s of test time, 2,040 s -> 1,441 s on 2 cores).
const char* const kCompileFlags = "-std=c++17 -O1 -g1 -fPIC -w -fwrapv";
const char* const kLinkFlags = "-shared -fPIC";
// A unit smaller than this would spend more on parsing the prelude and the system headers
// than it saves by running beside the others.
constexpr size_t kMinUnitBytes = 96 * 1024;

// Runs `command`, its output into `log`; on failure throws the log's head naming `what`.
void run_compiler(const std::string& command, const fs::path& log, const std::string& what) {
  if (std::system((command + " > '" + log.string() + "' 2>&1").c_str()) == 0) return;
  std::ifstream in(log);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  fail("host build of the CUDA text failed (", what, "): ", text.substr(0, 2000));
}

// What names a writer's private files in the cache: its process and thread.
std::string writer_tag() {
  std::ostringstream tag;
  tag << ::getpid() << "_" << std::this_thread::get_id();
  return tag.str();
}

// 1-based line of offset `at` in `text`.
size_t line_at(const std::string& text, size_t at) {
  return 1 + static_cast<size_t>(std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(at), '\n'));
}

}  // namespace

std::vector<std::string> build_units(const std::string& cuda_source, size_t parts, const std::string& header) {
  // Each kernel's text runs from its definition to the next kernel's.
  const std::vector<KernelSignature> kernels = kernel_signatures(cuda_source);
  std::vector<size_t> starts;
  for (const KernelSignature& k : kernels) starts.push_back(k.offset);
  const size_t head_end = starts.empty() ? cuda_source.size() : starts.front();
  const size_t body = cuda_source.size() - head_end;
  parts = std::max<size_t>(1, std::min({parts, starts.size(), body / kMinUnitBytes + 1}));
  std::vector<std::string> units;
  size_t k = 0;
  for (size_t u = 0; u < parts; ++u) {
    // Kernels in order, each unit taking them until it holds its share of the text.
    const size_t first = k;
    const size_t goal = head_end + body * (u + 1) / parts;
    while (k < starts.size() && (k == first || u + 1 == parts || starts[k] < goal)) ++k;
    std::ostringstream unit;
    unit << "#include \"" << header << "\"\n";  // first, so that its precompiled form serves
    if (u == 0) unit << "FT_SIMT_TABLE()\n";
    unit << "#line 1 \"kernels.cu\"\n" << cuda_source.substr(0, head_end);
    if (first < k) {
      const size_t from = starts[first], to = k < starts.size() ? starts[k] : cuda_source.size();
      unit << "\n#line " << line_at(cuda_source, from) << " \"kernels.cu\"\n" << cuda_source.substr(from, to - from) << "\n";
    }
    for (size_t i = first; i < k; ++i) unit << "FT_SIMT_ENTRY(" << kernels[i].name << ")\n";
    units.push_back(unit.str());
    if (k == starts.size()) break;
  }
  return units;
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
  return known[compiler] = compiler + ": " + (first.empty() ? "version unknown" : first) + "; SIMT executor API " +
                          std::to_string(FT_SIMT_API_VERSION);
}

std::string unit_compile_command(const std::string& compiler, const std::string& header, const std::string& source,
                                 const std::string& object) {
  return compiler + " " + kCompileFlags + " -I'" + fs::path(header).parent_path().string() + "' -c -o '" + object + "' '" +
         source + "'";
}

std::string prelude_header(const std::string& compiler_arg) {
  const std::string compiler = compiler_arg.empty() ? default_compiler() : compiler_arg;
  const std::string text = std::string(kDeviceApiText) + "\n" + kPreludeText + "\n";
  const fs::path dir = cache_dir("host-kernels");
  const fs::path header =
      dir / ("prelude-" + sha256_hex(text + "// compiler: " + compiler_identity(compiler) + " " + kCompileFlags).substr(0, 32) + ".h");
  const fs::path pch = header.string() + ".gch";
  static std::mutex mutex;  // one build of each a process, however many threads compile
  std::lock_guard<std::mutex> lock(mutex);
  if (fs::exists(pch) && fs::exists(header)) return header.string();
  std::error_code ec;
  fs::create_directories(dir, ec);
  check(!ec, dir.string(), ": cannot create the kernel cache (", ec.message(), ")");
  const std::string tag = writer_tag();
  if (!fs::exists(header)) {
    const fs::path tmp = header.string() + "." + tag;
    std::ofstream(tmp) << text;
    fs::rename(tmp, header, ec);  // atomic publish, as the libraries
  }
  // The precompiled form, with the units' own flags (GCC reads it only for a unit built with
  // them); where the compiler cannot read it, a unit parses the header, as correct and slower.
  const fs::path tmp = header.string() + "." + tag + ".gch";
  const fs::path log = header.string() + "." + tag + ".log";
  run_compiler(compiler + " " + kCompileFlags + " -x c++-header -o '" + tmp.string() + "' '" + header.string() + "'", log,
               compiler + " precompiling the prelude " + header.string());
  fs::rename(tmp, pch, ec);
  fs::remove(log, ec);
  return header.string();
}

std::string compile(const std::string& cuda_source, const std::string& compiler_arg) {
  const std::string compiler = compiler_arg.empty() ? default_compiler() : compiler_arg;
  // The library is the same however the text is divided: the key names the text, not the units.
  const std::string digest = sha256_hex(std::string(kDeviceApiText) + kPreludeText + "\n// kernels.cu\n" + cuda_source +
                                        "\n// compiler: " + compiler_identity(compiler) + " " + kCompileFlags + " " + kLinkFlags);
  const fs::path dir = cache_dir("host-kernels");
  const fs::path lib = dir / (digest + ".so");
  if (fs::exists(lib)) return lib.string();
  const fs::path header = prelude_header(compiler);
  const std::string stem = digest + "." + writer_tag();
  const std::vector<std::string> units =
      build_units(cuda_source, std::max(1u, std::thread::hardware_concurrency()), header.filename().string());
  std::vector<fs::path> sources, objects;
  for (size_t u = 0; u < units.size(); ++u) {
    sources.push_back(dir / (stem + "." + std::to_string(u) + ".cpp"));
    objects.push_back(dir / (stem + "." + std::to_string(u) + ".o"));
    std::ofstream(sources.back()) << units[u];
  }
  // The units compile side by side (a large bundle's text on every core), then link as one.
  parallel_for(units.size(), [&](size_t u) {
    run_compiler(unit_compile_command(compiler, header.string(), sources[u].string(), objects[u].string()),
                 dir / (stem + "." + std::to_string(u) + ".log"),
                 compiler + ", unit kept at " + sources[u].string());
  }, static_cast<int>(units.size()));
  std::error_code ec;
  const fs::path tmp = dir / (stem + ".so");
  std::string link = compiler + " " + kLinkFlags + " -o '" + tmp.string() + "'";
  for (const fs::path& o : objects) link += " '" + o.string() + "'";
  run_compiler(link, dir / (stem + ".log"), compiler + " linking " + std::to_string(units.size()) + " units");
  fs::rename(tmp, lib, ec);  // atomic publish; a concurrent identical build is as good
  for (size_t u = 0; u < units.size(); ++u) {
    fs::remove(sources[u], ec);
    fs::remove(objects[u], ec);
    fs::remove(dir / (stem + "." + std::to_string(u) + ".log"), ec);
  }
  fs::remove(dir / (stem + ".log"), ec);
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
