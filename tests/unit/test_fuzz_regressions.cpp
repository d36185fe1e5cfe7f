// Replays the fuzzers' regression inputs and corpora (tests/fuzz/): the importer's through the
// importer and, when the graph is small, the reference interpreter (each must end in a clean
// result or in an Error with a one-line message); the coordinator's through a coordinator
// (tests/fuzz/coordinator_harness.h: nothing may escape its handler or be written beside its
// database). Under the sanitizer build any memory error fails the suite.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "importer/importer.h"
#include "reference/interpreter.h"
#include "tests/fuzz/coordinator_harness.h"

namespace fusetune {
namespace {

namespace fs = std::filesystem;

TEST(FuzzRegressions, ReplayEndsInAResultOrOneLineError) {
  const fs::path root = fs::path(FUSETUNE_SOURCE_DIR) / "tests/fuzz";
  const fs::path empty = fs::temp_directory_path() / ("fusetune_fuzz_replay_" + std::to_string(::getpid()));
  fs::create_directories(empty);
  int files = 0, errors = 0;
  for (const char* sub : {"regressions", "corpus"}) {
    for (const auto& entry : fs::directory_iterator(root / sub)) {
      std::ifstream in(entry.path(), std::ios::binary);
      const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      ++files;
      try {
        const importer::ImportedModel m = importer::import_onnx_bytes(bytes, empty);
        int64_t elems = 0;
        std::vector<Tensor> inputs;
        for (int v : m.graph.inputs()) {
          inputs.emplace_back(m.graph.value(v).dtype, m.graph.value(v).shape);
          elems += inputs.back().numel();
        }
        for (int v : m.graph.outputs()) elems += numel(m.graph.value(v).shape);
        if (elems < 1000000 && m.graph.nodes().size() < 2000) reference::run_graph(m.graph, inputs);
      } catch (const Error& e) {
        ++errors;
        const std::string msg = e.what();
        EXPECT_FALSE(msg.empty()) << entry.path();
        EXPECT_EQ(msg.find('\n'), std::string::npos) << entry.path() << ": " << msg;
      }
    }
  }
  fs::remove_all(empty);
  EXPECT_GE(files, 40);
  EXPECT_GT(errors, 0);
}

TEST(FuzzRegressions, CoordinatorCorpusLeavesTheCoordinatorServing) {
  const fs::path root = fs::path(FUSETUNE_SOURCE_DIR) / "tests/fuzz/coordinator";
  fuzz::CoordinatorHarness harness;
  int inputs = 0;
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(root)) files.push_back(entry.path());
  std::sort(files.begin(), files.end());  // the same order every run: state carries across inputs
  for (const fs::path& file : files) {
    std::ifstream in(file, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    harness.feed(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    EXPECT_TRUE(harness.strays().empty()) << file << ": wrote " << harness.strays().front();
    ++inputs;
  }
  std::printf("%d coordinator fuzz inputs replayed\n", inputs);
  EXPECT_GE(inputs, 9);
}

}  // namespace
}  // namespace fusetune
