// Model text never becomes code: node and value names carrying C++ (after a newline, a carriage
// return, a backslash continuation, "*/", a trigraph, a Unicode line separator, a NUL) are compiled,
// run on the host executor (which builds the kernel text with the system compiler and loads it)
// and tuned by a local worker, and none of their code runs; the shipped text, comments removed, is
// the text of the same model with plain names. A control shows that the same payload, placed as
// code, does run: the probe can see an escape. Peer text made valid UTF-8 (valid_utf8) and one log
// line (one_line), judged by nlohmann's JSON writer over random bytes.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>

#include "codegen/emit.h"
#include "core/files.h"
#include "core/inert_text.h"
#include "importer/onnx_io.h"
#include "simt/executor.h"
#include "simt/module.h"
#include "tests/fuzz/names_harness.h"
#include "unit/cli_run.h"
#include "unit/onnx_builder.h"
#include "unit/test_seed.h"

namespace fusetune {
namespace {

namespace fs = std::filesystem;
using testing::kFloat;
using testing::OnnxBuilder;

using testing::Outcome;
using testing::run_cli;

// A statement that creates `marker` when it runs.
std::string call(const fs::path& marker) {
  return "{ extern int system(const char*); system(\"touch " + marker.string() + "\"); }";
}

// The statement on lines of its own, guarded so that NVRTC compiles it too (the host build defines
// FT_SIMT): an escape would compile everywhere and run on the host.
std::string payload(const fs::path& marker, const std::string& eol = "\n") {
  return eol + "#ifdef FT_SIMT" + eol + call(marker) + eol + "#endif" + eol;
}

// Each class of text that could end a line comment, continue it or hide a line break.
std::vector<std::pair<std::string, std::string>> hostile_names(const fs::path& marker) {
  return {
      {"newline", "ln'" + payload(marker) + "//"},
      {"carriage return", "cr'" + payload(marker, "\r") + "//"},
      {"backslash continuation", "bs\\"},
      {"comment close", "*/ " + call(marker) + " /*"},
      {"trigraph", "tg?\?/" + payload(marker)},
      {"line separator", "ls\xE2\x80\xA8" + call(marker)},
      {"NUL and controls", std::string("nul\0\v\f", 6) + call(marker)},
  };
}

TEST(InertText, EveryPayloadClassBecomesOneInertLine) {
  const fs::path marker = "/tmp/never";
  for (const auto& [what, text] : hostile_names(marker)) {
    SCOPED_TRACE(what);
    const std::string inert = inert_comment(text);
    EXPECT_TRUE(is_inert_comment(inert)) << inert;
    for (const char bad : {'\n', '\r', '\\', '*', '?', '\0', '\v', '\f', '"', ';', '{'}) {
      EXPECT_EQ(inert.find(bad), std::string::npos) << "byte " << int(bad) << " kept in " << inert;
    }
    for (const char c : inert) EXPECT_LT(static_cast<unsigned char>(c), 0x80) << inert;
    EXPECT_FALSE(is_inert_comment(text));
  }
  EXPECT_EQ(inert_comment("stage MatMul '/encoder/layer.0/attention/MatMul_1'"),
            "stage MatMul '/encoder/layer.0/attention/MatMul_1'");
  EXPECT_EQ(inert_comment("a\nb"), "a%0Ab");
  EXPECT_EQ(inert_comment("50%"), "50%25");
}

TEST(InertText, DistinctNamesStayDistinct) {
  const unsigned seed = testing::test_seed();
  std::mt19937 rng(seed);
  std::map<std::string, std::string> seen;
  for (int i = 0; i < 20000; ++i) {
    std::string s(rng() % 6, ' ');
    for (char& c : s) c = static_cast<char>(rng() % 256);
    const std::string inert = inert_comment(s);
    ASSERT_TRUE(is_inert_comment(inert));
    const auto [it, fresh] = seen.emplace(inert, s);
    ASSERT_TRUE(fresh || it->second == s) << "two names give " << inert;
  }
}

// valid_utf8 keeps UTF-8 as it is and writes every other byte as \xNN; nlohmann's JSON writer, which
// refuses text that is not UTF-8, is the independent judge. Random code points (each length of
// sequence) come back unchanged; random bytes always come back valid.
TEST(InertText, ValidUtf8KeepsUtf8AndEscapesEveryOtherByte) {
  EXPECT_EQ(valid_utf8("plain ASCII, naïve, €, 𝄞"), "plain ASCII, naïve, €, 𝄞");
  EXPECT_EQ(valid_utf8("a\xff" "b"), "a\\xFFb");
  EXPECT_EQ(valid_utf8("\x80"), "\\x80");                             // a stray continuation byte
  EXPECT_EQ(valid_utf8("\xc0\xaf"), "\\xC0\\xAF");                    // an overlong '/'
  EXPECT_EQ(valid_utf8("\xed\xa0\x80"), "\\xED\\xA0\\x80");           // a surrogate
  EXPECT_EQ(valid_utf8("\xf4\x90\x80\x80"), "\\xF4\\x90\\x80\\x80");  // over U+10FFFF
  EXPECT_EQ(valid_utf8("\xe2\x82" "x"), "\\xE2\\x82x");               // a truncated sequence
  EXPECT_EQ(valid_utf8("\xe2\x82"), "\\xE2\\x82");                    // ... at the end
  EXPECT_EQ(valid_utf8(std::string("a\0b\n", 4)), std::string("a\0b\n", 4));  // controls are UTF-8
  const unsigned seed = testing::test_seed();
  std::mt19937 rng(seed);
  for (int i = 0; i < 20000; ++i) {
    std::string bytes(rng() % 8, ' ');
    for (char& c : bytes) c = static_cast<char>(rng() % 256);
    const std::string valid = valid_utf8(bytes);
    ASSERT_NO_THROW((void)nlohmann::json(valid).dump()) << "not UTF-8 from " << ::testing::PrintToString(bytes);
    ASSERT_EQ(valid_utf8(valid), valid);
    std::string text;
    for (int k = 0; k < 4; ++k) {
      uint32_t cp = rng() % 0x110000;
      if (cp >= 0xD800 && cp <= 0xDFFF) cp = 0xFFFD;
      if (cp < 0x80) {
        text += static_cast<char>(cp);
      } else if (cp < 0x800) {
        text += static_cast<char>(0xC0 | (cp >> 6));
        text += static_cast<char>(0x80 | (cp & 0x3F));
      } else if (cp < 0x10000) {
        text += static_cast<char>(0xE0 | (cp >> 12));
        text += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        text += static_cast<char>(0x80 | (cp & 0x3F));
      } else {
        text += static_cast<char>(0xF0 | (cp >> 18));
        text += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        text += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        text += static_cast<char>(0x80 | (cp & 0x3F));
      }
    }
    ASSERT_NO_THROW((void)nlohmann::json(text).dump());
    ASSERT_EQ(valid_utf8(text), text) << "UTF-8 changed: " << ::testing::PrintToString(text);
  }
}

// one_line is valid_utf8 that never breaks a log line: no newline, carriage return, other control
// character, NEL, line or paragraph separator survives, whatever the bytes.
TEST(InertText, OneLineNeverBreaksALogLine) {
  EXPECT_EQ(one_line("model\n2026-01-01T00:00:00.000Z INFO forged\r"), "model\\n2026-01-01T00:00:00.000Z INFO forged\\r");
  EXPECT_EQ(one_line("tab\there"), "tab\\there");
  EXPECT_EQ(one_line(std::string("nul\0", 4)), "nul\\x00");
  EXPECT_EQ(one_line("ls\xe2\x80\xa8ps\xe2\x80\xa9nel\xc2\x85"), "ls\\u2028ps\\u2029nel\\u0085");
  EXPECT_EQ(one_line("\xff ü"), "\\xFF ü");
  const unsigned seed = testing::test_seed();
  std::mt19937 rng(seed);
  for (int i = 0; i < 20000; ++i) {
    std::string bytes(rng() % 8, ' ');
    for (char& c : bytes) c = static_cast<char>(rng() % 256);
    const std::string line = one_line(bytes);
    ASSERT_NO_THROW((void)nlohmann::json(line).dump()) << ::testing::PrintToString(bytes);
    for (const char c : line) ASSERT_GE(static_cast<unsigned char>(c), 0x20) << ::testing::PrintToString(bytes);
    for (const char* bad : {"\x7f", "\xc2\x85", "\xe2\x80\xa8", "\xe2\x80\xa9"}) {
      ASSERT_EQ(line.find(bad), std::string::npos) << ::testing::PrintToString(bytes);
    }
  }
}

TEST(InertText, TheEmitterRefusesACommentThatCouldEndItsLine) {
  codegen::Kernel k;
  k.name = "k";
  k.threads = 32;
  k.body.push_back(codegen::comment("fine'\nsystem(\"id\");"));
  EXPECT_NO_THROW(codegen::emit_cuda({k}));
  codegen::Stmt raw = codegen::comment("");
  raw.a = "x\nsystem(\"id\");";  // a statement built around comment(): refused, never printed
  k.body.push_back(raw);
  EXPECT_THROW(codegen::emit_cuda({k}), Error);
}

// The same host build and launch the host executor gives shipped kernels, with the payload as code:
// the marker appears, so the end-to-end test below would see an escape.
TEST(InertText, ControlThePayloadRunsWhenItIsCode) {
  const fs::path marker = fs::temp_directory_path() / ("fusetune_inert_control_" + std::to_string(::getpid()));
  fs::remove(marker);
  const std::string text = codegen::emit_cuda({}) +
                           "extern \"C\" __global__ void __launch_bounds__(32) k(FT_GLOBAL(float) out) {\n  if (threadIdx.x == 0) " +
                           payload(marker) + "\n  out[threadIdx.x] = 1.0f;\n}\n";
  simt::Module m(text);
  std::vector<float> out(32);
  simt::launch(m.kernel("k"), {out.data()}, {out.size() * 4}, {1, 32, 0}, {});
  EXPECT_TRUE(fs::exists(marker)) << "the control payload did not run: the end-to-end test could not see an escape";
  fs::remove(marker);
}

class HostileNames : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("fusetune_inert_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "in");
    marker_ = dir_ / "INJECTED";
  }
  void TearDown() override { fs::remove_all(dir_); }

  // x[4,64] -> LayerNormalization -> MatMul W[64,32] -> Add -> Relu -> y, every node and every
  // intermediate value named `name(i)`.
  fs::path write_model(const std::string& file, const std::function<std::string(int)>& name) {
    OnnxBuilder b;
    fuzz::layer_norm_mlp(b, {{name(0), name(1), name(2), name(3)}, {name(10), name(11), name(12)}});
    b.write(dir_ / file);
    return dir_ / file;
  }
  fs::path dir_;
  fs::path marker_;
};

// kernels.cu without its comments.
std::string code_only(const fs::path& plan) {
  return std::regex_replace(read_file(plan / "kernels.cu", "the plan's kernels"), std::regex("//[^\n]*"), "");
}

TEST_F(HostileNames, CompileRunAndTuneRunNoneOfTheirCode) {
  const fs::path plain = write_model("plain.onnx", [](int i) { return "n" + std::to_string(i); });
  std::vector<float> xs(4 * 64);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = std::sin(0.37f * static_cast<float>(i));
  importer::write_tensor_file(dir_ / "in" / "input_0.pb", "x", Tensor::from_floats(DType::kF32, {4, 64}, xs));
  // The reference interpreter's outputs (no code generated) become the expected ones.
  Outcome ref = run_cli("run " + plain.string() + " --inputs " + (dir_ / "in").string() + " --out " + (dir_ / "ref").string());
  ASSERT_EQ(ref.exit_code, 0) << ref.output;
  fs::copy_file(dir_ / "ref" / "output_0.pb", dir_ / "in" / "output_0.pb");
  ASSERT_EQ(run_cli("compile " + plain.string() + " --device h100 --out " + (dir_ / "plain_plan").string()).exit_code, 0);
  const std::string plain_code = code_only(dir_ / "plain_plan");
  ASSERT_NE(plain_code.find("__global__"), std::string::npos);

  int k = 0;
  for (const auto& [what, hostile] : hostile_names(marker_)) {
    SCOPED_TRACE(what);
    const std::string tag = std::to_string(k++);
    const fs::path model = write_model("hostile" + tag + ".onnx", [&](int i) { return hostile + "#" + std::to_string(i); });
    const fs::path plan = dir_ / ("plan" + tag);
    const Outcome c = run_cli("compile " + model.string() + " --device h100 --out " + plan.string());
    EXPECT_EQ(c.exit_code, 0) << c.output;
    EXPECT_EQ(code_only(plan), plain_code) << "the hostile names changed the code, not only its comments";
    EXPECT_NE(read_file(plan / "kernels.cu", "the plan's kernels").find("stage MatMul"), std::string::npos);
    const Outcome r = run_cli("run " + plan.string() + " --inputs " + (dir_ / "in").string() + " --backend host");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("match"), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(marker_)) << "the plan ran the name's code";
  }
  // A tuning job: a coordinator and a local worker whose measuring child builds and runs each
  // candidate on the host executor.
  const fs::path model = write_model("tuned.onnx", [&](int i) { return hostile_names(marker_)[0].second + std::to_string(i); });
  const Outcome t = run_cli("tune " + model.string() + " --device host --candidates 2 --db " + (dir_ / "search.db").string() +
                            " --out " + (dir_ / "tuned").string());
  EXPECT_EQ(t.exit_code, 0) << t.output;
  const Outcome r = run_cli("run " + (dir_ / "tuned").string() + " --inputs " + (dir_ / "in").string() + " --backend host");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_FALSE(fs::exists(marker_)) << "tuning ran the name's code";
}

// The name fuzzer's property (tests/fuzz/names_harness.h) over seeded random texts drawn from what
// breaks out of a comment or a line (newline, carriage return, backslash, "*/", "??/", quotes,
// NUL, U+2028, invalid UTF-8) and plain letters: every model generates the plain-named model's
// code, comments removed. FUSETUNE_TEST_SEED replays a run.
TEST(NameFuzz, RandomNamesAttributesAndDocStringsLeaveTheCodeAsItWas) {
  const uint32_t seed = testing::test_seed();
  std::mt19937 rng(seed);
  const fs::path dir = fs::temp_directory_path();
  const std::string plain = fuzz::code_of(fuzz::named_model({}), dir);
  ASSERT_NE(plain.find("__global__"), std::string::npos);
  const std::vector<std::string> pieces = {"\n", "\r", "\\", "*/", "/*", "?" "?/", "\"", "'", std::string(1, '\0'),
                                           "\xe2\x80\xa8", "\xff\xfe", "\xc3", "system(\"id\");", "#include <x>", "a", "Z", "_", " "};
  for (int iteration = 0; iteration < 6; ++iteration) {
    std::string input;
    for (size_t t = 0; t < fuzz::kNameTexts; ++t) {
      std::string text;
      if (t == fuzz::kAttributeNameText) {  // an attribute the operators lack is refused: kept out here
        input += '\0';
        continue;
      }
      for (int k = std::uniform_int_distribution<int>(0, 8)(rng); k > 0; --k) {
        text += pieces[std::uniform_int_distribution<size_t>(0, pieces.size() - 1)(rng)];
      }
      text.resize(std::min<size_t>(text.size(), 255));
      input += static_cast<char>(text.size());
      input += text;
    }
    const fuzz::NameOutcome o =
        fuzz::check_names(reinterpret_cast<const uint8_t*>(input.data()), input.size(), plain, dir);
    EXPECT_FALSE(o.refused) << "seed " << seed << ", iteration " << iteration << ": refused: " << o.error;
    EXPECT_TRUE(o.refused || o.same_code) << "seed " << seed << ", iteration " << iteration
                                          << ": the model's text changed its code, not only its comments";
  }
  // An attribute the operators do not have, whatever its name: refused, never generated.
  std::string input(fuzz::kAttributeNameText, '\0');
  input += std::string("\x0a") + "x\n*/ sys()";
  const fuzz::NameOutcome o = fuzz::check_names(reinterpret_cast<const uint8_t*>(input.data()), input.size(), plain, dir);
  EXPECT_TRUE(o.refused);
  EXPECT_NE(o.error.find("is not supported"), std::string::npos) << o.error;
}

}  // namespace
}  // namespace fusetune
