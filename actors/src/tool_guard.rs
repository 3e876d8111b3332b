//! The one authorization pipeline every tool use goes through.
//!
//! The guards it runs ([`Guard`], [`declared_guard`]) are defined in [`crate::guard`] and
//! re-exported here.
//!
//! The pipeline, in order: the identity requirement (a tool whose `anonymous` is `no` needs a
//! present caller), the declared policies (all must allow; a policy that needs the resource is
//! deferred), the guards, **the cut**, then the tool's own resource-dependent check
//! ([`crate::tools::Tool::check_resource`]) with the arguments, then the handler. Two entry
//! points, and no flag between them:
//! - [`authorize`] runs everything before the handler, with the arguments: what both the direct
//!   tool path and `invoke_tool` call, so a hidden tool never becomes usable by naming it;
//! - [`probe`] is the T2 probe: a synthetic request with no arguments at all, stopped at the
//!   cut. It has no way to reach the resource check or the handler, so nothing a model or
//!   caller writes can switch probe mode on.
//!
//! A policy a called run fails only because of its origin (the request did not come from
//! someone who holds the access the calling agent was granted; see
//! [`crate::visibility::acting_roles`]) is refused in words that say so.
//!
//! This module never runs a tool handler, never writes run state, and does not decide
//! visibility (that is [`crate::visibility`]); it answers "may this use go ahead".

use std::panic::{AssertUnwindSafe, catch_unwind};

use serde_json::Value;

use crate::guard::{GuardContext, GuardVerdict};
use crate::tools::{Tool, ToolError};
use crate::visibility::{
    Anonymity, Auth, Identity, PolicyRef, PolicyRegistry, PolicyResult, ProbeOutcome,
};

/// Who asks, and the policies the agent defines.
#[derive(Clone, Copy)]
pub(crate) struct Access<'a> {
    pub agent: &'a str,
    pub identity: &'a Identity,
    pub registry: &'a PolicyRegistry,
}

/// Why the stages before the cut stopped.
enum Stop {
    Refused(String),
    CannotTell(String),
}

/// The stages before the cut: identity, policies, guards. Never sees arguments.
fn before_cut(
    tool_name: &str,
    tool: &dyn Tool,
    auth: &Auth,
    access: &Access<'_>,
) -> Result<(), Stop> {
    if auth.anonymous == Anonymity::No {
        match access.identity {
            Identity::Present(_) => {}
            Identity::Absent => {
                return Err(Stop::Refused(
                    "this tool needs an identified caller, and this run has none".into(),
                ));
            }
            Identity::Unknown => {
                return Err(Stop::CannotTell(
                    "the caller's identity could not be established".into(),
                ));
            }
        }
    }
    for policy in &auth.policies {
        let result = match access.identity {
            Identity::Present(caller) => access.registry.evaluate(policy, caller),
            Identity::Absent => PolicyResult::Deny,
            Identity::Unknown => PolicyResult::Unknown,
        };
        // When the origin is what stands in the way, the model is told so: it can answer
        // without the tool or say who must ask, instead of retrying. Policy and role names
        // never reach the model.
        let origin_blocks = match access.identity {
            Identity::Present(caller) => access
                .registry
                .blocked_by_origin(policy, caller)
                .then_some(caller),
            Identity::Absent | Identity::Unknown => None,
        };
        match result {
            PolicyResult::Allow => {}
            PolicyResult::Deny => {
                return Err(Stop::Refused(match origin_blocks {
                    Some(caller) => format!(
                        "{} may use this tool only on behalf of a requester who holds the access it needs, and this request came from {}, who does not; answer without this tool, or say that the request must come from someone with that access",
                        caller.principal, caller.origin
                    ),
                    None => "the caller does not satisfy this tool's access policy".into(),
                }));
            }
            PolicyResult::Unknown => {
                return Err(Stop::CannotTell(match origin_blocks {
                    Some(caller) => format!(
                        "who started this request could not be established, and {} may use this tool only on behalf of a requester who holds the access it needs",
                        caller.principal
                    ),
                    None => "the caller's identity could not be established".into(),
                }));
            }
            PolicyResult::NoResult => {
                let deferred = matches!(policy, PolicyRef::Named(name)
                    if access.registry.get(name).is_some_and(|d| d.needs_resource));
                if !deferred {
                    return Err(Stop::Refused(
                        "this tool's access policy is not defined on this host".into(),
                    ));
                }
            }
        }
    }
    let ctx = GuardContext {
        agent: access.agent,
        tool: tool_name,
        caller: access.identity,
    };
    for guard in tool.guards() {
        let verdict = catch_unwind(AssertUnwindSafe(|| guard.check(&ctx))).unwrap_or_else(|_| {
            GuardVerdict::CannotTell(format!("the {} guard failed", guard.kind()))
        });
        match verdict {
            GuardVerdict::Pass => {}
            GuardVerdict::Refuse(message) => return Err(Stop::Refused(message)),
            GuardVerdict::CannotTell(message) => return Err(Stop::CannotTell(message)),
        }
    }
    Ok(())
}

/// T2: a synthetic request with no arguments, through the stages before the cut. A refusal
/// reads `Refused`, reaching the cut `ReachedCut`, a guard that cannot tell (or panics) `Other`.
/// The resource check and the handler are out of reach.
pub(crate) fn probe(
    tool_name: &str,
    tool: &dyn Tool,
    auth: &Auth,
    access: &Access<'_>,
) -> ProbeOutcome {
    match before_cut(tool_name, tool, auth, access) {
        Ok(()) => ProbeOutcome::ReachedCut,
        Err(Stop::Refused(_)) => ProbeOutcome::Refused,
        Err(Stop::CannotTell(_)) => ProbeOutcome::Other,
    }
}

/// The real authorization of one use, with its arguments: the stages before the cut, then the
/// tool's resource-dependent check. A refusal is [`ToolError::Forbidden`].
pub(crate) fn authorize(
    tool_name: &str,
    tool: &dyn Tool,
    auth: &Auth,
    access: &Access<'_>,
    input: &Value,
) -> Result<(), ToolError> {
    match before_cut(tool_name, tool, auth, access) {
        Ok(()) => {}
        Err(Stop::Refused(message)) => return Err(ToolError::Forbidden(message)),
        Err(Stop::CannotTell(message)) => {
            return Err(ToolError::Forbidden(format!(
                "the use could not be authorized: {message}"
            )));
        }
    }
    tool.check_resource(access.identity, input)
        .map_err(ToolError::Forbidden)
}

/// Tells every guard of `tool` that a use passed and its handler runs now.
pub(crate) fn record_use(tool_name: &str, tool: &dyn Tool, access: &Access<'_>) {
    let ctx = GuardContext {
        agent: access.agent,
        tool: tool_name,
        caller: access.identity,
    };
    for guard in tool.guards() {
        guard.record_use(&ctx);
    }
}
