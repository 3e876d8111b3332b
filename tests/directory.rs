//! The peer directory end to end (spec 002's acceptance checks that this part covers): real
//! `consort serve` and `consort dev` processes on loopback, real QUIC links and stores, asked
//! through the HTTP API, the CLI and the `list_peers` model tool.
//!
//! Presence is advisory colour: these tests assert which rows exist, their typed work state,
//! and that a row without a live provider says why (its basis and a limitation), never that a
//! host that is down looks idle or done.

mod support;

use std::path::Path;
use std::time::Duration;

use serde_json::Value;
use support::{Fleet, ServeFleet, Served, eventually, path_str, stdout};

const LONG: Duration = Duration::from_secs(60);

/// The example fleet (cmo on alpha, cfo on beta) with one goal holding both.
fn fleet_with_goal() -> ServeFleet {
    let fleet = ServeFleet::example(|_| {});
    append_fleet_yaml(
        fleet.dir.path(),
        "goals:\n  - name: month-end\n    agents: [cmo, cfo]\n",
    );
    fleet
}

fn append_fleet_yaml(dir: &Path, text: &str) {
    let file = dir.join("fleet.yaml");
    let mut yaml = std::fs::read_to_string(&file).expect("fleet.yaml");
    yaml.push_str(text);
    std::fs::write(&file, yaml).expect("write fleet.yaml");
}

fn directory(fleet: &ServeFleet, host: &str) -> Value {
    fleet
        .http
        .get(format!("{}/directory", fleet.url(host)))
        .send()
        .expect("GET /directory")
        .json()
        .expect("packet json")
}

fn row<'a>(packet: &'a Value, agent: &str) -> &'a Value {
    packet["rows"]
        .as_array()
        .and_then(|rows| rows.iter().find(|r| r["agent"] == agent))
        .unwrap_or_else(|| panic!("no row for {agent}: {packet}"))
}

fn codes(packet: &Value) -> Vec<String> {
    packet["limitations"]
        .as_array()
        .map(|l| {
            l.iter()
                .map(|x| x["code"].as_str().unwrap_or("").to_owned())
                .collect()
        })
        .unwrap_or_default()
}

fn assert_counts_add_up(packet: &Value) {
    let rows = packet["rows"].as_array().map_or(0, Vec::len) as u64;
    assert_eq!(
        rows + packet["omitted_row_count"].as_u64().unwrap_or(u64::MAX),
        packet["registered_agent_count"].as_u64().unwrap_or(0),
        "{packet}"
    );
}

#[test]
fn two_registered_agents_with_one_host_down_give_two_rows_and_only_the_live_one_has_presence() {
    let mut fleet = fleet_with_goal();
    fleet.start("alpha");
    let asked = std::time::Instant::now();
    let packet = directory(&fleet, "alpha");
    // A host that is down costs at most the presence deadline (2 s), never a hang.
    assert!(
        asked.elapsed() < Duration::from_secs(10),
        "{:?}",
        asked.elapsed()
    );
    assert_eq!(packet["goal"], "month-end", "{packet}");
    assert_eq!(packet["registered_agent_count"], 2, "{packet}");
    assert_counts_add_up(&packet);
    let cmo = row(&packet, "cmo");
    assert_eq!(cmo["host"], "alpha");
    assert_eq!(cmo["presence"]["state"], "idle", "{packet}");
    assert_eq!(cmo["presence"]["provider"], "supervisor@alpha");
    assert_eq!(cmo["presence"]["basis"], "supervisor_run_table");
    assert!(cmo["work"].is_object(), "{packet}");
    // beta is down: its agent is still listed, with no work claimed and a presence that says
    // nobody could see it.
    let cfo = row(&packet, "cfo");
    assert_eq!(cfo["host"], "beta");
    assert!(cfo["work"].is_null(), "{packet}");
    let state = cfo["presence"]["state"].as_str().unwrap_or("");
    assert!(matches!(state, "unreachable" | "unknown"), "{packet}");
    let limits = codes(&packet);
    assert!(
        limits.contains(&"presence_is_advisory".to_owned()),
        "{packet}"
    );
    assert!(
        limits
            .iter()
            .any(|c| c == "host_unreachable" || c == "host_no_answer"),
        "the down host is named as a gap: {packet}"
    );
    // Once a query found beta out of reach, the next ones say so at once instead of waiting
    // the presence deadline each time; when beta is back, its presence is seen again.
    let prompt = eventually("a prompt unreachable answer", LONG, || {
        let asked = std::time::Instant::now();
        let again = directory(&fleet, "alpha");
        (asked.elapsed() < Duration::from_millis(500)
            && row(&again, "cfo")["presence"]["state"] == "unreachable")
            .then_some(again)
    });
    assert_eq!(row(&prompt, "cfo")["presence"]["basis"], "host_unreachable");
    fleet.start("beta");
    eventually("beta's presence again", LONG, || {
        let again = directory(&fleet, "alpha");
        (row(&again, "cfo")["presence"]["state"] == "idle").then_some(())
    });
    // The CLI shows the same rows.
    let out = support::consort(&["directory", "--json", "--at", fleet.url("alpha")]);
    assert!(out.status.success(), "{out:?}");
    let cli: Value = serde_json::from_str(&stdout(&out)).expect("cli json");
    assert_eq!(cli["registered_agent_count"], 2);
    assert_eq!(row(&cli, "cfo")["host"], "beta");
}

#[test]
fn presence_of_a_peer_host_comes_signed_over_the_link_and_follows_its_runs() {
    let mut fleet = fleet_with_goal();
    fleet.start("alpha");
    fleet.start("beta");
    let before = directory(&fleet, "alpha");
    assert_eq!(row(&before, "cfo")["presence"]["state"], "idle", "{before}");
    let id = fleet.start_run("alpha", "cmo", "2026-08");
    let run = fleet.wait_settled("alpha", &id, LONG);
    assert_eq!(run["status"], "succeeded", "{run}");
    // The child run on beta settled before cmo's: both are done now, as their hosts saw them.
    let after = eventually("both agents done", LONG, || {
        let p = directory(&fleet, "alpha");
        (row(&p, "cfo")["presence"]["state"] == "done"
            && row(&p, "cmo")["presence"]["state"] == "done")
            .then_some(p)
    });
    let cfo = row(&after, "cfo");
    assert_eq!(cfo["presence"]["provider"], "supervisor@beta", "{after}");
    assert_eq!(cfo["presence"]["basis"], "supervisor_run_table");
    assert_eq!(
        cfo["work"]["last_settled"]["status"], "succeeded",
        "{after}"
    );
    let limits = codes(&after);
    assert_eq!(limits, vec!["presence_is_advisory"], "{after}");
    // Beta's directory says the same about alpha's agent.
    let from_beta = directory(&fleet, "beta");
    assert_eq!(
        row(&from_beta, "cmo")["presence"]["provider"],
        "supervisor@alpha"
    );
    assert_eq!(
        row(&from_beta, "cmo")["presence"]["state"],
        "done",
        "{from_beta}"
    );
}

#[test]
fn an_agent_its_host_does_not_serve_is_unknown_with_a_coverage_gap() {
    // beta starts with a fleet.yaml where it serves only cfo; alpha then reads one where
    // beta also serves `ledger`. Asked about ledger, beta can only say it does not serve it.
    let mut fleet = ServeFleet::example(|dir| {
        let to = dir.join("agents").join("ledger");
        std::fs::create_dir_all(&to).expect("agent dir");
        std::fs::write(
            to.join("agent.yaml"),
            "name: ledger\nmodel:\n  script:\n    - answer: ok\n",
        )
        .expect("agent.yaml");
    });
    append_fleet_yaml(
        fleet.dir.path(),
        "goals:\n  - name: month-end\n    agents: [cmo, cfo]\n",
    );
    fleet.start("beta");
    let file = fleet.dir.path().join("fleet.yaml");
    let yaml = std::fs::read_to_string(&file).expect("fleet.yaml");
    let yaml = yaml
        .replace(
            "agents: [agents/cfo]",
            "agents: [agents/cfo, agents/ledger]",
        )
        .replace("agents: [cmo, cfo]", "agents: [cmo, cfo, ledger]");
    std::fs::write(&file, yaml).expect("fleet.yaml");
    fleet.start("alpha");
    let packet = directory(&fleet, "alpha");
    let ledger = row(&packet, "ledger");
    assert_eq!(ledger["presence"]["state"], "unknown", "{packet}");
    assert_eq!(
        ledger["presence"]["basis"], "not_served_by_host",
        "{packet}"
    );
    assert!(ledger["work"].is_null(), "{packet}");
    let gap = packet["limitations"]
        .as_array()
        .and_then(|l| l.iter().find(|x| x["code"] == "presence_coverage_gap"))
        .unwrap_or_else(|| panic!("no coverage gap: {packet}"));
    assert_eq!(gap["agents"], serde_json::json!(["ledger"]));
    // The agents beta does serve are classified as usual.
    assert_eq!(row(&packet, "cfo")["presence"]["state"], "idle", "{packet}");
}

/// Agents a and b share goal `g`; c shares goal `h` with b. a's script lists its peers.
fn goal_agents() -> Fleet {
    let fleet = Fleet::new();
    fleet.agent(
        "a",
        "name: a\nmodel:\n  script:\n    - tool: {name: list_peers, input: \"\"}\n    - answer: \"{tool.list_peers}\"\n",
    );
    fleet.agent(
        "b",
        "name: b\nmodel:\n  script:\n    - tool: {name: list_peers, input: \"\"}\n    - answer: \"{tool.list_peers}\"\n",
    );
    fleet.agent(
        "c",
        "name: c\nmodel:\n  script:\n    - tool: {name: list_peers, input: \"\"}\n    - answer: \"{tool.list_peers}\"\n",
    );
    std::fs::write(
        fleet.agents().join("goals.yaml"),
        "goals:\n  - {name: g, agents: [a, b]}\n  - {name: h, agents: [b, c]}\n",
    )
    .expect("goals.yaml");
    fleet
}

#[test]
fn list_peers_shows_a_model_only_its_own_goal() {
    let fleet = goal_agents();
    let host = Served::start(&[fleet.agents()], &fleet.data(), &[]);
    let run = host.run_wait("a", "who is here?");
    assert_eq!(run["status"], "succeeded", "{run}");
    let packet: Value = serde_json::from_str(run["output"].as_str().unwrap_or("")).expect("packet");
    assert_eq!(packet["goal"], "g");
    let agents: Vec<&str> = packet["rows"]
        .as_array()
        .map(|r| r.iter().filter_map(|x| x["agent"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(
        agents,
        vec!["a", "b"],
        "never c, which is in another goal: {packet}"
    );
    // a's own run is open while it asks: it sees itself working.
    assert_eq!(
        row(&packet, "a")["presence"]["state"],
        "working",
        "{packet}"
    );
    // b is in two goals and names none: it is told to choose among its own, and sees no rows.
    let run = host.run_wait("b", "who is here?");
    let text = run["output"].as_str().unwrap_or("");
    let packet: Value = serde_json::from_str(text).expect("packet");
    assert_eq!(packet["scope_gap"]["code"], "goal_not_named", "{packet}");
    assert_eq!(packet["scope_gap"]["goals"], serde_json::json!(["g", "h"]));
    assert_eq!(packet["rows"], serde_json::json!([]));
}

#[test]
fn a_caller_whose_membership_cannot_be_established_gets_a_scope_gap_and_no_rows() {
    let fleet = goal_agents();
    let auth = fleet.dir.path().join("host-auth.yaml");
    std::fs::write(
        &auth,
        "tokens:\n  - {name: ops, token: tok-ops, roles: [operator]}\n  - {name: eve, token: tok-eve, roles: [finance]}\n",
    )
    .expect("auth file");
    let host = Served::start_with(
        &[fleet.agents()],
        &fleet.data(),
        &[],
        &["--auth", path_str(&auth)],
    );
    let ask = |token: Option<&str>| -> Value {
        let mut req = host.http().get(format!("{}/directory?goal=g", host.url));
        if let Some(token) = token {
            req = req.bearer_auth(token);
        }
        req.send().expect("GET /directory").json().expect("json")
    };
    let nobody = ask(None);
    assert_eq!(nobody["scope_gap"]["code"], "unknown", "{nobody}");
    assert_eq!(nobody["rows"], serde_json::json!([]));
    assert!(codes(&nobody).contains(&"caller_identity_not_supplied".to_owned()));
    let wrong = ask(Some("not-a-token"));
    assert_eq!(wrong["scope_gap"]["code"], "unknown", "{wrong}");
    let eve = ask(Some("tok-eve"));
    assert_eq!(eve["scope_gap"]["code"], "audience_not_authorized", "{eve}");
    assert_eq!(eve["rows"], serde_json::json!([]));
    assert_eq!(eve["registered_agent_count"], 0);
    let ops = ask(Some("tok-ops"));
    assert!(ops["scope_gap"].is_null(), "{ops}");
    assert_eq!(ops["registered_agent_count"], 2, "{ops}");
    // Bad input is a typed JSON error, not a router's plain text.
    let bad = host
        .http()
        .get(format!("{}/directory/observe?agent=a&lines=many", host.url))
        .bearer_auth("tok-ops")
        .send()
        .expect("GET /directory/observe");
    assert_eq!(bad.status().as_u16(), 400);
    let bad: Value = bad.json().expect("json error");
    assert_eq!(bad["error"]["code"], "bad_query", "{bad}");
    // The CLI reports the gap in words and with a distinct exit code.
    let out = host.cli(&["directory", "--goal", "g"]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert!(stdout(&out).contains("unknown"), "{out:?}");
    let out = host.cli(&["directory", "--goal", "g", "--token", "tok-ops"]);
    assert!(out.status.success(), "{out:?}");
    assert!(stdout(&out).contains("goal g: 2 registered"), "{out:?}");
    // A principal with no goal may not wait on a run either: the same exit code.
    let out = host.cli(&[
        "directory",
        "wait",
        "a",
        "run_0123456789abcdef0123456789abcdef",
        "--timeout-secs",
        "1",
        "--token",
        "tok-eve",
    ]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
}

#[test]
fn a_stopped_hosts_data_folder_still_lists_every_registered_agent() {
    let mut fleet = fleet_with_goal();
    fleet.start("alpha");
    fleet.start("beta");
    let id = fleet.start_run("alpha", "cmo", "2026-08");
    assert_eq!(
        fleet.wait_settled("alpha", &id, LONG)["status"],
        "succeeded"
    );
    let data = fleet.hosts[0].data.clone();
    // While alpha serves its folder, --data asks it.
    let out = support::consort(&["directory", "--json", "--data", path_str(&data)]);
    assert!(out.status.success(), "{out:?}");
    let live: Value = serde_json::from_str(&stdout(&out)).expect("json");
    assert_eq!(row(&live, "cmo")["presence"]["state"], "done", "{live}");
    fleet.terminate("alpha");
    fleet.terminate("beta");
    let out = support::consort(&["directory", "--json", "--data", path_str(&data)]);
    assert!(out.status.success(), "{out:?}");
    let packet: Value = serde_json::from_str(&stdout(&out)).expect("json");
    assert_eq!(packet["registered_agent_count"], 2, "{packet}");
    let cmo = row(&packet, "cmo");
    assert_eq!(cmo["presence"]["state"], "unknown", "{packet}");
    assert_eq!(cmo["presence"]["basis"], "host_not_running");
    assert_eq!(
        cmo["work"]["last_settled"]["status"], "succeeded",
        "{packet}"
    );
    let cfo = row(&packet, "cfo");
    assert_eq!(cfo["presence"]["basis"], "not_asked", "{packet}");
    assert!(cfo["work"].is_null());
    let limits = codes(&packet);
    for code in [
        "host_not_running",
        "host_not_asked",
        "presence_provider_unavailable",
    ] {
        assert!(limits.contains(&code.to_owned()), "{code}: {packet}");
    }
}
