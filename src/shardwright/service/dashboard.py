"""The dashboard at ``GET /``: one static page, no build step, no data in it.

The page itself holds nothing secret; it asks for the API token once (a form, or
``/#token=...`` in the address, which browsers never send to the server), keeps it in
``sessionStorage`` (gone when the tab closes) and calls the same ``/api/v1`` endpoints as
everyone else with ``Authorization: Bearer``. Everything shown is set with ``textContent``.

An operator works from it: the jobs filtered by state; a job's page (its attempts with their
errors, output location, items/s and ETA, the log's tail) with cancel and retry; and a submit
form generated from each pipeline's JSON Schema (``GET /api/v1/pipelines``) and the options'
schema (``/openapi.json``), checked in the page before it is sent. Storage options typed into
the form are credentials: they live in the form field only, are sent once with the job and
cleared; nothing is kept in any browser storage.
"""

DASHBOARD_HTML = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>shardwright jobs</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;width:100%}th,td{border-bottom:1px solid #ddd;padding:.35em .5em;text-align:left;vertical-align:top}
.bar{width:12em;height:.8em;background:#eee;border-radius:.4em;overflow:hidden}.bar>div{height:100%;background:#3a7}
.PENDING{color:#888}.RUNNING{color:#06c}.SUCCEEDED{color:#083}.FAILED{color:#c22}.CANCELED{color:#a60}
.error,.form-error{color:#c22;max-width:40em;white-space:pre-wrap}#status{color:#666}
pre#job-log{background:#f6f6f6;padding:.5em;max-height:30em;overflow:auto;white-space:pre-wrap}
fieldset{margin:.5em 0}label{display:block;margin:.3em 0}.hint{color:#666;font-size:.9em}
nav{margin-bottom:1em}nav button,nav select{margin-right:.5em}dl{display:grid;grid-template-columns:max-content auto;gap:.2em 1em}
</style></head>
<body>
<h1>shardwright jobs</h1>
<form id="login" hidden>
 <label>API token <input id="token" type="password" autocomplete="off" size="50"></label>
 <button id="login-button" type="submit">Sign in</button>
 <span id="login-message"></span>
</form>
<div id="main" hidden>
 <nav>
  <button id="show-jobs" type="button">Jobs</button>
  <button id="new-job" type="button">New job</button>
  <label style="display:inline">state <select id="state-filter">
   <option value="">all</option><option value="PENDING">PENDING</option><option value="RUNNING">RUNNING</option>
   <option value="SUCCEEDED">SUCCEEDED</option><option value="FAILED">FAILED</option><option value="CANCELED">CANCELED</option>
  </select></label>
  <button id="logout" type="button">Sign out</button>
 </nav>
 <p id="status">loading...</p>
 <section id="jobs-view">
  <table><thead><tr><th>job</th><th>pipeline</th><th>state</th><th>progress</th><th>attempts</th><th>error</th><th></th></tr></thead>
  <tbody id="jobs"></tbody></table>
 </section>
 <section id="job-page" hidden>
  <h2>job <span id="job-id"></span> <span id="job-state"></span></h2>
  <p id="job-actions"></p>
  <dl>
   <dt>pipeline</dt><dd id="job-pipeline"></dd>
   <dt>output</dt><dd id="job-output"></dd>
   <dt>progress</dt><dd id="job-progress"></dd>
   <dt>speed</dt><dd id="job-speed"></dd>
   <dt>ETA</dt><dd id="job-eta"></dd>
   <dt>executor</dt><dd id="job-executor"></dd>
   <dt>config</dt><dd id="job-config"></dd>
   <dt>options</dt><dd id="job-options"></dd>
   <dt>error</dt><dd id="job-error" class="error"></dd>
  </dl>
  <h3>attempts</h3>
  <table><thead><tr><th>#</th><th>trigger</th><th>outcome</th><th>started</th><th>finished</th><th>process</th><th>error</th></tr></thead>
  <tbody id="job-attempts"></tbody></table>
  <h3>inputs <span class="hint">(done / in progress / pending / failed, as the output records them)</span></h3>
  <p id="job-inputs-counts"></p>
  <ul id="job-inputs"></ul>
  <h3>output history <span class="hint">(every optimize() call on the output, as the output records it)</span></h3>
  <table><thead><tr><th>started</th><th>node</th><th>host / pid</th><th>ended</th><th>inputs done</th><th>items</th><th>error</th></tr></thead>
  <tbody id="job-history"></tbody></table>
  <p id="job-history-note" class="hint"></p>
  <h3>log (end)</h3>
  <pre id="job-log"></pre>
 </section>
 <section id="submit-view" hidden>
  <h2>New job</h2>
  <form id="submit-form" novalidate>
   <label>pipeline <select id="form-pipeline"></select></label>
   <p id="form-description" class="hint"></p>
   <label>output directory <input id="form-output-dir" size="60" placeholder="/data/datasets/name or s3://bucket/prefix"></label>
   <label>inputs (a JSON list, or a source such as {"source": "jsonl", "url": "/data/raw/"})
    <textarea id="form-inputs" rows="3" cols="60" placeholder="[1, 2, 3]"></textarea></label>
   <fieldset id="form-config"><legend>config</legend></fieldset>
   <fieldset id="form-options"><legend>options</legend></fieldset>
   <label>executor <select id="form-executor"><option value="local">local</option><option value="slurm">slurm</option><option value="ray">ray</option></select>
    array tasks <input id="form-array" type="number" min="1" value="1" size="5"></label>
   <label>storage options (JSON; credentials: sent once with the job, kept in the server's memory only, never stored here)
    <textarea id="form-storage-options" rows="2" cols="60" autocomplete="off" spellcheck="false" placeholder='{"endpoint_url": "..."}'></textarea></label>
   <button id="form-submit" type="submit">Submit</button>
  </form>
  <div id="form-errors" class="form-error"></div>
 </section>
</div>
<script>
"use strict";
const KEY = "shardwright-token";
const hash = new URLSearchParams(location.hash.slice(1));
// #token=...&job=ID: keep the token out of the address, and the job to open in it
const keep = hash.get("job") ? "#job=" + encodeURIComponent(hash.get("job")) : "";
if (hash.get("token")) { sessionStorage.setItem(KEY, hash.get("token")); history.replaceState(null, "", location.pathname + keep); }
let timer = null, view = "jobs", openJob = null, pipelines = [], optionSchema = null, historyDue = 0;
const $ = (id) => document.getElementById(id);
function el(tag, text, cls) { const e = document.createElement(tag); if (text !== undefined) e.textContent = text; if (cls) e.className = cls; return e; }
function showLogin(message) {
  if (timer) { clearInterval(timer); timer = null; }
  $("main").hidden = true; $("login").hidden = false;
  $("login-message").textContent = message || "";
}
async function api(method, path, body) {
  const headers = {"Authorization": "Bearer " + sessionStorage.getItem(KEY)};
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const r = await fetch(path.startsWith("/openapi") ? path : "/api/v1" + path,
                        {method, headers, body: body === undefined ? undefined : JSON.stringify(body)});
  if (r.status === 401) { sessionStorage.removeItem(KEY); showLogin("wrong token"); throw new Error("unauthorized"); }
  if (r.status === 204) return null;
  const data = await r.json();
  if (!r.ok) { throw new Error(data.error ? data.error.message : r.statusText); }
  return data;
}
function errorText(e) {
  return e ? e.kind + " error: " + e.type + (e.input_index !== null && e.input_index !== undefined ? " on input " + e.input_index : "") + ": " + e.message : "";
}
function progressText(p) { return p.inputs_done + " / " + p.inputs_total + " inputs, " + p.items + " items"; }
function duration(s) {
  if (s === null || s === undefined) return "";
  s = Math.round(s); const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60);
  return (h ? h + " h " : "") + (h || m ? m + " min " : "") + (s % 60) + " s";
}
function row(job) {
  const tr = el("tr"); tr.id = "job-" + job.id; tr.dataset.state = job.state;
  const link = el("a", job.id, "job-link"); link.href = "#job=" + job.id;
  link.onclick = (ev) => { ev.preventDefault(); showJob(job.id); };
  const idCell = el("td"); idCell.append(link); tr.append(idCell, el("td", job.pipeline));
  tr.append(el("td", job.state + (job.cancel_requested && job.state === "RUNNING" ? " (canceling)" : ""), "state " + job.state));
  const p = job.progress, pct = p.inputs_total ? Math.round(100 * p.inputs_done / p.inputs_total) : 0;
  const td = el("td"), bar = el("div", undefined, "bar"), fill = el("div"); fill.style.width = pct + "%"; bar.append(fill);
  td.append(bar, el("span", progressText(p), "progress-text")); tr.append(td);
  const attempts = el("td", String(job.attempts), "attempts");
  attempts.title = job.attempt_history.map(a => "#" + a.number + " " + a.trigger + ": " + a.outcome + (a.error ? " (" + a.error.type + ")" : "")).join("\\n");
  tr.append(attempts, el("td", errorText(job.error), "error"));
  const actions = el("td"); actions.append(...buttons(job)); tr.append(actions);
  return tr;
}
function buttons(job) {
  const out = [];
  if (job.state === "PENDING" || job.state === "RUNNING") out.push(button("cancel", job));
  if (job.state === "FAILED" || job.state === "CANCELED") out.push(button("retry", job));
  return out;
}
function button(what, job) {
  const b = el("button", what, what); b.type = "button"; b.dataset.id = job.id;
  b.onclick = async () => { b.disabled = true; try { await api("POST", "/jobs/" + job.id + "/" + what); } catch (err) { $("status").textContent = err.message; } refresh(); };
  return b;
}
async function refreshJobs() {
  const state = $("state-filter").value;
  const data = await api("GET", "/jobs" + (state ? "?state=" + state : ""));
  $("jobs").replaceChildren(...data.jobs.slice().reverse().map(row));
  const counts = {}; data.jobs.forEach(j => counts[j.state] = (counts[j.state] || 0) + 1);
  $("status").textContent = data.jobs.length + " jobs" + (state ? " " + state : "") + ": " + Object.entries(counts).map(([k, v]) => v + " " + k).join(", ") + " (updated " + new Date().toLocaleTimeString() + ")";
}
async function refreshJob() {
  const job = await api("GET", "/jobs/" + openJob);
  $("job-id").textContent = job.id; $("job-state").textContent = job.state; $("job-state").className = job.state;
  $("job-actions").replaceChildren(...buttons(job));
  $("job-pipeline").textContent = job.pipeline; $("job-output").textContent = job.output_dir;
  $("job-progress").textContent = progressText(job.progress);
  $("job-speed").textContent = job.items_per_second !== null ? job.items_per_second.toFixed(1) + " items/s" : "";
  $("job-eta").textContent = duration(job.eta_seconds);
  $("job-executor").textContent = job.executor.kind + (job.executor.kind === "slurm" ? " (" + job.executor.array + " tasks)" : "") + (job.executor.kind === "ray" ? " (Ray cluster)" : "");
  $("job-config").textContent = JSON.stringify(job.config); $("job-options").textContent = JSON.stringify(job.options);
  $("job-error").textContent = errorText(job.error);
  $("job-attempts").replaceChildren(...job.attempt_history.map(a => {
    const tr = el("tr"); tr.className = "attempt";
    tr.append(el("td", String(a.number)), el("td", a.trigger), el("td", a.outcome, "outcome"), el("td", a.started_at || ""),
              el("td", a.finished_at || ""), el("td", a.pid ? "pid " + a.pid : a.slurm_job_ids.join(",")), el("td", errorText(a.error), "error"));
    return tr;
  }));
  if (historyDue-- <= 0) {  // the output's own history: every few seconds (a listing on object stores)
    historyDue = 4;
    const h = await api("GET", "/jobs/" + openJob + "/history");
    $("job-history").replaceChildren(...h.runs.map(r => {
      const tr = el("tr"); tr.className = "run";
      const e = r.error ? r.error.kind + " error: " + r.error.type + ": " + r.error.message : "";
      tr.append(el("td", new Date(r.started_at * 1000).toISOString()), el("td", r.node_rank + " of " + r.num_nodes + (r.slurm_task ? " (task " + r.slurm_task + ")" : "")),
                el("td", r.host + " / " + r.pid), el("td", r.ended, "ended"), el("td", r.inputs_done_before + " -> " + r.inputs_done_after + " of " + r.inputs_total),
                el("td", String(r.items_written)), el("td", e, "error"));
      return tr;
    }));
    $("job-history-note").textContent = h.note || "";
    const s = await api("GET", "/jobs/" + openJob + "/inputs");
    const c = s.counts, eta = s.eta_seconds == null ? "" : ", about " + Math.round(s.eta_seconds) + " s left";
    $("job-inputs-counts").textContent = c.done == null ? (s.note || "") :
      c.done + " done" + (c.in_tails ? " (+" + c.in_tails + " kept in pending tails, committed on resume)" : "") + ", " + c.in_progress + " in progress, " + c.pending + " pending, " + c.failed + " failed" + eta;
    $("job-inputs").replaceChildren(...s.in_progress.map(e => {
      let state = "";
      try { const v = JSON.parse(e.state || "null"); if (v && typeof v === "object") state = Object.entries(v).map(([k, x]) => k + " " + x).join(", "); else if (v != null) state = String(v); } catch (err) { state = e.state; }
      if (e.calls) state += (state ? ", " : "") + e.calls + (e.calls === 1 ? " call" : " calls") + " in flight";
      return el("li", e.name + (state ? ": " + state : "") + " (worker " + e.worker + ", " + e.place + ")");
    }));
  }
  const log = await api("GET", "/jobs/" + openJob + "/logs");
  $("job-log").textContent = log.text.split("\\n").slice(-200).join("\\n");
  $("status").textContent = "job " + job.id + " (updated " + new Date().toLocaleTimeString() + ")";
}
async function refresh() {
  try {
    if (view === "jobs") await refreshJobs(); else if (view === "job") await refreshJob();
  } catch (err) { if (err.message !== "unauthorized") $("status").textContent = "error: " + err.message; }
}
function show(which) {
  view = which;
  $("jobs-view").hidden = which !== "jobs"; $("job-page").hidden = which !== "job"; $("submit-view").hidden = which !== "submit";
  refresh();
}
function showJob(id) { openJob = id; historyDue = 0; history.replaceState(null, "", "#job=" + id); show("job"); }

// --- the submit form, generated from JSON Schemas -------------------------------------------
function resolve(schema, root) {
  if (schema && schema.$ref) { return resolve(root.$defs ? root.$defs[schema.$ref.split("/").pop()] : (root.components || {}).schemas[schema.$ref.split("/").pop()], root); }
  if (schema && schema.anyOf) {  // Optional[X]: the non-null branch
    const real = schema.anyOf.filter(s => s.type !== "null");
    if (real.length === 1) return Object.assign({}, resolve(real[0], root), {description: schema.description, default: schema.default, nullable: true});
    return Object.assign({}, schema, {type: "string", nullable: true, any: true});
  }
  return schema || {};
}
function field(prefix, name, schema, required) {
  const label = el("label"); label.append(el("span", name + (required ? " *" : "") + " "));
  let input;
  if (schema.enum || schema.const !== undefined) {
    input = el("select"); if (!required) input.append(new Option("(default)", ""));
    (schema.enum || [schema.const]).forEach(v => input.append(new Option(String(v), String(v))));
  } else if (schema.type === "boolean") {
    input = el("input"); input.type = "checkbox"; input.checked = schema.default === true;
  } else {
    input = el("input"); input.type = (schema.type === "integer" || schema.type === "number") ? "number" : "text";
    if (schema.default !== undefined && schema.default !== null) input.placeholder = String(schema.default);
  }
  input.name = prefix + "." + name; input.dataset.field = prefix + "." + name; input.schemaInfo = {schema, required};
  label.append(input);
  if (schema.description) label.append(el("span", " " + schema.description, "hint"));
  return label;
}
function buildFields(container, prefix, schema, root) {
  container.querySelectorAll("label").forEach(l => l.remove());
  if (!schema) { container.hidden = true; return; }
  container.hidden = false;
  const required = schema.required || [];
  Object.entries(schema.properties || {}).forEach(([name, prop]) => container.append(field(prefix, name, resolve(prop, root), required.includes(name))));
}
function readField(input) {
  const {schema, required} = input.schemaInfo, name = input.dataset.field;
  if (input.type === "checkbox") return [input.checked === (schema.default === true) ? undefined : input.checked, null];
  const text = input.value.trim();
  if (text === "") return [undefined, required ? name + ": required" : null];
  let value = text;
  if (schema.type === "integer" || schema.type === "number") {
    value = Number(text);
    if (!Number.isFinite(value) || (schema.type === "integer" && !Number.isInteger(value))) return [undefined, name + ": must be " + (schema.type === "integer" ? "an integer" : "a number")];
    if (schema.minimum !== undefined && value < schema.minimum) return [undefined, name + ": must be at least " + schema.minimum];
    if (schema.exclusiveMinimum !== undefined && value <= schema.exclusiveMinimum) return [undefined, name + ": must be more than " + schema.exclusiveMinimum];
    if (schema.maximum !== undefined && value > schema.maximum) return [undefined, name + ": must be at most " + schema.maximum];
  } else if (schema.any) {
    try { value = JSON.parse(text); } catch (e) { value = text; }
  }
  return [value, null];
}
function collect(container) {
  const values = {}, problems = [];
  container.querySelectorAll("[data-field]").forEach(input => {
    const [value, problem] = readField(input);
    if (problem) problems.push(problem);
    else if (value !== undefined) values[input.dataset.field.split(".").slice(1).join(".")] = value;
  });
  return [values, problems];
}
function choosePipeline() {
  const p = pipelines.find(x => x.name === $("form-pipeline").value);
  $("form-description").textContent = p ? p.description : "";
  buildFields($("form-config"), "config", p ? p.config_schema : null, p ? p.config_schema : {});
}
async function openForm() {
  show("submit");
  if (!pipelines.length) {
    pipelines = (await api("GET", "/pipelines")).pipelines;
    $("form-pipeline").replaceChildren(...pipelines.map(p => new Option(p.name, p.name)));
    const spec = await api("GET", "/openapi.json");
    optionSchema = spec.components.schemas.JobOptions;
    buildFields($("form-options"), "options", optionSchema, spec);
    choosePipeline();
  }
}
async function submitJob(ev) {
  ev.preventDefault();
  const problems = [];
  const output = $("form-output-dir").value.trim();
  if (!output) problems.push("output_dir: required");
  let inputs = null;
  try { inputs = JSON.parse($("form-inputs").value); } catch (e) { problems.push("inputs: not JSON (" + e.message + ")"); }
  const isSource = inputs !== null && typeof inputs === "object" && !Array.isArray(inputs);
  if (inputs !== null && !(Array.isArray(inputs) ? inputs.length > 0 : isSource && inputs.source && inputs.url)) {
    problems.push('inputs: must be a non-empty JSON list, or a source {"source": "parquet", "url": "..."}');
  }
  const [config, configProblems] = collect($("form-config"));
  const [options, optionProblems] = collect($("form-options"));
  problems.push(...configProblems, ...optionProblems);
  const body = {pipeline: $("form-pipeline").value, inputs, output_dir: output, config, options,
                executor: {kind: $("form-executor").value, array: Number($("form-array").value || 1)}};
  if (body.executor.kind !== "slurm") body.executor.array = 1;
  const secretText = $("form-storage-options").value.trim();
  if (secretText) {
    try { body.storage_options = JSON.parse(secretText); } catch (e) { problems.push("storage_options: not JSON"); }
  }
  $("form-errors").textContent = problems.join("\\n");
  if (problems.length) return;
  try {
    const job = await api("POST", "/jobs", body);
    $("form-storage-options").value = "";  // credentials: sent once, not kept in the page
    showJob(job.id);
  } catch (err) { if (err.message !== "unauthorized") $("form-errors").textContent = err.message; }
}
function start() {
  $("login").hidden = true; $("main").hidden = false;
  const wanted = new URLSearchParams(location.hash.slice(1)).get("job");
  if (wanted) showJob(wanted); else show("jobs");
  if (!timer) timer = setInterval(refresh, 1000);
}
$("login").onsubmit = (ev) => { ev.preventDefault(); sessionStorage.setItem(KEY, $("token").value.trim()); start(); };
$("logout").onclick = () => { sessionStorage.removeItem(KEY); showLogin("signed out"); };
$("show-jobs").onclick = () => { history.replaceState(null, "", location.pathname); show("jobs"); };
$("new-job").onclick = () => { openForm().catch(err => { $("form-errors").textContent = err.message; }); };
$("state-filter").onchange = () => show("jobs");
$("form-pipeline").onchange = choosePipeline;
$("submit-form").onsubmit = submitJob;
if (sessionStorage.getItem(KEY)) start(); else showLogin();
</script>
</body></html>
"""
