#!/usr/bin/env bash
# Imports and runs every full-size exported model on the reference interpreter against PyTorch's
# outputs and prints a table: model, ONNX and canonical nodes, import and run time, peak memory,
# worst error, verdict. Export first:
#   scripts/install-export-deps.sh && /usr/bin/python3 scripts/export_models.py --size full --out DIR
#   bench/run_full_models.sh DIR
# A model folder's run_args file, where there is one, is passed to `fusetune run` (the quantized
# ResNet-50's tolerance: scripts/export_quantized_models.py --full), its shape_args file to
# `fusetune inspect` (a symbolic batch axis: scripts/export_keras3_models.py).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:?usage: bench/run_full_models.sh DIR_OF_EXPORTED_MODELS}
[ -x build/fusetune ] || scripts/setup.sh
printf "%-16s %8s %9s %9s %9s %10s %12s %s\n" model onnx canon import_s run_s peak_MB max_abs verdict
for m in "$dir"/*/; do
  name=$(basename "$m")
  log=$(mktemp)
  set +e
  /usr/bin/time -f "%M" -o "$log.mem" build/fusetune run "$m/model.onnx" --inputs "$m/test_data_set_0" $(cat "$m/run_args" 2>/dev/null) >"$log" 2>&1
  rc=$?
  set -e
  onnx=$(build/fusetune inspect "$m/model.onnx" --json $(cat "$m/shape_args" 2>/dev/null) 2>/dev/null | python3 -c 'import json,sys; j=json.load(sys.stdin); print(j["onnx_nodes"], j["canonical_nodes"])' 2>/dev/null || echo "? ?")
  import_s=$(sed -nE 's/.*imported in ([0-9.]+)s.*/\1/p' "$log")
  run_s=$(sed -nE 's/.*ran in ([0-9.]+)s.*/\1/p' "$log")
  max_abs=$(sed -nE 's/.*max_abs=([^ ]+).*/\1/p' "$log" | sort -g | tail -1)
  peak=$(( $(cat "$log.mem") / 1024 ))
  verdict=$([ $rc -eq 0 ] && echo match || echo "DIFFER/ERROR (exit $rc)")
  printf "%-16s %8s %9s %9s %9s %10s %12s %s\n" "$name" ${onnx} "${import_s:-?}" "${run_s:-?}" "$peak" "${max_abs:-?}" "$verdict"
  rm -f "$log" "$log.mem"
done
