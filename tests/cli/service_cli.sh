#!/bin/sh
# The job CLI against a real coordinator and worker on loopback, as a script would drive them:
# submit --wait, status, export, run the exported plan against PyTorch's outputs, cancel, and the
# exit codes of mistakes (an unknown job, a coordinator that is not there).
# usage: service_cli.sh FUSETUNE MODEL_DIR WORK_DIR
set -u
fusetune=$1 model_dir=$2 work=$3
# A port the kernel says is free right now (bound to port 0, then released).
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
ep="tcp://127.0.0.1:$port"
echo "coordinator on $ep"
rm -rf "$work"
mkdir -p "$work"
"$fusetune" coordinator --listen "$ep" --db "$work/search.db" > "$work/coordinator.log" 2>&1 &
coordinator=$!
"$fusetune" worker --coordinator "$ep" --device host --compile-jobs 1 --id cli-worker > "$work/worker.log" 2>&1 &
worker=$!
trap 'kill $worker $coordinator 2>/dev/null; wait 2>/dev/null' EXIT
fail() { echo "FAIL: $*"; cat "$work/coordinator.log"; exit 1; }

"$fusetune" submit "$model_dir/model.onnx" --coordinator "$ep" --device host --candidates 1 --wait > "$work/submit.txt" \
  || fail "submit --wait exited $?"
cat "$work/submit.txt"
job=$(head -1 "$work/submit.txt")
[ "$job" = "1" ] || fail "submit printed '$job' as the job id"
"$fusetune" status "$job" --coordinator "$ep" | grep -q " done " || fail "status does not say the job is done"
"$fusetune" export "$job" --coordinator "$ep" --out "$work/plan" || fail "export exited $?"
"$fusetune" run "$work/plan" --inputs "$model_dir/test_data_set_0" || fail "the exported plan does not match PyTorch"
"$fusetune" cancel "$job" --coordinator "$ep" > /dev/null || fail "cancel of a finished job exited $?"
"$fusetune" status "$job" --coordinator "$ep" | grep -q " done " || fail "cancelling a finished job changed it"
"$fusetune" status 999 --coordinator "$ep" 2> "$work/err.txt"
rc=$?
[ $rc -eq 2 ] && grep -q "no job 999" "$work/err.txt" || fail "status of an unknown job: exit $rc, $(cat "$work/err.txt")"
"$fusetune" export "$job" --coordinator "tcp://127.0.0.1:1" --out "$work/x" --timeout-s 2 2> "$work/err2.txt"
rc=$?
[ $rc -eq 2 ] && grep -q "no reply from the coordinator" "$work/err2.txt" || fail "no coordinator: exit $rc"
echo "PASS: submit, status, export, run, cancel and their exit codes"
