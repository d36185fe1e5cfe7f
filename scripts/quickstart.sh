#!/usr/bin/env bash
# The main job on a bundled example: installs what is missing, builds, then takes a small
# BERT-style encoder (tests/data/models/bert) through fusetune: inspect, plan for an H100, compile
# its kernels into a plan bundle, and run the bundle (GPU if present, else the host form of the
# same kernels) against PyTorch's outputs.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
model=tests/data/models/bert
shapes=(--shape input_ids=1x16 --shape attention_mask=1x16)
./build/fusetune inspect "$model/model.onnx" "${shapes[@]}"
./build/fusetune plan "$model/model.onnx" --device h100 "${shapes[@]}"
./build/fusetune compile "$model/model.onnx" --device h100 --out build/quickstart-plan "${shapes[@]}"
./build/fusetune run build/quickstart-plan --inputs "$model/test_data_set_0" --out build/quickstart-outputs
