#!/usr/bin/env bash
# The cost of running the shipped CUDA text on the SIMT executor, against the retired host form
# (each stretch between barriers as a loop over threads) that a fusetune binary built before the
# executor still has. Per kernel: both binaries tune the same model on the host (fresh databases,
# the same candidates), and the measured medians of each (signature, config) are compared:
# executor without checks (how host workers time) against the loop form. Per model: `fusetune run`
# of the plan bundle, wall time, with the executor's checks and counters on, against the old run.
#   bench/simt_cost.sh OLD_FUSETUNE [MODEL...]      (models: names in tests/data/models)
set -euo pipefail
cd "$(dirname "$0")/.."
old=${1:?usage: bench/simt_cost.sh OLD_FUSETUNE [MODEL...]}
shift
models=("$@")
[ ${#models[@]} -gt 0 ] || models=(cnn_small bert nerf_mlp)
[ -x build/fusetune ] || scripts/setup.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for model in "${models[@]}"; do
  dir=tests/data/models/$model
  shape=()
  [ "$model" = bert ] && shape=(--shape input_ids=1x16 --shape attention_mask=1x16)
  for side in old new; do
    bin=build/fusetune
    [ $side = old ] && bin=$old
    FUSETUNE_CACHE_DIR="$work/cache-$side" "$bin" tune "$dir/model.onnx" --device host --db "$work/$model-$side.db" \
      --out "$work/$model-$side-plan" --candidates 2 "${shape[@]}" >/dev/null
    "$bin" db export "$work/$model-$side.jsonl" --db "$work/$model-$side.db" >/dev/null
    # One warm run (the kernels are built), then the timed one.
    FUSETUNE_CACHE_DIR="$work/cache-$side" "$bin" run "$work/$model-$side-plan" --inputs "$dir/test_data_set_0" >/dev/null
    TIMEFORMAT=%R
    { time FUSETUNE_CACHE_DIR="$work/cache-$side" "$bin" run "$work/$model-$side-plan" --inputs "$dir/test_data_set_0" \
        >/dev/null; } 2> "$work/$model-$side.run_s"
  done
  python3 - "$model" "$work/$model-old.jsonl" "$work/$model-new.jsonl" "$(cat "$work/$model-old.run_s")" \
    "$(cat "$work/$model-new.run_s")" <<'PY'
import json, statistics, sys
model, old_path, new_path, old_run, new_run = sys.argv[1:6]
def medians(path):
    out = {}
    for line in open(path):
        r = json.loads(line)
        if r.get("type") == "measurement" and r.get("status") == "ok":
            out[(r["signature"], r["config"])] = r["median_us"]
    return out
old, new = medians(old_path), medians(new_path)
common = sorted(set(old) & set(new))
ratios = [new[k] / old[k] for k in common if old[k] > 0]
print(f"{model}: {len(common)} kernels measured by both; executor (no checks) / loop form, per kernel: "
      f"median {statistics.median(ratios):.2f}x, min {min(ratios):.2f}x, max {max(ratios):.2f}x; "
      f"`fusetune run` of the tuned plan: loop form {float(old_run):.2f} s, executor with checks {float(new_run):.2f} s "
      f"({float(new_run) / float(old_run):.1f}x)")
PY
done
