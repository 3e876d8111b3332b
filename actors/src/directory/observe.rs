//! Observing one of this host's agents: the typed facts from its store and the board, and an
//! excerpt only where, and as far as, consort-core says the audience may read one
//! ([`excerpt_detail`]: the kinds and times of a run's events for the agent that placed it, the
//! whole log for an operator, the run's agent and the readers its agent.yaml names).

use consort_core::RunId;
use consort_core::directory::{Audience, observe::OBSERVATION_SCHEMA};
use consort_core::directory::{
    ExcerptBound, ExcerptDetail, ExcerptSource, Observation, ObservationLimit, RunFacts, WorkState,
    cut_excerpt, excerpt_detail,
};

use crate::data::DataFolder;
use crate::run::RunRecord;

/// What this host knows of the agent before reading its store.
pub(crate) struct Seat {
    /// This host's name.
    pub host: String,
    /// When this host started, Unix milliseconds.
    pub epoch_ms: u64,
    /// Who holds the agent's seat.
    pub incarnation: String,
    /// Its work from the board.
    pub work: WorkState,
    /// The peers its agent.yaml lets read its runs in full (`agents.show_runs_to`).
    pub full_readers: Vec<String>,
}

/// The observation of `agent` (served here, as `seat` says) for `audience`; reads the store
/// off the async workers.
pub(crate) async fn observe_here(
    data: DataFolder,
    seat: Seat,
    audience: Audience,
    agent: String,
    run: Option<RunId>,
    source: ExcerptSource,
    lines: usize,
) -> Observation {
    let mut observation = Observation {
        schema_version: OBSERVATION_SCHEMA.to_owned(),
        agent: agent.clone(),
        host: seat.host.clone(),
        incarnation: Some(seat.incarnation),
        work: Some(seat.work),
        run: None,
        excerpt: None,
        limitations: Vec::new(),
        scope_gap: None,
    };
    let Some(run) = run else {
        return observation;
    };
    let read = tokio::task::spawn_blocking(move || {
        let found = data.run_of(&agent, &run)?;
        let events = match &found {
            Some(_) => data.events_of(&agent, &run)?,
            None => Vec::new(),
        };
        Ok::<_, crate::ActorsError>((found, events))
    })
    .await;
    let (found, events) = match read {
        Ok(Ok(read)) => read,
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "observe: the run could not be read");
            observation
                .limitations
                .push(ObservationLimit::RunUnreadable);
            return observation;
        }
        Err(e) => {
            tracing::warn!(error = %e, "observe: the read task failed");
            observation
                .limitations
                .push(ObservationLimit::RunUnreadable);
            return observation;
        }
    };
    let Some((record, seq)) = found else {
        observation.limitations.push(ObservationLimit::RunNotFound);
        return observation;
    };
    let facts = run_facts(&record, seq);
    if facts.created_at_ms < seat.epoch_ms {
        observation
            .limitations
            .push(ObservationLimit::HostRestartedSince {
                host_started_at_ms: seat.epoch_ms,
            });
    }
    let Some(detail) = excerpt_detail(&audience, &facts, &seat.full_readers) else {
        observation
            .limitations
            .push(ObservationLimit::ExcerptNotPermitted);
        observation.run = Some(facts);
        return observation;
    };
    let lines_of = match source {
        ExcerptSource::Events => events
            .iter()
            .map(|e| {
                let at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(e.at_ms);
                let at = humantime::format_rfc3339_millis(at).to_string();
                // What an event carries is not even encoded for an audience that may not read it.
                let data = match detail {
                    ExcerptDetail::Full => e.data().to_string(),
                    ExcerptDetail::KindsOnly => String::new(),
                };
                detail.event_line(e.seq, e.kind(), &at, &data)
            })
            .collect(),
        ExcerptSource::Output => match (&record.output, &record.error) {
            (Some(text), _) | (None, Some(text)) => text.lines().map(str::to_owned).collect(),
            (None, None) => {
                observation.limitations.push(ObservationLimit::NoOutputYet);
                Vec::new()
            }
        },
    };
    let (excerpt, limits) = cut_excerpt(source, &lines_of, ExcerptBound::lines(lines));
    observation.excerpt = Some(excerpt);
    observation.limitations.extend(limits);
    observation.limitations.extend(detail.limit(source));
    observation.run = Some(facts);
    observation
}

fn run_facts(record: &RunRecord, seq: u64) -> RunFacts {
    RunFacts {
        run: record.id.clone(),
        agent: record.agent.clone(),
        status: record.status,
        parent_agent: record.parent_agent.clone(),
        hop_depth: record.hop_depth,
        created_at_ms: record.created_at_ms,
        settled_at_ms: record.settled_at_ms,
        seq,
    }
}
