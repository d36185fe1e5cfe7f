#!/usr/bin/env bash
# One GPU lease's work as one command (the device tool's machines allow 10 minutes a command and
# bring back at most 8 files): first the race against PyTorch (bench/gpu_perf.sh), then the host's
# claims checked on the GPU (bench/gpu_check.sh, steps STEPS: by default the code generator's tests
# on host and GPU and every small model's plan run on the GPU; the sanitizer and counter steps take
# longer and run when named). The binaries come from CARRY_DIR/pack.tar.xz, made here by
# scripts/pack_for_gpu.sh.
#
#   bench/gpu_lease.sh [--rehearse] CARRY_DIR OUT_DIR
# env: BUDGET_S (the race's, default 390) and gpu_perf.sh's other settings; STEPS for
# gpu_check.sh, which gets what is left of LEASE_S (default 570: the device tool stops a command at
# 600 s); WORK_DIR (default /tmp/fusetune-lease: a second command on the same machine resumes the
# race where the first stopped)
#
# OUT_DIR receives performance.md and results.json (copied every 10 s while the race runs, so a
# command stopped at its limit still brings back what was measured), check.md (gpu_check's table)
# and logs.tar.gz (every log of both scripts). --rehearse runs the race's rehearsal instead (no GPU:
# tiny models on the host) and no checks: the lease's own steps tried here.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
rehearse=()
if [ "${1:-}" = --rehearse ]; then
  rehearse=(--rehearse)
  shift
fi
out=$2
mkdir -p "$out"
started=$(date +%s)
work=${WORK_DIR:-/tmp/fusetune-lease}
mkdir -p "$work"
carry=$work/carry
rm -rf "$carry"
mkdir -p "$carry"
tar -C "$carry" -xJf "$1/pack.tar.xz" || { echo "gpu_lease: cannot unpack $1/pack.tar.xz" >&2; exit 2; }
# The unit tests were built in another tree: its path leads to this copy, its build/fusetune to ours.
src=$(cat "$carry/source_dir")
if [ "$src" != "$root" ] && [ ! -e "$src" ]; then
  mkdir -p "$(dirname "$src")" && ln -s "$root" "$src"
fi
[ -e "$root/build/fusetune" ] || { mkdir -p "$root/build" && ln -s "$carry/bin/fusetune" "$root/build/fusetune"; }
export LD_LIBRARY_PATH="$carry/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# cuDNN (opened at run time for convolution calls) where the toolkit has none: PyTorch's wheel's copy.
if [ ! -e /usr/local/cuda/lib64/libcudnn.so.9 ]; then
  cudnn_dir=$(python3 -c 'import glob, os, nvidia.cudnn as c; print(os.path.join(list(c.__path__)[0], "lib"))' 2>/dev/null || true)
  [ -n "$cudnn_dir" ] && [ -e "$cudnn_dir/libcudnn.so.9" ] && export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$cudnn_dir"
fi
export BIN_DIR="$carry/bin"
export FUSETUNE_COMMIT=${FUSETUNE_COMMIT:-$(cat "$carry/commit")}
export FUSETUNE_CACHE_DIR="$work/cache"
[ ${#rehearse[@]} -gt 0 ] || nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader

pack() { tar -czf "$out/logs.tar.gz" -C "$work" --exclude=./carry --exclude=./cache --exclude='*.onnx' --exclude='*.onnx.data' --exclude='*.bin' --exclude='*.cubin' --exclude='*.pb' . 2>/dev/null; }
trap pack EXIT

publish() { cp "$work/perf/performance.md" "$work/perf/results.json" "$out/" 2>/dev/null; }
(while sleep 10; do publish; done) &
copier=$!
BUDGET_S=${BUDGET_S:-390} "$root/bench/gpu_perf.sh" "${rehearse[@]}" "$work/perf"
perf_rc=$?
kill "$copier" 2>/dev/null
publish
pack
if [ ${#rehearse[@]} -gt 0 ]; then
  echo "gpu_lease: race exit $perf_rc (rehearsal: no GPU checks)"
  exit "$perf_rc"
fi

left=$(( ${LEASE_S:-570} - ($(date +%s) - started) ))
echo "gpu_lease: the race ended $(( $(date +%s) - started )) s into the command; the checks get ${left} s of LEASE_S"
if [ "$left" -lt 30 ]; then
  echo "gpu_lease: ${left} s left of LEASE_S: no checks" | tee "$out/check.md"
  exit $((perf_rc != 0))
fi
# The check's log goes straight to OUT_DIR: a command stopped at its limit still brings it back.
STEPS=${STEPS:-unit run} timeout --kill-after=5 "$left" "$root/bench/gpu_check.sh" "$carry/bin" "$work/check" | tee "$out/check.log"
check_rc=${PIPESTATUS[0]}
sed -n '/^| check | result |/,$p' "$out/check.log" >"$out/check.md"
echo "gpu_lease: race exit $perf_rc, checks exit $check_rc, $(( $(date +%s) - started )) s into the command"
exit $((perf_rc != 0 || check_rc != 0))
