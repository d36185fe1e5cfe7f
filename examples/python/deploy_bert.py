#!/usr/bin/env python3
"""A tuned BERT deployed from Python and checked against onnxruntime.

    python examples/python/deploy_bert.py [--model tests/data/models/bert/model.onnx]
        [--work DIR] [--tune-device auto|host|NAME] [--device auto|host|cuda|cuda:N]
        [--batch 1] [--sequence 16] [--seed N] [--repeat 10] [--candidates N] [--trials N]

1. `fusetune.tune` tunes the model for `--tune-device` ("auto": this machine's first GPU, else a
   dry run for the H100: candidates compiled and verified, chosen by the cost model) at the given
   batch and sequence length, printing its progress, and writes the plan bundle to WORK/plan.
2. `fusetune.load_plan` loads the bundle on `--device` (the deployment library alone: no compiler).
3. Token ids are drawn with a seeded generator (the seed is printed; `--seed` replays it), with an
   attention mask that pads the last quarter of each sequence.
4. onnxruntime (CPU, its graph optimizations off) runs the same ONNX file on the same inputs: the
   runtime most ONNX users deploy with is the oracle.
5. Every output is compared: same dtype and shape, and within 1e-3 (float32; 2e-2 for float16) of
   the largest magnitude of onnxruntime's output. A table prints each output's largest difference,
   and both runtimes' median wall time per run over `--repeat` runs (measured on this machine; on
   the host fusetune runs its kernels on the SIMT executor, which checks and emulates a GPU and is
   not meant to be fast).
Exit status: 0 when every output matches, 1 when one does not, 2 on bad arguments.

Needs the fusetune package (`pip install .`, or PYTHONPATH at a build's python/ folder with
FUSETUNE_BINARY naming its `fusetune`), numpy, onnx and onnxruntime (scripts/setup.sh puts
onnxruntime in third_party/ort-venv, which sees Debian's packages).
"""

import argparse
import os
import pathlib
import statistics
import sys
import time

import numpy as np
import onnx
import onnxruntime

import fusetune

ROOT = pathlib.Path(__file__).resolve().parents[2]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=str(ROOT / "tests/data/models/bert/model.onnx"))
    parser.add_argument("--work", default="deploy-bert")
    parser.add_argument("--tune-device", default="auto")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--sequence", type=int, default=16)
    parser.add_argument("--seed", type=int, default=int.from_bytes(os.urandom(4), "little"))
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--candidates", type=int, default=None)
    parser.add_argument("--trials", type=int, default=None)
    args = parser.parse_args()
    if args.batch < 1 or args.sequence < 2 or args.repeat < 1:
        parser.error("--batch and --repeat must be at least 1, --sequence at least 2")
    print(f"seed {args.seed} (replay with --seed {args.seed})")

    work = pathlib.Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    shape = (args.batch, args.sequence)
    shapes = {"input_ids": shape, "attention_mask": shape}

    # 1. Tune, with progress.
    last = {}

    def progress(p: fusetune.Progress):
        if last.get(p.label) != (p.done, p.total):
            last[p.label] = (p.done, p.total)
            print(f"  tune: {p.label} {p.done}/{p.total}", flush=True)

    print(f"tuning {args.model} for {args.tune_device} at {shape} into {work / 'plan'}")
    table = fusetune.tune(args.model, work / "plan", device=args.tune_device, db=work / "search.db", shapes=shapes,
                          candidates=args.candidates, trials=args.trials, progress=progress)
    print(table.rstrip())

    # 2. Deploy.
    plan = fusetune.load_plan(work / "plan", device=args.device)
    print(f"loaded on {plan.backend}{' (' + plan.no_gpu_reason + ')' if plan.no_gpu_reason else ''}: "
          f"{plan.launches} launches, inputs {plan.input_names}, outputs {plan.output_names}")

    # 3. Inputs.
    rng = np.random.default_rng(args.seed)
    session = onnxruntime.InferenceSession(args.model, _ort_options(), providers=["CPUExecutionProvider"])
    vocabulary = _vocabulary(args.model)
    ids = rng.integers(0, vocabulary, size=shape, dtype=np.int64)
    mask = np.ones(shape, dtype=np.int64)
    mask[:, args.sequence - args.sequence // 4:] = 0
    feeds = {"input_ids": ids, "attention_mask": mask}
    unknown = set(plan.input_names) - set(feeds)
    if unknown:
        print(f"error: the model's inputs {sorted(unknown)} are not a BERT's input_ids and attention_mask", file=sys.stderr)
        return 2

    # 4. Both runtimes.
    ours = plan.run({n: feeds[n] for n in plan.input_names})
    oracle = session.run(plan.output_names, {n: feeds[n] for n in plan.input_names})

    # 5. Compare and time.
    ok = True
    print(f"\n{'output':<24} {'dtype':<8} {'shape':<16} {'max |diff|':>12} {'tolerance':>12}  result")
    for name, got, want in zip(plan.output_names, ours, oracle):
        tolerance = (2e-2 if want.dtype == np.float16 else 1e-3) * max(1.0, float(np.abs(want.astype(np.float64)).max()))
        same_form = got.dtype == want.dtype and got.shape == want.shape
        diff = float(np.abs(got.astype(np.float64) - want.astype(np.float64)).max()) if same_form and got.size else 0.0
        good = same_form and diff <= tolerance
        ok &= good
        print(f"{name:<24} {str(got.dtype):<8} {str(tuple(got.shape)):<16} {diff:>12.3g} {tolerance:>12.3g}  "
              f"{'match' if good else 'MISMATCH' + ('' if same_form else f' ({want.dtype} {want.shape} expected)')}")

    ours_ms = _median_ms(lambda: plan.run({n: feeds[n] for n in plan.input_names}), args.repeat)
    oracle_ms = _median_ms(lambda: session.run(plan.output_names, {n: feeds[n] for n in plan.input_names}), args.repeat)
    print(f"\nmedian wall time per run, measured over {args.repeat} runs on this machine:")
    print(f"  fusetune on {plan.backend}: {ours_ms:.3f} ms")
    print(f"  onnxruntime {onnxruntime.__version__} (CPU, optimizations off): {oracle_ms:.3f} ms")
    print("PASS: every output matches onnxruntime" if ok else "FAIL: an output differs from onnxruntime's")
    return 0 if ok else 1


def _ort_options() -> onnxruntime.SessionOptions:
    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    return options


def _vocabulary(model: str) -> int:
    """The rows of the word embedding table (the Gather that input_ids index): token ids are drawn
    below it."""
    graph = onnx.load(model, load_external_data=False).graph
    tables = {i.name: i.dims for i in graph.initializer}
    for node in graph.node:
        if node.op_type == "Gather" and len(node.input) == 2 and node.input[1] == "input_ids" and node.input[0] in tables:
            return int(tables[node.input[0]][0])
    raise SystemExit(f"{model}: no Gather of an embedding table by input_ids: not a BERT this example knows")


def _median_ms(run, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        times.append((time.perf_counter() - start) * 1000.0)
    return statistics.median(times)


if __name__ == "__main__":
    sys.exit(main())
