//! The dashboard, with the real binary: the page and its strict headers, the read-only routes it
//! uses beyond the run API (`/fleet`, `/refusals`, `/runs/{id}/tree`) and who may read them,
//! the fleet view and call tree across two `consort serve` hosts, and the page itself driven in
//! Debian's headless Chromium (`tests/browser/dashboard.mjs`).
//!
//! The browser test needs `node`, `/usr/bin/chromium` (or `CONSORT_CHROMIUM`) and
//! `npm ci` run in `tests/browser`; without them it skips, saying so, unless
//! `CONSORT_BROWSER_TESTS=required` (as `.ci/run` sets after installing them), where it fails.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};

use support::{Fleet, ServeFleet, Served, eventually, path_str};

/// An agent whose ledger tool waits for an operator's approval.
const AUDITOR: &str = r#"
name: auditor
description: Checks the ledger, with an operator's approval for every query.
model:
  script:
    - tool: {name: ledger, input: "SELECT printf('%.2f', sum(amount)) FROM spend WHERE month = :input"}
    - answer: "audited: {tool.ledger}"
tools:
  - {name: ledger, kind: sql, database: ledger.db, description: the ledger, approval: required}
"#;

/// An agent that calls a peer which does not accept it: one `not_accepted` refusal a run.
const PUSHY: &str = r#"
name: pushy
agents:
  can_call: [cfo]
model:
  script:
    - call: [{agent: cfo, input: "2026-08"}]
    - answer: "pushy heard: {reply.cfo}"
"#;

const AUTH: &str = "tokens:
  - {name: ops, token: tok-ops, roles: [operator]}
  - {name: alice, token: tok-alice}
  - {name: bob, token: tok-bob}
";

fn example() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/marketing-finance")
}

/// `consort dev` on the example plus `extra` agents, with `args`.
fn dev(extra: &[(&str, &str)], args: &[&str]) -> (Fleet, Served) {
    let fleet = Fleet::new();
    for (name, yaml) in extra {
        fleet.agent(name, yaml);
        if yaml.contains("ledger.db") {
            fleet.ledger(name);
        }
    }
    let mut dirs = vec![example()];
    if !extra.is_empty() {
        dirs.push(fleet.agents());
    }
    let served = Served::start_with(&dirs, &fleet.data(), &[], args);
    (fleet, served)
}

fn get(served: &Served, path: &str, token: Option<&str>) -> (u16, Value) {
    let mut request = served.http().get(format!("{}{path}", served.url));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().expect("GET");
    let status = response.status().as_u16();
    (status, response.json().unwrap_or(Value::Null))
}

fn start(served: &Served, agent: &str, input: &str, token: Option<&str>) -> Value {
    let mut request = served
        .http()
        .post(format!("{}/runs", served.url))
        .json(&json!({"agent": agent, "input": input}));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().expect("POST /runs");
    assert_eq!(response.status().as_u16(), 201);
    response.json().expect("run json")
}

fn settled(served: &Served, id: &str, token: Option<&str>) -> Value {
    eventually(
        &format!("run {id} to settle"),
        Duration::from_secs(60),
        || {
            let (status, run) = get(served, &format!("/runs/{id}"), token);
            (status == 200 && (run["status"] == "succeeded" || run["status"] == "failed"))
                .then_some(run)
        },
    )
}

#[test]
fn the_page_is_served_with_strict_headers_and_holds_no_data() {
    let (_fleet, served) = dev(&[], &[]);
    let http = reqwest::blocking::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let root = http.get(format!("{}/", served.url)).send().unwrap();
    assert_eq!(root.status().as_u16(), 303);
    assert_eq!(root.headers()["location"], "/ui/");
    for (file, kind) in [
        ("", "text/html"),
        ("app.js", "text/javascript"),
        ("sse.js", "text/javascript"),
        ("style.css", "text/css"),
        ("favicon.svg", "image/svg+xml"),
    ] {
        let response = http
            .get(format!("{}/ui/{file}", served.url))
            .send()
            .unwrap();
        assert_eq!(response.status().as_u16(), 200, "{file}");
        let headers = response.headers();
        assert!(
            headers["content-type"].to_str().unwrap().starts_with(kind),
            "{file}: {headers:?}"
        );
        let csp = headers["content-security-policy"].to_str().unwrap();
        assert!(csp.contains("default-src 'none'"), "{csp}");
        assert!(csp.contains("script-src 'self'"), "{csp}");
        assert!(!csp.contains("unsafe-inline"), "{csp}");
        assert_eq!(headers["x-content-type-options"], "nosniff");
    }
    let missing = http
        .get(format!("{}/ui/../Cargo.toml", served.url))
        .send()
        .unwrap();
    assert_eq!(missing.status().as_u16(), 404);
    assert_eq!(
        http.get(format!("{}/ui/nope.js", served.url))
            .send()
            .unwrap()
            .status()
            .as_u16(),
        404
    );
    // The front door still stands in front of the page: another site's name is refused.
    let rebound = http
        .get(format!("{}/ui/", served.url))
        .header("Host", "evil.example")
        .send()
        .unwrap();
    assert_eq!(rebound.status().as_u16(), 421);
}

#[test]
fn the_fleet_refusals_and_tree_routes_show_a_single_host() {
    let (_fleet, served) = dev(&[("pushy", PUSHY)], &[]);
    let cmo = start(&served, "cmo", "What did we spend in August?", None);
    let cmo_id = cmo["id"].as_str().unwrap();
    assert_eq!(settled(&served, cmo_id, None)["status"], "succeeded");
    let pushy = start(&served, "pushy", "go", None);
    let pushy_id = pushy["id"].as_str().unwrap();
    settled(&served, pushy_id, None);

    let (status, fleet) = get(&served, "/fleet", None);
    assert_eq!(status, 200, "{fleet}");
    assert_eq!(fleet["host"], "local");
    assert_eq!(fleet["hosts"].as_array().unwrap().len(), 1, "{fleet}");
    assert_eq!(fleet["hosts"][0]["agents"], json!(["cfo", "cmo", "pushy"]));
    assert_eq!(fleet["hosts"][0]["agents_total"], 3);
    let agents = fleet["agents"].as_array().unwrap();
    assert!(agents.iter().all(|a| a["up"] == true), "{fleet}");
    assert_eq!(fleet["runs"]["cmo"]["succeeded"], 1, "{fleet}");
    assert_eq!(fleet["runs"]["cfo"]["succeeded"], 1, "{fleet}");

    let (status, tree) = get(&served, &format!("/runs/{cmo_id}/tree"), None);
    assert_eq!(status, 200, "{tree}");
    assert_eq!(tree["nodes"], 2);
    assert_eq!(tree["root"]["agent"], "cmo");
    let cfo = &tree["root"]["children"][0];
    assert_eq!(cfo["agent"], "cfo");
    assert_eq!(cfo["here"], true);
    assert_eq!(cfo["status"], "succeeded");
    assert_eq!(cfo["hop_depth"], 1);
    assert_eq!(cfo["tree_cost"]["model_turns"], 3, "{tree}");
    assert_eq!(tree["root"]["tree_cost"]["model_turns"], 5, "{tree}");

    let (status, refusals) = get(&served, "/refusals", None);
    assert_eq!(status, 200, "{refusals}");
    assert_eq!(refusals["scanned_runs"], 3, "{refusals}");
    assert_eq!(
        refusals["by_code"],
        json!([{"code": "not_accepted", "count": 1}])
    );
    assert_eq!(refusals["recent"][0]["run"], pushy_id);
    assert_eq!(refusals["recent"][0]["callee"], "cfo");
    let (_, narrowed) = get(&served, "/refusals?agent=cmo", None);
    assert_eq!(narrowed["by_code"], json!([]), "{narrowed}");

    let (status, bad) = get(&served, "/runs/nope/tree", None);
    assert_eq!(
        (status, bad["error"]["code"].clone()),
        (400, json!("bad_run_id"))
    );
    let unknown = format!("run_{}", "0".repeat(32));
    let (status, _) = get(&served, &format!("/runs/{unknown}/tree"), None);
    assert_eq!(status, 404);
    let (status, bad) = get(&served, "/refusals?limit=5", None);
    assert_eq!(
        (status, bad["error"]["code"].clone()),
        (400, json!("bad_query"))
    );
}

#[test]
fn the_fleet_view_lists_at_most_500_agents_of_a_host() {
    let fleet = Fleet::new();
    for i in 0..502 {
        fleet.agent(
            &format!("echo{i:03}"),
            &format!("name: echo{i:03}\nmodel: {{script: [{{answer: \"echo {{input}}\"}}]}}\n"),
        );
    }
    let served = Served::start(&[fleet.agents()], &fleet.data(), &[]);
    let last = start(&served, "echo501", "hi", None);
    settled(&served, last["id"].as_str().unwrap(), None);
    let first = start(&served, "echo000", "hi", None);
    settled(&served, first["id"].as_str().unwrap(), None);
    let (status, view) = get(&served, "/fleet", None);
    assert_eq!(status, 200);
    let here = &view["hosts"][0];
    assert_eq!(here["agents_total"], 502);
    assert_eq!(here["agents"].as_array().unwrap().len(), 500);
    assert_eq!(here["agents"][0], "echo000");
    assert_eq!(here["agents"][499], "echo499");
    let agents = view["agents"].as_array().unwrap();
    assert_eq!(agents.len(), 500);
    assert_eq!(agents[499]["name"], "echo499");
    // Counts for the agents listed, and only for them.
    assert_eq!(
        view["runs"]["echo000"]["succeeded"], 1,
        "{}",
        view["runs"]["echo000"]
    );
    assert_eq!(view["runs"].as_object().unwrap().len(), 500);
    assert!(view["runs"].get("echo501").is_none());
}

#[test]
fn the_dashboard_routes_follow_the_access_rules() {
    let fleet = Fleet::new();
    let auth = fleet.dir.path().join("host-auth.yaml");
    std::fs::write(&auth, AUTH).unwrap();
    let served = Served::start_with(
        &[example()],
        &fleet.data(),
        &[],
        &["--auth", path_str(&auth)],
    );
    let alice = start(&served, "cmo", "2026-08", Some("tok-alice"));
    let alice_id = alice["id"].as_str().unwrap();
    settled(&served, alice_id, Some("tok-alice"));

    // The page itself holds no data: it loads without a token.
    let (status, _) = get(&served, "/ui/app.js", None);
    assert_eq!(status, 200);

    // The fleet view is the operator's.
    assert_eq!(get(&served, "/fleet", None).0, 401);
    let (status, body) = get(&served, "/fleet", Some("tok-alice"));
    assert_eq!(
        (status, body["error"]["code"].clone()),
        (403, json!("forbidden"))
    );
    assert_eq!(get(&served, "/fleet", Some("tok-ops")).0, 200);

    // A tree is read under its root run's rule: its owner and operators, nobody else.
    let tree = format!("/runs/{alice_id}/tree");
    assert_eq!(get(&served, &tree, None).0, 401);
    let (status, body) = get(&served, &tree, Some("tok-bob"));
    assert_eq!(
        (status, body["error"]["code"].clone()),
        (404, json!("unknown_run"))
    );
    let (status, body) = get(&served, &tree, Some("tok-alice"));
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["root"]["children"][0]["agent"], "cfo");
    assert_eq!(get(&served, &tree, Some("tok-ops")).0, 200);

    // Refusals are counted over the runs the caller may list.
    assert_eq!(get(&served, "/refusals", None).0, 401);
    let (_, bob) = get(&served, "/refusals", Some("tok-bob"));
    assert_eq!(bob["scanned_runs"], 0, "{bob}");
    let (_, alice) = get(&served, "/refusals", Some("tok-alice"));
    assert_eq!(alice["scanned_runs"], 1, "{alice}");
    let (_, ops) = get(&served, "/refusals", Some("tok-ops"));
    assert_eq!(ops["scanned_runs"], 2, "{ops}");
}

#[test]
fn across_hosts_the_fleet_shows_links_and_the_tree_names_the_remote_callee() {
    let mut fleet = ServeFleet::example(|_| {});
    fleet.start("alpha");
    fleet.start("beta");
    let id = fleet.start_run("alpha", "cmo", "2026-08");
    let run = fleet.wait_settled("alpha", &id, Duration::from_secs(60));
    assert_eq!(run["status"], "succeeded", "{run}");

    let read = |host: &str, path: &str| -> Value {
        let response = fleet
            .http
            .get(format!("{}{path}", fleet.url(host)))
            .send()
            .expect("GET");
        assert_eq!(response.status().as_u16(), 200, "{host}{path}");
        response.json().expect("json")
    };
    let view = read("alpha", "/fleet");
    assert_eq!(view["host"], "alpha");
    let hosts = view["hosts"].as_array().unwrap();
    assert_eq!(hosts.len(), 2, "{view}");
    assert_eq!(hosts[0]["name"], "alpha");
    assert_eq!(hosts[0]["here"], true);
    assert_eq!(hosts[0]["agents"], json!(["cmo"]));
    assert_eq!(hosts[1]["agents_total"], 1);
    assert_eq!(hosts[1]["name"], "beta");
    assert_eq!(hosts[1]["agents"], json!(["cfo"]));
    // The call just went over the link, so it is open.
    assert_eq!(hosts[1]["link"], "connected", "{view}");

    let tree = read("alpha", &format!("/runs/{id}/tree"));
    let cfo = &tree["root"]["children"][0];
    assert_eq!(cfo["agent"], "cfo", "{tree}");
    assert_eq!(cfo["here"], false);
    assert_eq!(cfo["host"], "beta");
    assert_eq!(cfo["status"], "succeeded");
    // What the cfo's reply carried back: its own 3 turns and 1 tool call.
    assert_eq!(cfo["tree_cost"]["model_turns"], 3, "{tree}");
    assert_eq!(cfo["tree_cost"]["tool_calls"], 1, "{tree}");
    assert_eq!(cfo["cost"], Value::Null);
    assert_eq!(tree["root"]["tree_cost"]["model_turns"], 5, "{tree}");

    // beta holds the cfo run as a root of its own view of the tree.
    let beta_jobs = read("beta", "/jobs");
    let cfo_id = beta_jobs["runs"][0]["id"].as_str().unwrap().to_owned();
    assert_eq!(cfo_id, cfo["run"].as_str().unwrap());
    let beta_tree = read("beta", &format!("/runs/{cfo_id}/tree"));
    assert_eq!(beta_tree["root"]["agent"], "cfo");
    assert_eq!(beta_tree["root"]["host"], "beta");
}

/// Skips a test that needs a tool which is missing, saying why, unless
/// `CONSORT_BROWSER_TESTS=required`, where it fails.
fn missing_tool(why: &str) {
    assert!(
        std::env::var("CONSORT_BROWSER_TESTS").as_deref() != Ok("required"),
        "CONSORT_BROWSER_TESTS=required, but the dashboard's browser tests cannot run: {why}"
    );
    eprintln!("skipping a browser test of the dashboard: {why}");
}

fn has_node() -> bool {
    Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|out| out.status.success())
}

/// What the browser test needs, or why it cannot run here.
fn browser_tools() -> Result<(PathBuf, PathBuf), String> {
    let chromium = PathBuf::from(
        std::env::var("CONSORT_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into()),
    );
    if !chromium.exists() {
        return Err(format!("no Chromium at {}", chromium.display()));
    }
    if !has_node() {
        return Err("no `node` on PATH".into());
    }
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser");
    if !dir.join("node_modules/playwright-core").exists() {
        return Err(format!(
            "playwright-core is not installed: run `npm ci` in {}",
            dir.display()
        ));
    }
    Ok((chromium, dir))
}

/// Runs `tests/browser/dashboard.mjs URL MODE` and fails with its output unless every check
/// passed.
fn drive_page(chromium: &Path, dir: &Path, url: &str, mode: &str) {
    let mut node = Command::new("node");
    node.arg(dir.join("dashboard.mjs"))
        .args([url, mode])
        .current_dir(dir)
        .env("CONSORT_CHROMIUM", chromium);
    if let Ok(shots) = std::env::var("DASHBOARD_SCREENSHOTS") {
        node.env("DASHBOARD_SCREENSHOTS", shots);
    }
    let out = node.output().expect("run node");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("dashboard: all checks passed"),
        "the browser test failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
}

#[test]
fn the_page_of_a_serve_host_shows_its_link_and_the_callee_on_the_other_host() {
    let (chromium, dir) = match browser_tools() {
        Ok(found) => found,
        Err(why) => return missing_tool(&why),
    };
    let mut fleet = ServeFleet::example(|_| {});
    fleet.start("alpha");
    fleet.start("beta");
    let id = fleet.start_run("alpha", "cmo", "2026-08");
    let run = fleet.wait_settled("alpha", &id, Duration::from_secs(60));
    assert_eq!(run["status"], "succeeded", "{run}");
    drive_page(&chromium, &dir, fleet.url("alpha"), "fleet");
}

#[test]
fn the_page_on_a_host_with_an_auth_file_uses_the_token_typed_in() {
    let (chromium, dir) = match browser_tools() {
        Ok(found) => found,
        Err(why) => return missing_tool(&why),
    };
    let fleet = Fleet::new();
    let auth = fleet.dir.path().join("host-auth.yaml");
    std::fs::write(&auth, AUTH).unwrap();
    let served = Served::start_with(
        &[example()],
        &fleet.data(),
        &[],
        &["--auth", path_str(&auth)],
    );
    let alice = start(&served, "cmo", "2026-08", Some("tok-alice"));
    settled(&served, alice["id"].as_str().unwrap(), Some("tok-alice"));
    drive_page(&chromium, &dir, &served.url, "auth");
}

#[test]
fn the_page_in_a_real_browser_shows_runs_live_and_approves_a_gate() {
    let (chromium, dir) = match browser_tools() {
        Ok(found) => found,
        Err(why) => return missing_tool(&why),
    };
    let (_fleet, served) = dev(&[("auditor", AUDITOR), ("pushy", PUSHY)], &[]);
    // The README's first command, through the API.
    let answer = served.run_wait("cmo", "What did we spend in August?");
    assert_eq!(answer["status"], "succeeded", "{answer}");
    assert!(
        answer["output"]
            .as_str()
            .unwrap_or("")
            .contains("48250.00 USD"),
        "{answer}"
    );
    // One refused call, for the refusals panel.
    let pushy = served.run_wait("pushy", "go");
    assert_eq!(pushy["status"], "succeeded", "{pushy}");

    drive_page(&chromium, &dir, &served.url, "dev");

    // The host's side of the click: the gated run was approved by the local operator.
    let jobs = get(&served, "/jobs?agent=auditor", None).1;
    let audited = &jobs["runs"][0];
    assert_eq!(audited["status"], "succeeded", "{jobs}");
    assert_eq!(audited["output"], "audited: 48250.00");
    let id = audited["id"].as_str().unwrap();
    let events = get(&served, &format!("/runs/{id}/events"), None).1;
    let decided = events["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == "approval_decided")
        .cloned()
        .unwrap_or(Value::Null);
    assert_eq!(decided["data"]["approved"], true, "{events}");
    assert_eq!(decided["data"]["by"], "operator", "{events}");
}

#[test]
fn the_page_s_stream_reader_follows_the_event_stream_contract() {
    if !has_node() {
        return missing_tool("no `node` on PATH");
    }
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser");
    let out = Command::new("node")
        .args(["--test", "sse.test.mjs"])
        .current_dir(&dir)
        .output()
        .expect("run node --test");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("# fail 0"),
        "the stream reader's tests failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}
