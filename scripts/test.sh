#!/usr/bin/env bash
# The test suite: installs what is missing, builds, and runs every test with ctest; then the same
# suite under AddressSanitizer + UndefinedBehaviorSanitizer. `--quick` skips the sanitizer pass.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
ctest --test-dir build --output-on-failure -j "$(nproc)"
if [ "${1:-}" != "--quick" ]; then
  scripts/setup.sh --sanitize
  # The barrier mutation tests (mutations.*) run in the plain pass only: under the sanitizers they
  # would repeat, at several times the cost, what the executor's own tests (Simt*) check there.
  echo "test.sh: the sanitizer pass skips mutations.* (run above without sanitizers)"
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir build-asan --output-on-failure -j "$(nproc)" -E '^mutations\.'

fi
