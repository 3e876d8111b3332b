// Drives the dashboard of a serving `consort dev` in Debian's headless Chromium, as a person
// would: `node tests/browser/dashboard.mjs URL` (tests/dashboard.rs starts the host, on the
// marketing-finance example plus an `auditor` agent whose tool needs an approval and a `pushy`
// agent whose call the cfo refuses, and has run the example's question and pushy once).
//
// It checks that the page loads with no error and no blocked resource, shows the cmo and cfo
// runs and the call edge between them, shows a run started through the API without a reload,
// and that approving on the page unblocks a gated run, which then settles.
//
// `node tests/browser/dashboard.mjs URL fleet` checks instead the page of host `alpha` of a
// two-host `consort serve` fleet (the example: cmo on alpha, cfo on beta, its question asked
// once): the link to beta shown connected, and the cfo a node on beta in the cmo's call tree.
//
// `node tests/browser/dashboard.mjs URL auth` checks the token field on a host started with
// `--auth` (tokens tok-ops, an operator, and tok-alice, who started one cmo run): nothing is
// shown without a token, a token typed in is used and kept for the tab, and forgotten.
//
// CONSORT_CHROMIUM names the browser (default /usr/bin/chromium); DASHBOARD_SCREENSHOTS=DIR
// writes dashboard.png (or dashboard-fleet.png) there. Exits 0 with
// "dashboard: all checks passed", else 1.

import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium } from "playwright-core";

const url = process.argv[2];
const mode = process.argv[3] || "dev";
if (!url || !["dev", "fleet", "auth"].includes(mode)) {
  console.error("usage: node dashboard.mjs URL [fleet|auth]");
  process.exit(2);
}
const executablePath = process.env.CONSORT_CHROMIUM || "/usr/bin/chromium";
const shots = process.env.DASHBOARD_SCREENSHOTS;
// Generous: a loaded 2-core machine runs the host, its build and the browser at once.
const WAIT_MS = 60_000;

function check(condition, what) {
  if (!condition) throw new Error(`check failed: ${what}`);
  console.log(`ok: ${what}`);
}

async function api(path, init = {}) {
  const response = await fetch(url + path, {
    ...init,
    headers: { "Content-Type": "application/json", ...(init.headers || {}) },
  });
  const body = await response.json();
  if (!response.ok) throw new Error(`${path}: HTTP ${response.status} ${JSON.stringify(body)}`);
  return body;
}

const profile = mkdtempSync(join(tmpdir(), "consort-chromium-"));
let browser;
let failed = false;
try {
  // A persistent context on a fresh, empty profile folder: nothing from another run.
  browser = await chromium.launchPersistentContext(profile, {
    executablePath,
    headless: true,
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
    viewport: { width: 1400, height: 1000 },
  });
  const page = await browser.newPage();
  page.setDefaultTimeout(WAIT_MS);
  const problems = [];
  page.on("console", (message) => {
    // The page asks for event streams first and polls where the host answers 400 or 404:
    // Chromium logs those answers, and they are expected.
    const probe = (message.location().url || "").includes("follow=1");
    // Without a token, or with a token that may not see the fleet view, the host answers 401
    // or 403, which the auth checks expect.
    const refused = mode === "auth" && /status of 40[13]/.test(message.text());
    if (message.type() === "error" && !probe && !refused) {
      problems.push(`console: ${message.text()} (${message.location().url})`);
    }
  });
  page.on("pageerror", (error) => problems.push(`page error: ${error.message}`));
  page.on("requestfailed", (request) => {
    // A stream or poll cut short by the page itself (an abort on navigation) is not a problem.
    const why = request.failure()?.errorText || "";
    if (!why.includes("ERR_ABORTED")) problems.push(`request failed: ${request.url()} ${why}`);
  });

  // The page loads (through the redirect from /) and shows the example's two runs.
  const response = await page.goto(url + "/", { waitUntil: "load" });
  check(response.ok(), `the page loads (HTTP ${response.status()})`);
  check(page.url().endsWith("/ui/"), "GET / leads to /ui/");
  const csp = (await response.allHeaders())["content-security-policy"] || "";
  check(csp.includes("script-src 'self'"), "the page is served with a strict CSP");
  await page.evaluate(() => {
    window.__consortNotReloaded = true;
  });
  if (mode === "fleet") {
    await fleetChecks(page);
  } else if (mode === "auth") {
    await authChecks(page);
  } else {
    await devChecks(page);
  }
  check(problems.length === 0, `no console error or failed request (${problems.join("; ")})`);
  console.log("dashboard: all checks passed");
} catch (error) {
  failed = true;
  console.error(`dashboard: ${error.stack || error}`);
} finally {
  await browser?.close().catch(() => {});
  rmSync(profile, { recursive: true, force: true });
}
process.exit(failed ? 1 : 0);

async function screenshot(page, name) {
  if (!shots) return;
  await page.screenshot({ path: join(shots, name), fullPage: true });
  console.log(`wrote ${join(shots, name)}`);
}

/// Host alpha of a two-host fleet: the link to beta, and the cfo's run as a node on beta.
async function fleetChecks(page) {
  await page.locator('#hosts tr[data-host="beta"]', { hasText: "connected" }).waitFor();
  check((await page.locator('#hosts tr[data-host="beta"]').textContent()).includes("cfo"),
    "the fleet shows host beta, serving cfo, with its link connected");
  await page.locator('#agents tr[data-agent="cmo"][data-up="true"]').waitFor();
  check(true, "the fleet shows alpha's cmo up");
  await page.locator('#runs tr[data-agent="cmo"][data-status="succeeded"]').first().click();
  const edge = page.locator('#tree li[data-agent="cmo"] > ul > li[data-agent="cfo"][data-here="false"]');
  await edge.waitFor();
  const text = await edge.textContent();
  check(text.includes("@beta"), "the call tree shows the edge cmo -> cfo, the cfo on beta");
  check(text.includes("tree 3/1/0/0"), "the cfo node shows the cost its reply carried back");
  await screenshot(page, "dashboard-fleet.png");
}

/// A host with an auth file: the token field.
async function authChecks(page) {
  await page.locator("#status", { hasText: "needs a bearer token" }).waitFor();
  check(await page.locator("#runs tbody tr").count() === 0, "without a token the page shows no run");
  await page.fill("#token", "tok-alice");
  await page.click('#token-form button[type="submit"]');
  await page.locator('#runs tr[data-agent="cmo"]').waitFor();
  check(true, "with alice's token the page shows her run");
  await page.locator("#fleet-note", { hasText: "operator role" }).waitFor();
  check(true, "alice's token does not see the fleet view, and the page says why");
  await page.fill("#token", "tok-ops");
  await page.click('#token-form button[type="submit"]');
  await page.locator('#hosts tr[data-host="local"]').waitFor();
  check(true, "an operator's token sees the fleet view");
  check(await page.evaluate(() => sessionStorage.getItem("consort.token")) === "tok-ops",
    "the token is kept in the tab's sessionStorage");
  await page.reload();
  await page.locator('#runs tr[data-agent="cmo"]').first().waitFor();
  check(await page.inputValue("#token") === "tok-ops", "a reload of the tab keeps the token");
  await page.click("#token-clear");
  await page.locator("#status", { hasText: "needs a bearer token" }).waitFor();
  check(await page.evaluate(() => sessionStorage.getItem("consort.token")) === null,
    "Forget drops the token");
}

/// `consort dev` on the example, the auditor and pushy.
async function devChecks(page) {
  await page.locator('#runs tr[data-agent="cmo"][data-status="succeeded"]').first().waitFor();
  await page.locator('#runs tr[data-agent="cfo"][data-status="succeeded"]').first().waitFor();
  check(true, "the runs table shows the cmo and cfo runs, succeeded");
  const cfoRow = page.locator('#runs tr[data-agent="cfo"]').first();
  check((await cfoRow.textContent()).includes("agent:cmo"), "the cfo run's channel is agent:cmo");
  // The host streams run changes (GET /jobs?follow=1): the page follows the stream, not a poll.
  await page.waitForFunction(() => document.querySelector("#runs-mode")?.textContent === "(live)");
  check(true, "the runs table follows the host's live stream");

  // The fleet: one host, both agents up.
  await page.locator('#agents tr[data-agent="cfo"][data-up="true"]').waitFor();
  await page.locator('#agents tr[data-agent="cmo"][data-up="true"]').waitFor();
  check(true, "the fleet shows cmo and cfo up");

  // The call edge: selecting the cmo run shows its tree, cmo -> cfo, with the cfo's cost.
  await page.locator('#runs tr[data-agent="cmo"]').first().click();
  const edge = page.locator('#tree li[data-agent="cmo"] > ul > li[data-agent="cfo"]');
  await edge.waitFor();
  check(true, "the call tree shows the edge cmo -> cfo");
  check((await edge.textContent()).includes("tree 3/1/0/0"), "the cfo node shows its tree cost");
  await page.locator('#events tr[data-kind="call_placed"]').waitFor();
  check(true, "the cmo run's event log shows its call");

  // The refusals panel: the pushy agent's call to the cfo, which does not accept it.
  await page.locator('#refusals tr[data-code="not_accepted"]').waitFor();
  check((await page.locator("#refusals-recent").textContent()).includes("pushy → cfo"),
    "the refusals panel counts the not_accepted call of pushy to cfo");

  // A run started through the API appears without a reload, blocked on its gate.
  const started = await api("/runs", {
    method: "POST",
    body: JSON.stringify({ agent: "auditor", input: "2026-08" }),
  });
  const row = page.locator(`#runs tr[data-run-id="${started.id}"]`);
  await row.waitFor();
  check(true, "a run started through the API appears without a reload");
  await page.locator(`#runs tr[data-run-id="${started.id}"][data-status="blocked"]`).waitFor();
  const approve = page.locator(`#approvals button[data-approve="${started.id}"]`);
  await approve.waitFor();
  await page.locator(`#approvals tr[data-run-id="${started.id}"]`, { hasText: "ledger" }).waitFor();
  check(true, "the approvals list shows the run waiting on its ledger tool");
  await page.locator('#agents tr[data-agent="auditor"]', { hasText: "0/0/0/1/0/0" }).waitFor();
  check(true, "the fleet's run counts show the auditor's run blocked");
  await screenshot(page, "dashboard.png");

  // Approving on the page unblocks the run, which then settles.
  await approve.click();
  await page.locator(`#runs tr[data-run-id="${started.id}"][data-status="succeeded"]`).waitFor();
  check(true, "approving on the page unblocks the run, which succeeds");
  await page.locator(`#approvals tr[data-run-id="${started.id}"]`).waitFor({ state: "detached" });
  check(true, "the run left the approvals list");
  const settled = await api(`/runs/${started.id}`);
  check(settled.status === "succeeded", `the host says the run succeeded (${settled.status})`);

  // A run started with a tree budget: its view says what its tree spent against it.
  const budgeted = await api("/runs", {
    method: "POST",
    body: JSON.stringify({ agent: "cmo", input: "2026-08", budget: { max_runs: 5, max_wall_s: 600 } }),
  });
  await page.locator(`#runs tr[data-run-id="${budgeted.id}"][data-status="succeeded"]`).click();
  await page.locator("#detail-budget", { hasText: "budget: runs 2/5, tokens 0 (no limit), wall " }).waitFor();
  check((await page.locator("#detail-budget").textContent()).endsWith("/600 s"),
    "the run's view shows its tree's spend against its budget");
  await page.locator('#runs tr[data-agent="auditor"]').first().click();
  await page.waitForFunction(() => document.querySelector("#detail-budget")?.textContent === "");
  check(true, "a run without a budget shows none");
  check(await page.evaluate(() => window.__consortNotReloaded === true), "the page never reloaded");
}
