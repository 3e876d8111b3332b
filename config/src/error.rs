//! The one error type of consort-config.
//!
//! Owns [`ConfigError`]: what went wrong, in which file, at which line and column, under which
//! key. Every variant is meant to be matched by callers (the CLI prints it, the host refuses to
//! start on it, a reload keeps the old config on it). This module only describes errors; it must
//! not read files or decide what is valid.
//!
//! Display reads like a compiler diagnostic so an operator can jump to the spot:
//! `config/cfo/agent.yaml:4:14: agents.can_call[0]: no agent named `cfx` (known agents: cfo, cmo)`.

use std::fmt;
use std::path::PathBuf;

/// Everything that can go wrong while reading `agent.yaml` / `fleet.yaml` files.
///
/// `line` and `column` are 1-based and count characters. `key` is a dotted path from the
/// document root with `[i]` list indexes (`tools[1].database`); it is empty when the error
/// concerns the document as a whole.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A file or folder could not be read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or folder.
        path: PathBuf,
        #[source]
        /// What the OS said.
        source: std::io::Error,
    },
    /// The file is not well-formed YAML (or not UTF-8).
    #[error("{}:{line}:{column}: {message}", file.display())]
    Syntax {
        /// The file, as given.
        file: PathBuf,
        /// 1-based line.
        line: u64,
        /// 1-based column.
        column: u64,
        /// What is wrong.
        message: String,
    },
    /// Well-formed YAML that does not have the expected shape: unknown key, wrong type,
    /// missing required key, unknown variant, duplicate key.
    #[error("{}", located(file, *line, *column, key, message))]
    Schema {
        /// The file, as given.
        file: PathBuf,
        /// 1-based line.
        line: u64,
        /// 1-based column.
        column: u64,
        /// The key path, e.g. `tools[0].name`.
        key: String,
        /// What is wrong.
        message: String,
    },
    /// The right shape, but a value that does not make sense: a bad name, a duplicate, a
    /// reference to an agent that does not exist, a missing database file, a reserved tool
    /// name, a number out of range.
    #[error("{}", located(file, *line, *column, key, message))]
    Invalid {
        /// The file, as given.
        file: PathBuf,
        /// 1-based line.
        line: u64,
        /// 1-based column.
        column: u64,
        /// The key path, e.g. `tools[0].name`.
        key: String,
        /// What is wrong.
        message: String,
    },
    /// A folder given as an agent folder (or a folder of agent folders) holds no `agent.yaml`
    /// and no subfolder with one.
    #[error(
        "{}: no agents here (expected an agent.yaml, or subfolders that each contain one)",
        path.display()
    )]
    NoAgents {
        /// The folder given.
        path: PathBuf,
    },
    /// An agent built in code ([`crate::AgentConfig::builder`], [`crate::AgentSet::from_agents`])
    /// with a value its agent.yaml would be refused for. There is no file to point into: `key`
    /// is the key path the value has in an agent.yaml (`limits.max_depth`, `agents.can_call[0]`).
    #[error("agent `{agent}`: {key}: {message}")]
    InvalidAgent {
        /// The agent's name, as given.
        agent: String,
        /// The key path, e.g. `limits.max_depth`.
        key: String,
        /// What is wrong.
        message: String,
    },
    /// [`crate::AgentSet::reload_one`] was asked for an agent the set does not hold.
    #[error("no agent named `{name}` (known agents: {})", known_list(known))]
    UnknownAgent {
        /// The name asked for.
        name: String,
        /// The agents the set holds.
        known: Vec<String>,
    },
}

impl ConfigError {
    /// The file the error points into, when it points into one.
    pub fn file(&self) -> Option<&std::path::Path> {
        match self {
            Self::Syntax { file, .. } | Self::Schema { file, .. } | Self::Invalid { file, .. } => {
                Some(file)
            }
            Self::Io { path, .. } | Self::NoAgents { path } => Some(path),
            Self::UnknownAgent { .. } | Self::InvalidAgent { .. } => None,
        }
    }

    /// `(line, column)` when the error points at a spot in a file.
    pub fn position(&self) -> Option<(u64, u64)> {
        match self {
            Self::Syntax { line, column, .. }
            | Self::Schema { line, column, .. }
            | Self::Invalid { line, column, .. } => Some((*line, *column)),
            _ => None,
        }
    }

    /// The dotted key path, for schema and semantic errors (and an agent built in code).
    pub fn key(&self) -> Option<&str> {
        match self {
            Self::Schema { key, .. }
            | Self::Invalid { key, .. }
            | Self::InvalidAgent { key, .. } => Some(key),
            _ => None,
        }
    }
}

fn located(file: &std::path::Path, line: u64, column: u64, key: &str, message: &str) -> String {
    struct L<'a>(&'a std::path::Path, u64, u64, &'a str, &'a str);
    impl fmt::Display for L<'_> {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "{}:{}:{}: ", self.0.display(), self.1, self.2)?;
            if !self.3.is_empty() {
                write!(f, "{}: ", self.3)?;
            }
            f.write_str(self.4)
        }
    }
    L(file, line, column, key, message).to_string()
}

/// `a, b, c` or `none` — used in messages that list what would have been accepted.
pub(crate) fn known_list(names: &[String]) -> String {
    if names.is_empty() {
        "none".to_owned()
    } else {
        names.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_reads_like_a_diagnostic() {
        let e = ConfigError::Invalid {
            file: PathBuf::from("config/cfo/agent.yaml"),
            line: 4,
            column: 14,
            key: "agents.can_call[0]".into(),
            message: "no agent named `cfx` (known agents: cfo, cmo)".into(),
        };
        assert_eq!(
            e.to_string(),
            "config/cfo/agent.yaml:4:14: agents.can_call[0]: no agent named `cfx` (known agents: cfo, cmo)"
        );
        assert_eq!(e.position(), Some((4, 14)));
        assert_eq!(e.key(), Some("agents.can_call[0]"));
    }

    #[test]
    fn empty_key_is_left_out() {
        let e = ConfigError::Schema {
            file: PathBuf::from("a.yaml"),
            line: 1,
            column: 1,
            key: String::new(),
            message: "expected a mapping".into(),
        };
        assert_eq!(e.to_string(), "a.yaml:1:1: expected a mapping");
    }

    #[test]
    fn unknown_agent_lists_known() {
        let e = ConfigError::UnknownAgent {
            name: "x".into(),
            known: vec![],
        };
        assert_eq!(e.to_string(), "no agent named `x` (known agents: none)");
    }
}
