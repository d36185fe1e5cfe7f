#!/usr/bin/env bash
# The full-size Hugging Face exports (scripts/export_hf_models.sh --size full): for each, the plan
# (launches, modeled DRAM traffic against unfused) and the peak resident memory of importing and
# planning it, against the bytes of its weights (the files next to model.onnx).
#   bench/hf_decoders.sh DIR [DEVICE]      # DIR holds <name>/model.onnx; export with
#   scripts/export_hf_models.sh --size full --out DIR --only llama   # TinyLlama-1.1B's shape, 4.4 GB
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:?usage: bench/hf_decoders.sh DIR [DEVICE]}
device=${2:-h100}
[ -x build/fusetune ] || scripts/setup.sh
printf "%-16s %9s %9s %11s %11s %8s %11s %8s %7s\n" model weights_GB launches modeled_GB unfused_GB ratio peak_RSS_GB RSS/wts plan_s
for m in "$dir"/*/model.onnx; do
  name=$(basename "$(dirname "$m")")
  weights=$(python3 -c 'import os, sys; d = sys.argv[1]; print(sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d) if f != "model.onnx" and os.path.isfile(os.path.join(d, f))))' "$(dirname "$m")")
  log=$(mktemp)
  /usr/bin/time -f "%M %e" -o "$log.time" build/fusetune plan "$m" --device "$device" --json > "$log"
  read -r rss_kb secs < "$log.time"
  python3 - "$name" "$weights" "$rss_kb" "$secs" "$log" <<'PY'
import json, sys
name, weights, rss_kb, secs, log = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
d = json.load(open(log))
rss = rss_kb * 1024
ratio = rss / weights if weights else float("nan")
print(f"{name:16s} {weights / 1e9:9.2f} {d['launches']:9d} {d['dram_bytes_planned'] / 1e9:11.2f} "
      f"{d['dram_bytes_unfused'] / 1e9:11.2f} {d['dram_bytes_planned'] / d['dram_bytes_unfused']:8.2f} "
      f"{rss / 1e9:10.2f} {ratio:8.2f} {secs:7.1f}")
PY
  rm -f "$log" "$log.time"
done
