#!/bin/sh
# The README's main command on a bundled model, end to end: `fusetune tune` (embedded coordinator
# and worker) writes a plan that `fusetune run` verifies against PyTorch's outputs; a second tune
# of the same model with the same database measures nothing (every group is a cache hit).
# usage: tune_twice.sh FUSETUNE MODEL_DIR WORK_DIR [extra tune args...]
set -eu
fusetune=$1 model_dir=$2 work=$3
shift 3
rm -rf "$work"
mkdir -p "$work"
"$fusetune" tune "$model_dir/model.onnx" --device host --db "$work/search.db" --out "$work/plan" --candidates 2 "$@" \
  > "$work/first.txt"
cat "$work/first.txt"
"$fusetune" run "$work/plan" --inputs "$model_dir/test_data_set_0"
measured=$(sed -n 's/^candidates measured  *//p' "$work/first.txt")
[ "${measured:-0}" -gt 0 ] || { echo "FAIL: the first tune measured nothing"; exit 1; }
"$fusetune" tune "$model_dir/model.onnx" --device host --db "$work/search.db" --out "$work/plan2" --candidates 2 "$@" \
  > "$work/second.txt"
cat "$work/second.txt"
again=$(sed -n 's/^candidates measured  *//p' "$work/second.txt")
[ "$again" = "0" ] || { echo "FAIL: the second tune measured $again candidates (expected 0)"; exit 1; }
"$fusetune" run "$work/plan2" --inputs "$model_dir/test_data_set_0"
echo "PASS: tuned, verified, and re-tuned from the database with 0 measurements"
