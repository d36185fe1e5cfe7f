#!/bin/sh
# A plan bundle whose kernels.cu lost one __syncthreads() by hand fails `fusetune run` on the host:
# exit 3 and one line naming the check, the kernel and the hazard; the intact bundle passes.
#   tests/cli/deleted_barrier.sh FUSETUNE MODEL_DIR WORK_DIR
set -eu
fusetune=$1
model=$2
work=$3
rm -rf "$work"
mkdir -p "$work"
"$fusetune" compile "$model/model.onnx" --device h100 --out "$work/plan" \
  --shape input_ids=1x16 --shape attention_mask=1x16 >/dev/null
"$fusetune" run "$work/plan" --inputs "$model/test_data_set_0" --backend host >/dev/null
# The barrier after the first layer norm's row statistics: lane 0 of a warp writes a row's mean
# and inverse deviation to shared memory, and every thread of the block reads them after it.
line=$(awk '/1.0f \/ sqrtf\(/ { seen = 1 } seen && /__syncthreads\(\);/ { print NR; exit }' "$work/plan/kernels.cu")
if [ -z "$line" ]; then
  echo "FAIL: no barrier after a layer norm's statistics in $work/plan/kernels.cu"
  exit 1
fi
sed -i "${line}d" "$work/plan/kernels.cu"
set +e
"$fusetune" run "$work/plan" --inputs "$model/test_data_set_0" --backend host >"$work/out.txt" 2>"$work/err.txt"
rc=$?
set -e
if [ "$rc" -ne 3 ]; then
  echo "FAIL: the run without the barrier at kernels.cu:$line exited $rc, not 3"
  cat "$work/out.txt" "$work/err.txt"
  exit 1
fi
if ! grep -Eq "^fusetune: check failed: (racecheck|initcheck): kernel k[0-9]+: .* on shared '[a-z0-9_]+' element [0-9]+: .* at kernels.cu:[0-9]+" "$work/err.txt"; then
  echo "FAIL: the message does not name the check, the kernel, the buffer and the line:"
  cat "$work/err.txt"
  exit 1
fi
echo "PASS: without the barrier at kernels.cu:$line: $(cat "$work/err.txt")"
