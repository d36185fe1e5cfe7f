#!/usr/bin/env python3
"""The speed-of-light table of plans profiled by a build without `fusetune profile --sol`.

    python3 bench/sol_from_counts.py PLAN_DIR...

Each PLAN_DIR is a bundle (`fusetune compile`) with PLAN_DIR.json beside it, the output of that
build's `fusetune profile PLAN_DIR --json`. Computes what `profile --sol` computes
(planner/speed_of_light.h) from the counted figures, at the H100's figures of
planner/devices/h100.json: per kernel the counted unique bytes over the DRAM bandwidth against the
counted operations over its pipe's peak (mma.sync where its CUDA text multiplies on tensor cores,
else FP32) or its transcendental calls over the special function units' rate, the larger being
its speed of light; the modeled time is the manifest's (groups packed into one launch pay one
launch overhead). Prints the rows bench/profile_models.sh prints for a current build, as a
Markdown table: used for docs/performance.md's "before issue 27" rows (commit e2cd44c).
"""

import json
import os
import sys

DEVICE = json.load(open(os.path.join(os.path.dirname(__file__), "..", "planner", "devices", "h100.json")))
BW = DEVICE["dram_bandwidth_gbps"] * 1e3          # bytes per µs
FP32 = DEVICE["fp32_tflops"] * 1e6                 # operations per µs
MMA = DEVICE["mma_sync_fp16_tflops"] * 1e6
SPECIAL = DEVICE["special_ops_per_clock_per_sm"] * DEVICE["sms"] * DEVICE["clock_mhz"]
LAUNCH_US = 2.0  # planner::TilingOptions::launch_overhead_us

print("| model | kernels | counted MB | counted GFLOP | SOL µs | modeled µs | modeled / SOL | memory-bound kernels | "
      "their SOL µs | their modeled µs | modeled / SOL | the same less 2 µs of launch each |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for plan in sys.argv[1:]:
    plan = plan.rstrip("/")
    profile = json.load(open(plan + ".json"))
    manifest = json.load(open(os.path.join(plan, "manifest.json")))
    cuda = open(os.path.join(plan, "kernels.cu")).read()
    modeled = {l["kernel"]: sum(g.get("modeled_us", 0) for g in l["groups"]) - LAUNCH_US * (len(l["groups"]) - 1)
               for l in manifest["launches"]}
    rows = []
    for k in profile["kernels"]:
        c = k["counted"]
        at = cuda.find(") " + k["kernel"] + "(")
        text = cuda[at:cuda.find('extern "C"', at)]
        tensor = "mma_m16n8k16" in text or "mma.sync" in text
        memory = c["unique_bytes"] / BW
        compute = max(c["flops"] / (MMA if tensor else FP32), c["special_ops"] / SPECIAL)
        rows.append((max(memory, compute), memory >= compute, modeled[k["kernel"]], c["unique_bytes"],
                     c["flops"] + c["special_ops"]))
    sol, mod = sum(r[0] for r in rows), sum(r[2] for r in rows)
    mem = [r for r in rows if r[1]]
    msol, mmod = sum(r[0] for r in mem), sum(r[2] for r in mem)
    print(f"| {os.path.basename(plan)} | {len(rows)} | {sum(r[3] for r in rows) / 1e6:.2f} | "
          f"{sum(r[4] for r in rows) / 1e9:.3f} | {sol:.1f} | {mod:.1f} | {mod / sol:.2f} | {len(mem)} | {msol:.1f} | "
          f"{mmod:.1f} | {mmod / msol:.2f} | {(mmod - LAUNCH_US * len(mem)) / msol:.2f} |")
