#!/bin/sh
# The coordinator's HTTP side as a person and a Prometheus server would use it: a real coordinator
# with --http on a free loopback port, a worker, a small job run to the end; then
# tests/cli/dashboard_check.py (Debian's python3, with the prometheus_client setup.sh installs)
# reads /metrics with that parser and checks its figures against the database and `status
# --json`, checks that /api/jobs is what `status --json` prints, and that the page and its scripts
# are served, and that every query of dashboards/grafana/fusetune.json names an exported metric. Then a coordinator asked to serve HTTP
# beyond loopback without a token refuses to start, and one with a token refuses requests without it.
# Between the two, headless Chromium, driven over the DevTools protocol, opens the live dashboard
# and then `fusetune report`'s page, written once the coordinator is gone
# (tests/cli/dashboard_browser.py).
# usage: dashboard.sh FUSETUNE MODEL_DIR WORK_DIR
set -u
fusetune=$1 model_dir=$2 work=$3
here=$(dirname "$0")
rm -rf "$work"
mkdir -p "$work"
# Ports the system chooses (port 0), read back from --endpoint-file once the coordinator listens.
"$fusetune" coordinator --listen tcp://127.0.0.1:0 --db "$work/search.db" --http 127.0.0.1:0 \
  --endpoint-file "$work/endpoint.json" > "$work/coordinator.log" 2>&1 &
coordinator=$!
for _ in $(seq 600); do [ -s "$work/endpoint.json" ] && break; sleep 0.1; done
[ -s "$work/endpoint.json" ] || { echo "FAIL: the coordinator never listened"; cat "$work/coordinator.log"; exit 1; }
ep=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["listen"])' "$work/endpoint.json")
"$fusetune" worker --coordinator "$ep" --device host --compile-jobs 1 --id dashboard-worker --log-format json \
  --metrics 127.0.0.1:0 > "$work/worker.log" 2>&1 &
worker=$!
trap 'kill $worker $coordinator 2>/dev/null; wait 2>/dev/null' EXIT
fail() { echo "FAIL: $*"; cat "$work/coordinator.log"; exit 1; }

"$fusetune" submit "$model_dir/model.onnx" --coordinator "$ep" --device host --candidates 2 --trials 4 --wait \
  > "$work/submit.txt" 2>&1 || fail "submit --wait exited $?: $(cat "$work/submit.txt")"
http="http://127.0.0.1:$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["http"])' "$work/endpoint.json")"
grep -q " and $http with database" "$work/coordinator.log" || fail "the coordinator did not say where it serves HTTP ($http)"
echo "dashboard at $http"
"$fusetune" status --coordinator "$ep" --json > "$work/status.json" || fail "status --json exited $?"
"$fusetune" db stats --db "$work/search.db" > "$work/stats.txt" || fail "db stats exited $?"
worker_metrics=$(sed -n 's|.*metrics on \(http://127.0.0.1:[0-9]*/metrics\).*|\1|p' "$work/worker.log")
[ -n "$worker_metrics" ] || fail "the worker did not say where it serves its metrics"
/usr/bin/python3 "$here/dashboard_check.py" "$http" "$work/status.json" "$work/search.db" \
  "$here/../../dashboards/grafana/fusetune.json" "$worker_metrics" || fail "the dashboard's checks failed"

# Logs: the coordinator's text lines and the worker's JSON lines carry time, level, component and ids.
/usr/bin/python3 - "$work/coordinator.log" "$work/worker.log" <<'PY' || fail "log lines without their fields"
import json, re, sys
text = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (DEBUG|INFO|WARN|ERROR) coordinator( job=\d+)?( task=\d+)?( worker=\S+)?: ")
lines = open(sys.argv[1]).read().splitlines()
bad = [l for l in lines if not text.match(l)]
assert not bad, bad[:3]
assert any(" job=" in l for l in lines), "no coordinator line names its job"
records = [json.loads(l) for l in open(sys.argv[2]).read().splitlines()]
assert records and all({"ts", "level", "component", "msg"} <= r.keys() and r["worker"] == "dashboard-worker" for r in records)
assert any("task" in r for r in records), "no worker line names its task"
print(f"logs: {len(lines)} coordinator lines (text) and {len(records)} worker lines (JSON) carry time, level, component and ids")
PY

# In a browser: the live page, then the report written from the database alone once the
# coordinator is gone; screenshots stay in WORK_DIR.
/usr/bin/python3 -c 'import sys, urllib.request; open(sys.argv[2], "wb").write(urllib.request.urlopen(sys.argv[1]).read())' \
  "$http/api/jobs/1" "$work/job.json" || fail "cannot read /api/jobs/1"
/usr/bin/python3 "$here/dashboard_browser.py" "$http/" "$work/status.json" "$work/job.json" "$work" live \
  || fail "the live dashboard in Chromium"
kill $coordinator; wait $coordinator 2>/dev/null
"$fusetune" report 1 --db "$work/search.db" --out "$work/report.html" || fail "report exited $?"
if grep -q -E '(src|href)="' "$work/report.html"; then fail "the report refers to another file or address"; fi
/usr/bin/python3 "$here/dashboard_browser.py" "file://$work/report.html" "$work/status.json" "$work/job.json" "$work" report \
  || fail "the report in Chromium"

# Beyond loopback: a token or nothing.
if "$fusetune" coordinator --listen tcp://127.0.0.1:0 --db "$work/other.db" --http 0.0.0.0:0 \
     > "$work/untokened.log" 2>&1; then
  fail "a coordinator served HTTP beyond loopback without a token"
fi
grep -q -- "--http 0.0.0.0:0: beyond loopback the dashboard needs a bearer token" "$work/untokened.log" \
  || fail "the refusal does not name --http and the token: $(cat "$work/untokened.log")"
# The token comes from a file others may not read, never from the command line.
printf 's3cret\n' > "$work/http.token"
chmod 644 "$work/http.token"
if "$fusetune" coordinator --listen tcp://127.0.0.1:0 --db "$work/other.db" --http 0.0.0.0:0 \
     --http-token-file "$work/http.token" > "$work/readable.log" 2>&1; then
  fail "a coordinator took a token file others may read"
fi
grep -q -- "--http-token-file $work/http.token: others may read it (mode 644); chmod 600 it" "$work/readable.log" \
  || fail "the refusal of a readable token file does not say so: $(cat "$work/readable.log")"
if "$fusetune" coordinator --listen tcp://127.0.0.1:0 --db "$work/other.db" --http 0.0.0.0:0 \
     --http-token s3cret > "$work/cmdline.log" 2>&1; then
  fail "a coordinator took its token on the command line"
fi
chmod 600 "$work/http.token"
"$fusetune" coordinator --listen tcp://127.0.0.1:0 --db "$work/other.db" --http 0.0.0.0:0 \
  --http-token-file "$work/http.token" > "$work/tokened.log" 2>&1 &
tokened=$!
trap 'kill $worker $coordinator $tokened 2>/dev/null; wait 2>/dev/null' EXIT
for _ in $(seq 100); do grep -q "http://0.0.0.0:" "$work/tokened.log" 2>/dev/null && break; sleep 0.1; done
port=$(sed -n 's|.* and http://0.0.0.0:\([0-9]*\) with database.*|\1|p' "$work/tokened.log")
[ -n "$port" ] || fail "the tokened coordinator did not start: $(cat "$work/tokened.log")"
/usr/bin/python3 - "$port" <<'PY' || fail "the token is not enforced"
import sys, urllib.request, urllib.error
url = f"http://127.0.0.1:{sys.argv[1]}/api/jobs"
try:
    urllib.request.urlopen(url, timeout=10)
    sys.exit("served without a token")
except urllib.error.HTTPError as e:
    assert e.code == 401, e.code
req = urllib.request.Request(url, headers={"Authorization": "Bearer s3cret"})
assert urllib.request.urlopen(req, timeout=10).status == 200
print("the token is required beyond loopback, and accepted")
PY
echo "PASS"
