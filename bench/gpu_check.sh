#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: checks there what fusetune proves on the host.
#
#   bench/gpu_check.sh [BIN_DIR] [OUT_DIR] [MODELS...]
#
# BIN_DIR holds fusetune, fusetune_unit_tests and search_eval (default build); OUT_DIR receives
# every log (default build/gpu-check). Steps, each logged to OUT_DIR and summed up in a table:
#  1. the unit tests that run generated kernels on every backend (tests/unit/codegen_check.h; the
#     wgmma and tensor-core suites first among them: on a GPU they confirm the fragment layouts and
#     matrix descriptors the host emulates): on a GPU they run the same CUDA text through NVRTC
#     and the driver and compare the outputs with the host's and the reference's; with them the
#     deployment runtime on device pointers (RuntimeApi.Cuda*: in place and copied, a plan loaded on
#     one thread and run on others, beside a second plan on the GPU), and TMA_FUZZ_CASES (default
#     4) random products through wgmma's TMA form (GroupFuzz.RandomTma*: the driver's tensor maps,
#     the hardware's swizzle and mbarriers against the host's); none may print
#     "CUDA backend not run";
#  2. every small test model compiled for the GPU (fusetune compile) and run on it against
#     PyTorch's outputs (fusetune run --backend cuda);
#  3. the same runs under compute-sanitizer: memcheck, racecheck, synccheck and initcheck;
#  4. Nsight Compute's counters of each generated kernel (requests and 32-byte sectors of global
#     loads and stores, shared-memory instructions and wavefronts, DRAM bytes) beside the host
#     executor's counts of the same kernel (fusetune profile --json), by bench/gpu_counters.py;
#  5. fusetune tune of the bundled BERT on the GPU (the worker measures there), its plan run there;
#  6. search_eval --device 0: the search strategies' regret against whole spaces measured on the GPU.
# STEPS (default "unit run sanitizer counters tune search") picks steps. Exit status: 0 when the
# steps that check (unit, run, sanitizer, tune) passed; the counters and search_eval only report.
set -uo pipefail
bin=${1:-build}
out=${2:-build/gpu-check}
shift $(($# > 2 ? 2 : $#))
root=$(cd "$(dirname "$0")/.." && pwd)
models=("$@")
if [ ${#models[@]} -eq 0 ]; then
  models=(bert cnn_small convnext_t efficientnet_b0 mobilenet_v2 nerf_mlp resnet_small swin_t vit
          bart_encoder distilbert distilbert_fp16 gpt2 gpt2_fp16 hf_vit llama llama_decode llama_fp16
          llama_gqa qwen2 qwen2_decode t5_encoder whisper_encoder)
fi
mkdir -p "$out/plans"
fusetune=$bin/fusetune
steps=" ${STEPS:-unit run sanitizer counters tune search} "
want() { [[ "$steps" == *" $1 "* ]]; }
failures=0
summary=()
note() { summary+=("$1"); echo "== $1"; }

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee "$out/device.txt"

# 1. Host and GPU against each other on the code generator's own cases.
if want unit; then
# In UNIT_SHARDS (default 4) shards at once: the GPU runs one shard's kernels while others build.
shards=${UNIT_SHARDS:-4}
pids=()
for ((i = 0; i < shards; i++)); do
  GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$i FUSETUNE_TMA_FUZZ_CASES=${TMA_FUZZ_CASES:-4} "$bin/fusetune_unit_tests" \
    --gtest_filter='Wgmma*:TensorCore*:RegisterEpilogue*:SplitK*:RingStages*:ConvGemm*:Codegen*:NarrowTypes*:*Cuda*:Nvrtc*:LibraryAttention*:GroupFuzz.RandomTma*' >"$out/unit.$i.log" 2>&1 &
  pids+=($!)
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=1; done
cat "$out"/unit.[0-9]*.log >"$out/unit.log"
not_run=$(grep -c "CUDA backend not run" "$out/unit.log")
passed=$(grep -c "^\[       OK \]" "$out/unit.log")
failed=$(grep -cE "^\[  FAILED  \] .* \([0-9]+ ms\)$" "$out/unit.log")
note "unit tests on host and GPU: exit $rc, $passed passed, $failed failed, $not_run without the GPU"
[ "$rc" -eq 0 ] && [ "$not_run" -eq 0 ] || failures=$((failures + 1))
fi

# 2 and 3. Each model's plan on the GPU, plainly and under the sanitizer's four tools.
run_ok=0 run_bad=()
san_ok=0 san_bad=()
for m in "${models[@]}"; do
  dir=$root/tests/data/models/$m
  shapes=()
  [ "$m" = bert ] && shapes=(--shape input_ids=1x16 --shape attention_mask=1x16)
  plan=$out/plans/$m
  if ! "$fusetune" compile "$dir/model.onnx" --device h100 --out "$plan" "${shapes[@]}" >"$out/compile.$m.log" 2>&1; then
    run_bad+=("$m(compile)")
    continue
  fi
  if ! want run; then :
  elif "$fusetune" run "$plan" --inputs "$dir/test_data_set_0" --backend cuda >"$out/run.$m.log" 2>&1; then
    run_ok=$((run_ok + 1))
  else
    run_bad+=("$m")
  fi
  want sanitizer || continue
  for tool in memcheck racecheck synccheck initcheck; do
    if timeout "${SANITIZER_TIMEOUT:-300}" compute-sanitizer --tool "$tool" --error-exitcode 99 "$fusetune" run "$plan" --inputs "$dir/test_data_set_0" \
         --backend cuda >"$out/san.$tool.$m.log" 2>&1; then
      san_ok=$((san_ok + 1))
    else
      san_bad+=("$m:$tool")
    fi
  done
done
want run && note "plans run on the GPU against PyTorch's outputs: ${run_ok} of ${#models[@]} passed; failed: ${run_bad[*]:-none}"
want sanitizer && note "compute-sanitizer (memcheck, racecheck, synccheck, initcheck): ${san_ok} of $((4 * ${#models[@]})) clean; found: ${san_bad[*]:-none}"
[ ${#run_bad[@]} -eq 0 ] && [ ${#san_bad[@]} -eq 0 ] || failures=$((failures + 1))

# 4. The GPU's counters beside the host's counts, per generated kernel.
metrics=l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum
metrics+=,l1tex__t_requests_pipe_lsu_mem_global_op_st.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum
metrics+=,smsp__inst_executed_op_shared_ld.sum,smsp__inst_executed_op_shared_st.sum
metrics+=,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum
metrics+=,dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum
for m in "${models[@]}"; do
  plan=$out/plans/$m
  want counters && [ -f "$plan/manifest.json" ] || continue
  dir=$root/tests/data/models/$m
  ncu --csv --print-units base --metrics "$metrics" --log-file "$out/ncu.$m.csv" "$fusetune" run "$plan" --inputs "$dir/test_data_set_0" \
    --backend cuda >"$out/ncu.$m.log" 2>&1 || echo "ncu failed on $m (see $out/ncu.$m.log)"
  "$fusetune" profile "$plan" --inputs "$dir/test_data_set_0" --json >"$out/host.$m.json" 2>"$out/host.$m.log" ||
    echo "fusetune profile failed on $m (see $out/host.$m.log)"
done
want counters && python3 "$root/bench/gpu_counters.py" "$out" "${models[@]}" | tee "$out/counters.md"

# 5. A tuning job measured on the GPU, and its plan run there.
if want tune; then
  bert=$root/tests/data/models/bert
  "$fusetune" tune "$bert/model.onnx" --device auto --db "$out/tune.db" --out "$out/tuned-bert" \
    --shape input_ids=1x16 --shape attention_mask=1x16 >"$out/tune.log" 2>&1 &&
    "$fusetune" run "$out/tuned-bert" --inputs "$bert/test_data_set_0" --backend cuda >>"$out/tune.log" 2>&1
  rc=$?
  note "tune of the bundled BERT measured on the GPU, its plan run there: exit $rc ($(grep -c . "$out/tune.log") log lines)"
  [ "$rc" -eq 0 ] || failures=$((failures + 1))
fi

# 6. The search strategies judged on the GPU's measurements.
if want search && [ -x "$bin/search_eval" ]; then
  "$bin/search_eval" --device 0 --fusetune "$fusetune" --groups "${SEARCH_GROUPS:-20}" \
    --models "${SEARCH_MODELS:-cnn_small,resnet_small,nerf_mlp,mobilenet_v2,bert,gpt2}" \
    --min-space "${SEARCH_MIN_SPACE:-12}" --max-space "${SEARCH_MAX_SPACE:-64}" >"$out/search_eval.md" 2>"$out/search_eval.log"
  note "search_eval on the GPU: exit $? ($out/search_eval.md)"
fi

echo
echo "| check | result |"
echo "|---|---|"
for s in "${summary[@]}"; do echo "| ${s%%:*} | ${s#*: } |"; done
exit $((failures > 0))
