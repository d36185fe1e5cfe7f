#include "importer/test_data.h"

#include <set>

#include "core/error.h"

namespace fusetune::importer {

namespace fs = std::filesystem;

namespace {

std::vector<NamedTensor> load_series(const fs::path& dir, const std::string& prefix) {
  std::vector<NamedTensor> out;
  std::error_code ec;
  for (size_t k = 0;; ++k) {
    const fs::path p = dir / (prefix + std::to_string(k) + ".pb");
    if (!fs::exists(p, ec)) break;
    out.push_back(read_tensor_file(p));
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

}  // namespace

TestData load_test_data(const fs::path& dir) {
  std::error_code ec;
  check(fs::is_directory(dir, ec), dir.string(), ": not a directory of test data");
  TestData d;
  d.inputs = load_series(dir, "input_");
  d.outputs = load_series(dir, "output_");
  return d;
}

std::vector<std::string> model_input_names(const fs::path& model) {
  const onnx::ModelProto m = read_model(model);
  std::set<std::string> inits;
  for (const auto& t : m.graph().initializer()) inits.insert(t.name());
  std::vector<std::string> names;
  for (const auto& vi : m.graph().input()) {
    if (inits.count(vi.name())) continue;
    try {
      require_tensor(vi, "input");
    } catch (const Error& e) {
      fail(model.string(), ": ", e.what());
    }
    names.push_back(vi.name());
  }
  return names;
}

std::vector<Tensor> bind_inputs(const std::vector<std::string>& names, const std::vector<NamedTensor>& data,
                                ImportOptions* options) {
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
  }
  return bound;
}

}  // namespace fusetune::importer
