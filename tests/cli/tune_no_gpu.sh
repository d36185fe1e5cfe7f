#!/bin/sh
# Tuning for a GPU without timing (coordinator/dry_run.h): `fusetune tune --device h100 --no-timing`
# compiles every candidate with NVRTC for sm_90 and verifies it on the host, chooses by the cost
# model, says that nothing was timed, stores nothing in the search database, and writes a plan
# that `fusetune run` verifies against PyTorch's outputs. A second run finds every cubin in the
# on-disk cache; on a machine with no GPU the second run is `--device auto`, which must say that it
# is a dry run for the H100, the default target. (Without --no-timing the same happens on a
# machine with no GPU.) With
# `--precision tf32` among the extra arguments, the plan must record the policy and the planner
# must offer TF32 tensor-core candidates for the model's float32 MatMuls (whether one is chosen is
# the cost model's call: nerf_mlp's products are launch-bound, and a SIMT candidate models as fast;
# PtxTensorCores.AFloatThirtyTwoPlanUnderTf32RunsOnTf32TensorCores holds a plan that must run on
# them).
# usage: tune_no_gpu.sh FUSETUNE MODEL_DIR WORK_DIR [extra tune args...]
set -eu
fusetune=$1 model_dir=$2 work=$3
shift 3
rm -rf "$work"
mkdir -p "$work"
export FUSETUNE_CACHE_DIR="$work/cache"
device="--device h100 --no-timing"
tune() {  # tune OUT [extra tune args...]
  out=$1
  shift
  # shellcheck disable=SC2086
  "$fusetune" tune "$model_dir/model.onnx" $device --db "$work/search.db" --out "$work/$out" \
    --candidates 2 "$@" > "$work/$out.txt" 2> "$work/$out.err" || { cat "$work/$out.txt" "$work/$out.err"; exit 1; }
  cat "$work/$out.txt" "$work/$out.err"
}
tune plan "$@"
grep -q '^nothing was timed; nothing was stored in the search database$' "$work/plan.txt" ||
  { echo "FAIL: the dry run does not say that nothing was timed"; exit 1; }
grep -q '^chosen by the cost model .*(modeled, not measured)$' "$work/plan.txt" ||
  { echo "FAIL: the plan's time is not labelled modeled"; exit 1; }
[ ! -e "$work/search.db" ] || { echo "FAIL: the dry run wrote a search database"; exit 1; }
"$fusetune" run "$work/plan" --inputs "$model_dir/test_data_set_0"
case " $* " in
  *" --precision tf32 "*)
    grep -q '"precision": "tf32"' "$work/plan/manifest.json" || { echo "FAIL: the plan does not record the TF32 policy"; exit 1; }
    "$fusetune" plan "$model_dir/model.onnx" --device h100 --precision tf32 --libraries none --top-k 1000 --json > "$work/tf32.json"
    grep -q '"config": "[^"]* mma"' "$work/tf32.json" || { echo "FAIL: no TF32 tensor-core candidate is offered"; exit 1; }
    if grep -q 'ft_mma_m16n8k8_tf32(' "$work/plan/kernels.cu"; then
      echo "the plan runs a MatMul on TF32 tensor cores"
    else
      echo "the plan runs its MatMuls on the FMA pipes: TF32 candidates were offered and modeled slower"
    fi ;;
esac
if grep -q '^NVRTC (ptxas figures) .* kernels' "$work/plan.txt"; then
  if nvidia-smi -L > /dev/null 2>&1; then
    echo "a GPU is present: --device auto would measure on it; the second run keeps --device h100 --no-timing"
  else
    device="--device auto"
  fi
  tune plan2 "$@"
  if [ "$device" = "--device auto" ]; then
    grep -q 'no usable GPU .*: a dry run for h100, the default target' "$work/plan2.err" ||
      { echo "FAIL: --device auto without a GPU does not say it is a dry run for the H100"; exit 1; }
  fi
  grep -Eq '^NVRTC \(ptxas figures\) +([0-9]+) kernels, \1 from the cubin cache \(100%\)' "$work/plan2.txt" ||
    { echo "FAIL: the second dry run compiled again what the cubin cache holds"; exit 1; }
else
  echo "this build has no NVRTC: the cubin cache is not checked"
fi
echo "PASS: checked without timing, chosen by the cost model, nothing stored; the plan runs and matches"
