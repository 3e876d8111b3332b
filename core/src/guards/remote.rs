//! Who may deliver a reply to, or ask about, a run across hosts.
//!
//! A call is placed once; afterwards the two hosts of the call talk about its child run: the
//! callee's host delivers the reply ([`arrived_reply`]), and the caller's host asks for the
//! run's status (`check_run`) or for its reply again ([`run_query`]). Each request comes from
//! an authenticated host (the link pins its key), and each is allowed only to the host that
//! serves the agent on the other end of that call: no host may speak for another host's agent
//! or read about runs its own agents did not place.
//!
//! The answers are link-protocol answers, read by the asking host, never by a model: a
//! [`Denial`], not a [`crate::Refusal`]. Like the rest of the guards, these functions perform
//! no I/O: the link glue gathers the facts (the fleet's placements, the sending host, what the
//! callee's store holds) and asks. Whether the reply answers a call the caller's run placed is
//! the caller's run's own decision (`step::take_reply`), not this module's.

use std::collections::BTreeMap;
use std::fmt;

use crate::RunId;

/// Why another host may not deliver a reply to, or ask about, a run here. Not
/// `#[non_exhaustive]`: the link glue maps every variant to a wire reason, and a new variant
/// should make it say which.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Denial {
    /// `agent` is not served by `sender`, the host that spoke for it.
    NotServedBySender {
        /// The agent the sending host spoke for.
        agent: String,
        /// The sending host.
        sender: String,
    },
    /// `agent` is not served by this host.
    NotServedHere {
        /// The agent asked for.
        agent: String,
    },
    /// `callee` holds no run `child_run` placed by an agent of host `sender`.
    NoSuchChild {
        /// This host's agent asked about.
        callee: String,
        /// The run asked about.
        child_run: RunId,
        /// The asking host.
        sender: String,
    },
    /// The run was placed by an agent of the asking host, but not by the caller and parent run
    /// the request names.
    NotPlacedBy {
        /// The run asked about.
        child_run: RunId,
        /// The caller the request names.
        caller: String,
        /// The parent run the request names.
        parent_run: RunId,
    },
}

impl fmt::Display for Denial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotServedBySender { agent, sender } => {
                write!(f, "{agent} is not served by host {sender}")
            }
            Self::NotServedHere { agent } => write!(f, "{agent} is not served here"),
            Self::NoSuchChild {
                callee,
                child_run,
                sender,
            } => write!(
                f,
                "{callee} has no run {child_run} placed by an agent of host {sender}"
            ),
            Self::NotPlacedBy {
                child_run,
                caller,
                parent_run,
            } => write!(
                f,
                "run {child_run} was not placed by {caller}'s run {parent_run}"
            ),
        }
    }
}

/// A reply that arrived from host `sender`, already verified as signed by it: the sender must
/// serve the reply's callee (a host replies only for its own agents' runs) and this host its
/// caller. `placements` maps each agent of the fleet to its host.
pub fn arrived_reply(
    placements: &BTreeMap<String, String>,
    here: &str,
    sender: &str,
    caller: &str,
    callee: &str,
) -> Result<(), Denial> {
    if !served_by(placements, callee, sender) {
        return Err(Denial::NotServedBySender {
            agent: callee.to_owned(),
            sender: sender.to_owned(),
        });
    }
    asked_agent(placements, here, caller)
}

/// The first half of [`run_query`], to ask before reading any store: the agent asked about is
/// served here. The agent's name comes from another host, so no store path may be built from
/// it before this holds.
pub fn asked_agent(
    placements: &BTreeMap<String, String>,
    here: &str,
    agent: &str,
) -> Result<(), Denial> {
    if served_by(placements, agent, here) {
        Ok(())
    } else {
        Err(Denial::NotServedHere {
            agent: agent.to_owned(),
        })
    }
}

/// What a host asks about a run of one of this host's agents.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunQuery<'a> {
    /// `check_run`: the run's status, asked on behalf of the caller's run that placed it.
    Check {
        /// The caller the request names.
        caller: &'a str,
        /// The caller's run the request names.
        parent_run: &'a RunId,
    },
    /// Send the run's reply again (the caller's host lost it or was down).
    Resend,
}

/// Who placed a stored run, as its record says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoredRun<'a> {
    /// The agent whose run placed it (`None` for a root run).
    pub parent_agent: Option<&'a str>,
    /// The run that placed it (`None` for a root run).
    pub parent_run: Option<&'a RunId>,
}

/// What this host knows when another host asks about a run.
#[derive(Clone, Copy, Debug)]
pub struct RunQueryFacts<'a> {
    /// Agent -> the host serving it, for every agent of the fleet.
    pub placements: &'a BTreeMap<String, String>,
    /// This host.
    pub here: &'a str,
    /// The asking host, as the link authenticated it.
    pub sender: &'a str,
    /// This host's agent the request names.
    pub callee: &'a str,
    /// The run the request names.
    pub child_run: &'a RunId,
    /// What is asked.
    pub query: RunQuery<'a>,
    /// The run as the callee's store holds it; `None` when the store holds no such run (or
    /// could not be read: either way there is nothing to tell).
    pub stored: Option<StoredRun<'a>>,
}

/// Whether the asking host may have what it asks about a run: the callee is served here, the
/// run exists and was placed by an agent the asking host serves, and for `check_run` by the
/// very caller and parent run the request names. A resend names no caller: the reply goes to
/// the run's own caller anyway.
pub fn run_query(f: &RunQueryFacts<'_>) -> Result<(), Denial> {
    asked_agent(f.placements, f.here, f.callee)?;
    let placed_by_sender = f.stored.filter(|run| {
        run.parent_agent
            .is_some_and(|caller| served_by(f.placements, caller, f.sender))
    });
    let Some(run) = placed_by_sender else {
        return Err(Denial::NoSuchChild {
            callee: f.callee.to_owned(),
            child_run: f.child_run.clone(),
            sender: f.sender.to_owned(),
        });
    };
    match f.query {
        RunQuery::Resend => Ok(()),
        RunQuery::Check { caller, parent_run }
            if run.parent_agent == Some(caller) && run.parent_run == Some(parent_run) =>
        {
            Ok(())
        }
        RunQuery::Check { caller, parent_run } => Err(Denial::NotPlacedBy {
            child_run: f.child_run.clone(),
            caller: caller.to_owned(),
            parent_run: parent_run.clone(),
        }),
    }
}

fn served_by(placements: &BTreeMap<String, String>, agent: &str, host: &str) -> bool {
    placements.get(agent).is_some_and(|served| served == host)
}

#[cfg(test)]
mod tests;
