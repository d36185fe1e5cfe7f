#!/usr/bin/env bash
# Writes the models of scripts/export_onnxscript_models.py (arguments passed on): onnxscript 0.7.2
# with onnx 1.23.2 and onnxruntime 1.32.0 (the oracle) from PyPI, in a virtual environment of their
# own (build/onnxscript-venv; onnxscript needs a newer onnx than Debian's).
#   scripts/export_onnxscript_models.sh --out tests/data/models
set -euo pipefail
cd "$(dirname "$0")/.."
venv=build/onnxscript-venv
[ -x "$venv/bin/python" ] || /usr/bin/python3 -m venv "$venv"
"$venv/bin/python" -m pip install --quiet "onnxscript==0.7.2" "onnx-ir==1.1.0" "onnx==1.23.2" "onnxruntime==1.32.0" \
  "numpy==2.2.6" "ml_dtypes==0.7.0"
exec "$venv/bin/python" scripts/export_onnxscript_models.py "$@"
