"""The status page served at ``/``: one HTML file whose inline script renders ``/status.json``.

No CDN and no build step, so it works on a cluster without internet access: the page fetches the
document every two seconds and redraws three tables (containers, partitions, pending startpoints).
Values are inserted as text, never as HTML.
"""

STATUS_PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>millstream job status</title>
<style>
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.3em; } h2 { font-size: 1.05em; margin-top: 1.5em; }
table { border-collapse: collapse; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; }
th { background: #f3f3f3; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
#error { color: #a00; } .muted { color: #777; }
</style>
</head>
<body>
<h1>Job <span id="job">…</span> <span class="muted">generation <span id="generation">…</span></span></h1>
<p id="error"></p>
<h2>Containers</h2><table id="containers"></table>
<h2>Partitions</h2><table id="partitions"></table>
<h2>Pending startpoints</h2><table id="startpoints"></table>
<p class="muted">Refreshed every 2 s from <a href="status.json">status.json</a>;
metrics at <a href="metrics">/metrics</a>.</p>
<script>
"use strict";
function fill(id, columns, rows) {
  const table = document.getElementById(id);
  table.replaceChildren();
  const head = table.insertRow();
  for (const column of columns) {
    const th = document.createElement("th");
    th.textContent = column;
    head.appendChild(th);
  }
  for (const row of rows) {
    const tr = table.insertRow();
    for (const column of columns) {
      const value = row[column];
      const td = tr.insertCell();
      td.textContent = value === null || value === undefined ? "-" : String(value);
      if (typeof value === "number") td.className = "num";
    }
  }
  if (!rows.length) table.insertRow().insertCell().textContent = "none";
}
async function refresh() {
  try {
    const response = await fetch("status.json", {cache: "no-store"});
    if (!response.ok) throw new Error(response.status + " " + (await response.text()));
    const status = await response.json();
    document.getElementById("job").textContent = status.job.name + " (" + status.job.id + ")";
    document.getElementById("generation").textContent = status.generation;
    const containers = Object.entries(status.containers).map(([id, c]) => Object.assign({container: id}, c));
    fill("containers", ["container", "state", "attempt", "generation", "host", "pid", "error"], containers);
    fill("partitions", ["task", "system", "stream", "partition", "processed", "lag", "checkpointed", "upcoming",
                        "checkpoint_lag"], status.partitions);
    fill("startpoints", ["task", "ssp", "startpoint"], status.startpoints.pending);
    document.getElementById("error").textContent = "";
  } catch (error) {
    document.getElementById("error").textContent = "status unavailable: " + error;
  }
}
refresh();
setInterval(refresh, 2000);
</script>
</body>
</html>
"""
