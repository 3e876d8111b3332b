//! Bounded observation of a peer: typed state first, a bounded and labelled excerpt second.
//!
//! An observation answers "what is this agent (or this run of it) doing" with the facts its
//! host stored: the agent's work state and the run's status, depth, times and state-change
//! sequence. Only a run the caller itself placed (or any run, for an operator) may add an
//! excerpt: the last lines of its event log or the first lines of its output, with the source,
//! the bound and the advisory label spelled out, and every cut declared as a limit.
//!
//! Output only: a caller gets its callee's answer and nothing of how it was reached. So the
//! excerpt a caller may read of a run it placed on another agent shows each event's kind and
//! time, never what it carries (what the run's tools were given and returned, its model turns,
//! values its env bound), and says so ([`ObservationLimit::ContentWithheld`]); its output is the
//! answer its call returns anyway. The full log is for an operator, the run's own agent, and the
//! peers that agent's agent.yaml names in `agents.show_runs_to` ([`excerpt_detail`]). An excerpt is never evidence; a caller that needs the whole answer asks
//! the peer for a durable one. Scope is the directory's: a target outside the caller's goals is
//! a scope gap, never "no such agent".

use serde::{Deserialize, Serialize};

use super::presence::WorkState;
use super::scope::{Audience, Goal, ScopeGap};
use crate::{RunId, RunStatus};

/// The schema tag of an observation.
pub const OBSERVATION_SCHEMA: &str = "consort_peer_observation_v0";

/// The most excerpt lines a caller may ask for.
pub const MAX_EXCERPT_LINES: usize = 100;
/// The most bytes of one excerpt line.
pub const MAX_LINE_BYTES: usize = 400;

/// Where an excerpt comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExcerptSource {
    /// The last entries of the run's event log, one line each.
    Events,
    /// The first lines of the run's output (once it settled).
    Output,
}

/// The bound an excerpt was cut to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExcerptBound {
    /// The most lines.
    pub max_lines: usize,
    /// The most bytes of one line.
    pub max_line_bytes: usize,
}

impl ExcerptBound {
    /// A bound of `lines` lines (at least 1, at most [`MAX_EXCERPT_LINES`]) of at most
    /// [`MAX_LINE_BYTES`] bytes each.
    pub fn lines(lines: usize) -> Self {
        Self {
            max_lines: lines.clamp(1, MAX_EXCERPT_LINES),
            max_line_bytes: MAX_LINE_BYTES,
        }
    }
}

/// A run's typed state, as its host stored it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunFacts {
    /// The run.
    pub run: RunId,
    /// Its agent.
    pub agent: String,
    /// Its status.
    pub status: RunStatus,
    /// The agent that placed it, for a delegated run.
    pub parent_agent: Option<String>,
    /// Hops from the root run.
    pub hop_depth: u32,
    /// When it was stored, Unix milliseconds (its host's clock).
    pub created_at_ms: u64,
    /// When it settled.
    pub settled_at_ms: Option<u64>,
    /// Its state-change sequence (the last sequence number of its log).
    pub seq: u64,
}

/// A cut or a gap an observation declares instead of hiding.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "code", rename_all = "snake_case")]
#[non_exhaustive]
pub enum ObservationLimit {
    /// An excerpt is advisory: it is not evidence of progress or of an outcome.
    ExcerptIsAdvisory,
    /// Only the last `shown` of `total` log entries (or first lines of the output) are shown.
    LogTruncated {
        /// Lines shown.
        shown: usize,
        /// Lines there were.
        total: usize,
    },
    /// Some lines were cut at the line bound.
    LinesCut {
        /// How many.
        lines: usize,
    },
    /// The run began before its host last started: what the earlier process held in memory
    /// only (a model turn in progress) is gone; the log is whole.
    HostRestartedSince {
        /// When the host last started, Unix milliseconds.
        host_started_at_ms: u64,
    },
    /// The caller did not place this run: it sees the typed state only.
    ExcerptNotPermitted,
    /// The excerpt shows each event's kind and time, not what it carries: these stay with the
    /// run's agent (an operator, the agent itself and the peers its agent.yaml names in
    /// `agents.show_runs_to` read them).
    ContentWithheld {
        /// What was left out: `tool_inputs`, `tool_results`, `model_turns`, `env_values`.
        left_out: Vec<String>,
    },
    /// The run has not settled: it has no output yet.
    NoOutputYet,
    /// The agent stored no run with that id.
    RunNotFound,
    /// The run's store could not be read just now.
    RunUnreadable,
    /// The agent's host could not be reached: nothing but its name and host is known.
    HostUnreachable {
        /// The host.
        host: String,
    },
    /// The agent's host refused to answer (or did not answer in time).
    HostRefused {
        /// The host.
        host: String,
    },
    /// No agent of that name is placed in the fleet (only an operator is told).
    UnknownAgent,
}

/// An excerpt of a run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Excerpt {
    /// Where the lines come from.
    pub source: ExcerptSource,
    /// The bound they were cut to.
    pub bound: ExcerptBound,
    /// Always `advisory`.
    pub label: String,
    /// The lines.
    pub lines: Vec<String>,
}

/// What a caller may see of one peer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Observation {
    /// [`OBSERVATION_SCHEMA`].
    pub schema_version: String,
    /// The agent observed.
    pub agent: String,
    /// Its host.
    pub host: String,
    /// Who holds its seat, when its host said.
    pub incarnation: Option<String>,
    /// Its work state, when its host said.
    pub work: Option<WorkState>,
    /// The run asked about, when one was named and found.
    pub run: Option<RunFacts>,
    /// A bounded excerpt of that run, when the caller may see one.
    pub excerpt: Option<Excerpt>,
    /// What this observation cannot show.
    pub limitations: Vec<ObservationLimit>,
    /// Why there is nothing, when the caller may not observe this agent.
    pub scope_gap: Option<ScopeGap>,
}

impl Observation {
    /// An observation of `agent` on `host` that knows nothing more yet.
    pub fn empty(agent: &str, host: &str) -> Self {
        Self {
            schema_version: OBSERVATION_SCHEMA.to_owned(),
            agent: agent.chars().take(80).collect(),
            host: host.to_owned(),
            incarnation: None,
            work: None,
            run: None,
            excerpt: None,
            limitations: Vec::new(),
            scope_gap: None,
        }
    }

    /// The observation of a caller that may not see `agent`.
    pub fn gap(agent: &str, gap: ScopeGap) -> Self {
        Self {
            schema_version: OBSERVATION_SCHEMA.to_owned(),
            agent: agent.chars().take(80).collect(),
            host: String::new(),
            incarnation: None,
            work: None,
            run: None,
            excerpt: None,
            limitations: Vec::new(),
            scope_gap: Some(gap),
        }
    }
}

/// Whether `audience` may observe `agent`: an operator may observe any agent of the fleet, an
/// agent itself and the members of its goals. Anything else is a scope gap, with the same
/// answer whether or not the target exists.
pub fn may_observe(goals: &[Goal<'_>], audience: &Audience, agent: &str) -> Result<(), ScopeGap> {
    match audience {
        Audience::Operator => Ok(()),
        Audience::Unidentified => Err(ScopeGap::Unknown),
        Audience::Principal(_) => Err(ScopeGap::AudienceNotAuthorized),
        Audience::Agent(me) if me == agent => Ok(()),
        Audience::Agent(me) => goals
            .iter()
            .any(|g| g.has(me) && g.has(agent))
            .then_some(())
            .ok_or(ScopeGap::AudienceNotAuthorized),
    }
}

/// How much of a run an excerpt may show its audience.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExcerptDetail {
    /// Every event with what it carries, and the output.
    Full,
    /// Each event's kind and time, and the output (the answer the call returns anyway).
    KindsOnly,
}

impl ExcerptDetail {
    /// What a [`ExcerptDetail::KindsOnly`] excerpt of the event log leaves out.
    pub const WITHHELD: [&'static str; 4] =
        ["tool_inputs", "tool_results", "model_turns", "env_values"];

    /// The limit a [`ExcerptDetail::KindsOnly`] excerpt of `source` declares, if any (an
    /// output excerpt withholds nothing: it is the answer).
    pub fn limit(self, source: ExcerptSource) -> Option<ObservationLimit> {
        (self == Self::KindsOnly && source == ExcerptSource::Events).then(|| {
            ObservationLimit::ContentWithheld {
                left_out: Self::WITHHELD.iter().map(|s| (*s).to_owned()).collect(),
            }
        })
    }

    /// One event of the log as this detail shows it: `#seq kind: data` in full, `#seq kind at
    /// time` otherwise (`at` is the event's time as the host writes it).
    pub fn event_line(self, seq: u64, kind: &str, at: &str, data: &str) -> String {
        match self {
            Self::Full => format!("#{seq} {kind}: {data}"),
            Self::KindsOnly => format!("#{seq} {kind} at {at}"),
        }
    }
}

/// What `audience` may read of `run`, whose agent names `full_readers` in its agent.yaml's
/// `agents.show_runs_to`: an operator, the run's own agent and those readers read it in full;
/// the agent that placed it reads the kinds and times of its events and its output; anyone else
/// reads no excerpt (`None`: the typed state only).
pub fn excerpt_detail(
    audience: &Audience,
    run: &RunFacts,
    full_readers: &[String],
) -> Option<ExcerptDetail> {
    match audience {
        Audience::Operator => Some(ExcerptDetail::Full),
        Audience::Agent(me) if &run.agent == me || full_readers.contains(me) => {
            Some(ExcerptDetail::Full)
        }
        Audience::Agent(me) if run.parent_agent.as_deref() == Some(me) => {
            Some(ExcerptDetail::KindsOnly)
        }
        Audience::Agent(_) | Audience::Principal(_) | Audience::Unidentified => None,
    }
}

/// Cuts `lines` (oldest first) to `bound`: for the event log the *last* lines, for the output
/// the *first*, each line to the byte bound; returns the excerpt and the limits it declares.
pub fn cut_excerpt(
    source: ExcerptSource,
    lines: &[String],
    bound: ExcerptBound,
) -> (Excerpt, Vec<ObservationLimit>) {
    let total = lines.len();
    let chosen: &[String] = match source {
        ExcerptSource::Events => &lines[total.saturating_sub(bound.max_lines)..],
        ExcerptSource::Output => &lines[..total.min(bound.max_lines)],
    };
    let mut cut = 0usize;
    let shown: Vec<String> = chosen
        .iter()
        .map(|line| {
            if line.len() > bound.max_line_bytes {
                cut += 1;
                let mut end = bound.max_line_bytes;
                while !line.is_char_boundary(end) {
                    end -= 1;
                }
                format!("{}…", &line[..end])
            } else {
                line.clone()
            }
        })
        .collect();
    let mut limits = vec![ObservationLimit::ExcerptIsAdvisory];
    if shown.len() < total {
        limits.push(ObservationLimit::LogTruncated {
            shown: shown.len(),
            total,
        });
    }
    if cut > 0 {
        limits.push(ObservationLimit::LinesCut { lines: cut });
    }
    (
        Excerpt {
            source,
            bound,
            label: "advisory".to_owned(),
            lines: shown,
        },
        limits,
    )
}

#[cfg(test)]
mod tests;
