#!/usr/bin/env bash
# The main job on a bundled example: installs what is missing, builds, then tunes a small
# BERT-style encoder (tests/data/models/bert) with the embedded default (`fusetune tune`: a
# coordinator and a local worker in one process; the GPU if there is one, else a dry run for the
# H100: every candidate compiled for it and verified on the host's SIMT executor, the plan chosen by
# the cost model), writes the tuned plan, and runs it (on the host without a GPU) against PyTorch's
# outputs. The search database is build/quickstart.db, so running this again on a GPU measures
# nothing new.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
model=tests/data/models/bert
shapes=(--shape input_ids=1x16 --shape attention_mask=1x16)
./build/fusetune inspect "$model/model.onnx" "${shapes[@]}"
./build/fusetune tune "$model/model.onnx" --device auto --db build/quickstart.db --out build/quickstart-plan \
  --candidates 2 "${shapes[@]}"
./build/fusetune run build/quickstart-plan --inputs "$model/test_data_set_0" --out build/quickstart-outputs
