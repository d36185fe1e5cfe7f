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

// Refuses a graph input or output (`what`) that is not a tensor, naming its kind (a sequence, a
// map, an optional value...): fusetune's graphs hold tensors only.
void require_tensor(const onnx::ValueInfoProto& vi, const char* what);

// A TensorProto file as in ONNX's test-data layout (input_0.pb, output_0.pb, ...).
struct NamedTensor {
  std::string name;
  Tensor tensor;
};
NamedTensor read_tensor_file(const std::filesystem::path& path);
void write_tensor_file(const std::filesystem::path& path, const std::string& name, const Tensor& t);

}  // namespace fusetune::importer
