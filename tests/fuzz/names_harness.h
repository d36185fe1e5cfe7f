// Model text under fuzzing: names, attributes and doc strings are data. Whatever text a model
// carries in them, the CUDA text fusetune generates for it, comments removed, is the
// plain-named model's, or the model is refused with one Error line. Shared by the libFuzzer
// target (tools/fuzz_names.cpp) and the seeded run in the unit tests (NameFuzz.*).
//
// An input is a sequence of texts, each [length: 1 byte][bytes] (a short input leaves the rest
// empty). They become, in order: the four node names, the three intermediate values' names, the
// graph input's, output's and four initializers' names, the graph's name, the model's, graph's
// and each node's doc string, the producer's name, a metadata key and value, a string attribute
// the operators do not have (its name, when not empty, and value: refused with an Error), and
// the doc string of LayerNormalization's epsilon. A value's name keeps a
// suffix of its own ("#3"), so that distinct values keep distinct names whatever the text. The
// model: x[4,64] -> LayerNormalization -> MatMul W[64,32] -> Add -> Relu -> y, planned for the
// H100 and generated as `fusetune compile` does (runtime::compile_bundle).
#pragma once

#include <cstdint>
#include <filesystem>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include <google/protobuf/message.h>
#include <google/protobuf/unknown_field_set.h>

#include "compiler/compile_bundle.h"
#include "core/error.h"
#include "importer/importer.h"
#include "planner/device.h"
#include "planner/select.h"
#include "runtime/bundle.h"
#include "tests/unit/onnx_builder.h"

namespace fusetune::fuzz {

inline constexpr size_t kNameTexts = 26;
inline constexpr size_t kAttributeNameText = 23;  // the text naming the attribute the operators lack

// The input's texts: kNameTexts of them, empty where the input ran out.
inline std::vector<std::string> name_texts(const uint8_t* data, size_t size) {
  std::vector<std::string> texts(kNameTexts);
  size_t at = 0;
  for (std::string& t : texts) {
    if (at >= size) break;
    const size_t n = std::min<size_t>(data[at], size - at - 1);
    t.assign(reinterpret_cast<const char*>(data + at + 1), n);
    at += 1 + n;
  }
  return texts;
}

// The names a model of layer_norm_mlp gives its parts.
struct LayerNormMlpNames {
  std::vector<std::string> nodes;   // LayerNormalization, MatMul, Add, Relu
  std::vector<std::string> values;  // their first three outputs
  std::string x = "x", y = "y", gamma = "gamma", beta = "beta", w = "w", bias = "bias";
};

// x[4,64] -> LayerNormalization -> MatMul W[64,32] -> Add -> Relu -> y, named by `n`, its weights
// drawn from a normal distribution with seed 7 (the same for every naming).
inline void layer_norm_mlp(testing::OnnxBuilder& b, const LayerNormMlpNames& n) {
  b.input(n.x, testing::kFloat, {4, 64}).output(n.y, testing::kFloat, {4, 32});
  std::mt19937 rng(7);
  std::normal_distribution<float> d(0.0f, 0.5f);
  auto random = [&](Shape s) {
    std::vector<float> v(static_cast<size_t>(numel(s)));
    for (float& f : v) f = d(rng);
    return Tensor::from_floats(DType::kF32, s, v);
  };
  b.initializer(n.gamma, random({64})).initializer(n.beta, random({64}));
  b.initializer(n.w, random({64, 32})).initializer(n.bias, random({32}));
  b.node("LayerNormalization", {n.x, n.gamma, n.beta}, {n.values[0]}, n.nodes[0]);
  b.node("MatMul", {n.values[0], n.w}, {n.values[1]}, n.nodes[1]);
  b.node("Add", {n.values[1], n.bias}, {n.values[2]}, n.nodes[2]);
  b.node("Relu", {n.values[2]}, {n.y}, n.nodes[3]);
}

// The model's bytes with `texts` in its names, attributes and doc strings (all empty: plain names).
inline std::string named_model(const std::vector<std::string>& texts) {
  size_t next = 0;
  auto text = [&] { return next < texts.size() ? texts[next++] : std::string(); };
  auto name = [&](const std::string& plain) { return text() + "#" + plain; };
  LayerNormMlpNames names;
  for (int i = 0; i < 4; ++i) names.nodes.push_back(name("n" + std::to_string(i)));
  for (int i = 0; i < 3; ++i) names.values.push_back(name("v" + std::to_string(i)));
  for (std::string* io : {&names.x, &names.y, &names.gamma, &names.beta, &names.w, &names.bias}) *io = name(*io);
  testing::OnnxBuilder b;
  b.proto().mutable_graph()->set_name(text());
  // Doc strings and metadata are fields fusetune's ONNX subset does not declare: they travel as
  // the fields ONNX numbers them (ModelProto 6 and 14, GraphProto 10, NodeProto 6, AttributeProto
  // 13), which the importer's parser must skip.
  auto unknown = [](google::protobuf::Message& m, int field, const std::string& bytes) {
    m.GetReflection()->MutableUnknownFields(&m)->AddLengthDelimited(field, bytes);
  };
  unknown(b.proto(), 6, text());
  unknown(*b.proto().mutable_graph(), 10, text());
  layer_norm_mlp(b, names);
  std::vector<onnx::NodeProto*> made;
  for (int i = 0; i < 4; ++i) made.push_back(b.proto().mutable_graph()->mutable_node(i));
  for (onnx::NodeProto* n : made) unknown(*n, 6, text());
  b.proto().set_producer_name(text());
  onnx::StringStringEntryProto meta;
  meta.set_key(text());
  meta.set_value(text());
  unknown(b.proto(), 14, meta.SerializeAsString());
  // LayerNormalization's epsilon, given as its default, carries a doc string; a string attribute
  // the operators do not have (when its name's text is not empty) must be refused.
  testing::OnnxBuilder::attr_f(*made[0], "epsilon", 1e-5f);
  const std::string attr_name = text(), attr_value = text(), attr_doc = text();
  unknown(*made[0]->mutable_attribute(0), 13, attr_doc);
  if (!attr_name.empty()) {
    for (onnx::NodeProto* n : made) testing::OnnxBuilder::attr_s(*n, attr_name, attr_value);
  }
  return b.bytes();
}

// The generated CUDA text of a model's bytes, its comments removed.
inline std::string code_of(const std::string& model_bytes, const std::filesystem::path& base_dir) {
  const importer::ImportedModel m = importer::import_onnx_bytes(model_bytes, base_dir);
  const planner::Device device = planner::find_device("h100");
  const planner::ModelPlan plan = planner::plan_model(m.graph, device);
  const runtime::Bundle bundle = compiler::compile_bundle(m.graph, plan, device, "fuzz.onnx");
  return std::regex_replace(bundle.cuda_source, std::regex("//[^\n]*"), "");
}

// What one input came to: refused with an Error (its line), or generated; and whether the code,
// comments removed, is the plain model's.
struct NameOutcome {
  bool refused = false;
  std::string error;
  bool same_code = false;
};

inline NameOutcome check_names(const uint8_t* data, size_t size, const std::string& plain_code,
                               const std::filesystem::path& base_dir) {
  NameOutcome out;
  try {
    out.same_code = code_of(named_model(name_texts(data, size)), base_dir) == plain_code;
  } catch (const Error& e) {
    out.refused = true;
    out.error = e.what();
  }
  return out;
}

}  // namespace fusetune::fuzz
