#!/usr/bin/env python3
"""The GPU's counters beside the host executor's counts, per generated kernel (bench/gpu_check.sh).

    gpu_counters.py OUT_DIR MODEL...

Reads OUT_DIR/ncu.MODEL.csv (Nsight Compute, --csv --print-units base, one row per kernel launch
and metric) and OUT_DIR/host.MODEL.json (fusetune profile --json: the SIMT executor's counts of
the same plan's kernels and the planner's modeled DRAM bytes). Prints, per model and in total, the
ratio measured-on-the-GPU / counted-on-the-host for global load and store requests and sectors,
shared-memory instructions and wavefronts, and DRAM bytes against the host's unique sectors (a lower
bound) and against the cost model's bytes (modeled). Kernels that are not the plan's own (library
calls) are counted apart. Counted, measured and modeled figures are labelled and never summed
together.
"""
import csv
import json
import sys
from collections import defaultdict

PAIRS = [  # (label, ncu metric, host counter)
    ("global load requests", "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum", "global_load_requests"),
    ("global load sectors", "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum", "global_load_sectors"),
    ("global store requests", "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum", "global_store_requests"),
    ("global store sectors", "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum", "global_store_sectors"),
    ("shared load requests", "smsp__inst_executed_op_shared_ld.sum", "shared_load_requests"),
    ("shared store requests", "smsp__inst_executed_op_shared_st.sum", "shared_store_requests"),
    ("shared load wavefronts", "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum", "shared_load_wavefronts"),
    ("shared store wavefronts", "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum", "shared_store_wavefronts"),
]


def number(text):
    text = text.replace(",", "").strip()
    try:
        return float(text)
    except ValueError:
        return None


def read_ncu(path):
    """{kernel name: {metric: value summed over launches}}, {kernel name: launches}."""
    with open(path, newline="") as f:
        lines = f.read().splitlines()
    start = next((i for i, l in enumerate(lines) if l.startswith('"ID"')), None)
    if start is None:
        return {}, {}
    values = defaultdict(lambda: defaultdict(float))
    launches = defaultdict(set)
    for row in csv.DictReader(lines[start:]):
        name = row["Kernel Name"].split("(")[0].strip()
        v = number(row["Metric Value"])
        if v is None:
            continue
        values[name][row["Metric Name"]] += v
        launches[name].add(row["ID"])
    return values, {k: len(v) for k, v in launches.items()}


def ratio(a, b):
    return "-" if b == 0 else f"{a / b:.2f}"


def main():
    out, models = sys.argv[1], sys.argv[2:]
    totals = defaultdict(float)
    print("| model | kernels (GPU / host) | other kernels on the GPU | " +
          " | ".join(p[0] for p in PAIRS) + " | DRAM read+write / host unique bytes | DRAM / modeled bytes |")
    print("|" + "---|" * (5 + len(PAIRS)))
    worst = []
    for m in models:
        try:
            gpu, launches = read_ncu(f"{out}/ncu.{m}.csv")
            host = json.load(open(f"{out}/host.{m}.json"))
        except (OSError, ValueError) as e:
            print(f"| {m} | not compared: {e} |")
            continue
        kernels = {k["kernel"]: k for k in host["kernels"]}
        mine = [k for k in gpu if k in kernels]
        others = [k for k in gpu if k not in kernels]
        sums = defaultdict(float)
        for k in mine:
            n = launches[k]
            c = kernels[k]["counted"]
            for label, metric, counter in PAIRS:
                g = gpu[k].get(metric, 0) / n
                sums["gpu " + label] += g
                sums["host " + label] += c[counter]
                if c[counter] > 0 and label.endswith("sectors"):
                    worst.append((g / c[counter], m, k, label))
            dram = (gpu[k].get("dram__bytes_read.sum", 0) + gpu[k].get("dram__bytes_write.sum", 0)) / n
            sums["gpu dram"] += dram
            sums["host unique"] += c["unique_bytes"]
            sums["modeled dram"] += kernels[k]["modeled"]["dram_bytes"]
        for key, v in sums.items():
            totals[key] += v
        cells = [ratio(sums["gpu " + p[0]], sums["host " + p[0]]) for p in PAIRS]
        print(f"| {m} | {len(mine)} / {len(kernels)} | {len(others)} | " + " | ".join(cells) +
              f" | {ratio(sums['gpu dram'], sums['host unique'])} | {ratio(sums['gpu dram'], sums['modeled dram'])} |")
    cells = [ratio(totals["gpu " + p[0]], totals["host " + p[0]]) for p in PAIRS]
    print("| all | | | " + " | ".join(cells) +
          f" | {ratio(totals['gpu dram'], totals['host unique'])} | {ratio(totals['gpu dram'], totals['modeled dram'])} |")
    print("\nratios: measured on the GPU (Nsight Compute) / counted on the host (SIMT executor), per launch;"
          " the last column is measured / modeled (the cost model)")
    worst.sort()
    print("\nkernels furthest from the host's sector counts (GPU / host):")
    for r, m, k, label in worst[:5] + worst[-5:]:
        print(f"  {m} {k} {label}: {r:.2f}")


if __name__ == "__main__":
    main()
