#!/usr/bin/env bash
# How fast plans run on the host's SIMT executor against the reference interpreter (issue 31's
# Required 7: a 416x416 detector within 20x): for each exported model, the reference run and the
# compiled plan's run with the race checks on a sample of each launch's blocks (`fusetune run`'s
# default) and on every block (`--verify-blocks 0`); medians of RUNS runs (default 3) of the
# "ran in" times fusetune prints (import and load excluded), measured, and their ratios.
#   bench/host_run_speed.sh DIR_OF_EXPORTED_MODELS [DEVICE]    (RUNS=N, LIBRARIES=all|none)
# scripts/export_models.py --size full --only detector_416 --out DIR makes the detector.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:?usage: bench/host_run_speed.sh DIR_OF_EXPORTED_MODELS [DEVICE]}
device=${2:-h100}
runs=${RUNS:-3}
libraries=${LIBRARIES:-all}
[ -x build/fusetune ] || scripts/setup.sh

# The median of the "ran in S" seconds of RUNS runs of `fusetune run ARGS...`; fails on a mismatch.
ran_in() {
  local times=()
  for ((i = 0; i < runs; ++i)); do
    local out
    out=$(build/fusetune run "$@" 2>&1) || { echo "fusetune run $*: $(tail -1 <<< "$out")" >&2; return 1; }
    times+=("$(sed -nE 's/.*ran in ([0-9.]+)s.*/\1/p' <<< "$out" | head -1)")
  done
  printf "%s\n" "${times[@]}" | sort -g | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'
}

echo "host: $(nproc) cores; $runs runs each, medians, measured; libraries: $libraries"
printf "| model | kernels | reference s | plan s (64 blocks race-checked) | / reference | plan s (every block) | / reference |\n"
printf "|---|---:|---:|---:|---:|---:|---:|\n"
for m in "$dir"/*/; do
  [ -f "$m/model.onnx" ] || continue
  name=$(basename "$m")
  plan=$(mktemp -d)
  build/fusetune compile "$m/model.onnx" --device "$device" --libraries "$libraries" --out "$plan" > "$plan.log" 2>&1 ||
    { echo "$name: compile failed: $(tail -1 "$plan.log")"; rm -rf "$plan" "$plan.log"; continue; }
  kernels=$(sed -nE 's/.* in ([0-9]+) launches of .*/\1/p' "$plan.log")
  if ! ref=$(ran_in "$m/model.onnx" --inputs "$m/test_data_set_0") || ! sampled=$(ran_in "$plan" --inputs "$m/test_data_set_0") ||
     ! every=$(ran_in "$plan" --inputs "$m/test_data_set_0" --verify-blocks 0); then
    echo "$name: a run failed (above)"
    rm -rf "$plan" "$plan.log"
    continue
  fi
  awk -v n="$name" -v k="$kernels" -v r="$ref" -v s="$sampled" -v e="$every" \
    'BEGIN {printf "| %s | %s | %.2f | %.2f | %.1fx | %.2f | %.1fx |\n", n, k, r, s, s / r, e, e / r}'
  rm -rf "$plan" "$plan.log"
done
