#!/usr/bin/env bash
# Exports the Hugging Face architectures of scripts/export_hf_models.py (arguments passed on).
# Debian's torch 1.13 (scripts/install-export-deps.sh) with the last transformers release that
# supports it and onnxconverter-common (float16 conversion), from PyPI, in a virtual environment
# that sees the system packages: build/hf-export-venv.
#   scripts/export_hf_models.sh --size small --out tests/data/models
#   scripts/export_hf_models.sh --size small --out tests/data/models --dtype float16 --only llama,llama_decode,gpt2
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-export-deps.sh >/dev/null
venv=build/hf-export-venv
if [ ! -x "$venv/bin/python" ]; then
  /usr/bin/python3 -m venv --system-site-packages "$venv"
fi
"$venv/bin/python" -m pip install --quiet "transformers==4.40.2" "onnxconverter-common==1.13.0"
exec "$venv/bin/python" scripts/export_hf_models.py "$@"
