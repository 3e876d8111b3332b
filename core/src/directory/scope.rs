//! Who asks the directory, and which goal that lets it see.
//!
//! Membership is proven, not asserted: the host builds the [`Audience`] from what it verified
//! (the agent a run belongs to, an operator's credentials), and [`resolve_goal`] decides from
//! the fleet's goals alone. A goal the caller names never widens what it may see; a caller the
//! host could not identify, or one that is not a member, gets a [`ScopeGap`] and no rows. An
//! agent that names a goal it is not in learns nothing about whether that goal exists.

use serde::{Deserialize, Serialize};

/// Who is asking, as the host established it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "name", rename_all = "snake_case")]
pub enum Audience {
    /// A run of this agent asks (the agent its run belongs to on this host).
    Agent(String),
    /// An operator of the host.
    Operator,
    /// An identified caller that is neither an agent of the fleet nor an operator.
    Principal(String),
    /// Nobody could be identified (no credentials were supplied).
    Unidentified,
}

/// One goal of the fleet: its name and member agents.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Goal<'a> {
    /// The goal's name.
    pub name: &'a str,
    /// Its member agents.
    pub agents: &'a [String],
}

impl Goal<'_> {
    /// True when `agent` is a member.
    pub fn has(&self, agent: &str) -> bool {
        self.agents.iter().any(|a| a == agent)
    }
}

/// Why a caller sees no rows.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[serde(tag = "code", rename_all = "snake_case")]
#[non_exhaustive]
pub enum ScopeGap {
    /// The caller is known but is not a member of the goal (or of any goal).
    #[error(
        "audience_not_authorized: you are not a member of that goal; the directory lists only the goals you belong to"
    )]
    AudienceNotAuthorized,
    /// The caller could not be identified, so its membership cannot be established.
    #[error(
        "unknown: the caller could not be identified (no credentials), so no goal can be shown"
    )]
    Unknown,
    /// The caller may see several goals and named none.
    #[error("goal_not_named: name one of your goals: {}", goals.join(", "))]
    GoalNotNamed {
        /// The goals it may name.
        goals: Vec<String>,
    },
    /// An operator named a goal the fleet does not declare.
    #[error("unknown_goal: the fleet declares no goal `{goal}`")]
    UnknownGoal {
        /// The name asked for.
        goal: String,
    },
}

impl ScopeGap {
    /// The stable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::AudienceNotAuthorized => "audience_not_authorized",
            Self::Unknown => "unknown",
            Self::GoalNotNamed { .. } => "goal_not_named",
            Self::UnknownGoal { .. } => "unknown_goal",
        }
    }
}

/// The goal `audience` may see when it asks for `asked` (or names none).
///
/// An agent sees the goals it is a member of: naming one it is not in (whether or not the goal
/// exists) is [`ScopeGap::AudienceNotAuthorized`]; naming none works when it belongs to exactly
/// one. An operator sees every goal. Any other caller sees none.
pub fn resolve_goal<'a>(
    goals: &[Goal<'a>],
    audience: &Audience,
    asked: Option<&str>,
) -> Result<Goal<'a>, ScopeGap> {
    match audience {
        Audience::Unidentified => Err(ScopeGap::Unknown),
        Audience::Principal(_) => Err(ScopeGap::AudienceNotAuthorized),
        Audience::Agent(agent) => {
            let mine: Vec<Goal<'a>> = goals.iter().copied().filter(|g| g.has(agent)).collect();
            match asked {
                Some(name) => mine
                    .into_iter()
                    .find(|g| g.name == name)
                    .ok_or(ScopeGap::AudienceNotAuthorized),
                None => only_one(mine, ScopeGap::AudienceNotAuthorized),
            }
        }
        Audience::Operator => match asked {
            Some(name) => goals
                .iter()
                .copied()
                .find(|g| g.name == name)
                .ok_or_else(|| ScopeGap::UnknownGoal {
                    goal: name.chars().take(80).collect(),
                }),
            None => only_one(goals.to_vec(), ScopeGap::GoalNotNamed { goals: Vec::new() }),
        },
    }
}

/// The single goal of `goals`; `none` when there is none; a list to choose from otherwise.
fn only_one<'a>(goals: Vec<Goal<'a>>, none: ScopeGap) -> Result<Goal<'a>, ScopeGap> {
    match goals.as_slice() {
        [] => Err(none),
        [one] => Ok(*one),
        many => Err(ScopeGap::GoalNotNamed {
            goals: many.iter().map(|g| g.name.to_owned()).collect(),
        }),
    }
}

#[cfg(test)]
mod tests;
