// fusetune run MODEL.onnx --inputs DIR [--out DIR] [--rtol R] [--atol A] [--shape NAME=DxD...]:
// runs the model with the reference interpreter on test data in the ONNX layout, writes the
// outputs, and compares them with DIR's output_N.pb where present.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "core/error.h"
#include "importer/importer.h"
#include "importer/test_data.h"
#include "reference/compare.h"
#include "reference/interpreter.h"
#include "tools/cli_args.h"
#include "tools/commands.h"
#include "tools/progress.h"

namespace fusetune::cli {

namespace fs = std::filesystem;

int cmd_run(const std::vector<std::string>& argv) {
  const Args args(argv, {"inputs", "out", "rtol", "atol", "shape"}, {});
  check(args.positional().size() == 1 && args.has("inputs"),
        "usage: fusetune run MODEL.onnx --inputs DIR [--out DIR] [--rtol R] [--atol A] [--shape NAME=DxD...]");
  const fs::path model = args.positional()[0];
  const fs::path data_dir = args.get("inputs");
  const importer::TestData data = importer::load_test_data(data_dir);
  importer::ImportOptions opt;
  const std::vector<Tensor> inputs = importer::bind_inputs(importer::model_input_names(model), data.inputs, &opt);
  for (const auto& [name, shape] : shape_overrides(args)) opt.input_shapes[name] = shape;
  const auto t0 = std::chrono::steady_clock::now();
  const importer::ImportedModel m = importer::import_onnx(model, opt);
  const auto t1 = std::chrono::steady_clock::now();
  std::vector<Tensor> outputs;
  {
    ProgressLine progress("running");
    outputs = reference::run_graph(m.graph, inputs, [&](size_t done, size_t total) { progress.update(done, total); });
  }
  const auto t2 = std::chrono::steady_clock::now();
  std::printf("%s: imported in %.2fs (%zu canonical nodes), ran in %.2fs on the reference interpreter\n",
              model.string().c_str(), std::chrono::duration<double>(t1 - t0).count(), m.graph.nodes().size(),
              std::chrono::duration<double>(t2 - t1).count());
  if (args.has("out")) {
    const fs::path out_dir = args.get("out");
    std::error_code ec;
    fs::create_directories(out_dir, ec);
    check(!ec, out_dir.string(), ": cannot create directory (", ec.message(), ")");
    for (size_t k = 0; k < outputs.size(); ++k) {
      importer::write_tensor_file(out_dir / ("output_" + std::to_string(k) + ".pb"),
                                  m.graph.value(m.graph.outputs()[k]).name, outputs[k]);
    }
    std::printf("wrote %zu outputs to %s\n", outputs.size(), out_dir.string().c_str());
  }
  if (data.outputs.empty()) {
    std::printf("no expected outputs in %s: nothing compared\n", data_dir.string().c_str());
    return 0;
  }
  check(data.outputs.size() == outputs.size(), data_dir.string(), ": ", data.outputs.size(),
        " expected outputs, the model has ", outputs.size());
  int matched = 0;
  for (size_t k = 0; k < outputs.size(); ++k) {
    const Tensor& want = data.outputs[k].tensor;
    reference::Tolerance tol = reference::default_tolerance(want.dtype());
    tol.rtol = args.number("rtol", tol.rtol);
    if (args.has("atol")) {
      tol.atol = args.number("atol", tol.atol);
      tol.scale = 0;
    }
    const reference::Comparison c = reference::compare(outputs[k], want, tol);
    const Value& v = m.graph.value(m.graph.outputs()[k]);
    std::printf("  output %zu '%s' %s %s: %s %s (rtol %g, atol %g)\n", k, v.name.c_str(),
                std::string(dtype_name(v.dtype)).c_str(), shape_str(outputs[k].shape()).c_str(), c.ok ? "match" : "DIFFER",
                c.shape_ok ? c.describe().c_str() : ("expected shape " + shape_str(want.shape())).c_str(), tol.rtol,
                tol.atol + tol.scale * c.max_expected);
    matched += c.ok ? 1 : 0;
  }
  std::printf("outputs: %d match, %zu differ\n", matched, outputs.size() - static_cast<size_t>(matched));
  return matched == static_cast<int>(outputs.size()) ? 0 : 1;
}

}  // namespace fusetune::cli
