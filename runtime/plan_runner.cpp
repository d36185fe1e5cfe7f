#include "runtime/plan_runner.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <utility>

#include "backend/cuda.h"
#include "core/error.h"

namespace fusetune::runtime {

using nlohmann::json;

namespace {

DType dtype_named(const std::string& name) {
  const DType t = dtype_from_name(name);
  check(t != DType::kUndefined, "manifest: unknown dtype '", name, "'");
  return t;
}

}  // namespace

std::unique_ptr<backend::Backend> select_backend(const std::string& which, std::string* no_gpu,
                                                 const HostBackendFactory& host) {
  // "cuda:N": the N-th device the driver reports (CUDA_VISIBLE_DEVICES applies); "cuda": device 0.
  int device = 0;
  bool cuda = which == "cuda";
  if (which.rfind("cuda:", 0) == 0) {
    const std::string n = which.substr(5);
    check(!n.empty() && n.size() <= 4 && std::all_of(n.begin(), n.end(), [](char c) { return c >= '0' && c <= '9'; }),
          "backend '", which, "': cuda:N names a device by its number (cuda:0, cuda:1, ...)");
    device = std::stoi(n);
    cuda = true;
  }
  check(which == "auto" || which == "host" || cuda, "backend must be auto, host, cuda or cuda:N, not '", which, "'");
  std::string why;
  std::unique_ptr<backend::Backend> be;
  if (which != "host") be = backend::make_cuda_backend(device, &why);
  check(be != nullptr || !cuda, "backend ", which, ": ", why);
  if (be != nullptr) return be;
  if (no_gpu != nullptr) *no_gpu = why;
  return host();
}

std::string cubin_driver_problem(const std::string& built_with, const std::string& driver) {
  // "MAJOR.MINOR" as numbers, or nothing for "unavailable", "" and the like.
  const auto version = [](const std::string& v) -> std::optional<std::pair<int, int>> {
    int major = 0, minor = 0;
    char dot = 0;
    std::istringstream in(v);
    if (!(in >> major >> dot >> minor) || dot != '.') return std::nullopt;
    return std::make_pair(major, minor);
  };
  const auto built = version(built_with), supported = version(driver);
  if (!built || !supported || *built <= *supported) return "";
  return "its cubin was built by NVRTC " + built_with + " and needs a driver that supports CUDA " + built_with +
         " or newer; this GPU's driver supports CUDA " + driver +
         ": update the NVIDIA driver, or compile the plan with a CUDA toolkit of at most " + driver;
}

struct PlanRunner::State {
  backend::Backend* backend = nullptr;
  std::unique_ptr<backend::Module> module;
  std::unique_ptr<backend::Buffer> arena;
  std::vector<std::unique_ptr<backend::Buffer>> buffers;  // by manifest buffer id
  std::vector<TensorSpec> specs;                           // by buffer id
  std::vector<bool> constant;                              // by buffer id: filled at load, written by no launch
  std::vector<uintptr_t> last_device;                      // the last run's device addresses: inputs', outputs'
  std::vector<int> input_ids, output_ids;
  std::vector<TensorSpec> inputs, outputs;
  size_t launches = 0;
  std::set<int> conditions;  // buffer ids the launches' guards read: never bound to a caller's memory
  // The launches cut where their guards change (an If's branch decided at run time): each part
  // runs when its guards hold; the first and last hold none (they move the inputs in and the
  // outputs out, and may be empty). One part, unguarded, for a plan without such an If.
  struct Segment {
    std::vector<Guard> when;  // each condition a bool buffer's id, outermost first (core/graph.h)
    std::unique_ptr<backend::Sequence> sequence;
  };
  std::vector<Segment> segments;  // after the buffers: their sequences hold them bound
  std::vector<backend::Step> steps;  // every launch in order, for time_launches

  void bind(backend::Buffer* b, void* address) {
    for (Segment& seg : segments) seg.sequence->bind(b, address);
  }
  // One run of the segments whose guards hold, each condition read once (after the segments
  // before it have finished, as Sequence::run returns).
  void run_segments(const std::vector<backend::Transfer>& in, const std::vector<backend::Transfer>& out) {
    std::map<int, bool> read;
    const auto cond_value = [&](int id) {
      auto it = read.find(id);
      if (it == read.end()) {
        unsigned char byte = 0;
        buffers.at(static_cast<size_t>(id))->download(&byte, 1);
        it = read.emplace(id, byte != 0).first;
      }
      return it->second;
    };
    for (size_t k = 0; k < segments.size(); ++k) {
      const Segment& seg = segments[k];
      if (!guards_hold(seg.when, cond_value)) continue;
      seg.sequence->run(k == 0 ? in : std::vector<backend::Transfer>{}, k + 1 == segments.size() ? out : std::vector<backend::Transfer>{});
    }
  }
};

PlanRunner::PlanRunner(const Bundle& bundle, backend::Backend& backend) : s_(std::make_unique<State>()) {
  s_->backend = &backend;
  json m;
  try {
    m = json::parse(bundle.manifest);
    backend::ModuleSource src;
    src.cuda_source = bundle.cuda_source;
    src.cubins = bundle.cubins;
    src.ptx = bundle.ptx;
    const backend::DeviceProperties device = backend.properties();
    if (src.cubins.count(device.arch)) {
      const std::string problem = cubin_driver_problem(m.value("nvrtc", ""), device.driver);
      check(problem.empty(), "kernels.", device.arch, ".cubin: ", problem);
    }
    for (const json& l : m.at("launches")) {
      src.kernels.push_back({l.at("kernel").get<std::string>(), l.at("grid").get<int64_t>(), l.at("threads").get<int>(),
                             l.at("shared_bytes").get<int64_t>(), l.contains("library") ? l.at("library").dump() : ""});
    }
    s_->module = backend.load_source(src);
    s_->arena = backend.allocate(std::max<size_t>(1, m.at("arena_bytes").get<size_t>()));
    for (const json& b : m.at("buffers")) {
      TensorSpec spec{b.at("name").get<std::string>(), dtype_named(b.at("dtype").get<std::string>()),
                      b.at("shape").get<Shape>(), {}};
      const size_t bytes = b.at("bytes").get<size_t>();
      const std::string kind = b.at("kind").get<std::string>();
      check(b.at("id").get<size_t>() == s_->buffers.size(), "manifest: buffer ids must be 0, 1, 2, ...");
      if (kind == "intermediate") {
        s_->buffers.push_back(backend.view(*s_->arena, b.at("arena_offset").get<size_t>(), bytes));
      } else {
        s_->buffers.push_back(backend.allocate(std::max<size_t>(1, bytes)));
      }
      s_->constant.push_back(b.contains("constant_offset"));
      if (b.contains("constant_offset")) {
        const size_t off = b.at("constant_offset").get<size_t>();
        check(off + bytes <= bundle.constants.size(), "manifest: constant '", spec.name, "' lies outside constants.bin");
        s_->buffers.back()->upload(bundle.constants.data() + off, bytes);
      }
      s_->specs.push_back(spec);
    }
    for (const json& id : m.at("inputs")) s_->input_ids.push_back(id.get<int>());
    for (const json& id : m.at("outputs")) s_->output_ids.push_back(id.get<int>());
    std::vector<std::pair<std::vector<Guard>, std::vector<backend::Step>>> parts = {{{}, {}}};
    for (const json& l : m.at("launches")) {
      backend::Step step{l.at("kernel").get<std::string>(), {}};
      for (const json& a : l.at("args")) step.args.push_back(s_->buffers.at(a.get<size_t>()).get());
      std::vector<Guard> when;
      for (const json& w : l.value("when", json::array())) {
        const int id = w.at("buffer").get<int>();
        check(id >= 0 && static_cast<size_t>(id) < s_->specs.size() && s_->specs[static_cast<size_t>(id)].dtype == DType::kBool &&
                  numel(s_->specs[static_cast<size_t>(id)].shape) == 1,
              "manifest: launch '", step.kernel, "' is guarded by buffer ", id, ", which is not one bool");
        when.push_back({id, w.at("equals").get<bool>()});
        s_->conditions.insert(id);
      }
      if (when != parts.back().first) parts.push_back({when, {}});
      s_->steps.push_back(step);
      parts.back().second.push_back(std::move(step));
      ++s_->launches;
    }
    if (parts.size() > 1 && !parts.back().first.empty()) parts.push_back({{}, {}});
    for (auto& [when, steps] : parts) s_->segments.push_back({when, s_->module->prepare(std::move(steps))});
  } catch (const json::exception& e) {
    fail("plan manifest: ", e.what());
  }
  for (int id : s_->input_ids) s_->inputs.push_back(s_->specs.at(static_cast<size_t>(id)));
  for (int id : s_->output_ids) s_->outputs.push_back(s_->specs.at(static_cast<size_t>(id)));
  try {
    for (const json& e : m.value("output_extents", json::array())) {
      const auto k = e.at("output").get<size_t>(), c = e.at("count").get<size_t>();
      const int axis = e.at("axis").get<int>();
      check(k < s_->outputs.size() && c < s_->outputs.size() && axis >= 0 && axis < static_cast<int>(s_->outputs[k].shape.size()) &&
                s_->outputs[c].dtype == DType::kI64 && s_->outputs[c].shape.empty(),
            "manifest: output_extents names output ", k, " counted by output ", c, " on axis ", axis, ", which the outputs do not allow");
      s_->outputs[k].extent = {static_cast<int>(c), axis};
    }
  } catch (const json::exception& e) {
    fail("plan manifest: output_extents: ", e.what());
  }
}

std::vector<OutputExtent> output_extents(const std::vector<TensorSpec>& outputs) {
  std::vector<OutputExtent> out;
  for (const TensorSpec& s : outputs) out.push_back(s.extent);
  return out;
}

PlanRunner::~PlanRunner() = default;

const std::vector<TensorSpec>& PlanRunner::inputs() const { return s_->inputs; }
const std::vector<TensorSpec>& PlanRunner::outputs() const { return s_->outputs; }
size_t PlanRunner::launches() const { return s_->launches; }
bool PlanRunner::cuda_graph() const {
  return std::all_of(s_->segments.begin(), s_->segments.end(), [](const State::Segment& seg) { return seg.sequence->cuda_graph(); });
}

std::vector<Tensor> PlanRunner::run(const std::vector<Tensor>& inputs) {
  check(inputs.size() == s_->inputs.size(), "the plan takes ", s_->inputs.size(), " inputs, ", inputs.size(), " were given");
  std::vector<const void*> in;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const TensorSpec& spec = s_->inputs[i];
    check(inputs[i].dtype() == spec.dtype && inputs[i].shape() == spec.shape, "input '", spec.name, "' expects ",
          dtype_name(spec.dtype), " ", shape_str(spec.shape), ", got ", dtype_name(inputs[i].dtype()), " ",
          shape_str(inputs[i].shape()));
    in.push_back(inputs[i].data());
  }
  std::vector<Tensor> outs;
  std::vector<void*> out;
  for (const TensorSpec& spec : s_->outputs) {
    outs.emplace_back(spec.dtype, spec.shape);
    out.push_back(outs.back().data());
  }
  run(in, out, false);
  return outs;
}

void PlanRunner::run(const std::vector<const void*>& inputs, const std::vector<void*>& outputs, bool device) {
  check(inputs.size() == s_->inputs.size(), "the plan takes ", s_->inputs.size(), " inputs, ", inputs.size(), " were given");
  check(outputs.size() == s_->outputs.size(), "the plan gives ", s_->outputs.size(), " outputs, ", outputs.size(),
        " places for them were given");
  struct Region {
    uintptr_t begin, end;
    bool output;
  };
  std::vector<Region> regions;  // the inputs', then the outputs'
  const auto take = [&](const void* p, const TensorSpec& spec, const char* what) {
    const size_t n = static_cast<size_t>(numel(spec.shape)) * dtype_size(spec.dtype);
    check(p != nullptr || n == 0, what, " '", spec.name, "': no memory given");
    if (device && n > 0) {
      const std::string problem = s_->backend->device_memory_problem(p, n);
      check(problem.empty(), what, " '", spec.name, "': its memory ", problem);
    }
    regions.push_back({reinterpret_cast<uintptr_t>(p), reinterpret_cast<uintptr_t>(p) + n, what[0] == 'o'});
  };
  for (size_t i = 0; i < inputs.size(); ++i) take(inputs[i], s_->inputs[i], "input");
  for (size_t k = 0; k < outputs.size(); ++k) take(outputs[k], s_->outputs[k], "output");
  const auto bytes_of = [&](size_t r) { return static_cast<size_t>(regions[r].end - regions[r].begin); };
  // Region r may take its buffer's place: device memory, aligned as the arena's slots are, that
  // no output overlaps (inputs may share memory: the kernels only read them), at the address it
  // had in the last run too. A binding that changes costs a new recording of the launches on a GPU
  // (cuGraphExecUpdate), far more than copying a tensor on the device, so memory that moves from
  // run to run is copied and memory that stays is bound once and then costs nothing.
  const std::vector<uintptr_t> last = std::move(s_->last_device);
  s_->last_device.clear();
  if (device) {
    for (const Region& r : regions) s_->last_device.push_back(r.begin);
  }
  const auto bindable = [&](size_t r) {
    if (!device || regions[r].begin % 256 != 0 || regions[r].begin == regions[r].end) return false;
    if (r >= last.size() || last[r] != regions[r].begin) return false;
    for (size_t o = 0; o < regions.size(); ++o) {
      const bool overlap = o != r && regions[o].begin < regions[r].end && regions[r].begin < regions[o].end;
      if (overlap && (regions[o].output || regions[r].output)) return false;
    }
    return true;
  };
  const auto times = [](const std::vector<int>& ids, int id) { return std::count(ids.begin(), ids.end(), id); };
  std::vector<backend::Transfer> in, out;
  for (size_t i = 0; i < inputs.size(); ++i) {
    backend::Buffer* b = s_->buffers[static_cast<size_t>(s_->input_ids[i])].get();
    // An input that is also an output stays in the plan's buffer: the output is copied from it.
    const bool returned = times(s_->output_ids, s_->input_ids[i]) > 0;
    // A condition is read from the plan's own buffer.
    if (!returned && !s_->conditions.count(s_->input_ids[i]) && bindable(i)) {
      s_->bind(b, const_cast<void*>(inputs[i]));
    } else {
      s_->bind(b, nullptr);
      if (bytes_of(i) > 0) in.push_back({b, const_cast<void*>(inputs[i]), bytes_of(i), device});
    }
  }
  for (size_t k = 0; k < outputs.size(); ++k) {
    const int id = s_->output_ids[k];
    backend::Buffer* b = s_->buffers[static_cast<size_t>(id)].get();
    // Bound: an output a launch writes (not a constant, not an input passed through), listed once.
    const bool may_bind = times(s_->input_ids, id) == 0 && !s_->constant[static_cast<size_t>(id)] && times(s_->output_ids, id) == 1 &&
                          !s_->conditions.count(id);
    if (may_bind && bindable(inputs.size() + k)) {
      s_->bind(b, outputs[k]);
    } else {
      if (may_bind) s_->bind(b, nullptr);
      if (bytes_of(inputs.size() + k) > 0) out.push_back({b, outputs[k], bytes_of(inputs.size() + k), device});
    }
  }
  s_->run_segments(in, out);
}

std::vector<double> PlanRunner::time_runs(int n) {
  check(n > 0, "time_runs: the number of runs must be positive");
  if (s_->segments.size() == 1) return s_->segments[0].sequence->time_runs(n);
  // Branches decided at run time: each run reads its conditions between segments, so runs are
  // timed one by one on the steady clock.
  std::vector<double> us;
  for (int i = 0; i < n; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    s_->run_segments({}, {});
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  return us;
}

std::vector<PlanRunner::LaunchTime> PlanRunner::time_launches(const backend::TimingPolicy& policy) {
  std::vector<LaunchTime> times;
  for (const backend::Step& step : s_->steps) times.push_back({step.kernel, s_->module->time(step.kernel, step.args, policy)});
  return times;
}

std::map<std::string, simt::Counters> PlanRunner::counters() const { return s_->module->counters(); }

}  // namespace fusetune::runtime
