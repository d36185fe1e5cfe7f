"""Opens the dashboard (live, or a report file) in headless Chromium driven over the DevTools
protocol, as a person would look at it, and checks that what it shows is what the API and
`fusetune status --json` say (tests/cli/dashboard.sh).

usage: dashboard_browser.py URL STATUS_JSON JOB_JSON OUT_DIR NAME
Starts Debian's chromium headless with a DevTools endpoint, opens URL in a new page, waits for the
page's scripts to say it is ready, then reads from the page itself: the jobs table's cells, the
points each Chart.js chart holds (from the charts, not from the markup), the candidates by status,
and, live, the workers' timeline and the service's line; keeps a screenshot as OUT_DIR/NAME.png.
Checks: one row per job with the id, state, tasks done, candidates measured, cache hits and tuned
time status --json has; each chart holds as many points as JOB_JSON (/api/jobs/ID) has; the
candidates by status add up to the job's candidates measured. Exits non-zero with the first
disagreement.
"""
import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import websocket  # Debian's python3-websocket

url, status_path, job_path, out_dir, name = sys.argv[1:6]
browser = shutil.which("chromium") or shutil.which("chromium-browser")
if not browser:
    sys.exit("no chromium on PATH: scripts/setup.sh installs Debian's")
profile = tempfile.mkdtemp(prefix="fusetune-chromium-")
proc = subprocess.Popen([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                         "--remote-debugging-port=0", "--user-data-dir=" + profile, "--window-size=1400,2400",
                         "about:blank"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
try:
    port_file = os.path.join(profile, "DevToolsActivePort")
    deadline = time.time() + 60
    while not (os.path.exists(port_file) and len(open(port_file).read().split()) >= 2):
        assert time.time() < deadline and proc.poll() is None, "chromium did not open its DevTools endpoint"
        time.sleep(0.1)
    port, path = open(port_file).read().split()[:2]
    ws = websocket.create_connection(f"ws://127.0.0.1:{port}{path}", timeout=60)
    next_id = [0]

    def call(method, session=None, **params):
        next_id[0] += 1
        msg = {"id": next_id[0], "method": method, "params": params}
        if session:
            msg["sessionId"] = session
        ws.send(json.dumps(msg))
        while True:
            reply = json.loads(ws.recv())
            if reply.get("id") == next_id[0]:
                assert "error" not in reply, (method, reply["error"])
                return reply["result"]

    target = call("Target.createTarget", url=url)["targetId"]
    session = call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]

    def evaluate(expression):
        r = call("Runtime.evaluate", session, expression=expression, returnByValue=True)
        assert "exceptionDetails" not in r, (expression, r["exceptionDetails"])
        return r["result"].get("value")

    deadline = time.time() + 60
    while evaluate('document.body && document.body.dataset.ready') != "1":
        assert time.time() < deadline, "the page never became ready (its scripts failed?)"
        time.sleep(0.2)
    seen = evaluate("""JSON.stringify({
      rows: [...document.querySelectorAll('#jobs tbody tr')].map(tr => [...tr.cells].map(td => td.textContent)),
      points: Object.fromEntries(Object.entries(charts).map(([id, c]) =>
          [id, c.data.datasets.reduce((n, d) => n + d.data.length, 0)])),
      statuses: Object.fromEntries([...document.querySelectorAll('#statuses tbody tr')].map(
          tr => [tr.cells[0].textContent, Number(tr.cells[1].textContent)])),
      decisions: document.querySelectorAll('#decisions tbody tr').length,
      service: (document.getElementById('service-line') || {}).textContent || '',
      report: !!window.FUSETUNE_REPORT })""")
    seen = json.loads(seen)
    shot = os.path.join(out_dir, name + ".png")
    open(shot, "wb").write(base64.b64decode(call("Page.captureScreenshot", session)["data"]))
finally:
    proc.kill()
    proc.wait()
    shutil.rmtree(profile, ignore_errors=True)

status = json.load(open(status_path))
assert len(seen["rows"]) == len(status["jobs"]), (seen["rows"], status["jobs"])
for cells, job in zip(seen["rows"], status["jobs"]):
    want = {0: str(job["job_id"]), 1: job["state"], 4: f"{job['tasks_done'] + job['tasks_failed']}/{job['tasks']}",
            6: str(job["candidates_measured"]), 7: str(job["cache_hits"])}
    for i, v in want.items():
        assert cells[i] == v, f"job {job['job_id']}: cell {i} shows {cells[i]!r}, status --json says {v!r}"
    summary = job["summary"] or {}
    if summary.get("tuned_us"):
        assert cells[8] == f"{summary['tuned_us']:.1f}", (cells[8], summary["tuned_us"])
job = json.load(open(job_path))
want = {
    "by-trials": sum(isinstance(p.get("tuned_us"), (int, float)) for p in job["convergence"]),
    "by-seconds": sum(isinstance(p.get("tuned_us"), (int, float)) for p in job["convergence"]),
    "groups": sum(isinstance(p[1], (int, float)) for s in job["group_convergence"].values() for p in s),
    "groups-seconds": sum(isinstance(p[1], (int, float)) and len(p) > 2 for s in job["group_convergence"].values() for p in s),
    "scatter": sum(len(g["candidates"]) for g in job["group_details"]),
}
assert all(n > 0 for n in want.values()), want
plotted = {k: v for k, v in seen["points"].items() if k in want}
assert plotted == want, f"the charts hold {plotted}, the job has {want}"
shown = status["jobs"][-1]
assert sum(seen["statuses"].values()) == shown["candidates_measured"], (seen["statuses"], shown["candidates_measured"])
print(f"{name}: Chromium (DevTools) shows {len(seen['rows'])} job(s) as status --json has them; its charts hold the "
      f"job's points ({', '.join(f'{k} {v}' for k, v in plotted.items())}); candidates by status {seen['statuses']}; "
      f"{seen['decisions']} fused groups against their parts; screenshot {shot}")
if not seen["report"]:
    leases = seen["points"].get("timeline", 0)
    assert leases >= min(200, shown["tasks_done"]), f"the workers' timeline holds {leases} leases for {shown['tasks_done']} tasks"
    assert "task results" in seen["service"] and "cache hit rate" in seen["service"], seen["service"]
    print(f"{name}: the workers' timeline holds {seen['points']['timeline']} leases; {seen['service']}")
