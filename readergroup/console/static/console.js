/* readergroup console: routing (#/, #/stream/S/N, #/group/S/N), sortable tables, live updates
 * through server-sent events, and the actions (only when the server offers them). */
"use strict";

const { esc, clock, fmt } = Charts;
const App = { config: null, source: null, view: null, last: null, sort: {}, filter: "" };
window.consoleRenders = 0; /* pages rendered with data: tests and the bench wait on it */

async function api(path, body) {
  const init = body === undefined ? {} : {
    method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body),
  };
  const response = await fetch(path, init);
  const data = await response.json();
  if (!response.ok) throw new Error(data.error || response.statusText);
  return data;
}

function $(id) { return document.getElementById(id); }

/* -- tables ---------------------------------------------------------------------------- */
/* columns: [key, label, {num, render}]; rows: objects. Clicking a header sorts by it. */
function table(id, columns, rows) {
  const sort = App.sort[id] || {};
  const sorted = rows.slice();
  if (sort.key) {
    sorted.sort((a, b) => {
      const x = a[sort.key], y = b[sort.key];
      const cmp = x === y ? 0 : x === null || x === undefined ? -1 : y === null || y === undefined ? 1
        : typeof x === "number" && typeof y === "number" ? x - y : String(x).localeCompare(String(y));
      return sort.dir === "desc" ? -cmp : cmp;
    });
  }
  const head = columns.map(([key, label, opt = {}]) => {
    const cls = [opt.num ? "num" : "", sort.key === key ? `sorted-${sort.dir}` : ""].join(" ");
    return `<th class="${cls}" data-table="${id}" data-key="${key}">${esc(label)}</th>`;
  }).join("");
  const body = sorted.map((row) => "<tr>" + columns.map(([key, , opt = {}]) => {
    const value = opt.render ? opt.render(row) : esc(row[key] ?? "");
    return `<td class="${opt.num ? "num" : ""}${opt.wrap ? " wrap" : ""}">${value}</td>`;
  }).join("") + "</tr>").join("");
  return `<table id="${id}"><thead><tr>${head}</tr></thead><tbody>${body}</tbody></table>`;
}

document.addEventListener("click", (event) => {
  const th = event.target.closest("th[data-table]");
  if (!th) return;
  const id = th.dataset.table, key = th.dataset.key;
  const current = App.sort[id] || {};
  App.sort[id] = { key, dir: current.key === key && current.dir === "asc" ? "desc" : "asc" };
  if (App.last) render(App.last);
});

function badge(word, cls) { return `<span class="badge ${esc(cls || word)}">${esc(word)}</span>`; }
function link(kind, scope, name) {
  return `<a href="#/${kind}/${encodeURIComponent(scope)}/${encodeURIComponent(name)}">${esc(name)}</a>`;
}
function matches(row, fields) {
  if (!App.filter) return true;
  const needle = App.filter.toLowerCase();
  return fields.some((f) => String(row[f] ?? "").toLowerCase().includes(needle));
}

/* -- routing and live updates ---------------------------------------------------------- */
function parseRoute() {
  const parts = location.hash.replace(/^#\/?/, "").split("/").filter(Boolean).map(decodeURIComponent);
  if ((parts[0] === "stream" || parts[0] === "group") && parts.length === 3) {
    return { kind: parts[0], scope: parts[1], name: parts[2] };
  }
  return { kind: "overview" };
}

function apiPath(view) {
  if (view.kind === "overview") return "overview";
  return `${view.kind}/${encodeURIComponent(view.scope)}/${encodeURIComponent(view.name)}`;
}

function route() {
  if (App.source) App.source.close();
  App.view = parseRoute();
  App.last = null;
  skeleton(App.view);
  const view = App.view;
  const source = new EventSource(`/api/events/${apiPath(view)}`);
  App.source = source;
  source.onopen = () => { $("live").className = "live on"; };
  source.onerror = () => { $("live").className = "live off"; };
  source.onmessage = (event) => {
    if (App.view !== view) return;
    render(JSON.parse(event.data));
  };
}

function render(data) {
  App.last = data;
  const view = App.view;
  const body = $("content");
  if (data.error) {
    body.innerHTML = `<section><p class="error">${esc(data.error)}</p></section>`;
    return;
  }
  const began = performance.now();
  /* an update redraws the view: keep what the user opened and where they scrolled */
  const opened = [...body.querySelectorAll("details")].map((d) => d.open);
  const scrolled = [...body.querySelectorAll(".scroll")].map((d) => d.scrollTop);
  if (view.kind === "overview") renderOverview(data);
  else if (view.kind === "stream") renderStream(data);
  else renderGroup(data);
  body.querySelectorAll("details").forEach((d, i) => { if (opened[i]) d.open = true; });
  body.querySelectorAll(".scroll").forEach((d, i) => { d.scrollTop = scrolled[i] || 0; });
  /* what the bench reads: the last render's ms, and when the first one finished */
  window.consoleRenderMs = performance.now() - began;
  if (!window.consoleRenders) window.consoleFirstRenderAt = performance.now();
  window.consoleRenders += 1;
}

function skeleton(view) {
  const crumbs = view.kind === "overview" ? "" :
    `/ ${esc(view.scope)} / ${view.kind} <b>${esc(view.name)}</b>`;
  $("crumbs").innerHTML = crumbs;
  let html = "";
  if (view.kind === "overview") {
    html = `<div class="toolbar"><input id="search" type="search" placeholder="Search scopes, ` +
      `streams, groups…" value="${esc(App.filter)}" size="40"></div>`;
  }
  const actions = view.kind === "group" && App.config.actions ? actionsSkeleton() : "";
  $("main").innerHTML = html + `<div id="content"><p class="muted">Loading…</p></div>` + actions;
  const search = $("search");
  if (search) {
    search.addEventListener("input", () => { App.filter = search.value; if (App.last) render(App.last); });
  }
  if (view.kind === "group" && App.config.actions) wireActions(view);
}

/* -- overview -------------------------------------------------------------------------- */
function renderOverview(data) {
  const streams = data.streams.filter((s) => matches(s, ["scope", "stream"]));
  const groups = data.groups.filter((g) => matches(g, ["scope", "group", "state"]));
  const rate = (key) => (row) => row[key] === null || row[key] === undefined ? "" : fmt(row[key]) + "/s";
  $("content").innerHTML =
    `<section><h2>Scopes (${data.scopes.length})</h2>${data.scopes.map((s) => badge(s, "scope")).join(" ") || '<span class="muted">none</span>'}</section>` +
    `<section><h2>Streams (${streams.length})</h2>` + table("streams", [
      ["scope", "scope"],
      ["stream", "stream", { render: (r) => r.error ? `${esc(r.stream)} <span class="error">${esc(r.error)}</span>` : link("stream", r.scope, r.stream) }],
      ["segments_open", "open segments", { num: true }],
      ["segments_total", "segments ever", { num: true }],
      ["epoch", "epoch", { num: true }],
      ["events", "events", { num: true }],
      ["bytes", "bytes", { num: true }],
      ["rate_in", "in", { num: true, render: rate("rate_in") }],
      ["rate_out", "out (groups)", { num: true, render: rate("rate_out") }],
      ["sealed", "sealed", { render: (r) => r.sealed ? badge("sealed", "empty") : "" }],
    ], streams) + `</section>` +
    `<section><h2>Reader groups (${groups.length})</h2>` + table("groups", [
      ["scope", "scope"],
      ["group", "group", { render: (r) => link("group", r.scope, r.group) }],
      ["state", "state", { render: (r) => badge(r.state) + (r.flags || []).map((f) => badge(f, "flag")).join("") + (r.error ? ` <span class="error">${esc(r.error)}</span>` : "") }],
      ["readers", "readers online", { num: true }],
      ["segments", "segments", { num: true }],
      ["lag_events", "lag events", { num: true }],
      ["lag_ms", "lag ms", { num: true }],
      ["streams", "streams", { render: (r) => esc((r.streams || []).join(", ")) }],
    ], groups) + `</section>`;
}

/* -- stream ---------------------------------------------------------------------------- */
function renderStream(s) {
  const open = s.table.filter((r) => !r.sealed).length;
  $("content").innerHTML =
    `<h1>${esc(s.scope)}/${esc(s.stream)} ${s.sealed ? badge("sealed", "empty") : ""}</h1>` +
    `<section class="stats"><div>epoch<b>${s.epoch}</b></div><div>open segments<b>${open}</b></div>` +
    `<div>segments ever<b>${s.segments.length}</b></div><div>scalings<b>${s.epochs.length - 1}</b></div>` +
    `<div>groups reading<b>${s.groups.length}</b></div></section>` +
    `<section><h2>Segments over time (key range down, epochs across)</h2>${Charts.segmentGraph(s)}</section>` +
    `<section><h2>Active segments</h2><div class="scroll">` + table("segments", [
      ["id", "segment", { num: true }],
      ["name", "name"],
      ["epoch", "epoch", { num: true }],
      ["low", "key range", { render: (r) => `[${r.low.toFixed(4)}, ${r.high.toFixed(4)})` }],
      ["head", "head", { num: true }],
      ["tail", "tail", { num: true }],
      ["events", "events", { num: true }],
      ["bytes", "bytes", { num: true }],
      ["rate", "events/s", { num: true, render: (r) => r.rate === null || r.rate === undefined ? "" : fmt(r.rate) }],
      ["sealed", "sealed", { render: (r) => r.sealed ? "yes" : "" }],
    ], s.table) + `</div></section>` +
    `<section><h2>Cuts</h2><details><summary>retention (head) cut</summary><p class="wrap cut-text">${esc(s.head_cut)}</p></details>` +
    `<details><summary>tail cut</summary><p class="wrap cut-text">${esc(s.tail_cut)}</p></details></section>`;
}

/* -- group ----------------------------------------------------------------------------- */
function renderGroup(g) {
  const unowned = g.segments.filter((r) => r.reader === null);
  const lagOf = new Map(g.segments.map((r) => [r.segment, r.lag_events]));
  const chip = (name, cls) => `<span class="chip ${cls}" title="lag ${lagOf.get(name) ?? 0}">${esc(name)}</span>`;
  const owner = (m) => `<div class="reader" data-reader="${esc(m.reader)}"><div class="who"><b>${esc(m.reader)}</b> ` +
    badge(m.stale ? "stale" : "online") + `<br><span class="muted">${esc(m.client || "")} gen ${m.generation}` +
    ` · heartbeat ${m.heartbeat_age_ms === null ? "never" : (m.heartbeat_age_ms / 1000).toFixed(1) + " s ago"}` +
    ` · lag ${m.lag_events}</span>` +
    (App.config.actions && m.stale ? ` <button class="danger remove-reader" data-reader="${esc(m.reader)}">remove dead reader</button>` : "") +
    `</div><div class="chips">${m.segments.map((s) => chip(s, lagOf.get(s) > 0 ? "lagging" : "")).join("")}</div></div>`;
  const checkpoints = g.checkpoints.map((c) => ({
    ...c, status: c.failed ? "failed" : c.completed_ms >= 0 ? "completed" : "pending",
  }));
  const entries = g.history.entries.slice(-50).reverse();
  $("content").innerHTML =
    `<h1>${esc(g.scope)}/${esc(g.group)} ${badge(g.state)}${g.flags.map((f) => badge(f, "flag")).join("")}</h1>` +
    `<section class="stats"><div>readers online<b id="readers-online">${g.members.filter((m) => !m.stale).length}</b></div>` +
    `<div>lag events<b id="total-lag">${g.total_lag.events}</b></div><div>lag ms<b>${g.total_lag.ms}</b></div>` +
    `<div>lag bytes<b>${g.total_lag.bytes}</b></div><div>segments<b>${g.segments.length}</b></div>` +
    `<div>state revision<b>${g.revision}</b></div><div>streams<b>${esc(g.streams.join(", "))}</b></div></section>` +
    (g.missing_streams.length ? `<section class="error">deleted streams: ${esc(g.missing_streams.join(", "))}</section>` : "") +
    `<section><h2>Ownership (reader → segments)</h2><div class="ownership" id="ownership">` +
    g.members.map(owner).join("") +
    (unowned.length ? `<div class="reader"><div class="who"><b>not owned</b></div><div class="chips">` +
      unowned.map((r) => chip(r.segment, "waiting")).join("") + `</div></div>` : "") +
    `</div></section>` +
    `<section><h2>Lag over the last ${Math.round(App.config.history_seconds / 60)} minutes (events)</h2>` +
    Charts.lagChart(g.lag_history, App.config.history_seconds) + `</section>` +
    `<section><h2>Segments: committed positions and lag</h2><div class="scroll">` + table("group-segments", [
      ["segment", "segment"],
      ["reader", "reader", { render: (r) => r.reader === null ? `<span class="muted">${r.waiting ? "(waiting)" : "(unassigned)"}</span>` : esc(r.reader) }],
      ["position", "position", { num: true }],
      ["tail", "tail", { num: true }],
      ["lag_events", "lag events", { num: true }],
      ["lag_ms", "lag ms", { num: true }],
      ["lag_bytes", "lag bytes", { num: true }],
    ], g.segments) + `</div></section>` +
    `<section><h2>Checkpoints</h2>` + (checkpoints.length ? table("checkpoints", [
      ["name", "name"],
      ["status", "status", { render: (c) => badge(c.status, c.status === "completed" ? "online" : c.status) + (c.failed ? " " + esc(c.failed) : "") + (c.pending.length ? ` waiting for ${esc(c.pending.join(", "))}` : "") }],
      ["created_ms", "created", { render: (c) => clock(c.created_ms) }],
      ["completed_ms", "completed", { render: (c) => c.completed_ms >= 0 ? clock(c.completed_ms) : "" }],
      ["cuts", "stream cuts", { wrap: true, render: (c) => Object.values(c.cuts).map(esc).join("<br>") }],
    ], checkpoints) : `<p class="muted">none</p>`) + `</section>` +
    `<section><h2>Membership (from the group's history, revisions up to ${g.history.head})</h2>` +
    Charts.timeline(g) + `</section>` +
    `<section><h2>History (latest ${entries.length})</h2><div class="scroll">` + table("history", [
      ["revision", "revision", { num: true }],
      ["time", "time (UTC)"],
      ["by", "by"],
      ["what", "what", { wrap: true }],
    ], entries) + `</div></section>`;
}

/* -- actions (present only when the server runs with --allow-actions) ------------------- */
function actionsSkeleton() {
  return `<section id="actions"><h2>Actions</h2>` +
    `<form class="action" id="checkpoint-form"><b>Checkpoint</b><input name="name" placeholder="name" required>` +
    `<button type="submit">Take checkpoint</button></form>` +
    `<form class="action" id="reset-form"><b>Reset</b><select name="scenario">` +
    ["to_earliest", "to_latest", "to_datetime", "by_duration", "to_offset", "to_checkpoint", "to_stream_cut", "shift_by"]
      .map((s) => `<option value="${s}">--${s.replace(/_/g, "-")}</option>`).join("") +
    `</select><input name="value" placeholder="value (if the scenario needs one)">` +
    `<input name="streams" placeholder="only streams (space-separated)">` +
    `<button type="submit" class="secondary">Show plan (dry run)</button></form>` +
    `<div id="action-result" class="result"></div></section>`;
}

function wireActions(view) {
  const base = `/api/actions/${encodeURIComponent(view.scope)}/${encodeURIComponent(view.name)}`;
  const result = $("action-result");
  const show = (html) => { result.innerHTML = html; };
  const fail = (error) => show(`<p class="error">${esc(error.message)}</p>`);
  $("checkpoint-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    const name = event.target.elements.name.value;
    show(`<p class="muted">taking checkpoint ${esc(name)}…</p>`);
    try {
      const done = await api(`${base}/checkpoint`, { name });
      show(`<p>checkpoint ${esc(done.checkpoint)} complete:</p><pre>${esc(Object.values(done.stream_cuts).join("\n"))}</pre>`);
    } catch (error) { fail(error); }
  });
  $("reset-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    const f = event.target.elements;
    const body = { scenario: f.scenario.value, value: f.value.value,
      streams: f.streams.value.split(/\s+/).filter(Boolean) };
    try {
      const plan = await api(`${base}/reset/plan`, body);
      show(`<p><b>reset plan (not applied)</b> ${esc(plan.resolved)}</p>` + table("reset-plan", [
        ["stream", "stream"], ["segment", "segment", { num: true }],
        ["current", "current", { num: true }], ["new", "new", { num: true }],
      ], plan.plan) + `<p><button class="danger" id="apply-reset" data-plan="${esc(plan.plan_id)}">` +
        `Apply this plan</button> <button class="secondary" id="cancel-reset">Cancel</button></p>`);
      $("cancel-reset").onclick = () => show("");
      $("apply-reset").onclick = async () => {
        if (!window.confirm("Reset the group to these positions? Its readers restart from them.")) return;
        show(`<p class="muted">resetting: waiting for every reader to acknowledge…</p>`);
        try {
          const done = await api(`${base}/reset/apply`, { plan_id: plan.plan_id });
          show(`<p id="reset-applied">reset applied to ${done.applied.length} segments` +
            (done.declared_offline.length ? `; declared offline: ${esc(done.declared_offline.join(", "))}` : "") + `</p>`);
        } catch (error) { fail(error); }
      };
    } catch (error) { fail(error); }
  });
  $("main").addEventListener("click", async (event) => {
    const button = event.target.closest("button.remove-reader");
    if (!button) return;
    const reader = button.dataset.reader;
    if (!window.confirm(`Remove dead reader ${reader}? Its segments return at their committed positions.`)) return;
    try {
      await api(`${base}/reader-offline`, { reader });
      show(`<p>removed ${esc(reader)}</p>`);
    } catch (error) { fail(error); }
  });
}

async function boot() {
  App.config = await api("/api/config");
  $("redis").textContent = App.config.redis;
  $("mode").textContent = App.config.actions ? "actions allowed" : "read-only";
  $("mode").className = "badge " + (App.config.actions ? "actions" : "readonly");
  window.addEventListener("hashchange", route);
  route();
}

boot().catch((error) => { $("main").innerHTML = `<p class="error">${esc(error.message)}</p>`; });
