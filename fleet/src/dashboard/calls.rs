//! What runs' event logs say about their calls, for the dashboard: the call tree under a root
//! run (each child a run found on this host, or a node naming a callee on another host with
//! the cost its reply carried back) and the call refusals counted by their stable code.
//!
//! Pure functions over runs and events; the lookup of a child run is a closure the caller
//! gives, so nothing here reads a store, and nothing here decides who may see what (that is
//! [`crate::access`]).

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use consort_actors::{Channel, Cost, EventRecord, RunRecord, RunStatus};
use consort_core::RunEvent;
use consort_core::step::CostDelta;
use consort_net::RunId;

/// The most nodes a tree answer holds; a larger tree is cut, and says so.
pub(crate) const MAX_TREE_NODES: usize = 500;

/// One call a run placed, as its log tells it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct CallEdge {
    /// The child run the callee stored.
    pub child_run: RunId,
    /// The callee.
    pub agent: String,
    /// The callee's reply, once it came.
    pub reply: Option<Replied>,
}

/// A reply a caller received: how the child ended and the tree cost it carried back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Replied {
    /// Whether the child succeeded.
    pub succeeded: bool,
    /// The child's tree cost when it settled.
    pub tree_cost: CostDelta,
}

/// The calls a run's log records it placed, in the order placed, each once (a call replayed
/// after a crash is logged again with `existing`), with the reply where one came.
pub(crate) fn calls_of(events: &[EventRecord]) -> Vec<CallEdge> {
    let mut edges: Vec<CallEdge> = Vec::new();
    for record in events {
        match &record.event {
            RunEvent::CallPlaced(placed)
                if !edges.iter().any(|e| e.child_run == placed.child_run) =>
            {
                edges.push(CallEdge {
                    child_run: placed.child_run.clone(),
                    agent: placed.agent.clone(),
                    reply: None,
                });
            }
            RunEvent::ReplyReceived(reply) => {
                if let Some(edge) = edges.iter_mut().find(|e| e.child_run == reply.child_run) {
                    edge.reply = Some(Replied {
                        succeeded: reply.status == consort_core::event::ReplyOutcome::Succeeded,
                        tree_cost: reply.tree_cost,
                    });
                }
            }
            _ => {}
        }
    }
    edges
}

/// One node of a call tree. A run this host holds carries its record's summary; a child on
/// another host (or one this host no longer finds) carries what its caller's log knows.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub(crate) struct TreeNode {
    /// The run.
    pub run: RunId,
    /// The agent that runs it.
    pub agent: String,
    /// The host that holds it, when known: this host's name, or the callee's host from the
    /// fleet map.
    pub host: Option<String>,
    /// Whether this host holds the run (its status and costs are then read from its store).
    pub here: bool,
    /// The run's status; for a run held elsewhere, `succeeded` or `failed` once it replied,
    /// else unknown.
    pub status: Option<RunStatus>,
    /// Where the run came from (known for runs held here).
    pub channel: Option<Channel>,
    /// Hops from the root run.
    pub hop_depth: u32,
    /// The run's own cost (known for runs held here).
    pub cost: Option<Cost>,
    /// The run's tree cost: from its record when held here, else what its reply carried back.
    pub tree_cost: Option<CostDelta>,
    /// The runs it called.
    pub children: Vec<Self>,
}

/// A call tree and whether it was cut at [`MAX_TREE_NODES`].
#[derive(Clone, Debug, PartialEq, Serialize)]
pub(crate) struct CallTree {
    /// The root run's node.
    pub root: TreeNode,
    /// How many nodes the answer holds.
    pub nodes: usize,
    /// Whether nodes were left out to stay within [`MAX_TREE_NODES`].
    pub truncated: bool,
}

/// A run this host holds, with its log.
pub(crate) type HeldRun = (RunRecord, Vec<EventRecord>);

/// The call tree under `root` (held here, with its log). `lookup` finds the child run of a
/// call on this host (`Ok(None)` when this host does not hold it); `host_of` names the host
/// that serves an agent; `here` is this host's name. A run is visited once (a cycle in corrupt
/// data cannot loop), and at most `cap` nodes are returned.
pub(crate) fn call_tree<E>(
    root: HeldRun,
    here: &str,
    host_of: impl Fn(&str) -> Option<String>,
    mut lookup: impl FnMut(&CallEdge) -> Result<Option<HeldRun>, E>,
    cap: usize,
) -> Result<CallTree, E> {
    let mut seen: BTreeSet<RunId> = BTreeSet::new();
    let mut nodes = 0usize;
    let mut truncated = false;
    let (record, events) = root;
    seen.insert(record.id.clone());
    nodes += 1;
    let mut root = held_node(&record, here);
    // Depth-first with an explicit stack of (path of child indexes, the parent's calls).
    let mut stack: Vec<(Vec<usize>, Vec<CallEdge>)> = vec![(Vec::new(), calls_of(&events))];
    while let Some((path, edges)) = stack.pop() {
        let parent_depth = node_at(&mut root, &path).hop_depth;
        for edge in edges {
            if !seen.insert(edge.child_run.clone()) {
                continue;
            }
            if nodes >= cap {
                truncated = true;
                break;
            }
            nodes += 1;
            let (node, grandchildren) = match lookup(&edge)? {
                Some((child, child_events)) => (held_node(&child, here), calls_of(&child_events)),
                None => (remote_node(&edge, parent_depth + 1, &host_of), Vec::new()),
            };
            let parent = node_at(&mut root, &path);
            parent.children.push(node);
            if !grandchildren.is_empty() {
                let mut child_path = path.clone();
                child_path.push(parent.children.len() - 1);
                stack.push((child_path, grandchildren));
            }
        }
    }
    Ok(CallTree {
        root,
        nodes,
        truncated,
    })
}

fn node_at<'a>(root: &'a mut TreeNode, path: &[usize]) -> &'a mut TreeNode {
    let mut node = root;
    for &i in path {
        node = &mut node.children[i];
    }
    node
}

fn held_node(run: &RunRecord, here: &str) -> TreeNode {
    TreeNode {
        run: run.id.clone(),
        agent: run.agent.clone(),
        host: Some(here.to_owned()),
        here: true,
        status: Some(run.status),
        channel: Some(run.channel.clone()),
        hop_depth: run.hop_depth,
        cost: Some(run.cost),
        tree_cost: Some(CostDelta {
            model_turns: run.tree_cost.model_turns,
            tool_calls: run.tree_cost.tool_calls,
            calls_placed: run.tree_cost.calls_placed,
            input_tokens: run.tree_cost.input_tokens,
            output_tokens: run.tree_cost.output_tokens,
        }),
        children: Vec::new(),
    }
}

fn remote_node(
    edge: &CallEdge,
    hop_depth: u32,
    host_of: &impl Fn(&str) -> Option<String>,
) -> TreeNode {
    TreeNode {
        run: edge.child_run.clone(),
        agent: edge.agent.clone(),
        host: host_of(&edge.agent),
        here: false,
        status: edge.reply.map(|r| {
            if r.succeeded {
                RunStatus::Succeeded
            } else {
                RunStatus::Failed
            }
        }),
        channel: None,
        hop_depth,
        cost: None,
        tree_cost: edge.reply.map(|r| r.tree_cost),
        children: Vec::new(),
    }
}

/// How many refusals of one code.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct CodeCount {
    /// The refusal's stable code (`not_accepted`, `depth_limit`, ...).
    pub code: String,
    /// How many times it was met.
    pub count: u64,
}

/// One refusal a run met.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct RefusalSeen {
    /// The run whose call was refused.
    pub run: RunId,
    /// Its agent.
    pub agent: String,
    /// The callee it asked for.
    pub callee: String,
    /// The stable code.
    pub code: String,
    /// The sentence its model read.
    pub reason: String,
    /// When, Unix milliseconds.
    pub at_ms: u64,
}

/// The call refusals in a set of runs: counts by code (most frequent first) and the newest few.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct RefusalTally {
    /// How many runs' logs were read.
    pub scanned_runs: usize,
    /// Counts by code, most frequent first (ties by code).
    pub by_code: Vec<CodeCount>,
    /// The newest refusals, newest first.
    pub recent: Vec<RefusalSeen>,
}

/// Counts the `call_refused` events in `logs`, keeping the `recent_cap` newest.
pub(crate) fn tally_refusals<'a>(
    logs: impl IntoIterator<Item = (&'a RunRecord, &'a [EventRecord])>,
    recent_cap: usize,
) -> RefusalTally {
    let mut scanned_runs = 0;
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    let mut recent: Vec<RefusalSeen> = Vec::new();
    for (run, events) in logs {
        scanned_runs += 1;
        for record in events {
            if let RunEvent::CallRefused(refused) = &record.event {
                *counts.entry(refused.code.clone()).or_default() += 1;
                recent.push(RefusalSeen {
                    run: run.id.clone(),
                    agent: run.agent.clone(),
                    callee: refused.agent.clone(),
                    code: refused.code.clone(),
                    reason: refused.reason.clone(),
                    at_ms: record.at_ms,
                });
            }
        }
    }
    let mut by_code: Vec<CodeCount> = counts
        .into_iter()
        .map(|(code, count)| CodeCount { code, count })
        .collect();
    by_code.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.code.cmp(&b.code)));
    recent.sort_by(|a, b| b.at_ms.cmp(&a.at_ms).then_with(|| a.run.cmp(&b.run)));
    recent.truncate(recent_cap);
    RefusalTally {
        scanned_runs,
        by_code,
        recent,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use consort_core::event::{CallPlaced, CallRefused, ReplyOutcome, ReplyReceived};

    use super::*;

    fn id(n: u8) -> RunId {
        RunId::parse(&format!("run_{}", format!("{n:02x}").repeat(16))).unwrap()
    }

    fn run(n: u8, agent: &str, depth: u32) -> RunRecord {
        let text = serde_json::json!({
            "id": id(n).to_string(), "agent": agent, "status": "succeeded", "channel": "api",
            "parent_run": null, "parent_agent": null, "tool_use_id": null, "hop_depth": depth,
            "input": "x", "output": "y", "error": null, "created_at_ms": 1, "settled_at_ms": 2,
            "cost": {"model_turns": 2, "tool_calls": 0, "calls_placed": 1, "input_tokens": 0,
                     "output_tokens": 0, "wall_ms": 5},
            "tree_cost": {"model_turns": 5, "tool_calls": 1, "calls_placed": 1, "input_tokens": 0,
                          "output_tokens": 0, "wall_ms": 5},
            "principal": "anonymous", "roles": [], "origin": "anonymous",
        });
        serde_json::from_value(text).unwrap()
    }

    fn event(run: u8, seq: u64, event: RunEvent) -> EventRecord {
        EventRecord {
            run_id: id(run),
            seq,
            at_ms: seq * 10,
            event,
        }
    }

    fn placed(run: u8, seq: u64, agent: &str, child: u8) -> EventRecord {
        event(
            run,
            seq,
            RunEvent::CallPlaced(CallPlaced {
                tool_use_id: format!("t{seq}"),
                agent: agent.into(),
                child_run: id(child),
                existing: false,
            }),
        )
    }

    fn replied(run: u8, seq: u64, agent: &str, child: u8, turns: u64) -> EventRecord {
        event(
            run,
            seq,
            RunEvent::ReplyReceived(ReplyReceived {
                child_run: id(child),
                agent: agent.into(),
                status: ReplyOutcome::Succeeded,
                output: "ok".into(),
                in_turn: false,
                tree_cost: CostDelta {
                    model_turns: turns,
                    ..CostDelta::default()
                },
                tree_spent: None,
            }),
        )
    }

    fn refused(run: u8, seq: u64, code: &str) -> EventRecord {
        event(
            run,
            seq,
            RunEvent::CallRefused(CallRefused {
                tool_use_id: format!("t{seq}"),
                agent: "hr".into(),
                code: code.into(),
                reason: format!("refused: {code}"),
                refusal: None,
            }),
        )
    }

    #[test]
    fn calls_are_listed_once_with_their_replies() {
        let mut again = placed(1, 3, "cfo", 2);
        if let RunEvent::CallPlaced(p) = &mut again.event {
            p.existing = true;
        }
        let log = vec![
            placed(1, 1, "cfo", 2),
            placed(1, 2, "legal", 3),
            again,
            replied(1, 4, "cfo", 2, 3),
        ];
        let edges = calls_of(&log);
        assert_eq!(edges.len(), 2);
        assert_eq!(edges[0].agent, "cfo");
        assert_eq!(
            edges[0].reply,
            Some(Replied {
                succeeded: true,
                tree_cost: CostDelta {
                    model_turns: 3,
                    ..CostDelta::default()
                }
            })
        );
        assert_eq!(edges[1].agent, "legal");
        assert_eq!(edges[1].reply, None);
    }

    #[test]
    fn a_tree_holds_local_children_and_names_remote_ones_with_their_carried_cost() {
        // cmo (1) called cfo (2, held here), which called audit (3, on another host), and
        // legal (4, on another host, no reply yet).
        let root = (
            run(1, "cmo", 0),
            vec![placed(1, 1, "cfo", 2), placed(1, 2, "legal", 4)],
        );
        let mut held: HashMap<RunId, HeldRun> = HashMap::new();
        held.insert(
            id(2),
            (
                run(2, "cfo", 1),
                vec![placed(2, 1, "audit", 3), replied(2, 2, "audit", 3, 7)],
            ),
        );
        let host_of = |agent: &str| (agent != "legal").then(|| "beta".to_owned());
        let tree = call_tree::<()>(
            root,
            "alpha",
            host_of,
            |edge| Ok(held.get(&edge.child_run).cloned()),
            MAX_TREE_NODES,
        )
        .unwrap();
        assert_eq!(tree.nodes, 4);
        assert!(!tree.truncated);
        assert_eq!(tree.root.agent, "cmo");
        assert_eq!(tree.root.children.len(), 2);
        let cfo = &tree.root.children[0];
        assert!(cfo.here);
        assert_eq!(cfo.host.as_deref(), Some("alpha"));
        assert_eq!(cfo.status, Some(RunStatus::Succeeded));
        let audit = &cfo.children[0];
        assert!(!audit.here);
        assert_eq!(audit.host.as_deref(), Some("beta"));
        assert_eq!(audit.hop_depth, 2);
        assert_eq!(audit.status, Some(RunStatus::Succeeded));
        assert_eq!(audit.tree_cost.map(|c| c.model_turns), Some(7));
        let legal = &tree.root.children[1];
        assert_eq!(legal.host, None);
        assert_eq!(legal.status, None);
        assert_eq!(legal.tree_cost, None);
    }

    #[test]
    fn a_tree_is_cut_at_its_cap_and_never_loops() {
        // 1 calls 2, and 2 (corruptly) calls 1 and 3.
        let root = (run(1, "a", 0), vec![placed(1, 1, "b", 2)]);
        let mut held: HashMap<RunId, HeldRun> = HashMap::new();
        held.insert(
            id(2),
            (
                run(2, "b", 1),
                vec![placed(2, 1, "a", 1), placed(2, 2, "c", 3)],
            ),
        );
        let whole = call_tree::<()>(
            root.clone(),
            "h",
            |_| None,
            |edge| Ok(held.get(&edge.child_run).cloned()),
            10,
        )
        .unwrap();
        assert_eq!(whole.nodes, 3);
        assert!(!whole.truncated);
        let cut = call_tree::<()>(
            root,
            "h",
            |_| None,
            |edge| Ok(held.get(&edge.child_run).cloned()),
            2,
        )
        .unwrap();
        assert_eq!(cut.nodes, 2);
        assert!(cut.truncated);
        assert!(cut.root.children[0].children.is_empty());
    }

    #[test]
    fn a_lookup_error_ends_the_tree() {
        let root = (run(1, "a", 0), vec![placed(1, 1, "b", 2)]);
        let failed = call_tree(root, "h", |_| None, |_| Err("disk"), 10);
        assert_eq!(failed.unwrap_err(), "disk");
    }

    #[test]
    fn refusals_are_counted_by_code_and_the_newest_kept() {
        let (a, b) = (run(1, "cmo", 0), run(2, "cfo", 1));
        let log_a = vec![refused(1, 1, "not_accepted"), refused(1, 5, "depth_limit")];
        let log_b = vec![
            refused(2, 2, "not_accepted"),
            placed(2, 3, "x", 9),
            refused(2, 4, "call_cap"),
        ];
        let tally = tally_refusals([(&a, log_a.as_slice()), (&b, log_b.as_slice())], 2);
        assert_eq!(tally.scanned_runs, 2);
        let codes: Vec<(&str, u64)> = tally
            .by_code
            .iter()
            .map(|c| (c.code.as_str(), c.count))
            .collect();
        assert_eq!(
            codes,
            [("not_accepted", 2), ("call_cap", 1), ("depth_limit", 1)]
        );
        assert_eq!(tally.recent.len(), 2);
        assert_eq!(tally.recent[0].code, "depth_limit");
        assert_eq!(tally.recent[0].agent, "cmo");
        assert_eq!(tally.recent[1].code, "call_cap");
        assert_eq!(tally.recent[1].callee, "hr");
        let none = tally_refusals(std::iter::empty(), 5);
        assert_eq!(none.scanned_runs, 0);
        assert!(none.by_code.is_empty());
    }
}
