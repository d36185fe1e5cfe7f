// The live dashboard: polls the coordinator's JSON API (docs/dashboards.md) every two seconds and
// draws the jobs, the selected job's convergence and the workers. The same script renders
// `fusetune report`'s static page, where window.FUSETUNE_REPORT holds the API's answers.
"use strict";

const report = window.FUSETUNE_REPORT || null;
// The job shown: the report's, the one the address names (#job=3), else the newest.
let selected = report ? report.job.job_id : (Number((location.hash.match(/job=(\d+)/) || [])[1]) || null);
const charts = {};

async function api(path) {
  if (report) return report[path];
  const r = await fetch(path);
  if (!r.ok) throw new Error(path + ": " + r.status);
  return r.json();
}

function cell(text, cls) {
  const td = document.createElement("td");
  if (text instanceof Node) td.appendChild(text); else td.textContent = text;
  if (cls) td.className = cls;
  return td;
}

function fixed(v, digits) { return typeof v === "number" ? v.toFixed(digits) : "–"; }

function drawJobs(jobs) {
  const body = document.querySelector("#jobs tbody");
  body.replaceChildren();
  for (const j of jobs) {
    const tr = document.createElement("tr");
    tr.className = "job" + (j.job_id === selected ? " selected" : "");
    tr.dataset.job = j.job_id;
    const done = j.tasks_done + j.tasks_failed;
    const bar = document.createElement("progress");
    bar.max = Math.max(1, j.tasks);
    bar.value = done;
    const s = j.summary || {};
    tr.append(cell(j.job_id), cell(j.state, j.state === "failed" ? "failed" : ""), cell(j.model_name), cell(j.device),
              cell(done + "/" + j.tasks), cell(bar), cell(j.candidates_measured), cell(j.cache_hits),
              cell(fixed(s.tuned_us, 1)), cell(fixed(s.unfused_us, 1)),
              cell(s.tuned_us && s.unfused_us ? (s.unfused_us / s.tuned_us).toFixed(2) + "×" : "–"));
    tr.addEventListener("click", () => { selected = j.job_id; location.hash = "job=" + j.job_id; refresh(); });
    body.appendChild(tr);
  }
}

// Draws `data` on the chart of canvas `id`, made with `config` (type, options) the first time.
function chart(id, data, config) {
  if (charts[id]) {
    charts[id].data = data;
    charts[id].update("none");
    return;
  }
  charts[id] = new Chart(document.getElementById(id), Object.assign({ data: data }, config));
}

function line(id, datasets, xTitle) {
  chart(id, { datasets: datasets }, {
    type: "line",
    options: { animation: false, parsing: false, plugins: { legend: { display: datasets.length < 8 } },
               scales: { x: { type: "linear", title: { display: true, text: xTitle } },
                         y: { title: { display: true, text: "µs (measured)" } } } },
  });
}

function drawJob(job) {
  document.getElementById("job").hidden = false;
  document.getElementById("job-id").textContent = job.job_id;
  document.getElementById("job-model").textContent = job.model_name;
  const s = job.summary || {};
  document.getElementById("job-line").textContent =
      job.state + " on " + (job.identity || job.device) + "; " + job.candidates_measured + " candidates measured, " +
      job.cache_hits + " cache hits" +
      (s.tuned_us ? "; tuned " + s.tuned_us.toFixed(1) + " µs against " + fixed(s.unfused_us, 1) + " µs unfused" : "");
  const points = (job.convergence || []).filter(p => typeof p.tuned_us === "number");
  line("by-trials", [{ label: "best plan", data: points.map(p => ({ x: p.trials, y: p.tuned_us })) }], "trials");
  line("by-seconds", [{ label: "best plan", data: points.map(p => ({ x: p.seconds, y: p.tuned_us })) }], "seconds");
  const series = (x) => Object.entries(job.group_convergence || {}).map(([signature, points]) => ({
    label: signature.slice(0, 12),
    data: points.filter(p => typeof p[1] === "number" && typeof p[x] === "number").map(p => ({ x: p[x], y: p[1] })),
  }));
  line("groups", series(0), "trials of the group");
  line("groups-seconds", series(2), "seconds");
  drawScatter(job.group_details || []);
  drawStatuses(job.candidates_by_status || {});
  drawDecisions(job.group_details || []);
}

// Modeled (the cost model's estimate) on one axis, measured on the other: never one figure.
function drawScatter(details) {
  const points = [];
  for (const g of details) for (const [modeled, measured] of g.candidates) points.push({ x: modeled, y: measured });
  const data = { datasets: [{ label: "candidates", data: points }] };
  chart("scatter", data, {
    type: "scatter",
    options: { animation: false, parsing: false, plugins: { legend: { display: false } },
               scales: { x: { type: "logarithmic", title: { display: true, text: "µs (modeled)" } },
                         y: { type: "logarithmic", title: { display: true, text: "µs (measured)" } } } },
  });
}

function drawStatuses(byStatus, table = "#statuses") {
  const body = document.querySelector(table + " tbody");
  body.replaceChildren();
  for (const [status, n] of Object.entries(byStatus)) {
    const tr = document.createElement("tr");
    tr.append(cell(status, status === "ok" ? "" : "failed"), cell(n));
    body.appendChild(tr);
  }
}

function drawDecisions(details) {
  const body = document.querySelector("#decisions tbody");
  body.replaceChildren();
  for (const g of details.filter(d => d.nodes > 1)) {
    const tr = document.createElement("tr");
    const ratio = typeof g.fused_us === "number" && typeof g.parts_us === "number" ? (g.fused_us / g.parts_us).toFixed(2) : "–";
    tr.append(cell(g.pattern), cell(g.nodes), cell(fixed(g.fused_us, 1)), cell(fixed(g.parts_us, 1)),
              cell(g.chosen ? "fused" : "parts"), cell(ratio));
    body.appendChild(tr);
  }
}

function drawWorkers(workers) {
  const body = document.querySelector("#workers tbody");
  body.replaceChildren();
  for (const w of workers) {
    const tr = document.createElement("tr");
    tr.append(cell(w.worker_id), cell(w.device), cell(w.tasks_held), cell(w.draining ? "draining" : w.tasks_held ? "busy" : "idle"),
              cell(w.last_heard_s.toFixed(1) + " s ago"));
    body.appendChild(tr);
  }
}

const outcomeColors = { measuring: "#3b7ddd", ok: "#2e9e5b", failed: "#c0392b", "handed back": "#999999",
                        expired: "#e69b23", lost: "#7f3fbf", revoked: "#5d6d7e" };

// Each worker's leases as floating bars over the last minutes (seconds before now, now at 0).
function drawTimeline(workers) {
  const datasets = Object.entries(outcomeColors).map(([outcome, color]) => ({
    label: outcome, backgroundColor: color,
    data: workers.flatMap(w => w.timeline.filter(s => s.outcome === outcome)
                                   .map(s => ({ x: [-s.from_s, -s.to_s], y: w.worker_id }))),
  }));
  chart("timeline", { labels: workers.map(w => w.worker_id), datasets: datasets }, {
    type: "bar",
    options: { animation: false, indexAxis: "y", parsing: { xAxisKey: "x", yAxisKey: "y" }, aspectRatio: 4,
               scales: { x: { type: "linear", max: 0, title: { display: true, text: "seconds before now" } },
                         y: { type: "category", stacked: true } } },
  });
}

function drawService(service) {
  drawStatuses(service.candidates_by_status || {}, "#service-statuses");
  const looked = service.results + service.cache_hits;
  document.getElementById("service-line").textContent =
      service.results + " task results, " + service.cache_hits + " groups answered by the database (cache hit rate " +
      (looked ? (100 * service.cache_hits / looked).toFixed(1) + "%" : "–") + "), " + service.lease_expiries +
      " leases expired";
}

async function refresh() {
  try {
    const status = await api("/api/jobs");
    if (selected === null && status.jobs.length) selected = Math.max(...status.jobs.map(j => j.job_id));
    drawJobs(status.jobs);
    if (selected !== null) drawJob(await api("/api/jobs/" + selected));
    if (!report) {
      const service = await api("/api/workers");
      drawWorkers(service.workers);
      drawTimeline(service.workers);
      drawService(service);
    }
    document.getElementById("updated").textContent =
        report ? "report of job " + selected : "updated " + new Date().toLocaleTimeString();
    document.body.dataset.ready = "1";
  } catch (e) {
    document.getElementById("updated").textContent = "not reachable: " + e.message;
  }
}

function start() {
  if (report) document.getElementById("workers-section").hidden = true;  // a report has no live workers
  refresh();
  if (!report) setInterval(refresh, 2000);
}

// The page loads this deferred; a report carries it inline in its head, before the body exists.
if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start); else start();
