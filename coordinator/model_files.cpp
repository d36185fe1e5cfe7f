#include "coordinator/model_files.h"

#include <map>
#include <string>

#include "core/error.h"
#include "core/files.h"
#include "core/inert_text.h"
#include "importer/onnx_io.h"

namespace fusetune::coordinator {

namespace fs = std::filesystem;

namespace {

// Every tensor of `g` stored as external data: initializers, node attributes' tensors, and those
// of the subgraphs the attributes carry.
void external_tensors(const onnx::GraphProto& g, std::vector<const onnx::TensorProto*>& out) {
  auto take = [&](const onnx::TensorProto& t) {
    if (t.data_location() == 1) out.push_back(&t);
  };
  for (const onnx::TensorProto& t : g.initializer()) take(t);
  for (const onnx::NodeProto& n : g.node()) {
    for (const onnx::AttributeProto& a : n.attribute()) {
      if (a.has_t()) take(a.t());
      for (const onnx::TensorProto& t : a.tensors()) take(t);
      if (a.has_g()) external_tensors(a.g(), out);
      for (const onnx::GraphProto& sub : a.graphs()) external_tensors(sub, out);
    }
  }
}

bool inside(const fs::path& path, const fs::path& dir) {
  const fs::path rel = path.lexically_relative(dir);
  return !rel.empty() && *rel.begin() != ".." && rel.is_relative();
}

}  // namespace

std::vector<UploadFile> model_files(const fs::path& model) {
  const onnx::ModelProto proto = importer::read_model(model);
  const fs::path folder = model.parent_path().empty() ? fs::path(".") : model.parent_path();
  std::error_code ec;
  const fs::path real_folder = fs::canonical(folder, ec);
  check(!ec, model.string(), ": cannot resolve the model's folder (", ec.message(), ")");
  std::vector<const onnx::TensorProto*> tensors;
  external_tensors(proto.graph(), tensors);
  std::map<std::string, fs::path> named;  // upload path -> real path, sorted
  for (const onnx::TensorProto* t : tensors) {
    const std::string who = model.string() + ": tensor '" + one_line(t->name()) + "'";
    std::string location;
    for (const auto& e : t->external_data()) {
      if (e.key() == "location") location = e.value();
    }
    check(!location.empty(), who, ": external data without a location");
    const fs::path rel = path_inside(location, who + ": external data location");
    const fs::path real = fs::canonical(folder / rel, ec);
    check(!ec, who, ": external data file '", one_line(rel.string()), "' is missing");
    check(inside(real, real_folder), who, ": external data file '", one_line(rel.string()),
          "' is a symlink leading out of the model's folder (to ", one_line(real.string()), "); refusing to send it");
    check(fs::is_regular_file(real, ec), who, ": external data file '", one_line(rel.string()), "' is not a regular file");
    named.emplace(rel.string(), real);
  }
  std::vector<UploadFile> files = {{model.filename().string(), model}};
  for (const auto& [path, real] : named) files.push_back({path, real});
  return files;
}

}  // namespace fusetune::coordinator
