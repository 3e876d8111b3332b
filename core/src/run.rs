//! The two words every surface uses about a run: its [`RunStatus`] and its [`Channel`].
//!
//! Plain data with their stored text forms; nothing here moves a run.

use serde::{Deserialize, Serialize};

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
    /// Settled with an answer.
    Succeeded,
    /// Settled with an error.
    Failed,
}

impl RunStatus {
    /// The stored text form.
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

    /// Reads the stored text form.
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
    /// The HTTP API.
    Api,
    /// The command line.
    Cli,
    /// A call from the named agent.
    Agent(String),
}

impl Channel {
    /// Reads the stored text form.
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
