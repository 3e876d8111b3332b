//! Who may do what through a host's HTTP API: one pure decision over the requester, what the
//! host allows callers without a token, and the action.
//!
//! The rules, in one place:
//!
//! | requester                       | start runs | read a run, its tree  | list runs, refusals | approve / deny              | cancel         | reload, agents | fleet view | metrics |
//! |---------------------------------|------------|-----------------------|---------------------|-----------------------------|----------------|----------------|------------|---------|
//! | local operator (no auth file)   | yes        | any                   | all                 | any gate                    | any run        | yes / yes      | yes        | yes     |
//! | operator (`operator` role)      | yes        | any                   | all                 | any gate (four eyes below)  | any run        | yes / yes      | yes        | yes     |
//! | principal (any other token)     | yes        | its own               | its own             | its own (four eyes below)   | its own        | no / yes       | no (403)   | 403     |
//! | anonymous, `anonymous: runs`    | yes        | anonymous ones        | anonymous           | no                          | no (403)       | no / yes       | no (401)   | 401     |
//! | anonymous, `anonymous: refuse`  | 401        | 401                   | 401                 | 401                         | 401            | 401            | 401        | 401     |
//! | hook could not answer           | as anonymous for starting; 503 for anything that reads, decides or cancels                                                     |
//!
//! A run's call tree is read under the rule of its root run: whoever may read the root sees
//! the tree's shape and each run's agent, status and cost (never another run's input or
//! output). The fleet view (hosts, links, agents) names the fleet's hosts and link errors,
//! which are the operator's business only; metrics count over every principal's runs, so they
//! are the operators' too.
//!
//! A run belongs to the principal it acts for (`api:<name>`, `anonymous`, ...). A requester
//! cannot decide a gate of a run it started unless the gate allows it (`approval: requester`):
//! four eyes. That rule is the gate's, applied by consort-core where the gate is decided
//! (`step::gate`, refusal `four_eyes`, answered 403 `forbidden`), so the check and the decision
//! are one step on the gate actually decided; this module only says who may reach a run's
//! gates. A host without an auth file has a single local operator, who may decide any gate.
//! A run may be canceled by the principal it acts for or by an operator; anonymous callers
//! share one principal, so none of them may stop another's anonymous run.
//! A run the requester may not read answers exactly like a run that does not exist, so run
//! ids of other principals cannot be probed.
//!
//! This module decides only: it reads no token (see [`crate::HostAuth`]) and touches no store.

use consort_config::AnonymousAccess;

/// Who is asking, as the host established it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Requester {
    /// A host without an auth file, which listens on loopback only: whoever reaches it is its
    /// one operator.
    LocalOperator,
    /// A token holding the `operator` role.
    Operator {
        /// The token's principal, `api:<name>`.
        principal: String,
    },
    /// A token without the `operator` role (or a principal an identity hook named).
    Principal {
        /// `api:<name>`.
        principal: String,
    },
    /// No token, or one that neither the auth file nor the identity hook knows.
    Anonymous,
    /// The identity hook could not answer about the token.
    Unverified,
}

impl Requester {
    /// The name a decision it makes is recorded under.
    pub fn decider(&self) -> &str {
        match self {
            Self::LocalOperator => "operator",
            Self::Operator { principal } | Self::Principal { principal } => principal,
            Self::Anonymous | Self::Unverified => ANONYMOUS,
        }
    }

    /// Whether it is an operator (the local one, or a token with the `operator` role).
    pub fn is_operator(&self) -> bool {
        matches!(self, Self::LocalOperator | Self::Operator { .. })
    }
}

/// What a request wants to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action<'a> {
    /// `POST /runs`.
    StartRun,
    /// Read one run or its events; `owner` is the principal the run acts for.
    ReadRun {
        /// The principal the run acts for.
        owner: &'a str,
    },
    /// List runs (the answer is then narrowed by [`listing_scope`]).
    ListRuns,
    /// Decide a gate of a run. Whether the run's own requester may decide that gate (four
    /// eyes) is the gate's rule, applied where the gate is decided (consort-core's
    /// `step::gate`): here only who may reach the run's gates at all.
    Decide {
        /// The principal the run acts for.
        owner: &'a str,
    },
    /// Cancel a run; `owner` is the principal the run acts for.
    Cancel {
        /// The principal the run acts for.
        owner: &'a str,
    },
    /// Re-read every agent.yaml.
    Reload,
    /// See which agents are served and whether they are up.
    ListAgents,
    /// Read a run's call tree; `owner` is the principal its root run acts for.
    ReadTree {
        /// The principal the root run acts for.
        owner: &'a str,
    },
    /// Count the call refusals in runs (narrowed, like a listing, by [`listing_scope`]).
    ListRefusals,
    /// See the fleet: its hosts, the links to them and this host's agents.
    ViewFleet,
    /// Scrape the host's metrics (`GET /metrics`): counts over every principal's runs, so
    /// for operators only.
    ReadMetrics,
}

/// Why a request is refused; each maps to one HTTP status and code.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Denial {
    /// No usable token on a host that needs one (401).
    Unauthenticated,
    /// The identity hook could not answer; trying again may work (503).
    IdentityUnavailable,
    /// The requester is known and may not do this (403), with the reason in words.
    Forbidden(&'static str),
    /// The run is not the requester's: answered as an unknown run (404).
    NotVisible,
}

/// Which runs a listing shows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Every run.
    All,
    /// Only runs that act for this principal.
    OwnedBy(String),
}

impl Scope {
    /// The principal a listing is narrowed to, if any.
    pub fn owner(&self) -> Option<&str> {
        match self {
            Self::All => None,
            Self::OwnedBy(owner) => Some(owner),
        }
    }

    /// Whether a listing in this scope shows a run that acts for `principal` (what a live
    /// listing checks for each run that changes).
    pub fn shows(&self, principal: &str) -> bool {
        self.owner().is_none_or(|owner| owner == principal)
    }
}

/// The principal anonymous runs act for.
pub const ANONYMOUS: &str = "anonymous";

/// Decides whether `requester` may do `action` on a host whose auth file sets `anonymous`.
pub fn authorize(
    requester: &Requester,
    anonymous: AnonymousAccess,
    action: Action<'_>,
) -> Result<(), Denial> {
    let open = anonymous == AnonymousAccess::Runs;
    match requester {
        Requester::LocalOperator => Ok(()),
        Requester::Operator { .. } => Ok(()),
        Requester::Principal { principal } => match action {
            Action::StartRun | Action::ListRuns | Action::ListAgents | Action::ListRefusals => {
                Ok(())
            }
            Action::ReadRun { owner } | Action::ReadTree { owner } if owner == principal => Ok(()),
            Action::ReadRun { .. } | Action::ReadTree { .. } => Err(Denial::NotVisible),
            Action::Decide { owner } if owner == principal => Ok(()),
            Action::Decide { .. } => Err(Denial::NotVisible),
            Action::Cancel { owner } if owner == principal => Ok(()),
            Action::Cancel { .. } => Err(Denial::NotVisible),
            Action::Reload => Err(Denial::Forbidden("reloading needs the operator role")),
            Action::ViewFleet => Err(Denial::Forbidden("the fleet view needs the operator role")),
            Action::ReadMetrics => Err(Denial::Forbidden("metrics need the operator role")),
        },
        Requester::Anonymous if !open => Err(Denial::Unauthenticated),
        Requester::Anonymous => match action {
            Action::StartRun | Action::ListRuns | Action::ListAgents | Action::ListRefusals => {
                Ok(())
            }
            Action::ReadRun { owner } | Action::ReadTree { owner } if owner == ANONYMOUS => Ok(()),
            Action::Cancel { owner } if owner == ANONYMOUS => Err(Denial::Forbidden(
                "canceling needs a token: callers without one share the anonymous runs, so none may stop another's",
            )),
            Action::ReadRun { .. }
            | Action::ReadTree { .. }
            | Action::Decide { .. }
            | Action::Cancel { .. } => Err(Denial::NotVisible),
            Action::Reload | Action::ViewFleet | Action::ReadMetrics => {
                Err(Denial::Unauthenticated)
            }
        },
        Requester::Unverified => match action {
            Action::StartRun if open => Ok(()),
            _ => Err(Denial::IdentityUnavailable),
        },
    }
}

/// Whether the host knows enough about `requester` to look anything up for it: what every
/// route that reads a run checks before touching a store (the run's owner is known only
/// after).
pub fn identified(requester: &Requester, anonymous: AnonymousAccess) -> Result<(), Denial> {
    match requester {
        Requester::Anonymous if anonymous == AnonymousAccess::Refuse => {
            Err(Denial::Unauthenticated)
        }
        Requester::Unverified => Err(Denial::IdentityUnavailable),
        _ => Ok(()),
    }
}

/// The runs a listing by `requester` shows, once [`authorize`] allowed [`Action::ListRuns`].
pub fn listing_scope(requester: &Requester) -> Scope {
    match requester {
        Requester::LocalOperator | Requester::Operator { .. } => Scope::All,
        Requester::Principal { principal } => Scope::OwnedBy(principal.clone()),
        Requester::Anonymous | Requester::Unverified => Scope::OwnedBy(ANONYMOUS.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listing_shows_all_runs_to_an_operator_and_their_own_to_anyone_else() {
        let operator_scope = listing_scope(&operator());
        assert!(operator_scope.shows("api:alice") && operator_scope.shows(ANONYMOUS));
        let alice_scope = listing_scope(&alice());
        assert!(alice_scope.shows("api:alice"));
        assert!(!alice_scope.shows("api:bob") && !alice_scope.shows(ANONYMOUS));
        let anonymous_scope = listing_scope(&Requester::Anonymous);
        assert!(anonymous_scope.shows(ANONYMOUS) && !anonymous_scope.shows("api:alice"));
    }

    const OPEN: AnonymousAccess = AnonymousAccess::Runs;
    const SHUT: AnonymousAccess = AnonymousAccess::Refuse;

    fn operator() -> Requester {
        Requester::Operator {
            principal: "api:ops".into(),
        }
    }

    fn alice() -> Requester {
        Requester::Principal {
            principal: "api:alice".into(),
        }
    }

    fn decide(owner: &str) -> Action<'_> {
        Action::Decide { owner }
    }

    #[test]
    fn the_local_operator_may_do_everything() {
        for action in [
            Action::StartRun,
            Action::ReadRun { owner: "api:bob" },
            Action::ListRuns,
            decide(ANONYMOUS),
            cancel("api:bob"),
            Action::Reload,
            Action::ListAgents,
            Action::ReadTree { owner: "api:bob" },
            Action::ListRefusals,
            Action::ViewFleet,
            Action::ReadMetrics,
        ] {
            for anonymous in [OPEN, SHUT] {
                assert_eq!(
                    authorize(&Requester::LocalOperator, anonymous, action),
                    Ok(())
                );
            }
        }
        assert_eq!(listing_scope(&Requester::LocalOperator), Scope::All);
    }

    #[test]
    fn an_operator_reads_all_and_decides_every_gate_but_its_own() {
        let ops = operator();
        for anonymous in [OPEN, SHUT] {
            assert_eq!(authorize(&ops, anonymous, Action::Reload), Ok(()));
            assert_eq!(authorize(&ops, anonymous, Action::ViewFleet), Ok(()));
            assert_eq!(authorize(&ops, anonymous, Action::ListRefusals), Ok(()));
            assert_eq!(
                authorize(&ops, anonymous, Action::ReadTree { owner: "api:bob" }),
                Ok(())
            );
            assert_eq!(
                authorize(&ops, anonymous, Action::ReadRun { owner: "api:bob" }),
                Ok(())
            );
            assert_eq!(authorize(&ops, anonymous, decide("api:bob")), Ok(()));
            // Its own run's gates too: whether the gate lets its requester decide is the
            // gate's rule (`consort_core::step`), applied where the gate is decided.
            assert_eq!(authorize(&ops, anonymous, decide("api:ops")), Ok(()));
        }
        assert_eq!(listing_scope(&ops), Scope::All);
    }

    #[test]
    fn a_principal_sees_and_controls_only_its_own_runs() {
        let a = alice();
        assert_eq!(authorize(&a, SHUT, Action::StartRun), Ok(()));
        assert_eq!(authorize(&a, SHUT, Action::ListAgents), Ok(()));
        assert_eq!(
            authorize(&a, SHUT, Action::ReadRun { owner: "api:alice" }),
            Ok(())
        );
        assert_eq!(
            authorize(&a, SHUT, Action::ReadRun { owner: "api:bob" }),
            Err(Denial::NotVisible)
        );
        assert_eq!(
            authorize(&a, SHUT, Action::ReadRun { owner: ANONYMOUS }),
            Err(Denial::NotVisible)
        );
        assert_eq!(authorize(&a, SHUT, decide("api:alice")), Ok(()));
        assert_eq!(
            authorize(&a, SHUT, decide("api:bob")),
            Err(Denial::NotVisible)
        );
        assert!(matches!(
            authorize(&a, OPEN, Action::Reload),
            Err(Denial::Forbidden(_))
        ));
        assert_eq!(authorize(&a, SHUT, Action::ListRuns), Ok(()));
        assert_eq!(listing_scope(&a), Scope::OwnedBy("api:alice".into()));
        assert_eq!(authorize(&a, SHUT, Action::ListRefusals), Ok(()));
        assert_eq!(
            authorize(&a, SHUT, Action::ReadTree { owner: "api:alice" }),
            Ok(())
        );
        assert_eq!(
            authorize(&a, SHUT, Action::ReadTree { owner: "api:bob" }),
            Err(Denial::NotVisible)
        );
        assert!(matches!(
            authorize(&a, OPEN, Action::ViewFleet),
            Err(Denial::Forbidden(_))
        ));
    }

    #[test]
    fn anonymous_callers_are_refused_unless_the_host_opens_runs_to_them() {
        let nobody = Requester::Anonymous;
        for action in [
            Action::StartRun,
            Action::ReadRun { owner: ANONYMOUS },
            Action::ListRuns,
            decide(ANONYMOUS),
            cancel(ANONYMOUS),
            Action::Reload,
            Action::ListAgents,
            Action::ReadTree { owner: ANONYMOUS },
            Action::ListRefusals,
            Action::ViewFleet,
            Action::ReadMetrics,
        ] {
            assert_eq!(
                authorize(&nobody, SHUT, action),
                Err(Denial::Unauthenticated)
            );
        }
        assert_eq!(authorize(&nobody, OPEN, Action::StartRun), Ok(()));
        assert_eq!(authorize(&nobody, OPEN, Action::ListRuns), Ok(()));
        assert_eq!(
            authorize(&nobody, OPEN, Action::ReadRun { owner: ANONYMOUS }),
            Ok(())
        );
        assert_eq!(
            authorize(&nobody, OPEN, Action::ReadRun { owner: "api:alice" }),
            Err(Denial::NotVisible)
        );
        assert_eq!(
            authorize(&nobody, OPEN, decide(ANONYMOUS)),
            Err(Denial::NotVisible)
        );
        assert_eq!(
            authorize(&nobody, OPEN, Action::Reload),
            Err(Denial::Unauthenticated)
        );
        assert_eq!(listing_scope(&nobody), Scope::OwnedBy(ANONYMOUS.into()));
        assert_eq!(authorize(&nobody, OPEN, Action::ListRefusals), Ok(()));
        assert_eq!(
            authorize(&nobody, OPEN, Action::ReadTree { owner: ANONYMOUS }),
            Ok(())
        );
        assert_eq!(
            authorize(&nobody, OPEN, Action::ReadTree { owner: "api:alice" }),
            Err(Denial::NotVisible)
        );
        assert_eq!(
            authorize(&nobody, OPEN, Action::ViewFleet),
            Err(Denial::Unauthenticated)
        );
    }

    fn cancel(owner: &str) -> Action<'_> {
        Action::Cancel { owner }
    }

    #[test]
    fn a_run_is_canceled_by_its_own_principal_or_an_operator() {
        for anonymous in [OPEN, SHUT] {
            for owner in ["api:alice", "api:bob", "api:ops", ANONYMOUS, "agent:cmo"] {
                assert_eq!(
                    authorize(&Requester::LocalOperator, anonymous, cancel(owner)),
                    Ok(())
                );
                // An operator may stop its own runs too: canceling needs no second pair of eyes.
                assert_eq!(authorize(&operator(), anonymous, cancel(owner)), Ok(()));
                assert_eq!(
                    authorize(&Requester::Unverified, anonymous, cancel(owner)),
                    Err(Denial::IdentityUnavailable)
                );
            }
            assert_eq!(authorize(&alice(), anonymous, cancel("api:alice")), Ok(()));
            // Another's run (a delegated run's principal is its caller agent) is not visible.
            for owner in ["api:bob", "api:ops", ANONYMOUS, "agent:cmo"] {
                assert_eq!(
                    authorize(&alice(), anonymous, cancel(owner)),
                    Err(Denial::NotVisible),
                    "{owner}"
                );
            }
            assert_eq!(
                authorize(&Requester::Anonymous, SHUT, cancel(ANONYMOUS)),
                Err(Denial::Unauthenticated)
            );
        }
        // Anonymous callers see the anonymous runs but share them: none may stop another's.
        assert!(matches!(
            authorize(&Requester::Anonymous, OPEN, cancel(ANONYMOUS)),
            Err(Denial::Forbidden(_))
        ));
        assert_eq!(
            authorize(&Requester::Anonymous, OPEN, cancel("api:alice")),
            Err(Denial::NotVisible)
        );
    }

    #[test]
    fn only_operators_read_the_metrics() {
        for anonymous in [OPEN, SHUT] {
            assert_eq!(
                authorize(&Requester::LocalOperator, anonymous, Action::ReadMetrics),
                Ok(())
            );
            assert_eq!(
                authorize(&operator(), anonymous, Action::ReadMetrics),
                Ok(())
            );
            assert!(matches!(
                authorize(&alice(), anonymous, Action::ReadMetrics),
                Err(Denial::Forbidden(_))
            ));
            // Even where anonymous callers may start runs, the metrics ask for a token.
            assert_eq!(
                authorize(&Requester::Anonymous, anonymous, Action::ReadMetrics),
                Err(Denial::Unauthenticated)
            );
            assert_eq!(
                authorize(&Requester::Unverified, anonymous, Action::ReadMetrics),
                Err(Denial::IdentityUnavailable)
            );
        }
    }

    #[test]
    fn only_an_unknown_caller_or_a_refused_anonymous_one_is_unidentified() {
        for anonymous in [OPEN, SHUT] {
            assert_eq!(identified(&Requester::LocalOperator, anonymous), Ok(()));
            assert_eq!(identified(&operator(), anonymous), Ok(()));
            assert_eq!(identified(&alice(), anonymous), Ok(()));
            assert_eq!(
                identified(&Requester::Unverified, anonymous),
                Err(Denial::IdentityUnavailable)
            );
        }
        assert_eq!(identified(&Requester::Anonymous, OPEN), Ok(()));
        assert_eq!(
            identified(&Requester::Anonymous, SHUT),
            Err(Denial::Unauthenticated)
        );
    }

    #[test]
    fn an_unverified_caller_may_only_start_runs_where_anonymous_ones_may() {
        let unsure = Requester::Unverified;
        assert_eq!(authorize(&unsure, OPEN, Action::StartRun), Ok(()));
        assert_eq!(
            authorize(&unsure, SHUT, Action::StartRun),
            Err(Denial::IdentityUnavailable)
        );
        for anonymous in [OPEN, SHUT] {
            for action in [
                Action::ReadRun { owner: ANONYMOUS },
                Action::ListRuns,
                decide(ANONYMOUS),
                cancel(ANONYMOUS),
                Action::Reload,
                Action::ListAgents,
                Action::ReadTree { owner: ANONYMOUS },
                Action::ListRefusals,
                Action::ViewFleet,
                Action::ReadMetrics,
            ] {
                assert_eq!(
                    authorize(&unsure, anonymous, action),
                    Err(Denial::IdentityUnavailable)
                );
            }
        }
    }
}
