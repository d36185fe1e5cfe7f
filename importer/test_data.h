// ONNX test-data sets: a folder of input_N.pb (and optionally output_N.pb) TensorProto files, as
// in ONNX's backend tests and as scripts/export_models.py writes them.
//
// load_test_data reads every input_N/output_N in N order and fails, naming the folder, on a gap
// in the numbering or an unreadable file. input_shapes_for binds the inputs to the model's graph
// inputs (by name where the file names one that exists, else by position) so the importer can
// give symbolic dimensions their values.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "importer/importer.h"
#include "importer/onnx_io.h"

namespace fusetune::importer {

struct TestData {
  std::vector<NamedTensor> inputs;
  std::vector<NamedTensor> outputs;  // empty when the folder has no expected outputs
};

TestData load_test_data(const std::filesystem::path& dir);

// Graph input names of the ONNX model that are real inputs (not initializers), in order.
std::vector<std::string> model_input_names(const std::filesystem::path& model);

// Orders `data` to match `names`; fills the import options' shapes and values for those inputs.
// Errors name the mismatch.
std::vector<Tensor> bind_inputs(const std::vector<std::string>& names, const std::vector<NamedTensor>& data,
                                ImportOptions* options);

}  // namespace fusetune::importer
