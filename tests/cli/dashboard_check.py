"""Checks a coordinator's HTTP side after a job ran to its end (tests/cli/dashboard.sh).

usage: dashboard_check.py HTTP_URL STATUS_JSON DATABASE GRAFANA_JSON WORKER_METRICS_URL
- /metrics parses with prometheus_client's text parser, and its figures agree with the database
  (jobs and tasks by state, candidates measured) and with the run (one lease per result, every
  result's duration observed);
- /api/jobs is what `fusetune status --json` printed; /api/jobs/ID has the job's convergence;
- the dashboard's page, script, style and Chart.js are served;
- the worker's /metrics (its only device) counts the tasks the coordinator stored and the
  candidates the database holds;
- every query of the Grafana dashboard names metrics the coordinator or the worker exports.
Exits non-zero with the first disagreement.
"""
import json
import re
import sqlite3
import sys
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

url, status_path, db_path, grafana_path, worker_url = sys.argv[1:6]


def get(path):
    with urllib.request.urlopen(url + path, timeout=30) as r:
        return r.status, r.headers.get("Content-Type", ""), r.read()


_, ctype, body = get("/metrics")
assert ctype.startswith("text/plain"), ctype
samples = {}
for family in text_string_to_metric_families(body.decode()):
    for s in family.samples:
        samples[(s.name, tuple(sorted(s.labels.items())))] = s.value


def value(name, **labels):
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


db = sqlite3.connect(db_path)
for state, n in db.execute("SELECT state, count(*) FROM jobs GROUP BY state"):
    assert value("fusetune_jobs", state=state) == n, (state, n, value("fusetune_jobs", state=state))
for state, n in db.execute("SELECT state, count(*) FROM tasks GROUP BY state"):
    assert value("fusetune_tasks", state=state) == n, (state, n, value("fusetune_tasks", state=state))
measured = db.execute("SELECT count(*) FROM measurements").fetchone()[0]
by_status = {k[1][0][1]: v for k, v in samples.items() if k[0] == "fusetune_candidates_measured_total"}
assert sum(by_status.values()) == measured, (by_status, measured)
for status, n in db.execute("SELECT status, count(*) FROM measurements GROUP BY status"):
    assert by_status.get(status, 0) == n, (status, n, by_status)
results = value("fusetune_results_total")
assert results >= 1, "no result counted"
assert value("fusetune_task_duration_seconds_count") == results, "a result without its duration"
assert value("fusetune_leases_total") >= results
assert value("fusetune_workers", device=next(k[1][0][1] for k in samples if k[0] == "fusetune_workers")) == 1
assert value("fusetune_database_bytes") > 0
print(f"/metrics: {len(samples)} samples parse; {int(results)} results, {measured} candidates measured "
      f"({', '.join(f'{k} {int(v)}' for k, v in sorted(by_status.items()))}), as the database holds")

_, ctype, body = get("/api/jobs")
api = json.loads(body)
cli = json.load(open(status_path))
assert ctype.startswith("application/json"), ctype
assert api == cli, f"/api/jobs differs from status --json:\n{api}\n{cli}"
job = api["jobs"][0]
assert job["state"] == "done" and job["summary"]["tuned_us"] > 0, job
_, _, body = get(f"/api/jobs/{job['job_id']}")
detail = json.loads(body)
assert detail["candidates_measured"] == job["candidates_measured"]
points = [p for p in detail["convergence"] if isinstance(p.get("tuned_us"), (int, float))]
assert points and points[-1]["trials"] > 0, detail["convergence"]
_, _, body = get(f"/api/jobs/{job['job_id']}/tasks")
tasks = json.loads(body)["tasks"]
assert len(tasks) == job["tasks"] and all(t["state"] in ("done", "failed") for t in tasks), tasks[:3]
assert sum(t["state"] == "done" for t in tasks) == job["tasks_done"]
print(f"/api/jobs equals status --json; job {job['job_id']}: {len(points)} convergence points, "
      f"best {points[-1]['tuned_us']:.2f} us after {points[-1]['trials']} trials; /api/jobs/ID/tasks lists its {len(tasks)} tasks")

for path, needle in [("/", b"dashboard.js"), ("/dashboard.js", b"/api/jobs"), ("/dashboard.css", b"table"),
                     ("/chart.min.js", b"Chart")]:
    status, _, body = get(path)
    assert status == 200 and needle in body, (path, status)
try:
    get("/api/jobs/999")
    sys.exit("an unknown job was served")
except urllib.error.HTTPError as e:
    assert e.code == 404, e.code
print("the page, its script, style and Chart.js are served; an unknown job is 404")

with urllib.request.urlopen(worker_url, timeout=30) as r:
    worker = {}
    for family in text_string_to_metric_families(r.read().decode()):
        for s in family.samples:
            worker[(s.name, tuple(sorted(s.labels.items())))] = s.value
wsum = lambda name: sum(v for (n, _), v in worker.items() if n == name)
assert wsum("fusetune_worker_tasks_total") == results, (wsum("fusetune_worker_tasks_total"), results)
assert wsum("fusetune_worker_candidates_total") == measured, (wsum("fusetune_worker_candidates_total"), measured)
assert wsum("fusetune_worker_measure_seconds_total") > 0 and wsum("fusetune_worker_compile_seconds_total") > 0
print(f"worker /metrics: {int(wsum('fusetune_worker_tasks_total'))} tasks and {int(wsum('fusetune_worker_candidates_total'))} "
      f"candidates, as the coordinator and the database count them")

grafana = json.load(open(grafana_path))
exported = {name for name, _ in samples} | {name for name, _ in worker}
queries = [t["expr"] for p in grafana["panels"] for t in p.get("targets", [])]
assert queries, "the Grafana dashboard has no query"
for q in queries:
    for name in re.findall(r"\bfusetune_[a-z_]+", q):
        assert name in exported, f"Grafana query {q!r} names {name}, which no /metrics exports"
print(f"the Grafana dashboard's {len(queries)} queries name only exported metrics")
