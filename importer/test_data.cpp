#include "importer/test_data.h"

#include <set>

#include "core/error.h"

namespace fusetune::importer {

namespace fs = std::filesystem;

namespace {

// The files prefix0.pb, prefix1.pb, ... in order; each read as the value of `values[k]` where
// given (a graph input or output of the model), else as a TensorProto.
std::vector<ValueFile> load_series(const fs::path& dir, const std::string& prefix, const std::vector<onnx::ValueInfoProto>* values) {
  std::vector<ValueFile> out;
  std::error_code ec;
  for (size_t k = 0;; ++k) {
    const fs::path p = dir / (prefix + std::to_string(k) + ".pb");
    if (!fs::exists(p, ec)) break;
    if (values != nullptr && k < values->size()) {
      out.push_back(read_value_file(p, (*values)[k].type(), (*values)[k].name()));
    } else {
      NamedTensor t = read_tensor_file(p);
      out.push_back({t.name, {t}});
    }
  }
  // A gap (input_0, input_2) would silently drop data: refuse it.
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) != 0 || entry.path().extension() != ".pb") continue;
    const std::string num = name.substr(prefix.size(), name.size() - prefix.size() - 3);
    size_t idx = 0;
    try {
      idx = std::stoul(num);
    } catch (const std::exception&) {
      continue;
    }
    check(idx < out.size(), dir.string(), ": ", name, " exists but ", prefix, out.size(), ".pb does not");
  }
  return out;
}

std::vector<NamedTensor> flatten(const std::vector<ValueFile>& files) {
  std::vector<NamedTensor> out;
  for (const ValueFile& f : files) out.insert(out.end(), f.tensors.begin(), f.tensors.end());
  return out;
}

}  // namespace

GraphValues graph_values(const fs::path& model) {
  const onnx::ModelProto m = read_model(model);
  std::set<std::string> inits;
  for (const auto& t : m.graph().initializer()) inits.insert(t.name());
  GraphValues v;
  for (const auto& vi : m.graph().input()) {
    if (inits.count(vi.name())) continue;
    try {
      require_graph_value(vi, "input");
    } catch (const Error& e) {
      fail(model.string(), ": ", e.what());
    }
    v.inputs.push_back(vi);
  }
  v.outputs.assign(m.graph().output().begin(), m.graph().output().end());
  return v;
}

std::vector<std::string> GraphValues::input_names() const {
  std::vector<std::string> names;
  for (const onnx::ValueInfoProto& vi : inputs) names.push_back(vi.name());
  return names;
}

TestData load_test_data(const fs::path& dir, const GraphValues* values) {
  std::error_code ec;
  check(fs::is_directory(dir, ec), dir.string(), ": not a directory of test data");
  TestData d;
  const std::vector<ValueFile> in = load_series(dir, "input_", values == nullptr ? nullptr : &values->inputs);
  for (const ValueFile& f : in) {
    if (f.sequence) d.sequence_lengths[f.name] = static_cast<int64_t>(f.tensors.size());
    if (f.empty_optional) d.empty_optionals.insert(f.name);
  }
  d.inputs = flatten(in);
  d.outputs = flatten(load_series(dir, "output_", values == nullptr ? nullptr : &values->outputs));
  return d;
}

std::vector<Tensor> bind_inputs(const std::vector<std::string>& graph_names, const TestData& test, ImportOptions* options) {
  // A sequence's or an optional's name stands for the tensors its data flattens to.
  std::vector<std::string> names;
  for (const std::string& n : graph_names) {
    if (auto it = test.sequence_lengths.find(n); it != test.sequence_lengths.end()) {
      for (int64_t i = 0; i < it->second; ++i) names.push_back(element_name(n, i));
    } else if (!test.empty_optionals.count(n)) {
      names.push_back(n);
    }
  }
  const std::vector<NamedTensor>& data = test.inputs;
  check(data.size() == names.size(), "the model has ", names.size(), " inputs but ", data.size(),
        " input files were given");
  std::vector<Tensor> bound(names.size());
  std::vector<bool> filled(names.size(), false);
  std::vector<bool> used(data.size(), false);
  for (size_t d = 0; d < data.size(); ++d) {  // by name first
    for (size_t n = 0; n < names.size(); ++n) {
      if (!data[d].name.empty() && data[d].name == names[n] && !filled[n]) {
        bound[n] = data[d].tensor;
        filled[n] = used[d] = true;
      }
    }
  }
  size_t next = 0;
  for (size_t n = 0; n < names.size(); ++n) {  // then by position
    if (filled[n]) continue;
    while (used[next]) ++next;
    bound[n] = data[next].tensor;
    used[next] = true;
  }
  if (options != nullptr) {
    for (size_t n = 0; n < names.size(); ++n) {
      options->input_shapes[names[n]] = bound[n].shape();
      options->input_values[names[n]] = bound[n];
    }
    for (const std::string& n : graph_names) {
      if (auto it = test.sequence_lengths.find(n); it != test.sequence_lengths.end()) options->sequence_lengths[n] = it->second;
      if (test.empty_optionals.count(n)) options->empty_optionals.insert(n);
    }
  }
  return bound;
}

}  // namespace fusetune::importer
