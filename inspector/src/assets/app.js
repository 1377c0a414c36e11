// The reel inspector page: vanilla JS, no build step. Hash routes: `#/` the runs
// table (filters, counts, cursor paging), `#/run/ID` one run (timeline, records,
// actions, live updates over server-sent events).
"use strict";
const BASE = location.pathname.endsWith("/") ? location.pathname : location.pathname + "/";
const STATUSES = ["running", "suspended", "completed", "failed", "cancelled", "parked", "paused", "enqueued"];
const PAGE = 50;          // runs per page
const ROWS = 300;         // timeline rows and records shown before "show more"
const app = document.getElementById("app");
let source = null;        // the EventSource of the run page

const esc = (s) => String(s ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
const enc = encodeURIComponent;
const badge = (s) => `<span class="badge s-${esc(s)}">${esc(s)}</span>`;
const runLink = (id) => `<a href="#/run/${enc(id)}">${esc(id)}</a>`;
const fmtMs = (ms) => ms < 1000 ? `${Math.round(ms)} ms` : ms < 60000 ? `${(ms / 1000).toFixed(2)} s` : `${(ms / 60000).toFixed(1)} min`;
const fmtTime = (ms) => ms ? new Date(ms).toISOString().replace("T", " ").replace("Z", "") : "";

async function api(path, options) {
  const res = await fetch(BASE + path, options);
  const body = await res.json().catch(() => ({ error: res.statusText }));
  if (!res.ok) throw new Error(body.error || res.statusText);
  return body;
}

function route() {
  if (source) { source.close(); source = null; }
  document.getElementById("live").textContent = "";
  const m = location.hash.match(/^#\/run\/(.+)$/);
  if (m) showRun(decodeURIComponent(m[1])); else showList(new URLSearchParams(location.hash.replace(/^#\/?\??/, "")));
}
window.addEventListener("hashchange", route);

// ---- runs table ----
const list = { cursors: [], status: "", workflow: "" };

async function showList(params) {
  list.status = params.get("status") || "";
  list.workflow = params.get("workflow") || "";
  list.cursors = [];
  app.innerHTML = `<div class="chips" id="chips"></div>
    <div class="chips"><label>workflow <input id="wf" value="${esc(list.workflow)}" placeholder="any"></label>
    <button id="apply">Filter</button></div>
    <table id="runs"><thead><tr><th>run</th><th>workflow</th><th>status</th><th>waiting on / error</th><th>parent</th></tr></thead><tbody></tbody></table>
    <div class="pager"><button id="first">First page</button><button id="prev">Previous</button><button id="next">Next page</button><span class="muted" id="pageinfo"></span></div>`;
  document.getElementById("apply").onclick = () => setFilter(list.status, document.getElementById("wf").value.trim());
  document.getElementById("first").onclick = () => { list.cursors = []; loadPage(); };
  document.getElementById("prev").onclick = () => { list.cursors.pop(); loadPage(); };
  loadCounts();
  loadPage();
}

function setFilter(status, workflow) {
  const p = new URLSearchParams();
  if (status) p.set("status", status);
  if (workflow) p.set("workflow", workflow);
  location.hash = "#/?" + p.toString();
}

async function loadCounts() {
  const c = await api("api/count");
  const chip = (s, label, n) => `<span class="chip ${list.status === s ? "on" : ""}" data-status="${s}">${label}<b>${n}</b></span>`;
  const el = document.getElementById("chips");
  if (!el) return;
  el.innerHTML = chip("", "all", c.total) + STATUSES.map((s) => chip(s, s, c.by_status[s] || 0)).join("");
  el.querySelectorAll(".chip").forEach((x) => x.onclick = () => setFilter(x.dataset.status, list.workflow));
}

async function loadPage() {
  const p = new URLSearchParams({ limit: PAGE });
  if (list.status) p.set("status", list.status);
  if (list.workflow) p.set("workflow", list.workflow);
  const cursor = list.cursors[list.cursors.length - 1];
  if (cursor) p.set("cursor", cursor);
  const tbody = document.querySelector("#runs tbody");
  let page;
  try { page = await api("api/runs?" + p); } catch (e) { tbody.innerHTML = `<tr><td colspan="5" class="error">${esc(e.message)}</td></tr>`; return; }
  tbody.innerHTML = page.runs.map((r) => `<tr data-run="${esc(r.run_id)}"><td>${runLink(r.run_id)}</td>
    <td>${esc(r.workflow)} <span class="muted">v${r.version}</span></td><td>${badge(r.status)}</td>
    <td>${esc(r.waiting_on || r.error || "")}</td><td>${r.parent ? runLink(r.parent) : ""}</td></tr>`).join("")
    || `<tr><td colspan="5" class="muted">no runs</td></tr>`;
  const next = document.getElementById("next");
  next.disabled = !page.next;
  next.onclick = () => { list.cursors.push(page.next); loadPage(); };
  document.getElementById("prev").disabled = list.cursors.length === 0;
  document.getElementById("pageinfo").textContent = `page ${list.cursors.length + 1}`;
}

// ---- one run ----
const run = { id: "", records: [], info: null, rows: ROWS, events: ROWS, pending: false };

async function showRun(id) {
  Object.assign(run, { id, records: [], info: null, rows: ROWS, events: ROWS });
  app.innerHTML = `<div class="card" id="info">loading…</div>
    <div class="card"><h3>Timeline</h3><div id="timeline" class="tl"></div></div>
    <div class="card"><h3>Records</h3><table id="events"><thead><tr><th>seq</th><th>+time</th><th>event</th><th>details</th></tr></thead><tbody></tbody></table><div id="moreev"></div></div>`;
  try {
    await loadInfo();
    const first = await api(`api/runs/${enc(id)}/records`);
    run.records = first.records;
    render();
  } catch (e) { document.getElementById("info").innerHTML = `<span class="error">${esc(e.message)}</span> <a href="#/">back to runs</a>`; return; }
  const last = run.records.length ? run.records[run.records.length - 1].seq : null;
  // Kept to this run: a reconnect never reads a later run under its id.
  const query = [`created_at=${run.info.created_at}`].concat(last === null ? [] : [`after=${last}`]);
  source = new EventSource(BASE + `api/runs/${enc(id)}/watch?` + query.join("&"));
  source.addEventListener("open", () => document.getElementById("live").textContent = "● live");
  source.addEventListener("record", (ev) => {
    const r = JSON.parse(ev.data);
    const tail = run.records[run.records.length - 1];
    if (tail && r.seq <= tail.seq) return;
    run.records.push(r);
    schedule();
  });
}

function schedule() {
  if (run.pending) return;
  run.pending = true;
  requestAnimationFrame(async () => {
    run.pending = false;
    await loadInfo().catch(() => {});
    render();
    // A run whose end is in its log appends nothing more: stop watching it.
    const tail = run.records[run.records.length - 1];
    if (source && tail && ["RunCompleted", "RunFailed", "RunCancelled"].includes(tail.kind)) {
      source.close(); source = null;
      document.getElementById("live").textContent = "finished";
    }
  });
}

async function loadInfo() {
  const r = await api(`api/runs/${enc(run.id)}`);
  run.info = r;
  const actions = READ_ONLY ? "" : `<div class="actions">${[
    ["signal", "Send signal…"], ["cancel", "Cancel"], ["terminate", "Terminate"], ["pause", "Pause"],
    ["resume", "Resume"], ["retry", "Retry"], ["fork", "Fork…"], ["delete", "Delete"]]
    .map(([a, l]) => `<button data-action="${a}" class="${["cancel", "terminate", "delete"].includes(a) ? "danger" : ""}">${l}</button>`).join("")}</div><div id="actionmsg" class="muted"></div>`;
  document.getElementById("info").innerHTML = `<h2>${esc(r.run_id)} <span id="status">${badge(r.status)}</span></h2>
    <dl class="kv"><dt>workflow</dt><dd>${esc(r.workflow)} v${r.version}</dd>
    <dt>created</dt><dd>${fmtTime(r.created_at)}</dd>
    ${r.waiting_on ? `<dt>waiting on</dt><dd>${esc(r.waiting_on)}</dd>` : ""}
    ${r.error ? `<dt>error</dt><dd class="error">${esc(r.error)}</dd>` : ""}
    ${r.parent ? `<dt>parent</dt><dd>${runLink(r.parent)}</dd>` : ""}
    ${r.queue ? `<dt>queue</dt><dd>${esc(r.queue)}</dd>` : ""}
    ${r.children.length ? `<dt>children</dt><dd>${r.children.map((c) => `${runLink(c.run_id)} ${badge(c.status)}`).join(" ")}</dd>` : ""}
    <dt>log</dt><dd>${r.log ? `${r.log.events} events, ${r.log.bytes} bytes` : ""} (segment ${r.segment})</dd></dl>${actions}
    <p><a href="#/">← all runs</a></p>`;
  document.querySelectorAll("[data-action]").forEach((b) => b.onclick = () => act(b.dataset.action));
}

async function act(action) {
  let body = {};
  if (action === "signal") {
    const name = prompt("Signal name");
    if (!name) return;
    const text = prompt("Payload (JSON)", "null");
    if (text === null) return;
    try { body = { name, payload: JSON.parse(text) }; } catch (e) { alert("Not JSON: " + e.message); return; }
  } else if (action === "fork") {
    const at = prompt("Fork at sequence number");
    const nid = at && prompt("New run id", run.id + "-fork");
    if (!nid) return;
    body = { at_seq: Number(at), new_run_id: nid };
  }
  if (!confirm(`${action} run ${run.id}?`)) return;
  const msg = document.getElementById("actionmsg");
  try {
    await api(`api/runs/${enc(run.id)}/${action}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
    msg.textContent = `${action}: done`;
    setTimeout(schedule, 300);
  } catch (e) { msg.innerHTML = `<span class="error">${esc(action)}: ${esc(e.message)}</span>`; }
}

// Turns the records into timeline rows: steps (one bar per attempt), timers,
// signal waits, children; signals received and the run's end as marks.
function timeline(records) {
  const rows = [], byKey = new Map();
  const row = (key, label, extra) => {
    let r = byKey.get(key);
    if (!r) { r = { label, bars: [], marks: [], ...extra }; byKey.set(key, r); rows.push(r); }
    return r;
  };
  const open = (r, cls, at, title) => { const b = { cls, from: at, to: null, title }; r.bars.push(b); return b; };
  const close = (r, at, cls) => { const b = r && r.bars.find((b) => b.to === null); if (b) { b.to = at; if (cls) b.cls += " " + cls; } return b; };
  const runRow = row("run", "run", {});
  for (const e of records) {
    switch (e.kind) {
      case "RunStarted": open(runRow, "wait", e.at, "run"); break;
      case "StepStarted": open(row("s:" + e.id, "step " + e.id, {}), "step", e.at, `attempt ${e.attempt}`); break;
      case "StepCompleted": close(byKey.get("s:" + e.id), e.at, "ok"); break;
      case "StepFailed": { const b = close(byKey.get("s:" + e.id), e.at, "err"); if (b) b.title += `: ${e.error}`; break; }
      case "TimerScheduled": case "Deadline": open(row("t:" + e.id, "timer " + e.id, {}), "timer", e.at, `fires ${fmtTime(e.fire_at)}`); break;
      case "TimerFired": case "TimerCancelled": close(byKey.get("t:" + e.id), e.at); break;
      case "SignalAwaited": open(row("w:" + e.name, "wait signal " + e.name, {}), "wait", e.at, e.id); break;
      case "SignalReceived": { const r = row("w:" + e.name, "wait signal " + e.name, {}); close(r, e.at); r.marks.push({ at: e.at, title: "received " + JSON.stringify(e.payload) }); break; }
      case "ChildStarted": open(row("c:" + e.id, `child ${e.id}`, { child: e.run_id }), "child", e.at, e.workflow); break;
      case "ChildCompleted": case "ChildDetached": close(byKey.get("c:" + e.id), e.at, e.ok === false || e.error ? "err" : "ok"); break;
      case "RunCompleted": case "RunFailed": case "RunCancelled": close(runRow, e.at); runRow.marks.push({ at: e.at, title: e.kind }); break;
      default: break;
    }
  }
  for (const r of rows) for (const b of r.bars) if (b.cls.startsWith("step")) {
    const n = r.bars.length; r.attempts = n;
  }
  return rows;
}

function render() {
  const recs = run.records;
  if (!recs.length) return;
  const t0 = recs[0].at;
  const finished = ["completed", "failed", "cancelled"].includes(run.info && run.info.status);
  const tEnd = Math.max(finished ? recs[recs.length - 1].at : Date.now(), t0 + 1);
  const span = tEnd - t0;
  const pct = (t) => `${(100 * (t - t0) / span).toFixed(3)}%`;
  const rows = timeline(recs);
  const shown = rows.slice(0, run.rows);
  document.getElementById("timeline").innerHTML = `<div class="muted">${fmtTime(t0)} → ${fmtMs(span)}</div>` +
    shown.map((r) => `<div class="tl-row" data-row="${esc(r.label)}"><div class="tl-label" title="${esc(r.label)}">${r.child ? `child ${runLink(r.child)}` : esc(r.label)}${r.attempts > 1 ? ` <span class="muted">×${r.attempts}</span>` : ""}</div><div class="tl-track">` +
      r.bars.map((b) => { const to = b.to ?? tEnd; return `<div class="bar ${b.cls}${b.to === null ? " open" : ""}" style="left:${pct(b.from)};width:calc(${pct(to)} - ${pct(b.from)})" title="${esc(b.title)} · ${fmtMs(to - b.from)}"></div>`; }).join("") +
      r.marks.map((m) => `<div class="mark" style="left:${pct(m.at)}" title="${esc(m.title)}"></div>`).join("") + `</div></div>`).join("") +
    (rows.length > shown.length ? `<button class="more" id="morerows">show more (${rows.length - shown.length} rows)</button>` : "");
  const mr = document.getElementById("morerows");
  if (mr) mr.onclick = () => { run.rows += ROWS * 3; render(); };
  const evs = recs.slice(0, run.events);
  const detail = (e) => { const { seq, at, kind, ...rest } = e; return Object.keys(rest).length ? `<details><summary>${esc(summary(e))}</summary><pre>${esc(JSON.stringify(rest, null, 2))}</pre></details>` : ""; };
  document.querySelector("#events tbody").innerHTML = evs.map((e) => `<tr data-seq="${e.seq}" data-kind="${esc(e.kind)}"><td>${e.seq}</td><td>${fmtMs(e.at - t0)}</td><td>${esc(e.kind)}</td><td>${detail(e)}</td></tr>`).join("");
  document.getElementById("moreev").innerHTML = recs.length > evs.length ? `<button class="more" id="moreevents">show more (${recs.length - evs.length} records)</button>` : "";
  const me = document.getElementById("moreevents");
  if (me) me.onclick = () => { run.events += ROWS * 3; render(); };
}

function summary(e) {
  const v = e.id ?? e.name ?? e.key ?? e.reason ?? "";
  return (v ? v + " " : "") + (e.error ? (e.error.message ?? e.error) : "");
}

route();
