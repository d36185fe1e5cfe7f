#!/usr/bin/env bash
# bench/fuzz_groups.sh [MINUTES] [BUILD_DIR] [OUT_DIR]: a campaign of the fusion-group fuzzers
# (tests/unit/test_group_fuzz.cpp: the groups of every kernel kind, the window ops: Conv,
# pooling, Resize, products of 8-bit integers, updates in place, back-to-back products, gated
# linear units and products for wgmma's TMA form) for MINUTES (default 30): runs of 20 random cases each from a fresh seed, the seven
# generators in turn, until the time is up. A failing
# case's seed (the case the run stopped at) goes to OUT_DIR/failures.txt (default
# BUILD_DIR/fuzz_groups) with its generator and log; the table at the end says how many cases ran
# and which failed. Replay one: FUSETUNE_TEST_SEED=SEED FUSETUNE_GROUP_FUZZ_CASES=1 (or
# FUSETUNE_WINDOW_FUZZ_CASES=1, FUSETUNE_INT8_FUZZ_CASES=1, FUSETUNE_UPDATE_FUZZ_CASES=1,
# FUSETUNE_PRODUCTS_FUZZ_CASES=1, FUSETUNE_GATED_FUZZ_CASES=1, FUSETUNE_TMA_FUZZ_CASES=1) BUILD_DIR/tests/fusetune_unit_tests
# --gtest_filter='GroupFuzz.TEST'; keep a group case, once fixed, in tests/fuzz/group_seeds.txt.
set -uo pipefail
cd "$(dirname "$0")/.."
minutes=${1:-30}
build=${2:-build}
out=${3:-$build/fuzz_groups}
mkdir -p "$out"
per_run=20
end=$((SECONDS + minutes * 60))
runs=0
cases=0
failed=0
# Each generator: its test and the variable that sets its number of cases.
generators=(RandomGroupsMatchTheReferenceUnderEveryCheck:FUSETUNE_GROUP_FUZZ_CASES
            RandomWindowGroupsMatchTheReferenceUnderEveryCheck:FUSETUNE_WINDOW_FUZZ_CASES
            RandomEightBitProductsMatchTheReferenceUnderEveryCheck:FUSETUNE_INT8_FUZZ_CASES
            RandomUpdatesInPlaceMatchTheReferenceUnderEveryCheck:FUSETUNE_UPDATE_FUZZ_CASES
            RandomBackToBackProductsMatchTheReferenceUnderEveryCheck:FUSETUNE_PRODUCTS_FUZZ_CASES
            RandomGatedUnitsMatchTheReferenceUnderEveryCheck:FUSETUNE_GATED_FUZZ_CASES
            RandomTmaProductsMatchTheReferenceUnderEveryCheck:FUSETUNE_TMA_FUZZ_CASES)
while [ "$SECONDS" -lt "$end" ]; do
  seed=$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')
  generator=${generators[$((runs % ${#generators[@]}))]}
  test=${generator%%:*}
  log="$out/run-$seed.log"
  if env FUSETUNE_TEST_SEED="$seed" "${generator##*:}=$per_run" \
      "$build/tests/fusetune_unit_tests" --gtest_filter="GroupFuzz.$test" >"$log" 2>&1; then
    rm -f "$log"
    cases=$((cases + per_run))
  else
    case_line=$(grep '^group fuzz case ' "$log" | tail -1)
    bad=$(echo "$case_line" | sed 's/^group fuzz case \([0-9]*\):.*/\1/')
    cases=$((cases + bad - seed + 1))
    failed=$((failed + 1))
    echo "$bad # $test: ${case_line#group fuzz case $bad: } (log $log)" | tee -a "$out/failures.txt"
  fi
  runs=$((runs + 1))
  echo "fuzz_groups: $runs runs, $cases cases, $failed failing, $(( (end - SECONDS) / 60 )) minutes left"
done
printf '%-10s %8s %8s %8s\n' minutes runs cases failing
printf '%-10s %8d %8d %8d\n' "$minutes" "$runs" "$cases" "$failed"
[ "$failed" -eq 0 ]
