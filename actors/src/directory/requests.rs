//! The supervisor's directory requests, each answered on its own task: the packet, the
//! observation of one peer, a pinned wait and the attention rollup.
//!
//! Every request starts with the scope check of consort-core (the goal the audience may see,
//! or whether it may observe that agent) on this host; a request for an agent of another host
//! then goes over the link, where the owning host checks again with the same rules and the
//! asking agent proven by the link. Nothing here writes a store.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use ractor::RpcReplyPort;
use tracing::warn;

use consort_core::directory::{
    AttentionRollup, Audience, ExcerptSource, HostAnswer, Observation, ObservationLimit, RunFacts,
    ScopeGap, excerpt_detail, may_observe, rollup, rollup_gap,
};

use super::{DirectorySpec, Seat, WaitAnswer, WaitRequest, local_reports, observe_here, wait_here};
use crate::data::DataFolder;
use crate::presence::PresenceBoard;
use crate::routing::{RemoteCalls, RemoteFailure};
use crate::run::now_ms;

/// How long one remote wait request lasts before the asking host asks again (under the link's
/// request timeout).
const REMOTE_WAIT_SLICE: Duration = Duration::from_secs(5);

/// What a host needs to answer directory requests; cheap to clone onto a task.
#[derive(Clone)]
pub(crate) struct DirectoryHost {
    pub spec: Arc<DirectorySpec>,
    pub host: String,
    pub remote: Option<Arc<dyn RemoteCalls>>,
    pub board: PresenceBoard,
    pub data: DataFolder,
    pub epoch_ms: u64,
    /// The host's supervisor (set once it started), for deliveries to this host's agents.
    pub supervisor: Option<ractor::ActorRef<crate::routing::SupervisorMsg>>,
    /// Deliveries to other hosts, journaled until answered.
    pub outbox: super::Outbox,
}

impl DirectoryHost {
    /// The host that serves `agent`, if the fleet places it.
    pub(crate) fn host_of_agent(&self, agent: &str) -> Option<String> {
        self.host_of(agent)
    }

    /// The host that serves `agent`, if the fleet places it.
    fn host_of(&self, agent: &str) -> Option<String> {
        if self.board.seat(agent).is_some() {
            Some(self.host.clone())
        } else {
            self.spec.placement.get(agent).cloned()
        }
    }

    /// Who asks, as the owning host sends it over the link: an agent's name, or `None` for an
    /// operator.
    fn asker(audience: &Audience) -> Option<Option<String>> {
        match audience {
            Audience::Agent(agent) => Some(Some(agent.clone())),
            Audience::Operator => Some(None),
            Audience::Principal(_) | Audience::Unidentified => None,
        }
    }

    /// The directory packet of `goal` for `audience`.
    pub(crate) async fn packet(
        self,
        audience: Audience,
        goal: Option<String>,
    ) -> consort_core::directory::DirectoryPacket {
        let plan = match self
            .spec
            .plan(&self.host, &audience, goal.as_deref(), now_ms())
        {
            Ok(plan) => plan,
            Err(gap) => return *gap,
        };
        let local = plan
            .by_host
            .get(&self.host)
            .map(|agents| HostAnswer::Answered {
                host: self.host.clone(),
                observed_at_ms: now_ms(),
                reports: local_reports(agents, |a| self.board.seat(a), &self.board),
            });
        super::gather(
            plan,
            &self.host,
            local,
            self.remote,
            self.spec.presence_deadline,
        )
        .await
    }

    /// Observes `agent` (and `run`) for `audience`; `full_readers` are the peers the agent's
    /// agent.yaml lets read its runs in full, when it is served here.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn observe(
        self,
        audience: Audience,
        agent: String,
        run: Option<consort_core::RunId>,
        source: ExcerptSource,
        lines: usize,
        full_readers: Vec<String>,
    ) -> Observation {
        if let Err(gap) = may_observe(&self.spec.goal_list(), &audience, &agent) {
            return Observation::gap(&agent, gap);
        }
        let Some(host) = self.host_of(&agent) else {
            // Only an operator gets here for an agent the fleet does not place.
            let mut observation = Observation::empty(&agent, "");
            observation.limitations.push(ObservationLimit::UnknownAgent);
            return observation;
        };
        if host == self.host {
            let Some((_, incarnation)) = self.board.seat(&agent) else {
                return Observation::gap(&agent, ScopeGap::AudienceNotAuthorized);
            };
            let seat = Seat {
                host: self.host.clone(),
                epoch_ms: self.epoch_ms,
                incarnation,
                work: self.board.work(&agent),
                full_readers,
            };
            return observe_here(self.data, seat, audience, agent, run, source, lines).await;
        }
        let (Some(remote), Some(asker)) = (self.remote.clone(), Self::asker(&audience)) else {
            return unreachable_observation(&agent, &host);
        };
        match remote
            .observe(host.clone(), asker, agent.clone(), run, source, lines)
            .await
        {
            Ok(observation) => observation,
            Err(RemoteFailure::Refused(detail)) => {
                warn!(peer_host = %host, %detail, "observe: the agent's host refused");
                let mut observation = Observation::empty(&agent, &host);
                observation
                    .limitations
                    .push(ObservationLimit::HostRefused { host });
                observation
            }
            Err(RemoteFailure::Unreachable(detail)) => {
                warn!(peer_host = %host, %detail, "observe: the agent's host did not answer");
                unreachable_observation(&agent, &host)
            }
        }
    }

    /// Waits, pinned, on a run for `audience`, at most `timeout`; `full_readers` are the peers
    /// the agent's agent.yaml lets read its runs in full, when it is served here.
    pub(crate) async fn wait(
        self,
        audience: Audience,
        request: WaitRequest,
        (timeout, full_readers): (Duration, Vec<String>),
    ) -> Result<WaitAnswer, ScopeGap> {
        may_observe(&self.spec.goal_list(), &audience, &request.agent)?;
        let Some(host) = self.host_of(&request.agent) else {
            return Ok(WaitAnswer {
                pin: pin_of(&request),
                outcome: consort_core::directory::WaitOutcome::NotRunning,
            });
        };
        if host == self.host {
            self.may_wait_on(&audience, &request, &full_readers).await?;
            return Ok(wait_here(self.data, self.board, request, timeout).await);
        }
        let (Some(remote), Some(asker)) = (self.remote.clone(), Self::asker(&audience)) else {
            return Ok(WaitAnswer {
                pin: pin_of(&request),
                outcome: consort_core::directory::WaitOutcome::Unreachable,
            });
        };
        let deadline = tokio::time::Instant::now() + timeout.min(super::MAX_WAIT);
        let mut request = request;
        // The last slice's answer, or `None` when the last attempt did not reach the host: a
        // wait whose time runs out while the host is out of reach ends as unreachable.
        let mut last: Option<WaitAnswer> = None;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                return Ok(last.unwrap_or(WaitAnswer {
                    pin: pin_of(&request),
                    outcome: consort_core::directory::WaitOutcome::Unreachable,
                }));
            }
            let slice = left.min(REMOTE_WAIT_SLICE);
            match remote
                .wait_run(host.clone(), asker.clone(), request.clone(), slice)
                .await
            {
                Ok(Ok(answer)) => {
                    let timed_out = matches!(
                        answer.outcome,
                        consort_core::directory::WaitOutcome::Timeout { .. }
                    );
                    if !timed_out {
                        return Ok(answer);
                    }
                    // Resolved once: the next slice stays pinned to the same occupant.
                    request.incarnation = Some(answer.pin.incarnation.clone());
                    last = Some(answer);
                }
                Ok(Err(gap)) => return Err(gap),
                Err(detail) => {
                    warn!(peer_host = %host, %detail, "wait: the agent's host did not answer; trying again until the wait's time runs out");
                    last = None;
                    tokio::time::sleep(Duration::from_millis(200).min(left)).await;
                }
            }
        }
    }

    /// A wait on another agent's run needs an excerpt right on it (`excerpt_detail`): the
    /// placer, the owner, a reader its agent.yaml names, or an operator.
    async fn may_wait_on(
        &self,
        audience: &Audience,
        request: &WaitRequest,
        full_readers: &[String],
    ) -> Result<(), ScopeGap> {
        let (data, agent, run) = (
            self.data.clone(),
            request.agent.clone(),
            request.run.clone(),
        );
        let found = tokio::task::spawn_blocking(move || data.run_of(&agent, &run))
            .await
            .ok()
            .and_then(Result::ok)
            .flatten();
        match found {
            // An unknown run is the wait's own typed outcome.
            None => Ok(()),
            Some((record, seq)) => {
                let facts = RunFacts {
                    run: record.id.clone(),
                    agent: record.agent.clone(),
                    status: record.status,
                    parent_agent: record.parent_agent.clone(),
                    hop_depth: record.hop_depth,
                    created_at_ms: record.created_at_ms,
                    settled_at_ms: record.settled_at_ms,
                    seq,
                };
                excerpt_detail(audience, &facts, full_readers)
                    .map(|_| ())
                    .ok_or(ScopeGap::AudienceNotAuthorized)
            }
        }
    }

    /// The attention rollup of `goal` for `audience`.
    pub(crate) async fn attention(
        self,
        audience: Audience,
        goal: Option<String>,
    ) -> AttentionRollup {
        let now = now_ms();
        let plan = match self
            .spec
            .plan_rollup(&self.host, &audience, goal.as_deref(), now)
        {
            Ok(plan) => plan,
            Err(gap) => return rollup_gap(gap, now),
        };
        let local = plan
            .by_host
            .get(&self.host)
            .map(|agents| HostAnswer::Answered {
                host: self.host.clone(),
                observed_at_ms: now,
                reports: local_reports(agents, |a| self.board.seat(a), &self.board),
            });
        let answers = super::ask_hosts(
            &plan,
            &self.host,
            local,
            self.remote.clone(),
            self.spec.presence_deadline,
        )
        .await;
        let threshold =
            u64::try_from(self.spec.no_advancement_after.as_millis()).unwrap_or(u64::MAX);
        rollup(
            &plan.request.goal,
            now,
            &plan.registered,
            &answers,
            threshold,
        )
    }
}

fn pin_of(request: &WaitRequest) -> consort_core::directory::WaitPin {
    consort_core::directory::WaitPin {
        agent: request.agent.clone(),
        run: request.run.clone(),
        incarnation: request.incarnation.clone().unwrap_or_default(),
        after_seq: request.after_seq,
        until: request.until,
    }
}

fn unreachable_observation(agent: &str, host: &str) -> Observation {
    let mut observation = Observation::empty(agent, host);
    observation
        .limitations
        .push(ObservationLimit::HostUnreachable {
            host: host.to_owned(),
        });
    observation
}

/// Answers `reply` with what `task` yields, on its own task.
pub(crate) fn answer_on_task<T: Send + 'static>(
    reply: RpcReplyPort<T>,
    task: impl Future<Output = T> + Send + 'static,
) {
    tokio::spawn(async move {
        let value = task.await;
        if reply.send(value).is_err() {
            tracing::debug!("a directory asker stopped waiting");
        }
    });
}
