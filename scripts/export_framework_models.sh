#!/usr/bin/env bash
# Writes the models another framework's exporter makes, with their inputs, then onnxruntime's
# outputs for them (scripts/onnxruntime_outputs.py in third_party/ort-venv: onnxruntime 1.32.0, the
# oracle), after checking that onnxruntime agrees with the framework's own outputs (--agree). The
# framework and its exporter come from PyPI, pinned, in a virtual environment of their own (only
# this script needs it):
#   tf      scripts/export_tf_models.py: Keras models and tf.functions, by tf2onnx 1.16.1 from
#           TensorFlow 2.15.1 (CPU); build/tf-export-venv, about 1.4 GB.
#   paddle  scripts/export_paddle_models.py: PaddlePaddle 3.3.1 (CPU) layers, by paddle2onnx 2.1.0;
#           build/paddle-export-venv, about 1 GB.
#   keras3  scripts/export_keras3_models.py: Keras 3.15.1's own export (`model.export(format=
#           "onnx")`) on its PyTorch backend, torch 2.11.0; build/keras3-export-venv, about 5 GB
#           (PyPI's torch brings the CUDA libraries).
#   scripts/export_framework_models.sh tf|paddle|keras3 [--size small|full] [--out DIR]
# --size full: the full-size versions (default DIR build/full-models), for bench/run_full_models.sh
# and bench/run_full_compiled.sh; the small ones go to tests/data/models.
set -euo pipefail
cd "$(dirname "$0")/.."
usage="usage: scripts/export_framework_models.sh tf|paddle|keras3 [--size small|full] [--out DIR]"
framework=${1:-}
shift || true
case "$framework" in
  tf)
    pins=("tensorflow-cpu==2.15.1" "tf2onnx==1.16.1")
    small="keras_cnn keras_attention tf_function_ops tf_detector_tail" full="keras_resnet50 keras_bert_layer" ;;
  paddle)
    pins=("paddlepaddle==3.3.1" "paddle2onnx==2.1.0" "packaging==25.0")
    small="paddle_cnn paddle_encoder" full="paddle_resnet50 paddle_encoder_base" ;;
  keras3)
    pins=("torch==2.11.0" "keras==3.15.1" "onnxscript==0.7.2" "onnx==1.23.1")
    small="keras3_cnn keras3_rnn" full="keras3_resnet50" ;;
  *) echo "$usage" >&2; exit 2 ;;
esac
size=small
out=
while [ $# -gt 0 ]; do
  case "$1" in
    --size) size=${2:?}; shift 2 ;;
    --out) out=${2:?}; shift 2 ;;
    *) echo "$usage" >&2; exit 2 ;;
  esac
done
[ -n "$out" ] || out=$([ "$size" = full ] && echo build/full-models || echo tests/data/models)
venv=build/$framework-export-venv
[ -x "$venv/bin/python" ] || /usr/bin/python3 -m venv "$venv"
"$venv/bin/python" -m pip install --quiet "${pins[@]}"
"$venv/bin/python" "scripts/export_${framework}_models.py" --size "$size" --out "$out"
[ -x third_party/ort-venv/bin/python ] || scripts/setup.sh --deps-only
models=$small
[ "$size" = full ] && models=$full
for model in $models; do
  # The framework's own outputs are replaced by onnxruntime's only where the two agree.
  third_party/ort-venv/bin/python scripts/onnxruntime_outputs.py --agree 1e-4 "$out/$model" \
    "$out/$model/test_data_set_0"
done
