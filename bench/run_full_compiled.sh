#!/usr/bin/env bash
# Compiles every full-size exported model to a plan bundle (fusetune compile) and runs the bundle
# (GPU if present, else the same CUDA text on the host's SIMT executor) against PyTorch's outputs;
# prints a table.
#   bench/run_full_compiled.sh DIR_OF_EXPORTED_MODELS [DEVICE]
# A model folder's run_args file, where there is one, is passed to `fusetune run` (the quantized
# ResNet-50's tolerance: scripts/export_quantized_models.py --full), its shape_args file to
# `fusetune compile` (a symbolic batch axis: scripts/export_keras3_models.py).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:?usage: bench/run_full_compiled.sh DIR_OF_EXPORTED_MODELS [DEVICE]}
device=${2:-h100}
[ -x build/fusetune ] || scripts/setup.sh
printf "%-16s %8s %10s %10s %12s %s\n" model kernels compile_s run_s max_abs verdict
for m in "$dir"/*/; do
  name=$(basename "$m")
  plan=$(mktemp -d)
  t0=$(date +%s.%N)
  build/fusetune compile "$m/model.onnx" --device "$device" --out "$plan" $(cat "$m/shape_args" 2>/dev/null) > "$plan.compile.log" 2>&1 || { echo "$name: compile failed: $(tail -1 "$plan.compile.log")"; continue; }
  t1=$(date +%s.%N)
  set +e
  build/fusetune run "$plan" --inputs "$m/test_data_set_0" $(cat "$m/run_args" 2>/dev/null) > "$plan.run.log" 2>&1
  rc=$?
  set -e
  t2=$(date +%s.%N)
  kernels=$(sed -nE 's/.* in ([0-9]+) launches of .*/\1/p' "$plan.compile.log")
  max_abs=$(sed -nE 's/.*max_abs=([^ ]+).*/\1/p' "$plan.run.log" | sort -g | tail -1)
  verdict=$([ $rc -eq 0 ] && echo match || echo "DIFFER/ERROR: $(tail -1 "$plan.run.log")")
  printf "%-16s %8s %10.1f %10.1f %12s %s\n" "$name" "$kernels" "$(python3 -c "print($t1 - $t0)")" \
    "$(python3 -c "print($t2 - $t1)")" "${max_abs:-?}" "$verdict"
  rm -rf "$plan" "$plan.compile.log" "$plan.run.log"
done
