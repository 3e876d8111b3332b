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
            Self::Queued => "queued",
            Self::Running => "running",
            Self::Waiting => "waiting",
            Self::Blocked => "blocked",
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
        }
    }

    /// Reads the stored text form.
    pub fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "queued" => Self::Queued,
            "running" => Self::Running,
            "waiting" => Self::Waiting,
            "blocked" => Self::Blocked,
            "succeeded" => Self::Succeeded,
            "failed" => Self::Failed,
            _ => return None,
        })
    }

    /// True once the run can no longer change.
    pub fn is_settled(self) -> bool {
        matches!(self, Self::Succeeded | Self::Failed)
    }
}

impl std::fmt::Display for RunStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Who started a run: `api`, `cli`, `agent:<caller>` for a delegated call, or
/// `delivery:<sender>` for a run a peer's delivery started.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Channel {
    /// The HTTP API.
    Api,
    /// The command line.
    Cli,
    /// A call from the named agent.
    Agent(String),
    /// A message the named agent delivered, with no run of its own to land in.
    Delivery(String),
}

impl Channel {
    /// Reads the stored text form.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "api" => Some(Self::Api),
            "cli" => Some(Self::Cli),
            other => {
                // A prefix with an empty name names nobody: refused, like an unknown channel.
                let named = |prefix: &str| other.strip_prefix(prefix).filter(|n| !n.is_empty());
                if let Some(name) = named("agent:") {
                    Some(Self::Agent(name.to_owned()))
                } else {
                    named("delivery:").map(|name| Self::Delivery(name.to_owned()))
                }
            }
        }
    }
}

impl std::fmt::Display for Channel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Api => f.write_str("api"),
            Self::Cli => f.write_str("cli"),
            Self::Agent(name) => write!(f, "agent:{name}"),
            Self::Delivery(sender) => write!(f, "delivery:{sender}"),
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
        Self::parse(&text)
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
        for c in [
            Channel::Api,
            Channel::Cli,
            Channel::Agent("cmo".into()),
            Channel::Delivery("cmo".into()),
        ] {
            assert_eq!(Channel::parse(&c.to_string()), Some(c));
        }
        assert_eq!(Channel::parse("agent:"), None);
        assert_eq!(Channel::parse("delivery:"), None);
        assert_eq!(Channel::parse("web"), None);
    }

    #[test]
    fn a_delivery_channel_reads_and_writes_its_sender() {
        let channel = Channel::Delivery("cfo".into());
        assert_eq!(channel.to_string(), "delivery:cfo");
        assert_eq!(Channel::parse("delivery:cfo"), Some(channel.clone()));
        let json = serde_json::to_string(&channel).unwrap();
        assert_eq!(json, "\"delivery:cfo\"");
        assert_eq!(serde_json::from_str::<Channel>(&json).unwrap(), channel);
        assert!(serde_json::from_str::<Channel>("\"delivery:\"").is_err());
    }
}
