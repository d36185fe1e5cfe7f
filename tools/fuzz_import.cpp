// fuzz_import: a libFuzzer target for the ONNX importer and the reference interpreter.
//
// Takes arbitrary bytes as an ONNX ModelProto and imports them with
// importer::import_onnx_bytes (external data resolves against an empty temporary directory, so
// every external-data reference must fail cleanly). The only acceptable failure is a
// fusetune::Error; anything else (another exception, an abort, a sanitizer report, a leak, an
// allocation beyond -rss_limit_mb, an input running past -timeout) is a bug the fuzzer reports.
// When import succeeds and the graph is small (fewer than kMaxNodes nodes, graph inputs plus
// outputs below kMaxIoElements elements, every value below kMaxValueElements in total and at most
// kMaxFlops estimated operations), the graph also runs with reference::run_graph on zero-filled
// inputs of the declared dtypes and shapes, where again only fusetune::Error may come out.
// The target keeps no state between inputs.
//
// Build (needs clang and libFuzzer: apt-get install clang libclang-rt-14-dev):
//   CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DFUSETUNE_FUZZ=ON \
//       -DCMAKE_BUILD_TYPE=RelWithDebInfo
//   ninja -C build-fuzz fuzz_import
// Run (seeds from tests/fuzz/corpus, new inputs go to the first directory):
//   mkdir -p /tmp/fuzz-corpus
//   ./build-fuzz/fuzz_import -max_total_time=600 -max_len=65536 -rss_limit_mb=4096 -timeout=10 \
//       -dict=tests/fuzz/onnx.dict /tmp/fuzz-corpus tests/fuzz/corpus
// Replay the regressions (each must exit 0; FUZZ_IMPORT_VERBOSE=1 prints each input's Error):
//   ./build-fuzz/fuzz_import tests/fuzz/regressions/*
// See tests/fuzz/README.md for the campaign log.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <unistd.h>

#include "core/error.h"
#include "core/ops.h"
#include "importer/importer.h"
#include "reference/interpreter.h"

namespace {

namespace fs = std::filesystem;
using namespace fusetune;

constexpr size_t kMaxNodes = 2000;
constexpr int64_t kMaxIoElements = 1'000'000;
constexpr int64_t kMaxValueElements = 4'000'000;
constexpr int64_t kMaxFlops = 200'000'000;

// The base directory for external data: an empty directory, $TMPDIR/fuzz_import-empty-UID, created
// on first use and shared by later runs (a fresh one per process would be left behind, as libFuzzer
// often leaves without running exit handlers). The target never writes into it.
const fs::path& empty_base_dir() {
  static const fs::path dir = [] {
    const fs::path d = fs::temp_directory_path() / ("fuzz_import-empty-" + std::to_string(getuid()));
    std::error_code ec;
    fs::create_directory(d, ec);
    if (!fs::is_directory(d, ec) || !fs::is_empty(d, ec)) {
      std::fprintf(stderr, "fuzz_import: %s must be an empty directory\n", d.c_str());
      std::abort();
    }
    return d;
  }();
  return dir;
}

// Element count of a shape, saturating at `cap` (so absurd shapes cannot overflow the sums here).
int64_t elements_capped(const Shape& shape, int64_t cap) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d <= 0) return 0;
    if (n > cap / d) return cap;
    n *= d;
  }
  return std::min(n, cap);
}

// Whether running the graph stays cheap enough for fuzzing.
bool small_enough(const Graph& g) {
  if (g.nodes().size() >= kMaxNodes) return false;
  int64_t io = 0;
  std::vector<int> io_values = g.inputs();
  io_values.insert(io_values.end(), g.outputs().begin(), g.outputs().end());
  for (int v : io_values) {
    io += elements_capped(g.value(v).shape, kMaxIoElements);
    if (io >= kMaxIoElements) return false;
  }
  int64_t all = 0;
  for (const Value& v : g.values()) {
    all += elements_capped(v.shape, kMaxValueElements);
    if (all >= kMaxValueElements) return false;
  }
  int64_t flops = 0;
  for (const Node& n : g.nodes()) {
    flops += node_flops(g, n);
    if (flops > kMaxFlops) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  try {
    const importer::ImportedModel model = importer::import_onnx_bytes(bytes, empty_base_dir());
    const Graph& g = model.graph;
    if (!small_enough(g)) return 0;
    std::vector<Tensor> inputs;
    for (int v : g.inputs()) inputs.emplace_back(g.value(v).dtype, g.value(v).shape);
    const std::vector<Tensor> outputs = reference::run_graph(g, inputs);
    if (outputs.size() != g.outputs().size()) std::abort();
  } catch (const Error& e) {
    // Bad input, reported cleanly: the expected outcome for most fuzz inputs.
    static const bool verbose = std::getenv("FUZZ_IMPORT_VERBOSE") != nullptr;
    if (verbose) std::fprintf(stderr, "fuzz_import: Error: %s\n", e.what());
  }
  return 0;
}
