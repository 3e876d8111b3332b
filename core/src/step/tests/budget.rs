//! The run limits of `limits:`: the turn limit, the token budget and the loop guard. Each is
//! decided from the view, so every step here is also taken from a view folded again from the
//! log (what a restarted host holds) and must come out the same.

use std::collections::VecDeque;

use serde_json::Value;

use super::super::turn::{budget_error, turn_limit_error};
use super::*;

fn use_of(id: String, name: &str, input: Value) -> ToolUse {
    ToolUse {
        id,
        name: name.into(),
        input,
    }
}

/// A turn of tool uses, `(name, input)` each, with the ids a model would give them in turn `k`.
fn uses(k: usize, list: &[(&str, Value)]) -> ModelStep {
    ModelStep::ToolUses(
        list.iter()
            .enumerate()
            .map(|(i, (name, input))| use_of(format!("tu_{k}_{i}"), name, input.clone()))
            .collect(),
    )
}

fn lookup(q: u64) -> (&'static str, Value) {
    ("lookup", json!({ "q": q }))
}

/// Steps `input` from the kept view, and from a view folded again from the log: both must
/// decide the same, and the kept view must stay the log's.
fn restartable(run: &mut Run, input: Input, p: &Policy<'_>) -> Step {
    let again = step(&RunView::from_events(&run.log), input.clone(), p);
    let step = run.step(input, p);
    assert_eq!(step, again, "a restarted host decides otherwise");
    assert_eq!(run.view, RunView::from_events(&run.log));
    step
}

/// What the runtime does with the effects of `input`'s step and of every step after it, at
/// once: a tool answers "ok", a call is refused (saturated), a check says the run is running;
/// each advance is stepped with the uses still out as busy. Returns the turn the run asks for
/// next, if it asks one, and the tool uses that went out.
fn run_out(run: &mut Run, input: Input, p: &Policy<'_>) -> (Option<TurnAsked>, Vec<String>) {
    // `None` is an advance, built when its turn comes (with what is out then).
    let mut pending: VecDeque<Option<Input>> = VecDeque::from([Some(input)]);
    let mut busy = BTreeSet::new();
    let mut turn = None;
    let mut out = Vec::new();
    let finished = |id: String, name: &str, content: &str| {
        Some(Input::ToolFinished {
            tool_use_id: id,
            name: name.into(),
            content: content.into(),
            is_error: false,
            counts: true,
        })
    };
    while let Some(next) = pending.pop_front() {
        let input = match next {
            Some(input) => input,
            None => Input::Advance {
                busy: busy.clone(),
                thinking: turn.is_some(),
            },
        };
        match &input {
            Input::ToolFinished { tool_use_id, .. } | Input::CallEnded { tool_use_id, .. } => {
                busy.remove(tool_use_id);
            }
            _ => {}
        }
        for effect in restartable(run, input, p).effects {
            match effect {
                Effect::Advance => pending.push_back(None),
                Effect::AskModel(asked) => turn = Some(asked),
                Effect::UseTool(u) => {
                    busy.insert(u.id.clone());
                    out.push(u.id.clone());
                    pending.push_back(finished(u.id, &u.name, "ok"));
                }
                Effect::CheckRun { tool_use_id, .. } => {
                    busy.insert(tool_use_id.clone());
                    out.push(tool_use_id.clone());
                    pending.push_back(finished(tool_use_id, CHECK_RUN, "running"));
                }
                Effect::PlaceCall {
                    tool_use_id,
                    callee,
                    ..
                } => {
                    busy.insert(tool_use_id.clone());
                    out.push(tool_use_id.clone());
                    pending.push_back(Some(Input::CallEnded {
                        tool_use_id,
                        callee: callee.clone(),
                        outcome: CallOutcome::Refused(Refusal::Saturated { callee, active: 1 }),
                    }));
                }
                _ => {}
            }
        }
    }
    (turn, out)
}

/// A run played to its end against `model` (turn number → its step); each turn reports 3
/// tokens read and 5 written.
struct Played {
    run: Run,
    /// The tool uses that went out, by turn.
    out: Vec<Vec<String>>,
}

impl Played {
    fn turns(&self) -> usize {
        self.out.len()
    }

    fn error(&self) -> Option<String> {
        self.run.log.iter().find_map(|e| match e {
            RunEvent::Failed(f) => Some(f.error.clone()),
            _ => None,
        })
    }

    /// The result each tool use got: (id, content, is_error).
    fn results(&self) -> Vec<(String, String, bool)> {
        self.run
            .log
            .iter()
            .filter_map(|e| match e {
                RunEvent::ToolResult(r) => {
                    Some((r.tool_use_id.clone(), r.content.clone(), r.is_error))
                }
                _ => None,
            })
            .collect()
    }

    fn result_of(&self, id: &str) -> (String, bool) {
        let (_, content, is_error) = self
            .results()
            .into_iter()
            .find(|(tu, _, _)| tu == id)
            .unwrap_or_else(|| panic!("{id} has no result"));
        (content, is_error)
    }
}

fn play(p: &Policy<'_>, hop_depth: u32, model: impl Fn(usize) -> ModelStep) -> Played {
    play_from(Run::new(hop_depth), p, model)
}

fn play_from(mut run: Run, p: &Policy<'_>, model: impl Fn(usize) -> ModelStep) -> Played {
    let done = run.view.model_turns as usize;
    let mut out = vec![Vec::new(); done];
    let (mut turn, _) = run_out(&mut run, advance(), p);
    while let Some(asked) = turn {
        assert!(out.len() < 200, "the run never stopped");
        let k = out.len();
        let (next, went) = run_out(&mut run, answer(asked, model(k)), p);
        out.push(went);
        turn = next;
    }
    assert!(run.status.is_settled(), "the run stopped {}", run.status);
    Played { run, out }
}

fn limits(f: impl FnOnce(&mut Limits)) -> Limits {
    let mut limits = Limits::default();
    f(&mut limits);
    limits
}

fn repeated(tool: &str, times: u32) -> Refusal {
    Refusal::RepeatedToolUse {
        tool: tool.into(),
        times,
    }
}

#[test]
fn the_turn_limit_is_the_agents_max_turns() {
    let (cc, fl) = (can_call(), fleet());
    for max_turns in [1, 3, 5] {
        let p = policy(&cc, &fl, limits(|l| l.max_turns = max_turns));
        // A model that never answers, never repeating itself.
        let played = play(&p, 0, |k| uses(k, &[lookup(k as u64)]));
        assert_eq!(played.turns(), max_turns as usize);
        assert_eq!(played.run.status, RunStatus::Failed);
        assert_eq!(played.error(), Some(turn_limit_error(max_turns)));
        assert!(
            played
                .error()
                .unwrap()
                .starts_with(&format!("model turn limit ({max_turns}) reached"))
        );
        // The last turn's tools ran: the limit stops the next turn, not the tools.
        assert_eq!(played.out.last().map(Vec::len), Some(1));
    }
    // The default is 64.
    let p = policy(&cc, &fl, Limits::default());
    let played = play(&p, 0, |k| uses(k, &[lookup(k as u64)]));
    assert_eq!(played.turns(), 64);
}

#[test]
fn a_run_whose_turns_used_its_token_budget_is_not_asked_again() {
    let (cc, fl) = (can_call(), fleet());
    // 8 tokens a turn: 24 after three turns, past 20.
    let p = policy(&cc, &fl, limits(|l| l.max_tokens = Some(20)));
    let played = play(&p, 0, |k| uses(k, &[lookup(k as u64)]));
    assert_eq!(played.turns(), 3);
    assert_eq!(played.run.view.tokens, 24);
    assert_eq!(
        played.error().as_deref(),
        Some(
            "budget_exhausted: this run used 24 tokens of its 20-token budget (limits.max_tokens)"
        )
    );
    // Each turn's tokens are in its event, so the view folded from the log counts them.
    let turns: Vec<_> = played
        .run
        .log
        .iter()
        .filter(|e| e.kind() == "model_turn")
        .map(|e| {
            (
                e.data()["input_tokens"].clone(),
                e.data()["output_tokens"].clone(),
            )
        })
        .collect();
    assert_eq!(turns, vec![(json!(3), json!(5)); 3]);
    assert_eq!(RunView::from_events(&played.run.log).tokens, 24);

    // Reaching the budget exactly is spending it.
    let p = policy(&cc, &fl, limits(|l| l.max_tokens = Some(16)));
    let played = play(&p, 0, |k| uses(k, &[lookup(k as u64)]));
    assert_eq!(played.turns(), 2);
    assert_eq!(played.error(), Some(budget_error(16, 16)));
}

#[test]
fn an_answer_in_the_turn_that_crosses_the_budget_stands() {
    let (cc, fl) = (can_call(), fleet());
    let p = policy(&cc, &fl, limits(|l| l.max_tokens = Some(10)));
    let played = play(&p, 0, |k| match k {
        0 => uses(k, &[lookup(0)]),
        _ => ModelStep::Answer("done".into()),
    });
    assert_eq!(played.run.status, RunStatus::Succeeded);
    assert_eq!((played.turns(), played.run.view.tokens), (2, 16));
}

#[test]
fn without_a_budget_or_reported_tokens_only_the_turn_limit_stops_a_run() {
    let (cc, fl) = (can_call(), fleet());
    let p = policy(&cc, &fl, limits(|l| l.max_turns = 40));
    let played = play(&p, 0, |k| uses(k, &[lookup(k as u64)]));
    assert_eq!((played.turns(), played.run.view.tokens), (40, 320));
    assert_eq!(played.error(), Some(turn_limit_error(40)));

    // A model that reports no tokens never spends a budget.
    let p = policy(
        &cc,
        &fl,
        limits(|l| {
            l.max_turns = 5;
            l.max_tokens = Some(1);
        }),
    );
    let mut run = Run::new(0);
    let (mut turn, _) = run_out(&mut run, advance(), &p);
    let mut k = 0;
    while let Some(asked) = turn {
        let silent = Input::ModelAnswered {
            asked,
            answer: Ok(ModelAnswer {
                step: uses(k, &[lookup(k as u64)]),
                input_tokens: 0,
                output_tokens: 0,
            }),
        };
        turn = run_out(&mut run, silent, &p).0;
        k += 1;
    }
    assert_eq!((k, run.view.tokens), (5, 0));
    assert!(
        run.log
            .iter()
            .filter(|e| e.kind() == "model_turn")
            .all(|e| e.data().get("input_tokens").is_none()),
        "a turn without tokens writes none"
    );
}

#[test]
fn the_third_identical_use_in_a_row_is_refused_and_a_fourth_fails_the_run() {
    let (cc, fl) = (can_call(), fleet());
    let p = policy(&cc, &fl, Limits::default());
    let played = play(&p, 0, |k| uses(k, &[lookup(7)]));
    assert_eq!(played.turns(), 4, "far below the turn limit");
    assert_eq!(
        played.out,
        vec![
            vec!["tu_0_0".to_string()],
            vec!["tu_1_0".into()],
            vec![],
            vec![]
        ]
    );
    assert_eq!(
        played.result_of("tu_2_0"),
        (
            "you called `lookup` with the same input 3 times in a row and its result will not change: stop repeating it; answer with what you have or try something different".into(),
            true
        )
    );
    assert_eq!(played.run.status, RunStatus::Failed);
    assert_eq!(
        played.error(),
        Some(format!("repeated_tool_use: {}", repeated("lookup", 4)))
    );
    assert!(
        played.results().iter().all(|(id, _, _)| id != "tu_3_0"),
        "the failing turn's use gets no result: the run ended"
    );
}

#[test]
fn max_repeats_sets_where_the_guard_refuses_and_fails() {
    let (cc, fl) = (can_call(), fleet());
    for max_repeats in [2, 5] {
        let p = policy(&cc, &fl, limits(|l| l.max_repeats = max_repeats));
        let played = play(&p, 0, |k| uses(k, &[lookup(7)]));
        let n = max_repeats as usize;
        assert_eq!(played.turns(), n + 1);
        assert!(played.out[..n - 1].iter().all(|o| o.len() == 1));
        assert!(played.out[n - 1].is_empty() && played.out[n].is_empty());
        assert_eq!(
            played.result_of(&format!("tu_{}_0", n - 1)).0,
            repeated("lookup", max_repeats).to_string()
        );
        assert_eq!(
            played.error(),
            Some(format!(
                "repeated_tool_use: {}",
                repeated("lookup", max_repeats + 1)
            ))
        );
    }
}

#[test]
fn the_guard_counts_every_kind_of_tool_use() {
    let (cc, fl) = (can_call(), fleet());
    let p = policy(&cc, &fl, Limits::default());
    let cases = [
        ("lookup", json!({"q": 1}), true),
        (
            "invoke_tool",
            json!({"name": "lookup", "arguments": {"q": 1}}),
            true,
        ),
        ("search_tools", json!({"query": "ledger"}), true),
        // A check of a run this run never placed is answered in words, turn after turn.
        ("check_run", json!({"run_id": "run_made_up"}), false),
        // A call refused each time (the callee is saturated).
        (
            CALL_AGENT,
            json!({"agent": "cfo", "input": "numbers"}),
            true,
        ),
    ];
    for (name, input, goes_out) in cases {
        let played = play(&p, 0, |k| uses(k, &[(name, input.clone())]));
        assert_eq!(played.turns(), 4, "{name}");
        let went: Vec<usize> = played.out.iter().map(Vec::len).collect();
        let expected = if goes_out {
            vec![1, 1, 0, 0]
        } else {
            vec![0; 4]
        };
        assert_eq!(went, expected, "{name}");
        if name == CHECK_RUN {
            assert!(played.result_of("tu_1_0").0.starts_with("unknown run"));
        }
        assert_eq!(
            played.result_of("tu_2_0"),
            (repeated(name, 3).to_string(), true),
            "{name}"
        );
        assert_eq!(
            played.error(),
            Some(format!("repeated_tool_use: {}", repeated(name, 4))),
            "{name}"
        );
    }
}

#[test]
fn a_call_the_guard_stops_is_recorded_as_a_refused_call_with_its_code() {
    let (cc, fl) = (can_call(), fleet());
    let p = policy(&cc, &fl, Limits::default());
    let call = (CALL_AGENT, json!({"agent": "cfo", "input": "numbers"}));
    // At the depth limit every call is refused by the caller itself.
    let played = play(&p, 4, |k| uses(k, std::slice::from_ref(&call)));
    let refused: Vec<(String, String)> = played
        .run
        .log
        .iter()
        .filter_map(|e| match e {
            RunEvent::CallRefused(r) => {
                assert_eq!(r.refusal.as_ref().map(Refusal::code), Some(r.code.as_str()));
                Some((r.tool_use_id.clone(), r.code.clone()))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        refused,
        [
            ("tu_0_0".to_string(), "depth_limit".to_string()),
            ("tu_1_0".into(), "depth_limit".into()),
            ("tu_2_0".into(), "repeated_tool_use".into()),
        ]
    );
    assert_eq!(played.run.view.calls_counted(), 0);
    assert!(played.error().unwrap().starts_with("repeated_tool_use: "));
}

#[test]
fn only_the_same_tool_with_an_equal_input_in_consecutive_turns_counts() {
    let (cc, fl) = (can_call(), fleet());
    let p = policy(&cc, &fl, Limits::default());
    // Broken by another input, another tool, or a turn without it: nothing is refused.
    let script = [
        vec![lookup(1)],
        vec![lookup(1)],
        vec![lookup(2)],
        vec![lookup(1)],
        vec![lookup(1), ("other", json!({"q": 1}))],
        vec![("other", json!({"q": 1}))],
        vec![lookup(1)],
        vec![lookup(1)],
    ];
    let played = play(&p, 0, |k| match script.get(k) {
        Some(list) => uses(k, list),
        None => ModelStep::Answer("done".into()),
    });
    assert_eq!(played.run.status, RunStatus::Succeeded);
    assert!(
        played
            .results()
            .iter()
            .all(|(_, content, _)| content == "ok")
    );

    // Equal JSON is equal whatever its key order; one repeated use among others is refused
    // alone, and two equal uses in one turn count as one turn.
    let played = play(&p, 0, |k| {
        let keys = if k % 2 == 0 {
            json!({"a": 1, "b": [1, 2]})
        } else {
            json!({"b": [1, 2], "a": 1})
        };
        uses(
            k,
            &[
                ("lookup", keys.clone()),
                ("lookup", keys),
                ("fresh", json!({ "k": k })),
            ],
        )
    });
    assert_eq!(played.turns(), 4);
    assert_eq!(
        played.out[2],
        ["tu_2_2"],
        "the repeated uses are refused, the fresh one runs"
    );
    for id in ["tu_2_0", "tu_2_1"] {
        assert_eq!(played.result_of(id).0, repeated("lookup", 3).to_string());
    }
    assert_eq!(
        played.error(),
        Some(format!("repeated_tool_use: {}", repeated("lookup", 4)))
    );
}

#[test]
fn a_model_that_stops_repeating_after_the_refusal_goes_on() {
    let (cc, fl) = (can_call(), fleet());
    let p = policy(&cc, &fl, Limits::default());
    let played = play(&p, 0, |k| match k {
        0..=2 => uses(k, &[lookup(7)]),
        3 => uses(k, &[lookup(8)]),
        _ => ModelStep::Answer("done".into()),
    });
    assert_eq!(played.run.status, RunStatus::Succeeded);
    assert_eq!(
        played.out.iter().map(Vec::len).collect::<Vec<_>>(),
        [1, 1, 0, 1, 0]
    );
}

#[test]
fn a_host_restarted_mid_loop_refuses_and_fails_as_the_first_would_have() {
    let (cc, fl) = (can_call(), fleet());
    let p = policy(&cc, &fl, Limits::default());
    // Two identical turns, then a restart: the third is refused by the new host's view.
    let first = play(&p, 0, |k| match k {
        0..=1 => uses(k, &[lookup(7)]),
        _ => ModelStep::Answer("unused".into()),
    });
    let mut log = first.run.log;
    // Drop the answer (and its settlement): the host died after the second turn's result.
    while log.last().is_some_and(|e| e.kind() != "tool_result") {
        log.pop();
    }
    let mut run = Run::new(0);
    run.log = log;
    run.view = RunView::from_events(&run.log);
    run.status = RunStatus::Running;
    assert_eq!(run.view.repeats_of("tu_1_0"), 2);
    let played = play_from(run, &p, |k| uses(k, &[lookup(7)]));
    assert!(played.out[2..].iter().all(Vec::is_empty) && played.turns() == 4);
    assert_eq!(
        played.result_of("tu_2_0").0,
        repeated("lookup", 3).to_string()
    );
    assert_eq!(
        played.error(),
        Some(format!("repeated_tool_use: {}", repeated("lookup", 4)))
    );
}

/// The loop guard's count of each turn's uses, computed apart from the view: one more than an
/// equal use's in the turn before, else 1.
fn streaks(turns: &[Vec<(&str, Value)>]) -> Vec<Vec<u32>> {
    let mut all: Vec<Vec<u32>> = Vec::new();
    for (k, turn) in turns.iter().enumerate() {
        let counts = turn
            .iter()
            .map(|(name, input)| {
                let before = k
                    .checked_sub(1)
                    .map(|b| {
                        turns[b]
                            .iter()
                            .zip(&all[b])
                            .filter(|((n, i), _)| n == name && i == input)
                            .map(|(_, c)| *c)
                            .max()
                            .unwrap_or(0)
                    })
                    .unwrap_or(0);
                before + 1
            })
            .collect();
        all.push(counts);
    }
    all
}

fn random_use() -> impl Strategy<Value = (&'static str, Value)> {
    prop_oneof![
        (0..2u64).prop_map(lookup),
        Just((CHECK_RUN, json!({"run_id": "run_made_up"}))),
        Just((CALL_AGENT, json!({"agent": "cfo", "input": "numbers"}))),
    ]
}

proptest! {
    /// Whatever the model repeats: a use goes out only below `max_repeats` turns in a row, is
    /// refused at exactly `max_repeats`, and the run fails at the first turn past it (and at
    /// no other); every step decided from the kept view is the one a restarted host decides.
    #[test]
    fn the_loop_guard_holds_for_any_model(
        turns in proptest::collection::vec(proptest::collection::vec(random_use(), 1..3), 1..12),
        max_repeats in 2..5u32,
    ) {
        let (cc, fl) = (can_call(), fleet());
        let p = policy(&cc, &fl, limits(|l| l.max_repeats = max_repeats));
        let played = play(&p, 0, |k| match turns.get(k) {
            Some(list) => uses(k, list),
            None => ModelStep::Answer("done".into()),
        });
        let counts = streaks(&turns);
        let fails_at = counts.iter().position(|c| c.iter().any(|n| *n > max_repeats));
        let played_turns = fails_at.map_or(turns.len() + 1, |k| k + 1);
        prop_assert_eq!(played.turns(), played_turns);
        for (k, turn_counts) in counts.iter().enumerate().take(played_turns.min(turns.len())) {
            if Some(k) == fails_at {
                continue;
            }
            for (i, n) in turn_counts.iter().enumerate() {
                let id = format!("tu_{k}_{i}");
                let (content, _) = played.result_of(&id);
                let refused = content.starts_with("you called `");
                prop_assert_eq!(refused, *n == max_repeats, "{} counted {}: {}", id, n, content);
                prop_assert!(!refused || !played.out[k].contains(&id), "{} went out", id);
            }
        }
        match fails_at {
            Some(_) => prop_assert!(played.error().is_some_and(|e| e.starts_with("repeated_tool_use: "))),
            None => prop_assert_eq!(played.run.status, RunStatus::Succeeded),
        }
    }
}
