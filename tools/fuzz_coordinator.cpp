// fuzz_coordinator: a libFuzzer target for the coordinator's request handler.
//
// Takes arbitrary bytes as a sequence of peers' messages (tests/fuzz/coordinator_harness.h: four
// peers, frames of up to 64 KiB) and hands them to one coordinator that lives for the whole run,
// with its database and caches in a temporary directory. A finding is anything that stops it: an
// exception out of the handler, an abort, a sanitizer report, a leak, an input past -timeout; or a
// file written in its directory besides its database and caches (checked after every input).
//
// Build (clang and libFuzzer, as for fuzz_import: tests/fuzz/README.md):
//   CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DFUSETUNE_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo
//   ninja -C build-fuzz fuzz_coordinator
// Run, from the corpus kept in the repository (new inputs go to the first directory):
//   ./build-fuzz/fuzz_coordinator -max_total_time=600 -max_len=65536 -timeout=30 -rss_limit_mb=4096 \
//       /tmp/fuzz-coordinator tests/fuzz/coordinator
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "tests/fuzz/coordinator_harness.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static fusetune::fuzz::CoordinatorHarness harness;
  harness.feed(data, size);
  for (const std::string& stray : harness.strays()) {
    std::fprintf(stderr, "fuzz_coordinator: the coordinator wrote '%s' outside its database and caches\n", stray.c_str());
    std::abort();
  }
  return 0;
}
