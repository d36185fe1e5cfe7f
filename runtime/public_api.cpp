#include <fusetune/runtime.h>

#include <cstring>
#include <filesystem>
#include <mutex>

#include "core/error.h"
#include "runtime/host_plugin.h"
#include "runtime/plan_runner.h"

namespace fusetune {

namespace {

struct TypePair {
  ElementType type;
  DType dtype;
};

constexpr TypePair kTypes[] = {
    {ElementType::kFloat32, DType::kF32}, {ElementType::kFloat16, DType::kF16}, {ElementType::kBFloat16, DType::kBF16},
    {ElementType::kFloat64, DType::kF64}, {ElementType::kInt8, DType::kI8},     {ElementType::kInt16, DType::kI16},
    {ElementType::kInt32, DType::kI32},   {ElementType::kInt64, DType::kI64},   {ElementType::kUInt8, DType::kU8},
    {ElementType::kUInt16, DType::kU16},  {ElementType::kUInt32, DType::kU32},  {ElementType::kUInt64, DType::kU64},
    {ElementType::kBool, DType::kBool},
    {ElementType::kFloat8E4M3FN, DType::kF8E4M3FN}, {ElementType::kFloat8E4M3FNUZ, DType::kF8E4M3FNUZ},
    {ElementType::kFloat8E5M2, DType::kF8E5M2}, {ElementType::kFloat8E5M2FNUZ, DType::kF8E5M2FNUZ},
    {ElementType::kFloat8E8M0, DType::kF8E8M0}, {ElementType::kFloat4E2M1, DType::kF4E2M1},
    {ElementType::kInt4, DType::kI4}, {ElementType::kUInt4, DType::kU4},
    {ElementType::kInt2, DType::kI2}, {ElementType::kUInt2, DType::kU2},
};

DType dtype_of(ElementType type) {
  for (const TypePair& p : kTypes) {
    if (p.type == type) return p.dtype;
  }
  throw RuntimeError("unknown element type " + std::to_string(static_cast<int>(type)));
}

TensorInfo info_of(const runtime::TensorSpec& spec) {
  for (const TypePair& p : kTypes) {
    if (p.dtype == spec.dtype) return {spec.name, p.type, spec.shape, "", 0};
  }
  throw RuntimeError("tensor '" + spec.name + "' has an unsupported element type");
}

std::string describe(const TensorInfo& t) {
  return "'" + t.name + "' (" + element_type_name(t.type) + " " + shape_str(t.shape) + ", " + std::to_string(t.bytes()) +
         " bytes)";
}

// Position of `name` in `list`; the error names it and lists what the plan has.
size_t index_of(const std::vector<TensorInfo>& list, const std::string& name, const std::string& what) {
  std::string known;
  for (size_t i = 0; i < list.size(); ++i) {
    if (list[i].name == name) return i;
    known += (i == 0 ? "'" : ", '") + list[i].name + "'";
  }
  throw RuntimeError("the plan has no " + what + " named '" + name + "' (its " + what + "s: " + known + ")");
}

void check_bytes(const TensorInfo& t, size_t bytes, const std::string& what) {
  if (bytes != t.bytes()) {
    throw RuntimeError(what + " " + describe(t) + ": " + std::to_string(bytes) + " bytes given");
  }
}

}  // namespace

std::string element_type_name(ElementType type) { return std::string(dtype_name(dtype_of(type))); }
size_t element_size(ElementType type) { return dtype_size(dtype_of(type)); }

size_t TensorInfo::elements() const {
  size_t n = 1;
  for (int64_t d : shape) n *= static_cast<size_t>(d);
  return n;
}
size_t TensorInfo::bytes() const { return elements() * element_size(type); }

struct Plan::Impl {
  std::mutex mu;                              // every call holds it: calls on one plan are serialized
  std::unique_ptr<backend::Backend> backend;  // first after it: everything below holds its memory
  std::string no_gpu;
  std::unique_ptr<runtime::PlanRunner> runner;
  std::vector<TensorInfo> inputs, outputs;
  std::vector<Tensor> input_values;
  std::vector<bool> input_set;
  std::vector<Tensor> output_values;  // empty until the first run
};

Plan::Plan(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Plan::Plan(Plan&&) noexcept = default;
Plan& Plan::operator=(Plan&&) noexcept = default;
Plan::~Plan() = default;

static_assert(LoadOptions{}.host_checked_blocks == backend::kPlanCheckedBlocks, "the host sample `fusetune run` takes");

Plan Plan::load(const std::string& dir, const std::string& backend) { return load(dir, backend, LoadOptions{}); }

Plan Plan::load(const std::string& dir, const std::string& backend, const LoadOptions& options) {
  if (options.host_checked_blocks < 0) {
    throw RuntimeError("LoadOptions::host_checked_blocks " + std::to_string(options.host_checked_blocks) +
                       ": the blocks a launch to race-check on the host, 0 for all");
  }
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) throw RuntimeError(dir + ": no such plan bundle directory");
  auto impl = std::make_unique<Impl>();
  runtime::Bundle bundle;
  try {
    impl->backend = runtime::select_backend(backend, &impl->no_gpu,
                                            [&] { return runtime::host_backend_from_plugin(options.host_checked_blocks); });
    bundle = runtime::read_bundle(dir);  // its errors name the file
  } catch (const Error& e) {
    throw RuntimeError(e.what());
  }
  try {
    impl->runner = std::make_unique<runtime::PlanRunner>(bundle, *impl->backend);
  } catch (const Error& e) {
    throw RuntimeError(dir + ": " + e.what());
  }
  for (const runtime::TensorSpec& s : impl->runner->inputs()) {
    impl->inputs.push_back(info_of(s));
    impl->input_values.emplace_back(s.dtype, s.shape);
  }
  const std::vector<runtime::TensorSpec>& outs = impl->runner->outputs();
  for (const runtime::TensorSpec& s : outs) {
    impl->outputs.push_back(info_of(s));
    if (s.extent.count_output >= 0) {
      impl->outputs.back().count_output = outs.at(static_cast<size_t>(s.extent.count_output)).name;
      impl->outputs.back().count_axis = s.extent.axis;
    }
  }
  impl->input_set.assign(impl->inputs.size(), false);
  return Plan(std::move(impl));
}

const std::vector<TensorInfo>& Plan::inputs() const { return impl_->inputs; }
const std::vector<TensorInfo>& Plan::outputs() const { return impl_->outputs; }
std::string Plan::backend() const { return impl_->backend->name(); }
std::string Plan::no_gpu_reason() const { return impl_->no_gpu; }
size_t Plan::launches() const { return impl_->runner->launches(); }
bool Plan::cuda_graph() const { return impl_->runner->cuda_graph(); }

void Plan::run(const std::vector<const void*>& inputs, const std::vector<void*>& outputs, Memory memory) {
  if (inputs.size() != impl_->inputs.size() || outputs.size() != impl_->outputs.size()) {
    throw RuntimeError("run(inputs, outputs): the plan takes " + std::to_string(impl_->inputs.size()) + " inputs and gives " +
                       std::to_string(impl_->outputs.size()) + " outputs; " + std::to_string(inputs.size()) + " and " +
                       std::to_string(outputs.size()) + " pointers were given");
  }
  const std::lock_guard<std::mutex> lock(impl_->mu);
  try {
    impl_->runner->run(inputs, outputs, memory == Memory::kDevice);
  } catch (const Error& e) {
    throw RuntimeError(e.what());
  }
}

void Plan::set_input(const std::string& name, const void* data, size_t bytes) {
  const std::lock_guard<std::mutex> lock(impl_->mu);
  const size_t i = index_of(impl_->inputs, name, "input");
  check_bytes(impl_->inputs[i], bytes, "input");
  if (bytes > 0) std::memcpy(impl_->input_values[i].data(), data, bytes);
  impl_->input_set[i] = true;
}

void Plan::run() {
  const std::lock_guard<std::mutex> lock(impl_->mu);
  for (size_t i = 0; i < impl_->inputs.size(); ++i) {
    if (!impl_->input_set[i]) throw RuntimeError("input " + describe(impl_->inputs[i]) + " was never set");
  }
  try {
    impl_->output_values = impl_->runner->run(impl_->input_values);
  } catch (const Error& e) {
    throw RuntimeError(e.what());
  }
}

void Plan::get_output(const std::string& name, void* data, size_t bytes) const {
  const std::lock_guard<std::mutex> lock(impl_->mu);
  const size_t i = index_of(impl_->outputs, name, "output");
  check_bytes(impl_->outputs[i], bytes, "output");
  if (impl_->output_values.empty()) throw RuntimeError("output '" + name + "' read before the first run()");
  if (bytes > 0) std::memcpy(data, impl_->output_values[i].data(), bytes);
}

}  // namespace fusetune
