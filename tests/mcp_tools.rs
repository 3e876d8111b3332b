//! Agents that use tools of MCP servers (`kind: mcp` in agent.yaml), with the real binary and a
//! real server from PyPI: `mcp-server-time` (`.ci/run` installs the pinned version and sets
//! `CONSORT_MCP_TESTS=required`), started by the host over stdio, or served over streamable
//! HTTP by `tests/mcp/time_http.py` with the official MCP Python SDK.
//!
//! What a user checks: the model's answer holds what the server answered; the server's tools
//! are listed with their schemas; auth, visibility and approval hold for them as for any tool;
//! a server that is missing, crashes or dies is a clear tool error, never a hang; the server
//! process ends with the host; a wrong entry names its file, line and key.

mod support;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use support::{Fleet, Served, eventually, path_str, stderr};

/// How long a run may take here: starting Python and the server is the slow part.
const BOUND: Duration = Duration::from_secs(60);

fn time_server_available() -> bool {
    support::python_module(
        "mcp_server_time",
        "CONSORT_MCP_TESTS",
        "pip install mcp-server-time==2026.10.19",
    )
}

/// The interpreter, by its full path (a started server gets a cleared environment).
fn python() -> String {
    support::python_executable()
}

/// The `tools:` entry of the time server on stdio, with `extra` keys.
fn time_entry(extra: &str) -> String {
    format!(
        "  - name: time\n    kind: mcp\n    command: [\"{}\", -m, mcp_server_time, --local-timezone=UTC]\n{extra}",
        python()
    )
}

/// An agent that searches and loads the time tools, asks the time in UTC and answers with it.
fn clock(tools: &str) -> String {
    format!(
        "name: clock
description: tells the time
model:
  script:
    - search: {{query: \"time timezone\"}}
    - load: time__convert_time
    - tool: {{name: time__get_current_time, arguments: {{timezone: UTC}}}}
    - invoke: {{name: time__convert_time, arguments: {{source_timezone: UTC, time: \"12:00\", target_timezone: Asia/Tokyo}}}}
    - answer: \"now: {{tool.time__get_current_time}}\"
tools:
{tools}"
    )
}

/// The `tool_result` events of a run: (name, content, is_error).
fn tool_results(served: &Served, run: &str) -> Vec<(String, String, bool)> {
    let shown = served.show(run).expect("the run");
    shown["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "tool_result")
        .map(|e| {
            (
                e["data"]["name"].as_str().unwrap_or_default().to_owned(),
                e["data"]["content"].as_str().unwrap_or_default().to_owned(),
                e["data"]["is_error"].as_bool().unwrap_or(false),
            )
        })
        .collect()
}

fn result_of(results: &[(String, String, bool)], name: &str) -> (String, bool) {
    results
        .iter()
        .find(|(n, _, _)| n == name)
        .map(|(_, c, e)| (c.clone(), *e))
        .unwrap_or_else(|| panic!("no result of {name}: {results:?}"))
}

/// Today's date in UTC, `YYYY-MM-DD` (the civil-from-days algorithm).
fn today_utc() -> String {
    let days = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
        .div_euclid(86_400) as i64;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

/// Checks an answer holds the time server's answer for UTC, now.
fn assert_utc_now(output: &str) {
    let json = output
        .strip_prefix("now: ")
        .unwrap_or_else(|| panic!("{output}"));
    let time: Value = serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {output}"));
    assert_eq!(time["timezone"], "UTC", "{output}");
    let at = time["datetime"].as_str().unwrap_or_default();
    // Around midnight the server may have answered on the day before.
    assert!(
        at.starts_with(&today_utc()) || at.starts_with(&today_utc()[..8]),
        "{output}"
    );
}

/// The processes whose parent is `parent`.
fn children_of(parent: u32) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // `pid (comm) state ppid ...`: comm may hold spaces, so read after the last `)`.
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map(|(_, rest)| rest.split_whitespace().collect())
            .unwrap_or_default();
        if fields.get(1).and_then(|p| p.parse::<u32>().ok()) == Some(parent) {
            found.push(pid);
        }
    }
    found
}

/// Whether process `pid` is gone (or a zombie nobody reaped yet).
fn gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

#[test]
fn an_agent_uses_a_tool_of_a_real_mcp_server_and_sees_its_tools_with_their_schemas() {
    if !time_server_available() {
        return;
    }
    let fleet = Fleet::new();
    fleet.agent("clock", &clock(&time_entry("")));
    let served = fleet.serve(&[]);
    let started = Instant::now();
    let run = served.run_wait("clock", "what time is it?");
    assert_eq!(run["status"], "succeeded", "{run}");
    assert!(started.elapsed() < BOUND);
    assert_utc_now(run["output"].as_str().unwrap_or_default());

    let id = run["id"].as_str().unwrap();
    let results = tool_results(&served, id);
    // search_tools lists both tools of the server, with their inputs.
    let (search, is_error) = result_of(&results, "search_tools");
    assert!(!is_error, "{search}");
    let search: Value = serde_json::from_str(&search).unwrap();
    let cards = search["tools"].as_array().unwrap();
    let names: Vec<&str> = cards.iter().filter_map(|c| c["name"].as_str()).collect();
    assert!(names.contains(&"time__get_current_time"), "{search}");
    assert!(names.contains(&"time__convert_time"), "{search}");
    let current = cards
        .iter()
        .find(|c| c["name"] == "time__get_current_time")
        .unwrap();
    assert_eq!(
        current["description"],
        "Get current time in a specific timezone"
    );
    assert_eq!(current["inputs"][0]["name"], "timezone", "{current}");
    assert_eq!(current["inputs"][0]["required"], true, "{current}");
    // load_tool gives the server's input schema as the server wrote it.
    let (load, is_error) = result_of(&results, "load_tool");
    assert!(!is_error, "{load}");
    let load: Value = serde_json::from_str(&load).unwrap();
    assert_eq!(load["name"], "time__convert_time");
    let schema = &load["inputSchema"];
    assert_eq!(schema["type"], "object", "{load}");
    let mut required: Vec<&str> = schema["required"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    required.sort_unstable();
    assert_eq!(required, ["source_timezone", "target_timezone", "time"]);
    assert!(schema["properties"]["time"]["description"].is_string());
    let (time, is_error) = result_of(&results, "time__get_current_time");
    assert!(!is_error, "{time}");
    // invoke_tool reaches the same tools through the same pipeline.
    let (converted, is_error) = result_of(&results, "invoke_tool");
    assert!(!is_error, "{converted}");
    let converted: Value = serde_json::from_str(&converted).unwrap();
    assert_eq!(converted["target"]["timezone"], "Asia/Tokyo", "{converted}");
    assert!(
        converted["target"]["datetime"]
            .as_str()
            .is_some_and(|t| t.contains("T21:00")),
        "{converted}"
    );

    // The session is kept: a second run uses the same server process.
    let server = children_of(served.child.id());
    assert_eq!(server.len(), 1, "one server process: {server:?}");
    let again = served.run_wait("clock", "and now?");
    assert_eq!(again["status"], "succeeded", "{again}");
    assert_eq!(children_of(served.child.id()), server);
}

/// A command model that uses the time tool it is offered and answers with what it was offered
/// (the tool as the model sees it) and what the tool answered.
const MODEL: &str = r#"
import json, sys
for line in sys.stdin:
    request = json.loads(line)
    offered = [t for t in request["tools"] if t["name"].startswith("time__")]
    results = [m for m in request["messages"] if m["role"] == "tool"]
    if not results:
        answer = {"tool_uses": [{"name": "time__get_current_time", "input": {"timezone": "UTC"}}]}
    else:
        answer = {"answer": json.dumps({"offered": offered, "result": results[-1]["content"]})}
    print(json.dumps(answer), flush=True)
"#;

#[test]
fn a_model_is_offered_the_servers_tools_with_their_schemas_and_uses_one() {
    if !time_server_available() {
        return;
    }
    let fleet = Fleet::new();
    let file = fleet.agent(
        "clock",
        &format!(
            "name: clock\nmodel: {{kind: command, argv: [\"{}\", model.py], timeout_s: 30}}\ntools:\n{}",
            python(),
            time_entry("")
        ),
    );
    std::fs::write(file.parent().unwrap().join("model.py"), MODEL).unwrap();
    let served = fleet.serve(&[]);
    let run = served.run_wait("clock", "what time is it?");
    assert_eq!(run["status"], "succeeded", "{run}");
    let answer: Value = serde_json::from_str(run["output"].as_str().unwrap()).unwrap();
    let offered = answer["offered"].as_array().unwrap();
    let mut names: Vec<&str> = offered.iter().filter_map(|t| t["name"].as_str()).collect();
    names.sort_unstable();
    assert_eq!(names, ["time__convert_time", "time__get_current_time"]);
    let current = offered
        .iter()
        .find(|t| t["name"] == "time__get_current_time")
        .unwrap();
    assert_eq!(
        current["description"],
        "Get current time in a specific timezone"
    );
    assert_eq!(current["input_schema"]["type"], "object");
    assert_eq!(current["input_schema"]["required"][0], "timezone");
    assert!(
        current["input_schema"]["properties"]["timezone"]["description"]
            .as_str()
            .is_some_and(|d| d.contains("IANA timezone name")),
        "{current}"
    );
    assert_utc_now(&format!("now: {}", answer["result"].as_str().unwrap()));
}

#[test]
fn a_tool_error_of_the_server_reaches_the_model_as_an_error() {
    if !time_server_available() {
        return;
    }
    let fleet = Fleet::new();
    // The server is a script of the agent's own, named relative to its folder.
    let file = fleet.agent(
        "clock",
        &format!(
            "name: clock
model:
  script:
    - tool: {{name: time__get_current_time, arguments: {{timezone: Mars/Olympus_Mons}}}}
    - answer: \"{{tool.time__get_current_time}}\"
tools:
  - name: time
    kind: mcp
    command: [\"{}\", server.py]
",
            python()
        ),
    );
    std::fs::write(
        file.parent().unwrap().join("server.py"),
        "import sys\nfrom mcp_server_time import main\nsys.argv[1:] = ['--local-timezone=UTC']\nmain()\n",
    )
    .unwrap();
    let served = fleet.serve(&[]);
    let run = served.run_wait("clock", "time on mars");
    assert_eq!(run["status"], "succeeded", "{run}");
    let output = run["output"].as_str().unwrap_or_default();
    assert!(
        output.starts_with("the tool reported an error: ") && output.contains("Mars/Olympus_Mons"),
        "{output}"
    );
    let (_, is_error) = result_of(
        &tool_results(&served, run["id"].as_str().unwrap()),
        "time__get_current_time",
    );
    assert!(is_error);
}

const AUTH: &str = "tokens:
  - {name: alice, token: tok-alice, roles: [ops]}
  - {name: bob, token: tok-bob}
anonymous: refuse
";

#[test]
fn an_mcp_tool_with_a_policy_is_hidden_and_refused_like_any_tool() {
    if !time_server_available() {
        return;
    }
    let fleet = Fleet::new();
    let yaml = format!(
        "name: clock
model:
  script:
    - search: {{query: \"time timezone\"}}
    - load: time__get_current_time
    - tool: {{name: time__get_current_time, arguments: {{timezone: UTC}}}}
    - answer: \"now: {{tool.time__get_current_time}}\"
tools:
{}",
        time_entry("    auth: {policies: [\"roles:ops\"]}\n")
    );
    fleet.agent("clock", &yaml);
    // The same entry with a program that is not there: its tools cannot be listed.
    fleet.agent(
        "broken",
        &yaml.replace("name: clock", "name: broken").replace(
            &format!("[\"{}\", -m, mcp_server_time", python()),
            "[/nonexistent/mcp-server-time",
        ),
    );
    let auth = fleet.dir.path().join("host-auth.yaml");
    std::fs::write(&auth, AUTH).unwrap();
    let served = Served::start_with(
        &[fleet.agents()],
        &fleet.data(),
        &[],
        &["--auth", path_str(&auth)],
    );
    let ask_agent = |agent: &str, token: &str| -> Value {
        let out = served.cli(&[
            "run",
            agent,
            "what time is it?",
            "--wait",
            "--json",
            "--timeout-secs",
            "60",
            "--token",
            token,
        ]);
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", stderr(&out)))
    };
    let ask = |token: &str| ask_agent("clock", token);

    // bob holds no `ops`: the server's tools are hidden, load answers as for a missing tool,
    // and naming one anyway is refused before the server is asked.
    let denied = ask("tok-bob");
    assert_eq!(denied["status"], "succeeded", "{denied}");
    let results = tool_results_as(&served, denied["id"].as_str().unwrap(), "tok-bob");
    let (search, _) = result_of(&results, "search_tools");
    assert!(!search.contains("time__"), "{search}");
    let (load, load_error) = result_of(&results, "load_tool");
    assert!(load_error);
    assert!(
        load.contains("no tool named `time__get_current_time`"),
        "{load}"
    );
    let (used, used_error) = result_of(&results, "time__get_current_time");
    assert!(used_error);
    assert!(used.starts_with("forbidden: "), "{used}");
    assert!(!used.contains("UTC"), "{used}");

    // alice holds `ops`: the same script sees and uses the tools.
    let allowed = ask("tok-alice");
    assert_eq!(allowed["status"], "succeeded", "{allowed}");
    assert_utc_now(allowed["output"].as_str().unwrap_or_default());
    let results = tool_results_as(&served, allowed["id"].as_str().unwrap(), "tok-alice");
    let (search, _) = result_of(&results, "search_tools");
    assert!(search.contains("time__get_current_time"), "{search}");

    // A server whose tools could not be listed: bob is refused by the entry's policy and learns
    // nothing about the server; alice is told it is unavailable.
    let denied = ask_agent("broken", "tok-bob");
    let output = denied["output"].as_str().unwrap_or_default();
    assert!(output.starts_with("now: forbidden: "), "{output}");
    assert!(!output.contains("nonexistent"), "{output}");
    let allowed = ask_agent("broken", "tok-alice");
    let output = allowed["output"].as_str().unwrap_or_default();
    assert!(
        output.starts_with("now: the tool server `time` is unavailable: ")
            && output.contains("could not be started"),
        "{output}"
    );
}

/// As [`tool_results`], read with a token.
fn tool_results_as(served: &Served, run: &str, token: &str) -> Vec<(String, String, bool)> {
    let out = served.cli(&["runs", "show", run, "--json", "--token", token]);
    let shown: Value = serde_json::from_slice(&out.stdout).expect("runs show");
    shown["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "tool_result")
        .map(|e| {
            (
                e["data"]["name"].as_str().unwrap_or_default().to_owned(),
                e["data"]["content"].as_str().unwrap_or_default().to_owned(),
                e["data"]["is_error"].as_bool().unwrap_or(false),
            )
        })
        .collect()
}

#[test]
fn approval_required_parks_the_run_until_an_operator_approves() {
    if !time_server_available() {
        return;
    }
    let fleet = Fleet::new();
    fleet.agent("clock", &clock(&time_entry("    approval: required\n")));
    let served = fleet.serve(&[]);
    let out = served.cli(&["run", "clock", "what time is it?", "--json"]);
    let started: Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", stderr(&out)));
    let id = started["id"].as_str().unwrap().to_owned();
    let blocked = served.wait_status(&id, "blocked");
    // Parked before the server was asked: no result of the time tool yet.
    assert!(
        !blocked["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["kind"] == "tool_result" && e["data"]["name"] == "time__get_current_time"),
        "{blocked}"
    );
    let approved = served.cli(&["approve", &id]);
    assert!(approved.status.success(), "{}", stderr(&approved));
    // Every tool of the entry is gated: the invoke of time__convert_time parks the run again.
    eventually("the run to park at its second tool", BOUND, || {
        let shown = served.show(&id)?;
        let used = shown["events"]
            .as_array()?
            .iter()
            .any(|e| e["kind"] == "tool_result" && e["data"]["name"] == "time__get_current_time");
        (used && shown["run"]["status"] == "blocked").then_some(())
    });
    let approved = served.cli(&["approve", &id]);
    assert!(approved.status.success(), "{}", stderr(&approved));
    let done = served.wait_status(&id, "succeeded");
    assert_utc_now(done["run"]["output"].as_str().unwrap_or_default());
}

#[test]
fn a_missing_or_crashing_server_is_a_clear_tool_error_not_a_hang() {
    if !time_server_available() {
        return;
    }
    let fleet = Fleet::new();
    let entry = |command: &str| {
        format!(
            "name: NAME
model:
  script:
    - tool: {{name: time__get_current_time, arguments: {{timezone: UTC}}}}
    - answer: \"{{tool.time__get_current_time}}\"
tools:
  - name: time
    kind: mcp
    command: {command}
    timeout_ms: 5000
"
        )
    };
    fleet.agent(
        "missing",
        &entry("[/nonexistent/mcp-server-time]").replace("NAME", "missing"),
    );
    fleet.agent(
        "crashing",
        &entry(&format!(
            "[\"{}\", -c, \"import sys; sys.exit(3)\"]",
            python()
        ))
        .replace("NAME", "crashing"),
    );
    let closed_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    fleet.agent(
        "unreachable",
        &entry("[unused]").replace("NAME", "unreachable").replace(
            "command: [unused]",
            &format!("url: \"http://127.0.0.1:{closed_port}/mcp\""),
        ),
    );
    let served = fleet.serve(&[]);

    let started = Instant::now();
    let unreachable = served.run_wait("unreachable", "now");
    assert_eq!(unreachable["status"], "succeeded", "{unreachable}");
    let output = unreachable["output"].as_str().unwrap_or_default();
    assert!(
        output.starts_with("the tool server `time` is unavailable: ")
            && output.contains("could not be reached"),
        "{output}"
    );

    let missing = served.run_wait("missing", "now");
    assert_eq!(missing["status"], "succeeded", "{missing}");
    let output = missing["output"].as_str().unwrap_or_default();
    assert!(
        output.starts_with("the tool server `time` is unavailable: ")
            && output.contains("`/nonexistent/mcp-server-time` could not be started")
            && output.contains("answer without its tools"),
        "{output}"
    );

    let crashing = served.run_wait("crashing", "now");
    assert_eq!(crashing["status"], "succeeded", "{crashing}");
    let output = crashing["output"].as_str().unwrap_or_default();
    assert!(
        output.starts_with("the tool server `time` is unavailable: ")
            && output.contains("did not complete the MCP handshake"),
        "{output}"
    );
    assert!(started.elapsed() < BOUND, "{:?}", started.elapsed());
}

#[test]
fn a_server_that_died_is_started_again_and_ends_with_the_host() {
    if !time_server_available() {
        return;
    }
    let fleet = Fleet::new();
    fleet.agent("clock", &clock(&time_entry("")));
    let mut served = fleet.serve(&[]);
    let first = served.run_wait("clock", "now");
    assert_eq!(first["status"], "succeeded", "{first}");
    let server = children_of(served.child.id());
    assert_eq!(server.len(), 1, "{server:?}");
    let status = Command::new("kill")
        .args(["-KILL", &server[0].to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    eventually("the server to die", BOUND, || gone(server[0]).then_some(()));

    // The next use starts the server again (a use racing the death is told to try again).
    let mut outputs = Vec::new();
    let restarted = eventually("a run after the restart", BOUND, || {
        let run = served.run_wait("clock", "now again");
        let output = run["output"].as_str().unwrap_or_default().to_owned();
        outputs.push(output.clone());
        output.starts_with("now: {").then_some(output)
    });
    assert_utc_now(&restarted);
    assert!(outputs.len() <= 2, "{outputs:?}");
    let second = children_of(served.child.id());
    assert_eq!(second.len(), 1, "{second:?}");
    assert_ne!(second, server);

    // Stopping the host stops the server: nothing outlives it.
    let host = served.child.id();
    let status = Command::new("kill")
        .args(["-TERM", &host.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    eventually("the host to exit", BOUND, || {
        served.child.try_wait().ok().flatten()
    });
    let _ = served.stderr_lines(Duration::from_millis(10));
    eventually("the server to end with the host", BOUND, || {
        gone(second[0]).then_some(())
    });
}

#[test]
fn a_started_server_gets_only_the_env_keys_its_entry_lists() {
    if !time_server_available() {
        return;
    }
    let fleet = Fleet::new();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mcp/probe_server.py");
    fleet.agent(
        "envy",
        &format!(
            "name: envy
model:
  script:
    - tool: {{name: probe__environment, arguments: {{}}}}
    - answer: \"{{tool.probe__environment}}\"
tools:
  - name: probe
    kind: mcp
    command: [\"{}\", \"{script}\"]
    env_keys: [REGION]
env:
  REGION: eu-west
  LEDGER_PASSWORD: hunter2
",
            python()
        ),
    );
    let served = fleet.serve(&[("CONSORT_TEST_HOST_SECRET", "do-not-pass")]);
    let run = served.run_wait("envy", "what do you see?");
    assert_eq!(run["status"], "succeeded", "{run}");
    let output = run["output"].as_str().unwrap_or_default();
    let seen: Value = serde_json::from_str(output).unwrap_or_else(|e| panic!("{e}: {output}"));
    assert_eq!(seen["REGION"], "eu-west", "{seen}");
    assert!(seen.get("LEDGER_PASSWORD").is_none(), "{seen}");
    assert!(seen.get("CONSORT_TEST_HOST_SECRET").is_none(), "{seen}");
    assert!(seen.get("RUST_LOG").is_none(), "{seen}");
    assert!(seen.get("PATH").is_some(), "{seen}");
}

#[test]
fn a_use_past_its_time_limit_is_abandoned_and_the_server_stays_usable() {
    if !time_server_available() {
        return;
    }
    let fleet = Fleet::new();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mcp/probe_server.py");
    fleet.agent(
        "sleepy",
        &format!(
            "name: sleepy
model:
  script:
    - tool: {{name: probe__sleep, arguments: {{seconds: 20}}}}
    - tool: {{name: probe__sleep, arguments: {{seconds: 0.1}}}}
    - answer: \"{{tool.probe__sleep}}\"
tools:
  - name: probe
    kind: mcp
    command: [\"{}\", \"{script}\"]
    timeout_ms: 1500
",
            python()
        ),
    );
    let served = fleet.serve(&[]);
    let started = Instant::now();
    let run = served.run_wait("sleepy", "nap");
    assert_eq!(run["status"], "succeeded", "{run}");
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );
    let results = tool_results(&served, run["id"].as_str().unwrap());
    let sleeps: Vec<_> = results
        .iter()
        .filter(|(n, _, _)| n == "probe__sleep")
        .collect();
    assert_eq!(sleeps.len(), 2, "{results:?}");
    let (_, first, first_error) = sleeps[0];
    assert!(*first_error);
    assert!(
        first.starts_with("timed out: the tool server `probe` did not answer within 1500 ms"),
        "{first}"
    );
    assert_eq!(run["output"], "slept 0.1 s");
}

#[test]
fn a_reload_that_changes_the_entry_replaces_its_server() {
    if !time_server_available() {
        return;
    }
    let fleet = Fleet::new();
    let file = fleet.agent("clock", &clock(&time_entry("")));
    let mut served = fleet.serve(&[]);
    let first = served.run_wait("clock", "now");
    assert_eq!(first["status"], "succeeded", "{first}");
    let before = children_of(served.child.id());
    assert_eq!(before.len(), 1, "{before:?}");

    std::fs::write(&file, clock(&time_entry("    timeout_ms: 20000\n"))).unwrap();
    assert!(
        served.wait_for_line("config reloaded", BOUND).is_some(),
        "the host reloads the edited agent.yaml"
    );
    // The old session is closed: its server ends; the next run starts the new one.
    eventually("the old server to end", BOUND, || {
        gone(before[0]).then_some(())
    });
    let second = served.run_wait("clock", "now again");
    assert_eq!(second["status"], "succeeded", "{second}");
    assert_utc_now(second["output"].as_str().unwrap_or_default());
    let after = children_of(served.child.id());
    assert_eq!(after.len(), 1, "{after:?}");
    assert_ne!(after, before);
}

#[test]
fn a_wrong_mcp_entry_names_its_file_line_and_key() {
    let fleet = Fleet::new();
    let file = fleet.agent(
        "clock",
        "name: clock
model: {script: [{answer: ok}]}
tools:
  - name: time
    kind: mcp
    command: [python3, -m, mcp_server_time]
    url: http://127.0.0.1:8931/mcp
",
    );
    let out = fleet.consort(&[
        "dev",
        path_str(&fleet.agents()),
        "--data",
        path_str(&fleet.data()),
        "--ask",
        "clock",
        "hi",
    ]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains(&format!("{}:7", file.display())), "{err}");
    assert!(err.contains("tools[0].url"), "{err}");
    assert!(err.contains("mutually exclusive"), "{err}");
}

/// The time server over streamable HTTP on a free loopback port, killed when dropped.
struct HttpServer {
    child: Child,
    url: String,
}

impl HttpServer {
    fn start(token: &str) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mcp/time_http.py");
        let child = Command::new(python())
            .args([script, &port.to_string(), token])
            .stdout(Stdio::null())
            .spawn()
            .expect("start the HTTP time server");
        eventually("the HTTP time server to listen", BOUND, || {
            std::net::TcpStream::connect(("127.0.0.1", port)).ok()
        });
        Self {
            child,
            url: format!("http://127.0.0.1:{port}/mcp"),
        }
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_server_reached_over_streamable_http_with_a_bearer_token() {
    if !time_server_available()
        || !support::python_module("uvicorn", "CONSORT_MCP_TESTS", "pip install mcp==2.3.0")
    {
        return;
    }
    let server = HttpServer::start("tz-secret");
    let fleet = Fleet::new();
    let entry = |key: &str| {
        format!(
            "  - {{name: time, kind: mcp, url: \"{}\", token_env: {key}}}\nenv:\n  TIME_TOKEN: tz-secret\n  WRONG_TOKEN: nope\n",
            server.url
        )
    };
    fleet.agent("clock", &clock(&entry("TIME_TOKEN")));
    fleet.agent(
        "stranger",
        &clock(&entry("WRONG_TOKEN")).replace("name: clock", "name: stranger"),
    );
    let served = fleet.serve(&[]);

    let run = served.run_wait("clock", "what time is it?");
    assert_eq!(run["status"], "succeeded", "{run}");
    assert_utc_now(run["output"].as_str().unwrap_or_default());
    let (search, _) = result_of(
        &tool_results(&served, run["id"].as_str().unwrap()),
        "search_tools",
    );
    assert!(search.contains("time__convert_time"), "{search}");

    // A token the server refuses: the tools are not listed and the use says why.
    let refused = served.run_wait("stranger", "what time is it?");
    assert_eq!(refused["status"], "succeeded", "{refused}");
    let output = refused["output"].as_str().unwrap_or_default();
    let output = output.strip_prefix("now: ").unwrap_or(output);
    assert!(
        output.starts_with("the tool server `time` is unavailable: ")
            && output.contains("could not be reached"),
        "{output}"
    );
}

/// An MCP server is started only for a run whose identity may see at least one of its tools:
/// a caller the entry's policy refuses never starts the program (before, it was started for
/// every run, and the run was then told "forbidden").
#[test]
fn a_server_starts_only_for_a_run_that_may_see_its_tools() {
    if !time_server_available() {
        return;
    }
    let fleet = Fleet::new();
    let file = fleet.agent(
        "clock",
        &format!(
            "name: clock
model:
  script:
    - search: {{query: \"time\"}}
    - answer: \"{{tool.search_tools}}\"
tools:
  - name: time
    kind: mcp
    command: [\"{}\", server.py]
    auth: {{policies: [\"roles:ops\"]}}
",
            python()
        ),
    );
    let folder = file.parent().expect("agent folder").to_path_buf();
    std::fs::write(
        folder.join("server.py"),
        "import pathlib, sys\npathlib.Path('started').touch()\nfrom mcp_server_time import main\nsys.argv[1:] = ['--local-timezone=UTC']\nmain()\n",
    )
    .expect("server.py");
    let auth = fleet.dir.path().join("host-auth.yaml");
    std::fs::write(&auth, AUTH).expect("auth file");
    let served = Served::start_with(
        &[fleet.agents()],
        &fleet.data(),
        &[],
        &["--auth", path_str(&auth)],
    );
    let ask = |token: &str| -> Value {
        let out = served.cli(&[
            "run",
            "clock",
            "what tools?",
            "--wait",
            "--json",
            "--timeout-secs",
            "60",
            "--token",
            token,
        ]);
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", stderr(&out)))
    };
    let denied = ask("tok-bob");
    assert_eq!(denied["status"], "succeeded", "{denied}");
    assert!(
        !folder.join("started").exists(),
        "the server was started for a run that may not see its tools"
    );
    let allowed = ask("tok-alice");
    assert_eq!(allowed["status"], "succeeded", "{allowed}");
    assert!(
        folder.join("started").exists(),
        "a run that may see the tools starts the server"
    );
    assert!(
        allowed["output"]
            .as_str()
            .unwrap_or_default()
            .contains("time__get_current_time"),
        "{allowed}"
    );
}
