// ONNX file I/O: reading model protobufs and tensors (inline, typed fields or external data
// files) and writing tensors in the ONNX test-data layout (TensorProto files).
//
// Every failure throws Error naming the file and, where there is one, the tensor.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.h"
#include "fusetune_proto/onnx_subset.pb.h"

namespace fusetune::importer {

// Parses an ONNX model file. Fails on a missing, empty, truncated or non-ONNX file.
onnx::ModelProto read_model(const std::filesystem::path& path);
// The same for bytes already in memory; `label` names them in errors.
onnx::ModelProto parse_model(std::string_view bytes, const std::string& label);

// Decodes a TensorProto; external data is resolved relative to `base_dir` and must stay inside it.
// External data of 1 MB or more, laid out as in memory at an offset that is a multiple of 64, is
// mapped from its file (Tensor::mapped): a model's weights take memory only where they are read.
Tensor decode_tensor(const onnx::TensorProto& t, const std::filesystem::path& base_dir);

// ONNX files pack float4 and 4-bit integers two to a byte, 2-bit integers four to a byte, the
// first element in the lowest bits; in memory each takes a byte (core/dtype.h). packed_size is a
// tensor's byte count in a file; unpack_elements sign-extends int4 and int2.
size_t packed_size(DType dtype, int64_t count);
std::vector<std::byte> unpack_elements(DType dtype, const std::vector<std::byte>& packed, int64_t count);
std::vector<std::byte> pack_elements(const Tensor& t);

// The default ONNX domain: "" or "ai.onnx".
bool is_default_domain(const std::string& domain);
// The opset a model imports for the default domain (0 where it imports none).
int64_t default_opset(const onnx::ModelProto& model);

// Calls fn on each subgraph among n's attributes (a GRAPH's g, each of a GRAPHS' graphs).
template <typename Fn>
void each_subgraph(const onnx::NodeProto& n, const Fn& fn) {
  for (const onnx::AttributeProto& a : n.attribute()) {
    if (a.has_g()) fn(a.g());
    for (const onnx::GraphProto& g : a.graphs()) fn(g);
  }
}
template <typename Fn>
void each_subgraph(onnx::NodeProto& n, const Fn& fn) {
  for (onnx::AttributeProto& a : *n.mutable_attribute()) {
    if (a.has_g()) fn(*a.mutable_g());
    for (onnx::GraphProto& g : *a.mutable_graphs()) fn(g);
  }
}

// ONNX's name of an element type code with the code ("FLOAT8E4M3FN (17)"), for messages.
std::string onnx_type_name(int code);

// Refuses a value (`what`: "input", "graph output") that is not a tensor, naming its kind (a
// sequence, a map, an optional value...).
void require_tensor(const onnx::ValueInfoProto& vi, const char* what);

// Sequence- and optional-typed graph inputs and outputs are tensors in a plan: a sequence S of n
// elements is the tensors named S[0] ... S[n-1] (element_name); an optional is what it holds (a
// tensor under the optional's own name, or a sequence as above), or nothing when it is empty.
// require_graph_value refuses every other kind (a map, a sparse tensor, a sequence of sequences,
// an optional of an optional...), naming it.
std::string element_name(const std::string& sequence, int64_t index);
void require_graph_value(const onnx::ValueInfoProto& vi, const char* what);

// A TensorProto file as in ONNX's test-data layout (input_0.pb, output_0.pb, ...).
struct NamedTensor {
  std::string name;
  Tensor tensor;
};
NamedTensor read_tensor_file(const std::filesystem::path& path);
void write_tensor_file(const std::filesystem::path& path, const std::string& name, const Tensor& t);

// A test-data file of a graph value of type `type` (require_graph_value): a TensorProto for a
// tensor, a SequenceProto for a sequence, an OptionalProto for an optional, flattened as above.
// The value's name is the file's, else `name`.
struct ValueFile {
  std::string name;
  std::vector<NamedTensor> tensors;  // a tensor; a sequence's elements; what an optional holds
  bool sequence = false;             // a sequence, or an optional holding one
  bool empty_optional = false;
};
ValueFile read_value_file(const std::filesystem::path& path, const onnx::TypeProto& type, const std::string& name);

}  // namespace fusetune::importer
