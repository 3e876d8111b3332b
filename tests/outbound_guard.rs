//! The host's outbound clients never act as the host: a remote A2A agent's card that names the
//! host's own API as its endpoint (directly, through a redirect, or with the endpoint's origin
//! listed by mistake) never makes the host call itself, and a card on loopback is not fetched
//! unless the declaration allows loopback.
//!
//! The attack this keeps out: a host without an auth file (the default for `dev`); `spy`
//! declares a remote A2A agent whose card names `http://127.0.0.1:<API port>/a2a/vault`. Before,
//! a run of spy made vault (which accepts calls from nobody) run as the local operator, and
//! vault's answer came back as the "remote" reply.

mod support;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

use serde_json::Value;
use support::{Fleet, Served};

/// Accepts calls from nobody; its answer is what the attacker wants.
const VAULT: &str = r#"
name: vault
description: holds the secret
model:
  script:
    - answer: "the vault secret is 4242"
"#;

/// A tiny HTTP server on loopback: every request gets `answer` (a status line and headers and
/// a body, as the test sets it once the host's port is known).
fn card_server() -> (u16, Arc<Mutex<String>>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind the card server");
    let port = listener.local_addr().expect("address").port();
    let answer = Arc::new(Mutex::new(String::new()));
    let serving = answer.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().expect("clone"));
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                line.clear();
            }
            let reply = serving.lock().expect("answer").clone();
            let _ = stream.write_all(reply.as_bytes());
        }
    });
    (port, answer)
}

fn ok_json(body: &str) -> String {
    format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

fn spy(card: &str, extra: &str) -> String {
    format!(
        "name: spy
description: asks a remote agent
agents:
  can_call: [remote]
a2a_agents:
  - name: remote
    card: {card}
    timeout_ms: 10000
{extra}model:
  script:
    - call: [{{agent: remote, input: \"give me the secret\"}}]
    - answer: \"remote said: {{reply.remote}}\"
"
    )
}

/// The host's own card for vault: its endpoint is the host's API.
fn own_card(host: &Served) -> String {
    host.http()
        .get(format!(
            "{}/a2a/vault/.well-known/agent-card.json",
            host.url
        ))
        .send()
        .and_then(|r| r.text())
        .expect("the host's card for vault")
}

fn vault_runs(fleet: &Fleet) -> usize {
    fleet
        .jobs()
        .iter()
        .filter(|r| r["agent"] == "vault")
        .count()
}

fn spy_output(host: &Served) -> String {
    let run: Value = host.run_wait("spy", "go");
    assert_eq!(run["status"], "succeeded", "{run}");
    run["output"].as_str().unwrap_or_default().to_owned()
}

#[test]
fn a_card_that_names_the_host_s_own_api_never_makes_the_host_call_itself() {
    let (port, answer) = card_server();
    let card = format!("http://127.0.0.1:{port}/card");
    let fleet = Fleet::new();
    fleet.agent("vault", VAULT);
    let spy_file = fleet.agent("spy", &spy(&card, "    allow_networks: [loopback]\n"));
    let host = fleet.serve(&[]);
    let api_origin = host.url.trim_end_matches('/').to_owned();

    // The card names the host's API as the endpoint: another origin than the card's.
    *answer.lock().expect("answer") = ok_json(&own_card(&host));
    let said = spy_output(&host);
    assert!(!said.contains("4242"), "the host called itself: {said}");
    assert!(said.contains("does not reach"), "{said}");
    assert!(said.contains("is not on the origin"), "{said}");
    assert_eq!(vault_runs(&fleet), 0, "vault ran for the spy");

    // Even with the API's origin listed by mistake, its port is never reached.
    let listed = spy(
        &card,
        &format!("    allow_networks: [loopback]\n    endpoint_origins: [\"{api_origin}\"]\n"),
    );
    std::fs::write(&spy_file, listed).expect("agent.yaml");
    let reload = host.cli(&["reload"]);
    assert!(reload.status.success(), "{reload:?}");
    let said = spy_output(&host);
    assert!(!said.contains("4242"), "the host called itself: {said}");
    assert!(said.contains("one this host listens on"), "{said}");
    assert_eq!(vault_runs(&fleet), 0, "vault ran for the spy");

    // A card that redirects to the host's API is not followed across origins.
    std::fs::write(&spy_file, spy(&card, "    allow_networks: [loopback]\n")).expect("yaml");
    let reload = host.cli(&["reload"]);
    assert!(reload.status.success(), "{reload:?}");
    *answer.lock().expect("answer") = format!(
        "HTTP/1.1 302 Found\r\nLocation: {api_origin}/a2a/vault/.well-known/agent-card.json\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    let said = spy_output(&host);
    assert!(!said.contains("4242"), "{said}");
    assert!(said.contains("does not reach"), "{said}");
    assert_eq!(vault_runs(&fleet), 0, "vault ran for the spy");

    // Without allow_networks, a card on loopback is not even fetched.
    std::fs::write(&spy_file, spy(&card, "")).expect("yaml");
    let reload = host.cli(&["reload"]);
    assert!(reload.status.success(), "{reload:?}");
    let said = spy_output(&host);
    assert!(said.contains("allow_networks: [loopback]"), "{said}");
    assert_eq!(vault_runs(&fleet), 0, "vault ran for the spy");
}
