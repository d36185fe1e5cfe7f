#!/bin/sh
# A plan bundle whose kernels.cu lost, by hand, the __syncthreads() after a layer norm's statistics
# fails `fusetune run` on the host: exit 3 and one line naming the check, the kernel and the
# hazard; the intact bundle passes.
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
# The barriers between the first layer norm's row statistics and its element loop: a row's first
# thread writes the row's mean and inverse deviation to shared memory, and every thread of the
# block reads them after them (with several warps per row, the statistics' loop over row batches
# ends in a barrier of its own, which orders the same accesses: both go).
lines=$(awk '/1.0f \/ sqrtf\(/ { seen = 1 } seen && /__syncthreads\(\);/ { found = found " " NR }
             seen && found != "" && /for \(ft_i ft_e = / { print found; exit }' "$work/plan/kernels.cu")
if [ -z "$lines" ]; then
  echo "FAIL: no barrier after a layer norm's statistics in $work/plan/kernels.cu"
  exit 1
fi
line=$(echo $lines | tr ' ' ',')
for l in $(echo $lines | tr ' ' '\n' | sort -rn); do sed -i "${l}d" "$work/plan/kernels.cu"; done
set +e
"$fusetune" run "$work/plan" --inputs "$model/test_data_set_0" --backend host >"$work/out.txt" 2>"$work/err.txt"
rc=$?
set -e
if [ "$rc" -ne 3 ]; then
  echo "FAIL: the run without the barriers at kernels.cu:$line exited $rc, not 3"
  cat "$work/out.txt" "$work/err.txt"
  exit 1
fi
if ! grep -Eq "^fusetune: check failed: (racecheck|initcheck): kernel k[0-9]+: .* on shared '[a-z0-9_]+' element [0-9]+: .* at kernels.cu:[0-9]+" "$work/err.txt"; then
  echo "FAIL: the message does not name the check, the kernel, the buffer and the line:"
  cat "$work/err.txt"
  exit 1
fi
echo "PASS: without the barriers at kernels.cu:$line: $(cat "$work/err.txt")"
