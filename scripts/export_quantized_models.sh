#!/usr/bin/env bash
# Writes the quantized models of scripts/export_quantized_models.py (arguments passed on) with
# onnxruntime's quantizer: onnxruntime 1.32.0, onnx 1.23.2, numpy 2.2.6 and ml_dtypes 0.5.4 from
# PyPI, in a virtual environment of their own (build/quant-export-venv; the quantizer needs a newer
# onnx and ml_dtypes than Debian's packages).
#   scripts/export_quantized_models.sh --out tests/data/models
#   scripts/export_quantized_models.sh --full DIR   (DIR/resnet50 from export_models.py --size full)
set -euo pipefail
cd "$(dirname "$0")/.."
venv=build/quant-export-venv
[ -x "$venv/bin/python" ] || /usr/bin/python3 -m venv "$venv"
"$venv/bin/python" -m pip install --quiet "onnxruntime==1.32.0" "onnx==1.23.2" "numpy==2.2.6" "ml_dtypes==0.5.4"
exec "$venv/bin/python" scripts/export_quantized_models.py "$@"
