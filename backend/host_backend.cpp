#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <thread>

#include "backend/backend.h"
#include "backend/library_host.h"
#include "codegen/emit.h"
#include "core/error.h"
#include "core/sha256.h"

namespace fusetune::backend {

namespace fs = std::filesystem;

namespace {

class HostBuffer : public Buffer {
 public:
  explicit HostBuffer(size_t bytes) : data_(bytes + 64) {}
  size_t bytes() const override { return data_.size() - 64; }
  void upload(const void* data, size_t n) override {
    check(n <= bytes(), "upload of ", n, " bytes into a buffer of ", bytes());
    std::memcpy(aligned(), data, n);
  }
  void download(void* data, size_t n) const override {
    check(n <= bytes(), "download of ", n, " bytes from a buffer of ", bytes());
    std::memcpy(data, const_cast<HostBuffer*>(this)->aligned(), n);
  }
  void fill_byte(unsigned char value) override { std::memset(aligned(), value, bytes()); }
  void* handle() override { return aligned(); }

 private:
  unsigned char* aligned() {
    auto p = reinterpret_cast<uintptr_t>(data_.data());
    return data_.data() + ((64 - p % 64) % 64);
  }
  std::vector<unsigned char> data_;
};

class HostView : public Buffer {
 public:
  HostView(Buffer& parent, size_t offset, size_t bytes)
      : ptr_(static_cast<unsigned char*>(parent.handle()) + offset), bytes_(bytes) {
    check(offset + bytes <= parent.bytes(), "view [", offset, ", ", offset + bytes, ") outside a buffer of ", parent.bytes());
  }
  size_t bytes() const override { return bytes_; }
  void upload(const void* data, size_t n) override { std::memcpy(ptr_, data, std::min(n, bytes_)); }
  void download(void* data, size_t n) const override { std::memcpy(data, ptr_, std::min(n, bytes_)); }
  void fill_byte(unsigned char value) override { std::memset(ptr_, value, bytes_); }
  void* handle() override { return ptr_; }

 private:
  unsigned char* ptr_;
  size_t bytes_;
};

using HostKernel = void (*)(void**, long long, long long);

// The host form of a prepared sequence: the module's launches, in order.
class HostSequence : public Sequence {
 public:
  HostSequence(Module& module, std::vector<Step> steps) : module_(module), steps_(std::move(steps)) {}
  void run() override {
    for (const Step& s : steps_) module_.launch(s.kernel, s.args);
  }
  bool cuda_graph() const override { return false; }

 private:
  Module& module_;
  std::vector<Step> steps_;
};

// A kernel of a host module: the compiled host form and its grid, or a library call.
struct HostEntry {
  HostKernel fn = nullptr;
  int64_t grid = 0;
  std::optional<planner::LibraryCall> library;
};

class HostModule : public Module {
 public:
  HostModule(void* lib, std::map<std::string, HostEntry> kernels, int workers)
      : lib_(lib), kernels_(std::move(kernels)), workers_(workers) {}
  ~HostModule() override { dlclose(lib_); }

  void launch(const std::string& kernel, const std::vector<Buffer*>& args) override {
    auto it = kernels_.find(kernel);
    check(it != kernels_.end(), "no kernel '", kernel, "' in the module");
    std::vector<void*> raw;
    for (Buffer* b : args) raw.push_back(b->handle());
    if (it->second.library) {
      run_library_call_host(*it->second.library, raw.data(), workers_);
      return;
    }
    const int64_t grid = it->second.grid;
    const int64_t workers = std::max<int64_t>(1, std::min<int64_t>(workers_, grid));
    if (workers == 1) {
      it->second.fn(raw.data(), 0, grid);
      return;
    }
    std::vector<std::thread> threads;
    for (int64_t w = 0; w < workers; ++w) {
      const int64_t lo = grid * w / workers, hi = grid * (w + 1) / workers;
      threads.emplace_back([fn = it->second.fn, &raw, lo, hi] { fn(raw.data(), lo, hi); });
    }
    for (auto& t : threads) t.join();
  }

  Timing time(const std::string& kernel, const std::vector<Buffer*>& args, const TimingPolicy& policy) override {
    for (int w = 0; w < policy.warmup; ++w) launch(kernel, args);
    std::vector<double> times;
    double total_ms = 0;
    while (static_cast<int>(times.size()) < std::max(1, policy.max_repeats) &&
           (static_cast<int>(times.size()) < policy.min_repeats || total_ms < policy.min_time_ms)) {
      const auto t0 = std::chrono::steady_clock::now();
      launch(kernel, args);
      times.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
      total_ms += times.back() / 1000.0;
    }
    return summarize_times(std::move(times));
  }

  std::unique_ptr<Sequence> prepare(std::vector<Step> steps) override {
    for (const Step& s : steps) check(kernels_.count(s.kernel) == 1, "no kernel '", s.kernel, "' in the module");
    return std::make_unique<HostSequence>(*this, std::move(steps));
  }

 private:
  void* lib_;
  std::map<std::string, HostEntry> kernels_;
  int workers_;
};

fs::path cache_dir() {
  if (const char* d = std::getenv("FUSETUNE_CACHE_DIR")) return fs::path(d) / "host-kernels";
  if (const char* x = std::getenv("XDG_CACHE_HOME")) return fs::path(x) / "fusetune" / "host-kernels";
  if (const char* h = std::getenv("HOME")) return fs::path(h) / ".cache" / "fusetune" / "host-kernels";
  return fs::temp_directory_path() / "fusetune-host-kernels";
}

class HostBackend : public Backend {
 public:
  HostBackend(std::string compiler, int workers) : compiler_(std::move(compiler)), workers_(workers) {
    if (compiler_.empty()) compiler_ = default_host_compiler();
    if (workers_ <= 0) workers_ = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  }
  std::string name() const override { return "host"; }
  DeviceProperties properties() const override {
    return {"host CPU, " + std::to_string(workers_) + " threads", "host", 0, workers_};
  }

  std::unique_ptr<Module> load_source(const ModuleSource& module) override {
    const std::string lib = host_compile(module.host_source, compiler_);
    void* handle = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
    check(handle != nullptr, "dlopen of ", lib, " failed: ", dlerror());
    std::map<std::string, HostEntry> fns;
    for (const ModuleSource::KernelInfo& k : module.kernels) {
      if (!k.library.empty()) {
        try {
          fns[k.name].library = planner::LibraryCall::from_json(k.library);
        } catch (const Error&) {
          dlclose(handle);
          throw;
        }
        continue;
      }
      void* sym = dlsym(handle, k.name.c_str());
      if (sym == nullptr) {
        dlclose(handle);
        fail("kernel '", k.name, "' missing from ", lib);
      }
      fns[k.name] = {reinterpret_cast<HostKernel>(sym), k.grid, std::nullopt};
    }
    return std::make_unique<HostModule>(handle, std::move(fns), workers_);
  }

  std::unique_ptr<Buffer> allocate(size_t bytes) override { return std::make_unique<HostBuffer>(bytes); }
  std::unique_ptr<Buffer> view(Buffer& parent, size_t offset, size_t bytes) override {
    return std::make_unique<HostView>(parent, offset, bytes);
  }

 private:
  std::string compiler_;
  int workers_;
};

}  // namespace

std::string default_host_compiler() { return std::getenv("CXX") ? std::getenv("CXX") : "c++"; }

std::string host_compile(const std::string& source, const std::string& compiler_arg) {
  const std::string compiler = compiler_arg.empty() ? default_host_compiler() : compiler_arg;
  const std::string digest = sha256_hex(source + "\n// compiler: " + compiler);
  const fs::path dir = cache_dir();
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
  std::ofstream(src) << source;
  const std::string cmd = compiler + " -std=c++17 -O2 -shared -fPIC -w -o '" + tmp.string() + "' '" + src.string() +
                          "' > '" + log.string() + "' 2>&1";
  const int rc = std::system(cmd.c_str());
  if (rc != 0) {
    std::ifstream in(log);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    fail("host compilation of generated kernels failed (", compiler, ", source kept at ", src.string(), "): ",
         text.substr(0, 2000));
  }
  fs::rename(tmp, lib, ec);  // atomic publish; a concurrent identical build is as good
  fs::remove(src, ec);
  fs::remove(log, ec);
  return lib.string();
}

Timing summarize_times(std::vector<double> times) {
  check(!times.empty(), "no timed runs");
  Timing t;
  t.repeats = static_cast<int>(times.size());
  std::sort(times.begin(), times.end());
  t.min_us = times.front();
  t.max_us = times.back();
  const size_t n = times.size();
  t.median_us = n % 2 ? times[n / 2] : 0.5 * (times[n / 2 - 1] + times[n / 2]);
  return t;
}

ModuleSource module_source(const std::vector<codegen::Kernel>& kernels) {
  ModuleSource m;
  for (const codegen::Kernel& k : kernels) m.kernels.push_back({k.name, k.grid, k.threads, k.shared_bytes, k.library});
  m.cuda_source = codegen::emit_cuda(kernels);
  m.host_source = codegen::emit_host(kernels);
  return m;
}

std::unique_ptr<Backend> make_host_backend(const std::string& compiler, int workers) {
  return std::make_unique<HostBackend>(compiler, workers);
}

}  // namespace fusetune::backend
