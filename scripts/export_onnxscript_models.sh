#!/usr/bin/env bash
# Writes the models of scripts/export_onnxscript_models.py with their inputs, then onnxruntime's
# outputs for them (scripts/onnxruntime_outputs.py): onnxscript 0.7.2 with onnx 1.23.2 and
# onnxruntime 1.32.0 (the oracle) from PyPI, in a virtual environment of their own
# (build/onnxscript-venv; onnxscript needs a newer onnx than Debian's).
#   scripts/export_onnxscript_models.sh [--out tests/data/models]
set -euo pipefail
cd "$(dirname "$0")/.."
out=tests/data/models
if [ "${1:-}" = --out ]; then out=${2:?usage: scripts/export_onnxscript_models.sh [--out DIR]}; fi
venv=build/onnxscript-venv
[ -x "$venv/bin/python" ] || /usr/bin/python3 -m venv "$venv"
"$venv/bin/python" -m pip install --quiet "onnxscript==0.7.2" "onnx-ir==1.1.0" "onnx==1.23.2" "onnxruntime==1.32.0" \
  "numpy==2.2.6" "ml_dtypes==0.7.0"
"$venv/bin/python" scripts/export_onnxscript_models.py --out "$out"
for model in onnxscript_block; do
  "$venv/bin/python" scripts/onnxruntime_outputs.py "$out/$model" "$out/$model/test_data_set_0"
done
