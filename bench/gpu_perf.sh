#!/usr/bin/env bash
# fusetune's plans against PyTorch on one GPU: a table of measured latencies (bench/gpu_perf.py).
#
#   bench/gpu_perf.sh [--rehearse] OUT_DIR
#
# Per model, in priority order and inside a wall-time budget: build it with the project's seeded
# builders (scripts/export_models.py, scripts/export_hf_models.py), export it to ONNX with torch's
# outputs as test data, `fusetune compile --device h100`, `fusetune run --backend cuda --repeat 100`
# (outputs checked, CUDA graph replays timed), `fusetune tune` on the GPU and its plan run and timed
# the same way, then PyTorch on the same inputs: eager, eager in a
# CUDA graph, torch.compile, torch.compile(mode="max-autotune"). Writes, as each model finishes:
#   OUT_DIR/performance.md       header (device, driver, versions, commit, measured ceilings), the
#                                table, geometric means of the speed-ups, failed/skipped models
#   OUT_DIR/results.json         one row per model (every figure, output differences, reasons)
#   OUT_DIR/models/NAME/         model.onnx and test_data_set_0/ (input_i.pb, output_k.pb)
#   OUT_DIR/plans/NAME/          fusetune's plan bundle (NAME.tuned/: the tuned plan)
#   OUT_DIR/tune.db              the tuning jobs' search database
#   OUT_DIR/logs/NAME.*.log      child (build, export, torch timing), compile, run; ceilings.log
#   OUT_DIR/results/             each model's finished stages (what a second invocation resumes from)
# A second invocation with the same OUT_DIR skips models that have a final row and resumes those
# the budget stopped, at the stage where they stopped. The table is the last thing printed.
# Exit status: 1 when a model errored (export, fusetune compile or run failure, outputs that
# differ), else 0 (models skipped for the budget included).
#
# Environment:
#   BIN_DIR   holds the fusetune binary (default: build)
#   MODELS    comma list overriding the default models and order
#             (GPU: bert_fp16,llama_decode_fp16,llama_fp16,memory_bound,resnet50,gpt2_fp16,
#              bert_s512_fp16,vit,mobilenet_v2,efficientnet_b0,swin_t,convnext_t,bert; llama is
#              TinyLlama-1.1B's shape, prefilling 512 tokens, llama_decode one step on a cache of
#              1,024; --rehearse: bert,resnet_small,memory_bound,mobilenet_v2,vit)
#   BUDGET_S  seconds for everything (default 420; --rehearse 300); no model starts with under
#             30 s left; an outer timeout of BUDGET_S + 50 s ends it
#   AUTOTUNE_MIN_S  budget left that torch.compile(mode="max-autotune") needs to start (default 150)
#   TUNE_S, TUNE_CAP_S  fusetune tune's --time (default 30; 0: no tune) and its wall-time cap (150)
#   TUNE_MODELS  the models tuned, a comma list (default: every model)
#   PRECISION  model (default) or tf32: fusetune compiles and tunes with --precision tf32 and
#             PyTorch is timed with TF32 on for matmul and cuDNN (torch's allow_tf32); the reference
#             stays full float32, and fusetune run compares a TF32 plan at TF32's tolerance. Use a
#             fresh OUT_DIR per policy (a second invocation resumes what the first recorded)
#   LIBRARIES  the vendor libraries fusetune's plans may call (--libraries; default all): all, none,
#             or a comma list of cublasLt and cudnn (cublasLt where the GPU's cuDNN refuses the calls)
#   FUSETUNE_COMMIT  the commit the table names, where the tree has no .git
#   PLAN_DEVICE  the device description plans are compiled for (default: h200 on an H200, else h100)
#   PYTHON    the interpreter, with torch, torchvision, onnx, numpy (and transformers for the HF
#             decoders) (default python3; --rehearse: /usr/bin/python3, Debian's, after
#             scripts/install-export-deps.sh)
#
# --rehearse runs the same steps on a machine without a GPU (CI): tiny float32 models (the
# builders' --size small, BERT at sequence 16), fusetune's plan on the host backend (--repeat 3),
# PyTorch on the CPU (5 timed calls, time.perf_counter), no CUDA graph, and the torch.compile
# columns skipped on torch < 2 (Debian's 1.13). About 5 minutes on 2 cores:
#   scripts/install-export-deps.sh && bench/gpu_perf.sh --rehearse /tmp/perf-rehearse
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
rehearse=()
if [ "${1:-}" = --rehearse ]; then
  rehearse=(--rehearse)
  shift
fi
out=${1:?usage: bench/gpu_perf.sh [--rehearse] OUT_DIR}
if [ ${#rehearse[@]} -gt 0 ]; then
  python=${PYTHON:-/usr/bin/python3}
  export BUDGET_S=${BUDGET_S:-300}
else
  python=${PYTHON:-python3}
  export BUDGET_S=${BUDGET_S:-420}
fi
export BIN_DIR=${BIN_DIR:-$root/build}
[ -x "$BIN_DIR/fusetune" ] || { echo "no fusetune binary in $BIN_DIR (set BIN_DIR)" >&2; exit 1; }
# The script keeps to BUDGET_S itself; this outer limit only catches a stuck parent (SIGTERM lets
# it kill the running child and write the table so far; SIGKILL 10 s later).
limit=$(awk -v b="$BUDGET_S" 'BEGIN { printf "%d", b + 50 }')
exec timeout --preserve-status --kill-after=10 "$limit" "$python" "$root/bench/gpu_perf.py" "${rehearse[@]}" "$out"
