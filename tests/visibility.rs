//! End-to-end tests of tool visibility with the real binary: per-principal catalogs behind
//! search_tools / load_tool, the real check behind invoke_tool and direct tool use, T2 probes
//! and their budget, bearer tokens of HTTP callers, the operator commands, and bad input.

mod support;

use serde_json::{Value, json};
use support::{Fleet, Served, consort, path_str, runs_of, stderr, stdout};

const EXAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/marketing-finance");

/// The tool_result events of a run's log whose tool is `name`, as (content, is_error).
fn results(fleet_data: &std::path::Path, run: &str, name: &str) -> Vec<(String, bool)> {
    let out = consort(&[
        "runs",
        "show",
        run,
        "--data",
        path_str(fleet_data),
        "--json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    v["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "tool_result" && e["data"]["name"] == name)
        .map(|e| {
            (
                e["data"]["content"].as_str().unwrap().to_owned(),
                e["data"]["is_error"].as_bool().unwrap(),
            )
        })
        .collect()
}

fn card_names(search_answer: &str) -> Vec<String> {
    let v: Value = serde_json::from_str(search_answer).unwrap();
    v["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn the_cmos_runs_of_the_example_cannot_see_payroll() {
    let data = tempfile::tempdir().unwrap();
    let out = consort(&[
        "dev",
        EXAMPLE,
        "--data",
        path_str(data.path()),
        "--ask",
        "cmo",
        "What did we spend in August?",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).starts_with(
            "August 2026 spend, per the CFO: 48250.00 USD across all categories (ledger month 2026-08)"
        ),
        "{}",
        stdout(&out)
    );
    let jobs = consort(&["jobs", "list", "--data", path_str(data.path()), "--json"]);
    let jobs: Value = serde_json::from_slice(&jobs.stdout).unwrap();
    let jobs = jobs["runs"].as_array().unwrap().clone();
    let cfo = runs_of(&jobs, "cfo")[0];
    let cmo = runs_of(&jobs, "cmo")[0];
    assert_eq!(cfo["principal"], "agent:cmo", "from the verified chain");
    assert_eq!(cmo["principal"], "anonymous");
    let searches = results(data.path(), cfo["id"].as_str().unwrap(), "search_tools");
    assert_eq!(searches.len(), 1, "the meta-tool call is in the run's log");
    assert!(!searches[0].1);
    assert_eq!(card_names(&searches[0].0), vec!["ledger"]);

    // The operator's view through the same code: the cmo does not see payroll, alice does.
    let cmo_view = consort(&[
        "tools",
        "search",
        "--agent",
        "cfo",
        "--as",
        "agent:cmo",
        "payroll",
        "--dir",
        EXAMPLE,
        "--json",
    ]);
    assert!(cmo_view.status.success(), "{}", stderr(&cmo_view));
    assert!(card_names(&stdout(&cmo_view)).is_empty());
    let auth = format!("{EXAMPLE}/host-auth.yaml");
    let alice_view = consort(&[
        "tools",
        "search",
        "--agent",
        "cfo",
        "--as",
        "api:alice",
        "payroll",
        "--dir",
        EXAMPLE,
        "--auth",
        &auth,
        "--json",
    ]);
    assert_eq!(card_names(&stdout(&alice_view)), vec!["payroll"]);
    let mallory_view = consort(&[
        "tools",
        "search",
        "--agent",
        "cfo",
        "--as",
        "api:mallory",
        "payroll",
        "--dir",
        EXAMPLE,
        "--auth",
        &auth,
        "--json",
    ]);
    assert!(card_names(&stdout(&mallory_view)).is_empty());
    let bad = consort(&[
        "tools", "load", "--agent", "cfo", "--as", "root", "payroll", "--dir", EXAMPLE,
    ]);
    assert!(!bad.status.success());
    assert!(
        stderr(&bad).contains("--as: unknown principal form `root`"),
        "{}",
        stderr(&bad)
    );
}

#[test]
fn a_denied_load_answers_byte_for_byte_like_a_missing_tool() {
    let load = |dir: &str| {
        let out = consort(&[
            "tools",
            "load",
            "--agent",
            "cfo",
            "--as",
            "agent:cmo",
            "payroll",
            "--dir",
            dir,
            "--json",
        ]);
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        out.stdout
    };
    let without = Fleet::new();
    without.agent(
        "cfo",
        "name: cfo\nmodel: {script: [{answer: ok}]}\ntools:\n  - {name: ledger, kind: sql, database: ledger.db}\n",
    );
    without.ledger("cfo");
    let denied = load(EXAMPLE);
    let missing = load(path_str(&without.agents()));
    assert_eq!(denied, missing);
    let allowed = consort(&[
        "tools",
        "load",
        "--agent",
        "cfo",
        "--as",
        "api:alice",
        "payroll",
        "--dir",
        EXAMPLE,
        "--auth",
        &format!("{EXAMPLE}/host-auth.yaml"),
        "--json",
    ]);
    assert!(allowed.status.success());
    let text = stdout(&allowed);
    assert!(
        text.contains("inputSchema") && !text.contains("roles:") && !text.contains("finance\"")
    );
}

const FIN: &str = r#"
name: fin
policies:
  finance_team: {roles: [finance]}
model:
  script:
    - search: {query: "payroll spend"}
    - load: payroll
    - invoke: {name: payroll, arguments: {query: "SELECT printf('%.2f', sum(amount)) FROM spend WHERE month = '2026-08'"}}
    - tool: {name: payroll, input: "SELECT 1"}
    - answer: "done"
tools:
  - {name: ledger, kind: sql, database: ledger.db, description: spend ledger}
  - name: payroll
    kind: sql
    database: ledger.db
    description: payroll spend
    auth: {policies: [finance_team]}
"#;

fn post_run(host: &Served, token: Option<&str>) -> Value {
    let mut req = host
        .http()
        .post(format!("{}/runs", host.url))
        .json(&json!({"agent": "fin", "input": "go"}));
    if let Some(token) = token {
        req = req.bearer_auth(token);
    }
    let started: Value = req.send().unwrap().json().unwrap();
    let id = started["id"].as_str().unwrap().to_owned();
    // A run is read back with the token it was started with: it is that principal's.
    let mut get = host
        .http()
        .get(format!("{}/runs/{id}?wait_ms=30000", host.url));
    if let Some(token) = token {
        get = get.bearer_auth(token);
    }
    get.send().unwrap().json().unwrap()
}

#[test]
fn bearer_tokens_decide_what_runs_see_and_the_real_check_holds() {
    let fleet = Fleet::new();
    fleet.agent("fin", FIN);
    fleet.ledger("fin");
    let auth = fleet.dir.path().join("host-auth.yaml");
    std::fs::write(
        &auth,
        "tokens:\n  - {name: alice, token: tok-alice, roles: [finance]}\n  - {name: mallory, token: tok-mallory, roles: [marketing]}\nanonymous: runs\n",
    )
    .unwrap();
    let host = Served::start_with(
        &[fleet.agents()],
        &fleet.data(),
        &[],
        &["--auth", path_str(&auth)],
    );
    let alice = post_run(&host, Some("tok-alice"));
    let mallory = post_run(&host, Some("tok-mallory"));
    let nobody = post_run(&host, Some("wrong-token"));
    assert_eq!(alice["principal"], "api:alice", "{alice}");
    assert_eq!(alice["roles"], json!(["finance"]));
    assert_eq!(mallory["principal"], "api:mallory");
    assert_eq!(nobody["principal"], "anonymous");
    for run in [&alice, &mallory, &nobody] {
        assert_eq!(run["status"], "succeeded", "{run}");
    }
    let data = fleet.data();
    let r = |run: &Value, name: &str| results(&data, run["id"].as_str().unwrap(), name);

    // Two principals of one agent see different catalogs.
    assert_eq!(
        card_names(&r(&alice, "search_tools")[0].0),
        vec!["payroll", "ledger"]
    );
    assert_eq!(
        card_names(&r(&mallory, "search_tools")[0].0),
        vec!["ledger"]
    );
    // A denied load_tool answers like a missing tool.
    let (loaded, is_error) = r(&alice, "load_tool").remove(0);
    assert!(!is_error && loaded.contains("\"inputSchema\""));
    let (hidden, is_error) = r(&mallory, "load_tool").remove(0);
    assert!(is_error);
    assert_eq!(
        hidden,
        "{\"error\":\"no tool named `payroll`; use search_tools to find the tools you can use\"}"
    );
    // invoke_tool runs the real check: alice gets the answer, mallory a typed forbidden.
    assert_eq!(r(&alice, "invoke_tool")[0], ("48250.00".to_owned(), false));
    let (refused, is_error) = r(&mallory, "invoke_tool").remove(0);
    assert!(is_error);
    let refused: Value = serde_json::from_str(&refused).unwrap();
    assert_eq!(refused["error"]["code"], "forbidden");
    assert!(
        !refused.to_string().contains("finance_team"),
        "no policy names"
    );
    // Direct use by name shares the same check: hidden stays unusable.
    let (direct, is_error) = r(&nobody, "payroll").remove(0);
    assert!(is_error && direct.starts_with("forbidden:"), "{direct}");
    assert!(!r(&alice, "payroll")[0].1);
}

const GATED: &str = r#"
name: gate
probe_budget: BUDGET
model:
  script:
    - search: {query: "gated"}
    - search: {query: "gated", limit: 0}
    - search: {query: "gated", limit: 51}
    - search: {query: "QUERY"}
    - invoke: {name: gated_a, arguments: {sql: "SELECT 1"}}
    - invoke: {name: gated_a, arguments: {query: 7}}
    - invoke: {name: gated_b, arguments: {query: "SELECT 1"}}
    - invoke: {name: gated_c, arguments: {query: "SELECT 2"}}
    - answer: done
tools:
  - {name: gated_a, kind: sql, database: ledger.db, guard: {kind: feature, enabled: false, message: "switched off for now"}}
  - {name: gated_b, kind: sql, database: ledger.db, guard: {kind: quota, max_uses: 1}}
  - {name: gated_c, kind: sql, database: ledger.db, guard: {kind: feature, enabled: true}}
"#;

fn cards(search_answer: &str) -> Vec<(String, bool)> {
    let v: Value = serde_json::from_str(search_answer).unwrap();
    v["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap().to_owned(),
                c["authUncertain"].as_bool().unwrap(),
            )
        })
        .collect()
}

fn gated(budget: usize) -> (Fleet, Value) {
    let fleet = Fleet::new();
    let yaml = GATED
        .replace("BUDGET", &budget.to_string())
        .replace("QUERY", &"q".repeat(600));
    fleet.agent("gate", &yaml);
    fleet.ledger("gate");
    let out = consort(&[
        "dev",
        path_str(&fleet.agents()),
        "--data",
        path_str(&fleet.data()),
        "--ask",
        "gate",
        "x",
        "--json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    (fleet, v["run"].clone())
}

#[test]
fn probes_decide_guarded_tools_within_their_budget_and_bad_input_is_typed() {
    let (fleet, run) = gated(25);
    let id = run["id"].as_str().unwrap();
    let searches = results(&fleet.data(), id, "search_tools");
    // gated_a's guard refuses the probe: hidden. The others reach the cut: allowed.
    assert_eq!(
        cards(&searches[0].0),
        vec![("gated_b".to_owned(), false), ("gated_c".to_owned(), false)]
    );
    let code = |answer: &(String, bool)| {
        assert!(answer.1, "{answer:?}");
        let v: Value = serde_json::from_str(&answer.0).unwrap();
        v["error"]["code"].as_str().unwrap().to_owned()
    };
    assert_eq!(code(&searches[1]), "limit_out_of_range");
    assert_eq!(code(&searches[2]), "limit_out_of_range");
    assert_eq!(code(&searches[3]), "query_too_long");
    let invokes = results(&fleet.data(), id, "invoke_tool");
    assert_eq!(code(&invokes[0]), "invalid_arguments");
    assert_eq!(code(&invokes[1]), "invalid_arguments");
    assert_eq!(invokes[2], ("1".to_owned(), false));
    assert_eq!(invokes[3], ("2".to_owned(), false));
    assert_eq!(run["status"], "succeeded");
    // The probes ran no handler: gated_b's quota of one use was still there for the invoke.
    assert_eq!(run["cost"]["tool_calls"], 2);

    // Budget 1: only the first ranked candidate is probed; the rest show authUncertain.
    let (fleet, run) = gated(1);
    let searches = results(&fleet.data(), run["id"].as_str().unwrap(), "search_tools");
    assert_eq!(
        cards(&searches[0].0),
        vec![("gated_b".to_owned(), true), ("gated_c".to_owned(), true)]
    );
    // Budget 0: every guarded tool stays unknown, shown with authUncertain.
    let (fleet, run) = gated(0);
    let searches = results(&fleet.data(), run["id"].as_str().unwrap(), "search_tools");
    assert_eq!(cards(&searches[0].0).len(), 3);
    assert!(
        cards(&searches[0].0)
            .iter()
            .all(|(_, uncertain)| *uncertain)
    );
}

#[test]
fn operator_commands_decide_and_report_bad_files() {
    let dir = tempfile::tempdir().unwrap();
    let auth = dir.path().join("auth.json");
    let caller = dir.path().join("caller.json");
    std::fs::write(
        &auth,
        r#"{"anonymous": "no", "policies": ["roles:finance"], "imperative": false}"#,
    )
    .unwrap();
    std::fs::write(&caller, r#"{"identity": "absent"}"#).unwrap();
    let out = consort(&[
        "visibility",
        "--auth",
        path_str(&auth),
        "--caller",
        path_str(&caller),
        "--json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v, json!({"decision": "deny", "rule": 1}));
    std::fs::write(
        &auth,
        r#"{"anonymous": "maybe", "policies": [], "imperative": false}"#,
    )
    .unwrap();
    let out = consort(&[
        "visibility",
        "--auth",
        path_str(&auth),
        "--caller",
        path_str(&caller),
    ]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("auth.json") && stderr(&out).contains("anonymous"));

    // A policy name no config defines: file, line and key.
    let fleet = Fleet::new();
    let file = fleet.agent(
        "a",
        "name: a\nmodel: {script: [{answer: ok}]}\ntools:\n  - name: t\n    kind: sql\n    database: ledger.db\n    auth: {policies: [nobody_defined_this]}\n",
    );
    fleet.ledger("a");
    let out = consort(&[
        "tools",
        "search",
        "--agent",
        "a",
        "--as",
        "anonymous",
        "x",
        "--dir",
        path_str(&fleet.agents()),
    ]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains(&format!("{}:7:", file.canonicalize().unwrap().display()))
            && err.contains("tools[0].auth.policies[0]")
            && err.contains("no policy named `nobody_defined_this`"),
        "{err}"
    );
}

const RELOADED: &str = r#"
name: fin
model:
  script:
    - search: {query: "gated"}
    - answer: "{tool.search_tools}"
tools:
  - {name: gated, kind: sql, database: ledger.db, guard: {kind: feature, enabled: ENABLED}}
"#;

#[test]
fn a_config_reload_changes_the_generation_and_drops_probe_outcomes() {
    let fleet = Fleet::new();
    let file = fleet.agent("fin", &RELOADED.replace("ENABLED", "true"));
    fleet.ledger("fin");
    let host = fleet.serve(&[]);
    let first = post_run(&host, None);
    let first: Value = serde_json::from_str(first["output"].as_str().unwrap()).unwrap();
    assert_eq!(first["tools"][0]["name"], "gated");
    std::fs::write(&file, RELOADED.replace("ENABLED", "false")).unwrap();
    let out = host.cli(&["reload"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let second = post_run(&host, None);
    let second: Value = serde_json::from_str(second["output"].as_str().unwrap()).unwrap();
    assert!(
        second["generation"].as_u64().unwrap() > first["generation"].as_u64().unwrap(),
        "{first} {second}"
    );
    assert_eq!(second["tools"], json!([]), "the cached allow was dropped");
    // `consort run --token` sends the bearer token; an unknown token is absent identity.
    let out = host.cli(&[
        "run",
        "fin",
        "x",
        "--wait",
        "--json",
        "--token",
        "not-configured",
    ]);
    let run: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(run["principal"], "anonymous", "{run}");
    // A caller cannot name its own principal: the body has no such field.
    let refused = host
        .http()
        .post(format!("{}/runs", host.url))
        .json(&json!({"agent": "fin", "input": "go", "principal": "api:alice"}))
        .send()
        .unwrap();
    assert_eq!(refused.status().as_u16(), 400);
}
