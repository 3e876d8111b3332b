//! Typed delivery outcomes end to end (issue 25, item 7), on real `consort serve` processes:
//! cmo on alpha, cfo on beta (examples/marketing-finance), both in goal `month-end`.
//!
//! - A delivery the sender's own `agents.can_call` does not allow is refused on the sender's
//!   host with the typed outcome a peer's refusal has (`rejected`, with its own code), and its
//!   sentence names the sender's `can_call`: the peer, which does accept the sender, is never
//!   blamed (nor asked).
//! - Looking a delivery up while the host that holds its receipt is down answers `unreachable`
//!   with what failed, never `unknown_delivery` (the delivery had arrived); once the host is
//!   back, the lookup answers the real receipt.

mod support;

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use support::ServeFleet;

const LONG: Duration = Duration::from_secs(60);

fn fleet(edit: impl FnOnce(&Path)) -> ServeFleet {
    let fleet = ServeFleet::example(edit);
    let file = fleet.dir.path().join("fleet.yaml");
    let yaml = std::fs::read_to_string(&file).expect("fleet.yaml")
        + "goals:\n  - name: month-end\n    agents: [cmo, cfo]\n";
    std::fs::write(&file, yaml).expect("fleet.yaml");
    fleet
}

/// Runs on beta that a delivery started.
fn delivered_runs(fleet: &ServeFleet) -> Vec<Value> {
    fleet
        .jobs_of("beta")
        .into_iter()
        .filter(|r| r["channel"].as_str().unwrap_or("").starts_with("delivery:"))
        .collect()
}

#[test]
fn a_delivery_the_senders_can_call_does_not_allow_is_rejected_typed_and_blames_the_sender() {
    let mut fleet = fleet(|dir| {
        // cmo lists nobody in can_call; cfo (unchanged) accepts cmo.
        std::fs::write(
            dir.join("agents/cmo/agent.yaml"),
            "name: cmo\nmodel:\n  script:\n    - tool: {name: deliver, arguments: {agent: cfo, message: \"{input}\"}}\n    - answer: \"{tool.deliver}\"\n",
        )
        .expect("cmo agent.yaml");
    });
    fleet.start("alpha");
    fleet.start("beta");
    let id = fleet.start_run("alpha", "cmo", "2026-08");
    let run = fleet.wait_settled("alpha", &id, LONG);
    let output = run["output"].as_str().unwrap_or("");
    let outcome: Value = serde_json::from_str(output)
        .unwrap_or_else(|_| panic!("the deliver tool's result is not a typed outcome: {output}"));
    assert_eq!(outcome["outcome"], "rejected", "{outcome}");
    assert_eq!(outcome["code"], "delivery_not_in_can_call", "{outcome}");
    assert!(
        outcome["delivery_id"]
            .as_str()
            .is_some_and(|d| d.starts_with(id.as_str())),
        "{outcome}"
    );
    let reason = outcome["reason"].as_str().unwrap_or("");
    assert!(reason.contains("agents.can_call"), "{reason}");
    assert!(reason.contains("cmo") && reason.contains("cfo"), "{reason}");
    assert!(!reason.contains("does not accept"), "{reason}");
    // The model read it as an error result of its tool use.
    let result = fleet
        .events_of("alpha", &id)
        .into_iter()
        .find(|e| e["kind"] == "tool_result")
        .unwrap_or_else(|| panic!("no tool_result in {id}"));
    assert!(
        result.to_string().contains("delivery_not_in_can_call"),
        "{result}"
    );
    assert!(result.to_string().contains("\"is_error\":true"), "{result}");
    // Refused before anything left alpha: cfo was not asked, nothing landed on beta.
    assert!(delivered_runs(&fleet).is_empty());
}

#[test]
fn a_receipt_lookup_while_the_peer_host_is_down_is_unreachable_then_the_real_receipt() {
    let mut fleet = fleet(|_| {});
    fleet.start("alpha");
    fleet.start("beta");
    let delivered: Value = fleet
        .http
        .post(format!("{}/directory/deliver", fleet.url("alpha")))
        .json(&json!({"agent": "cfo", "message": "2026-08", "delivery_id": "arrived-1"}))
        .send()
        .expect("POST /directory/deliver")
        .json()
        .expect("outcome json");
    assert!(
        matches!(delivered["outcome"].as_str(), Some("active" | "stalled")),
        "{delivered}"
    );
    let run = delivered["receipt"]["run"]
        .as_str()
        .expect("the receipt's run")
        .to_owned();
    let lookup = |fleet: &ServeFleet| {
        support::consort(&[
            "directory",
            "delivery",
            "cfo",
            "--id",
            "arrived-1",
            "--at",
            fleet.url("alpha"),
        ])
    };
    let found = lookup(&fleet);
    assert_eq!(found.status.code(), Some(0), "{found:?}");

    // beta goes away: the receipt is on beta, so alpha cannot say whether it is there.
    fleet.kill("beta");
    let out = lookup(&fleet);
    let answer: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| panic!("not JSON: {}", support::stdout(&out)));
    assert_eq!(answer["receipt"], "unreachable", "{answer}");
    assert_eq!(out.status.code(), Some(4), "{out:?}");
    assert_eq!(answer["delivery_id"], "arrived-1", "{answer}");
    assert_eq!(answer["host"], "beta", "{answer}");
    assert!(
        answer["detail"]
            .as_str()
            .is_some_and(|d| d.contains("beta")),
        "{answer}"
    );
    let over_http: Value = fleet
        .http
        .get(format!(
            "{}/directory/delivery?agent=cfo&id=arrived-1",
            fleet.url("alpha")
        ))
        .send()
        .expect("GET /directory/delivery")
        .json()
        .expect("receipt json");
    assert_eq!(over_http["receipt"], "unreachable", "{over_http}");

    // beta is back: the lookup answers the receipt it holds.
    fleet.start("beta");
    let out = support::eventually("the receipt once beta is back", LONG, || {
        let out = lookup(&fleet);
        (out.status.code() == Some(0)).then_some(out)
    });
    let answer: Value = serde_json::from_slice(&out.stdout).expect("receipt json");
    assert_eq!(answer["receipt"], "enqueued", "{answer}");
    assert_eq!(answer["run"], run.as_str(), "{answer}");
}
