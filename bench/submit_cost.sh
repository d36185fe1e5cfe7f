#!/usr/bin/env bash
# The cost of submitting a model to the tuning service (issue 11's goals: full-size BERT-base
# answered within 2 s and the database grown by at most 20 MB; a 1B-parameter decoder within 30 s
# with the coordinator's peak RSS under 2 GB). Starts a real coordinator on a free loopback port
# with a fresh database, submits MODEL with `fusetune submit` (no worker: the job waits, so what is
# measured is the submission alone), and prints the time until the answer, the database's growth
# (file and WAL), the model files kept beside it, and the coordinator's peak resident memory at the
# answer and once the job's tasks are lowered (the pool's work after the answer).
#   bench/submit_cost.sh MODEL.onnx [DEVICE] [extra submit args, e.g. --shape input_ids=1x128]
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:?usage: bench/submit_cost.sh MODEL.onnx [DEVICE] [submit args]}
device=${2:-h100}
[ $# -ge 2 ] && shift 2 || shift 1
fusetune=${FUSETUNE:-build/fusetune}
work=$(mktemp -d)
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$fusetune" coordinator --listen "tcp://127.0.0.1:$port" --db "$work/search.db" 2> "$work/coordinator.log" &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 100); do grep -q listening "$work/coordinator.log" && break; sleep 0.1; done
size() { du -cb "$work"/search.db "$work"/search.db-wal "$work"/search.db-shm 2>/dev/null | tail -1 | cut -f1; }
before=$(size)
start=$(date +%s.%N)
job=$("$fusetune" submit "$model" --coordinator "tcp://127.0.0.1:$port" --device "$device" "$@")
end=$(date +%s.%N)
rss_answer=$(awk '/^VmHWM:/ { print $2 }' "/proc/$pid/status")
# After the answer the pool lowers the job's tasks: wait until the coordinator's CPU time stays
# still for 3 s (at most 5 minutes), so that the peak below includes that work.
cpu() { awk '{ print $14 + $15 }' "/proc/$pid/stat"; }
still=0 last=$(cpu)
for _ in $(seq 300); do
  sleep 1
  now=$(cpu)
  if [ "$now" = "$last" ]; then still=$((still + 1)); else still=0; fi
  last=$now
  [ "$still" -ge 3 ] && break
done
# The job's tasks (and their payloads) are made when a worker of the device connects. For the host
# device one is started until they exist, then killed before it measures much; for a GPU this
# machine lacks the job waits, and the tasks' share of the growth is not seen here.
tasks=0
if [ "$device" = host ]; then
  "$fusetune" worker --coordinator "tcp://127.0.0.1:$port" --device host --quiet 2> /dev/null &
  worker=$!
  for _ in $(seq 600); do
    tasks=$("$fusetune" db stats --db "$work/search.db" | sed -n 's/.* \([0-9][0-9]*\) tasks (.*/\1/p')
    [ "${tasks:-0}" -gt 0 ] && break
    sleep 0.1
  done
  kill -9 "$worker"; wait "$worker" 2>/dev/null || true
fi
after=$(size)
rss=$(awk '/^VmHWM:/ { print $2 }' "/proc/$pid/status")
models=$(du -sb "$work"/search.db.models 2>/dev/null | cut -f1)
printf '| model | answered after (s) | tasks | database growth (MB) | model files beside it (MB) | coordinator peak RSS at the answer (MB) | peak RSS once lowered (MB) |\n|---|---|---|---|---|---|---|\n'
awk -v m="$(basename "$(dirname "$model")")/$(basename "$model")" -v s="$start" -v e="$end" -v b="$before" -v a="$after" \
  -v r0="$rss_answer" -v r="$rss" -v t="${tasks:-0}" -v f="${models:-0}" \
  'BEGIN { printf "| %s | %.2f | %s | %.1f | %.1f | %.0f | %.0f |\n", m, e - s, t, (a - b) / 1e6, f / 1e6, r0 / 1024, r / 1024 }'
