//! The pure rules of a tree budget: the root's budget, the split of a turn's allowances, what
//! calls out hold and replies charge, and when a call or a turn is refused.

use serde_json::json;

use super::*;
use crate::event::{CallPlaced, CallRefused, Created, ModelTurn, ReplyOutcome, ReplyReceived};
use crate::{Channel, RunEvent, RunId, ToolUse};

const NOW: u64 = 1_700_000_000_000;

fn budget(runs: Option<u64>, tokens: Option<u64>, deadline: Option<u64>) -> TreeBudget {
    TreeBudget {
        max_runs: runs,
        max_tokens: tokens,
        deadline_ms: deadline,
    }
}

fn root() -> RunId {
    RunId::parse("run_0123456789abcdef0123456789abcdef").unwrap()
}

/// A run's log written by hand, folded as it grows.
struct Log {
    view: RunView,
}

impl Log {
    fn new(budget: Option<TreeBudget>) -> Self {
        let mut view = RunView::default();
        view.apply(&RunEvent::Created(Created {
            channel: Channel::Api,
            input: "q".into(),
            parent_run: None,
            hop_depth: 0,
            principal: "anonymous".into(),
            budget,
        }));
        Self { view }
    }

    /// A turn of `calls` call_agent uses (and one other tool use), with its allowances as
    /// the step would record them.
    fn turn(&mut self, calls: &[&str], tokens: u64) -> BTreeMap<String, TreeBudget> {
        let mut uses: Vec<ToolUse> = calls
            .iter()
            .map(|id| ToolUse {
                id: (*id).into(),
                name: CALL_AGENT.into(),
                input: json!({"agent": "cfo", "input": "numbers"}),
            })
            .collect();
        uses.push(ToolUse {
            id: format!("lookup_{}", self.view.model_turns),
            name: "lookup".into(),
            input: json!({}),
        });
        let step = ModelStep::ToolUses(uses);
        let allowances = allowances(&self.view, &step, tokens);
        self.view.apply(&RunEvent::ModelTurn(ModelTurn {
            step,
            pending_calls: 0,
            seen_seq: None,
            input_tokens: tokens,
            output_tokens: 0,
            allowances: allowances.clone(),
            calls_decided: false,
        }));
        allowances
    }

    fn placed(&mut self, tool_use_id: &str) -> RunId {
        let child = RunId::child_of(&root(), tool_use_id);
        self.view.apply(&RunEvent::CallPlaced(CallPlaced {
            tool_use_id: tool_use_id.into(),
            agent: "cfo".into(),
            child_run: child.clone(),
            existing: false,
        }));
        self.view
            .apply(&RunEvent::tool_result(tool_use_id, CALL_AGENT, "ok", false));
        child
    }

    fn refused(&mut self, tool_use_id: &str, code: &str) {
        self.view.apply(&RunEvent::CallRefused(CallRefused {
            tool_use_id: tool_use_id.into(),
            agent: "cfo".into(),
            code: code.into(),
            reason: "no".into(),
            refusal: None,
        }));
        self.view
            .apply(&RunEvent::tool_result(tool_use_id, CALL_AGENT, "no", true));
    }

    fn replied(&mut self, child: &RunId, tree_cost: CostDelta, tree_spent: Option<TreeSpend>) {
        self.view.apply(&RunEvent::ReplyReceived(ReplyReceived {
            child_run: child.clone(),
            agent: "cfo".into(),
            status: ReplyOutcome::Succeeded,
            output: "done".into(),
            in_turn: false,
            tree_cost,
            tree_spent,
        }));
    }
}

fn spend(runs: u64, tokens: u64) -> TreeSpend {
    TreeSpend { runs, tokens }
}

#[test]
fn a_root_budget_is_the_agents_tightened_by_the_request_with_an_absolute_deadline() {
    let agent = TreeLimits {
        max_runs: Some(10),
        max_tokens: None,
        max_wall_s: Some(300),
    };
    assert_eq!(
        TreeBudget::for_root(agent, None, NOW),
        Some(budget(Some(10), None, Some(NOW + 300_000)))
    );
    let request = TreeLimits {
        max_runs: Some(20),
        max_tokens: Some(5_000),
        max_wall_s: Some(60),
    };
    assert_eq!(
        TreeBudget::for_root(agent, Some(request), NOW),
        Some(budget(Some(10), Some(5_000), Some(NOW + 60_000))),
        "a request only narrows"
    );
    assert_eq!(
        TreeBudget::for_root(TreeLimits::default(), Some(request), NOW),
        Some(budget(Some(20), Some(5_000), Some(NOW + 60_000)))
    );
    assert_eq!(TreeBudget::for_root(TreeLimits::default(), None, NOW), None);
    assert_eq!(
        TreeBudget::for_root(TreeLimits::default(), Some(TreeLimits::default()), NOW),
        None
    );
}

#[test]
fn an_allowance_fits_its_parents_budget_only_when_no_count_widens() {
    let parent = budget(Some(5), Some(1_000), Some(NOW));
    assert!(budget(Some(4), Some(1_000), Some(NOW)).within(&parent));
    assert!(budget(Some(1), Some(0), Some(NOW - 1)).within(&parent));
    // The parent's own run is not the child's to take.
    assert!(!budget(Some(5), Some(1_000), Some(NOW)).within(&parent));
    assert!(!budget(Some(4), Some(1_001), Some(NOW)).within(&parent));
    assert!(!budget(Some(4), Some(1_000), Some(NOW + 1)).within(&parent));
    // A count the parent bounds cannot be dropped on the way.
    assert!(!budget(None, Some(1_000), Some(NOW)).within(&parent));
    assert!(!budget(Some(4), None, Some(NOW)).within(&parent));
    assert!(!budget(Some(4), Some(1_000), None).within(&parent));
    // What the parent leaves open, the child may bound or not.
    let open = TreeBudget::default();
    assert!(budget(Some(3), None, None).within(&open));
    assert!(open.within(&open));
}

#[test]
fn the_callees_side_refuses_an_allowance_that_is_empty_or_past_its_deadline() {
    assert_eq!(budget(Some(1), Some(1), Some(NOW + 1)).refusal(NOW), None);
    assert_eq!(TreeBudget::default().refusal(NOW), None);
    let code = |b: TreeBudget| b.refusal(NOW).map(|r| r.code());
    assert_eq!(code(budget(Some(0), None, None)), Some("budget_exhausted"));
    assert_eq!(
        budget(Some(0), None, None).refusal(NOW),
        Some(Refusal::TreeBudgetExhausted {
            what: TreeResource::Runs,
            limit: 0,
            spent: 0
        })
    );
    assert_eq!(
        budget(None, Some(0), None).refusal(NOW),
        Some(Refusal::TreeBudgetExhausted {
            what: TreeResource::Tokens,
            limit: 0,
            spent: 0
        })
    );
    assert_eq!(
        budget(Some(3), Some(3), Some(NOW)).refusal(NOW),
        Some(Refusal::TreeBudgetExhausted {
            what: TreeResource::Wall,
            limit: NOW,
            spent: NOW
        }),
        "the deadline itself is past"
    );
}

#[test]
fn shares_split_evenly_with_the_remainder_to_the_first() {
    let split = |total: u64, n: u64| (0..n).map(|i| share(total, n, i)).collect::<Vec<_>>();
    assert_eq!(split(10, 3), [4, 3, 3]);
    assert_eq!(split(9, 3), [3, 3, 3]);
    assert_eq!(split(2, 4), [1, 1, 0, 0]);
    assert_eq!(split(0, 2), [0, 0]);
    for total in 0..40 {
        for n in 1..7 {
            let parts = split(total, n);
            assert_eq!(parts.iter().sum::<u64>(), total);
            assert!(parts.iter().max().unwrap() - parts.iter().min().unwrap() <= 1);
        }
    }
}

#[test]
fn a_turns_calls_split_the_runs_left_and_the_tokens_left_with_the_placing_run() {
    let mut log = Log::new(Some(budget(Some(10), Some(1_000), Some(NOW))));
    // 10 runs, the root holds 1: 9 left for 3 calls. 1,000 tokens, this turn used 100:
    // 900 left, in 4 shares (the root keeps one).
    let given = log.turn(&["a", "b", "c"], 100);
    assert_eq!(
        given.keys().map(String::as_str).collect::<Vec<_>>(),
        ["a", "b", "c"],
        "only call_agent uses get an allowance"
    );
    for id in ["a", "b", "c"] {
        assert_eq!(given[id], budget(Some(3), Some(225), Some(NOW)), "{id}");
    }
    assert_eq!(log.view.allowances, given);
    // All three held until they are placed: everything but the root's share is committed.
    assert_eq!(
        standing(&log.view),
        Standing {
            spent: spend(1, 100),
            held: spend(9, 675)
        }
    );
    // A second turn before anything came back has nothing left in runs, and splits the
    // root's own share of tokens again (225 in 2).
    let more = log.turn(&["d"], 0);
    assert_eq!(more["d"], budget(Some(0), Some(113), Some(NOW)));
}

#[test]
fn a_run_without_a_budget_hands_out_no_allowance_and_counts_nothing() {
    let mut log = Log::new(None);
    assert!(log.turn(&["a"], 10).is_empty());
    assert_eq!(tree_spent(&log.view), None);
    assert_eq!(refused_call(&log.view, "a", NOW), None);
    assert_eq!(before_turn(&log.view, u64::MAX), BeforeTurn::Ask);
    assert_eq!(BudgetReport::of(&log.view, NOW, NOW), None);
}

#[test]
fn a_placed_call_spends_its_run_and_holds_the_rest_until_its_reply_charges_what_it_spent() {
    let mut log = Log::new(Some(budget(Some(10), Some(1_000), None)));
    log.turn(&["a", "b"], 100);
    // 9 runs in 2: 5 and 4; 900 tokens in 3: 300 each.
    let a = log.placed("a");
    let b = log.placed("b");
    assert_eq!(
        standing(&log.view),
        Standing {
            spent: spend(3, 100),
            held: spend(4 + 3, 600)
        }
    );
    // a's subtree reports what it committed: 2 runs, 150 tokens.
    log.replied(&a, CostDelta::default(), Some(spend(2, 150)));
    assert_eq!(
        standing(&log.view),
        Standing {
            spent: spend(1 + 2 + 1, 100 + 150),
            held: spend(3, 300)
        }
    );
    // b ran without a budget (a callee outside consort's budgets): its run and its tree cost.
    let cost = CostDelta {
        calls_placed: 2,
        input_tokens: 40,
        output_tokens: 2,
        ..CostDelta::default()
    };
    log.replied(&b, cost, None);
    let standing = standing(&log.view);
    assert_eq!(standing.spent, spend(1 + 2 + 3, 100 + 150 + 42));
    assert_eq!(standing.held, TreeSpend::default());
    assert_eq!(tree_spent(&log.view), Some(standing.committed()));
    // Released: the next turn's call gets what is left (10 - 6 = 4 runs; of the tokens, what
    // neither the replies nor this turn's 8 used, in 2 shares).
    let next = log.turn(&["c"], 8);
    assert_eq!(next["c"].max_runs, Some(4));
    assert_eq!(next["c"].max_tokens, Some((1_000 - 292 - 8) / 2));
}

#[test]
fn a_refused_call_holds_nothing_and_an_unreachable_one_holds_its_whole_allowance() {
    let mut log = Log::new(Some(budget(Some(7), None, None)));
    log.turn(&["a", "b", "c"], 0);
    // 6 runs in 3: 2 each.
    log.refused("a", "saturated");
    log.refused("b", "unreachable");
    // c is still being placed: held whole.
    assert_eq!(
        standing(&log.view),
        Standing {
            spent: spend(1, 0),
            held: spend(2 + 2, 0)
        }
    );
    assert_eq!(charge(None, &CostDelta::default()), spend(1, 0));
}

#[test]
fn a_call_is_refused_when_its_allowance_is_empty_or_the_deadline_passed() {
    let mut log = Log::new(Some(budget(Some(3), None, Some(NOW + 1_000))));
    log.turn(&["a", "b", "c", "d"], 0);
    // 2 runs for 4 calls: a and b get one each, c and d nothing.
    assert_eq!(refused_call(&log.view, "a", NOW), None);
    assert_eq!(refused_call(&log.view, "b", NOW), None);
    for id in ["c", "d"] {
        assert_eq!(
            refused_call(&log.view, id, NOW),
            Some(Refusal::TreeBudgetExhausted {
                what: TreeResource::Runs,
                limit: 3,
                spent: 3,
            }),
            "{id}"
        );
    }
    assert_eq!(
        refused_call(&log.view, "a", NOW + 1_000),
        Some(Refusal::TreeBudgetExhausted {
            what: TreeResource::Wall,
            limit: NOW + 1_000,
            spent: NOW + 1_000,
        })
    );
    // A call of a run with a budget but no recorded allowance (an older log) gets nothing.
    assert!(refused_call(&log.view, "unknown", NOW).is_some());

    let mut tokens = Log::new(Some(budget(None, Some(10), None)));
    tokens.turn(&["a"], 10);
    assert_eq!(
        refused_call(&tokens.view, "a", NOW),
        Some(Refusal::TreeBudgetExhausted {
            what: TreeResource::Tokens,
            limit: 10,
            spent: 10,
        })
    );
}

#[test]
fn before_a_turn_a_spent_tree_fails_and_one_whose_tokens_are_only_handed_out_waits() {
    let mut log = Log::new(Some(budget(None, Some(300), Some(NOW + 5_000))));
    assert_eq!(before_turn(&log.view, NOW), BeforeTurn::Ask);
    let BeforeTurn::Spent(late) = before_turn(&log.view, NOW + 7_500) else {
        panic!("past the deadline");
    };
    assert!(
        late.starts_with("budget_exhausted: the call tree's time budget ran out 2 s ago"),
        "{late}"
    );
    // 100 used; 200 left in 2 shares: the call holds 100.
    log.turn(&["a"], 100);
    let a = log.placed("a");
    assert_eq!(before_turn(&log.view, NOW), BeforeTurn::Ask);
    log.turn(&[], 100);
    // 200 spent and 100 held: nothing left, but the call may give some back.
    assert_eq!(before_turn(&log.view, NOW), BeforeTurn::Wait);
    log.replied(&a, CostDelta::default(), Some(spend(1, 30)));
    assert_eq!(before_turn(&log.view, NOW), BeforeTurn::Ask);
    log.turn(&[], 70);
    let BeforeTurn::Spent(error) = before_turn(&log.view, NOW) else {
        panic!("spent");
    };
    assert_eq!(
        error,
        "budget_exhausted: the call tree used 300 tokens of the 300 this run's tree may use (limits.tree.max_tokens)"
    );
}

#[test]
fn held_tokens_with_no_call_that_could_give_them_back_fail_the_turn() {
    let mut log = Log::new(Some(budget(None, Some(100), None)));
    log.turn(&["a"], 50);
    // a holds 25 and ended unreachable: no reply will come.
    log.refused("a", "unreachable");
    log.turn(&[], 25);
    let BeforeTurn::Spent(error) = before_turn(&log.view, NOW) else {
        panic!("spent");
    };
    assert!(error.starts_with("budget_exhausted:"), "{error}");
}

#[test]
fn the_report_says_spent_against_each_limit_in_one_line() {
    let mut log = Log::new(Some(budget(Some(10), Some(50_000), Some(NOW + 300_000))));
    log.turn(&["a", "b"], 1_234);
    log.placed("a");
    log.placed("b");
    let report = BudgetReport::of(&log.view, NOW, NOW + 12_400).unwrap();
    assert_eq!(
        report,
        BudgetReport {
            max_runs: Some(10),
            max_tokens: Some(50_000),
            max_wall_s: Some(300),
            deadline_ms: Some(NOW + 300_000),
            spent: SpentReport {
                runs: 3,
                tokens: 1_234,
                wall_s: 12,
            },
            held: spend(7, 32_511),
        }
    );
    assert_eq!(
        report.line(),
        "runs 3/10, tokens 1,234/50,000, wall 12 s/300 s"
    );
    let open = BudgetReport {
        max_tokens: None,
        max_wall_s: None,
        ..report
    };
    assert_eq!(
        open.line(),
        "runs 3/10, tokens 1,234 (no limit), wall 12 s (no limit)"
    );
    assert_eq!(grouped(0), "0");
    assert_eq!(grouped(999), "999");
    assert_eq!(grouped(1_000_000), "1,000,000");
}

#[test]
fn a_budget_is_recorded_and_read_back_as_json() {
    let b = budget(Some(4), None, Some(NOW));
    let text = serde_json::to_string(&b).unwrap();
    assert_eq!(
        text,
        r#"{"max_runs":4,"max_tokens":null,"deadline_ms":1700000000000}"#
    );
    assert_eq!(serde_json::from_str::<TreeBudget>(&text).unwrap(), b);
    assert_eq!(
        serde_json::from_str::<TreeBudget>("{}").unwrap(),
        TreeBudget::default()
    );
}

/// What happens next to a run with a tree budget of runs.
#[derive(Clone, Debug)]
enum Op {
    /// A turn asking for this many calls.
    Turn(usize),
    /// The nth call still open is accepted.
    Accept(usize),
    /// The nth call still open is refused (unreachable when true).
    Refuse(usize, bool),
    /// The nth call accepted and not replied replies, its subtree having spent this share of
    /// its allowance (in percent).
    Reply(usize, u64),
}

fn op() -> impl proptest::strategy::Strategy<Value = Op> {
    use proptest::prelude::*;
    prop_oneof![
        (0..5usize).prop_map(Op::Turn),
        (0..8usize).prop_map(Op::Accept),
        (0..8usize, any::<bool>()).prop_map(|(i, u)| Op::Refuse(i, u)),
        (0..8usize, 0..=100u64).prop_map(|(i, p)| Op::Reply(i, p)),
    ]
}

proptest::proptest! {
    /// However turns, placements and replies interleave, what a run has spent and handed out
    /// never passes its budget, so no subtree can be given runs the tree does not have.
    #[test]
    fn what_is_committed_never_passes_the_budget(
        max_runs in 1..30u64,
        ops in proptest::collection::vec(op(), 0..40),
    ) {
        let mut log = Log::new(Some(budget(Some(max_runs), None, None)));
        let mut open: Vec<String> = Vec::new();
        let mut out: Vec<(String, RunId)> = Vec::new();
        let mut next = 0;
        for op in ops {
            match op {
                Op::Turn(k) => {
                    // A turn comes only once the last one's calls are resolved.
                    if !open.is_empty() {
                        continue;
                    }
                    let ids: Vec<String> = (0..k).map(|i| format!("c{}", next + i)).collect();
                    next += k;
                    let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
                    let given = log.turn(&refs, 0);
                    for id in ids {
                        // A call with no run to hold is refused when it is placed.
                        if given[&id].max_runs == Some(0) {
                            log.refused(&id, "budget_exhausted");
                        } else {
                            open.push(id);
                        }
                    }
                }
                Op::Accept(i) if !open.is_empty() => {
                    let id = open.remove(i % open.len());
                    let child = log.placed(&id);
                    out.push((id, child));
                }
                Op::Refuse(i, unreachable) if !open.is_empty() => {
                    let id = open.remove(i % open.len());
                    log.refused(&id, if unreachable { "unreachable" } else { "saturated" });
                }
                Op::Reply(i, percent) if !out.is_empty() => {
                    let (id, child) = out.remove(i % out.len());
                    let given = log.view.allowances[&id].max_runs.unwrap();
                    let used = (given * percent / 100).max(1);
                    log.replied(&child, CostDelta::default(), Some(spend(used, 0)));
                }
                _ => {}
            }
            let committed = standing(&log.view).committed();
            proptest::prop_assert!(
                committed.runs <= max_runs,
                "committed {} of {max_runs}", committed.runs
            );
            for allowance in log.view.allowances.values() {
                proptest::prop_assert!(allowance.within(&budget(Some(max_runs), None, None)));
            }
        }
    }
}
