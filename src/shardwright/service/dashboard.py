"""The dashboard at ``GET /``: one static page, no build step, no data in it.

The page itself holds nothing secret; it asks for the API token once (a form, or
``/#token=...`` in the address, which browsers never send to the server), keeps it in
``sessionStorage`` (gone when the tab closes) and calls the same ``/api/v1`` endpoints as
everyone else with ``Authorization: Bearer``. Everything shown is set with ``textContent``.
"""

DASHBOARD_HTML = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>shardwright jobs</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;width:100%}th,td{border-bottom:1px solid #ddd;padding:.35em .5em;text-align:left;vertical-align:top}
.bar{width:12em;height:.8em;background:#eee;border-radius:.4em;overflow:hidden}.bar>div{height:100%;background:#3a7}
.PENDING{color:#888}.RUNNING{color:#06c}.SUCCEEDED{color:#083}.FAILED{color:#c22}.CANCELED{color:#a60}
.error{color:#c22;max-width:40em;white-space:pre-wrap}#status{color:#666}
</style></head>
<body>
<h1>shardwright jobs</h1>
<form id="login" hidden>
 <label>API token <input id="token" type="password" autocomplete="off" size="50"></label>
 <button id="login-button" type="submit">Sign in</button>
 <span id="login-message"></span>
</form>
<div id="main" hidden>
 <p id="status">loading...</p>
 <table><thead><tr><th>job</th><th>pipeline</th><th>state</th><th>progress</th><th>attempts</th><th>error</th><th></th></tr></thead>
 <tbody id="jobs"></tbody></table>
 <p><button id="logout" type="button">Sign out</button></p>
</div>
<script>
"use strict";
const KEY = "shardwright-token";
const hash = new URLSearchParams(location.hash.slice(1));
if (hash.get("token")) { sessionStorage.setItem(KEY, hash.get("token")); history.replaceState(null, "", location.pathname); }
let timer = null;
function el(tag, text, cls) { const e = document.createElement(tag); if (text !== undefined) e.textContent = text; if (cls) e.className = cls; return e; }
function showLogin(message) {
  if (timer) { clearInterval(timer); timer = null; }
  document.getElementById("main").hidden = true; document.getElementById("login").hidden = false;
  document.getElementById("login-message").textContent = message || "";
}
async function api(method, path) {
  const r = await fetch("/api/v1" + path, {method, headers: {"Authorization": "Bearer " + sessionStorage.getItem(KEY)}});
  if (r.status === 401) { sessionStorage.removeItem(KEY); showLogin("wrong token"); throw new Error("unauthorized"); }
  const body = await r.json();
  if (!r.ok) { throw new Error(body.error ? body.error.message : r.statusText); }
  return body;
}
function row(job) {
  const tr = el("tr"); tr.id = "job-" + job.id; tr.dataset.state = job.state;
  tr.append(el("td", job.id), el("td", job.pipeline));
  const st = el("td", job.state + (job.cancel_requested && job.state === "RUNNING" ? " (canceling)" : ""), "state " + job.state); tr.append(st);
  const p = job.progress, pct = p.inputs_total ? Math.round(100 * p.inputs_done / p.inputs_total) : 0;
  const td = el("td"), bar = el("div", undefined, "bar"), fill = el("div"); fill.style.width = pct + "%"; bar.append(fill);
  td.append(bar, el("span", p.inputs_done + " / " + p.inputs_total + " inputs, " + p.items + " items", "progress-text")); tr.append(td);
  const attempts = el("td", String(job.attempts), "attempts");
  attempts.title = job.attempt_history.map(a => "#" + a.number + " " + a.trigger + ": " + a.outcome + (a.error ? " (" + a.error.type + ")" : "")).join("\\n");
  tr.append(attempts);
  const e = job.error;
  tr.append(el("td", e ? e.kind + " error: " + e.type + (e.input_index !== null && e.input_index !== undefined ? " on input " + e.input_index : "") + ": " + e.message : "", "error"));
  const actions = el("td");
  if (job.state === "PENDING" || job.state === "RUNNING") actions.append(button("cancel", job));
  if (job.state === "FAILED" || job.state === "CANCELED") actions.append(button("retry", job));
  tr.append(actions);
  return tr;
}
function button(what, job) {
  const b = el("button", what, what); b.type = "button"; b.dataset.id = job.id;
  b.onclick = async () => { b.disabled = true; try { await api("POST", "/jobs/" + job.id + "/" + what); } catch (err) { document.getElementById("status").textContent = err.message; } refresh(); };
  return b;
}
async function refresh() {
  let data;
  try { data = await api("GET", "/jobs"); } catch (err) { if (err.message !== "unauthorized") document.getElementById("status").textContent = "error: " + err.message; return; }
  const body = document.getElementById("jobs"); body.replaceChildren(...data.jobs.slice().reverse().map(row));
  const counts = {}; data.jobs.forEach(j => counts[j.state] = (counts[j.state] || 0) + 1);
  document.getElementById("status").textContent = data.jobs.length + " jobs: " + Object.entries(counts).map(([k, v]) => v + " " + k).join(", ") + " (updated " + new Date().toLocaleTimeString() + ")";
}
function start() {
  document.getElementById("login").hidden = true; document.getElementById("main").hidden = false;
  refresh(); if (!timer) timer = setInterval(refresh, 1000);
}
document.getElementById("login").onsubmit = (ev) => { ev.preventDefault(); sessionStorage.setItem(KEY, document.getElementById("token").value.trim()); start(); };
document.getElementById("logout").onclick = () => { sessionStorage.removeItem(KEY); showLogin("signed out"); };
if (sessionStorage.getItem(KEY)) start(); else showLogin();
</script>
</body></html>
"""
