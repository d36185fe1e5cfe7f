// Model-local functions (importer/functions.h): each call is inlined with the call's attributes or
// the function's defaults, nested calls and the body's subgraphs renamed under the call; every
// refusal names the call. Differential: a model written with functions computes, on the reference
// interpreter, exactly what the same nodes written out by hand compute.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/error.h"
#include "importer/importer.h"
#include "reference/interpreter.h"
#include "tests/unit/import_check.h"
#include "tests/unit/onnx_builder.h"

namespace fusetune {
namespace {

using testing::kFloat;
using testing::OnnxBuilder;
constexpr auto kFloatAttr = onnx::AttributeProto::FLOAT;

// local:Act(a, b) = Elu(LeakyRelu(a, alpha = @alpha), alpha = @beta) + b; beta defaults to 2.
void add_act(OnnxBuilder& b) {
  onnx::FunctionProto& f = b.function("local", "Act", {"a", "b"}, {"y"}, {"alpha"});
  onnx::AttributeProto* beta = f.add_attribute_proto();
  beta->set_name("beta");
  beta->set_type(kFloatAttr);
  beta->set_f(2.0f);
  OnnxBuilder::attr_ref(OnnxBuilder::fnode(f, "LeakyRelu", {"a"}, {"t"}), "alpha", kFloatAttr, "alpha");
  OnnxBuilder::attr_ref(OnnxBuilder::fnode(f, "Elu", {"t"}, {"u"}), "alpha", kFloatAttr, "beta");
  OnnxBuilder::fnode(f, "Add", {"u", "b"}, {"y"});
}

std::vector<float> run(const OnnxBuilder& b, const Tensor& x) {
  return reference::run_graph(importer::import_onnx_bytes(b.bytes(), ".").graph, std::vector<Tensor>{x})[0].to_floats();
}

TEST(LocalFunctions, CallsAreInlinedWithTheCallsAttributesOrTheDefaults) {
  // first = Act(x, x) {alpha 0.5}; z = Twice(first) {gain 0.25}, where
  // Twice(p) = Act(Act(p, p) {alpha = @gain}, p) {}: a nested call whose attribute refers to the
  // outer function's, and one that gives none (LeakyRelu's own default, 0.01, applies).
  OnnxBuilder fn;
  add_act(fn);
  onnx::FunctionProto& twice = fn.function("local", "Twice", {"p"}, {"r"}, {"gain"});
  OnnxBuilder::attr_ref(OnnxBuilder::fnode(twice, "Act", {"p", "p"}, {"q"}, "local"), "alpha", kFloatAttr, "gain");
  OnnxBuilder::fnode(twice, "Act", {"q", "p"}, {"r"}, "local");
  fn.opset_import("local", 1);
  fn.input("x", kFloat, {2, 3}).output("z", kFloat, {2, 3});
  onnx::NodeProto& first = fn.node("Act", {"x", "x"}, {"y1"}, "first");
  first.set_domain("local");
  OnnxBuilder::attr_f(first, "alpha", 0.5f);
  onnx::NodeProto& second = fn.node("Twice", {"y1"}, {"z"}, "second");
  second.set_domain("local");
  OnnxBuilder::attr_f(second, "gain", 0.25f);

  OnnxBuilder plain;
  plain.input("x", kFloat, {2, 3}).output("z", kFloat, {2, 3});
  const auto act = [&](const std::string& a, const std::string& b, const std::string& y, float alpha, bool given) {
    onnx::NodeProto& leaky = plain.node("LeakyRelu", {a}, {y + "_t"});
    if (given) OnnxBuilder::attr_f(leaky, "alpha", alpha);
    OnnxBuilder::attr_f(plain.node("Elu", {y + "_t"}, {y + "_u"}), "alpha", 2.0f);
    plain.node("Add", {y + "_u", b}, {y});
  };
  act("x", "x", "y1", 0.5f, true);
  act("y1", "y1", "q", 0.25f, true);
  act("q", "y1", "z", 0.0f, false);

  const Tensor x = Tensor::from_floats(DType::kF32, {2, 3}, std::vector<float>{-3, -1, -0.25f, 0, 0.5f, 4});
  const std::vector<float> want = run(plain, x);
  EXPECT_EQ(run(fn, x), want);

  // Values are named under their calls: the nested call's LeakyRelu under "second/q/".
  const Graph g = importer::import_onnx_bytes(fn.bytes(), ".").graph;
  std::vector<std::string> names;
  for (const Value& v : g.values()) names.push_back(v.name);
  EXPECT_NE(std::find(names.begin(), names.end(), "first/t"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "second/q/t"), names.end());
  EXPECT_EQ(std::find(names.begin(), names.end(), "q/t"), names.end());
}

TEST(LocalFunctions, SubgraphsOfABodyReadTheCallsInputs) {
  // Pick(a) = If(true) then a * a else -a: the branch reads the function's formal input.
  OnnxBuilder then_branch, else_branch;
  then_branch.output("sq", kFloat, {3});
  then_branch.node("Mul", {"a", "a"}, {"sq"});
  else_branch.output("neg", kFloat, {3});
  else_branch.node("Neg", {"a"}, {"neg"});
  OnnxBuilder b;
  onnx::FunctionProto& pick = b.function("local", "Pick", {"a"}, {"y"});
  onnx::NodeProto& yes = OnnxBuilder::fnode(pick, "Constant", {}, {"c"});
  onnx::AttributeProto* value = yes.add_attribute();
  value->set_name("value");
  value->set_type(onnx::AttributeProto::TENSOR);
  value->mutable_t()->set_data_type(9);  // bool, a scalar
  value->mutable_t()->set_raw_data(std::string(1, '\1'));
  onnx::NodeProto& branch = OnnxBuilder::fnode(pick, "If", {"c"}, {"y"});
  OnnxBuilder::attr_graph(branch, "then_branch", then_branch);
  OnnxBuilder::attr_graph(branch, "else_branch", else_branch);
  b.opset_import("local", 1);
  b.input("x", kFloat, {3}).output("out", kFloat, {3});
  b.node("Pick", {"x"}, {"out"}, "pick").set_domain("local");
  EXPECT_EQ(run(b, Tensor::from_floats(DType::kF32, {3}, std::vector<float>{1, -2, 3})), std::vector<float>({1, 4, 9}));
}

TEST(LocalFunctions, RefusalsNameTheCall) {
  const auto model = [](int opset_of_function) {
    OnnxBuilder b;
    add_act(b);
    b.proto().mutable_functions(0)->mutable_opset_import(0)->set_version(opset_of_function);
    b.opset_import("local", 1);
    b.input("x", kFloat, {3}).output("y", kFloat, {3});
    return b;
  };
  OnnxBuilder extra = model(17);
  extra.node("Act", {"x", "x", "x"}, {"y"}, "three").set_domain("local");
  testing::expect_refused(extra, "node 'three' (Act), a call of function 'local:Act'", "3 inputs given, the function takes 2");
  OnnxBuilder older = model(13);
  older.node("Act", {"x", "x"}, {"y"}, "old").set_domain("local");
  testing::expect_refused(older, "node 'old' (Act)", "the function imports opset 13 of the default domain and the model 17");

  OnnxBuilder loop;
  OnnxBuilder::fnode(loop.function("local", "Again", {"a"}, {"y"}), "Again", {"a"}, {"y"}, "local");
  loop.opset_import("local", 1);
  loop.input("x", kFloat, {3}).output("y", kFloat, {3});
  loop.node("Again", {"x"}, {"y"}, "again").set_domain("local");
  testing::expect_refused(loop, "a call of function 'local:Again'", "the function calls itself");

  // An op fusetune does not read, inside a body: named as inlined.
  OnnxBuilder unknown;
  OnnxBuilder::fnode(unknown.function("local", "Odd", {"a"}, {"y"}), "NoSuchOp", {"a"}, {"y"});
  unknown.opset_import("local", 1);
  unknown.input("x", kFloat, {3}).output("y", kFloat, {3});
  unknown.node("Odd", {"x"}, {"y"}, "odd").set_domain("local");
  testing::expect_refused(unknown, "node 'odd/y'", "op 'NoSuchOp'");

  // Calls that double at each of 24 levels: 16 million nodes, refused before they are made.
  OnnxBuilder bomb;
  for (int level = 0; level < 24; ++level) {
    onnx::FunctionProto& f = bomb.function("local", "F" + std::to_string(level), {"a"}, {"y"});
    const std::string inner = "F" + std::to_string(level + 1);
    OnnxBuilder::fnode(f, inner, {"a"}, {"m"}, "local");
    OnnxBuilder::fnode(f, inner, {"m"}, {"y"}, "local");
  }
  OnnxBuilder::fnode(bomb.function("local", "F24", {"a"}, {"y"}), "Relu", {"a"}, {"y"});
  bomb.opset_import("local", 1);
  bomb.input("x", kFloat, {3}).output("y", kFloat, {3});
  bomb.node("F0", {"x"}, {"y"}, "bomb").set_domain("local");
  testing::expect_refused(bomb, "<memory>", "inlining the model's functions makes more than 1000000 nodes");
}

}  // namespace
}  // namespace fusetune
