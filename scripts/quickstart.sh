#!/usr/bin/env bash
# The main job on a bundled example: installs what is missing, builds, then imports a small
# BERT-style encoder (tests/data/models/bert), reports what it holds and costs, and runs it on the
# reference interpreter against PyTorch's outputs.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
model=tests/data/models/bert
./build/fusetune inspect "$model/model.onnx" --shape input_ids=1x16 --shape attention_mask=1x16
./build/fusetune run "$model/model.onnx" --inputs "$model/test_data_set_0" --out build/quickstart-outputs
