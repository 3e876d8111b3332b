//! Run ids, and the derivation that makes delegation effectively-once.
//!
//! A root run (started by the API or the CLI) gets a random id. A child run's id is a
//! domain-separated hash of its parent run id and the tool-use id that placed it, so replaying
//! the same tool use after a crash names the same child run, and the callee's store (unique key
//! on the id) answers with the run it already has instead of creating a second one.

use std::fmt;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::CoreError;

/// Domain tag for child run id derivation; bump the version if the derivation ever changes.
const CHILD_RUN_DOMAIN: &[u8] = b"consort/child-run-id/v1";

/// The id of one run, unique across a fleet: `run_` followed by 32 lowercase hex digits.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct RunId(String);

impl RunId {
    /// A fresh random id for a root run.
    pub fn random() -> Self {
        let bytes: [u8; 16] = rand::random();
        Self(format!("run_{}", hex::encode(bytes)))
    }

    /// The id of the child run placed by `parent` through the tool use `tool_use_id`.
    ///
    /// Length-prefixing both parts keeps `("ab", "c")` and `("a", "bc")` apart.
    pub fn child_of(parent: &Self, tool_use_id: &str) -> Self {
        Self::derived(
            CHILD_RUN_DOMAIN,
            &[parent.0.as_bytes(), tool_use_id.as_bytes()],
        )
    }

    /// A deterministic id: sha256 over `domain` and the length-prefixed `parts`, so each
    /// derivation (its own domain tag) names its own runs and `("ab", "c")` and `("a", "bc")`
    /// stay apart.
    pub(crate) fn derived(domain: &[u8], parts: &[&[u8]]) -> Self {
        let mut hasher = Sha256::new();
        hasher.update(domain);
        for part in parts {
            hasher.update((part.len() as u64).to_be_bytes());
            hasher.update(part);
        }
        let digest = hasher.finalize();
        Self(format!("run_{}", hex::encode(&digest[..16])))
    }

    /// Parses an id given by a user, a peer or a file.
    pub fn parse(text: &str) -> Result<Self, CoreError> {
        let ok = text.len() == 36
            && text.starts_with("run_")
            && text[4..]
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        if ok {
            Ok(Self(text.to_owned()))
        } else {
            Err(CoreError::MalformedRunId(text.chars().take(80).collect()))
        }
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for RunId {
    type Error = CoreError;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::parse(&value)
    }
}

impl From<RunId> for String {
    fn from(value: RunId) -> Self {
        value.0
    }
}

impl fmt::Display for RunId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::str::FromStr for RunId {
    type Err = CoreError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn child_id_is_deterministic_and_distinct() {
        let parent = RunId::random();
        assert_eq!(
            RunId::child_of(&parent, "tu-1"),
            RunId::child_of(&parent, "tu-1")
        );
        assert_ne!(
            RunId::child_of(&parent, "tu-1"),
            RunId::child_of(&parent, "tu-2")
        );
        let other = RunId::random();
        assert_ne!(
            RunId::child_of(&parent, "tu-1"),
            RunId::child_of(&other, "tu-1")
        );
    }

    #[test]
    fn child_ids_keep_their_derivation() {
        // Stores hold child ids derived before `derived` existed: they must not move.
        let parent = RunId::parse("run_0123456789abcdef0123456789abcdef").unwrap();
        let mut hasher = Sha256::new();
        hasher.update(CHILD_RUN_DOMAIN);
        for part in [parent.as_str().as_bytes(), b"tu-1".as_slice()] {
            hasher.update((part.len() as u64).to_be_bytes());
            hasher.update(part);
        }
        let expected = format!("run_{}", hex::encode(&hasher.finalize()[..16]));
        assert_eq!(RunId::child_of(&parent, "tu-1").as_str(), expected);
    }

    #[test]
    fn parse_round_trips_and_refuses_garbage() {
        let id = RunId::random();
        assert_eq!(RunId::parse(id.as_str()).unwrap(), id);
        for bad in [
            "",
            "run_",
            "run_XYZ",
            "job_0123456789abcdef0123456789abcdef",
            "run_0123456789ABCDEF0123456789abcdef",
        ] {
            assert!(RunId::parse(bad).is_err(), "{bad}");
        }
    }
}
