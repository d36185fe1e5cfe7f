#!/usr/bin/env bash
# The planner's goals (issue 3) on the full-size models: modeled DRAM traffic of the plan against
# the unfused figure (goal <= 0.6 on BERT-base, ViT, MobileNetV2, EfficientNet-B0), kernel launches
# per BERT layer (goal <= 6), and planning time for BERT-base (goal <= 5 s on 2 cores).
#   bench/plan_goals.sh DIR_OF_EXPORTED_MODELS [DEVICE]
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:?usage: bench/plan_goals.sh DIR_OF_EXPORTED_MODELS [DEVICE]}
device=${2:-h100}
[ -x build/fusetune ] || scripts/setup.sh
printf "%-16s %8s %9s %12s %12s %8s %10s %9s\n" model groups launches planned_MB unfused_MB ratio model_us plan_s
for m in "$dir"/*/; do
  name=$(basename "$m")
  build/fusetune plan "$m/model.onnx" --device "$device" --json > /tmp/fusetune_plan_$$.json
  python3 - "$name" /tmp/fusetune_plan_$$.json <<'PY'
import json, sys
name, path = sys.argv[1], sys.argv[2]
j = json.load(open(path))
ratio = j["dram_bytes_planned"] / max(1, j["dram_bytes_unfused"])
print(f"{name:16s} {j['group_count']:8d} {j['launches']:9d} {j['dram_bytes_planned']/1e6:12.1f} "
      f"{j['dram_bytes_unfused']/1e6:12.1f} {ratio:8.2f} {j['modeled_us']:10.1f} {j['planning_seconds']:9.2f}")
if name == "bert":
    layers = sum(1 for g in j["groups"] for n in g["nodes"] if n.endswith("/attn/Softmax"))
    launches = {g["launch"] for g in j["groups"] if any(n.startswith("/layers.") for n in g["nodes"])}
    print(f"{'':16s} BERT: {layers} layers, {len(launches)} launches inside layers = {len(launches)/max(1,layers):.1f} per layer")
PY
done
rm -f /tmp/fusetune_plan_$$.json
