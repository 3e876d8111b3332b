use proptest::prelude::*;
use serde_json::json;

use super::*;

/// Event data exactly as the stores written before typed events hold it.
fn stored_format_1() -> Vec<(&'static str, Value)> {
    let child = "run_00112233445566778899aabbccddeeff";
    vec![
        (
            "created",
            json!({"channel": "agent:cmo", "input": "August", "parent_run": "run_0123456789abcdef0123456789abcdef", "hop_depth": 1, "principal": "agent:cmo"}),
        ),
        ("status", json!({"from": "queued", "to": "running"})),
        (
            "model_turn",
            json!({"step": {"tool_uses": [{"id": "tu_0_0", "name": "call_agent", "input": {"agent": "cfo", "input": "x"}}]}, "pending_calls": 0, "seen_seq": 2}),
        ),
        (
            "call_placed",
            json!({"tool_use_id": "tu_0_0", "agent": "cfo", "child_run": child, "existing": false}),
        ),
        (
            "tool_result",
            json!({"tool_use_id": "tu_0_0", "name": "call_agent", "content": "{}", "is_error": false}),
        ),
        (
            "call_refused",
            json!({"tool_use_id": "tu_1_0", "agent": "cfo", "code": "depth_limit", "reason": "call chain depth limit (4) reached: answer with what you have", "refusal": {"reason": "depth_limit", "limit": 4}}),
        ),
        (
            "reply_received",
            json!({"child_run": child, "agent": "cfo", "status": "succeeded", "output": "42"}),
        ),
        (
            "model_turn",
            json!({"step": "wait", "pending_calls": 1, "seen_seq": 7}),
        ),
        (
            "approval_requested",
            json!({"tool_use_id": "tu_2_0", "tool": "ledger", "input": {"q": 1}}),
        ),
        (
            "approval_decided",
            json!({"tool_use_id": "tu_2_0", "approved": true, "by": "operator"}),
        ),
        (
            "model_turn",
            json!({"step": {"answer": "done"}, "pending_calls": 0, "seen_seq": 10}),
        ),
        ("answer", json!({"text": "done"})),
        (
            "status",
            json!({"from": "running", "to": "failed", "error": "boom"}),
        ),
        ("failed", json!({"error": "boom"})),
    ]
}

/// Kinds added after format 1's first stores; none changes a format-1 kind.
fn added_kinds() -> Vec<(&'static str, Value)> {
    vec![
        (
            "message_received",
            json!({"from": "cfo", "delivery_id": "d-1", "digest": "ab12", "text": "the numbers are in"}),
        ),
        (
            "canceled",
            json!({"by": "api:alice", "reason": "the model loops"}),
        ),
        (
            "tool_started",
            json!({"gate": "run_0123456789abcdef0123456789abcdef:tu_2_0", "tool_use_id": "tu_2_0", "tool": "ledger"}),
        ),
        (
            "approval_requested",
            json!({"gate": "run_0123456789abcdef0123456789abcdef:tu_2_0:2", "tool_use_id": "tu_2_0", "tool": "ledger", "input": {"q": 1}, "in_doubt": true}),
        ),
        (
            "approval_decided",
            json!({"gate": "run_0123456789abcdef0123456789abcdef:tu_2_0:2", "tool_use_id": "tu_2_0", "approved": false, "by": "operator", "recorded": true}),
        ),
        ("model_turn_started", json!({"turn": 1})),
    ]
}

#[test]
fn every_stored_kind_of_format_1_decodes_and_encodes_back_the_same() {
    let mut kinds = std::collections::BTreeSet::new();
    for (kind, data) in stored_format_1().into_iter().chain(added_kinds()) {
        let event = RunEvent::decode(kind, data.clone()).unwrap();
        assert_eq!(event.kind(), kind);
        assert_eq!(event.data(), data, "{kind}");
        kinds.insert(kind);
    }
    assert_eq!(
        kinds.len(),
        RunEvent::KINDS.len(),
        "a kind lacks a format-1 sample"
    );
}

#[test]
fn a_delivered_message_round_trips_with_every_field() {
    let event = RunEvent::MessageReceived(MessageReceived {
        from: "cfo".into(),
        delivery_id: "d-1".into(),
        digest: "ab12".into(),
        text: "the numbers are in".into(),
    });
    assert_eq!(event.kind(), "message_received");
    assert!(RunEvent::KINDS.contains(&event.kind()));
    let data = event.data();
    assert_eq!(data, added_kinds()[0].1);
    assert_eq!(RunEvent::decode("message_received", data), Ok(event));
    let missing = RunEvent::decode("message_received", json!({"from": "cfo", "text": "x"}));
    assert!(matches!(missing, Err(CoreError::MalformedEvent { .. })));
}

#[test]
fn a_cancel_round_trips_with_and_without_its_reason() {
    let event = RunEvent::Canceled(Canceled {
        by: "api:alice".into(),
        reason: Some("the model loops".into()),
    });
    assert_eq!(event.kind(), "canceled");
    assert_eq!(event.data(), added_kinds()[1].1);
    assert_eq!(RunEvent::decode("canceled", event.data()), Ok(event));
    let bare = RunEvent::Canceled(Canceled {
        by: "operator".into(),
        reason: None,
    });
    assert_eq!(bare.data(), json!({"by": "operator"}));
    assert_eq!(
        RunEvent::decode("canceled", json!({"by": "operator"})),
        Ok(bare)
    );
    let missing = RunEvent::decode("canceled", json!({"reason": "x"}));
    assert!(matches!(missing, Err(CoreError::MalformedEvent { .. })));
}

#[test]
fn a_started_turn_round_trips_and_needs_its_number() {
    let event = RunEvent::ModelTurnStarted(ModelTurnStarted { turn: 3 });
    assert_eq!(event.kind(), "model_turn_started");
    assert!(RunEvent::KINDS.contains(&event.kind()));
    assert_eq!(event.data(), json!({"turn": 3}));
    assert_eq!(
        RunEvent::decode("model_turn_started", event.data()),
        Ok(event)
    );
    let missing = RunEvent::decode("model_turn_started", json!({}));
    assert!(matches!(missing, Err(CoreError::MalformedEvent { .. })));
}

#[test]
fn fields_older_logs_lack_read_with_their_documented_meaning() {
    let turn = RunEvent::decode("model_turn", json!({"step": "wait"})).unwrap();
    assert_eq!(
        turn,
        RunEvent::ModelTurn(ModelTurn {
            step: ModelStep::Wait,
            pending_calls: 0,
            seen_seq: None,
            input_tokens: 0,
            output_tokens: 0,
            allowances: Default::default(),
            calls_decided: false,
        })
    );
    // A turn's tokens are written only when it reported some.
    let counted = RunEvent::ModelTurn(ModelTurn {
        step: ModelStep::Wait,
        pending_calls: 0,
        seen_seq: Some(3),
        input_tokens: 120,
        output_tokens: 0,
        allowances: Default::default(),
        calls_decided: false,
    });
    assert_eq!(
        counted.data(),
        json!({"step": "wait", "pending_calls": 0, "seen_seq": 3, "input_tokens": 120})
    );
    assert_eq!(RunEvent::decode("model_turn", counted.data()), Ok(counted));
    let result = RunEvent::decode(
        "tool_result",
        json!({"tool_use_id": "t", "name": "n", "content": "c"}),
    )
    .unwrap();
    assert!(matches!(
        result,
        RunEvent::ToolResult(ToolResult {
            is_error: false,
            ..
        })
    ));
}

#[test]
fn unknown_kinds_and_malformed_data_are_typed_errors() {
    assert_eq!(
        RunEvent::decode("teleported", json!({})),
        Err(CoreError::UnknownEventKind("teleported".into()))
    );
    let bad = RunEvent::decode(
        "call_placed",
        json!({"tool_use_id": "t", "agent": "cfo", "child_run": "nope"}),
    );
    assert!(matches!(bad, Err(CoreError::MalformedEvent { kind, .. }) if kind == "call_placed"));
    let bad = RunEvent::decode("status", json!({"from": "queued", "to": "sleeping"}));
    assert!(matches!(bad, Err(CoreError::MalformedEvent { .. })));
}

proptest! {
    #[test]
    fn any_event_round_trips_through_its_stored_form(event in crate::strategy::event()) {
        let text = event.data().to_string();
        let data: Value = serde_json::from_str(&text).unwrap();
        prop_assert_eq!(RunEvent::decode(event.kind(), data), Ok(event));
    }
}

#[test]
fn tree_budget_fields_are_written_only_when_there_is_a_budget_and_read_back() {
    let budget = TreeBudget {
        max_runs: Some(3),
        max_tokens: None,
        deadline_ms: Some(1_700_000_300_000),
    };
    let created = RunEvent::Created(Created {
        channel: Channel::Api,
        input: "q".into(),
        parent_run: None,
        hop_depth: 0,
        principal: "anonymous".into(),
        budget: Some(budget),
    });
    let data = created.data();
    assert_eq!(
        data["budget"],
        json!({"max_runs": 3, "max_tokens": null, "deadline_ms": 1_700_000_300_000u64})
    );
    assert_eq!(RunEvent::decode("created", data).unwrap(), created);
    let turn = RunEvent::ModelTurn(ModelTurn {
        step: ModelStep::Wait,
        pending_calls: 0,
        seen_seq: Some(1),
        input_tokens: 0,
        output_tokens: 0,
        allowances: [("tu_0_0".to_owned(), budget)].into(),
        calls_decided: false,
    });
    assert_eq!(RunEvent::decode("model_turn", turn.data()).unwrap(), turn);
    let reply = RunEvent::ReplyReceived(ReplyReceived {
        child_run: RunId::random(),
        agent: "cfo".into(),
        status: ReplyOutcome::Succeeded,
        output: "42".into(),
        in_turn: false,
        tree_cost: CostDelta::default(),
        tree_spent: Some(TreeSpend { runs: 2, tokens: 9 }),
    });
    assert_eq!(reply.data()["tree_spent"], json!({"runs": 2, "tokens": 9}));
    assert_eq!(
        RunEvent::decode("reply_received", reply.data()).unwrap(),
        reply
    );
    // Logs written before tree budgets read none.
    for (kind, data) in stored_format_1() {
        match RunEvent::decode(kind, data).unwrap() {
            RunEvent::Created(c) => assert_eq!(c.budget, None),
            RunEvent::ModelTurn(t) => assert!(t.allowances.is_empty()),
            RunEvent::ReplyReceived(r) => assert_eq!(r.tree_spent, None),
            _ => {}
        }
    }
}
