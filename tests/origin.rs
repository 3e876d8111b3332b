//! The origin of a call tree travels with every hop, so an agent cannot lend a request the
//! grants a callee gave the agent (the confused deputy): `hr` grants `assistant` the role its
//! salary tool needs, yet an anonymous request to `assistant` does not get the salary, while a
//! request from someone who holds the role does. In one host (HTTP tokens, `consort dev --ask
//! --as`, a host restarted between the call and the tool use) and across two hosts (the origin
//! signed in the first hop, the callee host's grants deciding), on the real binary.

mod support;

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use support::{Fleet, ServeFleet, Served, consort, eventually, path_str, runs_of, stderr, stdout};

const WAIT: Duration = Duration::from_secs(60);

const ASSISTANT: &str = "\
name: assistant
description: Answers staff questions; asks hr what it cannot see itself.
agents:
  can_call: [hr]
model:
  script:
    - call: [{agent: hr, input: carol}]
    - answer: \"hr says: {reply.hr}\"
";

/// `hr` grants `assistant` the role `hr`, which its salary tool needs. The first step shows in
/// the run's log what the run was offered.
const HR: &str = "\
name: hr
description: Answers questions about staff from the salary table.
agents:
  accept_from: [assistant]
grants:
  assistant: [hr]
model:
  script:
    - search: {query: salary}
    - tool: {name: salary, input: \"SELECT printf('salary of %s: %d', employee, amount) FROM salaries WHERE employee = :input\"}
    - answer: \"{tool.salary}\"
tools:
  - name: salary
    kind: sql
    database: salaries.db
    description: Read-only SQL over salaries(employee, amount)
    auth:
      policies: [\"roles:hr\"]
";

/// alice and carl hold `hr`, bob does not; ops is an operator of the host; anonymous callers
/// may start runs.
const AUTH: &str = "\
tokens:
  - {name: alice, token: tok-alice, roles: [hr]}
  - {name: bob, token: tok-bob, roles: [sales]}
  - {name: carl, token: tok-carl, roles: [hr]}
  - {name: ops, token: tok-ops, roles: [operator]}
anonymous: runs
";

/// The operator's token, for reads and approvals on a host with the auth file.
const OPS: &str = "tok-ops";

const SALARY: &str = "hr says: salary of carol: 123456";

/// What `hr`'s refusal says for a request from `origin`.
fn refused_for(origin: &str) -> String {
    format!(
        "hr says: forbidden: agent:assistant may use this tool only on behalf of a requester who holds the access it needs, and this request came from {origin}, who does not; answer without this tool, or say that the request must come from someone with that access"
    )
}

/// Writes `assistant` and `hr` (with its salary table) under `root/agents`, `hr` edited by
/// `edit_hr`.
fn write_agents(root: &Path, edit_hr: impl FnOnce(&str) -> String) {
    for (name, yaml) in [("assistant", ASSISTANT.to_owned()), ("hr", edit_hr(HR))] {
        let dir = root.join("agents").join(name);
        std::fs::create_dir_all(&dir).expect("agent dir");
        std::fs::write(dir.join("agent.yaml"), yaml).expect("agent.yaml");
    }
    let conn = rusqlite::Connection::open(root.join("agents/hr/salaries.db")).expect("db");
    conn.execute_batch(
        "CREATE TABLE salaries (employee TEXT, amount INTEGER);
         INSERT INTO salaries VALUES ('carol', 123456), ('dave', 98765);",
    )
    .expect("salaries");
}

fn write_auth(path: &Path, yaml: &str) -> String {
    std::fs::write(path, yaml).expect("auth file");
    path_str(path).to_owned()
}

/// The names of the tools `search_tools` showed in a run's log.
fn searched(events: &[Value]) -> Vec<String> {
    let result = events
        .iter()
        .find(|e| e["kind"] == "tool_result" && e["data"]["name"] == "search_tools")
        .and_then(|e| e["data"]["content"].as_str())
        .expect("a search_tools result");
    let v: Value = serde_json::from_str(result).expect("search answer");
    v["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|c| c["name"].as_str().map(str::to_owned))
        .collect()
}

/// `consort run assistant carol --wait --json` against a `consort dev` host, with a token.
fn ask(host: &Served, token: Option<&str>) -> Value {
    let mut args = vec![
        "run",
        "assistant",
        "carol",
        "--wait",
        "--json",
        "--timeout-secs",
        "60",
    ];
    if let Some(token) = token {
        args.extend(["--token", token]);
    }
    let out = host.cli(&args);
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| panic!("run json: {} {}", stdout(&out), stderr(&out)))
}

/// The run of `agent` whose parent is `parent`, from a jobs listing.
fn child<'a>(jobs: &'a [Value], agent: &str, parent: &Value) -> &'a Value {
    runs_of(jobs, agent)
        .into_iter()
        .find(|r| r["parent_run"] == *parent)
        .unwrap_or_else(|| panic!("no {agent} run under {parent}: {jobs:?}"))
}

#[test]
fn in_one_host_hr_lends_the_assistant_its_role_only_for_requesters_who_hold_it() {
    let fleet = Fleet::new();
    write_agents(fleet.dir.path(), str::to_owned);
    let auth = write_auth(&fleet.dir.path().join("host-auth.yaml"), AUTH);
    let host = Served::start_with(&[fleet.agents()], &fleet.data(), &[], &["--auth", &auth]);

    // The repro: anonymous, through an agent that may call hr.
    let anonymous = ask(&host, None);
    assert_eq!(anonymous["status"], "succeeded", "{anonymous}");
    assert_eq!(anonymous["output"], refused_for("anonymous").as_str());
    // Someone who holds the role gets the answer; someone who does not is told why.
    let alice = ask(&host, Some("tok-alice"));
    assert_eq!(alice["output"], SALARY, "{alice}");
    let bob = ask(&host, Some("tok-bob"));
    assert_eq!(bob["output"], refused_for("api:bob").as_str());

    // Every run shows both who called it and who the tree acts for; the callee's catalog
    // follows the origin.
    let jobs = fleet.jobs();
    for (root, origin, sees_salary) in [
        (&anonymous, "anonymous", false),
        (&alice, "api:alice", true),
        (&bob, "api:bob", false),
    ] {
        let assistant = runs_of(&jobs, "assistant")
            .into_iter()
            .find(|r| r["id"] == root["id"])
            .expect("the root run");
        assert_eq!(assistant["origin"], origin);
        assert_eq!(assistant["principal"], origin);
        let hr = child(&jobs, "hr", &root["id"]);
        assert_eq!(hr["principal"], "agent:assistant", "{hr}");
        assert_eq!(hr["origin"], origin, "{hr}");
        let shown = searched(&fleet.events(hr["id"].as_str().expect("id")));
        assert_eq!(
            shown.contains(&"salary".to_owned()),
            sees_salary,
            "{origin}: {shown:?}"
        );
    }
}

#[test]
fn consort_dev_ask_as_names_the_origin() {
    let fleet = Fleet::new();
    write_agents(fleet.dir.path(), str::to_owned);
    let auth = write_auth(&fleet.dir.path().join("host-auth.yaml"), AUTH);
    let agents = fleet.agents();
    let dev = |extra: &[&str]| {
        let data = tempfile::tempdir().expect("data");
        let mut args = vec![
            "dev",
            path_str(&agents),
            "--data",
            path_str(data.path()),
            "--auth",
            &auth,
            "--ask",
            "assistant",
            "carol",
        ];
        args.extend(extra);
        consort(&args)
    };
    let alice = dev(&["--as", "api:alice"]);
    assert!(alice.status.success(), "{}", stderr(&alice));
    assert!(stdout(&alice).starts_with(SALARY), "{}", stdout(&alice));
    let nobody = dev(&[]);
    assert!(
        stdout(&nobody).starts_with(&refused_for("anonymous")),
        "{}",
        stdout(&nobody)
    );
    let bob = dev(&["--as", "api:bob"]);
    assert!(
        stdout(&bob).starts_with(&refused_for("api:bob")),
        "{}",
        stdout(&bob)
    );
    let agent = dev(&["--as", "agent:assistant"]);
    assert!(!agent.status.success());
    assert!(
        stderr(&agent).contains("--as: a request comes from api:<token-name> or anonymous"),
        "{}",
        stderr(&agent)
    );

    // The operator's view through the same code: assistant's runs see salary only for an
    // origin that holds the role.
    let view = |origin: &str| {
        let out = consort(&[
            "tools",
            "search",
            "--agent",
            "hr",
            "--as",
            "agent:assistant",
            "--origin",
            origin,
            "salary",
            "--dir",
            path_str(&fleet.agents()),
            "--auth",
            &auth,
            "--json",
        ]);
        assert!(out.status.success(), "{}", stderr(&out));
        let v: Value = serde_json::from_slice(&out.stdout).expect("json");
        v["tools"]
            .as_array()
            .expect("tools")
            .iter()
            .map(|c| (c["name"].clone(), c["authUncertain"].clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(view("api:alice"), [(json!("salary"), json!(false))]);
    assert!(view("anonymous").is_empty());
    assert!(view("api:bob").is_empty());
    assert_eq!(view("unknown"), [(json!("salary"), json!(true))]);
}

/// `on_behalf_of: any` is the callee's explicit opt-out: the grant holds for any origin.
#[test]
fn a_grant_on_behalf_of_anyone_lends_the_role_to_an_anonymous_request() {
    let fleet = Fleet::new();
    write_agents(fleet.dir.path(), |hr| {
        hr.replace(
            "assistant: [hr]",
            "assistant: {roles: [hr], on_behalf_of: any}",
        )
    });
    let out = consort(&[
        "dev",
        path_str(&fleet.agents()),
        "--data",
        path_str(&fleet.data()),
        "--ask",
        "assistant",
        "carol",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).starts_with(SALARY), "{}", stdout(&out));
}

/// The origin is stored with the called run: a host killed while hr's run waits for an
/// approval resumes it acting for the same origin.
#[test]
fn the_origin_survives_a_restart_of_the_host() {
    let fleet = Fleet::new();
    write_agents(fleet.dir.path(), |hr| {
        hr.replace("    kind: sql\n", "    kind: sql\n    approval: required\n")
    });
    let auth = write_auth(&fleet.dir.path().join("host-auth.yaml"), AUTH);
    let serve = || Served::start_with(&[fleet.agents()], &fleet.data(), &[], &["--auth", &auth]);
    let host = serve();
    let started = host.cli(&[
        "run",
        "assistant",
        "carol",
        "--json",
        "--token",
        "tok-alice",
    ]);
    let root: Value = serde_json::from_slice(&started.stdout).expect("run json");
    let root_id = root["id"].as_str().expect("id").to_owned();
    let blocked = eventually("hr's run to wait for approval", WAIT, || {
        let jobs = fleet.jobs();
        runs_of(&jobs, "hr")
            .into_iter()
            .find(|r| r["parent_run"] == root_id.as_str() && r["status"] == "blocked")
            .and_then(|r| r["id"].as_str().map(str::to_owned))
    });
    host.kill();

    let host = serve();
    host.wait_status_with(&blocked, "blocked", OPS);
    let approved = host.cli(&["approve", &blocked, "--token", OPS]);
    assert!(approved.status.success(), "{}", stderr(&approved));
    let done = host.wait_status_with(&root_id, "succeeded", OPS);
    assert_eq!(done["output"], SALARY, "{done}");
    let jobs = fleet.jobs();
    assert_eq!(child(&jobs, "hr", &json!(root_id))["origin"], "api:alice");
}

/// `POST /runs` on `host` with an optional bearer token; the run once settled (read by the
/// operator).
fn run_on(fleet: &ServeFleet, host: &str, token: Option<&str>) -> Value {
    let mut request = fleet
        .http
        .post(format!("{}/runs", fleet.url(host)))
        .json(&json!({"agent": "assistant", "input": "carol"}));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let started: Value = request
        .send()
        .expect("POST /runs")
        .json()
        .expect("run json");
    let id = started["id"]
        .as_str()
        .unwrap_or_else(|| panic!("no run id: {started}"));
    let url = format!("{}/runs/{id}", fleet.url(host));
    eventually("the run to settle", WAIT, || {
        let run: Value = fleet
            .http
            .get(&url)
            .bearer_auth(OPS)
            .send()
            .ok()?
            .json()
            .ok()?;
        matches!(run["status"].as_str(), Some("succeeded" | "failed")).then_some(run)
    })
}

/// Every run on `host`, as its operator lists them.
fn jobs_on(fleet: &ServeFleet, host: &str) -> Vec<Value> {
    let page: Value = fleet
        .http
        .get(format!("{}/jobs?limit=1000", fleet.url(host)))
        .bearer_auth(OPS)
        .send()
        .expect("GET /jobs")
        .json()
        .expect("jobs json");
    page["runs"].as_array().cloned().expect("runs")
}

#[test]
fn across_two_hosts_the_signed_origin_and_the_callee_hosts_grants_decide() {
    let dir = tempfile::tempdir().expect("temp dir");
    write_agents(dir.path(), str::to_owned);
    // carl holds `hr` on alpha only: what the callee's host grants the origin is what counts.
    let alpha_auth = write_auth(&dir.path().join("alpha-auth.yaml"), AUTH);
    let beta_auth = write_auth(
        &dir.path().join("beta-auth.yaml"),
        &AUTH.replace(
            "{name: carl, token: tok-carl, roles: [hr]}",
            "{name: carl, token: tok-carl, roles: []}",
        ),
    );
    let mut fleet = ServeFleet::new(dir, &[("alpha", &["assistant"]), ("beta", &["hr"])]);
    fleet.start_with_args("alpha", &[], &["--auth", &alpha_auth]);
    fleet.start_with_args("beta", &[], &["--auth", &beta_auth]);

    let anonymous = run_on(&fleet, "alpha", None);
    assert_eq!(
        anonymous["output"],
        refused_for("anonymous").as_str(),
        "{anonymous}"
    );
    let alice = run_on(&fleet, "alpha", Some("tok-alice"));
    assert_eq!(alice["output"], SALARY, "{alice}");
    let carl = run_on(&fleet, "alpha", Some("tok-carl"));
    assert_eq!(carl["output"], refused_for("api:carl").as_str(), "{carl}");

    let beta_jobs = jobs_on(&fleet, "beta");
    for (root, origin) in [
        (&anonymous, "anonymous"),
        (&alice, "api:alice"),
        (&carl, "api:carl"),
    ] {
        assert_eq!(root["origin"], origin);
        let hr = child(&beta_jobs, "hr", &root["id"]);
        assert_eq!(hr["principal"], "agent:assistant", "{hr}");
        assert_eq!(hr["origin"], origin, "read from the signed first hop: {hr}");
    }
    // The hops' log lines name the origin on both hosts.
    let origin_field = "origin=api:alice";
    assert!(fleet.host_stderr("alpha").contains(origin_field));
    assert!(fleet.host_stderr("beta").contains(origin_field));
}
