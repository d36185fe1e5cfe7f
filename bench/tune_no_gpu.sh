#!/bin/sh
# The cost of tuning without a GPU (coordinator/dry_run.h): `fusetune tune MODEL --device DEVICE
# --no-timing` twice, the first with empty caches (cubins and host builds) and the second with
# what the first left, printing CPU and wall time, candidates, CPU per candidate and the cubin
# cache's hit rate of each, and the wall time of each phase (lowering, NVRTC, host builds, host
# verification, the cost model's choice, the bundle). Goal (issue 10): full-size BERT-base cold under 60 s of CPU on the
# 2-core machine for everything but GPU time.
# usage: bench/tune_no_gpu.sh MODEL.onnx [DEVICE] [extra tune args, e.g. --shape ...]
set -eu
model=$1
device=${2:-h100}
[ $# -ge 2 ] && shift 2 || shift 1
fusetune=${FUSETUNE:-build/fusetune}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export FUSETUNE_CACHE_DIR="$work/cache"
echo "| run | candidates | CPU (s) | wall (s) | CPU per candidate (ms) | cubins from the cache | wall by phase |"
echo "|---|---|---|---|---|---|---|"
for run in cold warm; do
  "$fusetune" tune "$model" --device "$device" --no-timing --db "$work/search.db" "$@" > "$work/$run.txt" 2>&1 ||
    { cat "$work/$run.txt"; exit 1; }
  candidates=$(sed -n 's/^groups weighed .* \([0-9][0-9]*\) candidates$/\1/p' "$work/$run.txt")
  cost=$(sed -n 's/^cost of the dry run *\([0-9.]*\) s CPU (\([0-9]*\) ms per candidate), \([0-9.]*\) s wall$/\1 | \3 | \2/p' "$work/$run.txt")
  cache=$(sed -n 's/^NVRTC (ptxas figures) *\([0-9]*\) kernels, \([0-9]*\) from the cubin cache (\([0-9]*%\)).*/\2 of \1 (\3)/p' "$work/$run.txt")
  phases=$(sed -n 's/^wall time by phase *//p' "$work/$run.txt")
  echo "| $run | $candidates | $cost | ${cache:-no NVRTC in this build} | $phases |"
done
