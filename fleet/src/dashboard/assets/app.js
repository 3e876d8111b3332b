// The consort dashboard. It reads the host only through its public JSON routes, with the
// bearer token typed in (kept in this tab's sessionStorage); everything it shows is what the
// host lets that token see. Text from the host is only ever set as textContent.

import { follow, poll } from "./sse.js";

const TOKEN_KEY = "consort.token";
const RUNS_POLL_MS = 1000;
const EVENTS_POLL_MS = 1000;
const FLEET_POLL_MS = 3000;
const REFUSALS_POLL_MS = 3000;
const RETRY_MS = 2000;
const RUNS_PAGE = 100;
const RUNS_KEPT = 500;

const state = {
  token: sessionStorage.getItem(TOKEN_KEY) || "",
  runs: new Map(), // id -> RunRecord
  selected: null, // run id
  gates: new Map(), // blocked run id -> {tool, asked_ms} of the gate it waits on
  deciding: new Set(), // run ids with a decision in flight
  feeds: new AbortController(), // aborts every loop when the token changes
  detail: null, // AbortController of the selected run's event feed
  treeDue: false,
  budgetDue: false,
};

// ---------------------------------------------------------------------------------------------
// The API.

class ApiFailure extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

function authHeaders() {
  return state.token ? { Authorization: `Bearer ${state.token}` } : {};
}

async function api(path, { method = "GET", body, signal } = {}) {
  const headers = { ...authHeaders(), Accept: "application/json" };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    signal,
    cache: "no-store",
  });
  const text = await response.text();
  let json = null;
  try {
    json = text ? JSON.parse(text) : null;
  } catch {
    json = null;
  }
  if (!response.ok) {
    const error = json && json.error ? json.error : {};
    throw new ApiFailure(response.status, error.code || "http_" + response.status,
      error.message || `HTTP ${response.status}`);
  }
  return json;
}

// ---------------------------------------------------------------------------------------------
// Small DOM helpers (textContent only).

const $ = (selector) => document.querySelector(selector);

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null) continue;
    if (key === "class") node.className = value;
    else if (key.startsWith("data-")) node.setAttribute(key, value);
    else if (key === "title") node.title = value;
    else if (key === "type") node.type = value;
    else node.setAttribute(key, value);
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function fillBody(table, rows) {
  $(table).tBodies[0].replaceChildren(...rows);
}

function shortId(id) {
  return id ? id.slice(0, 10) + "…" : "-";
}

function when(ms) {
  return ms ? new Date(ms).toLocaleTimeString([], { hour12: false }) : "-";
}

function clip(text, max = 240) {
  const s = typeof text === "string" ? text : JSON.stringify(text);
  return s.length > max ? s.slice(0, max) + "…" : s;
}

function costText(c) {
  if (!c) return "-";
  const tokens = (c.input_tokens || 0) + (c.output_tokens || 0);
  return `${c.model_turns}/${c.tool_calls}/${c.calls_placed}/${tokens}`;
}

function wallText(run) {
  const ms = run.cost ? run.cost.wall_ms : 0;
  return ms >= 1000 ? `${(ms / 1000).toFixed(1)}s` : `${ms}ms`;
}

function channelText(channel) {
  if (typeof channel === "string") return channel;
  if (channel && typeof channel === "object") {
    const [kind, value] = Object.entries(channel)[0] || ["?", ""];
    return `${kind}:${value}`;
  }
  return "-";
}

function say(text) {
  $("#status").textContent = text;
}

function explain(error) {
  if (error instanceof ApiFailure && error.status === 401) {
    return "This host needs a bearer token: type it above.";
  }
  return error.message || String(error);
}

// ---------------------------------------------------------------------------------------------
// Runs: a stream of run changes where the host offers one, else polling.

const SETTLED = new Set(["succeeded", "failed"]);

/// Keeps `run` as the latest word on its id. A settled run never becomes unsettled again, so an
/// older record (an approval's answer overtaken by the stream's settle notice) never replaces it.
function upsertRun(run) {
  const before = state.runs.get(run.id);
  if (before && SETTLED.has(before.status) && !SETTLED.has(run.status)) return false;
  state.runs.set(run.id, run);
  return !before || JSON.stringify(before) !== JSON.stringify(run);
}

/// Reads the newest runs. With `only`, the list becomes exactly that page (a polled list
/// shows the newest runs as they are now, not older ones as they were when last seen).
async function loadRunsPage(signal, only = false) {
  const page = await api(`/jobs?limit=${RUNS_PAGE}`, { signal });
  let changed = false;
  for (const run of page.runs) changed = upsertRun(run) || changed;
  if (only) {
    const listed = new Set(page.runs.map((run) => run.id));
    for (const id of [...state.runs.keys()]) {
      if (!listed.has(id)) {
        state.runs.delete(id);
        changed = true;
      }
    }
  }
  return changed;
}

/// A streamed list keeps at most RUNS_KEPT runs, the newest.
function trimRuns() {
  if (state.runs.size <= RUNS_KEPT) return;
  for (const run of sortedRuns().slice(RUNS_KEPT)) state.runs.delete(run.id);
}

async function runsFeed(signal) {
  for (;;) {
    if (signal.aborted) return;
    try {
      await loadRunsPage(signal);
      runsChanged();
      say("connected");
      const how = await follow("/jobs?follow=1", authHeaders(), (message) => {
        if (message.event !== "run") return;
        try {
          if (upsertRun(JSON.parse(message.data))) {
            trimRuns();
            runsChanged();
          }
        } catch {
          // A message that is not a run is skipped.
        }
      }, signal, async () => {
        // A run that changed between the first read and the stream's start is in neither:
        // read the page once more now that the stream holds every later change.
        if (await loadRunsPage(signal)) runsChanged();
        $("#runs-mode").textContent = "(live)";
      });
      if (how === "unsupported") {
        $("#runs-mode").textContent = `(the newest ${RUNS_PAGE}, polled every second)`;
        await poll(async () => {
          if (await loadRunsPage(signal, true)) runsChanged();
          say("connected");
        }, RUNS_POLL_MS, signal, (e) => say(explain(e)));
        return;
      }
    } catch (e) {
      if (signal.aborted) return;
      say(explain(e));
    }
    await sleep(RETRY_MS, signal);
  }
}

function sleep(ms, signal) {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal?.addEventListener("abort", () => {
      clearTimeout(timer);
      resolve();
    }, { once: true });
  });
}

function sortedRuns() {
  return [...state.runs.values()].sort((a, b) =>
    (b.created_at_ms - a.created_at_ms) || (a.id < b.id ? -1 : 1));
}

function runsChanged() {
  renderRuns();
  refreshGates();
  if (state.selected) scheduleTree();
  scheduleFleet();
}

// The fleet's run counts follow the runs: read again soon after they change (at most every
// half second), besides the regular poll.
let fleetDue = false;
function scheduleFleet() {
  if (fleetDue) return;
  fleetDue = true;
  setTimeout(() => {
    fleetDue = false;
    loadFleet();
  }, 500);
}

function renderRuns() {
  const rows = sortedRuns().map((run) => {
    const row = el("tr", {
      "data-run-id": run.id,
      "data-agent": run.agent,
      "data-status": run.status,
      class: run.id === state.selected ? "selected" : undefined,
      tabindex: "0",
    },
    el("td", { title: run.id }, shortId(run.id)),
    el("td", {}, run.agent),
    el("td", {}, el("span", { class: `badge ${run.status}` }, run.status)),
    el("td", {}, channelText(run.channel)),
    el("td", { title: run.parent_run || "" }, run.parent_run ? shortId(run.parent_run) : "-"),
    el("td", {}, run.hop_depth),
    el("td", {}, costText(run.cost)),
    el("td", {}, costText(run.tree_cost)),
    el("td", {}, wallText(run)));
    row.addEventListener("click", () => select(run.id));
    row.addEventListener("keydown", (event) => {
      if (event.key === "Enter") select(run.id);
    });
    return row;
  });
  fillBody("#runs", rows);
}

// ---------------------------------------------------------------------------------------------
// Approvals: the runs blocked on a gate, with the gate each waits on, and approve / deny.
// A decision names its gate: if the run has moved on to another gate meanwhile, the host
// answers `stale_decision` and nothing is decided.

// The gate a run waits on: of the requests no decision followed, the one asked first (as the
// host decides a decision without a gate).
async function pendingGate(runId) {
  let after = 0;
  let pending = [];
  const asks = new Map();
  for (;;) {
    const page = await api(`/runs/${runId}/events?after=${after}&limit=1000`);
    for (const e of page.events) {
      if (e.kind === "approval_requested") {
        const use = e.data.tool_use_id;
        const ask = (asks.get(use) || 0) + 1;
        asks.set(use, ask);
        // Events written before gates had ids: the id is derived the same way the host does.
        const id = e.data.gate || (ask > 1 ? `${runId}:${use}:${ask}` : `${runId}:${use}`);
        pending = pending.filter((p) => p.use !== use);
        pending.push({ id, tool: e.data.tool, use, input: e.data.input, in_doubt: !!e.data.in_doubt, asked_ms: e.at_ms });
      }
      if (e.kind === "approval_decided") pending = pending.filter((p) => p.use !== e.data.tool_use_id);
      if (e.kind === "canceled" || e.kind === "answer" || e.kind === "failed") pending = [];
    }
    if (page.next_after === null || page.next_after === undefined) return pending[0] || null;
    after = page.next_after;
  }
}

async function refreshGates() {
  const blocked = sortedRuns().filter((run) => run.status === "blocked");
  for (const id of [...state.gates.keys()]) {
    if (!blocked.some((run) => run.id === id)) state.gates.delete(id);
  }
  for (const run of blocked) {
    if (state.gates.has(run.id)) continue;
    state.gates.set(run.id, { tool: "…", asked_ms: null });
    try {
      const gate = await pendingGate(run.id);
      if (gate) state.gates.set(run.id, gate);
    } catch (e) {
      state.gates.set(run.id, { tool: `(${explain(e)})`, asked_ms: null });
    }
  }
  renderApprovals(blocked);
}

function renderApprovals(blocked) {
  $("#approvals-empty").hidden = blocked.length > 0;
  $("#approvals").hidden = blocked.length === 0;
  fillBody("#approvals", blocked.map((run) => {
    const gate = state.gates.get(run.id) || { tool: "…" };
    const busy = state.deciding.has(run.id);
    const doubt = !!gate.in_doubt;
    const approve = el("button", { type: "button", "data-approve": run.id, class: "approve" }, doubt ? "Run again" : "Approve");
    const deny = el("button", { type: "button", "data-deny": run.id, class: "deny" }, doubt ? "Don't run again" : "Deny");
    approve.disabled = busy || !gate.id;
    deny.disabled = busy || !gate.id;
    approve.addEventListener("click", () => decide(run.id, gate.id, true));
    deny.addEventListener("click", () => decide(run.id, gate.id, false));
    const input = gate.input === undefined ? "" : JSON.stringify(gate.input);
    const tool = el("td", { title: gate.id ? `gate ${gate.id}` : "" }, gate.tool);
    if (doubt) {
      tool.append(el("div", { class: "in-doubt" }, "in doubt: it was started before its host stopped and may or may not have run"));
    }
    if (input) tool.append(el("div", { class: "muted gate-input" }, input.length > 200 ? `${input.slice(0, 200)}…` : input));
    return el("tr", { "data-run-id": run.id, "data-gate": gate.id || "" },
      el("td", { title: run.id }, shortId(run.id)),
      el("td", {}, run.agent),
      tool,
      el("td", {}, when(gate.asked_ms)),
      el("td", { class: "actions" }, approve, deny));
  }));
}

async function decide(runId, gate, approve) {
  state.deciding.add(runId);
  renderApprovals(sortedRuns().filter((run) => run.status === "blocked"));
  try {
    const decided = await api(`/runs/${runId}/approve`, { method: "POST", body: { approve, gate } });
    const { gate: decidedGate, already_decided: already, ...run } = decided;
    upsertRun(run);
    $("#approvals-note").textContent = already
      ? `Gate ${decidedGate} was already decided: nothing changed.`
      : `${approve ? "Approved" : "Denied"} ${shortId(runId)}: the run is ${run.status} now.`;
  } catch (e) {
    $("#approvals-note").textContent = `Could not decide on ${shortId(runId)}: ${explain(e)}`;
  } finally {
    // Read the gate again: the run may wait on another one now.
    state.gates.delete(runId);
    state.deciding.delete(runId);
    runsChanged();
  }
}

// ---------------------------------------------------------------------------------------------
// One run: its event log (streamed or polled) and the call tree of its root run.

function select(runId) {
  state.selected = runId;
  $("#detail-id").textContent = runId;
  renderRuns();
  if (state.detail) state.detail.abort();
  state.detail = new AbortController();
  fillBody("#events", []);
  $("#detail-budget").textContent = "";
  eventsFeed(runId, state.detail.signal);
  scheduleTree();
  scheduleBudget();
}

function eventSummary(e) {
  const d = e.data || {};
  switch (e.kind) {
    case "created": return `${channelText(d.channel)} asked: ${d.input}`;
    case "status": return `${d.from} → ${d.to}${d.error ? `: ${d.error}` : ""}`;
    case "model_turn_started": return `asks the model for turn ${d.turn}…`;
    case "call_placed": return `called ${d.agent} (${shortId(d.child_run)})`;
    case "call_refused": return `call to ${d.agent} refused: ${d.code}: ${d.reason}`;
    case "reply_received": return `reply from ${d.agent} (${d.status}): ${d.output}`;
    case "approval_requested": return `waits for approval of ${d.tool}`;
    case "approval_decided": return `${d.approved ? "approved" : "denied"} by ${d.by}`;
    case "canceled": return `canceled by ${d.by}${d.reason ? `: ${d.reason}` : ""}`;
    case "model_turn": {
      const step = d.step || {};
      if (step.answer !== undefined) return `answers: ${clip(step.answer)}`;
      if (Array.isArray(step.tool_uses)) {
        return "uses " + step.tool_uses.map((u) => `${u.name}(${clip(u.input, 80)})`).join(", ");
      }
      return clip(d);
    }
    case "tool_result": return `${d.name}${d.is_error ? " (error)" : ""}: ${clip(d.content)}`;
    case "answer": return clip(d.text ?? d);
    case "failed": return clip(d.error ?? d);
    default: return clip(d);
  }
}

function appendEvents(events) {
  const body = $("#events").tBodies[0];
  for (const e of events) {
    if (body.querySelector(`tr[data-seq="${e.seq}"]`)) continue;
    // What the tree spent moves with the log: its turns, calls and replies.
    if (["model_turn", "call_placed", "call_refused", "reply_received", "status"].includes(e.kind)) {
      scheduleBudget();
    }
    body.append(el("tr", { "data-seq": e.seq, "data-kind": e.kind },
      el("td", {}, e.seq),
      el("td", {}, when(e.at_ms)),
      el("td", {}, e.kind),
      el("td", { class: "what" }, eventSummary(e))));
  }
}

async function eventsFeed(runId, signal) {
  let after = 0;
  const page = async () => {
    for (;;) {
      const got = await api(`/runs/${runId}/events?after=${after}&limit=1000`, { signal });
      if (signal.aborted) return;
      appendEvents(got.events);
      if (got.events.length > 0) after = got.events[got.events.length - 1].seq;
      if (got.next_after === null || got.next_after === undefined) return;
    }
  };
  try {
    await page();
    const settled = (run) => run && (run.status === "succeeded" || run.status === "failed");
    const known = state.runs.get(runId) || await api(`/runs/${runId}`, { signal });
    if (settled(known)) {
      $("#events-mode").textContent = "";
      return;
    }
    const how = await follow(`/runs/${runId}/events?follow=1&after=${after}`, authHeaders(), (message) => {
      try {
        if (message.event === "event") {
          const e = JSON.parse(message.data);
          appendEvents([e]);
          after = Math.max(after, e.seq);
        } else if (message.event === "end") {
          upsertRun(JSON.parse(message.data));
          runsChanged();
        }
      } catch {
        // A message that is not an event is skipped.
      }
    }, signal);
    if (how === "unsupported") {
      $("#events-mode").textContent = "(polled every second)";
      await poll(async () => {
        await page();
        // A run older than the runs list holds (opened from a tree) is read by itself.
        const run = state.runs.get(runId) || await api(`/runs/${runId}`, { signal });
        if (settled(run)) {
          await page();
          state.detail?.abort();
        }
      }, EVENTS_POLL_MS, signal, (e) => say(explain(e)));
    } else {
      $("#events-mode").textContent = "(live)";
    }
  } catch (e) {
    if (!signal.aborted) say(explain(e));
  }
}

// The selected run's tree budget, as `GET /runs/{id}` reports it (absent without one), in the
// words `consort runs show` uses: "budget: runs 3/10, tokens 1,234/50,000, wall 12 s/300 s".
function budgetText(b) {
  const n = (x) => Number(x).toLocaleString("en-US");
  const of = (spent, max, unit = "") =>
    max === null || max === undefined ? `${n(spent)}${unit} (no limit)` : `${n(spent)}${unit}/${n(max)}${unit}`;
  return `budget: runs ${of(b.spent.runs, b.max_runs)}, tokens ${of(b.spent.tokens, b.max_tokens)}, wall ${of(b.spent.wall_s, b.max_wall_s, " s")}`;
}

function scheduleBudget() {
  if (state.budgetDue) return;
  state.budgetDue = true;
  setTimeout(async () => {
    state.budgetDue = false;
    const selected = state.selected;
    if (!selected) return;
    try {
      const run = await api(`/runs/${selected}`);
      if (state.selected !== selected) return;
      $("#detail-budget").textContent = run.budget ? budgetText(run.budget) : "";
    } catch (e) {
      if (state.selected === selected) $("#detail-budget").textContent = explain(e);
    }
  }, 250);
}

function scheduleTree() {
  if (state.treeDue) return;
  state.treeDue = true;
  setTimeout(() => {
    state.treeDue = false;
    renderTree().catch((e) => {
      $("#tree-note").textContent = explain(e);
    });
  }, 100);
}

async function rootOf(runId) {
  let id = runId;
  for (let hops = 0; hops < 32; hops++) {
    let run = state.runs.get(id);
    if (!run) {
      try {
        run = await api(`/runs/${id}`);
      } catch {
        return id;
      }
    }
    if (!run.parent_run) return id;
    const parentHere = state.runs.get(run.parent_run) || await api(`/runs/${run.parent_run}`).catch(() => null);
    if (!parentHere) return id; // The caller lives on another host.
    id = run.parent_run;
  }
  return id;
}

function treeNode(node) {
  const label = el("span", { class: "node" },
    el("strong", {}, node.agent),
    " ",
    el("span", { class: `badge ${node.status || "unknown"}` }, node.status || "no reply yet"),
    " ",
    el("span", { class: "muted", title: node.run }, shortId(node.run)),
    node.host ? el("span", { class: "host" }, ` @${node.host}`) : null,
    el("span", { class: "cost" }, ` own ${costText(node.cost)} · tree ${costText(node.tree_cost)}`));
  if (!node.here) label.append(el("span", { class: "muted" }, " (on another host: cost as its reply carried back)"));
  const item = el("li", {
    "data-run-id": node.run,
    "data-agent": node.agent,
    "data-here": String(node.here),
  }, label);
  label.addEventListener("click", (event) => {
    event.stopPropagation();
    if (node.here) select(node.run);
  });
  if (node.children.length > 0) item.append(el("ul", {}, ...node.children.map(treeNode)));
  return item;
}

async function renderTree() {
  const selected = state.selected;
  if (!selected) return;
  const root = await rootOf(selected);
  const tree = await api(`/runs/${root}/tree`);
  if (state.selected !== selected) return;
  $("#tree").replaceChildren(el("ul", {}, treeNode(tree.root)));
  $("#tree-note").textContent = tree.truncated
    ? `Showing the first ${tree.nodes} runs of the tree.`
    : `Tree cost as turns/tools/calls/tokens; ${tree.nodes} run${tree.nodes === 1 ? "" : "s"}.`;
}

// ---------------------------------------------------------------------------------------------
// The fleet and the refusals, polled.

async function loadFleet() {
  try {
    const fleet = await api("/fleet");
    $("#host-name").textContent = `· ${fleet.host}${fleet.draining ? " (draining)" : ""}`;
    $("#fleet-note").textContent = fleet.hosts.length === 1
      ? "One host (no fleet.yaml): every agent runs here."
      : `${fleet.hosts.length} hosts; links as this host sees them.`;
    fillBody("#hosts", fleet.hosts.map((h) => el("tr", { "data-host": h.name },
      el("td", {}, h.name + (h.here ? " (this host)" : "")),
      el("td", {}, h.here ? "-" : el("span", { class: `badge ${h.link}`, title: h.link_error || "" },
        h.link + (h.link_error ? `: ${h.link_error}` : ""))),
      el("td", {}, h.agents.join(", ") +
        (h.agents_total > h.agents.length ? ` … (${h.agents_total} in all)` : "")))));
    fillBody("#agents", fleet.agents.map((a) => {
      const counts = fleet.runs[a.name];
      const state = a.up ? (a.awake ? "up (awake)" : "up (asleep)") : `down: ${a.down ? a.down.reason : "?"}`;
      return el("tr", { "data-agent": a.name, "data-up": String(a.up) },
        el("td", {}, a.name),
        el("td", {}, el("span", { class: `badge ${a.up ? "up" : "down"}`, title: a.down?.detail || "" }, state)),
        el("td", {}, a.restarts),
        el("td", {}, counts
          ? `${counts.queued}/${counts.running}/${counts.waiting}/${counts.blocked}/${counts.succeeded}/${counts.failed}`
          : "-"));
    }));
  } catch (e) {
    $("#fleet-note").textContent = e instanceof ApiFailure && e.status === 403
      ? "The fleet view needs a token with the operator role."
      : explain(e);
    if (e instanceof ApiFailure && (e.status === 401 || e.status === 403)) {
      fillBody("#hosts", []);
      fillBody("#agents", []);
    }
  }
}

async function loadRefusals() {
  try {
    const tally = await api("/refusals");
    const runs = `${tally.scanned_runs} run${tally.scanned_runs === 1 ? "" : "s"}`;
    $("#refusals-note").textContent = tally.by_code.length === 0
      ? `No call was refused in the newest ${runs}.`
      : `Call refusals in the newest ${runs} (at most ${tally.window}).`;
    $("#refusals").hidden = tally.by_code.length === 0;
    $("#refusals-recent").hidden = tally.recent.length === 0;
    fillBody("#refusals", tally.by_code.map((c) => el("tr", { "data-code": c.code },
      el("td", {}, c.code), el("td", {}, c.count))));
    fillBody("#refusals-recent", tally.recent.map((r) => el("tr", {},
      el("td", {}, when(r.at_ms)),
      el("td", { title: r.run }, shortId(r.run)),
      el("td", {}, `${r.agent} → ${r.callee}`),
      el("td", {}, r.code),
      el("td", {}, r.reason))));
  } catch (e) {
    $("#refusals-note").textContent = explain(e);
  }
}

// ---------------------------------------------------------------------------------------------
// Start, and start again when the token changes.

function start() {
  state.feeds.abort();
  state.feeds = new AbortController();
  const signal = state.feeds.signal;
  state.runs.clear();
  state.gates.clear();
  runsFeed(signal);
  poll(loadFleet, FLEET_POLL_MS, signal, () => {});
  poll(loadRefusals, REFUSALS_POLL_MS, signal, () => {});
  if (state.selected) select(state.selected);
}

$("#token").value = state.token;
$("#token-form").addEventListener("submit", (event) => {
  event.preventDefault();
  state.token = $("#token").value.trim();
  if (state.token) sessionStorage.setItem(TOKEN_KEY, state.token);
  else sessionStorage.removeItem(TOKEN_KEY);
  start();
});
$("#token-clear").addEventListener("click", () => {
  state.token = "";
  $("#token").value = "";
  sessionStorage.removeItem(TOKEN_KEY);
  start();
});
start();
