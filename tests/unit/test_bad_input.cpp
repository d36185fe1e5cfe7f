// Bad input: every malformed model gets one clear line naming the culprit and exit code 2 from the
// real `fusetune` binary; nothing crashes.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <tuple>
#include <vector>

#include "importer/lower.h"
#include "unit/cli_run.h"
#include "unit/onnx_builder.h"
#include "unit/test_dir.h"

namespace fusetune {
namespace {

namespace fs = std::filesystem;
using testing::kFloat;
using testing::OnnxBuilder;

using testing::Outcome;
using testing::run_cli;

class BadInput : public ::testing::Test {
 protected:

  // Runs `fusetune inspect` on the file and checks: exit 2, one line, mentions every needle.
  void expect_one_line_error(const fs::path& model, std::initializer_list<std::string> needles) {
    const Outcome o = run_cli("inspect " + model.string());
    EXPECT_EQ(o.exit_code, 2) << o.output;
    EXPECT_EQ(std::count(o.output.begin(), o.output.end(), '\n'), 1) << o.output;
    EXPECT_EQ(o.output.rfind("fusetune: error: ", 0), 0u) << o.output;
    for (const std::string& n : needles) EXPECT_NE(o.output.find(n), std::string::npos) << "missing '" << n << "' in: " << o.output;
  }
  fs::path write(const std::string& name, const std::string& bytes) {
    std::ofstream(dir_ / name, std::ios::binary) << bytes;
    return dir_ / name;
  }
  const fusetune::testing::TestDir tmp_{"bad"};
  const fs::path dir_ = tmp_.path();
};

TEST_F(BadInput, NotAnOnnxFile) {
  expect_one_line_error(write("notes.onnx", "these are my notes, not a model\n"), {"notes.onnx", "not an ONNX model"});
}

TEST_F(BadInput, MissingFile) { expect_one_line_error(dir_ / "nope.onnx", {"nope.onnx", "not found"}); }

TEST_F(BadInput, TruncatedFile) {
  std::ifstream in(fs::path(FUSETUNE_SOURCE_DIR) / "tests/data/models/cnn_small/model.onnx", std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GT(bytes.size(), 1000u);
  for (size_t cut : {bytes.size() / 2, bytes.size() - 7, size_t{10}}) {
    SCOPED_TRACE(cut);
    expect_one_line_error(write("cut.onnx", bytes.substr(0, cut)), {"cut.onnx"});
  }
}

TEST_F(BadInput, UnsupportedOpIsListedWithItsNode) {
  OnnxBuilder b;
  b.input("x", kFloat, {2}).output("y", kFloat, {2});
  b.node("Relu", {"x"}, {"r"});
  b.node("FancyActivation", {"r"}, {"y"}, "my_fancy_node");
  const fs::path p = dir_ / "fancy.onnx";
  b.write(p);
  const Outcome o = run_cli("inspect " + p.string());
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_NE(o.output.find("node 'my_fancy_node': FancyActivation (domain ai.onnx, opset 17)"), std::string::npos) << o.output;
  const Outcome r = run_cli("run " + p.string() + " --inputs " + dir_.string());
  EXPECT_EQ(r.exit_code, 2) << r.output;
}

TEST_F(BadInput, AnAttributeTheImporterDoesNotReadIsRefusedNotIgnored) {
  OnnxBuilder b;
  b.input("x", kFloat, {2}).output("y", kFloat, {2});
  OnnxBuilder::attr_f(b.node("Relu", {"x"}, {"y"}, "the_relu"), "alpha", 0.5f);
  b.write(dir_ / "attr.onnx");
  expect_one_line_error(dir_ / "attr.onnx", {"node 'the_relu' (Relu)", "attribute 'alpha' is not supported"});
}

TEST_F(BadInput, ValuesThatAreNotTensorsAreNamedWithTheirKind) {
  // Tensors, sequences of tensors and optionals of them are taken (importer/onnx_io.h); a map, a
  // sequence of maps, an optional of an optional are refused naming the value and its kind.
  OnnxBuilder b;
  b.input("x", kFloat, {2}).output("y", kFloat, {2});
  auto* seq = b.proto().mutable_graph()->add_input();
  seq->set_name("history");
  seq->mutable_type()->mutable_sequence_type()->mutable_elem_type()->mutable_map_type();
  b.node("Relu", {"x"}, {"y"});
  b.write(dir_ / "seq.onnx");
  expect_one_line_error(dir_ / "seq.onnx", {"input 'history' is a sequence of maps"});
  // `run` says so before it reads the input files (a file of maps is nothing it parses).
  fs::create_directories(dir_ / "data");
  std::ofstream(dir_ / "data" / "input_0.pb", std::ios::binary) << "a tensor file";
  std::ofstream(dir_ / "data" / "input_1.pb", std::ios::binary) << "a sequence file, which no tensor parse reads";
  const Outcome r = run_cli("run " + (dir_ / "seq.onnx").string() + " --inputs " + (dir_ / "data").string());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("seq.onnx: input 'history' is a sequence of maps"), std::string::npos) << r.output;
  OnnxBuilder o;
  o.input("x", kFloat, {2}).output("y", kFloat, {2});
  o.node("Relu", {"x"}, {"y"});
  o.proto().mutable_graph()->mutable_output(0)->mutable_type()->mutable_optional_type()->mutable_elem_type()->mutable_optional_type();
  o.write(dir_ / "opt.onnx");
  expect_one_line_error(dir_ / "opt.onnx", {"graph output 'y' is an optional of optional values"});
  OnnxBuilder m;
  m.input("x", kFloat, {2}).output("y", kFloat, {2});
  m.node("Relu", {"x"}, {"y"});
  m.proto().mutable_graph()->mutable_input(0)->mutable_type()->mutable_map_type();
  m.write(dir_ / "map.onnx");
  expect_one_line_error(dir_ / "map.onnx", {"input 'x' is a map: fusetune takes and gives tensors"});
}

TEST_F(BadInput, ElementTypesOutsideFusetunesAreNamed) {
  OnnxBuilder b;
  b.input("x", kFloat, {2}).output("y", kFloat, {2});
  auto* w = b.proto().mutable_graph()->add_initializer();
  w->set_name("wc");
  w->set_data_type(14);  // COMPLEX64
  w->add_dims(2);
  w->set_raw_data(std::string(16, '\0'));
  b.node("Add", {"x", "wc"}, {"y"});
  b.write(dir_ / "c64.onnx");
  expect_one_line_error(dir_ / "c64.onnx", {"tensor 'wc'", "COMPLEX64 (14) is not supported"});
}

TEST_F(BadInput, ANarrowTypeMixedIntoArithmeticIsNamedWithItsNode) {
  // float8 is a type fusetune holds (a Cast's target); Add of float32 and float8 is not ONNX
  OnnxBuilder b;
  b.input("x", kFloat, {2}).output("y", kFloat, {2});
  auto* w = b.proto().mutable_graph()->add_initializer();
  w->set_name("w8");
  w->set_data_type(17);  // FLOAT8E4M3FN
  w->add_dims(2);
  w->set_raw_data(std::string(2, '\0'));
  b.node("Add", {"x", "w8"}, {"y"}, "mixed");
  b.write(dir_ / "f8.onnx");
  expect_one_line_error(dir_ / "f8.onnx", {"node 'mixed' (Add)", "float32", "float8e4m3fn"});
}

TEST_F(BadInput, AnOpOfAnotherDomainIsNamedEvenWithoutADefaultOpset) {
  OnnxBuilder b;
  b.proto().mutable_opset_import(0)->set_domain("com.microsoft");
  b.proto().mutable_opset_import(0)->set_version(1);
  b.input("x", kFloat, {2, 8}).output("y", kFloat, {2, 8});
  b.node("FastGelu", {"x"}, {"y"}, "ms_gelu").set_domain("com.microsoft");
  b.write(dir_ / "ms.onnx");
  const Outcome o = run_cli("compile " + (dir_ / "ms.onnx").string() + " --device h100 --out " + (dir_ / "plan").string());
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_NE(o.output.find("node 'ms_gelu': op 'FastGelu' of domain 'com.microsoft' (opset 1) is not supported"),
            std::string::npos) << o.output;
  EXPECT_NE(o.output.find("default ONNX domain only"), std::string::npos) << o.output;
}

// A command missing what it needs, or given a count below zero, says which flag in one line.
TEST_F(BadInput, AMissingDeviceOrANegativeBlockCountNamesItsFlag) {
  OnnxBuilder b;
  b.input("x", kFloat, {2, 8}).output("y", kFloat, {2, 8});
  b.node("Relu", {"x"}, {"y"}, "relu");
  b.write(dir_ / "relu.onnx");
  const Outcome compile = run_cli("compile " + (dir_ / "relu.onnx").string() + " --out " + (dir_ / "plan").string());
  EXPECT_EQ(compile.exit_code, 2) << compile.output;
  EXPECT_NE(compile.output.find("fusetune: error: --device NAME or --device-file PATH is required"), std::string::npos)
      << compile.output;
  EXPECT_FALSE(std::filesystem::exists(dir_ / "plan"));
  const Outcome run = run_cli("run " + (dir_ / "relu.onnx").string() + " --inputs " + dir_.string() + " --verify-blocks -3");
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_NE(run.output.find("--verify-blocks -3: a number of blocks, 0 for all"), std::string::npos) << run.output;
  const Outcome model = run_cli("run " + (dir_ / "relu.onnx").string() + " --inputs " + dir_.string() + " --verify-blocks 5");
  EXPECT_EQ(model.exit_code, 2) << model.output;
  EXPECT_NE(model.output.find("--verify-blocks samples a plan bundle's launches;"), std::string::npos) << model.output;
}

// The ops fusetune leaves refused on purpose say why, in the one line that names the node: a
// training loss, a string op, image decoding; an op merely not implemented yet says nothing more.
TEST_F(BadInput, OpsRefusedOnPurposeSayWhy) {
  const std::vector<std::tuple<std::string, std::string, std::string>> cases = {
      {"SoftmaxCrossEntropyLoss", "loss", "a training operator: fusetune plans inference graphs"},
      {"StringNormalizer", "normalize", "it operates on strings, which kernels do not hold"},
      {"ImageDecoder", "decode", "it decodes compressed image bytes"},
  };
  for (const auto& [op, node, why] : cases) {
    OnnxBuilder b(22);
    b.input("x", kFloat, {2, 8}).output("y", kFloat, {2, 8});
    b.node(op, {"x"}, {"y"}, node);
    b.write(dir_ / (node + ".onnx"));
    const Outcome o = run_cli("compile " + (dir_ / (node + ".onnx")).string() + " --device h100 --out " + (dir_ / "plan").string());
    EXPECT_EQ(o.exit_code, 2) << o.output;
    EXPECT_EQ(std::count(o.output.begin(), o.output.end(), '\n'), 1) << o.output;
    EXPECT_NE(o.output.find("node '" + node + "': op '" + op + "' of domain 'ai.onnx' (opset 22) is not supported: " + why),
              std::string::npos)
        << o.output;
    const Outcome listed = run_cli("inspect " + (dir_ / (node + ".onnx")).string());  // its listing says why too
    EXPECT_NE(listed.output.find("node '" + node + "': " + op + " (domain ai.onnx, opset 22): " + why), std::string::npos)
        << listed.output;
  }
  EXPECT_EQ(importer::unsupported_op_reason("FlexAttention"), "");  // not implemented yet: no reason to give
}

TEST_F(BadInput, AnOpsetNewerThanTheNewestReadIsRefused) {
  OnnxBuilder b(29);
  b.input("x", kFloat, {2}).output("y", kFloat, {2});
  b.node("Relu", {"x"}, {"y"});
  b.write(dir_ / "future.onnx");
  expect_one_line_error(dir_ / "future.onnx", {"opset 29 of the default domain is unsupported", "1 to 28"});
}

TEST_F(BadInput, MissingExternalDataFile) {
  OnnxBuilder b;
  b.input("x", kFloat, {2, 2}).output("y", kFloat, {2, 2});
  b.external_initializer("weight", {2, 2}, {{"location", "weights.bin"}});
  b.node("MatMul", {"x", "weight"}, {"y"});
  b.write(dir_ / "ext.onnx");
  expect_one_line_error(dir_ / "ext.onnx", {"tensor 'weight'", "weights.bin", "missing"});
}

TEST_F(BadInput, ExternalDataMayNotLeaveTheModelDirectory) {
  OnnxBuilder b;
  b.input("x", kFloat, {2, 2}).output("y", kFloat, {2, 2});
  b.external_initializer("weight", {2, 2}, {{"location", "../../etc/passwd"}});
  b.node("MatMul", {"x", "weight"}, {"y"});
  b.write(dir_ / "escape.onnx");
  expect_one_line_error(dir_ / "escape.onnx", {"tensor 'weight'", "leaves the model's directory"});
}

TEST_F(BadInput, InconsistentShapes) {
  OnnxBuilder b;
  b.input("a", kFloat, {2, 3}).input("b", kFloat, {4, 5}).output("y", kFloat, {2, 3});
  b.node("Add", {"a", "b"}, {"y"}, "the_add");
  b.write(dir_ / "shapes.onnx");
  expect_one_line_error(dir_ / "shapes.onnx", {"node 'the_add' (Add)", "2x3", "4x5", "do not broadcast"});
}

TEST_F(BadInput, DeclaredOutputShapeDisagrees) {
  OnnxBuilder b;
  b.input("a", kFloat, {2, 3}).output("y", kFloat, {3, 2});
  b.node("Relu", {"a"}, {"y"});
  b.write(dir_ / "declared.onnx");
  expect_one_line_error(dir_ / "declared.onnx", {"output 'y'", "3x2", "2x3", "inconsistent"});
}

TEST_F(BadInput, NegativeDimension) {
  OnnxBuilder b;
  b.input("x", kFloat, {2, 2}).output("y", kFloat, {2, 2});
  b.proto().mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim(1)->set_dim_value(-3);
  b.node("Relu", {"x"}, {"y"});
  b.write(dir_ / "neg.onnx");
  expect_one_line_error(dir_ / "neg.onnx", {"input 'x' dimension 1", "negative"});
}

TEST_F(BadInput, AbsurdDimension) {
  OnnxBuilder b;
  b.input("x", kFloat, {4000000, 4000000, 4000000}).output("y", kFloat, {4000000, 4000000, 4000000});
  b.node("Relu", {"x"}, {"y"});
  b.write(dir_ / "huge.onnx");
  expect_one_line_error(dir_ / "huge.onnx", {"input 'x'", "absurdly large"});
}

TEST_F(BadInput, AbsurdReshapeTarget) {
  OnnxBuilder b;
  b.input("x", kFloat, {2, 2}).output("y", kFloat, {});
  b.initializer("shape", Tensor::from_ints(DType::kI64, {3}, std::vector<int64_t>{1LL << 40, 1LL << 40, 0}));
  b.node("Reshape", {"x", "shape"}, {"y"}, "bad_reshape");
  b.proto().mutable_graph()->mutable_output(0)->clear_type();
  b.write(dir_ / "reshape.onnx");
  expect_one_line_error(dir_ / "reshape.onnx", {"node 'bad_reshape' (Reshape)"});
}

TEST_F(BadInput, CycleIsNamed) {
  OnnxBuilder b;
  b.input("x", kFloat, {2}).output("y", kFloat, {2});
  b.node("Add", {"x", "loop_b"}, {"loop_a"}, "first");
  b.node("Relu", {"loop_a"}, {"loop_b"}, "second");
  b.node("Relu", {"loop_b"}, {"y"}, "third");
  b.write(dir_ / "cycle.onnx");
  expect_one_line_error(dir_ / "cycle.onnx", {"cycle", "node 'first' (Add)"});
}

TEST_F(BadInput, DanglingInputIsNamed) {
  OnnxBuilder b;
  b.input("x", kFloat, {2}).output("y", kFloat, {2});
  b.node("Add", {"x", "ghost"}, {"y"}, "adder");
  b.write(dir_ / "dangling.onnx");
  expect_one_line_error(dir_ / "dangling.onnx", {"node 'adder' (Add)", "'ghost'", "not produced"});
}

TEST_F(BadInput, SymbolicDimensionWithoutValueAndWithIt) {
  OnnxBuilder b;
  b.input("tokens", kFloat, {1, -1}).output("y", kFloat, {1, -1});
  b.node("Relu", {"tokens"}, {"y"});
  b.write(dir_ / "sym.onnx");
  expect_one_line_error(dir_ / "sym.onnx", {"input 'tokens' dimension 1 ('d1')", "--shape tokens="});
  const Outcome ok = run_cli("inspect " + (dir_ / "sym.onnx").string() + " --shape tokens=1x7");
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_NE(ok.output.find("tokens  float32 1x7"), std::string::npos) << ok.output;
  const Outcome bad = run_cli("inspect " + (dir_ / "sym.onnx").string() + " --shape tokens=1xseven");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.output.find("'seven'"), std::string::npos) << bad.output;
}

TEST_F(BadInput, UnknownOptionIsRefused) {
  const Outcome o = run_cli("inspect x.onnx --shpae a=1");
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_NE(o.output.find("unknown option --shpae"), std::string::npos) << o.output;
}

// `run --repeat N` times a plan (N runs, each timed) and refuses a model or a count that is not one.
// --no-timing on the host was silently ignored (an hours-long host tune instead of a dry run).
TEST_F(BadInput, TuneRefusesNoTimingOnTheHost) {
  const fs::path model = fs::path(FUSETUNE_SOURCE_DIR) / "tests/data/models/cnn_small/model.onnx";
  const Outcome o = run_cli("tune " + model.string() + " --device host --no-timing --db " + (dir_ / "s.db").string());
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_NE(o.output.find("--no-timing is a dry run for a GPU"), std::string::npos) << o.output;
  EXPECT_FALSE(fs::exists(dir_ / "s.db")) << "nothing was to be stored";
}

TEST_F(BadInput, RunRepeatTimesAPlanAndRefusesTheRest) {
  const fs::path model = fs::path(FUSETUNE_SOURCE_DIR) / "tests/data/models/cnn_small";
  const std::string data = (model / "test_data_set_0").string();
  Outcome o = run_cli("run " + (model / "model.onnx").string() + " --inputs " + data + " --repeat 2");
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_NE(o.output.find("--repeat times a plan bundle"), std::string::npos) << o.output;
  ASSERT_EQ(run_cli("compile " + (model / "model.onnx").string() + " --device h100 --out " + (dir_ / "plan").string()).exit_code, 0);
  for (const std::string bad : {"0", "2.5", "-1"}) {
    o = run_cli("run " + (dir_ / "plan").string() + " --inputs " + data + " --backend host --repeat " + bad);
    EXPECT_EQ(o.exit_code, 2) << o.output;
    EXPECT_NE(o.output.find("--repeat"), std::string::npos) << o.output;
  }
  o = run_cli("run " + (dir_ / "plan").string() + " --inputs " + data + " --backend host --repeat 2");
  EXPECT_EQ(o.exit_code, 0) << o.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(o.output, m, std::regex("timed 2 runs: median ([0-9.]+) us, min ([0-9.]+) us, max ([0-9.]+) us"))) << o.output;
  EXPECT_GT(std::stod(m[2]), 0.0);
  EXPECT_LE(std::stod(m[2]), std::stod(m[1]));
  EXPECT_LE(std::stod(m[1]), std::stod(m[3]));
}

}  // namespace
}  // namespace fusetune
