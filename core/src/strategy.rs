//! proptest strategies for the core's plain data (tests only).
//!
//! Values are drawn from small alphabets (a few tool-use ids, a few child runs) so that random
//! sequences hit the interesting collisions: replays of the same call, replies for calls
//! never placed, decisions without a request.

use proptest::prelude::*;
use serde_json::json;

use crate::event::{
    Answer, ApprovalDecided, ApprovalRequested, CallPlaced, CallRefused, Canceled, Created, Failed,
    MessageReceived, ModelTurn, ModelTurnStarted, ReplyOutcome, ReplyReceived, StatusChanged,
    ToolResult, ToolStarted,
};
use crate::{
    Channel, ModelStep, Refusal, RunEvent, RunId, RunStatus, ToolUse, TreeBudget, TreeSpend,
};

pub(crate) fn run_id() -> impl Strategy<Value = RunId> {
    (0..4u8).prop_map(|n| RunId::child_of(&root(), &format!("tu_{n}")))
}

fn root() -> RunId {
    RunId::parse("run_0123456789abcdef0123456789abcdef").unwrap()
}

pub(crate) fn tool_use_id() -> impl Strategy<Value = String> {
    (0..4u8).prop_map(|n| format!("tu_{n}"))
}

fn status() -> impl Strategy<Value = RunStatus> {
    prop_oneof![
        Just(RunStatus::Queued),
        Just(RunStatus::Running),
        Just(RunStatus::Waiting),
        Just(RunStatus::Blocked),
        Just(RunStatus::Succeeded),
        Just(RunStatus::Failed),
    ]
}

fn tool_use() -> impl Strategy<Value = ToolUse> {
    (
        tool_use_id(),
        prop_oneof![Just("call_agent"), Just("ledger"), Just("check_run")],
    )
        .prop_map(|(id, name)| ToolUse {
            id,
            name: name.to_owned(),
            input: json!({"agent": "cfo", "input": "x"}),
        })
}

fn step() -> impl Strategy<Value = ModelStep> {
    prop_oneof![
        Just(ModelStep::Wait),
        "[a-z ]{0,8}".prop_map(ModelStep::Answer),
        proptest::collection::vec(tool_use(), 1..3).prop_map(ModelStep::ToolUses),
    ]
}

fn tree_budget() -> impl Strategy<Value = TreeBudget> {
    (
        proptest::option::of(0..20u64),
        proptest::option::of(0..5_000u64),
        proptest::option::of(1_700_000_000_000..1_700_000_100_000u64),
    )
        .prop_map(|(max_runs, max_tokens, deadline_ms)| TreeBudget {
            max_runs,
            max_tokens,
            deadline_ms,
        })
}

/// The allowances a turn of `step` may record: one for each `call_agent` use, or none.
fn allowances_of(
    step: &ModelStep,
    allowance: Option<TreeBudget>,
) -> std::collections::BTreeMap<String, TreeBudget> {
    match (step, allowance) {
        (ModelStep::ToolUses(uses), Some(allowance)) => uses
            .iter()
            .filter(|u| u.name == "call_agent")
            .map(|u| (u.id.clone(), allowance))
            .collect(),
        _ => Default::default(),
    }
}

fn refusal() -> impl Strategy<Value = Refusal> {
    prop_oneof![
        (1..16usize).prop_map(|limit| Refusal::DepthLimit { limit }),
        (1..100u64).prop_map(|limit| Refusal::CallCap { limit }),
        Just(Refusal::NotAccepted {
            caller: "cmo".into(),
            callee: "cfo".into()
        }),
    ]
}

/// Any event a run may record, with plausible but unconstrained fields.
pub(crate) fn event() -> impl Strategy<Value = RunEvent> {
    prop_oneof![
        (
            "[a-z]{1,6}",
            proptest::option::of(run_id()),
            0..5u32,
            proptest::option::of(tree_budget())
        )
            .prop_map(|(input, parent, d, budget)| {
                RunEvent::Created(Created {
                    channel: if parent.is_some() {
                        Channel::Agent("cmo".into())
                    } else {
                        Channel::Api
                    },
                    input,
                    parent_run: parent,
                    hop_depth: d,
                    principal: "anonymous".into(),
                    budget,
                })
            }),
        (status(), status(), proptest::option::of("[a-z]{1,4}"))
            .prop_map(|(from, to, error)| RunEvent::Status(StatusChanged { from, to, error })),
        (1..20u64).prop_map(|turn| RunEvent::ModelTurnStarted(ModelTurnStarted { turn })),
        (
            step(),
            0..4usize,
            proptest::option::of(0..20u64),
            prop_oneof![Just(0u64), 1..100u64],
            0..50u64,
            proptest::option::of(tree_budget()),
            proptest::bool::ANY,
        )
            .prop_map(|(step, p, seen, read, written, allowance, decided)| {
                RunEvent::ModelTurn(ModelTurn {
                    allowances: allowances_of(&step, allowance),
                    calls_decided: decided,
                    step,
                    pending_calls: p,
                    seen_seq: seen,
                    input_tokens: read,
                    output_tokens: written,
                })
            }),
        (tool_use_id(), "[a-z]{0,6}", any::<bool>()).prop_map(|(id, content, is_error)| {
            RunEvent::ToolResult(ToolResult {
                tool_use_id: id,
                name: "call_agent".into(),
                content,
                is_error,
            })
        }),
        (tool_use_id(), run_id(), any::<bool>()).prop_map(|(id, child, existing)| {
            RunEvent::CallPlaced(CallPlaced {
                tool_use_id: id,
                agent: "cfo".into(),
                child_run: child,
                existing,
            })
        }),
        (tool_use_id(), refusal()).prop_map(|(id, r)| {
            RunEvent::CallRefused(CallRefused {
                tool_use_id: id,
                agent: "cfo".into(),
                code: r.code().into(),
                reason: r.to_string(),
                refusal: Some(r),
            })
        }),
        (
            run_id(),
            any::<bool>(),
            "[a-z]{0,6}",
            proptest::option::of((0..10u64, 0..1_000u64))
        )
            .prop_map(|(child, ok, output, spent)| {
                RunEvent::ReplyReceived(ReplyReceived {
                    child_run: child,
                    agent: "cfo".into(),
                    status: if ok {
                        ReplyOutcome::Succeeded
                    } else {
                        ReplyOutcome::Failed
                    },
                    output,
                    in_turn: false,
                    tree_cost: Default::default(),
                    tree_spent: spent.map(|(runs, tokens)| TreeSpend { runs, tokens }),
                })
            }),
        (tool_use_id(), any::<bool>()).prop_map(|(id, in_doubt)| RunEvent::ApprovalRequested(
            ApprovalRequested {
                gate: String::new(),
                tool_use_id: id,
                tool: "ledger".into(),
                input: json!({"q": 1}),
                requester_may_decide: false,
                in_doubt,
            }
        )),
        (tool_use_id(), any::<bool>(), any::<bool>()).prop_map(|(id, approved, recorded)| {
            RunEvent::ApprovalDecided(ApprovalDecided {
                gate: String::new(),
                tool_use_id: id,
                approved,
                by: "operator".into(),
                recorded,
            })
        }),
        tool_use_id().prop_map(|id| RunEvent::ToolStarted(ToolStarted {
            gate: String::new(),
            tool_use_id: id,
            tool: "ledger".into(),
        })),
        "[a-z]{0,6}".prop_map(|text| RunEvent::Answer(Answer { text })),
        "[a-z]{0,6}".prop_map(|error| RunEvent::Failed(Failed { error })),
        (
            prop_oneof![Just("operator"), Just("api:alice")],
            proptest::option::of("[a-z ]{0,6}")
        )
            .prop_map(|(by, reason)| RunEvent::Canceled(Canceled {
                by: by.into(),
                reason,
            })),
        // Few senders, ids and digests, so repeats and conflicting reuses of an id happen.
        (
            prop_oneof![Just("cfo"), Just("ops")],
            0..3u8,
            0..2u8,
            "[a-z ]{0,6}"
        )
            .prop_map(|(from, id, digest, text)| {
                RunEvent::MessageReceived(MessageReceived {
                    from: from.into(),
                    delivery_id: format!("d-{id}"),
                    digest: format!("digest-{digest}"),
                    text,
                })
            }),
    ]
}

/// A log: one `created` event, then anything.
pub(crate) fn log() -> impl Strategy<Value = Vec<RunEvent>> {
    (
        proptest::collection::vec(event(), 0..40),
        proptest::option::of(tree_budget()),
    )
        .prop_map(|(mut rest, budget)| {
            rest.insert(
                0,
                RunEvent::Created(Created {
                    channel: Channel::Cli,
                    input: "question".into(),
                    parent_run: None,
                    hop_depth: 0,
                    principal: "anonymous".into(),
                    budget,
                }),
            );
            rest
        })
}
