#!/usr/bin/env bash
# Writes the models of scripts/export_tf_models.py (Keras and a tf.function, converted by tf2onnx)
# with their inputs, then onnxruntime's outputs for them (scripts/onnxruntime_outputs.py, in
# third_party/ort-venv: onnxruntime 1.32.0, the oracle), after checking that onnxruntime agrees with
# TensorFlow's own outputs (--agree). TensorFlow 2.15.1 (CPU) and tf2onnx 1.16.1 come from PyPI, in a virtual
# environment of their own (build/tf-export-venv, about 1.4 GB; only this script needs it).
#   scripts/export_tf_models.sh [--out tests/data/models]
set -euo pipefail
cd "$(dirname "$0")/.."
out=tests/data/models
if [ "${1:-}" = --out ]; then out=${2:?usage: scripts/export_tf_models.sh [--out DIR]}; fi
venv=build/tf-export-venv
[ -x "$venv/bin/python" ] || /usr/bin/python3 -m venv "$venv"
"$venv/bin/python" -m pip install --quiet "tensorflow-cpu==2.15.1" "tf2onnx==1.16.1"
"$venv/bin/python" scripts/export_tf_models.py --out "$out"
[ -x third_party/ort-venv/bin/python ] || scripts/setup.sh --deps-only
for model in keras_cnn keras_attention tf_function_ops; do
  # The framework's own outputs are replaced by onnxruntime's only where the two agree.
  third_party/ort-venv/bin/python scripts/onnxruntime_outputs.py --agree 1e-4 "$out/$model" "$out/$model/test_data_set_0"
done
