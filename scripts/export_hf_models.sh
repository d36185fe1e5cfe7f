#!/usr/bin/env bash
# Exports the Hugging Face architectures of scripts/export_hf_models.py (arguments passed on).
# TorchScript exporter (the default): Debian's torch 1.13 (scripts/install-export-deps.sh) with the
# last transformers release that supports it and onnxconverter-common (float16 conversion), from
# PyPI, in a virtual environment that sees the system packages: build/hf-export-venv (with
# onnxruntime, the oracle of scripts/onnxruntime_outputs.py).
# --exporter dynamo: torch 2.9.1 from PyPI (its dynamo exporter, with onnxscript; about 7 GB with
# the CUDA libraries PyPI's torch depends on) and the same transformers: build/hf-dynamo-venv.
#   scripts/export_hf_models.sh --size small --out tests/data/models
#   scripts/export_hf_models.sh --size small --out tests/data/models --dtype float16 --only llama,llama_decode,gpt2
#   scripts/export_hf_models.sh --size small --out tests/data/models --exporter dynamo [--dtype float16]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-export-deps.sh >/dev/null
dynamo=0
for a in "$@"; do [ "$a" = dynamo ] && dynamo=1; done
if [ "$dynamo" = 1 ]; then
  venv=build/hf-dynamo-venv
  [ -x "$venv/bin/python" ] || /usr/bin/python3 -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet "torch==2.9.1" "transformers==4.40.2" "onnxscript==0.7.2" "onnx==1.23.2" \
    "onnxconverter-common==1.16.0"
else
  venv=build/hf-export-venv
  [ -x "$venv/bin/python" ] || /usr/bin/python3 -m venv --system-site-packages "$venv"
  "$venv/bin/python" -m pip install --quiet "transformers==4.40.2" "onnxconverter-common==1.13.0" "onnxruntime==1.32.0"
fi
exec "$venv/bin/python" scripts/export_hf_models.py "$@"
