#!/usr/bin/env bash
# Packs what a lent GPU machine needs to run fusetune's GPU scripts (bench/gpu_lease.sh) into one
# compressed file that the device tool carries (its limit is 64 MiB with the working tree): the
# binaries built here, stripped, and the shared libraries they load that a CUDA image may lack
# (protobuf, ZeroMQ, SQLite, OpenSSL, XGBoost, Boost, ...), resolved by ldd. The C and C++
# runtimes, the CUDA driver and the toolkit's libraries (NVRTC, cuBLASLt, cuDNN) stay behind: the
# GPU machine has its own, and they are large.
#
#   scripts/pack_for_gpu.sh [BUILD_DIR] [OUT_DIR]     # defaults: build, .carry; writes OUT_DIR/pack.tar.xz
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
out=${2:-.carry}
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib"
for b in fusetune tests/fusetune_unit_tests search_eval model_vs_measured; do
  [ -x "$build/$b" ] || { echo "pack_for_gpu: $build/$b is missing (build it first)" >&2; exit 1; }
  strip -o "$stage/bin/$(basename "$b")" "$build/$b"
done
skip='^(linux-vdso|ld-linux|libc\.|libm\.|libstdc\+\+|libgcc_s|libpthread|libdl|librt|libcuda\.|libnvrtc|libcublas|libcudnn|libcudart)'
for b in "$stage"/bin/*; do
  ldd "$b" | awk '$3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r name path; do
  [[ "$name" =~ $skip ]] || cp -L "$path" "$stage/lib/$name"
done
strip "$stage"/lib/* 2>/dev/null || true
# The unit tests name the source tree and the fusetune binary by the paths they were built with.
echo "$(pwd)" >"$stage/source_dir"
# The commit the binaries were built from (the copy on the GPU machine has no .git).
git rev-parse --short HEAD >"$stage/commit" 2>/dev/null || echo unknown >"$stage/commit"
rm -rf "$out"
mkdir -p "$out"
tar -C "$stage" -cJf "$out/pack.tar.xz" bin lib source_dir commit
echo "pack_for_gpu: $(ls "$stage/bin" | wc -l) binaries and $(ls "$stage/lib" | wc -l) libraries in $out/pack.tar.xz ($(du -h "$out/pack.tar.xz" | cut -f1))"
