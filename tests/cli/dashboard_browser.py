"""Opens the dashboard (live, or a report file) in headless Chromium, as a person would, and checks
that what the page shows is what `fusetune status --json` says (tests/cli/dashboard.sh).

usage: dashboard_browser.py URL STATUS_JSON JOB_JSON OUT_DIR NAME
Runs Debian's chromium headless twice (the page's DOM after its scripts ran; a screenshot, kept as
OUT_DIR/NAME.png), then checks: the page says it is ready; the jobs table has one row per job
with the job's id, state, tasks done, candidates measured and cache hits as status --json has them;
the job view's five charts are drawn (canvas elements sized by Chart.js) and hold as many points as
JOB_JSON (/api/jobs/ID) has, and its candidates by
status add up to what status --json says the job measured; live, the workers' timeline is drawn
and the service's line (results, cache hit rate, expiries) is shown. Exits non-zero with the
first disagreement.
"""
import html
import json
import os
import re
import shutil
import subprocess
import sys

url, status_path, job_path, out_dir, name = sys.argv[1:6]
browser = shutil.which("chromium") or shutil.which("chromium-browser")
if not browser:
    sys.exit("no chromium on PATH: scripts/setup.sh installs Debian's")
flags = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--virtual-time-budget=8000",
         "--window-size=1400,2400"]
dom = subprocess.run(flags + ["--dump-dom", url], capture_output=True, text=True, timeout=120).stdout
open(os.path.join(out_dir, name + ".html"), "w").write(dom)
shot = os.path.join(out_dir, name + ".png")
subprocess.run(flags + ["--screenshot=" + shot, url], capture_output=True, timeout=120)
assert os.path.getsize(shot) > 10000, "no screenshot"
assert 'data-ready="1"' in dom, "the page never became ready (its scripts failed?)"

status = json.load(open(status_path))
rows = re.findall(r'<tr class="job[^"]*" data-job="(\d+)">(.*?)</tr>', dom, re.S)
assert len(rows) == len(status["jobs"]), (len(rows), len(status["jobs"]))
for (job_id, row), job in zip(rows, status["jobs"]):
    cells = [html.unescape(re.sub(r"<[^>]+>", "", c)) for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
    want = {0: str(job["job_id"]), 1: job["state"], 4: f"{job['tasks_done'] + job['tasks_failed']}/{job['tasks']}",
            6: str(job["candidates_measured"]), 7: str(job["cache_hits"])}
    for i, v in want.items():
        assert cells[i] == v, f"job {job_id}: cell {i} shows {cells[i]!r}, status --json says {v!r}"
    summary = job["summary"] or {}
    if summary.get("tuned_us"):
        assert cells[8] == f"{summary['tuned_us']:.1f}", (cells[8], summary["tuned_us"])
canvases = re.findall(r'<canvas id="(by-trials|by-seconds|groups|groups-seconds|scatter)"[^>]*style="[^"]*height: \d+', dom)
assert len(canvases) == 5, f"charts drawn: {canvases}"
# The charts hold the job's points, as /api/jobs/ID has them (each canvas says how many it plots).
job = json.load(open(job_path))
plotted = {c: int(n) for c, n in re.findall(r'<canvas id="([a-z-]+)" data-points="(\d+)"', dom)}
want = {
    "by-trials": sum(isinstance(p.get("tuned_us"), (int, float)) for p in job["convergence"]),
    "by-seconds": sum(isinstance(p.get("tuned_us"), (int, float)) for p in job["convergence"]),
    "groups": sum(isinstance(p[1], (int, float)) for s in job["group_convergence"].values() for p in s),
    "groups-seconds": sum(isinstance(p[1], (int, float)) and len(p) > 2 for s in job["group_convergence"].values() for p in s),
    "scatter": sum(len(g["candidates"]) for g in job["group_details"]),
}
assert all(want[k] > 0 for k in want), want
assert plotted == want, f"points plotted {plotted}, the job has {want}"
# The selected (newest) job's candidates by status add up to what status --json says it measured.
shown = status["jobs"][-1]
counts = re.search(r'<table id="statuses">.*?<tbody>(.*?)</tbody>', dom, re.S).group(1)
by_status = {a: int(b) for a, b in re.findall(r"<tr><td[^>]*>([a-z_]+)</td><td>(\d+)</td></tr>", counts)}
assert sum(by_status.values()) == shown["candidates_measured"], (by_status, shown["candidates_measured"])
decisions = re.search(r'<table id="decisions">.*?<tbody>(.*?)</tbody>', dom, re.S).group(1).count("<tr>")
if "FUSETUNE_REPORT" not in dom:  # live: the workers' timelines and the service's figures too
    assert re.search(r'<canvas id="timeline"[^>]*style="[^"]*height: \d+', dom), "no worker timeline drawn"
    line = re.search(r'id="service-line">([^<]*)<', dom).group(1)
    assert re.match(r"\d+ task results, \d+ groups answered by the database \(cache hit rate", line), line
    print(f"{name}: the workers' timeline is drawn; {line}")
print(f"{name}: Chromium shows {len(rows)} job(s) as status --json has them, 5 charts holding the job's points "
      f"({', '.join(f'{k} {v}' for k, v in plotted.items())}), candidates by status "
      f"{by_status}, {decisions} fused groups against their parts; screenshot {shot}")
