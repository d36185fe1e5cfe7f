#!/usr/bin/env python3
"""Where a tuned plan's time goes: its launches grouped by the fusion group's leading op and form.

    bench/plan_breakdown.py PLAN_DIR SEARCH_DB [--top N]

For every launch of the plan bundle (manifest.json) it looks up, in the search database the tune
wrote, the measured median of the group's chosen configuration on that device (the worker's
timing: each kernel alone, the L2 flushed before each run), and prints a table by (leading op,
generated or library): launches, measured microseconds, modeled microseconds (the cost model's,
from the manifest) and their ratio, then the N slowest distinct groups, then every group of the
plan for which the tune measured both a library call and generated kernels: the best of each and
the generated kernel's speed as a share of the library's (issue 27 asks 70% of cuBLASLt). Measured
and modeled stay in separate columns. A group the database has no measurement for is counted as
"unmeasured".
"""
import argparse
import collections
import json
import os
import sqlite3
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("plan")
    ap.add_argument("db")
    ap.add_argument("--top", type=int, default=8)
    a = ap.parse_args()
    with open(os.path.join(a.plan, "manifest.json")) as f:
        manifest = json.load(f)
    db = sqlite3.connect(f"file:{a.db}?mode=ro", uri=True)
    by_kind = collections.defaultdict(lambda: [0, 0.0, 0.0])
    by_group = collections.defaultdict(lambda: [0, 0.0, 0.0])
    unmeasured = 0
    for launch in manifest["launches"]:
        for g in launch["groups"]:
            row = db.execute("SELECT min(median_us) FROM measurements WHERE signature = ? AND config = ? AND status = 'ok'",
                             (g["signature"], g["config"])).fetchone()
            if row[0] is None:
                unmeasured += 1
                continue
            form = "library" if "library=" in g["config"] else "generated"
            for key, table in (((g["pattern"].split(" ")[0], form), by_kind), ((g["pattern"], g["config"]), by_group)):
                table[key][0] += 1
                table[key][1] += row[0]
                table[key][2] += g["modeled_us"]
    total = sum(v[1] for v in by_kind.values())
    print(f"{a.plan}: {len(manifest['launches'])} launches, {total:.1f} us measured (sum of kernels, each alone)"
          + (f", {unmeasured} groups unmeasured" if unmeasured else ""))
    print("\n| leading op | form | launches | measured us | share | modeled us | measured / modeled |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for (op, form), (n, measured, modeled) in sorted(by_kind.items(), key=lambda kv: -kv[1][1]):
        print(f"| {op} | {form} | {n} | {measured:.1f} | {100 * measured / total:.0f}% | {modeled:.1f} | {measured / modeled:.1f} |")
    print(f"\n| slowest groups (pattern, configuration) | launches | measured us each | modeled us each |")
    print("|---|---:|---:|---:|")
    for (pattern, config), (n, measured, modeled) in sorted(by_group.items(), key=lambda kv: -kv[1][1])[:a.top]:
        print(f"| {pattern}, `{config}` | {n} | {measured / n:.1f} | {modeled / n:.1f} |")
    library_against_generated(db, manifest)
    return 0


def library_against_generated(db, manifest):
    """The best measured generated kernel against the best measured library call, per group."""
    patterns = {}
    for launch in manifest["launches"]:
        for g in launch["groups"]:
            patterns.setdefault(g["signature"], g["pattern"])
    rows = []
    for signature, pattern in patterns.items():
        best = {}
        for config, us in db.execute("SELECT config, min(median_us) FROM measurements WHERE signature = ? AND status = 'ok' "
                                     "AND repeats > 0 GROUP BY config", (signature,)):
            form = "library" if config.startswith("library=") else "generated"
            if form not in best or us < best[form][1]:
                best[form] = (config, us)
        if len(best) == 2:
            rows.append((pattern, signature, best["generated"], best["library"]))
    if not rows:
        return
    shares = [lib[1] / gen[1] for _, _, gen, lib in rows]
    print(f"\n{len(rows)} groups measured both ways: the generated kernel at {100 * min(shares):.0f}% to "
          f"{100 * max(shares):.0f}% of the library's speed (library us / generated us)")
    print("\n| group (pattern, signature) | best generated | us | best library | us | generated's share of the library's speed |")
    print("|---|---|---:|---|---:|---:|")
    for pattern, signature, gen, lib in sorted(rows, key=lambda r: r[3][1] / r[2][1]):
        print(f"| {pattern}, {signature[3:11]} | `{gen[0]}` | {gen[1]:.1f} | `{lib[0]}` | {lib[1]:.1f} | {100 * lib[1] / gen[1]:.0f}% |")


if __name__ == "__main__":
    sys.exit(main())
