//! Typed delivery outcomes end to end (issue 25, item 7), on real `consort serve` processes:
//! cmo on alpha, cfo on beta (examples/marketing-finance), both in goal `month-end`.
//!
//! - A delivery the sender's own `agents.can_call` does not allow is refused on the sender's
//!   host with the typed outcome a peer's refusal has (`rejected`, with its own code), and its
//!   sentence names the sender's `can_call`: the peer, which does accept the sender, is never
//!   blamed (nor asked).

mod support;

use std::path::Path;
use std::time::Duration;

use serde_json::Value;
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
