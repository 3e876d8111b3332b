//! T2 of the ladder: probes, and what their outcomes mean.
//!
//! A [`Probe`] pushes a synthetic request into a tool's real pipeline and cuts it off before
//! the handler, so guards and policies that only the pipeline knows still speak. This module
//! defines the seam and the mapping of an outcome to a decision; the implementation lives with
//! the pipeline (consort-actors), and when to probe is the ladder's choice, not this module's.

use serde::{Deserialize, Serialize};

use crate::visibility::decision::Decision;
use crate::visibility::facts::Principal;

/// What a T2 probe saw.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProbeOutcome {
    /// The pipeline refused the synthetic request before the cut: deny.
    Refused,
    /// The request reached the cut before the handler: allow.
    ReachedCut,
    /// Anything else (an error, a timeout, a pipeline that cannot be cut): unknown, and the tool
    /// is not probed again for this catalog generation.
    Other,
}

impl ProbeOutcome {
    /// The decision this outcome stands for: refused is deny, reaching the cut allow, anything else unknown.
    pub fn decision(self) -> Decision {
        match self {
            Self::Refused => Decision::Deny,
            Self::ReachedCut => Decision::Allow,
            Self::Other => Decision::Unknown,
        }
    }
}

/// T2: pushes a synthetic request for `tool`, as `principal`, into the tool's real pipeline and
/// cuts it off before the handler. Implementations must never run the handler.
pub trait Probe {
    /// Probes `tool` as `principal`, stopping at the cut.
    fn probe(&self, tool: &str, principal: &Principal) -> ProbeOutcome;
}
