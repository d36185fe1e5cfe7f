#!/usr/bin/env bash
# Counted against modeled memory traffic and arithmetic: every model in DIR (each a folder with
# model.onnx, as tests/data/models or scripts/export_models.py --out DIR lay them out) compiled for
# DEVICE and run once on the host's SIMT executor (`fusetune profile --json`, random inputs, seed
# 1). Prints per model the plan's counted unique bytes (a lower bound on DRAM traffic: what the
# kernels touched) against the traffic model's DRAM bytes, and the counted floating-point
# operations (transcendental calls included) against the cost model's, and the bytes of the 32-byte
# sectors its kernels' global requests touch (counted: the L2 traffic where L1 keeps nothing, an
# upper bound) against the cost model's L2 traffic; then per kind of group (its anchors: MatMul,
# Conv, LayerNormalization+MatMul, ...; packed launches apart) the sums over all models and the
# model's error (modeled / counted - 1). Counted and modeled figures stay in separate columns.
# Then the speed of light (`profile --sol`, planner/speed_of_light.h): per model
# the sum of its kernels' speed of light for the counted work on DEVICE against the cost model's
# time, over all kernels and over the memory-bound ones alone (where the model's time should come
# within 1.3x of it; also less the 2 µs the model charges a launch), and their mean occupancy.
# Models are profiled in name order; each prints a progress line.
#   bench/profile_models.sh DIR [DEVICE]
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:?usage: bench/profile_models.sh DIR [DEVICE]}
device=${2:-h100}
[ -x build/fusetune ] || scripts/setup.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for m in "$dir"/*/; do
  name=$(basename "$m")
  if [ ! -f "$m/model.onnx" ]; then
    echo "skipped $name: no model.onnx" >&2
    continue
  fi
  shape=()
  # The small BERT is exported with a symbolic sequence length; the full-size one at 128.
  if [ "$name" = bert ] && [ "$(realpath "$dir")" = "$(realpath tests/data/models)" ]; then
    shape=(--shape input_ids=1x16 --shape attention_mask=1x16)
  fi
  start=$(date +%s)
  build/fusetune compile "$m/model.onnx" --device "$device" --out "$work/$name" "${shape[@]}" >/dev/null
  build/fusetune profile "$work/$name" --sol --json > "$work/$name.json"
  echo "profiled $name in $(( $(date +%s) - start )) s" >&2
done
python3 - "$work" <<'PY'
import json, os, re, sys
from collections import defaultdict
work = sys.argv[1]
LAUNCH_US = 2.0  # planner::TilingOptions::launch_overhead_us, charged once a launch
kinds = defaultdict(lambda: [0, 0, 0, 0, 0])  # counted bytes, modeled bytes, kernels, counted flops, modeled flops
print(f"{'model':16} {'kernels':>7} {'counted MB':>11} {'modeled MB':>11} {'modeled/counted':>15} "
      f"{'counted GFLOP':>13} {'modeled GFLOP':>13} {'modeled/counted':>15} "
      f"{'requested MB':>12} {'mod L2 MB':>10} {'mod L2/requested':>16}")
for f in sorted(os.listdir(work)):
    if not f.endswith(".json"):
        continue
    p = json.load(open(os.path.join(work, f)))
    t = p["total"]
    c, m = t["counted_unique_bytes"], t["modeled_dram_bytes"]
    cf, mf = t["counted_flops"] + t["counted_special_ops"], t["modeled_flops"]
    rq, ml2 = t["counted_requested_bytes"], t["modeled_l2_bytes"]
    print(f"{f[:-5]:16} {len(p['kernels']):7d} {c / 1e6:11.4f} {m / 1e6:11.4f} {m / c if c else 0:15.2f} "
          f"{cf / 1e9:13.4f} {mf / 1e9:13.4f} {mf / cf if cf else 0:15.2f} "
          f"{rq / 1e6:12.4f} {ml2 / 1e6:10.4f} {ml2 / rq if rq else 0:16.2f}")
    for k in p["kernels"]:
        groups = k["groups"].split(" | ")
        kind = re.sub(r" \(\+\d+ fused\)", "", groups[0])
        if kind.startswith("light("):
            kind = "element-wise"
        if len(groups) > 1:
            kind = "packed launches"
        e = kinds[kind]
        e[0] += k["counted"]["unique_bytes"]
        e[1] += k["modeled"]["dram_bytes"]
        e[2] += 1
        e[3] += k["counted"]["flops"] + k["counted"]["special_ops"]
        e[4] += k["modeled"]["flops"]
print()
print(f"speed of light (SOL) for the counted work against the modeled time, all kernels and memory-bound ones "
      f"(and those less the {LAUNCH_US:g} us the model charges a launch):")
print(f"{'model':16} {'SOL us':>10} {'modeled us':>11} {'mod/SOL':>8} {'mem-bound':>9} {'SOL us':>10} {'modeled us':>11} "
      f"{'mod/SOL':>8} {'less launch':>11} {'mean occ':>8}")
for f in sorted(os.listdir(work)):
    if not f.endswith(".json"):
        continue
    ks = json.load(open(os.path.join(work, f)))["kernels"]
    sol = sum(k["sol"]["sol_us"] for k in ks)
    mod = sum(k["sol"]["modeled_us"] for k in ks)
    mem = [k for k in ks if k["sol"]["bound"] == "memory"]
    msol = sum(k["sol"]["sol_us"] for k in mem)
    mmod = sum(k["sol"]["modeled_us"] for k in mem)
    occ = sum(k["sol"]["occupancy"] for k in ks) / len(ks) if ks else 0
    bare = mmod - LAUNCH_US * len(mem)
    print(f"{f[:-5]:16} {sol:10.3f} {mod:11.3f} {mod / sol if sol else 0:8.2f} {len(mem):9d} {msol:10.3f} {mmod:11.3f} "
          f"{mmod / msol if msol else 0:8.2f} {bare / msol if msol else 0:11.2f} {occ:8.2f}")
print()
print(f"{'kind of group':36} {'kernels':>7} {'counted MB':>11} {'modeled MB':>11} {'bytes error':>11} "
      f"{'counted GFLOP':>13} {'modeled GFLOP':>13} {'flops error':>11}")
for kind, (c, m, n, cf, mf) in sorted(kinds.items(), key=lambda kv: -kv[1][0]):
    err = f"{(m / c - 1) * 100:+.0f}%" if c else "n/a"
    ferr = f"{(mf / cf - 1) * 100:+.0f}%" if cf else "n/a"
    print(f"{kind[:36]:36} {n:7d} {c / 1e6:11.4f} {m / 1e6:11.4f} {err:>11} {cf / 1e9:13.4f} {mf / 1e9:13.4f} {ferr:>11}")
PY
