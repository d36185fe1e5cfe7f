#!/usr/bin/env bash
# Writes the models of scripts/export_tf_models.py (Keras and a tf.function, converted by tf2onnx)
# with their inputs, then onnxruntime's outputs for them (scripts/onnxruntime_outputs.py, in
# third_party/ort-venv: onnxruntime 1.32.0, the oracle), after checking that onnxruntime agrees with
# TensorFlow's own outputs. TensorFlow 2.15.1 (CPU) and tf2onnx 1.16.1 come from PyPI, in a virtual
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
  # TensorFlow's outputs, kept aside: onnxruntime's replace them only where the two agree.
  rm -rf "$out/$model/test_data_set_tf"
  cp -r "$out/$model/test_data_set_0" "$out/$model/test_data_set_tf"
  third_party/ort-venv/bin/python scripts/onnxruntime_outputs.py "$out/$model" "$out/$model/test_data_set_0"
  third_party/ort-venv/bin/python - "$out/$model" <<'PY'
import glob, os, sys
import numpy as np
import onnx
from onnx import numpy_helper
d = sys.argv[1]
def load(p):
    t = onnx.TensorProto()
    t.ParseFromString(open(p, "rb").read())
    return numpy_helper.to_array(t)
for p in sorted(glob.glob(os.path.join(d, "test_data_set_tf", "output_*.pb"))):
    tf_out, ort_out = load(p), load(os.path.join(d, "test_data_set_0", os.path.basename(p)))
    diff = np.max(np.abs(tf_out.astype(np.float64) - ort_out.astype(np.float64))) if tf_out.size else 0.0
    print(f"{os.path.basename(d)} {os.path.basename(p)}: TensorFlow and onnxruntime differ by at most {diff:.2e}")
    assert tf_out.shape == ort_out.shape and diff <= 1e-4, "onnxruntime disagrees with TensorFlow"
PY
  rm -rf "$out/$model/test_data_set_tf"
done
