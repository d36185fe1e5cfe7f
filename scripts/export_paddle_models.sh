#!/usr/bin/env bash
# Writes the models of scripts/export_paddle_models.py (PaddlePaddle layers, converted by paddle2onnx)
# with their inputs, then onnxruntime's outputs for them (scripts/onnxruntime_outputs.py, in
# third_party/ort-venv: onnxruntime 1.32.0, the oracle), after checking that onnxruntime agrees with
# PaddlePaddle's own outputs (--agree). PaddlePaddle 3.3.1 (CPU) and paddle2onnx 2.1.0 come from PyPI, in a virtual
# environment of their own (build/paddle-export-venv, about 1 GB; only this script needs it).
#   scripts/export_paddle_models.sh [--out tests/data/models]
set -euo pipefail
cd "$(dirname "$0")/.."
out=tests/data/models
if [ "${1:-}" = --out ]; then out=${2:?usage: scripts/export_paddle_models.sh [--out DIR]}; fi
venv=build/paddle-export-venv
[ -x "$venv/bin/python" ] || /usr/bin/python3 -m venv "$venv"
"$venv/bin/python" -m pip install --quiet "paddlepaddle==3.3.1" "paddle2onnx==2.1.0" "packaging==25.0"
"$venv/bin/python" scripts/export_paddle_models.py --out "$out"
[ -x third_party/ort-venv/bin/python ] || scripts/setup.sh --deps-only
for model in paddle_cnn paddle_encoder; do
  # The framework's own outputs are replaced by onnxruntime's only where the two agree.
  third_party/ort-venv/bin/python scripts/onnxruntime_outputs.py --agree 1e-4 "$out/$model" "$out/$model/test_data_set_0"
done
