// ONNX test-data sets: a folder of input_N.pb (and optionally output_N.pb) files, as in ONNX's
// backend tests and as scripts/export_models.py writes them: TensorProto files, and for a model's
// sequence- or optional-typed inputs and outputs SequenceProto and OptionalProto files.
//
// load_test_data reads every input_N/output_N in N order and fails, naming the folder, on a gap
// in the numbering or an unreadable file. Given the model's graph values (graph_values; a plan
// bundle's from its manifest), each file is read as the type of the graph input or output at its
// position and flattened to tensors (importer/onnx_io.h: a sequence
// S's elements are S[0], S[1], ...; an empty optional is none); without it every file is a
// TensorProto (a plan bundle's inputs and outputs, which are tensors). bind_inputs binds the
// inputs to the model's graph inputs (by name where the file names one that exists, else by
// position) so the importer can give symbolic dimensions their values and sequences their lengths.
#pragma once

#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "importer/importer.h"
#include "importer/onnx_io.h"

namespace fusetune::importer {

struct TestData {
  std::vector<NamedTensor> inputs;   // flattened
  std::vector<NamedTensor> outputs;  // flattened; empty when the folder has no expected outputs
  std::map<std::string, int64_t> sequence_lengths;  // the inputs that are sequences (or optionals holding one)
  std::set<std::string> empty_optionals;            // the inputs that are empty optionals
};

// The ONNX types of a model's graph inputs (initializers left out) and outputs, in order.
// graph_values refuses an input of a kind fusetune does not take (require_graph_value), naming
// the model and the input.
struct GraphValues {
  std::vector<onnx::ValueInfoProto> inputs, outputs;
  std::vector<std::string> input_names() const;
};
GraphValues graph_values(const std::filesystem::path& model);

// `values`: the types the files are read as (none: TensorProtos).
TestData load_test_data(const std::filesystem::path& dir, const GraphValues* values = nullptr);

// The tensors of `data` in the order of `names` (graph input names: a sequence's or an optional's
// stands for the tensors its data flattens to); fills the import options' shapes, values,
// sequence lengths and empty optionals for those inputs. Errors name the mismatch.
std::vector<Tensor> bind_inputs(const std::vector<std::string>& names, const TestData& data, ImportOptions* options);

}  // namespace fusetune::importer
