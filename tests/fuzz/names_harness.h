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

// The model's bytes with `texts` in its names, attributes and doc strings (all empty: plain names).
inline std::string named_model(const std::vector<std::string>& texts) {
  size_t next = 0;
  auto text = [&] { return next < texts.size() ? texts[next++] : std::string(); };
  auto name = [&](const std::string& plain) { return text() + "#" + plain; };
  std::vector<std::string> nodes, values;
  for (int i = 0; i < 4; ++i) nodes.push_back(name("n" + std::to_string(i)));
  for (int i = 0; i < 3; ++i) values.push_back(name("v" + std::to_string(i)));
  const std::string x = name("x"), y = name("y"), gamma = name("gamma"), beta = name("beta"), w = name("w"), bias = name("bias");
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
  b.input(x, testing::kFloat, {4, 64}).output(y, testing::kFloat, {4, 32});
  std::mt19937 rng(7);
  std::normal_distribution<float> d(0.0f, 0.5f);
  auto random = [&](Shape s) {
    std::vector<float> v(static_cast<size_t>(numel(s)));
    for (float& f : v) f = d(rng);
    return Tensor::from_floats(DType::kF32, s, v);
  };
  b.initializer(gamma, random({64})).initializer(beta, random({64}));
  b.initializer(w, random({64, 32})).initializer(bias, random({32}));
  std::vector<onnx::NodeProto*> made = {&b.node("LayerNormalization", {x, gamma, beta}, {values[0]}, nodes[0]),
                                        &b.node("MatMul", {values[0], w}, {values[1]}, nodes[1]),
                                        &b.node("Add", {values[1], bias}, {values[2]}, nodes[2]),
                                        &b.node("Relu", {values[2]}, {y}, nodes[3])};
  // Pointers into the graph's nodes stay valid only until the next node is added: taken again.
  for (int i = 0; i < 4; ++i) made[static_cast<size_t>(i)] = b.proto().mutable_graph()->mutable_node(i);
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
  const runtime::Bundle bundle = runtime::compile_bundle(m.graph, plan, device, "fuzz.onnx");
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
