#!/usr/bin/env python3
"""fusetune's plans against PyTorch, model by model, on one GPU (bench/gpu_perf.sh runs this).

    gpu_perf.py [--rehearse] OUT_DIR        environment: BIN_DIR, MODELS, BUDGET_S

What it measures, per model (batch 1, static shapes):
  * fusetune: the model is exported to ONNX with torch's outputs as test data, compiled by
    `fusetune compile --device PLAN_DEVICE` (h100, or h200 on an H200; its wall time is the "compile s" column) and run by
    `fusetune run PLAN --backend cuda --repeat 100`, which checks the plan's outputs against torch's
    and times 100 replays of the plan's CUDA graph with device events (L2 not flushed); the median
    is the figure compared. Then `fusetune tune --device auto --time TUNE_S` tunes it on the GPU (a
    coordinator and a local worker measuring candidates there, cuBLASLt's among them; at most
    TUNE_CAP_S of wall time) and the tuned plan is run and timed the same way: where it finished
    with matching outputs, the tuned plan is fusetune's figure in the speed-ups.
  * PyTorch, on the same inputs in the same process that built the model: eager (under
    torch.inference_mode), eager captured once into a CUDA graph and replayed, torch.compile
    (default mode) and torch.compile(mode="max-autotune"). Each gets 3 warm-up calls (after the
    compiling first call, whose seconds are recorded) and 100 timed calls, each call bracketed by
    its own pair of CUDA events and synchronised; median, min and max are kept. Every variant's
    outputs are compared with eager's (max abs difference, relative L2 norm).
  * two ceilings of the device: device-to-device copy bandwidth (a 1 GiB buffer copied 20 times,
    bytes read + written) and the float16 matmul rate at 4096^3 (torch.matmul).
Nothing is modeled: every figure in the table is measured. The model is exported from, and its
reference outputs computed on, the device it is timed on (the GPU; for float16 that also spares a
slow or missing CPU float16 path), so the test data are eager's own outputs there.

How: this process (the parent) runs one child process (this file with --child) per model, in
priority order, inside a wall-time budget (BUDGET_S from the start). The child builds the model
with the project's seeded builders (scripts/export_models.py, scripts/export_hf_models.py), exports
it, runs fusetune's steps (compile, run, tune, run) as its own subprocesses, then times PyTorch. It records each finished
stage in OUT_DIR/results/NAME.state.json at once, so a child that crashes, hangs or is killed at
the deadline loses only the stage it was in; a later invocation picks the model up at that stage.
After each model the parent writes its row to OUT_DIR/results.json and re-renders
OUT_DIR/performance.md; models with a final row (measured, failed or skipped for a reason other
than the budget) are not run again. Logs: OUT_DIR/logs/NAME.{child,compile,run,tune,tuned-run}.log.

--rehearse runs the same steps without a GPU on tiny float32 models: fusetune's plan on the host
backend (--repeat 3), its tune on the host executor with two candidates a group, PyTorch on the CPU timed by time.perf_counter (5 calls), no CUDA graph; the
torch.compile columns are skipped where torch is older than 2.

Exit status: 1 when a model in results.json errored (export, fusetune compile or run failure,
outputs that differ), else 0 (models skipped for the budget included).
"""

import argparse
import datetime
import glob
import inspect
import json
import math
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))  # export_models, export_hf_models (children only)

# The order a lease takes them in (a lease has measured two or three models): BERT float16 (the
# headline), then the LLaMA-shaped decoder, which no lease has reached yet (its decode step, then
# its prefill), contractions (independent float16 products at those models' shapes and issue 27's
# 2,048 x 1,024 x 4,096: its tune's breakdown is the generated forms against cuBLASLt on the same
# shapes), memory_bound (large tensors: its kernels' effective bandwidth against the copy) and
# ResNet-50 (whose tune measures cuDNN's convolutions), both measured on the second H200 lease, then
# the rest; BERT float32 last (measured on the H100 already).
GPU_MODELS = ["bert_fp16", "llama_decode_fp16", "llama_fp16", "contractions_fp16", "memory_bound", "resnet50", "gpt2_fp16",
              "bert_s512_fp16",
              "vit", "mobilenet_v2",
              "efficientnet_b0", "swin_t", "convnext_t", "bert"]
REHEARSE_MODELS = ["bert", "resnet_small", "memory_bound", "contractions", "mobilenet_v2", "vit"]
HF_MODELS = {"gpt2", "llama", "llama_decode"}  # built by scripts/export_hf_models.py (transformers)
# The LLaMA-shaped decoder's full-size forms: a prefill of 512 tokens, and one decode step whose
# cache holds 1,023 earlier positions (1,024 after the step). GPT-2's prefill and the rehearsal's
# small models keep export_hf_models' lengths (128 tokens, a cache of 127).
LLAMA_PREFILL = 512
LLAMA_DECODE_PAST = 1023

WARMUP_CALLS = 3
MAX_AUTOTUNE_MIN_S = 150  # max-autotune only starts with at least this much budget left
START_MIN_S = 30          # a model is not started with less budget than this left
KILL_GRACE_S = 10         # a child past the deadline by this much is killed (with its process group)
VARIANTS = ["eager", "eager+graph", "compile", "max-autotune"]
TIMING_RE = re.compile(r"timed (\d+) runs: median ([0-9.]+) us, min ([0-9.]+) us, max ([0-9.]+) us")


class Config:
    """What a run needs that differs between the GPU and the rehearsal."""

    def __init__(self, rehearse, out_dir, bin_dir):
        self.rehearse = rehearse
        self.out_dir = os.path.abspath(out_dir)
        self.bin_dir = os.path.abspath(bin_dir)
        self.fusetune = os.path.join(self.bin_dir, "fusetune")
        self.size = "small" if rehearse else "full"
        self.backend = "host" if rehearse else "cuda"
        self.fusetune_repeat = 3 if rehearse else 100
        self.torch_runs = 5 if rehearse else 100
        # fusetune tune: its search's time bound (--time), and the most wall time the stage may take.
        self.tune_search_s = float(os.environ.get("TUNE_S", 30))
        self.tune_cap_s = float(os.environ.get("TUNE_CAP_S", 150))
        # The models tuned (a comma list; unset: every model).
        tune_models = os.environ.get("TUNE_MODELS")
        self.tune_models = None if tune_models is None else {n.strip() for n in tune_models.split(",") if n.strip()}
        # The tuning database is shared by the models (signatures they have in common are measured once).
        self.tune_db = self.path("tune.db")
        # A rehearsal's tune measures on the host executor: two candidates a group keep it short.
        self.tune_extra = ["--candidates", "2"] if rehearse else []
        self.autotune_min_s = float(os.environ.get("AUTOTUNE_MIN_S", MAX_AUTOTUNE_MIN_S))
        # The device description plans are compiled for (planner/devices/): PLAN_DEVICE, which the
        # parent sets from nvidia-smi's name when unset (an H200 plans as h200, anything else h100).
        self.plan_device = os.environ.get("PLAN_DEVICE", "h100")
        # The precision policy both sides run under: "model" (fusetune's default; PyTorch's defaults,
        # TF32 matmul off) or "tf32" (`fusetune ... --precision tf32` against PyTorch with
        # allow_tf32 on for matmul and cuDNN). The reference stays full float32 either way.
        self.precision = os.environ.get("PRECISION", "model")
        if self.precision not in ("model", "tf32"):
            raise SystemExit(f"PRECISION={self.precision!r}: model or tf32")
        # The vendor libraries fusetune's plans may call (`--libraries`): all, none, or a comma list
        # of cublasLt and cudnn (LIBRARIES=cublasLt where the GPU's cuDNN refuses the calls).
        self.libraries = os.environ.get("LIBRARIES", "all")

    def path(self, *parts):
        return os.path.join(self.out_dir, *parts)

    def child_args(self):
        return ["--out", self.out_dir, "--bin-dir", self.bin_dir] + (["--rehearse"] if self.rehearse else [])


# --------------------------------------------------------------------------------------------------
# Small helpers shared by the parent and the children
# --------------------------------------------------------------------------------------------------

def one_line(exc):
    """An exception as one line: its type and the first line of its message."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


def load_json(path, default):
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        return default


def save_json(path, value):
    """Writes atomically (a reader, or a kill mid-write, never sees half a file)."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(value, f, indent=1, sort_keys=True)
    os.replace(tmp, path)


def last_line(path):
    """The last non-empty line of a log, for a one-line reason."""
    try:
        with open(path, errors="replace") as f:
            lines = [l.strip() for l in f if l.strip()]
    except FileNotFoundError:
        return "(no log)"
    return lines[-1][:300] if lines else "(empty log)"


# --------------------------------------------------------------------------------------------------
# Child: one model
# --------------------------------------------------------------------------------------------------

class OutOfBudget(Exception):
    """The deadline comes before the current stage could finish."""


def build_model(name, cfg):
    """The seeded model and its inputs: dict(model, inputs, input_names, output_names, dtype).

    The project's own builders, seeded and re-drawn exactly as their export_one does; "_fp16"
    converts the model (and floating-point inputs) to float16 after that."""
    import torch
    half = name.endswith("_fp16")
    base = name[:-len("_fp16")] if half else name
    if base in HF_MODELS:
        spec = build_hf(base, cfg)
    else:
        import export_models as em
        torch.manual_seed(0)
        if base == "bert_s512":
            spec = build_bert_s512(em)
        elif base in em.BUILDERS:
            spec = em.BUILDERS[base](cfg.size)
        else:
            raise SystemExit(f"unknown model '{name}'")
        em.randomize_degenerate_params(spec["model"])
        em.calibrate_batchnorm(spec["model"], spec["inputs"])
    model = spec["model"].eval()
    inputs = tuple(spec["inputs"])
    if half:
        model = model.half()
        inputs = tuple(t.half() if t.is_floating_point() else t for t in inputs)
    return dict(model=model, inputs=inputs, input_names=spec["input_names"], output_names=spec["output_names"],
                dtype="float16" if half else "float32")


def build_bert_s512(em):
    """BERT-base at sequence 512: build_bert's model and inputs, only longer."""
    import torch
    seq, vocab = 512, 30522
    model = em.BertEncoder(layers=12, hidden=768, heads=12, ffn=3072, vocab=vocab, max_pos=512)
    gen = em.make_gen()
    input_ids = torch.randint(0, vocab, (1, seq), generator=gen, dtype=torch.int64)
    attention_mask = torch.ones(1, seq, dtype=torch.int64)
    attention_mask[:, seq - max(2, seq // 8):] = 0
    return dict(model=model, inputs=(input_ids, attention_mask), input_names=["input_ids", "attention_mask"],
                output_names=["last_hidden_state"])


class ModelUnavailable(Exception):
    """A model this environment cannot construct (transformers missing or incompatible)."""


def build_hf(base, cfg):
    """A causal LM from export_hf_models' configs, seeded as its export_one seeds it: a prefill
    (token ids in, logits out), or for llama_decode one decode step (export_hf_models.DecodeStep:
    the new token and the cache in, logits and the cache out). That script targets transformers
    4.40 and 5.x: a failure to construct the model under another version makes the model
    skipped, not failed."""
    import torch

    class PrefillAllAttended(torch.nn.Module):
        """export_hf_models.LogitsOnly with an explicit all-ones attention mask, which computes the
        same logits. Without a mask, transformers 5 looks for packed sequences in the position ids
        with torch.diff, which the TorchScript exporter cannot export (aten::diff)."""

        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, input_ids):
            return self.model(input_ids=input_ids, attention_mask=torch.ones_like(input_ids), use_cache=False).logits

    try:
        import export_hf_models as hf
        torch.manual_seed(hf.SEED)
        gen = torch.Generator().manual_seed(hf.INPUT_SEED)
        config = hf.gpt2_config(cfg.size) if base == "gpt2" else hf.llama_config(cfg.size, gqa=False)
        full = cfg.size == "full"
        if base == "llama_decode":
            module, inputs, output_names = hf.decoder_step(config, gen, LLAMA_DECODE_PAST if full else hf.DECODER_PAST)
        else:
            length = LLAMA_PREFILL if full and base == "llama" else hf.DECODER_PREFILL
            module, inputs, output_names = hf.decoder_prefill(config, gen, length)
            module = PrefillAllAttended(module.model)
    except Exception as e:
        raise ModelUnavailable(one_line(e)) from e
    return dict(model=module, inputs=tuple(t for _, t in inputs),
                input_names=[n for n, _ in inputs], output_names=output_names)


def flat_outputs(out):
    """A model's outputs as a tuple of tensors."""
    import torch
    if isinstance(out, torch.Tensor):
        return (out,)
    return tuple(out)


def export_onnx(spec, ref, model_dir):
    """Exports spec's model (already on its device) to model_dir/model.onnx with test data:
    test_data_set_0/input_<i>.pb for the graph's inputs and output_<k>.pb holding ref (torch's
    outputs of the same model, same dtype, same device)."""
    import onnx
    import torch
    from export_models import OPSET, fix_output_shapes, write_tensor
    shutil.rmtree(model_dir, ignore_errors=True)
    data_dir = os.path.join(model_dir, "test_data_set_0")
    os.makedirs(data_dir)
    path = os.path.join(model_dir, "model.onnx")
    # torch >= 2.9 defaults to the dynamo exporter: ask for the TorchScript one (opset 17), as the
    # project's export scripts use.
    extra = dict(dynamo=False) if "dynamo" in inspect.signature(torch.onnx.export).parameters else {}
    torch.onnx.export(spec["model"], spec["inputs"], path, opset_version=OPSET, do_constant_folding=True,
                      input_names=spec["input_names"], output_names=spec["output_names"], **extra)

    m = onnx.load(path, load_external_data=False)
    fix_output_shapes(m, ref)  # static shapes on the graph's outputs
    # Over 2 GB the exporter writes one file per weight: gather them into model.onnx.data.
    pieces = {e.value for t in m.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL
              for e in t.external_data if e.key == "location"}
    if pieces:
        onnx.load_external_data_for_model(m, model_dir)
        for p in pieces:
            os.remove(os.path.join(model_dir, p))
        onnx.save_model(m, path, save_as_external_data=True, all_tensors_to_one_file=True,
                        location="model.onnx.data")
    else:
        onnx.save(m, path)
    onnx.checker.check_model(path)

    graph_inputs = [i.name for i in m.graph.input]
    graph_outputs = [o.name for o in m.graph.output]
    if len(graph_outputs) != len(ref):
        raise RuntimeError(f"graph outputs {graph_outputs}, torch gave {len(ref)}")
    # The TorchScript exporter drops inputs the graph does not use.
    used = [(n, t) for n, t in zip(spec["input_names"], spec["inputs"]) if n in graph_inputs]
    for i, (n, t) in enumerate(used):
        write_tensor(os.path.join(data_dir, f"input_{i}.pb"), t.detach().cpu().numpy(), n)
    for k, (n, t) in enumerate(zip(graph_outputs, ref)):
        write_tensor(os.path.join(data_dir, f"output_{k}.pb"), t.detach().cpu().numpy(), n)


def run_logged(cmd, log_path, timeout):
    """Runs cmd with its output in log_path; returns (exit status, wall seconds).
    Raises OutOfBudget when it does not finish within timeout seconds."""
    if timeout <= 0:
        raise OutOfBudget()
    t0 = time.monotonic()
    with open(log_path, "w") as log:
        log.write("$ " + " ".join(cmd) + "\n")
        log.flush()
        # A process group of its own: a timeout ends what it started too (a tune's measuring child).
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired as e:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise OutOfBudget() from e
    return rc, time.monotonic() - t0


def parse_fusetune_run(log_path, rc):
    """fusetune run's verdict and timing from its log."""
    with open(log_path, errors="replace") as f:
        text = f.read()
    lines = text.splitlines()
    matched = sum(" match " in l for l in lines)
    differ = [l.strip() for l in lines if " DIFFER " in l]
    result = dict(rc=rc, matched=matched, differed=len(differ),
                  outputs_match=rc == 0 and matched > 0 and not differ)
    if differ:
        result["first_differ"] = differ[0][:300]
    if matched == 0 and not differ:
        result["failure"] = f"fusetune run failed (exit {rc}): {last_line(log_path)}"
    t = TIMING_RE.search(text)
    if t:
        result.update(runs=int(t.group(1)), median_us=float(t.group(2)), min_us=float(t.group(3)),
                      max_us=float(t.group(4)))
    else:
        result["timing"] = "no timing line"
    return result


def per_kernel_lines(log_path):
    """The lines of log_path from `fusetune run --per-kernel`'s heading on; None where the log has
    no such table."""
    if not os.path.exists(log_path):
        return None
    with open(log_path, errors="replace") as f:
        lines = f.read().splitlines()
    start = next((i for i, l in enumerate(lines) if l.startswith("per kernel, slowest first")), None)
    return None if start is None else lines[start:]


def compiled_plan_launches(log_path, rows=8):
    """The slowest `rows` launches of `fusetune run --per-kernel`'s table in log_path, with its
    heading and its sums line; None where the log has no such table."""
    lines = per_kernel_lines(log_path)
    if lines is None:
        return None
    table = [l for l in lines[1:] if l.startswith("|")]
    sums = next((l for l in lines[1:] if l.startswith("sum of the ")), "")
    return "\n".join([lines[0], ""] + table[:2 + rows] + ["", sums])


def launch_bandwidths(log_path, copy_gbps, min_us=20.0):
    """Issue 27's memory-bound goal from `fusetune run --per-kernel`'s table in log_path: each
    launch of at least min_us measured (where a launch's fixed cost is small beside its traffic),
    its argument GB/s (its arguments' bytes, counted, over its measured time) as a share of the
    measured device-to-device copy. A line, or None where nothing qualifies."""
    lines = per_kernel_lines(log_path) if copy_gbps else None
    if lines is None:
        return None
    shares = []
    for l in lines[1:]:
        # | launch | kernel | groups | configuration | measured | modeled | ratio | MB | GB/s |: a packed
        # launch joins its groups and configurations with " | ", so the numbers are read from the right.
        cells = [c.strip() for c in l.strip().strip("|").split("|")]
        if len(cells) < 9 or not re.fullmatch(r"[0-9.]+", cells[-5]) or not re.fullmatch(r"[0-9.]+", cells[-1]):
            continue
        if float(cells[-5]) >= min_us:
            groups = " | ".join(cells[2:2 + (len(cells) - 7) // 2])
            shares.append((float(cells[-1]) / copy_gbps, cells[1], groups, float(cells[-5])))
    if not shares:
        return None
    shares.sort(reverse=True)
    listed = ", ".join(f"{k} ({groups}, {t:.1f} µs) {100 * s:.0f}%" for s, k, groups, t in shares)
    return (f"Launches of {min_us:.0f} µs or more, their arguments' bytes (counted) over their measured time, "
            f"as a share of the measured {copy_gbps:.0f} GB/s copy: {listed}.")


def compare(outs, ref):
    """Max abs difference and relative L2 norm (worst over the outputs) of outs against ref."""
    max_abs = rel_l2 = 0.0
    for a, b in zip(outs, ref):
        a, b = a.detach().double(), b.detach().double()
        max_abs = max(max_abs, (a - b).abs().max().item())
        rel_l2 = max(rel_l2, ((a - b).norm() / b.norm().clamp_min(1e-300)).item())
    return dict(max_abs_diff=max_abs, rel_l2=rel_l2)


class TorchTimer:
    """Times calls one by one: CUDA events around each call on the GPU, perf_counter on the host."""

    def __init__(self, cuda, runs, autotune_min_s):
        import torch
        self.torch = torch
        self.cuda = cuda
        self.runs = runs
        self.autotune_min_s = autotune_min_s  # max-autotune starts only with this much budget left
        if cuda:
            self.start = torch.cuda.Event(enable_timing=True)
            self.end = torch.cuda.Event(enable_timing=True)

    def sync(self):
        if self.cuda:
            self.torch.cuda.synchronize()

    def first_call(self, fn):
        """Runs fn once (a compiling call) and returns its outputs and its wall seconds."""
        self.sync()
        t0 = time.perf_counter()
        out = flat_outputs(fn())
        self.sync()
        return tuple(o.clone() for o in out), time.perf_counter() - t0

    def measure(self, fn):
        """WARMUP_CALLS calls, then self.runs timed calls: median, min, max in microseconds."""
        for _ in range(WARMUP_CALLS):
            fn()
        self.sync()
        samples = []
        for _ in range(self.runs):
            if self.cuda:
                self.start.record()
                fn()
                self.end.record()
                self.end.synchronize()
                samples.append(self.start.elapsed_time(self.end) * 1e3)
            else:
                t0 = time.perf_counter()
                fn()
                samples.append((time.perf_counter() - t0) * 1e6)
        return dict(median_us=statistics.median(samples), min_us=min(samples), max_us=max(samples), runs=self.runs)


def time_variant(variant, model, inputs, ref, timer, remaining):
    """One PyTorch variant's timing and its outputs against eager's: a dict with median_us etc.,
    or {"skipped": reason} (with "budget": True when only the budget stopped it). Raises what the
    variant raises (the caller records it as the variant's failure)."""
    import torch
    if variant == "eager":
        fn = lambda: model(*inputs)
        result = timer.measure(fn)
        result.update(compare(flat_outputs(fn()), ref))
        return result
    if variant == "eager+graph":
        if not timer.cuda:
            return dict(skipped="CUDA graphs need a GPU")
        # Warm-up on a side stream before the capture, as torch.cuda.graphs' documentation asks.
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(WARMUP_CALLS):
                model(*inputs)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = flat_outputs(model(*inputs))
        result = timer.measure(graph.replay)
        graph.replay()
        result.update(compare(static_out, ref))
        return result
    # torch.compile, default mode or max-autotune (which replays CUDA graphs itself).
    if not hasattr(torch, "compile"):
        return dict(skipped="torch <2 has no torch.compile")
    mode = "max-autotune" if variant == "max-autotune" else None
    if mode and remaining() < timer.autotune_min_s:
        return dict(skipped="budget", budget=True)
    torch._dynamo.reset()
    compiled = torch.compile(model, mode=mode)
    fn = lambda: compiled(*inputs)
    outs, compile_s = timer.first_call(fn)
    result = timer.measure(fn)
    result.update(compare(outs, ref), compile_s=compile_s)
    return result


def child_main(name, cfg, deadline):
    """Builds, exports, compiles, runs and times one model. Each stage is recorded in the state
    file when it begins (so a killed child's row says where) and when it ends (so it is not done
    again); stages already done by an earlier invocation are skipped."""
    import torch
    state_path = cfg.path("results", f"{name}.state.json")
    state = load_json(state_path, {})
    state.pop("stopped", None)
    model_dir = cfg.path("models", name)
    plan_dir = cfg.path("plans", name)
    cuda = not cfg.rehearse
    device = "cuda" if cuda else "cpu"

    def save():
        save_json(state_path, state)

    def remaining():
        return deadline - time.time()

    def enter(stage):
        state["stage"] = stage
        save()

    try:
        enter("build")
        try:
            spec = build_model(name, cfg)
        except ModelUnavailable as e:
            state["skipped"] = f"cannot build with transformers here: {e}"
            return
        model = spec["model"].to(device)
        spec["inputs"] = inputs = tuple(t.to(device) for t in spec["inputs"])
        state["dtype"] = spec["dtype"]
        # The reference in full float32: torch's default lets cuDNN convolutions use TF32, whose
        # 10-bit mantissa would be the error measured. The timings below keep torch's defaults.
        tf32 = torch.backends.cudnn.allow_tf32
        torch.backends.cudnn.allow_tf32 = False
        with torch.inference_mode():
            ref = tuple(o.clone() for o in flat_outputs(model(*inputs)))
        torch.backends.cudnn.allow_tf32 = tf32
        if not all(torch.isfinite(o).all() for o in ref if o.is_floating_point()):
            raise RuntimeError("non-finite reference output")
        print(f"{name}: built, {sum(p.numel() for p in model.parameters()) / 1e6:.1f} M parameters, "
              f"{spec['dtype']}, on {device}", flush=True)

        if "export" not in state or not os.path.exists(os.path.join(model_dir, "model.onnx")):
            enter("export")
            t0 = time.monotonic()
            export_onnx(spec, ref, model_dir)
            size = sum(os.path.getsize(p) for p in glob.glob(os.path.join(model_dir, "model.onnx*")))
            state["export"] = dict(seconds=time.monotonic() - t0, bytes=size)
            save()
            print(f"{name}: exported, {size / 1e6:.1f} MB", flush=True)

        if "compile" not in state:
            enter("fusetune compile")
            shutil.rmtree(plan_dir, ignore_errors=True)
            log = cfg.path("logs", f"{name}.compile.log")
            rc, secs = run_logged([cfg.fusetune, "compile", os.path.join(model_dir, "model.onnx"), "--device", cfg.plan_device,
                                   "--precision", cfg.precision, "--libraries", cfg.libraries, "--out", plan_dir], log,
                                  remaining())
            state["compile"] = dict(rc=rc, seconds=secs)
            if rc != 0:
                state["error"] = f"fusetune compile failed (exit {rc}): {last_line(log)}"
                return
            state["compile"]["libraries"] = library_calls(plan_dir)
            save()
            print(f"{name}: fusetune compile {secs:.1f} s", flush=True)

        if "run" not in state:
            enter("fusetune run")
            log = cfg.path("logs", f"{name}.run.log")
            # --per-kernel: then each launch alone beside its modeled time (the log keeps the table).
            rc, _ = run_logged([cfg.fusetune, "run", plan_dir, "--inputs", os.path.join(model_dir, "test_data_set_0"),
                                "--backend", cfg.backend, "--repeat", str(cfg.fusetune_repeat), "--per-kernel"],
                               log, remaining())
            state["run"] = parse_fusetune_run(log, rc)
            save()
            print(f"{name}: fusetune run: {json.dumps(state['run'])}", flush=True)

        # The product's plan: tuned on this device (the search measures candidates here, cuBLASLt's
        # among them), its plan timed as the compiled one was. A tune that cannot finish inside the
        # cap leaves the cost model's plan as fusetune's figure.
        # A tune the budget cut short (its cap below TUNE_CAP_S) is tried again by a later
        # invocation that can give it a longer cap.
        cut = state.get("tune") or {}
        if cut.get("budget") and min(cfg.tune_cap_s, remaining() - 60) > cut.get("cap", 0):
            del state["tune"]
        if "tune" not in state and cfg.tune_search_s > 0 and (cfg.tune_models is None or name in cfg.tune_models):
            enter("fusetune tune")
            tuned_dir = cfg.path("plans", f"{name}.tuned")
            shutil.rmtree(tuned_dir, ignore_errors=True)
            log = cfg.path("logs", f"{name}.tune.log")
            cap = min(cfg.tune_cap_s, remaining() - 60)
            if cap < 30:  # the budget, not the tune: a later invocation tries again
                raise OutOfBudget()
            tune = {}
            try:
                rc, secs = run_logged([cfg.fusetune, "tune", os.path.join(model_dir, "model.onnx"), "--device",
                                       "host" if cfg.rehearse else "auto", "--time", f"{cfg.tune_search_s:g}", "--db",
                                       cfg.tune_db, "--precision", cfg.precision, "--libraries", cfg.libraries,
                                       "--out", tuned_dir] + cfg.tune_extra,
                                      log, cap)
            except OutOfBudget:
                tune = dict(skipped=f"did not finish in {cap:.0f} s")
                if cap < cfg.tune_cap_s:
                    tune.update(budget=True, cap=cap)
            else:
                tune = dict(rc=rc, seconds=secs)
                if rc != 0:
                    tune["skipped"] = f"failed (exit {rc}): {last_line(log)}"
                else:
                    rlog = cfg.path("logs", f"{name}.tuned-run.log")
                    rc, _ = run_logged([cfg.fusetune, "run", tuned_dir, "--inputs", os.path.join(model_dir, "test_data_set_0"),
                                        "--backend", cfg.backend, "--repeat", str(cfg.fusetune_repeat)], rlog, remaining())
                    tune["run"] = parse_fusetune_run(rlog, rc)
                    tune["libraries"] = library_calls(tuned_dir)
                    # Where the tuned plan's time goes, from the tune's own measurements.
                    with open(cfg.path("logs", f"{name}.breakdown.md"), "w") as f:
                        subprocess.run([sys.executable, os.path.join(ROOT, "bench", "plan_breakdown.py"), tuned_dir,
                                        cfg.tune_db], stdout=f, stderr=subprocess.STDOUT, timeout=60)
                    # The cost model against every measurement so far, with the model's terms per candidate
                    # (bench/model_vs_measured, carried where scripts/pack_for_gpu.sh packed it): read here
                    # later without the database.
                    judge = os.path.join(cfg.bin_dir, "model_vs_measured")
                    if os.path.exists(judge):
                        with open(cfg.path("logs", "model_vs_measured.md"), "w") as f:
                            subprocess.run([judge, cfg.tune_db, "--device", cfg.plan_device, "--csv",
                                            cfg.path("logs", "model_vs_measured.csv")], stdout=f,
                                           stderr=subprocess.STDOUT, timeout=120)
            state["tune"] = tune  # recorded whole: a tune whose plan was not yet timed is done again
            save()
            print(f"{name}: fusetune tune: {json.dumps(state['tune'])}", flush=True)

        if cfg.precision == "tf32":  # PyTorch under the same policy as fusetune's plans
            torch.backends.cuda.matmul.allow_tf32 = True
            torch.backends.cudnn.allow_tf32 = True
        timer = TorchTimer(cuda, cfg.torch_runs, cfg.autotune_min_s)
        done = state.setdefault("torch", {})
        with torch.inference_mode():
            for variant in VARIANTS:
                if variant in done and not done[variant].get("budget"):
                    continue
                enter(f"torch {variant}")
                if remaining() <= 0:
                    raise OutOfBudget()
                try:
                    done[variant] = time_variant(variant, model, inputs, ref, timer, remaining)
                except Exception as e:  # PyTorch's own failure: the column says why, the model goes on
                    done[variant] = dict(skipped=f"failed: {one_line(e)}")
                save()
                print(f"{name}: {variant}: {json.dumps(done[variant])}", flush=True)
    except OutOfBudget:
        state["stopped"] = f"budget ran out during {state['stage']}"
    except Exception as e:
        state["error"] = f"{state['stage']}: {one_line(e)}"
        raise
    finally:
        save()


def ceilings_main(cfg):
    """Versions, torch settings and the two measured ceilings, into OUT_DIR/results/ceilings.json."""
    import onnx
    import torch
    info = dict(torch=torch.__version__, onnx=onnx.__version__)
    try:
        import triton
        info["triton"] = triton.__version__
    except ImportError:
        info["triton"] = "not installed"
    if cfg.rehearse:
        import numpy as np
        n = 256 << 20
        src = np.ones(n, dtype=np.uint8)
        dst = np.empty_like(src)
        np.copyto(dst, src)
        t0 = time.perf_counter()
        for _ in range(5):
            np.copyto(dst, src)
        info["copy"] = f"{2 * n * 5 / (time.perf_counter() - t0) / 1e9:.1f} GB/s host copy (numpy, 256 MiB x 5, read + written)"
        a = torch.randn(1024, 1024)
        torch.matmul(a, a)
        t0 = time.perf_counter()
        for _ in range(5):
            torch.matmul(a, a)
        info["matmul"] = f"{2 * 1024 ** 3 * 5 / (time.perf_counter() - t0) / 1e12:.3f} TFLOP/s float32 matmul 1024^3 on the host CPU"
        info["settings"] = "host rehearsal"
        return info
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    dst.copy_(src)
    start.record()
    for _ in range(20):
        dst.copy_(src)
    end.record()
    end.synchronize()
    info["copy"] = (f"{2 * (1 << 30) * 20 / (start.elapsed_time(end) / 1e3) / 1e9:.0f} GB/s device-to-device copy "
                    f"(1 GiB buffer x 20, bytes read + written)")
    del src, dst
    a = torch.randn(4096, 4096, dtype=torch.float16, device="cuda")
    b = torch.randn(4096, 4096, dtype=torch.float16, device="cuda")
    for _ in range(3):
        torch.matmul(a, b)
    start.record()
    for _ in range(20):
        torch.matmul(a, b)
    end.record()
    end.synchronize()
    info["matmul"] = f"{2 * 4096 ** 3 * 20 / (start.elapsed_time(end) / 1e3) / 1e12:.0f} TFLOP/s float16 matmul 4096^3 (torch.matmul)"
    info["settings"] = (f"torch defaults: TF32 matmul {torch.backends.cuda.matmul.allow_tf32}, "
                        f"TF32 cuDNN {torch.backends.cudnn.allow_tf32}, cudnn.benchmark {torch.backends.cudnn.benchmark}")
    return info


# --------------------------------------------------------------------------------------------------
# Parent: the budget, the children, results.json and performance.md
# --------------------------------------------------------------------------------------------------

def library_calls(plan_dir):
    """The vendor-library calls a plan bundle makes, by library (its manifest's `libraries`)."""
    with open(os.path.join(plan_dir, "manifest.json")) as f:
        return {name: lib["calls"] for name, lib in json.load(f).get("libraries", {}).items()}


def run_child(args, log_path, timeout):
    """Runs this file as a child in a process group of its own, killed after timeout seconds.
    Returns its exit status, or None when it was killed. Whatever the child started (a fusetune
    it gave up on, torch.compile's worker processes) is killed with the group when it ends."""
    with open(log_path, "a") as log:
        child = subprocess.Popen([sys.executable, os.path.abspath(__file__)] + args, stdout=log,
                                 stderr=subprocess.STDOUT, start_new_session=True)
        try:
            return child.wait(timeout=max(timeout, 1))
        except subprocess.TimeoutExpired:
            return None
        finally:
            try:
                os.killpg(child.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass  # the group ended with the child
            child.wait()


def make_row(name, state, killed, child_rc, log_path):
    """A results.json row from a child's recorded stages. status: ok, error, skipped (a reason
    other than the budget), or budget (retried by a later invocation)."""
    row = dict(name=name, dtype=state.get("dtype", "-"), export=state.get("export"), compile=state.get("compile"),
               run=state.get("run"), tune=state.get("tune"), torch=state.get("torch", {}))
    run = state.get("run") or {}
    tuned_run = (state.get("tune") or {}).get("run") or {}
    budget_skips = [v for v in VARIANTS if row["torch"].get(v, {}).get("budget")]
    if state.get("skipped"):
        status, reason = "skipped", state["skipped"]
    elif state.get("error"):
        status, reason = "error", state["error"]
    elif run.get("failure"):
        status, reason = "error", run["failure"]
    elif run and not run["outputs_match"]:
        status, reason = "error", f"outputs differ: {run.get('first_differ', '')}"
    elif tuned_run and not tuned_run["outputs_match"]:
        status, reason = "error", f"tuned plan: {tuned_run.get('failure') or 'outputs differ: ' + tuned_run.get('first_differ', '')}"
    elif killed:
        status, reason = "budget", f"budget ran out during {state.get('stage', 'the start')} (child killed)"
    elif state.get("stopped"):
        status, reason = "budget", state["stopped"]
    elif child_rc != 0 or len(row["torch"]) < len(VARIANTS):
        status, reason = "error", f"child exited {child_rc}: {last_line(log_path)}"
    elif budget_skips:
        status, reason = "budget", f"{', '.join(budget_skips)} skipped for the budget"
    else:
        status, reason = "ok", None
    row.update(status=status, reason=reason)
    # The notes column: what the table's cells do not say (a variant's skip has a note of its own).
    row["notes"] = [f"fusetune: {run['timing']}"] if run.get("timing") else []
    for plan, stage in (("compiled", state.get("compile")), ("tuned", state.get("tune"))):
        if (stage or {}).get("libraries"):
            calls = ", ".join(f"{lib} {n}" for lib, n in sorted(stage["libraries"].items()))
            row["notes"].append(f"{plan} plan's library calls: {calls}")
    if (state.get("tune") or {}).get("skipped"):
        row["notes"].append(f"tune: {state['tune']['skipped']}")
    if reason and not budget_skips:
        row["notes"].append(reason)
    return row


def budget_row(name, why):
    return dict(name=name, dtype="-", status="budget", reason=why, torch={}, notes=[why])


def us(v):
    return f"{v:.1f}" if v is not None else "-"


def speedup(other, ours):
    return other / ours if other is not None and ours else None


def render(cfg, results, ceilings, header):
    """performance.md from results.json's rows (in the order the models were listed)."""
    lines = [f"# fusetune against PyTorch{' (host rehearsal, tiny models)' if cfg.rehearse else ''}", "",
             f"- date (UTC): {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M')}",
             f"- device: {header['device']}",
             f"- torch {ceilings.get('torch', '?')}, triton {ceilings.get('triton', '?')}, "
             f"onnx {ceilings.get('onnx', '?')}; {ceilings.get('settings', '')}",
             f"- fusetune commit: {header['commit']}",
             f"- precision policy (PRECISION): {cfg.precision}"
             + (" (fusetune --precision tf32; PyTorch with TF32 on for matmul and cuDNN; the reference full float32)"
                if cfg.precision == "tf32" else " (the model's types; PyTorch's defaults)"),
             f"- vendor libraries fusetune's plans may call (LIBRARIES): {cfg.libraries}",
             f"- ceilings (measured): {ceilings.get('copy', 'not measured')}; {ceilings.get('matmul', 'not measured')}",
             f"- method (measured): batch 1; fusetune: `fusetune run --backend {cfg.backend} --repeat "
             f"{cfg.fusetune_repeat}` ({'device events around each CUDA graph replay, L2 not flushed' if not cfg.rehearse else 'host backend'}); "
             f"PyTorch: {WARMUP_CALLS} warm-up calls then {cfg.torch_runs} calls each timed by "
             f"{'CUDA events' if not cfg.rehearse else 'time.perf_counter'}; all times are medians in µs; "
             f"speed-up = their time / fusetune's (>1: fusetune faster)", "",
             "fusetune's figure is its tuned plan where the tune finished with matching outputs, else the "
             "plan the cost model chose (`fusetune compile`, nothing measured in the choice).", "",
             "| model | dtype | fusetune compiled plan µs | fusetune tuned plan µs | outputs match | compile s | tune s "
             "| eager µs | eager+graph µs | torch.compile µs | max-autotune µs | × eager | × compile | × max-autotune | notes |",
             "|---|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    ratios = {"eager": [], "compile": [], "max-autotune": []}
    troubles = []
    for row in results.values():
        # A row in the table: measured (ok), failed, or stopped by the budget after fusetune's run.
        in_table = row["status"] in ("ok", "error") or (row["status"] == "budget" and row.get("run"))
        if row["status"] in ("skipped", "error") or not in_table:
            troubles.append(f"- {row['name']}: {row['status']}: {row.get('reason', '')}")
        if not in_table:
            continue
        run = row.get("run") or {}
        tune = row.get("tune") or {}
        tuned = tune.get("run") or {}
        ours = tuned.get("median_us") if tuned.get("outputs_match") else run.get("median_us")
        t = row["torch"]
        cells, notes, skips = [], list(row.get("notes", [])), {}
        for v in VARIANTS:
            r = t.get(v, {})
            if "skipped" in r:
                skips.setdefault(r["skipped"], []).append(v)
            cells.append(us(r.get("median_us")))
        notes += [f"{', '.join(vs)}: skipped: {why}" for why, vs in skips.items()]
        compile_s = [f"{v} {t[v]['compile_s']:.0f} s" for v in ("compile", "max-autotune") if "compile_s" in t.get(v, {})]
        if compile_s:
            notes.append("torch compile time: " + ", ".join(compile_s))
        diffs = [f"{v} {t[v]['rel_l2']:.1e}" for v in VARIANTS[1:] if "rel_l2" in t.get(v, {})]
        if diffs:
            notes.append("rel L2 vs eager: " + ", ".join(diffs))
        ups = []
        for key in ratios:
            s = speedup(t.get(key, {}).get("median_us"), ours)
            if s is not None:
                ratios[key].append(s)
            ups.append(f"{s:.3g}" if s is not None else "-")
        match = "yes" if run.get("outputs_match") and tuned.get("outputs_match", True) else ("no" if run else "-")
        compile_wall = (row.get("compile") or {}).get("seconds")
        tune_wall = tune.get("seconds")
        lines.append(f"| {row['name']} | {row['dtype']} | {us(run.get('median_us'))} | {us(tuned.get('median_us'))} | "
                     f"{match} | {f'{compile_wall:.1f}' if compile_wall is not None else '-'} | "
                     f"{f'{tune_wall:.0f}' if tune_wall is not None else '-'} | " + " | ".join(cells) + " | "
                     + " | ".join(ups) + f" | {'; '.join(notes)} |")
    geo = []
    for key, vals in ratios.items():
        g = math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else None
        geo.append(f"over {key} {g:.3g} ({len(vals)} models)" if g else f"over {key} - (no model)")
    lines += ["", "Geometric mean of the speed-ups (measured): " + "; ".join(geo) + "."]
    if troubles:
        lines += ["", "Failed or skipped:"] + troubles
    for row in results.values():
        per_kernel = compiled_plan_launches(cfg.path("logs", f"{row['name']}.run.log"))
        if per_kernel:
            lines += ["", f"## Where {row['name']}'s compiled plan spends its time (fusetune run --per-kernel)", "",
                      per_kernel]
            copy = re.match(r"([0-9.]+) GB/s (device-to-device|host) copy", ceilings.get("copy", ""))
            bandwidth = row["name"] == "memory_bound" and launch_bandwidths(
                cfg.path("logs", f"{row['name']}.run.log"), float(copy.group(1)) if copy else None)
            if bandwidth:
                lines += ["", bandwidth]
        breakdown = cfg.path("logs", f"{row['name']}.breakdown.md")
        if os.path.exists(breakdown):
            with open(breakdown) as f:
                lines += ["", f"## Where {row['name']}'s tuned plan spends its time (bench/plan_breakdown.py)", "",
                          f.read().rstrip()]
    return "\n".join(lines) + "\n"


def device_header(cfg):
    """Device name and driver (nvidia-smi) and the fusetune commit."""
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
        device = smi.stdout.strip().splitlines()[0] if smi.returncode == 0 and smi.stdout.strip() else None
    except (OSError, subprocess.TimeoutExpired):
        device = None
    if device is None:
        device = "host CPU (rehearsal), no nvidia-smi" if cfg.rehearse else "unknown (nvidia-smi failed)"
    else:
        device = device.replace(", ", ", driver ")
    # FUSETUNE_COMMIT names it where the tree has no .git (a copy carried to a GPU machine).
    commit = os.environ.get("FUSETUNE_COMMIT", "")
    try:
        git = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             timeout=10)
        commit = commit or (git.stdout.strip() if git.returncode == 0 and git.stdout.strip() else "unknown")
    except (OSError, subprocess.TimeoutExpired):
        commit = commit or "unknown"
    return dict(device=device, commit=commit)


def parent_main(cfg, names, budget_s, header):
    deadline = time.time() + budget_s
    for d in ("models", "plans", "results", "logs"):
        os.makedirs(cfg.path(d), exist_ok=True)
    results_path = cfg.path("results.json")
    results = load_json(results_path, {})

    ceilings_path = cfg.path("results", "ceilings.json")
    if not os.path.exists(ceilings_path):
        print("measuring the ceilings", flush=True)
        rc = run_child(["--ceilings"] + cfg.child_args(), cfg.path("logs", "ceilings.log"),
                       min(120, deadline - time.time()))
        if rc != 0:
            print(f"ceilings not measured ({'killed' if rc is None else f'exit {rc}'}): see "
                  f"{cfg.path('logs', 'ceilings.log')}", flush=True)
    ceilings = load_json(ceilings_path, {})

    def publish():
        ordered = {n: results[n] for n in names if n in results}
        ordered.update({n: r for n, r in results.items() if n not in ordered})
        save_json(results_path, ordered)
        with open(cfg.path("performance.md.tmp"), "w") as f:
            f.write(render(cfg, ordered, ceilings, header))
        os.replace(cfg.path("performance.md.tmp"), cfg.path("performance.md"))

    for name in names:
        if name in results and results[name]["status"] != "budget":
            print(f"{name}: already measured ({results[name]['status']}), skipped", flush=True)
            continue
        left = deadline - time.time()
        if left < START_MIN_S:
            results[name] = budget_row(name, f"skipped: budget ({max(left, 0):.0f} s left, under {START_MIN_S} s)")
            publish()
            continue
        print(f"{name}: starting with {left:.0f} s of budget left", flush=True)
        log_path = cfg.path("logs", f"{name}.child.log")
        interrupted = False
        try:
            rc = run_child(["--child", name, "--deadline", repr(deadline)] + cfg.child_args(), log_path,
                           left + KILL_GRACE_S)
        except KeyboardInterrupt:  # SIGTERM from the outer timeout, or Ctrl-C: the child is gone
            interrupted, rc = True, None
        state = load_json(cfg.path("results", f"{name}.state.json"), {})
        results[name] = make_row(name, state, rc is None, rc, log_path)
        print(f"{name}: {results[name]['status']} {results[name].get('reason', '')}", flush=True)
        publish()
        if interrupted:
            print("interrupted: the models after this one are not run", flush=True)
            break
    publish()
    with open(cfg.path("performance.md")) as f:
        print("\n" + f.read(), end="", flush=True)
    if any(r["status"] == "error" for r in results.values()):
        return 1
    # A rehearsal proves the steps work: a model it did not measure is a failure there.
    unmeasured = [n for n in names if results.get(n, {}).get("status") != "ok"] if cfg.rehearse else []
    if unmeasured:
        print(f"rehearsal: not every model was measured: {', '.join(unmeasured)}", flush=True)
        return 1
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", nargs="?", help="output directory (parent)")
    ap.add_argument("--rehearse", action="store_true", help="tiny models, host backend, CPU torch")
    ap.add_argument("--child", metavar="NAME", help=argparse.SUPPRESS)
    ap.add_argument("--ceilings", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--deadline", type=float, help=argparse.SUPPRESS)
    ap.add_argument("--out", dest="out_opt", help=argparse.SUPPRESS)
    ap.add_argument("--bin-dir", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child or a.ceilings:
        import warnings
        warnings.filterwarnings("ignore")
        cfg = Config(a.rehearse, a.out_opt, a.bin_dir)
        if a.ceilings:
            save_json(cfg.path("results", "ceilings.json"), ceilings_main(cfg))
        else:
            child_main(a.child, cfg, a.deadline)
        return 0
    if not a.out:
        ap.error("OUT_DIR is required")
    cfg = Config(a.rehearse, a.out, os.environ.get("BIN_DIR", os.path.join(ROOT, "build")))
    names = [n.strip() for n in os.environ.get("MODELS", "").split(",") if n.strip()] or \
        (REHEARSE_MODELS if a.rehearse else GPU_MODELS)
    budget_s = float(os.environ.get("BUDGET_S", 300 if a.rehearse else 420))
    # bench/gpu_perf.sh's outer timeout sends SIGTERM: end like Ctrl-C, so the running child's
    # process group is killed (run_child's finally) and the table written so far stays.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    header = device_header(cfg)
    if "PLAN_DEVICE" not in os.environ:
        # The word, not a substring: a "GH200" is no H200 (planner/device_identity.h tells all apart).
        # The header reads "NVIDIA H200, driver ...": words split at spaces, commas and hyphens.
        os.environ["PLAN_DEVICE"] = "h200" if "H200" in re.split(r"[\s,-]+", header["device"]) else "h100"
        cfg.plan_device = os.environ["PLAN_DEVICE"]
    return parent_main(cfg, names, budget_s, header)


if __name__ == "__main__":
    sys.exit(main())
