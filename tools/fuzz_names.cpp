// fuzz_names: a libFuzzer target for model text reaching generated code (tests/fuzz/names_harness.h).
//
// Takes arbitrary bytes as the texts of a small model's names, attributes and doc strings, and
// generates its CUDA text as `fusetune compile` does. The model may be refused with a
// fusetune::Error (an attribute the operators do not have); otherwise its code, comments removed,
// must be the plain-named model's. Anything else (different code, another exception, an abort, a
// sanitizer report) is a finding.
//
// Build (needs clang and libFuzzer, as fuzz_import):
//   CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DFUSETUNE_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo
//   ninja -C build-fuzz fuzz_names
// Run: ./build-fuzz/fuzz_names -max_total_time=600 -max_len=2048 -timeout=30 /tmp/names-corpus
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "tests/fuzz/names_harness.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::filesystem::path dir = std::filesystem::temp_directory_path();
  static const std::string plain = fusetune::fuzz::code_of(fusetune::fuzz::named_model({}), dir);
  const fusetune::fuzz::NameOutcome o = fusetune::fuzz::check_names(data, size, plain, dir);
  if (!o.refused && !o.same_code) {
    std::fprintf(stderr, "fuzz_names: the model's text changed its code, not only its comments\n");
    std::abort();
  }
  return 0;
}
