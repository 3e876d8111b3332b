//! Consent: who may call whom.
//!
//! Owns the one rule of consent, in two halves: the caller's side ([`caller_consents`]: the
//! caller lists the callee in `can_call`) and the callee's side ([`callee_consents`]: the
//! callee lists the caller in `accept_from`). A call connects only where both halves hold;
//! everything else is denied. The guards ([`crate::guards`]) ask each half with that side's
//! *current* config on every call, and [`ConsentGraph`] (what `consort edges` prints) is built
//! from the same two functions, so the edges shown are exactly the edges enforced. A remote
//! A2A agent has no `accept_from` here (it decides its own access): an edge to one the caller
//! declares is [`EdgeStatus::A2a`], enforced on the caller's side only.
//!
//! Pure data: no I/O, no knowledge of files, runs or hosts.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use consort_config::AgentSet;

/// The caller's half of consent: `can_call` (the caller's current list) names `callee`.
pub(crate) fn caller_consents(can_call: &[String], callee: &str) -> bool {
    can_call.iter().any(|name| name == callee)
}

/// The callee's half of consent: `accept_from` (the callee's current list) names `caller`.
pub(crate) fn callee_consents(accept_from: &[String], caller: &str) -> bool {
    accept_from.iter().any(|name| name == caller)
}

/// How one declared edge resolves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EdgeStatus {
    /// Both sides declared it: calls connect.
    Connected,
    /// Only the caller lists the callee in `can_call`: calls are refused.
    CallerOnly,
    /// Only the callee lists the caller in `accept_from`: calls are refused.
    CalleeOnly,
    /// The caller lists a remote A2A agent it declares (`a2a_agents:`): calls go out, and the
    /// remote agent decides by its own rules whether it serves them.
    A2a,
}

impl EdgeStatus {
    /// The serialized name: `connected`, `caller_only`, `callee_only`, `a2a`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Connected => "connected",
            Self::CallerOnly => "caller_only",
            Self::CalleeOnly => "callee_only",
            Self::A2a => "a2a",
        }
    }
}

impl std::fmt::Display for EdgeStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One declared (caller → callee) edge.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Edge {
    /// The agent that would call.
    pub caller: String,
    /// The agent that would be called.
    pub callee: String,
    /// How the two sides' declarations meet.
    pub status: EdgeStatus,
}

/// The `can_call` / `accept_from` declarations of a set of agents.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConsentGraph {
    /// caller → callees it lists in `can_call`.
    can_call: BTreeMap<String, Vec<String>>,
    /// callee → callers it lists in `accept_from`.
    accept_from: BTreeMap<String, Vec<String>>,
    /// agent → the remote A2A agents it declares.
    a2a: BTreeMap<String, BTreeSet<String>>,
}

impl ConsentGraph {
    /// The graph of a set of agents' current declarations.
    pub fn of(set: &AgentSet) -> Self {
        let mut g = Self::from_declarations(set.names().into_iter().filter_map(|name| {
            let agent = set.get(&name)?;
            Some((name, agent.can_call.clone(), agent.accept_from.clone()))
        }));
        for (name, agent) in &set.agents {
            if !agent.a2a_agents.is_empty() {
                g.a2a.insert(
                    name.clone(),
                    agent.a2a_agents.iter().map(|a| a.name.clone()).collect(),
                );
            }
        }
        g
    }

    /// Builds the graph from `(agent, can_call, accept_from)` declarations. An agent declared
    /// twice has its lists merged (the loader refuses duplicates before this point).
    pub fn from_declarations(
        decls: impl IntoIterator<Item = (String, Vec<String>, Vec<String>)>,
    ) -> Self {
        let mut g = Self::default();
        for (name, can_call, accept_from) in decls {
            g.can_call.entry(name.clone()).or_default().extend(can_call);
            g.accept_from.entry(name).or_default().extend(accept_from);
        }
        for list in g.can_call.values_mut().chain(g.accept_from.values_mut()) {
            list.sort();
            list.dedup();
        }
        g
    }

    /// Every declared edge once, sorted by (caller, callee).
    pub fn edges(&self) -> Vec<Edge> {
        let mut out: BTreeMap<(&str, &str), EdgeStatus> = BTreeMap::new();
        for (caller, callees) in &self.can_call {
            for callee in callees {
                let status = if self.declares_a2a(caller, callee) {
                    EdgeStatus::A2a
                } else if self.accepts(callee, caller) {
                    EdgeStatus::Connected
                } else {
                    EdgeStatus::CallerOnly
                };
                out.insert((caller, callee), status);
            }
        }
        for (callee, callers) in &self.accept_from {
            for caller in callers {
                // Connected edges were inserted from the caller's side already.
                out.entry((caller, callee))
                    .or_insert(EdgeStatus::CalleeOnly);
            }
        }
        out.into_iter()
            .map(|((caller, callee), status)| Edge {
                caller: caller.to_owned(),
                callee: callee.to_owned(),
                status,
            })
            .collect()
    }

    /// How the edge `caller → callee` resolves; `None` when neither side declared it.
    pub fn status(&self, caller: &str, callee: &str) -> Option<EdgeStatus> {
        match (self.lists(caller, callee), self.accepts(callee, caller)) {
            (true, _) if self.declares_a2a(caller, callee) => Some(EdgeStatus::A2a),
            (true, true) => Some(EdgeStatus::Connected),
            (true, false) => Some(EdgeStatus::CallerOnly),
            (false, true) => Some(EdgeStatus::CalleeOnly),
            (false, false) => None,
        }
    }

    /// Whether `caller` may call `callee`: only when both sides declared it, or the caller
    /// lists an A2A agent it declares (deny by default).
    pub fn allows(&self, caller: &str, callee: &str) -> bool {
        matches!(
            self.status(caller, callee),
            Some(EdgeStatus::Connected | EdgeStatus::A2a)
        )
    }

    fn declares_a2a(&self, caller: &str, callee: &str) -> bool {
        self.a2a.get(caller).is_some_and(|s| s.contains(callee))
    }

    fn lists(&self, caller: &str, callee: &str) -> bool {
        self.can_call
            .get(caller)
            .is_some_and(|s| caller_consents(s, callee))
    }

    fn accepts(&self, callee: &str, caller: &str) -> bool {
        self.accept_from
            .get(callee)
            .is_some_and(|s| callee_consents(s, caller))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decl(
        name: &str,
        can_call: &[&str],
        accept_from: &[&str],
    ) -> (String, Vec<String>, Vec<String>) {
        (
            name.to_owned(),
            can_call.iter().map(|s| s.to_string()).collect(),
            accept_from.iter().map(|s| s.to_string()).collect(),
        )
    }

    fn edge(caller: &str, callee: &str, status: EdgeStatus) -> Edge {
        Edge {
            caller: caller.into(),
            callee: callee.into(),
            status,
        }
    }

    /// cmo→cfo connected, cmo→analyst caller-only, auditor→cfo callee-only, cfo→cmo absent.
    fn sample() -> ConsentGraph {
        ConsentGraph::from_declarations([
            decl("cmo", &["cfo", "analyst"], &[]),
            decl("cfo", &[], &["cmo", "auditor"]),
            decl("analyst", &[], &[]),
            decl("auditor", &[], &[]),
        ])
    }

    #[test]
    fn edges_have_all_three_statuses_sorted() {
        assert_eq!(
            sample().edges(),
            vec![
                edge("auditor", "cfo", EdgeStatus::CalleeOnly),
                edge("cmo", "analyst", EdgeStatus::CallerOnly),
                edge("cmo", "cfo", EdgeStatus::Connected),
            ]
        );
    }

    #[test]
    fn allows_only_connected() {
        let g = sample();
        assert!(g.allows("cmo", "cfo"));
        assert!(!g.allows("cmo", "analyst"), "caller only");
        assert!(!g.allows("auditor", "cfo"), "callee only");
        assert!(
            !g.allows("cfo", "cmo"),
            "reverse of a connected edge needs its own consent"
        );
        assert!(!g.allows("nobody", "cfo"), "unknown caller");
        assert!(!g.allows("cmo", "nobody"), "unknown callee");
    }

    #[test]
    fn status_reports_absent_edges_as_none() {
        let g = sample();
        assert_eq!(g.status("cmo", "cfo"), Some(EdgeStatus::Connected));
        assert_eq!(g.status("cmo", "analyst"), Some(EdgeStatus::CallerOnly));
        assert_eq!(g.status("auditor", "cfo"), Some(EdgeStatus::CalleeOnly));
        assert_eq!(g.status("cfo", "cmo"), None);
        assert_eq!(g.status("analyst", "auditor"), None);
    }

    #[test]
    fn empty_graph_denies_everything() {
        let g = ConsentGraph::default();
        assert!(g.edges().is_empty());
        assert!(!g.allows("a", "b"));
    }

    #[test]
    fn mutual_edges_are_two_edges() {
        let g =
            ConsentGraph::from_declarations([decl("a", &["b"], &["b"]), decl("b", &["a"], &["a"])]);
        assert_eq!(
            g.edges(),
            vec![
                edge("a", "b", EdgeStatus::Connected),
                edge("b", "a", EdgeStatus::Connected)
            ]
        );
        assert!(g.allows("a", "b") && g.allows("b", "a"));
    }

    #[test]
    fn edges_to_undeclared_agents_are_one_sided() {
        // A remote peer whose declarations this host does not hold.
        let g = ConsentGraph::from_declarations([decl("a", &["remote"], &["other"])]);
        assert_eq!(
            g.edges(),
            vec![
                edge("a", "remote", EdgeStatus::CallerOnly),
                edge("other", "a", EdgeStatus::CalleeOnly)
            ]
        );
    }

    #[test]
    fn an_edge_to_a_declared_a2a_agent_is_enforced_on_the_callers_side_only() {
        let mut g = ConsentGraph::from_declarations([
            decl("planner", &["forecaster", "ghost"], &[]),
            decl("other", &[], &[]),
        ]);
        g.a2a
            .insert("planner".into(), ["forecaster".to_owned()].into());
        // Another agent declaring nothing does not make the name an A2A agent for it.
        g.a2a.insert("other".into(), ["ghost".to_owned()].into());
        assert_eq!(
            g.edges(),
            vec![
                edge("planner", "forecaster", EdgeStatus::A2a),
                edge("planner", "ghost", EdgeStatus::CallerOnly),
            ]
        );
        assert!(g.allows("planner", "forecaster"));
        assert!(!g.allows("planner", "ghost"));
        // Declared but not listed in can_call: no edge.
        assert_eq!(g.status("other", "ghost"), None);
        assert!(!g.allows("other", "ghost"));
    }

    #[test]
    fn duplicate_entries_give_one_edge() {
        let g =
            ConsentGraph::from_declarations([decl("a", &["b", "b"], &[]), decl("b", &[], &["a"])]);
        assert_eq!(g.edges(), vec![edge("a", "b", EdgeStatus::Connected)]);
    }

    #[test]
    fn status_serializes_snake_case() {
        for (s, text) in [
            (EdgeStatus::Connected, "connected"),
            (EdgeStatus::CallerOnly, "caller_only"),
            (EdgeStatus::CalleeOnly, "callee_only"),
            (EdgeStatus::A2a, "a2a"),
        ] {
            assert_eq!(s.as_str(), text);
            assert_eq!(s.to_string(), text);
            assert_eq!(serde_json::to_string(&s).ok(), Some(format!("\"{text}\"")));
        }
        let json = serde_json::to_value(edge("a", "b", EdgeStatus::CallerOnly)).ok();
        assert_eq!(
            json,
            Some(serde_json::json!({"caller": "a", "callee": "b", "status": "caller_only"}))
        );
    }
}
