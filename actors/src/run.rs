//! What a run is, as plain data: its status, channel, cost roll-up and event log entries.
//!
//! These types are shared by the store (which persists them), the agent actor (which moves a
//! run through its statuses) and every surface that shows runs. They carry no behaviour beyond
//! conversions to and from their stored text forms.

use serde::{Deserialize, Serialize};

use consort_net::RunId;

use crate::visibility::{Caller, Identity, Principal};

/// Where a run is in its life. `Succeeded` and `Failed` are final.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// Accepted and stored, not yet picked up.
    Queued,
    /// The agent is working on it (a model turn or tools).
    Running,
    /// Waiting for replies from peers it called.
    Waiting,
    /// Parked until an operator approves or denies a gated tool.
    Blocked,
    Succeeded,
    Failed,
}

impl RunStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Queued => "queued",
            RunStatus::Running => "running",
            RunStatus::Waiting => "waiting",
            RunStatus::Blocked => "blocked",
            RunStatus::Succeeded => "succeeded",
            RunStatus::Failed => "failed",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "queued" => RunStatus::Queued,
            "running" => RunStatus::Running,
            "waiting" => RunStatus::Waiting,
            "blocked" => RunStatus::Blocked,
            "succeeded" => RunStatus::Succeeded,
            "failed" => RunStatus::Failed,
            _ => return None,
        })
    }

    /// True once the run can no longer change.
    pub fn is_settled(self) -> bool {
        matches!(self, RunStatus::Succeeded | RunStatus::Failed)
    }
}

impl std::fmt::Display for RunStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Who started a run: `api`, `cli`, or `agent:<caller>` for a delegated call.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Channel {
    Api,
    Cli,
    Agent(String),
}

impl Channel {
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "api" => Some(Channel::Api),
            "cli" => Some(Channel::Cli),
            other => other
                .strip_prefix("agent:")
                .filter(|name| !name.is_empty())
                .map(|name| Channel::Agent(name.to_owned())),
        }
    }
}

impl std::fmt::Display for Channel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Channel::Api => f.write_str("api"),
            Channel::Cli => f.write_str("cli"),
            Channel::Agent(name) => write!(f, "agent:{name}"),
        }
    }
}

impl Serialize for Channel {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Channel {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Channel::parse(&text)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown channel `{text}`")))
    }
}

/// A run's cost roll-up. Tokens are zero when the model does not report them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cost {
    pub model_turns: u64,
    pub tool_calls: u64,
    pub calls_placed: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// From creation to settlement (or to now, for an unsettled run, when read).
    pub wall_ms: u64,
}

/// One run as stored.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    pub id: RunId,
    pub agent: String,
    pub status: RunStatus,
    pub channel: Channel,
    pub parent_run: Option<RunId>,
    /// The agent that placed this run, for a delegated run.
    pub parent_agent: Option<String>,
    /// The caller's tool-use id, for a delegated run.
    pub tool_use_id: Option<String>,
    /// Hops from the root run: 0 for a run started by the API or CLI.
    pub hop_depth: u32,
    pub input: String,
    pub output: Option<String>,
    pub error: Option<String>,
    /// Unix milliseconds.
    pub created_at_ms: u64,
    pub settled_at_ms: Option<u64>,
    pub cost: Cost,
    /// Who the run acts for: `api:<token-name>`, `agent:<caller>` (from the verified chain),
    /// `anonymous` (no identity) or `unknown` (an identity hook could not answer).
    #[serde(default = "anonymous")]
    pub principal: String,
    /// The roles the host's token config gave an `api:` principal when the run started. A peer
    /// run's roles are read from the callee's current `grants` instead.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub roles: Vec<String>,
}

fn anonymous() -> String {
    "anonymous".to_owned()
}

/// The stored text of an identity: the principal, `anonymous` or `unknown`, and its roles.
pub fn identity_text(identity: &Identity) -> (String, Vec<String>) {
    match identity {
        Identity::Present(caller) => (
            caller.principal.to_string(),
            caller.roles.iter().cloned().collect(),
        ),
        Identity::Absent => (anonymous(), Vec::new()),
        Identity::Unknown => ("unknown".to_owned(), Vec::new()),
    }
}

impl RunRecord {
    /// The run's identity as stored. Text that is not a principal reads as unknown: nothing is
    /// invented.
    pub fn identity(&self) -> Identity {
        match self.principal.as_str() {
            "unknown" => Identity::Unknown,
            "anonymous" => Identity::Absent,
            text => match Principal::parse(text) {
                Ok(principal) => Identity::Present(Caller {
                    principal,
                    roles: self.roles.iter().cloned().collect(),
                }),
                Err(_) => Identity::Unknown,
            },
        }
    }
}

/// One entry of a run's append-only event log.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EventRecord {
    pub run_id: RunId,
    /// 1-based position in the run's log.
    pub seq: u64,
    pub at_ms: u64,
    pub kind: String,
    pub data: serde_json::Value,
}

/// Milliseconds since the Unix epoch, from the wall clock.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_and_channel_text_round_trip() {
        for s in [
            RunStatus::Queued,
            RunStatus::Running,
            RunStatus::Waiting,
            RunStatus::Blocked,
            RunStatus::Succeeded,
            RunStatus::Failed,
        ] {
            assert_eq!(RunStatus::parse(s.as_str()), Some(s));
        }
        for c in [Channel::Api, Channel::Cli, Channel::Agent("cmo".into())] {
            assert_eq!(Channel::parse(&c.to_string()), Some(c));
        }
        assert_eq!(Channel::parse("agent:"), None);
        assert_eq!(Channel::parse("web"), None);
    }
}
