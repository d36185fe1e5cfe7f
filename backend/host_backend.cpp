#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <thread>

#include "backend/backend.h"
#include "backend/library_host.h"
#include "codegen/emit.h"
#include "core/error.h"
#include "simt/module.h"

namespace fusetune::backend {

namespace {

// The CPU's model as the kernel reports it ("host CPU" where it does not).
std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) break;
    const size_t start = line.find_first_not_of(" \t", colon + 1);
    if (start != std::string::npos) return line.substr(start);
  }
  return "host CPU";
}

class HostBuffer : public Buffer {
 public:
  explicit HostBuffer(size_t bytes) : data_(bytes + 64) {}
  size_t bytes() const override { return data_.size() - 64; }
  void upload(const void* data, size_t n) override {
    check(n <= bytes(), "upload of ", n, " bytes into a buffer of ", bytes());
    if (n > 0) std::memcpy(aligned(), data, n);  // an empty tensor's data may be null
  }
  void download(void* data, size_t n) const override {
    check(n <= bytes(), "download of ", n, " bytes from a buffer of ", bytes());
    if (n > 0) std::memcpy(data, const_cast<HostBuffer*>(this)->aligned(), n);
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

// Memory a host buffer does not own: an arena slot, or a caller's array bound to a sequence.
class HostView : public Buffer {
 public:
  HostView(void* ptr, size_t bytes) : ptr_(static_cast<unsigned char*>(ptr)), bytes_(bytes) {}
  size_t bytes() const override { return bytes_; }
  void upload(const void* data, size_t n) override { std::memcpy(ptr_, data, std::min(n, bytes_)); }
  void download(void* data, size_t n) const override { std::memcpy(data, ptr_, std::min(n, bytes_)); }
  void fill_byte(unsigned char value) override { std::memset(ptr_, value, bytes_); }
  void* handle() override { return ptr_; }

 private:
  unsigned char* ptr_;
  size_t bytes_;
};

// The host form of a prepared sequence: the module's launches, in order, each buffer bound to a
// caller's memory taking that memory's place in them.
class HostSequence : public Sequence {
 public:
  HostSequence(Module& module, std::vector<Step> steps) : module_(module), steps_(std::move(steps)) {}
  void run() override { run({}, {}); }
  void run(const std::vector<Transfer>& inputs, const std::vector<Transfer>& outputs) override {
    for (const Transfer& t : inputs) target(t.buffer).upload(t.memory, t.bytes);
    for (const Step& s : steps_) {
      std::vector<Buffer*> args;
      for (Buffer* b : s.args) args.push_back(&target(b));
      module_.launch(s.kernel, args);
    }
    for (const Transfer& t : outputs) target(t.buffer).download(t.memory, t.bytes);
  }
  void bind(Buffer* buffer, void* address) override {
    if (address == nullptr) {
      bound_.erase(buffer);
    } else {
      bound_[buffer] = std::make_unique<HostView>(address, buffer->bytes());
    }
  }
  bool cuda_graph() const override { return false; }
  std::vector<double> time_runs(int n) override {
    std::vector<double> us;
    for (int i = 0; i < n; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      run();
      us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    }
    return us;
  }

 private:
  Buffer& target(Buffer* buffer) {
    auto it = bound_.find(buffer);
    return it == bound_.end() ? *buffer : *it->second;
  }

  Module& module_;
  std::vector<Step> steps_;
  std::map<Buffer*, std::unique_ptr<HostView>> bound_;  // buffers bound to a caller's memory
};

// A kernel of a host module: its entry in the host build of the CUDA text, its launch shape and
// its scratch buffers (zeroed, bound after the arguments), or a library call.
struct HostEntry {
  const simt::KernelRef* kernel = nullptr;
  simt::Shape shape;
  std::optional<planner::LibraryCall> library;
  std::vector<std::shared_ptr<HostBuffer>> scratch;
  // The first block of each group of consecutive blocks that cooperate through the scratch
  // (codegen/kernel_ir.h: a counter buffer's groups; every other block a group of its own), in
  // order: a sample takes whole groups. Empty: every block alone.
  std::vector<int64_t> group_starts;
};

// The first blocks of a grid's groups of cooperating blocks, from its kernel's counter buffers
// (first block, blocks a group, groups); empty where no block cooperates.
std::vector<int64_t> cooperating_groups(int64_t grid, const std::vector<std::array<int64_t, 3>>& counters) {
  if (counters.empty()) return {};
  std::vector<std::array<int64_t, 3>> sorted = counters;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> starts;
  int64_t b = 0;
  for (const auto& [first, per, groups] : sorted) {
    for (; b < first; ++b) starts.push_back(b);
    for (int64_t i = 0; i < groups; ++i, b += per) starts.push_back(b);
  }
  for (; b < grid; ++b) starts.push_back(b);
  return starts;
}

// A sample of about `max_blocks` blocks of e's grid, sorted: whole groups of cooperating blocks
// (single blocks mostly), the first and the last and others drawn from `seed`. Empty where the
// grid is within the limit.
std::vector<int64_t> sampled_blocks(const HostEntry& e, int64_t max_blocks, uint64_t seed) {
  const int64_t grid = e.shape.grid;
  const int64_t groups = e.group_starts.empty() ? grid : static_cast<int64_t>(e.group_starts.size());
  const auto start = [&](int64_t c) { return e.group_starts.empty() ? c : e.group_starts[static_cast<size_t>(c)]; };
  const auto end = [&](int64_t c) { return c + 1 < groups ? start(c + 1) : grid; };
  if (grid <= std::max<int64_t>(max_blocks, end(0) - start(0) + end(groups - 1) - start(groups - 1))) return {};
  std::set<int64_t> chosen{0, groups - 1};
  int64_t blocks_chosen = end(0) - start(0) + end(groups - 1) - start(groups - 1);
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> pick(1, groups - 2);
  while (blocks_chosen < max_blocks && static_cast<int64_t>(chosen.size()) < groups) {
    const int64_t c = pick(rng);
    if (chosen.insert(c).second) blocks_chosen += end(c) - start(c);
  }
  std::vector<int64_t> blocks;
  for (int64_t c : chosen) {
    for (int64_t b = start(c); b < end(c); ++b) blocks.push_back(b);
  }
  return blocks;
}

class HostModule : public Module {
 public:
  HostModule(std::unique_ptr<simt::Module> module, std::map<std::string, HostEntry> kernels, simt::Options options,
             int64_t checked_sample)
      : module_(std::move(module)), kernels_(std::move(kernels)), options_(std::move(options)), checked_sample_(checked_sample) {}

  // Every block runs; with a checked sample, the race and initialisation checks cover that many
  // blocks of the grid, drawn from the kernel's name (the same ones every run).
  void launch(const std::string& kernel, const std::vector<Buffer*>& args) override {
    if (checked_sample_ <= 0 || !options_.checks) return run(kernel, args, options_);
    auto it = kernels_.find(kernel);
    check(it != kernels_.end(), "no kernel '", kernel, "' in the module");
    simt::Options sampled = options_;
    uint64_t seed = 14695981039346656037ull;  // FNV-1a of the name
    for (unsigned char c : kernel) seed = (seed ^ c) * 1099511628211ull;
    if (!it->second.library) sampled.checked_blocks = sampled_blocks(it->second, checked_sample_, seed);
    run(kernel, args, sampled);
  }

  Coverage launch_sample(const std::string& kernel, const std::vector<Buffer*>& args, int64_t max_blocks,
                         uint64_t seed) override {
    auto it = kernels_.find(kernel);
    check(it != kernels_.end(), "no kernel '", kernel, "' in the module");
    const int64_t grid = it->second.shape.grid;
    simt::Options sample = options_;
    if (!it->second.library) sample.blocks = sampled_blocks(it->second, max_blocks, seed);
    run(kernel, args, sample);
    return {sample.blocks.empty() ? grid : static_cast<int64_t>(sample.blocks.size()), grid};
  }

  Timing time(const std::string& kernel, const std::vector<Buffer*>& args, const TimingPolicy& policy) override {
    simt::Options plain = options_;  // timed runs execute the kernel without checks or counters
    plain.checks = plain.counters = false;
    for (int w = 0; w < policy.warmup; ++w) run(kernel, args, plain);
    std::vector<double> times;
    double total_ms = 0;
    while (static_cast<int>(times.size()) < std::max(1, policy.max_repeats) &&
           (static_cast<int>(times.size()) < policy.min_repeats || total_ms < policy.min_time_ms)) {
      const auto t0 = std::chrono::steady_clock::now();
      run(kernel, args, plain);
      times.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
      total_ms += times.back() / 1000.0;
    }
    return summarize_times(std::move(times));
  }

  std::unique_ptr<Sequence> prepare(std::vector<Step> steps) override {
    for (const Step& s : steps) check(kernels_.count(s.kernel) == 1, "no kernel '", s.kernel, "' in the module");
    return std::make_unique<HostSequence>(*this, std::move(steps));
  }

  std::map<std::string, simt::Counters> counters() const override { return counters_; }

 private:
  void run(const std::string& kernel, const std::vector<Buffer*>& args, const simt::Options& options) {
    auto it = kernels_.find(kernel);
    check(it != kernels_.end(), "no kernel '", kernel, "' in the module");
    std::vector<void*> raw;
    std::vector<size_t> bytes;
    for (Buffer* b : args) {
      raw.push_back(b->handle());
      bytes.push_back(b->bytes());
    }
    for (const auto& b : it->second.scratch) {
      raw.push_back(b->handle());
      bytes.push_back(b->bytes());
    }
    if (it->second.kernel != nullptr) {
      for (const simt::Param& p : it->second.kernel->params) {  // tensor maps: the executor builds them from the signature
        if (p.tensor_map.source < 0) continue;
        raw.push_back(nullptr);
        bytes.push_back(0);
      }
    }
    if (it->second.library) {
      run_library_call_host(*it->second.library, raw.data(), options.workers);
      return;
    }
    const simt::LaunchResult r = simt::launch(*it->second.kernel, raw, bytes, it->second.shape, options);
    if (options.counters) counters_[kernel] += r.counters;
    simt::throw_findings(kernel, r);
  }

  std::unique_ptr<simt::Module> module_;
  std::map<std::string, HostEntry> kernels_;
  simt::Options options_;
  int64_t checked_sample_;  // blocks of a launch's grid the race and initialisation checks cover (0: all)
  std::map<std::string, simt::Counters> counters_;
};

class HostBackend : public Backend {
 public:
  HostBackend(std::string compiler, simt::Options options, int64_t checked_sample)
      : compiler_(std::move(compiler)), options_(std::move(options)), checked_sample_(checked_sample) {
    if (compiler_.empty()) compiler_ = simt::default_compiler();
    if (options_.workers <= 0) options_.workers = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  }
  std::string name() const override { return "host"; }
  DeviceProperties properties() const override {
    return {cpu_model() + ", " + std::to_string(options_.workers) + " threads", "host", 0, options_.workers, "",
            simt::compiler_identity(compiler_), {}};
  }

  std::unique_ptr<Module> load_source(const ModuleSource& source) override {
    // Library calls only: no generated kernel, so nothing to build (the measuring child, which
    // may start no compiler, loads such a module too).
    const bool generated = std::any_of(source.kernels.begin(), source.kernels.end(),
                                       [](const ModuleSource::KernelInfo& k) { return k.library.empty(); });
    auto module = generated ? std::make_unique<simt::Module>(source.cuda_source, compiler_) : nullptr;
    std::map<std::string, HostEntry> entries;
    for (const ModuleSource::KernelInfo& k : source.kernels) {
      if (entries.count(k.name)) continue;  // launches that run one kernel (compiler/compile_bundle.h) name it each
      if (!k.library.empty()) {
        entries[k.name].library = planner::LibraryCall::from_json(k.library);
        continue;
      }
      HostEntry& e = entries[k.name];
      e = {&module->kernel(k.name), {k.grid, k.threads, k.shared_bytes}, std::nullopt, {}, {}};
      std::vector<std::array<int64_t, 3>> counters;  // first block, blocks a group, groups
      for (const simt::Param& p : e.kernel->params) {
        if (p.scratch_elements == 0) continue;
        e.scratch.push_back(std::make_shared<HostBuffer>(static_cast<size_t>(p.scratch_elements * p.element_bytes)));
        e.scratch.back()->fill_byte(0);
        if (p.group_blocks > 0) counters.push_back({p.first_block, p.group_blocks, p.scratch_elements});
      }
      // A kernel text from before counter buffers named their groups (codegen version 37): its
      // first scratch buffer counts the whole grid's, grid / counters blocks a group.
      const auto first = std::find_if(e.kernel->params.begin(), e.kernel->params.end(), [](const simt::Param& p) { return p.scratch_elements > 0; });
      if (counters.empty() && first != e.kernel->params.end()) {
        counters.push_back({0, std::max<int64_t>(1, k.grid / first->scratch_elements), first->scratch_elements});
      }
      e.group_starts = cooperating_groups(k.grid, counters);
    }
    return std::make_unique<HostModule>(std::move(module), std::move(entries), options_, checked_sample_);
  }

  std::unique_ptr<Buffer> allocate(size_t bytes) override { return std::make_unique<HostBuffer>(bytes); }
  std::unique_ptr<Buffer> view(Buffer& parent, size_t offset, size_t bytes) override {
    check(offset + bytes <= parent.bytes(), "view [", offset, ", ", offset + bytes, ") outside a buffer of ", parent.bytes());
    return std::make_unique<HostView>(static_cast<unsigned char*>(parent.handle()) + offset, bytes);
  }

 private:
  std::string compiler_;
  simt::Options options_;
  int64_t checked_sample_;
};

}  // namespace

ModuleSource module_source(const std::vector<codegen::Kernel>& kernels) {
  ModuleSource m;
  for (const codegen::Kernel& k : kernels) m.kernels.push_back({k.name, k.grid, k.threads, k.shared_bytes, k.library});
  m.cuda_source = codegen::emit_cuda(kernels);
  return m;
}

std::unique_ptr<Backend> make_host_backend(const std::string& compiler, const simt::Options& options, int64_t checked_sample) {
  return std::make_unique<HostBackend>(compiler, options, checked_sample);
}

std::unique_ptr<Backend> make_plan_host_backend(int64_t checked_sample) {
  simt::Options checked;
  checked.counters = false;
  return make_host_backend("", checked, checked_sample);
}

}  // namespace fusetune::backend
