//! Budgets over a whole call tree: what a run may still hand out to the calls it places, what
//! a callee's reply charges, and when a tree is spent.
//!
//! A root run's budget ([`TreeBudget`]) is its agent's `limits.tree` tightened by the request
//! that started it ([`TreeBudget::for_root`]), the wall-clock limit made an absolute deadline
//! from the run's creation; it is recorded in the run's `created` event. Each call the run
//! places gets an *allowance* carved out of what the run has neither spent nor handed out yet;
//! the allowance travels signed in the call's hop and is the child run's own budget (recorded
//! in the child's `created` event), so every subtree is bounded by what its parent gave it, on
//! whatever host it runs.
//!
//! # Accounting
//!
//! Everything is read from the run's own log (its [`RunView`]), so a restarted host decides the
//! same. For each `call_agent` use of the run:
//! - replied: it is charged what its reply says the child's subtree spent
//!   ([`ReplyReceived::tree_spent`](crate::event::ReplyReceived), the child's committed spend
//!   when it settled), or, from a child that ran without a budget, one run plus the calls its
//!   tree placed and the tokens its tree used;
//! - accepted and not replied: its run is spent (1), the rest of its allowance is *held*;
//! - being placed (no result yet), or ended unreachable (the callee may hold the run all the
//!   same): its whole allowance is held;
//! - refused: it holds nothing.
//!
//! A run's *spent* count is itself (one run, the tokens of its own turns) plus the above; its
//! *committed* count adds what is held. What the run may hand out is its budget minus what is
//! committed, so the allowances out never add up to more than the budget.
//!
//! # Allowances
//!
//! Allowances are decided when a model turn is recorded (the `model_turn` event carries them,
//! [`allowances`]): a call placed again after a crash carries the same allowance as before. The
//! calls of one turn split what is left evenly, the remainder to the first calls: runs among
//! the calls (a child's own run is part of its allowance), tokens among the calls and the
//! placing run itself, which needs tokens of its own to read the replies and answer. A call
//! whose allowance has no run or no token left, or placed after the deadline, is refused with
//! [`Refusal::TreeBudgetExhausted`] (the model reads it and can answer with what it has); a
//! run whose tree has used its tokens, or whose deadline passed, fails with a `budget_exhausted`
//! error before its model is asked again. A run that has only *handed out* its tokens waits for
//! the replies that give the unused part back before it decides.
//!
//! The module reads no clock (the time is an argument) and performs no I/O; it must not decide
//! anything but budgets.

use std::collections::BTreeMap;

use consort_config::TreeLimits;
use serde::{Deserialize, Serialize};

use crate::step::{CALL_AGENT, CostDelta};
use crate::{ModelStep, Refusal, RunView};

/// A call tree's budget, as one run holds it: the root's own, or the allowance a call carried.
/// `None` is no limit on that count. Every field is always encoded (a hop carries it in the
/// bincode wire format, which cannot skip one).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TreeBudget {
    /// The most runs the run's subtree may hold, the run itself included.
    #[serde(default)]
    pub max_runs: Option<u64>,
    /// The most tokens the subtree's model turns may use.
    #[serde(default)]
    pub max_tokens: Option<u64>,
    /// Unix milliseconds after which no run of the tree asks its model or places a call.
    #[serde(default)]
    pub deadline_ms: Option<u64>,
}

/// Counts of a tree budget: what a subtree spent, or holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TreeSpend {
    /// Runs.
    pub runs: u64,
    /// Tokens, read and written.
    pub tokens: u64,
}

impl TreeSpend {
    fn plus(self, other: Self) -> Self {
        Self {
            runs: self.runs.saturating_add(other.runs),
            tokens: self.tokens.saturating_add(other.tokens),
        }
    }
}

/// Which count of a tree budget ran out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TreeResource {
    /// `max_runs`.
    Runs,
    /// `max_tokens`.
    Tokens,
    /// `max_wall_s`: the deadline passed.
    Wall,
}

impl TreeBudget {
    /// The budget of a root run created at `created_at_ms`: the agent's `limits.tree`,
    /// tightened field by field by the request's (a request can only narrow it); `None` when
    /// neither sets anything.
    pub fn for_root(
        agent: TreeLimits,
        request: Option<TreeLimits>,
        created_at_ms: u64,
    ) -> Option<Self> {
        let limits = match request {
            Some(request) => agent.tightened(request),
            None => agent,
        };
        if limits.is_unbounded() {
            return None;
        }
        Some(Self {
            max_runs: limits.max_runs,
            max_tokens: limits.max_tokens,
            deadline_ms: limits
                .max_wall_s
                .map(|s| created_at_ms.saturating_add(s.saturating_mul(1000))),
        })
    }

    /// Whether this budget fits inside `parent`'s as a child's allowance: at most the parent's
    /// runs but the parent's own, at most its tokens, a deadline no later; a count the parent
    /// bounds must be bounded here too.
    pub fn within(&self, parent: &Self) -> bool {
        fn fits(child: Option<u64>, parent: Option<u64>) -> bool {
            match (child, parent) {
                (_, None) => true,
                (None, Some(_)) => false,
                (Some(c), Some(p)) => c <= p,
            }
        }
        fits(self.max_runs, parent.max_runs.map(|p| p.saturating_sub(1)))
            && fits(self.max_tokens, parent.max_tokens)
            && fits(self.deadline_ms, parent.deadline_ms)
    }

    /// Why a run may not be started on this budget at `now_ms`, if it may not: the deadline
    /// passed, or it holds no run or no token. What the callee's side checks of an arriving
    /// call's allowance (`guards::check_inbound`).
    pub fn refusal(&self, now_ms: u64) -> Option<Refusal> {
        if let Some(deadline) = self.deadline_ms
            && now_ms >= deadline
        {
            return Some(Refusal::TreeBudgetExhausted {
                what: TreeResource::Wall,
                limit: deadline,
                spent: now_ms,
            });
        }
        if self.max_runs == Some(0) {
            return Some(Refusal::TreeBudgetExhausted {
                what: TreeResource::Runs,
                limit: 0,
                spent: 0,
            });
        }
        if self.max_tokens == Some(0) {
            return Some(Refusal::TreeBudgetExhausted {
                what: TreeResource::Tokens,
                limit: 0,
                spent: 0,
            });
        }
        None
    }
}

/// Where a run stands against its tree budget (see the module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Standing {
    /// What the run and its replied subtrees spent, and the runs of calls still out.
    pub spent: TreeSpend,
    /// What the calls still out (or being placed) hold beyond that.
    pub held: TreeSpend,
}

impl Standing {
    /// Spent and held together: what the run may no longer hand out.
    pub fn committed(&self) -> TreeSpend {
        self.spent.plus(self.held)
    }
}

/// What a reply charges a budget for its child's subtree: what the child says it committed,
/// or, from a child that ran without a budget (or a callee outside consort), its run and what
/// its tree cost reports.
pub fn charge(tree_spent: Option<TreeSpend>, tree_cost: &CostDelta) -> TreeSpend {
    tree_spent.unwrap_or(TreeSpend {
        runs: tree_cost.calls_placed.saturating_add(1),
        tokens: tree_cost
            .input_tokens
            .saturating_add(tree_cost.output_tokens),
    })
}

/// Where the run stands against its budget, from its log.
pub fn standing(view: &RunView) -> Standing {
    let mut spent = TreeSpend {
        runs: 1,
        tokens: view.tokens,
    };
    let mut held = TreeSpend::default();
    for tool_use_id in view.call_uses.keys() {
        let allowance = hold_of(view.allowances.get(tool_use_id));
        match view.calls_by_tool_use.get(tool_use_id) {
            Some(child) => match view.charges.get(child) {
                Some(charged) => spent = spent.plus(*charged),
                None => {
                    spent.runs = spent.runs.saturating_add(1);
                    held = held.plus(TreeSpend {
                        runs: allowance.runs.saturating_sub(1),
                        tokens: allowance.tokens,
                    });
                }
            },
            None if view.unreachable_calls.contains(tool_use_id)
                || !view.resolved.contains(tool_use_id) =>
            {
                held = held.plus(allowance);
            }
            // Refused: nothing was started.
            None => {}
        }
    }
    Standing { spent, held }
}

/// What an allowance holds while its call is out; a call without one (placed by a run without
/// a budget) holds its one run.
fn hold_of(allowance: Option<&TreeBudget>) -> TreeSpend {
    TreeSpend {
        runs: allowance.and_then(|a| a.max_runs).unwrap_or(1),
        tokens: allowance.and_then(|a| a.max_tokens).unwrap_or(0),
    }
}

/// What a settled run reports to its caller as its subtree's spend (its committed count), when
/// it ran with a budget.
pub fn tree_spent(view: &RunView) -> Option<TreeSpend> {
    view.budget?;
    Some(standing(view).committed())
}

/// The allowances of the `call_agent` uses of a turn the model just answered (one that used
/// `turn_tokens`), for a run with a budget; empty otherwise. See the module docs for the split.
pub fn allowances(
    view: &RunView,
    step: &ModelStep,
    turn_tokens: u64,
) -> BTreeMap<String, TreeBudget> {
    let (Some(budget), ModelStep::ToolUses(uses)) = (view.budget, step) else {
        return BTreeMap::new();
    };
    let calls: Vec<&str> = uses
        .iter()
        .filter(|u| u.name == CALL_AGENT)
        .map(|u| u.id.as_str())
        .collect();
    if calls.is_empty() {
        return BTreeMap::new();
    }
    let committed = standing(view).committed();
    let left_runs = budget.max_runs.map(|m| m.saturating_sub(committed.runs));
    let left_tokens = budget
        .max_tokens
        .map(|m| m.saturating_sub(committed.tokens.saturating_add(turn_tokens)));
    let n = calls.len() as u64;
    calls
        .into_iter()
        .enumerate()
        .map(|(i, id)| {
            let i = i as u64;
            let allowance = TreeBudget {
                max_runs: left_runs.map(|left| share(left, n, i)),
                // The placing run keeps a share of the tokens for itself.
                max_tokens: left_tokens.map(|left| share(left, n + 1, i)),
                deadline_ms: budget.deadline_ms,
            };
            (id.to_owned(), allowance)
        })
        .collect()
}

/// Share `i` of `total` split into `n` (the remainder to the first shares).
fn share(total: u64, n: u64, i: u64) -> u64 {
    total / n + u64::from(i < total % n)
}

/// Why the `call_agent` use `tool_use_id` may not be placed at `now_ms` under the run's
/// budget, if it may not: the deadline passed, or its allowance holds no run or no token.
pub fn refused_call(view: &RunView, tool_use_id: &str, now_ms: u64) -> Option<Refusal> {
    let budget = view.budget?;
    if let Some(deadline) = budget.deadline_ms
        && now_ms >= deadline
    {
        return Some(Refusal::TreeBudgetExhausted {
            what: TreeResource::Wall,
            limit: deadline,
            spent: now_ms,
        });
    }
    // A call of a run with a budget always has an allowance from its turn; none (a log
    // written before budgets) hands nothing out.
    let allowance = view
        .allowances
        .get(tool_use_id)
        .copied()
        .unwrap_or(TreeBudget {
            max_runs: budget.max_runs.map(|_| 0),
            max_tokens: budget.max_tokens.map(|_| 0),
            deadline_ms: budget.deadline_ms,
        });
    let committed = standing(view).committed();
    if let (Some(0), Some(limit)) = (allowance.max_runs, budget.max_runs) {
        return Some(Refusal::TreeBudgetExhausted {
            what: TreeResource::Runs,
            limit,
            spent: committed.runs,
        });
    }
    if let (Some(0), Some(limit)) = (allowance.max_tokens, budget.max_tokens) {
        return Some(Refusal::TreeBudgetExhausted {
            what: TreeResource::Tokens,
            limit,
            spent: committed.tokens,
        });
    }
    None
}

/// What a run with a budget may do before its model is asked again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum BeforeTurn {
    /// Ask.
    Ask,
    /// Its tokens are all handed out to calls still out: wait for their replies, which give
    /// back what they did not use.
    Wait,
    /// The tree is spent: fail with this error.
    Spent(String),
}

/// Whether a run may ask its model for another turn at `now_ms` (see [`BeforeTurn`]).
pub(crate) fn before_turn(view: &RunView, now_ms: u64) -> BeforeTurn {
    let Some(budget) = view.budget else {
        return BeforeTurn::Ask;
    };
    if let Some(deadline) = budget.deadline_ms
        && now_ms >= deadline
    {
        return BeforeTurn::Spent(format!(
            "budget_exhausted: the call tree's time budget ran out {} s ago (limits.tree.max_wall_s): the run may not ask its model again",
            (now_ms - deadline) / 1000
        ));
    }
    let Some(limit) = budget.max_tokens else {
        return BeforeTurn::Ask;
    };
    let standing = standing(view);
    if standing.spent.tokens >= limit {
        return BeforeTurn::Spent(format!(
            "budget_exhausted: the call tree used {} tokens of the {limit} this run's tree may use (limits.tree.max_tokens)",
            standing.spent.tokens
        ));
    }
    if standing.committed().tokens < limit {
        return BeforeTurn::Ask;
    }
    if view.pending_calls() > 0 {
        return BeforeTurn::Wait;
    }
    BeforeTurn::Spent(format!(
        "budget_exhausted: the call tree's {limit}-token budget is spent or held by calls that may still be running (limits.tree.max_tokens)"
    ))
}

/// A run's budget and what its tree spent of it, as `GET /runs/{id}`, `runs show` and the
/// dashboard show it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BudgetReport {
    /// The most runs of the run's tree (the root's budget, or a called run's allowance).
    pub max_runs: Option<u64>,
    /// The most tokens of its tree.
    pub max_tokens: Option<u64>,
    /// The seconds from the run's creation to its deadline.
    pub max_wall_s: Option<u64>,
    /// The deadline, Unix milliseconds.
    pub deadline_ms: Option<u64>,
    /// What the tree spent so far.
    pub spent: SpentReport,
    /// What calls still out hold of the budget beyond what they spent.
    pub held: TreeSpend,
}

/// What a tree spent, as [`BudgetReport`] shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpentReport {
    /// Runs: this one, its calls accepted, and what replied subtrees charged.
    pub runs: u64,
    /// Tokens of this run's turns and of replied subtrees.
    pub tokens: u64,
    /// Whole seconds from the run's creation to `until_ms` (its settling, or now).
    pub wall_s: u64,
}

impl BudgetReport {
    /// The report of a run (folded in `view`) created at `created_at_ms`, its wall time counted
    /// until `until_ms`; `None` for a run without a budget.
    pub fn of(view: &RunView, created_at_ms: u64, until_ms: u64) -> Option<Self> {
        let budget = view.budget?;
        let standing = standing(view);
        Some(Self {
            max_runs: budget.max_runs,
            max_tokens: budget.max_tokens,
            // Rounded: the deadline was set from the clock a moment before the run was stored.
            max_wall_s: budget
                .deadline_ms
                .map(|d| d.saturating_sub(created_at_ms).saturating_add(500) / 1000),
            deadline_ms: budget.deadline_ms,
            spent: SpentReport {
                runs: standing.spent.runs,
                tokens: standing.spent.tokens,
                wall_s: until_ms.saturating_sub(created_at_ms) / 1000,
            },
            held: standing.held,
        })
    }

    /// One line: `runs 3/10, tokens 1,234/50,000, wall 12 s/300 s` (a count without a limit
    /// says so).
    pub fn line(&self) -> String {
        let of = |spent: u64, max: Option<u64>, unit: &str| match max {
            Some(max) => format!("{}{unit}/{}{unit}", grouped(spent), grouped(max)),
            None => format!("{}{unit} (no limit)", grouped(spent)),
        };
        format!(
            "runs {}, tokens {}, wall {}",
            of(self.spent.runs, self.max_runs, ""),
            of(self.spent.tokens, self.max_tokens, ""),
            of(self.spent.wall_s, self.max_wall_s, " s"),
        )
    }
}

/// A count with thousands separators: `50,000`.
fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests;
