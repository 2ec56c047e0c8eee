// Guardian dashboard: a small hand-written single-page app over the controller's JSON API.
// Routes (location.hash): #/ overview, #/cluster/NAME heat map, #/executions, #/executions/ID,
// #/throttles, #/plans, #/plans/ID, #/actions. The token is entered once and kept in sessionStorage;
// every view is re-read every REFRESH_MS. No request leaves this controller.
// Actions (approve/reject, execute, stop with or without rollback, pause/resume auto-rebalance, remove a
// manual throttle) are shown only to a token whose role may use them (GET /api/v1/whoami); each asks for a
// reason before it is sent (cancel = nothing sent) and the reason goes to the action log.
"use strict";

const REFRESH_MS = 5000;
const TOKEN_KEY = "guardian.token";
const HEAT_CELLS = 600;      // heat-map cells drawn (hottest first); the rest are counted
const ROWS = 300;            // table rows drawn for long lists
let timer = null;
let optional = { anomalies: false };   // API endpoints another build may not have (from /openapi.json)
let me = null;                          // {name, role} of the token in use (GET /api/v1/whoami)
const RANK = { viewer: 0, operator: 1, admin: 2 };
let executeRate = "";                   // the plan page's fixed-rate field, kept across refreshes
function can(role) { return me !== null && (RANK[me.role] ?? -1) >= RANK[role]; }

// ------------------------------------------------------------------ DOM helpers
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "style") el.setAttribute("style", v);
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.appendChild(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}
function table(headers, rows, numeric) {
  const num = new Set(numeric || []);
  return h("table", {},
    h("thead", {}, h("tr", {}, headers.map((x, i) => h("th", { class: num.has(i) ? "num" : null }, x)))),
    h("tbody", {}, rows.map(r => h("tr", {}, r.map((c, i) => h("td", { class: num.has(i) ? "num" : null }, c))))));
}
function pct(x) { return x === null || x === undefined ? "–" : (100 * x).toFixed(1) + "%"; }
function ratio(x) { return x === null || x === undefined ? "–" : Number(x).toFixed(2); }
function bytes(n) {
  if (n === null || n === undefined) return "–";
  const u = ["B", "KB", "MB", "GB", "TB", "PB"]; let i = 0; n = Number(n);
  while (Math.abs(n) >= 1000 && i < u.length - 1) { n /= 1000; i++; }
  return (i ? n.toFixed(1) : n.toFixed(0)) + " " + u[i];
}
function rate(n) { return n === null || n === undefined ? "–" : bytes(n) + "/s"; }
function secs(s) {
  if (s === null || s === undefined) return "–";
  s = Math.max(0, Math.round(s));
  if (s >= 3600) return Math.floor(s / 3600) + "h" + String(Math.floor(s % 3600 / 60)).padStart(2, "0") + "m";
  if (s >= 60) return Math.floor(s / 60) + "m" + String(s % 60).padStart(2, "0") + "s";
  return s + "s";
}
function bar(fraction) {
  const f = Math.max(0, Math.min(1, fraction || 0));
  return h("div", { class: "bar", title: pct(f) }, h("span", { style: `width:${(100 * f).toFixed(1)}%` }));
}
function heatColor(u) {          // green (0) -> yellow (0.5) -> red (>= 1)
  const x = Math.max(0, Math.min(1, u || 0));
  const hue = 120 - 120 * x;
  return `hsl(${hue.toFixed(0)}, 70%, ${(78 - 18 * x).toFixed(0)}%)`;
}
function kindBadge(kind) { return h("span", { class: "badge " + kind }, String(kind).toUpperCase()); }
function link(href, text) { return h("a", { href }, text); }
function utilClass(u) { return u >= 0.9 ? "bad" : u >= 0.7 ? "warn" : "ok"; }

// ------------------------------------------------------------------ API
class ApiError extends Error {
  constructor(status, detail) { super(detail); this.status = status; }
}
async function api(path, options) {
  const token = sessionStorage.getItem(TOKEN_KEY);
  const init = Object.assign({ headers: {} }, options || {});
  init.headers = Object.assign({ "Authorization": "Bearer " + token }, init.headers);
  const res = await fetch(path, init);
  const text = await res.text();
  let body = null;
  try { body = text ? JSON.parse(text) : null; } catch (e) { body = text; }
  if (!res.ok) throw new ApiError(res.status, (body && body.detail) || res.statusText || String(res.status));
  return body;
}
// One action: ask for confirmation and a reason (recorded in the action log), send, re-render.
async function act(question, path, init, then) {
  const why = window.prompt(`${question}\nGive a reason to confirm (recorded in the action log):`, "");
  if (why === null) return;                       // cancelled: nothing sent
  if (!why.trim()) { showError(new ApiError(0, "not sent: a reason is required")); return; }
  const req = Object.assign({ method: "POST" }, init || {});
  req.headers = Object.assign({ "X-Guardian-Reason": why }, req.headers || {});
  if (req.json !== undefined) {
    req.body = JSON.stringify(req.json);
    req.headers["Content-Type"] = "application/json";
    delete req.json;
  }
  try {
    const answer = await api(path, req);
    if (then) then(answer);
    await render();
  } catch (e) { showError(e); }
}
function button(id, cls, label, onclick) { return h("button", { id, class: cls, type: "button", onclick }, label); }

async function discover() {
  try {
    const spec = await (await fetch("/openapi.json")).json();
    optional.anomalies = Boolean(spec.paths && spec.paths["/api/v1/anomalies"]);
  } catch (e) { optional.anomalies = false; }
}

// ------------------------------------------------------------------ views
async function viewOverview() {
  const data = await api("/api/v1/overview");
  const rows = data.clusters.map(c => {
    const s = c.snapshot;
    const alive = s ? (s.brokers_by_state.alive || 0) : null;
    const age = c.snapshot_age_s;
    const stale = age !== null && age > data.max_snapshot_age_s;
    const pools = s ? Object.entries(s.pools).map(([p, f]) =>
      h("div", {}, h("b", {}, p), " max ", h("span", { class: utilClass(f.max_util) }, pct(f.max_util)),
        " · mean ", pct(f.mean_util), " · peak/mean ", ratio(f.peak_to_mean))) : h("span", { class: "muted" }, "no snapshot");
    const ex = c.execution;
    const ar = c.auto_rebalance || { enabled: false };
    const policy = Object.fromEntries(["window_cron", "window_minutes", "threshold", "max_partitions", "load_basis"]
      .filter(k => ar[k] !== undefined).map(k => [k, ar[k]]));
    const toggle = can("admin") && ar.window_cron ? button(`auto-${c.name}`, ar.enabled ? "danger" : "primary",
      ar.enabled ? "Pause" : "Resume", () => act(`${ar.enabled ? "Pause" : "Resume"} auto-rebalance of ${c.name}?`,
        `/api/v1/clusters/${encodeURIComponent(c.name)}/auto-rebalance`,
        { method: "PUT", json: Object.assign(policy, { enabled: !ar.enabled }) })) : null;
    const auto = h("div", { class: "auto-rebalance" }, h("span", { class: ar.enabled ? "ok" : "muted" },
      ar.enabled ? `on (${ar.window_cron}, > ${ratio(ar.threshold)})` : (ar.window_cron ? "paused" : "off")), " ", toggle);
    return [
      link("#/cluster/" + encodeURIComponent(c.name), c.name),
      s ? String(alive) : "–",
      s ? h("span", { class: s.dead_brokers ? "bad" : "" }, String(s.dead_brokers)) : "–",
      pools,
      age === null ? "–" : h("span", { class: stale ? "bad" : "", title: s.taken_at }, secs(age) + (stale ? " (stale)" : "")),
      s ? `${s.disks_with_metrics}/${s.disks} disks · ${s.partitions_with_rates}/${s.partitions} partitions` : "–",
      c.throttles ? link("#/throttles", String(c.throttles)) : "0",
      auto,
      ex ? link("#/executions/" + ex.id, `#${ex.id} ${ex.status} ${pct(ex.bytes_total ? ex.bytes_done / ex.bytes_total : 0)}`) : "–",
      c.last_error ? h("span", { class: "bad last-error", title: c.last_error.message },
        `${c.last_error.kind} (${c.last_error.loop}): ${c.last_error.message.slice(0, 160)}`) : "–",
    ];
  });
  const total = data.clusters.reduce((a, c) => a + (c.snapshot ? c.snapshot.brokers : 0), 0);
  const dead = data.clusters.reduce((a, c) => a + (c.snapshot ? c.snapshot.dead_brokers : 0), 0);
  const out = [
    h("h1", {}, "Federation"),
    h("div", { class: "cards" },
      h("div", { class: "card" }, h("b", {}, data.clusters.length), "clusters"),
      h("div", { class: "card" }, h("b", {}, total), "brokers"),
      h("div", { class: "card" }, h("b", { class: dead ? "bad" : "ok" }, dead), "dead brokers"),
      h("div", { class: "card" }, h("b", {}, data.clusters.filter(c => c.execution).length), "executions running")),
    table(["cluster", "brokers alive", "dead", "imbalance per pool (estimated util)", "snapshot age", "coverage",
           "throttles", "auto-rebalance", "execution", "last error"], rows, [1, 2]),
  ];
  if (optional.anomalies) out.push(await anomaliesPanel());
  return out;
}

async function anomaliesPanel() {
  let data;
  try { data = await api("/api/v1/anomalies"); } catch (e) {
    if (e.status === 404) return null;
    return h("div", { id: "anomalies" }, h("h2", {}, "Anomalies"), h("p", { class: "error" }, e.message));
  }
  let items = Array.isArray(data) ? data : Object.values(data || {}).find(Array.isArray) || [];
  const keys = items.length ? Object.keys(items[0]).slice(0, 8) : [];
  const cell = v => (v !== null && typeof v === "object") ? JSON.stringify(v) : (v === null || v === undefined ? "–" : String(v));
  return h("div", { id: "anomalies" }, h("h2", {}, `Anomalies (${items.length})`),
    items.length ? table(keys, items.slice(0, ROWS).map(a => keys.map(k => cell(a[k])))) : h("p", { class: "muted" }, "none"));
}

async function viewCluster(name) {
  const q = encodeURIComponent(name);
  const [disks, brokers] = await Promise.all([api(`/api/v1/clusters/${q}/disks`), api(`/api/v1/clusters/${q}/brokers`)]);
  const state = new Map(brokers.map(b => [b.broker === undefined ? b.id : b.broker, b]));
  disks.sort((a, b) => (b.estimated_util - a.estimated_util) || ((b.util || 0) - (a.util || 0)));
  const shown = disks.slice(0, HEAT_CELLS);
  const cells = shown.map(d => {
    const b = state.get(d.broker) || {};
    const title = `broker ${d.broker} ${d.path} (${d.kind}, pool ${b.pool || "?"}, ${b.state || "?"}): ` +
      `estimated ${pct(d.estimated_util)}, measured ${pct(d.util)}, await ${Number(d.await_ms || 0).toFixed(1)} ms, ` +
      `${d.replicas} replicas`;
    return h("div", { class: "cell", title,
                      style: `background:${heatColor(d.estimated_util)};border-bottom:5px solid ${heatColor(d.util)}` },
      h("div", {}, h("b", {}, `b${d.broker}`), " ", kindBadge(d.kind), b.state === "dead" ? h("span", { class: "badge dead" }, "DEAD") : null),
      h("div", {}, d.path),
      h("div", {}, `est ${pct(d.estimated_util)} · meas ${pct(d.util)}`));
  });
  const hottest = disks.slice(0, 20).map(d => [`b${d.broker}`, d.path, kindBadge(d.kind), pct(d.estimated_util),
    pct(d.util), Number(d.await_ms || 0).toFixed(1), String(d.replicas), bytes(d.used_bytes) + " / " + bytes(d.capacity_bytes)]);
  const dead = brokers.filter(b => b.state === "dead").map(b => b.id);
  return [
    h("h1", {}, `Cluster ${name}`),
    h("div", { class: "cards" },
      h("div", { class: "card" }, h("b", {}, brokers.length), "brokers"),
      h("div", { class: "card" }, h("b", { class: dead.length ? "bad" : "ok" }, dead.length), "dead" + (dead.length ? ": " + dead.join(", ") : "")),
      h("div", { class: "card" }, h("b", {}, disks.length), "log dirs")),
    h("h2", {}, "Disk heat map (estimated util, hottest first)"),
    h("p", { class: "legend muted" }, "fill: estimated util, bottom edge: measured util · 0%", h("span", { style: `background:${heatColor(0)}` }),
      h("span", { style: `background:${heatColor(0.5)}` }), h("span", { style: `background:${heatColor(1)}` }), "100%",
      disks.length > shown.length ? ` · ${disks.length - shown.length} cooler log dirs not drawn` : ""),
    h("div", { class: "heat", id: "heatmap" }, cells),
    h("h2", {}, "Hottest log dirs"),
    table(["broker", "log dir", "kind", "estimated util", "measured util", "await ms", "replicas", "used"], hottest, [3, 4, 5, 6]),
  ];
}

async function viewExecutions() {
  const list = await api("/api/v1/executions");
  const rows = list.slice(0, ROWS).map(e => {
    const p = e.progress || {};
    const f = p.bytes_total ? p.bytes_done / p.bytes_total : (e.status === "completed" ? 1 : 0);
    return [link("#/executions/" + e.id, "#" + e.id), e.cluster, link("#/plans/" + e.plan_id, "plan " + e.plan_id), e.status,
      h("div", {}, bar(f), `${bytes(p.bytes_done)} / ${bytes(p.bytes_total)}`),
      rate(p.rate_bytes_per_s), secs(p.eta_s),
      Object.entries(e.task_states || {}).map(([k, v]) => `${k}=${v}`).join(" "), e.started_by || "", e.started_at || ""];
  });
  return [h("h1", {}, "Executions"), list.length ? table(["id", "cluster", "plan", "status", "progress", "rate", "ETA",
    "tasks", "started by", "started at"], rows) : h("p", { class: "muted" }, "no executions yet")];
}

async function viewExecution(id) {
  const e = await api("/api/v1/executions/" + encodeURIComponent(id));
  const p = e.progress || {};
  const tasks = Object.values(e.tasks);
  const order = { IN_PROGRESS: 0, ABORTING: 1, PENDING: 2 };
  tasks.sort((a, b) => ((order[a.state] ?? 9) - (order[b.state] ?? 9)) || a.key.localeCompare(b.key));
  const rows = tasks.slice(0, ROWS).map(t => {
    const total = t.bytes_total || t.size_bytes || 0;
    const done = t.state === "COMPLETED" ? total : Math.min(t.bytes_done || 0, total);
    const eta = t.rate_bytes_per_s > 0 ? Math.max(total - done, 0) / t.rate_bytes_per_s : null;
    return [t.key, t.action, t.state, `${JSON.stringify(t.source_replicas)} → ${JSON.stringify(t.target_replicas)}`,
      h("div", {}, bar(total ? done / total : (t.state === "COMPLETED" ? 1 : 0)), `${bytes(done)} / ${bytes(total)}`),
      rate(t.rate_bytes_per_s), t.state === "IN_PROGRESS" ? secs(eta) : "–", t.reason || ""];
  });
  const f = p.bytes_total ? p.bytes_done / p.bytes_total : (e.progress && e.progress.fraction) || 0;
  const stop = rollback => act(rollback ? `Stop execution ${e.id} and roll back its in-flight moves?`
    : `Stop execution ${e.id}? (no new move starts; moves in flight finish)`,
    `/api/v1/executions/${e.id}/stop`, { json: { rollback } });
  const live = e.status === "running" || (e.status === "stopping" && !e.rollback);
  const buttons = live && can("operator") ? h("div", { class: "actions-bar" },
    e.status === "running" ? button("stop", "danger", "Stop", () => stop(false)) : null,
    button("stop-rollback", "danger", "Stop and roll back", () => stop(true))) : null;
  return [
    h("h1", {}, `Execution #${e.id} · ${e.cluster} · `, h("span", { id: "execution-status" }, e.status +
      (e.status === "stopping" && e.rollback ? " (rolling back)" : ""))),
    buttons,
    h("div", { class: "cards" },
      h("div", { class: "card" }, h("b", {}, pct(f)), `${bytes(p.bytes_done)} of ${bytes(p.bytes_total)}`),
      h("div", { class: "card" }, h("b", {}, rate(p.rate_bytes_per_s)), "copy rate"),
      h("div", { class: "card" }, h("b", {}, secs(p.eta_s)), "ETA"),
      h("div", { class: "card" }, h("b", {}, p.under_replicated ?? "–"), "under-replicated"),
      h("div", { class: "card" }, h("b", {}, pct(p.max_disk_util)), "worst disk util")),
    bar(f),
    h("p", { class: "muted" }, `plan ${e.plan_id} · started by ${e.started_by} at ${e.started_at}` +
      (e.finished_at ? ` · finished ${e.finished_at}` : "") + (e.reason ? ` · ${e.reason}` : "")),
    h("h2", {}, `Tasks (${tasks.length}${tasks.length > ROWS ? ", first " + ROWS + " shown" : ""})`),
    table(["task", "action", "state", "replicas", "progress", "rate", "ETA", "reason"], rows),
  ];
}

async function viewThrottles() {
  const list = await api("/api/v1/throttles");
  const rows = list.slice(0, ROWS).map(t => {
    const ev = t.evidence || {};
    const why = t.why || (ev.manual ? "manual" : "") || Object.entries(ev).slice(0, 4).map(([k, v]) =>
      `${k}: ${typeof v === "object" ? JSON.stringify(v) : v}`).join("; ");
    const remove = ev.manual && can("operator") ? button(`remove-${t.cluster}-${t.key}`, "danger", "Remove",
      () => act(`Remove the manual throttle ${t.key} of ${t.cluster}?`,
        `/api/v1/throttles/${encodeURIComponent(t.cluster)}/${encodeURIComponent(t.key)}`, { method: "DELETE" })) : "";
    return [t.cluster, t.key, t.kind, JSON.stringify(t.target), rate(t.rate_bytes_per_s), t.since || "",
      t.set_by || "", why, remove];
  });
  return [h("h1", {}, "Throttles in force"), list.length ? table(["cluster", "key", "kind", "target", "rate", "since",
    "set by", "why", ""], rows, [4]) : h("p", { class: "muted" }, "no throttle in force")];
}

async function viewActions() {
  const list = await api("/api/v1/actions?limit=200");
  const rows = list.map(a => [String(a.seq), a.at, a.who, a.type, JSON.stringify(a.subject), a.why || "",
    h("pre", {}, JSON.stringify(a.result))]);
  return [h("h1", {}, "Action log"), table(["seq", "at", "who", "action", "subject", "why", "result"], rows, [0])];
}

function planFigures(s) {
  if (!s) return "–";
  return `max ${pct(s.before.max_util)} → ${pct(s.after.max_util)} · ${s.partitions_moved} partitions · ${bytes(s.bytes_to_move)}`;
}

async function viewPlans() {
  const list = await api("/api/v1/plans");
  const rows = list.slice(0, ROWS).map(p => [link("#/plans/" + p.id, "#" + p.id), p.cluster, p.kind,
    h("span", { class: p.status === "proposed" ? "warn" : "" }, p.status), planFigures(p.summary), p.proposed_by || "",
    p.proposed_at || ""]);
  return [h("h1", {}, "Plans"), list.length ? table(["id", "cluster", "kind", "status", "figures", "proposed by",
    "proposed at"], rows) : h("p", { class: "muted" }, "no plans yet")];
}

function decide(id, verb) { return act(`${verb === "approve" ? "Approve" : "Reject"} plan ${id}?`, `/api/v1/plans/${id}/${verb}`); }

function execute(id) {
  const rate = document.getElementById("execute-rate").value.trim();
  const json = rate ? { throttle: { mode: "fixed", fixed_rate: rate } } : {};
  return act(`Execute plan ${id}${rate ? " at a fixed " + rate + "/s" : " under the adaptive throttle"}?`,
    `/api/v1/plans/${id}/execute`, { json }, answer => { location.hash = "#/executions/" + answer.execution_id; });
}

async function viewPlan(id) {
  const r = await api(`/api/v1/plans/${encodeURIComponent(id)}/review`);
  const s = r.summary;
  const pools = s ? Object.entries(s.pools).map(([p, f]) => [p, pct(f.before.max_util), pct(f.after.max_util),
    pct(f.before.mean_util), pct(f.after.mean_util), ratio(f.before.peak_to_mean), ratio(f.after.peak_to_mean)]) : [];
  const moves = r.moves.map(m => [`${m.topic}:${m.partition}`,
    m.current_replicas ? JSON.stringify(m.current_replicas) : "?", JSON.stringify(m.replicas),
    m.current_log_dirs ? m.current_log_dirs.join(", ") : "?", m.log_dirs.join(", "), bytes(m.size_bytes)]);
  const rec = r.record;
  const buttons = !can("operator") ? null : r.status === "proposed" ? h("div", { class: "actions-bar" },
    button("approve", "primary", "Approve", () => decide(r.id, "approve")),
    button("reject", "danger", "Reject", () => decide(r.id, "reject"))) :
    r.status === "approved" ? h("div", { class: "actions-bar" },
      button("execute", "primary", "Execute", () => execute(r.id)),
      h("input", { id: "execute-rate", placeholder: "fixed rate, e.g. 40MB (empty: adaptive)", size: 34,
                   value: executeRate, oninput: ev => { executeRate = ev.target.value; } })) : null;
  return [
    h("h1", {}, `Plan #${r.id} · ${r.cluster} · ${r.kind}`),
    h("p", {}, "Status: ", h("b", { id: "plan-status" }, r.status),
      ` · proposed by ${rec.proposed_by} at ${rec.proposed_at}` + (rec.decided_by ? ` · decided by ${rec.decided_by}` : "") +
      (rec.execution_id ? " · " : ""), rec.execution_id ? link("#/executions/" + rec.execution_id, "execution #" + rec.execution_id) : null),
    buttons,
    s ? h("div", { class: "cards" },
      h("div", { class: "card" }, h("b", {}, `${pct(s.before.max_util)} → ${pct(s.after.max_util)}`), "max estimated util"),
      h("div", { class: "card" }, h("b", {}, `${ratio(s.before.peak_to_mean)} → ${ratio(s.after.peak_to_mean)}`), "peak / mean"),
      h("div", { class: "card" }, h("b", {}, bytes(s.bytes_to_move)), "to move"),
      h("div", { class: "card" }, h("b", {}, s.partitions_moved), "partitions moved"),
      h("div", { class: "card" }, h("b", {}, s.leader_changes), "leader changes")) : null,
    h("h2", {}, "Before / after per pool"),
    pools.length ? table(["pool", "max before", "max after", "mean before", "mean after", "peak/mean before",
      "peak/mean after"], pools, [1, 2, 3, 4, 5, 6]) : h("p", { class: "muted" }, "no summary"),
    (r.notes || []).length ? h("ul", {}, r.notes.map(n => h("li", {}, n))) : null,
    h("h2", {}, `Moves (${r.moves_total}${r.moves_total > r.moves.length ? ", first " + r.moves.length + " shown" : ""})`),
    moves.length ? table(["partition", "replicas now", "replicas after", "log dirs now", "log dirs after", "size"],
      moves.slice(0, ROWS), [5]) : h("p", { class: "muted" }, "no partition moves"),
  ];
}

// ------------------------------------------------------------------ shell
const ROUTES = [
  [/^#?\/?$/, "overview", () => viewOverview()],
  [/^#\/cluster\/(.+)$/, "overview", m => viewCluster(decodeURIComponent(m[1]))],
  [/^#\/executions$/, "executions", () => viewExecutions()],
  [/^#\/executions\/(\d+)$/, "executions", m => viewExecution(m[1])],
  [/^#\/throttles$/, "throttles", () => viewThrottles()],
  [/^#\/plans$/, "plans", () => viewPlans()],
  [/^#\/plans\/(\d+)$/, "plans", m => viewPlan(m[1])],
  [/^#\/actions$/, "actions", () => viewActions()],
];

function showError(e) {
  const box = document.getElementById("error");
  box.hidden = false;
  box.textContent = (e.status ? `${e.status}: ` : "") + e.message;
  if (e.status === 401) { sessionStorage.removeItem(TOKEN_KEY); me = null; showLogin("The token was refused."); }
}

function showLogin(message) {
  document.getElementById("login").hidden = false;
  document.getElementById("signout").hidden = true;
  document.getElementById("view").replaceChildren();
  document.getElementById("login-error").textContent = message || "";
}

let rendering = false;
async function render() {
  if (!sessionStorage.getItem(TOKEN_KEY)) { showLogin(); return; }
  if (rendering) return;
  rendering = true;
  document.getElementById("login").hidden = true;
  document.getElementById("signout").hidden = false;
  const hash = location.hash || "#/";
  const route = ROUTES.find(([re]) => re.test(hash)) || ROUTES[0];
  for (const a of document.querySelectorAll("#nav a")) a.classList.toggle("active", a.dataset.page === route[1]);
  try {
    if (me === null) me = await api("/api/v1/whoami");
    const content = await route[2](hash.match(route[0]));
    document.getElementById("view").replaceChildren(...[content].flat().filter(Boolean));
    document.getElementById("error").hidden = true;
    document.getElementById("status").textContent = "updated " + new Date().toLocaleTimeString() +
      ` · refreshing every ${REFRESH_MS / 1000} s`;
  } catch (e) {
    showError(e);
  } finally {
    rendering = false;
  }
}

function schedule() {
  if (timer) clearInterval(timer);
  timer = setInterval(() => { if (!document.hidden) render(); }, REFRESH_MS);
}

document.getElementById("login").addEventListener("submit", ev => {
  ev.preventDefault();
  sessionStorage.setItem(TOKEN_KEY, document.getElementById("token").value.trim());
  me = null;
  document.getElementById("token").value = "";
  render();
});
document.getElementById("signout").addEventListener("click", () => { sessionStorage.removeItem(TOKEN_KEY); me = null; showLogin(); });
window.addEventListener("hashchange", render);
discover().then(() => { render(); schedule(); });
